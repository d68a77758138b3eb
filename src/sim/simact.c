/* The queue of actions a simulated policy hands to the world after each event. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/sim.h"

void sim_actq_free(sim_actq_t *q) {
  free(q->acts);
  free(q->arena);
  memset(q, 0, sizeof(*q));
}

static int push(sim_actq_t *q, const sim_action_t *a) {
  if (q->n == q->cap) {
    size_t c = q->cap ? q->cap * 2 : 64;
    sim_action_t *v = realloc(q->acts, c * sizeof(*v));
    if (!v) return -ENOMEM;
    q->acts = v;
    q->cap = c;
  }
  q->acts[q->n++] = *a;
  return 0;
}

int sim_actq_send(sim_actq_t *q, uint32_t backend, int shape, uint64_t batch, const uint32_t *items,
                  uint32_t n) {
  if (q->narena + n > q->caparena) {
    size_t c = q->caparena ? q->caparena : 1024;
    while (c < q->narena + n) c *= 2;
    uint32_t *v = realloc(q->arena, c * sizeof(*v));
    if (!v) return -ENOMEM;
    q->arena = v;
    q->caparena = c;
  }
  memcpy(q->arena + q->narena, items, n * sizeof(*items));
  /* an offset until taken: the arena may move while the call goes on */
  sim_action_t a = {.kind = SIM_ACT_SEND, .backend = backend, .shape = shape, .batch = batch,
                    .items = (const uint32_t *)(uintptr_t)q->narena, .n = n};
  q->narena += n;
  return push(q, &a);
}

int sim_actq_answer(sim_actq_t *q, uint32_t req, int status) {
  sim_action_t a = {.kind = SIM_ACT_ANSWER, .req = req, .status = status};
  return push(q, &a);
}

int sim_actq_cancel(sim_actq_t *q, uint64_t batch) {
  sim_action_t a = {.kind = SIM_ACT_CANCEL, .batch = batch};
  return push(q, &a);
}

int sim_actq_wake(sim_actq_t *q, uint64_t at) {
  sim_action_t a = {.kind = SIM_ACT_WAKE, .at = at};
  return push(q, &a);
}

void sim_actq_next(sim_actq_t *q, sim_action_t *a) {
  if (q->taken == q->n) {
    memset(a, 0, sizeof(*a));
    a->kind = SIM_ACT_NONE;
    q->n = q->taken = q->narena = 0;
    return;
  }
  *a = q->acts[q->taken++];
  if (a->kind == SIM_ACT_SEND) a->items = q->arena + (uintptr_t)a->items;
}
