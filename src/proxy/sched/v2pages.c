/* Runs on the scheduler thread: the Open Inference Protocol's pages (server
 * and model metadata, liveness and readiness) rendered from the models. */
#include <stdio.h>
#include <string.h>

#include "lanepack/v2.h"
#include "proxy.h"

/* Model i of a configuration is the proxy's model i. */
lp_model_t *lp__v2_find_model(lp_proxy_t *p, const lp_config_t *c, const char *name, size_t n) {
  for (size_t i = 0; i < c->nmodels; i++)
    if (strlen(c->models[i].name) == n && memcmp(c->models[i].name, name, n) == 0) return &p->models[i];
  return NULL;
}

/* The output's name as clients see it: the backend's. */
const char *lp__v2_output_name_of(const lp_model_config_t *c) {
  return c->protocol == LP_PROTO_V2 && c->v2.output[0] ? c->v2.output : "output";
}

const char *lp__v2_output_name(const lp_model_t *m) { return lp__v2_output_name_of(m->cfg); }

/* The datatype answers carry: a v2 backend's own (from its model metadata,
 * then from each answer; FP32 until one of them has been seen); FP64 for a
 * lanepack-JSON backend, whose outputs are JSON numbers (never chosen per value). */
static lp_dtype_t v2_out_dtype(const lp_model_t *m) {
  if (m->cfg->protocol != LP_PROTO_V2) return LP_DT_FP64;
  return m->v2_out_dtype != LP_DT_INVALID ? m->v2_out_dtype : LP_DT_FP32;
}

static void metadata(lp_buf_t *bp, lp_model_t *m) {
#define b (*bp)
  lp_buf_puts(&b, "{\"name\":");
  lp_buf_json_str(&b, m->cfg->name, strlen(m->cfg->name));
  lp_buf_puts(&b, ",\"versions\":[\"1\"],\"platform\":\"lanepack\",\"inputs\":[{\"name\":\"input_ids\","
                  "\"datatype\":\"INT64\",\"shape\":[-1,-1]}],\"outputs\":[{\"name\":");
  const char *on = lp__v2_output_name(m);
  lp_buf_json_str(&b, on, strlen(on));
  lp_buf_puts(&b, ",\"datatype\":\"");
  lp_buf_puts(&b, lp_dtype_name(v2_out_dtype(m)));
  lp_buf_puts(&b, "\",\"shape\":[-1,-1,-1]}],\"parameters\":{\"max_sequence_length\":");
  lp_buf_u64(&b, lp_bucket_set_max_len(&m->shapes));
  lp_buf_puts(&b, "}}\n");
#undef b
}

static void status_only(lp_buf_t *b, lp_page_t *pg, int ok) {
  pg->status = ok ? 200 : 503;
  lp_buf_puts(b, ok ? "{}\n" : "{\"error\":\"not ready\"}\n");
}

void lp__v2_render_page(lp_proxy_t *p, int v2r, const char *url, size_t path_len, lp_buf_t *body,
                        lp_page_t *pg) {
  const char *name;
  size_t nlen;
  lp_v2_route(url, path_len, &name, &nlen);
  if (v2r == LP_V2_READY) {
    int ready = !p->unready;
    for (size_t i = 0; i < p->nmodels && ready; i++) ready = lp__model_ready(&p->models[i]);
    status_only(body, pg, ready);
    return;
  }
  lp_model_t *m = lp__v2_find_model(p, &p->cfg, name, nlen);
  if (!m) {
    pg->status = 404;
    pg->code = "unknown_model";
    snprintf(pg->msg, sizeof(pg->msg), "no model named '%.*s'", (int)(nlen > 64 ? 64 : nlen), name);
  } else if (v2r == LP_V2_MODEL) {
    metadata(body, m);
  } else {
    status_only(body, pg, !p->unready && lp__model_ready(m));
  }
}
