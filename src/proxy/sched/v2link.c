/* The link to Open Inference Protocol (v2) backends: a batch's layout as one
 * inference request (binary tensors by default) on the model that was compiled
 * for its shape, and the answer's output sliced back per sequence (the shapes'
 * readiness is v2probe.c's). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/log.h"
#include "lanepack/v2.h"
#include "sched/sched.h"

/* The backend's model for a shape: the template with {lanes}, {bucket} and
 * {model} filled in. Returns 0 or -ENAMETOOLONG. */
int lp__v2_model_name(const lp_model_t *m, int shape, char *out, size_t cap) {
  const char *t = m->cfg->v2.model[0] ? m->cfg->v2.model : m->cfg->name;
  const lp_shape_t *sh = &m->shapes.shapes[shape];
  size_t k = 0;
  while (*t) {
    char num[24];
    const char *put = NULL;
    size_t skip = 1;
    if (strncmp(t, "{lanes}", 7) == 0) {
      snprintf(num, sizeof(num), "%u", sh->lanes);
      put = num;
      skip = 7;
    } else if (strncmp(t, "{bucket}", 8) == 0) {
      snprintf(num, sizeof(num), "%u", sh->bucket);
      put = num;
      skip = 8;
    } else if (strncmp(t, "{model}", 7) == 0) {
      put = m->cfg->name;
      skip = 7;
    }
    size_t n = put ? strlen(put) : 1;
    if (k + n + 1 > cap) return -ENAMETOOLONG;
    memcpy(out + k, put ? put : t, n);
    k += n;
    t += skip;
  }
  out[k] = '\0';
  return 0;
}

int lp__v2_gathered(const lp_model_t *m) {
  const lp_v2_config_t *c = &m->cfg->v2;
  return m->cfg->protocol == LP_PROTO_V2 && c->binary && !c->int64 && !m->cfg->ragged;
}

int lp__v2_encode(lp_model_t *m, lp_batch_t *bt) {
  /* what the body is written from, copied or borrowed for the thread that
   * writes it (a reload may change the model's configuration meanwhile; the
   * rectangles' runs live as long as the model) */
  bt->v2cfg = m->cfg->v2;
  bt->rect = &m->rect;
  char name[160];
  if (lp__v2_model_name(m, bt->shape, name, sizeof(name))) return -ENAMETOOLONG;
  snprintf(bt->url, sizeof(bt->url), "%s/v2/models/%s/infer", bt->backend->url, name);
  /* a gathered body (binary INT32 rectangles: the header and borrowed runs)
   * is written where its transfer starts, on a front; one of arrays (JSON
   * tensors, INT64, ragged) was filled here with the layout, and is written
   * here too */
  if (bt->layout.segs_only) {
    bt->body_pending = LP_BODY_V2;
    return 0;
  }
  return lp__v2_body_write(bt);
}

void lp__v2_adopt(lp_batch_t *bt, lp_answer_t *a) {
  if (!bt->v2_open || !bt->v2out) return;
  lp__answer_adopt(a, &bt->v2msg.t[bt->v2out - bt->v2msg.t]);
  bt->v2out = &a->out;
}

void lp__v2_slice(lp_model_t *m, const lp_batch_t *bt, const lp_segment_t *g, lp_seq_t *s) {
  const lp_layout_t *l = &bt->layout;
  const lp_tensor_t *t = bt->v2out;
  if (!bt->v2_open || !t || !m->answer || t != &m->answer->out) {
    /* the answer could not be kept (no memory): the sequence's job fails */
    lp__seq_done(s, bt, g, NULL, NULL, 0, bt->v2_per_segment);
    return;
  }
  int lead = l->ragged ? 1 : 2;
  size_t inner = 1;
  for (int d = lead; d < t->ndim; d++) inner *= (size_t)t->shape[d];
  size_t per_row = l->ragged ? inner : (size_t)t->shape[1] * inner;
  size_t i = (size_t)(g - l->segs);
  size_t first, n;
  if (bt->v2_per_segment) {
    first = l->ragged ? i * inner : g->lane * per_row + (g->segment - 1) * inner;
    n = inner;
  } else {
    first = l->ragged ? (size_t)g->offset * inner : g->lane * per_row + (size_t)g->offset * inner;
    n = (size_t)g->length * inner;
  }
  /* a span of the tensor, not its values: the front writes them (raw for a
   * v2 client, JSON text for /v1) */
  lp__seq_done_tensor(s, bt, g, m->answer, first, n, inner, t->ndim - lead, t->shape + lead, bt->v2_per_segment);
}


