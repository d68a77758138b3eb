/* Backends: their health from active probes (GET /healthz), told to the
 * dispatch core (which also judges them by how their batches end and picks
 * where each batch goes). A backend's shapes come from
 * GET /v1/shapes when it (re)appears, and again after a backoff while a shape
 * it was found to lack may have come back. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "lanepack/log.h"
#include "sched/sched.h"


/* A probe's verdict: up at once, down after unhealthy_after failures in a row.
 * The core hears every verdict (it ends its own probing of a backend it marked
 * down). */
static void probe_result(lp_backend_t *b, int ok) {
  if (b->retired) return;
  if (ok) b->probe_fails = 0;
  else if (++b->probe_fails < b->model->proxy->cfg.unhealthy_after) return;
  lp__backend_note_health(b, ok);
  lp__model_backend_health(b->model, b, ok);
}

/* Shapes a backend added (not configured) that no backend in service has any
 * more and no batch in flight uses leave the set: its slots are few, and a
 * backend whose shapes churn would fill them with stale ones. The slot is
 * free for the next new shape; no index moves. */
static void prune_shapes(lp_model_t *m) {
  size_t configured = m->cfg->ragged ? 1 : m->cfg->shapes.count;
  for (size_t k = m->shapes.count; k-- > configured;) {
    if (m->shapes.shapes[k].lanes == 0) continue; /* a free slot */
    int held = m->shape_inflight[k] > 0;
    for (size_t i = 0; i < m->nbackends && !held; i++)
      held = !m->backends[i].retired && m->backends[i].shape_state[k] != LP_SHAPE_UNAVAILABLE;
    if (held) continue;
    lp_log(LP_LOG_INFO, "shape pruned", "\"model\": \"%s\", \"shape\": [%u, %u]", m->cfg->name,
           m->shapes.shapes[k].lanes, m->shapes.shapes[k].bucket);
    lp__model_remove_shape(m, k);
  }
}

/* Merges a backend's {"shapes": [[lanes, bucket], ...]} into its own states:
 * configured shapes it does not list are compiling there (admitted, not sent to
 * it); shapes it lists that are not configured join the model's set, on this
 * backend only. Shapes over the batch size bound are ignored. */
static int merge_shapes(lp_backend_t *b, const lp_xfer_t *x) {
  lp_model_t *m = b->model;
  if (m->cfg->ragged || x->status != 200) return 0;
  json_error_t je;
  json_t *root = json_loadb(x->body.data ? x->body.data : "", x->body.len, 0, &je);
  json_t *list = json_object_get(root, "shapes");
  if (!json_is_array(list)) {
    json_decref(root);
    return 0;
  }
  lp_bucket_set_t seen;
  lp_bucket_set_init(&seen);
  size_t i, ignored = 0;
  json_t *s;
  json_array_foreach(list, i, s) {
    json_int_t l = json_integer_value(json_array_get(s, 0));
    json_int_t k = json_integer_value(json_array_get(s, 1));
    if (l > 0 && k > 0 && l <= LP_MAX_LANES && k <= LP_MAX_BUCKET &&
        (uint64_t)l * (uint64_t)k <= m->cfg->max_batch_tokens)
      lp_bucket_set_add(&seen, (uint32_t)l, (uint32_t)k);
    else
      ignored++;
  }
  json_t *devices = json_object_get(root, "devices");
  if (json_is_integer(devices) && json_integer_value(devices) >= 1 && json_integer_value(devices) <= LP_CLOCK_MAX_DEVICES) {
    lp__model_backend_devices(m, b, (uint32_t)json_integer_value(devices));
    b->devices_reported = 1;
  }
  json_decref(root);
  size_t configured = m->cfg->ragged ? 1 : m->cfg->shapes.count;
  for (size_t k = 0; k < m->shapes.count; k++) {
    int listed = lp_bucket_set_find(&seen, m->shapes.shapes[k].lanes, m->shapes.shapes[k].bucket) >= 0;
    b->shape_state[k] = listed ? LP_SHAPE_COMPILED
                      : k < configured ? LP_SHAPE_COMPILING : LP_SHAPE_UNAVAILABLE;
  }
  prune_shapes(m);
  for (size_t k = 0; k < seen.count; k++) {
    if (lp_bucket_set_find(&m->shapes, seen.shapes[k].lanes, seen.shapes[k].bucket) >= 0) continue;
    int at = lp_bucket_set_add(&m->shapes, seen.shapes[k].lanes, seen.shapes[k].bucket);
    if (at < 0) { /* the set is full */
      ignored++;
      continue;
    }
    for (size_t o = 0; o < m->nbackends; o++) m->backends[o].shape_state[at] = LP_SHAPE_UNAVAILABLE;
    b->shape_state[at] = LP_SHAPE_COMPILED;
    lp__model_shape_added(m, (size_t)at);
  }
  b->reported = 1;
  b->missing = 0; /* what it reports is what it has now */
  b->recheck_at = 0;
  lp_log(ignored ? LP_LOG_WARN : LP_LOG_INFO, "shapes merged",
         "\"model\": \"%s\", \"backend\": \"%s\", \"reported\": %zu, \"ignored\": %zu, \"known\": %zu",
         m->cfg->name, b->url, seen.count, ignored, m->shapes.count);
  lp__model_shapes_changed(m);
  return 1;
}

