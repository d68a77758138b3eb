/* Runs on the scheduler thread: the padding answer of /v1/buckets/advice (the
 * simulated one, with ?p99_ms=, is advice.c's; the other pages of its state
 * are rendered by the fronts, front/pages.c). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "lanepack/shapeadv.h"
#include "lanepack/sim.h"
#include "sched/sched.h"

int lp__render_advice(lp_proxy_t *p, lp_model_t *m, uint32_t k, lp_buf_t *b, char *err,
                      size_t errlen) {
  (void)p;
  lp_packer_t *pk = lp_packer_new();
  if (!pk) return snprintf(err, errlen, "out of memory"), -1;
  uint64_t budget = 0;
  for (size_t i = 0; i < m->shapes.count; i++) {
    uint64_t c = (uint64_t)m->shapes.shapes[i].lanes * m->shapes.shapes[i].bucket;
    if (c > budget) budget = c;
  }
  lp_advice_t a[2];
  int rc = 0;
  for (int o = 0; o < 2 && rc == 0; o++) {
    lp_advise_params_t prm = {.objective = (lp_advise_objective_t)o, .k = k,
                              .max_bucket = m->lengths.max, .token_budget = budget,
                              .granule = 128, .max_segments = m->cfg->max_segments_per_lane};
    rc = lp_advise(pk, &m->lengths, &prm, &m->shapes, &a[o]);
  }
  lp_packer_free(pk);
  if (rc) {
    snprintf(err, errlen, "%s", rc == -ENODATA ? "no lengths observed yet" : "advisor failed");
    return rc;
  }
  lp_buf_puts(b, "{\"model\": ");
  lp_buf_json_str(b, m->cfg->name, strlen(m->cfg->name));
  lp_buf_printf(b, ", \"observed\": %llu, \"current\": {\"shapes\": [",
                (unsigned long long)m->lengths.total);
  for (size_t s = 0, n = 0; s < m->shapes.count; s++)
    if (m->shapes.shapes[s].lanes)
      lp_buf_printf(b, "%s[%u, %u]", n++ ? ", " : "", m->shapes.shapes[s].lanes, m->shapes.shapes[s].bucket);
  lp_buf_printf(b, "], \"padded_fill\": %.4f, \"packed_fill\": %.4f}, \"proposals\": [",
                a[0].current_padded_fill, a[0].current_packed_fill);
  static const char *names[2] = {"padded", "packed"};
  for (int o = 0; o < 2; o++) {
    lp_buf_printf(b, "%s{\"objective\": \"%s\", \"shapes\": [", o ? ", " : "", names[o]);
    for (size_t i = 0; i < a[o].k; i++)
      lp_buf_printf(b, "%s[%u, %u]", i ? ", " : "", a[o].lanes[i], a[o].bucket[i]);
    lp_buf_printf(b, "], \"padded_fill\": %.4f, \"packed_fill\": %.4f}", a[o].padded_fill,
                  a[o].packed_fill);
  }
  lp_buf_printf(b, "], \"rejected\": %llu}\n", (unsigned long long)a[0].rejected);
  return 0;
}
