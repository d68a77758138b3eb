/* Runs on the front whose transfer of a batch ended: its
 * 200 answer indexed (JSON) or decoded (v2) and checked against the batch, so
 * that the scheduler only hands out spans. Reads the batch alone, never its
 * model (a reload may change that meanwhile). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "wire/wire.h"

/* The answer is of the kind its model's "outputs" says (ANY: whatever it
 * says it is): per token or per segment, and per segment a vector, or a
 * score (a number, or a classifier's scores). 0 or -EPROTO with err. */
static int check_kind(const lp_batch_t *bt, int per_segment, int vectors, char *err, size_t errlen) {
  static const char *const said[] = {"per-token outputs", "a number per segment", "a vector per segment"};
  int got = !per_segment ? LP_OUT_TOKENS : vectors ? LP_OUT_VECTOR : LP_OUT_SCORE;
  int ok = bt->outputs == LP_OUTPUTS_ANY || (bt->outputs == LP_OUTPUTS_PER_TOKEN && got == LP_OUT_TOKENS) ||
           (bt->outputs == LP_OUTPUTS_PER_SEGMENT && got == LP_OUT_VECTOR) ||
           (bt->outputs == LP_OUTPUTS_SCORE && got == (bt->nlabels > 1 ? LP_OUT_VECTOR : LP_OUT_SCORE));
  if (ok) return 0;
  const char *want = bt->outputs == LP_OUTPUTS_PER_TOKEN     ? "per_token"
                     : bt->outputs == LP_OUTPUTS_PER_SEGMENT ? "per_segment (a vector per segment)"
                     : bt->nlabels > 1                       ? "score (a vector of scores per segment, one per label)"
                                                             : "score (one number per segment)";
  snprintf(err, errlen, "the answer has %s; the model's outputs are %s", said[got], want);
  return -EPROTO;
}

static int open_json(lp_batch_t *bt) {
  lp_scatter_t *sc = &bt->scatter;
  char *err = bt->open_err;
  size_t errlen = sizeof(bt->open_err);
  int rc = lp_scatter_index(sc, bt->answer.data ? bt->answer.data : "", bt->answer.len, &bt->layout, err, errlen);
  /* an answer naming another batch is another batch's answer (a backend, or
   * a proxy between, that mixed two up): it is never sliced. One naming none
   * is taken (the field is the backend's to echo, as v2's id is optional). */
  if (!rc && sc->id_state != LP_SCATTER_ID_NONE && (sc->id_state == LP_SCATTER_ID_BAD || sc->batch_id != bt->id)) {
    if (sc->id_state == LP_SCATTER_ID_BAD)
      snprintf(err, errlen, "the answer's batch_id is not an unsigned integer (batch %llu)",
               (unsigned long long)bt->id);
    else
      snprintf(err, errlen, "the answer's batch_id %llu is not this batch's %llu",
               (unsigned long long)sc->batch_id, (unsigned long long)bt->id);
    rc = -EPROTO;
  }
  /* per segment: every segment's value of the one kind (the first says which) */
  int vectors = 0;
  for (size_t i = 0; !rc && sc->per_segment && i < bt->layout.nsegs && bt->outputs != LP_OUTPUTS_ANY; i++) {
    const char *p;
    size_t n, k = 0;
    lp_scatter_slice(sc, &bt->layout.segs[i], &p, &n);
    while (k < n && (p[k] == ' ' || p[k] == '\n' || p[k] == '\t' || p[k] == '\r')) k++;
    int v = k < n && p[k] == '[';
    if (i && v != vectors) {
      snprintf(err, errlen, "the answer's segment_outputs mix numbers and arrays");
      return -EPROTO;
    }
    vectors = v;
  }
  return rc ? rc : check_kind(bt, sc->per_segment, vectors, err, errlen);
}

