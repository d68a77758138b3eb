/* Made on the scheduler, released on the fronts: the snapshot of the
 * scheduler's state that pages are rendered from, shared by a wake-up's pages. */
#include <stdlib.h>

#include "handoff/handoff.h"
#include "handoff/snapshot.h"

/* One allocation for the snapshot, its models and their backends: every
 * member is 8-byte aligned and each struct's size a multiple of its alignment,
 * so the arrays follow one another. */
lp_snap_t *lp__snap_new(size_t nmodels, size_t nbackends, lp_snap_backend_t **backends) {
  _Static_assert(sizeof(lp_snap_t) % _Alignof(lp_snap_model_t) == 0, "models follow the head");
  _Static_assert(sizeof(lp_snap_model_t) % _Alignof(lp_snap_backend_t) == 0, "backends follow the models");
  *backends = NULL;
  lp_snap_t *s = calloc(1, sizeof(lp_snap_t) + nmodels * sizeof(lp_snap_model_t) +
                               nbackends * sizeof(lp_snap_backend_t));
  if (!s) return NULL;
  s->refs = 1;
  s->models = (lp_snap_model_t *)(s + 1);
  s->nmodels = nmodels;
  *backends = (lp_snap_backend_t *)(s->models + nmodels);
  return s;
}

void lp__snap_ref(lp_snap_t *s) { __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED); }

void lp__snap_unref(lp_snap_t *s) {
  /* acq_rel: the last holder sees every other holder's reads done before it frees */
  if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  lp_recent_free(s->recent);
  free(s);
}

unsigned lp__snap_parts(int route) {
  if (route == LP_ROUTE_METRICS) return LP_SNAP_METRICS;
  if (route == LP_ROUTE_BATCHES) return LP_SNAP_RECENT;
  return 0; /* /v1/models, readiness, v2 metadata: the models' basics */
}
