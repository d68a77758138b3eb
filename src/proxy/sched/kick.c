/* Runs on the scheduler thread: one scheduling pass over every model per loop
 * turn, however many arrivals, reloads or drains asked for it. */
#include "sched/sched.h"

static void on_kick(uv_idle_t *h) {
  lp_proxy_t *p = container_of(h, lp_proxy_t, kick);
  uv_idle_stop(&p->kick);
  p->kicking = 0;
  for (size_t i = 0; i < p->nmodels; i++) lp__model_schedule(&p->models[i]);
}

void lp_proxy_kick(lp_proxy_t *p) {
  if (p->kicking) return;
  p->kicking = 1;
  uv_idle_start(&p->kick, on_kick);
}
