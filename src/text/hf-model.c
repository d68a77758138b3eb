/* tokenizer.json's "model": its vocabulary read with jansson, and the call
 * into the model that cuts a pre-tokenized piece into the vocabulary's ids. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"

int lp__hf_wordpiece_build(lp__hf_model_t *m);
int lp__hf_unigram_load(lp__hf_model_t *m, json_t *o, char *err, size_t errlen);
int lp__hf_unigram_run(const lp__hf_model_t *m, lp__hf_work_t *w, const char *b, const lp__hf_al_t *al, size_t n,
                       lp__hf_enc_t *e);
int lp__hf_bpe_load_merges(lp__hf_model_t *m, json_t *a, char *err, size_t errlen);
int lp__hf_bpe_run(const lp__hf_model_t *m, lp__hf_work_t *w, const char *b, const lp__hf_al_t *al, size_t n,
                   lp__hf_enc_t *e);
int lp__hf_wordpiece_run(const lp__hf_model_t *m, const char *b, const lp__hf_al_t *al, size_t n, lp__hf_enc_t *e);
void lp__hf_trie_free(lp__hf_trie_t *t);


/* {"piece": id, ...} into m->vocab. */
static int vocab_map(lp__hf_model_t *m, json_t *v, char *err, size_t errlen) {
  const char *k;
  json_t *id;
  json_int_t max = -1;
  json_object_foreach(v, k, id) {
    if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= LP_HF_MAX_ID)
      return lp__hf_bad(err, errlen, "model", "vocab ids must be integers from 0 to 2^24");
    if (json_integer_value(id) > max) max = json_integer_value(id);
  }
  if (lp__hf_vocab_init(&m->vocab, (int32_t)(max + 1))) return -ENOMEM;
  json_object_foreach(v, k, id) {
    size_t len = strlen(k); /* jansson's keys are NUL-terminated; a piece with a NUL is not one */
    int rc = lp__hf_vocab_set(&m->vocab, k, len, (int32_t)json_integer_value(id));
    if (rc == -EEXIST) {
      return lp__hf_bad(err, errlen, "model", "vocab id %lld is given twice", (long long)json_integer_value(id));
    }
    if (rc) return rc;
  }
  return 0;
}

static int unk_of(lp__hf_model_t *m, json_t *o) {
  const char *u = json_string_value(json_object_get(o, "unk_token"));
  m->unk = u ? lp__hf_vocab_get(&m->vocab, u, strlen(u)) : -1;
  return 0;
}

int lp__hf_model_load(lp__hf_model_t *m, json_t *o, char *err, size_t errlen) {
  memset(m, 0, sizeof(*m));
  m->unk = -1;
  if (!json_is_object(o)) return lp__hf_bad(err, errlen, "model", "must be an object");
  const char *type = json_string_value(json_object_get(o, "type"));
  json_t *v = json_object_get(o, "vocab");
  if (!type) { /* files of older versions name no type: the fields tell */
    if (json_object_get(o, "merges")) type = "BPE";
    else if (json_is_array(v)) type = "Unigram";
    else if (json_object_get(o, "continuing_subword_prefix")) type = "WordPiece";
    else type = "WordLevel";
  }
  if (strcmp(type, "WordPiece") == 0) {
    m->kind = LP_HF_M_WORDPIECE;
    if (!json_is_object(v)) return lp__hf_bad(err, errlen, "model", "vocab must be an object {\"piece\": id}");
    int rc = vocab_map(m, v, err, errlen);
    if (rc) return rc;
    unk_of(m, o);
    const char *p = json_string_value(json_object_get(o, "continuing_subword_prefix"));
    if (!p) p = "##";
    m->prefix_len = strlen(p);
    if (!(m->prefix = strdup(p))) return -ENOMEM;
    json_t *mc = json_object_get(o, "max_input_chars_per_word");
    m->max_chars = 100;
    if (json_is_integer(mc)) {
      json_int_t x = json_integer_value(mc);
      m->max_chars = x < 0 ? 0 : x > UINT32_MAX ? UINT32_MAX : (uint32_t)x;
    }
    return lp__hf_wordpiece_build(m);
  }
  if (strcmp(type, "WordLevel") == 0) { /* a whole piece is one id, or the unknown */
    m->kind = LP_HF_M_WORDLEVEL;
    if (!json_is_object(v)) return lp__hf_bad(err, errlen, "model", "vocab must be an object {\"piece\": id}");
    int rc = vocab_map(m, v, err, errlen);
    if (!rc) unk_of(m, o);
    return rc;
  }
  if (strcmp(type, "Unigram") == 0) {
    m->kind = LP_HF_M_UNIGRAM;
    return lp__hf_unigram_load(m, o, err, errlen);
  }
  if (strcmp(type, "BPE") == 0) {
    m->kind = LP_HF_M_BPE;
    if (!json_is_object(v)) return lp__hf_bad(err, errlen, "model", "vocab must be an object {\"piece\": id}");
    json_t *d = json_object_get(o, "dropout");
    if (json_is_number(d) && json_number_value(d) > 0)
      return lp__hf_bad(err, errlen, "model", "dropout is not supported (it makes ids random)");
    int rc = vocab_map(m, v, err, errlen);
    if (rc) return rc;
    unk_of(m, o);
    const char *p = json_string_value(json_object_get(o, "continuing_subword_prefix"));
    const char *s = json_string_value(json_object_get(o, "end_of_word_suffix"));
    if (p && !(m->prefix = strdup(p))) return -ENOMEM;
    if (s && !(m->suffix = strdup(s))) return -ENOMEM;
    m->prefix_len = p ? strlen(p) : 0;
    m->suffix_len = s ? strlen(s) : 0;
    m->byte_fallback = json_is_true(json_object_get(o, "byte_fallback"));
    m->fuse_unk = json_is_true(json_object_get(o, "fuse_unk"));
    m->ignore_merges = json_is_true(json_object_get(o, "ignore_merges"));
    return lp__hf_bpe_load_merges(m, json_object_get(o, "merges"), err, errlen);
  }
  return lp__hf_bad(err, errlen, "model", "type '%.100s' is not supported", type);
}

int lp__hf_model_run(const lp__hf_model_t *m, lp__hf_work_t *w, const char *b, const lp__hf_al_t *al, size_t n,
                     lp__hf_enc_t *e) {
  if (n == 0) return 0;
  switch (m->kind) {
  case LP_HF_M_WORDPIECE: return lp__hf_wordpiece_run(m, b, al, n, e);
  case LP_HF_M_BPE: return lp__hf_bpe_run(m, w, b, al, n, e);
  case LP_HF_M_UNIGRAM: return lp__hf_unigram_run(m, w, b, al, n, e);
  case LP_HF_M_WORDLEVEL: {
    int32_t id = lp__hf_vocab_get(&m->vocab, b, n);
    if (id < 0 && (id = m->unk) < 0) return -EINVAL;
    return lp__hf_enc_push(e, id, al[0].a0, al[n - 1].a1, 0, 0);
  }
  default: return -EINVAL;
  }
}

void lp__hf_model_free(lp__hf_model_t *m) {
  lp__hf_vocab_free(&m->vocab);
  free(m->prefix);
  free(m->suffix);
  free(m->merges);
  free(m->scores);
  lp__hf_trie_free(&m->start);
  lp__hf_trie_free(&m->cont);
  memset(m, 0, sizeof(*m));
}
