/* tokenizer.json's post-processors: the special tokens around one text or a
 * pair, and the type ids, as BertProcessing, RobertaProcessing and
 * TemplateProcessing lay them out. The text's own tokens arrive with type 0
 * (first) or 1 (second), as the library encodes a pair. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"

void lp__hf_bytelevel_offsets(lp__hf_enc_t *e, size_t from, int add_prefix_space, const char *text);

static int copy(lp__hf_enc_t *out, const lp__hf_enc_t *in, int settype, uint8_t type) {
  for (size_t i = 0; i < in->n; i++) {
    lp__hf_token_t t = in->t[i];
    if (lp__hf_enc_push(out, t.id, t.a0, t.a1, settype ? type : t.type, t.special)) return -ENOMEM;
  }
  return 0;
}

static int tpl(const lp__hf_tpl_item_t *it, size_t n, const lp__hf_enc_t *a, const lp__hf_enc_t *b, int special,
               lp__hf_enc_t *out) {
  for (size_t i = 0; i < n; i++) {
    int rc = 0;
    if (it[i].id < 0) rc = copy(out, it[i].seq ? b : a, 1, it[i].type);
    else if (special) rc = lp__hf_enc_push(out, it[i].id, 0, 0, it[i].type, 1);
    if (rc) return rc;
  }
  return 0;
}

int lp__hf_post_run(const lp__hf_post_t *p, const lp__hf_enc_t *a, const lp__hf_enc_t *b, int special,
                    lp__hf_enc_t *out) {
  out->n = 0;
  switch (p->kind) {
  case LP_HF_PP_NONE:
  case LP_HF_PP_BYTELEVEL: /* offsets only: trimmed where the text is encoded */
    if (copy(out, a, 0, 0) || (b && copy(out, b, 0, 0))) return -ENOMEM;
    return 0;
  case LP_HF_PP_BERT:
  case LP_HF_PP_ROBERTA:
  case LP_HF_PP_TEMPLATE:
    if (!special && p->kind != LP_HF_PP_TEMPLATE) {
      int roberta = p->kind == LP_HF_PP_ROBERTA; /* RoBERTa sets every type id to 0 */
      if (copy(out, a, roberta, 0) || (b && copy(out, b, roberta, 0))) return -ENOMEM;
      return 0;
    }
    return b ? tpl(p->pair, p->npair, a, b, special, out) : tpl(p->single, p->nsingle, a, b, special, out);
  case LP_HF_PP_SEQ: {
    /* each step's output is the next one's input; only the last may join a pair */
    lp__hf_enc_t cur = {0}, nx = {0};
    int rc = copy(&cur, a, 0, 0);
    lp__hf_enc_t curb = {0};
    if (!rc && b) rc = copy(&curb, b, 0, 0);
    int joined = 0;
    for (size_t i = 0; i < p->nseq && !rc; i++) {
      const lp__hf_post_t *s = &p->seq[i];
      if (s->kind == LP_HF_PP_NONE || s->kind == LP_HF_PP_BYTELEVEL) continue;
      if (joined) { /* a second joining step sees one sequence */
        nx.n = 0;
        rc = lp__hf_post_run(s, &cur, NULL, special, &nx);
      } else {
        nx.n = 0;
        rc = lp__hf_post_run(s, &cur, b ? &curb : NULL, special, &nx);
        joined = 1;
      }
      lp__hf_enc_t t = cur;
      cur = nx;
      nx = t;
    }
    if (!rc && !joined) {
      rc = copy(out, &cur, 0, 0);
      if (!rc && b) rc = copy(out, &curb, 0, 0);
    } else if (!rc) rc = copy(out, &cur, 0, 0);
    free(cur.t);
    free(nx.t);
    free(curb.t);
    return rc;
  }
  }
  return -EINVAL;
}

size_t lp__hf_post_added(const lp__hf_post_t *p, int pair) {
  size_t n = 0;
  switch (p->kind) {
  case LP_HF_PP_BERT: return pair ? 3 : 2;
  case LP_HF_PP_ROBERTA: return pair ? 4 : 2;
  case LP_HF_PP_TEMPLATE: {
    const lp__hf_tpl_item_t *it = pair ? p->pair : p->single;
    size_t k = pair ? p->npair : p->nsingle;
    for (size_t i = 0; i < k; i++) n += it[i].id >= 0;
    return n;
  }
  case LP_HF_PP_SEQ:
    for (size_t i = 0; i < p->nseq; i++) n += lp__hf_post_added(&p->seq[i], pair);
    return n;
  default: return 0;
  }
}

/* ---- loading */

static int pair_of(json_t *v, int32_t *id) {
  if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(json_array_get(v, 1))) return -EINVAL;
  json_int_t x = json_integer_value(json_array_get(v, 1));
  if (x < 0 || x >= LP_HF_MAX_ID) return -EINVAL;
  *id = (int32_t)x;
  return 0;
}

static int push_item(lp__hf_tpl_item_t **it, size_t *n, lp__hf_tpl_item_t x) {
  lp__hf_tpl_item_t *m = realloc(*it, (*n + 1) * sizeof(**it));
  if (!m) return -ENOMEM;
  *it = m;
  m[(*n)++] = x;
  return 0;
}

/* A template ([{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence":
 * {"id": "A", "type_id": 0}}, ...]) with the special tokens' ids. */
