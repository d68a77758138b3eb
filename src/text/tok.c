/* lanepack/tokenizer.h over its two kinds: a SentencePiece model file
 * (sp.cc) or a Hugging Face tokenizer.json (hf*.c). Callers hold an lp_tok_t
 * and never see which. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"
#include "lanepack/tokenizer.h"
#include "sp.h"

struct lp_tok_s {
  lp__sp_t *sp; /* owned; one of the two is set */
  lp__hf_t *hf; /* owned */
};

/* A tokenizer.json is a JSON object: its first byte other than whitespace
 * is '{' (a SentencePiece model is a protobuf, whose first byte is a field tag). */
static int is_json(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  int c;
  while ((c = fgetc(f)) == ' ' || c == '\n' || c == '\r' || c == '\t') {
  }
  fclose(f);
  return c == '{';
}

lp_tok_t *lp_tok_load_hf(const char *path, char *err, size_t errlen) {
  lp_tok_t *t = calloc(1, sizeof(*t));
  if (!t) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  if (!(t->hf = lp__hf_load(path, err, errlen))) {
    free(t);
    return NULL;
  }
  return t;
}

static lp_tok_t *load(const char *path, const char *extra_options, int native, char *err, size_t errlen) {
  if (is_json(path)) {
    if (extra_options && *extra_options) {
      snprintf(err, errlen, "a tokenizer.json takes no encode options (its post-processor adds the special tokens)");
      return NULL;
    }
    return lp_tok_load_hf(path, err, errlen);
  }
  lp_tok_t *t = calloc(1, sizeof(*t));
  if (!t) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  if (!(t->sp = lp__sp_load(path, extra_options, native, err, errlen))) {
    free(t);
    return NULL;
  }
  return t;
}

lp_tok_t *lp_tok_load(const char *path, const char *extra_options, char *err, size_t errlen) {
  return load(path, extra_options, 1, err, errlen);
}

lp_tok_t *lp_tok_load_library(const char *path, const char *extra_options, char *err, size_t errlen) {
  return load(path, extra_options, 0, err, errlen);
}

const char *lp_tok_engine(const lp_tok_t *t, const char **why) {
  if (why) *why = t->sp ? lp__sp_engine_why(t->sp) : "";
  return t->sp ? lp__sp_engine(t->sp) : "tokenizer.json";
}

/* A tokenizer.json encoding's ids into ids (cap of them): the count. */
static long ids_of(const lp__hf_enc_t *e, int32_t *ids, size_t cap) {
  for (size_t i = 0; i < e->n && i < cap; i++) ids[i] = e->t[i].id;
  return (long)e->n;
}


long lp_tok_encode(const lp_tok_t *t, const char *text, size_t len, int32_t *ids, size_t cap) {
  if (t->sp) return lp__sp_encode(t->sp, text, len, ids, cap);
  lp__hf_enc_t *out = lp__hf_result();
  int rc = out ? lp__hf_encode(t->hf, text, len, NULL, 0, 1, out) : -ENOMEM;
  return rc ? rc : ids_of(out, ids, cap);
}

long lp_tok_encode_plain(const lp_tok_t *t, const char *text, size_t len, int32_t *ids, size_t cap) {
  if (t->sp) return lp__sp_encode_plain(t->sp, text, len, ids, cap);
  lp__hf_enc_t *out = lp__hf_result();
  int rc = out ? lp__hf_encode(t->hf, text, len, NULL, 0, 0, out) : -ENOMEM;
  return rc ? rc : ids_of(out, ids, cap);
}

long lp_tok_encode_fit(const lp_tok_t *t, const char *text, size_t len, size_t max, int left, int32_t *ids,
                       size_t cap) {
  if (t->sp) return lp__sp_encode_fit(t->sp, text, len, max, left, ids, cap);
  lp__hf_enc_t *out = lp__hf_result();
  int rc = out ? lp__hf_encode_fit(t->hf, text, len, max, left, out) : -ENOMEM;
  return rc ? rc : ids_of(out, ids, cap);
}

long lp_tok_fit_ids(const lp_tok_t *t, const int32_t *plain, size_t n, size_t max, int left, int32_t *ids,
                    size_t cap) {
  if (t->sp) return lp__sp_fit_ids(t->sp, plain, n, max, left, ids, cap);
  lp__hf_enc_t *out = lp__hf_result(); /* not plain's array: plain may be ids */
  if (!out) return -ENOMEM;
  int rc = lp__hf_fit_ids(t->hf, plain, n, max, left, out);
  return rc ? rc : ids_of(out, ids, cap);
}

int32_t lp_tok_piece_id(const lp_tok_t *t, const char *piece) {
  return t->sp ? lp__sp_piece_id(t->sp, piece) : lp__hf_piece_id(t->hf, piece);
}

long lp_tok_pieces(const lp_tok_t *t, const char *text, size_t len, int special, lp_tok_piece_t *o, size_t cap) {
  if (t->sp) return lp__sp_pieces(t->sp, text, len, special, o, cap);
  lp__hf_enc_t *out = lp__hf_result();
  int rc = out ? lp__hf_encode(t->hf, text, len, NULL, 0, special, out) : -ENOMEM;
  if (rc) return rc;
  for (size_t i = 0; i < out->n && i < cap; i++)
    o[i] = (lp_tok_piece_t){out->t[i].id, out->t[i].a0, out->t[i].a1, out->t[i].special};
  return (long)out->n;
}

const char *lp_tok_piece_name(const lp_tok_t *t, int32_t id) {
  if (t->sp) return lp__sp_piece_name(t->sp, id);
  if (id < 0 || id >= t->hf->nnames || !t->hf->names[id]) return "";
  return t->hf->names[id];
}

int lp_tok_pair_template(const lp_tok_t *t, char *text, size_t cap) {
  return t->hf ? lp__hf_pair_template(t->hf, text, cap) : -ENOENT;
}

long lp_tok_decode(const lp_tok_t *t, const int32_t *ids, size_t n, int skip_special, char *out, size_t cap) {
  return t->sp ? lp__sp_decode(t->sp, ids, n, skip_special, out, cap)
               : lp__hf_decode(t->hf, ids, n, skip_special, out, cap);
}

int32_t lp_tok_vocab(const lp_tok_t *t) { return t->sp ? lp__sp_vocab(t->sp) : t->hf->nnames; }

void lp_tok_free(lp_tok_t *t) {
  if (!t) return;
  if (t->sp) lp__sp_free(t->sp);
  lp__hf_free(t->hf);
  free(t);
}
