/* Backends: choosing one for a batch, and their health from active probes
 * (GET /healthz) and from how their batches end. A backend's shapes come from
 * GET /v1/shapes when it (re)appears. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "lanepack/log.h"
#include "proxy.h"

static void set_health(lp_backend_t *b, int healthy) {
  if (b->healthy == healthy) return;
  b->healthy = healthy;
  lp_log(healthy ? LP_LOG_INFO : LP_LOG_WARN, healthy ? "backend up" : "backend down",
         "\"model\": \"%s\", \"backend\": \"%s\"", b->model->cfg->name, b->url);
  lp_proxy_kick(b->model->proxy);
}

void lp__backend_result(lp_backend_t *b, int ok) {
  if (ok) {
    b->failures_in_row = 0;
    set_health(b, 1);
  } else if (++b->failures_in_row >= b->model->proxy->cfg.unhealthy_after) {
    set_health(b, 0);
  }
}

lp_backend_t *lp__backend_pick(lp_model_t *m) {
  lp_backend_t *best = NULL;
  for (size_t k = 0; k < m->nbackends; k++) {
    size_t i = (m->rr + k) % m->nbackends;
    lp_backend_t *b = &m->backends[i];
    if (!b->healthy || b->inflight >= m->cfg->max_inflight) continue;
    if (m->cfg->balance == LP_BALANCE_ROUND_ROBIN && b->failures_in_row == 0) {
      best = b;
      break;
    }
    /* a backend that just failed comes last: a retry should go elsewhere */
    if (!best || b->failures_in_row < best->failures_in_row ||
        (b->failures_in_row == best->failures_in_row && b->inflight < best->inflight))
      best = b;
  }
  return best; /* the round-robin cursor moves when a batch is really sent */
}

/* Merges a backend's {"shapes": [[lanes, bucket], ...]}: configured shapes it
 * does not list are compiling (admitted, not chosen); shapes it lists that are
 * not configured are added. */
static void merge_shapes(lp_model_t *m, const lp_xfer_t *x) {
  if (m->cfg->ragged || x->status != 200) return;
  json_error_t je;
  json_t *root = json_loadb(x->body.data ? x->body.data : "", x->body.len, 0, &je);
  json_t *list = json_object_get(root, "shapes");
  if (!json_is_array(list)) {
    json_decref(root);
    return;
  }
  lp_bucket_set_t seen;
  lp_bucket_set_init(&seen);
  size_t i;
  json_t *s;
  json_array_foreach(list, i, s) {
    json_int_t l = json_integer_value(json_array_get(s, 0));
    json_int_t b = json_integer_value(json_array_get(s, 1));
    if (l > 0 && b > 0 && l <= 65536 && b <= (1 << 24)) lp_bucket_set_add(&seen, (uint32_t)l, (uint32_t)b);
  }
  json_decref(root);
  for (size_t k = 0; k < m->shapes.count; k++) {
    lp_shape_t *sh = &m->shapes.shapes[k];
    if (sh->state == LP_SHAPE_UNAVAILABLE) continue;
    sh->state = lp_bucket_set_find(&seen, sh->lanes, sh->bucket) >= 0 ? LP_SHAPE_COMPILED
                                                                       : LP_SHAPE_COMPILING;
  }
  for (size_t k = 0; k < seen.count; k++)
    if (lp_bucket_set_find(&m->shapes, seen.shapes[k].lanes, seen.shapes[k].bucket) < 0)
      lp_bucket_set_add(&m->shapes, seen.shapes[k].lanes, seen.shapes[k].bucket);
  lp_log(LP_LOG_INFO, "shapes merged", "\"model\": \"%s\", \"reported\": %zu, \"known\": %zu",
         m->cfg->name, seen.count, m->shapes.count);
  lp_proxy_kick(m->proxy);
}

static void on_shapes(lp_xfer_t *x, void *ud) {
  lp_backend_t *b = ud;
  if (x->result == LP_XFER_OK) merge_shapes(b->model, x);
}

static void fetch_shapes(lp_backend_t *b) {
  lp_upstream_request(b->model->proxy->up, b->shapes_url, NULL, 0, 5000, on_shapes, b);
}

static void on_probe(lp_xfer_t *x, void *ud) {
  lp_backend_t *b = ud;
  b->probe = NULL;
  if (x->result == LP_XFER_CANCELLED) return;
  int ok = x->result == LP_XFER_OK && x->status == 200;
  int was = b->healthy && b->probed_ok;
  if (ok) {
    b->probed_ok = 1;
    if (!was) {
      b->bad_shapes = 0; /* it may have come back with other shapes */
      fetch_shapes(b);
    }
  }
  lp__backend_result(b, ok);
}

static void on_health_timer(uv_timer_t *t) {
  lp_proxy_t *p = t->data;
  uint64_t timeout = p->cfg.health_interval_ms < 2000 ? p->cfg.health_interval_ms : 2000;
  for (size_t i = 0; i < p->nmodels; i++)
    for (size_t k = 0; k < p->models[i].nbackends; k++) {
      lp_backend_t *b = &p->models[i].backends[k];
      if (!b->probe)
        b->probe = lp_upstream_request(p->up, b->health_url, NULL, 0, timeout, on_probe, b);
    }
}

void lp__backends_start(lp_proxy_t *p) {
  p->health.data = p;
  on_health_timer(&p->health);
  uv_timer_start(&p->health, on_health_timer, p->cfg.health_interval_ms,
                 p->cfg.health_interval_ms);
}