static int open_v2(lp_batch_t *bt) {
  const lp_layout_t *l = &bt->layout;
  char *err = bt->open_err;
  size_t errlen = sizeof(bt->open_err);
  if (bt->inference_header_len == -2) {
    snprintf(err, errlen, "Inference-Header-Content-Length is not a size");
    return -EPROTO;
  }
  lp_v2_msg_t *msg = &bt->v2msg;
  bt->v2_open = 1; /* freed by lp__v2_close whatever happens below */
  int rc = lp_v2_decode(msg, bt->answer.data ? bt->answer.data : "", bt->answer.len, bt->inference_header_len, 0,
                        err, errlen);
  if (rc) return rc;
  /* an answer naming another request is another batch's answer (a backend,
   * or a proxy between, that mixed two up): never sliced. The id is optional
   * in the protocol (Triton echoes it when sent): an answer without one is
   * taken. */
  char want[24];
  snprintf(want, sizeof(want), "%llu", (unsigned long long)bt->id);
  if (msg->has_id && strcmp(msg->id, want) != 0) {
    snprintf(err, errlen, "the answer's id is not this batch's %s", want);
    return -EPROTO;
  }
  const lp_tensor_t *t = bt->v2_output[0] ? lp_v2_find(msg, bt->v2_output) : &msg->t[0];
  if (!t) {
    snprintf(err, errlen, "the answer has no output '%s'", bt->v2_output);
    return -EPROTO;
  }
  /* the leading dimensions say where each sequence's part is */
  int per_segment = bt->v2_per_segment;
  int lead = l->ragged ? 1 : 2;
  uint64_t rows = l->ragged ? (per_segment ? l->nsegs : l->bucket) : l->lanes;
  uint64_t cols = 0;
  if (!l->ragged) {
    uint32_t maxseg = 0;
    for (size_t i = 0; i < l->nsegs; i++)
      if (l->segs[i].segment > maxseg) maxseg = l->segs[i].segment;
    cols = per_segment ? maxseg : l->bucket;
  }
  int ok = t->ndim >= lead && (uint64_t)t->shape[0] == rows &&
           (l->ragged || (per_segment ? (uint64_t)t->shape[1] >= cols : (uint64_t)t->shape[1] == cols));
  size_t inner = 1;
  for (int d = lead; ok && d < t->ndim; d++) inner *= (size_t)t->shape[d];
  if (!ok || inner == 0) {
    char got[96] = "";
    for (int d = 0; d < t->ndim; d++)
      snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (l->ragged)
      snprintf(err, errlen, "output '%s' has shape [%s], the batch needs [%llu, ...]", t->name, got,
               (unsigned long long)rows);
    else
      snprintf(err, errlen, "output '%s' has shape [%s], the batch needs [%llu, %s%llu, ...]", t->name,
               got, (unsigned long long)rows, per_segment ? ">= " : "", (unsigned long long)cols);
    return -EPROTO;
  }
  if (check_kind(bt, per_segment, t->ndim > lead, err, errlen)) return -EPROTO;
  if (bt->outputs == LP_OUTPUTS_SCORE && bt->nlabels > 1 && (t->ndim != lead + 1 || t->shape[lead] != bt->nlabels)) {
    snprintf(err, errlen, "output '%s' has %lld scores per segment, the model has %u labels", t->name,
             (long long)inner, bt->nlabels);
    return -EPROTO;
  }
  bt->v2out = t;
  return 0;
}

/* Whichever thread holds the batch: the front that opened its answer (a
 * failed check) or the scheduler once the batch is back (its answer taken,
 * the batch reused or freed); never both, as a batch is one thread's at a
 * time. */
void lp__v2_close(lp_batch_t *bt) {
  if (!bt->v2_open) return;
  lp_v2_msg_free(&bt->v2msg);
  bt->v2_open = 0;
  bt->v2out = NULL;
}

int lp__answer_open(lp_batch_t *bt) {
  bt->open_err[0] = '\0';
  lp__v2_close(bt); /* a batch reused keeps nothing decoded of an earlier answer */
  if (!bt->v2) return open_json(bt);
  int rc = open_v2(bt);
  if (rc) lp__v2_close(bt); /* what was decoded of a bad answer goes at once */
  return rc;
}