/* A backend that does not report its shapes: those found missing there are
 * tried again (a batch answered "shape mismatch" bars them anew, with a longer
 * backoff). */
static void retry_missing(lp_backend_t *b) {
  lp_model_t *m = b->model;
  size_t configured = m->cfg->ragged ? 1 : m->cfg->shapes.count;
  if (!b->missing) return;
  for (size_t k = 0; k < configured; k++)
    if (b->missing & (1u << k)) {
      b->shape_state[k] = LP_SHAPE_COMPILED;
      lp__backend_shape_found(b, (int)k);
    }
  lp__model_shapes_changed(m);
}

static void on_shapes(lp_xfer_t *x, void *ud) {
  lp_backend_t *b = ud;
  if (x->result == LP_XFER_CANCELLED) return;
  if (!(x->result == LP_XFER_OK && merge_shapes(b, x))) retry_missing(b);
}

static void fetch_shapes(lp_backend_t *b) {
  if (b->model->cfg->protocol == LP_PROTO_V2) {
    lp__v2_probe_shapes(b);
    return;
  }
  lp_upstream_request(b->model->proxy->up, b->shapes_url, NULL, 0, 5000, LP_PROBE_ANSWER_MAX, on_shapes, b);
}

static void on_probe(lp_xfer_t *x, void *ud) {
  lp_backend_t *b = ud;
  b->probe = NULL;
  if (x->result == LP_XFER_CANCELLED) return;
  int ok = x->result == LP_XFER_OK && x->status == 200;
  int was = b->healthy && b->probed_ok;
  if (x->result == LP_XFER_TOO_LARGE) /* a failed probe, and a backend worth a look */
    lp_log(LP_LOG_WARN, "health probe answer too large",
           "\"model\": \"%s\", \"backend\": \"%s\", \"limit\": %u", b->model->cfg->name, b->url,
           LP_HEALTH_ANSWER_MAX);
  if (ok) {
    b->probed_ok = 1;
    if (!was) {
      /* it may have come back with other shapes: the configured ones until it
       * says which */
      lp_model_t *m = b->model;
      size_t configured = m->cfg->ragged ? 1 : m->cfg->shapes.count;
      for (size_t k = 0; k < m->shapes.count; k++)
        b->shape_state[k] = k < configured ? LP_SHAPE_COMPILED : LP_SHAPE_UNAVAILABLE;
      b->reported = 0;
      b->missing = 0;
      b->recheck_at = 0;
      lp__model_shapes_changed(m);
      fetch_shapes(b);
    }
  }
  probe_result(b, ok);
}

/* Asks a backend again for the shapes it was found to lack, and sets the next look. */
static void recheck(lp_backend_t *b, uint64_t now) {
  b->recheck_ms = b->recheck_ms < LP_RECHECK_MAX_MS / 2 ? b->recheck_ms * 2 : LP_RECHECK_MAX_MS;
  b->recheck_at = now + (uint64_t)b->recheck_ms * 1000000;
  lp_log(LP_LOG_INFO, "shapes rechecked", "\"model\": \"%s\", \"backend\": \"%s\", \"next_ms\": %u",
         b->model->cfg->name, b->url, b->recheck_ms);
  fetch_shapes(b);
}

static void on_health_timer(uv_timer_t *t) {
  lp_proxy_t *p = t->data;
  uint64_t timeout = p->cfg.health_interval_ms < 2000 ? p->cfg.health_interval_ms : 2000;
  uint64_t now = lp__now();
  for (size_t i = 0; i < p->nmodels; i++)
    for (size_t k = 0; k < p->models[i].nbackends; k++) {
      lp_backend_t *b = &p->models[i].backends[k];
      if (b->retired) continue;
      if (!b->probe)
        b->probe = lp_upstream_request(p->up, b->health_url, NULL, 0, timeout, LP_HEALTH_ANSWER_MAX,
                                       on_probe, b);
      if (b->recheck_at && now >= b->recheck_at && b->healthy) recheck(b, now);
    }
}

void lp__backends_start(lp_proxy_t *p) {
  p->health.data = p;
  on_health_timer(&p->health);
  uv_timer_start(&p->health, on_health_timer, p->cfg.health_interval_ms,
                 p->cfg.health_interval_ms);
}
