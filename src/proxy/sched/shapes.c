/* Runs on the scheduler thread: each backend's shapes and health as the shell
 * records them (what probes and batches found), mirrored into the dispatch
 * core, which then gets a pass (through the model's registered pump). */
#include "lanepack/log.h"
#include "sched/sched.h"

void lp__backend_shape_missing(lp_backend_t *b, int k) {
  uint64_t now = lp__now();
  b->missing |= 1u << k;
  if (!b->recheck_ms || now - b->missing_ns > 2ull * LP_RECHECK_MAX_MS * 1000000)
    b->recheck_ms = LP_RECHECK_FIRST_MS;
  b->missing_ns = now;
  if (!b->recheck_at) b->recheck_at = now + (uint64_t)b->recheck_ms * 1000000;
}

void lp__backend_shape_found(lp_backend_t *b, int k) {
  b->missing &= ~(1u << k);
  if (!b->missing) b->recheck_at = 0;
}

/* The shell's record of a health change, whoever decided it. */
void lp__backend_note_health(lp_backend_t *b, int healthy) {
  if (b->healthy == healthy) return;
  b->healthy = healthy;
  if (healthy && b->missing) b->recheck_at = lp__now(); /* back: ask at once */
  lp_log(healthy ? LP_LOG_INFO : LP_LOG_WARN, healthy ? "backend up" : "backend down",
         "\"model\": \"%s\", \"backend\": \"%s\"", b->model->cfg->name, b->url);
}

void lp__backend_health_changed(lp_backend_t *b, int up) { lp__backend_note_health(b, up && !b->retired); }

void lp__model_remove_shape(lp_model_t *m, size_t k) {
  if (lp_bucket_set_remove(&m->shapes, k)) return;
  lp_disp_set_shape(m->disp, k, 0, 0);
  m->batches_by_shape[k] = 0;
  lp_hist_init(&m->fill_by_shape[k], m->fill.bounds, m->fill.n); /* the model's fill bounds */
  for (size_t i = 0; i < m->nbackends; i++) {
    lp_backend_t *b = &m->backends[i];
    b->shape_state[k] = LP_SHAPE_UNAVAILABLE;
    lp__backend_shape_found(b, (int)k);
  }
}

void lp__model_shape_added(lp_model_t *m, size_t k) {
  lp_disp_set_shape(m->disp, k, m->shapes.shapes[k].lanes, m->shapes.shapes[k].bucket);
}

void lp__model_shapes_changed(lp_model_t *m) {
  for (size_t k = 0; k < m->shapes.count; k++) {
    lp_shape_state_t best = LP_SHAPE_UNAVAILABLE;
    for (size_t i = 0; i < m->nbackends; i++) {
      if (m->backends[i].retired) continue; /* it gets no batch again: its shapes admit nothing */
      lp_shape_state_t s = m->backends[i].shape_state[k];
      if (s == LP_SHAPE_COMPILED || (s == LP_SHAPE_COMPILING && best == LP_SHAPE_UNAVAILABLE))
        best = s;
    }
    m->shapes.shapes[k].state = best;
  }
  /* the core fails at once what no shape anywhere holds now */
  uint64_t now = lp__now();
  lp_shape_state_t none[LP_BUCKET_MAX_SHAPES];
  for (size_t k = 0; k < LP_BUCKET_MAX_SHAPES; k++) none[k] = LP_SHAPE_UNAVAILABLE;
  /* the backends in service first: a shape moving from one backend to another
   * (a reload swapping them) is never held by none in between */
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < m->nbackends; i++) {
      const lp_backend_t *b = &m->backends[i];
      int live = !b->retired;
      if (live == (pass == 0))
        lp_disp_backend_shapes(m->disp, (uint32_t)i, live ? b->shape_state : none, m->shapes.count, now);
    }
  m->pump(m);
}

void lp__model_backend_health(lp_model_t *m, lp_backend_t *b, int up) {
  lp_disp_backend_health(m->disp, (uint32_t)(b - m->backends), up, lp__now());
  m->pump(m);
}

void lp__model_backend_devices(lp_model_t *m, lp_backend_t *b, uint32_t devices) {
  lp_disp_backend_devices(m->disp, (uint32_t)(b - m->backends), devices, lp__now());
}