static int template(json_t *a, json_t *specials, lp__hf_tpl_item_t **it, size_t *n, const char *where, char *err,
                    size_t errlen) {
  if (!json_is_array(a)) return lp__hf_bad(err, errlen, where, "must be an array of pieces");
  for (size_t i = 0; i < json_array_size(a); i++) {
    json_t *p = json_array_get(a, i), *s = json_object_get(p, "Sequence"), *t = json_object_get(p, "SpecialToken");
    json_t *o = s ? s : t;
    json_t *ty = json_object_get(o, "type_id");
    const char *id = json_string_value(json_object_get(o, "id"));
    if (!id || (ty && (!json_is_integer(ty) || json_integer_value(ty) < 0 || json_integer_value(ty) > 255)))
      return lp__hf_bad(err, errlen, where, "a piece must be {\"Sequence\"|\"SpecialToken\": {\"id\": ..., \"type_id\": N}}");
    uint8_t type = ty ? (uint8_t)json_integer_value(ty) : 0;
    if (s) {
      if (strcmp(id, "A") && strcmp(id, "B")) return lp__hf_bad(err, errlen, where, "a Sequence's id is \"A\" or \"B\"");
      if (push_item(it, n, (lp__hf_tpl_item_t){-1, id[0] == 'B', type})) return -ENOMEM;
      continue;
    }
    json_t *ids = json_object_get(json_object_get(specials, id), "ids");
    if (!json_is_array(ids)) {
      char m[200];
      snprintf(m, sizeof(m), "special token '%.100s' is not in special_tokens", id);
      return lp__hf_bad(err, errlen, where, "%s", m);
    }
    for (size_t k = 0; k < json_array_size(ids); k++) {
      json_t *x = json_array_get(ids, k);
      if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= LP_HF_MAX_ID)
        return lp__hf_bad(err, errlen, where, "special token ids must be integers from 0 to 2^24");
      if (push_item(it, n, (lp__hf_tpl_item_t){(int32_t)json_integer_value(x), 0, type})) return -ENOMEM;
    }
  }
  return 0;
}

int lp__hf_post_load(void *elem, json_t *o, const char *where, char *err, size_t errlen) {
  lp__hf_post_t *p = elem;
  memset(p, 0, sizeof(*p));
  if (json_is_null(o) || !o) return 0;
  const char *type = json_string_value(json_object_get(o, "type"));
  if (!json_is_object(o) || !type) return lp__hf_bad(err, errlen, where, "must be an object with a \"type\"");
  if (strcmp(type, "BertProcessing") == 0 || strcmp(type, "RobertaProcessing") == 0) {
    int32_t cls, sep;
    if (pair_of(json_object_get(o, "cls"), &cls) || pair_of(json_object_get(o, "sep"), &sep))
      return lp__hf_bad(err, errlen, where, "needs \"cls\" and \"sep\": [\"piece\", id]");
    p->kind = type[0] == 'B' ? LP_HF_PP_BERT : LP_HF_PP_ROBERTA;
    p->trim_offsets = !json_is_false(json_object_get(o, "trim_offsets"));
    p->add_prefix_space = !json_is_false(json_object_get(o, "add_prefix_space"));
    int r = p->kind == LP_HF_PP_ROBERTA;
    lp__hf_tpl_item_t single[3] = {{cls, 0, 0}, {-1, 0, 0}, {sep, 0, 0}};
    lp__hf_tpl_item_t pairb[4] = {{cls, 0, 0}, {-1, 0, 0}, {sep, 0, 0}, {-1, 1, 1}};
    for (int i = 0; i < 3; i++)
      if (push_item(&p->single, &p->nsingle, single[i]) || push_item(&p->pair, &p->npair, pairb[i])) return -ENOMEM;
    if (r) { /* <s> A </s> </s> B </s>, every type 0 */
      if (push_item(&p->pair, &p->npair, (lp__hf_tpl_item_t){sep, 0, 0}) ||
          push_item(&p->pair, &p->npair, (lp__hf_tpl_item_t){-1, 1, 0}) ||
          push_item(&p->pair, &p->npair, (lp__hf_tpl_item_t){sep, 0, 0}))
        return -ENOMEM;
    } else if (push_item(&p->pair, &p->npair, pairb[3]) || push_item(&p->pair, &p->npair, (lp__hf_tpl_item_t){sep, 0, 1})) {
      return -ENOMEM;
    }
    return 0;
  }
  if (strcmp(type, "TemplateProcessing") == 0) {
    p->kind = LP_HF_PP_TEMPLATE;
    char w2[200];
    json_t *sp = json_object_get(o, "special_tokens");
    snprintf(w2, sizeof(w2), "%s.single", where);
    int rc = template(json_object_get(o, "single"), sp, &p->single, &p->nsingle, w2, err, errlen);
    snprintf(w2, sizeof(w2), "%s.pair", where);
    if (!rc) rc = template(json_object_get(o, "pair"), sp, &p->pair, &p->npair, w2, err, errlen);
    return rc;
  }
  if (strcmp(type, "ByteLevel") == 0) {
    p->kind = LP_HF_PP_BYTELEVEL;
    p->trim_offsets = !json_is_false(json_object_get(o, "trim_offsets"));
    p->add_prefix_space = !json_is_false(json_object_get(o, "add_prefix_space"));
    return 0;
  }
  if (strcmp(type, "Sequence") == 0) {
    p->kind = LP_HF_PP_SEQ;
    return lp__hf_load_seq(o, "processors", where, sizeof(*p->seq), (void **)&p->seq, &p->nseq, lp__hf_post_load,
                           err, errlen);
  }
  return lp__hf_bad(err, errlen, where, "type '%.100s' is not supported", type);
}

void lp__hf_post_free(lp__hf_post_t *p) {
  for (size_t i = 0; i < p->nseq; i++) lp__hf_post_free(&p->seq[i]);
  free(p->seq);
  free(p->single);
  free(p->pair);
  memset(p, 0, sizeof(*p));
}
