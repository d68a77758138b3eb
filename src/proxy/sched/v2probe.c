/* Runs on the scheduler thread: an Open Inference Protocol backend's shapes,
 * one model per shape, each ready and its metadata naming what lanepack sends
 * and reads. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/log.h"
#include "lanepack/v2.h"
#include "sched/sched.h"

typedef struct {
  lp_backend_t *b;
  int shape;
} probe_t;

static void set_state(lp_backend_t *b, int k, lp_shape_state_t s, const char *why) {
  if (s == LP_SHAPE_UNAVAILABLE) lp__backend_shape_missing(b, k); /* it may be reloading: asked again */
  else lp__backend_shape_found(b, k);
  if (b->shape_state[k] == s) return;
  b->shape_state[k] = s;
  lp_log(s == LP_SHAPE_COMPILED ? LP_LOG_INFO : LP_LOG_WARN, "v2 model readiness",
         "\"backend\": \"%s\", \"shape\": [%u, %u], \"ready\": %s, \"why\": \"%s\"", b->url,
         b->model->shapes.shapes[k].lanes, b->model->shapes.shapes[k].bucket,
         s == LP_SHAPE_COMPILED ? "true" : "false", why);
  lp__model_shapes_changed(b->model);
}

static int lists(json_t *arr, const char *name) {
  size_t i;
  json_t *o;
  json_array_foreach(arr, i, o) {
    const char *n = json_string_value(json_object_get(o, "name"));
    if (n && strcmp(n, name) == 0) return 1;
  }
  return 0;
}

/* The model's metadata must name every input we send and the output we read. */
static void on_metadata(lp_xfer_t *x, void *ud) {
  probe_t *pr = ud;
  lp_backend_t *b = pr->b;
  int k = pr->shape;
  free(pr);
  if (x->result == LP_XFER_CANCELLED) return;
  const lp_v2_config_t *c = &b->model->cfg->v2;
  if (x->result != LP_XFER_OK || x->status != 200) {
    set_state(b, k, LP_SHAPE_UNAVAILABLE, "no model metadata");
    return;
  }
  json_error_t je;
  json_t *root = json_loadb(x->body.data ? x->body.data : "", x->body.len, 0, &je);
  json_t *inputs = json_object_get(root, "inputs"), *outputs = json_object_get(root, "outputs");
  const char *missing = NULL;
  if (!json_is_array(inputs) || !json_is_array(outputs)) missing = "metadata without inputs and outputs";
  static const char *const flat[3] = {NULL, "cu_seqlens", "max_seqlen"};
  for (int i = 0; !missing && i < 3; i++) {
    const char *n = b->model->cfg->ragged && i ? flat[i] : c->inputs[i];
    if (n && n[0] && !lists(inputs, n)) missing = "an input lanepack sends is not in the metadata";
  }
  if (!missing && c->output[0] && !lists(outputs, c->output)) missing = "the output is not in the metadata";
  /* the output's datatype, for our own metadata before any answer has come */
  size_t oi;
  json_t *oo;
  json_array_foreach(outputs, oi, oo) {
    const char *on = json_string_value(json_object_get(oo, "name"));
    const char *dt = json_string_value(json_object_get(oo, "datatype"));
    if (!c->output[0] || (on && strcmp(on, c->output) == 0)) {
      lp_dtype_t d = dt ? lp_dtype_parse(dt) : LP_DT_INVALID;
      if (d != LP_DT_INVALID && d != LP_DT_BYTES) b->model->v2_out_dtype = d;
      break;
    }
  }
  json_decref(root);
  set_state(b, k, missing ? LP_SHAPE_UNAVAILABLE : LP_SHAPE_COMPILED, missing ? missing : "ready");
}

static void on_ready(lp_xfer_t *x, void *ud) {
  probe_t *pr = ud;
  lp_backend_t *b = pr->b;
  int k = pr->shape;
  if (x->result == LP_XFER_CANCELLED) {
    free(pr);
    return;
  }
  if (x->result != LP_XFER_OK || x->status != 200) {
    free(pr);
    set_state(b, k, LP_SHAPE_UNAVAILABLE, "model not ready");
    return;
  }
  char name[160], url[LP_URL_MAX + 200];
  lp__v2_model_name(b->model, k, name, sizeof(name));
  snprintf(url, sizeof(url), "%s/v2/models/%s", b->url, name);
  if (!lp_upstream_request(b->model->proxy->up, url, NULL, 0, 5000, LP_PROBE_ANSWER_MAX, on_metadata, pr))
    free(pr);
}

void lp__v2_probe_shapes(lp_backend_t *b) {
  lp_model_t *m = b->model;
  for (size_t k = 0; k < m->shapes.count; k++) {
    char name[160], url[LP_URL_MAX + 200];
    if (lp__v2_model_name(m, (int)k, name, sizeof(name))) continue;
    snprintf(url, sizeof(url), "%s/v2/models/%s/ready", b->url, name);
    probe_t *pr = malloc(sizeof(*pr));
    if (!pr) return;
    *pr = (probe_t){b, (int)k};
    if (!lp_upstream_request(m->proxy->up, url, NULL, 0, 5000, LP_HEALTH_ANSWER_MAX, on_ready, pr)) free(pr);
  }
}
