/* The Unigram model (XLM-R, multilingual-e5, bge-m3, T5 in tokenizer.json
 * form): the best-scoring cut of a piece into vocabulary pieces (Viterbi over
 * every vocabulary prefix at each character, found by walking the byte trie
 * once), a character with no piece of its own as the unknown piece at the
 * lowest score less 10, runs of unknowns fused into one, as the library's
 * encode_optimized does (SentencePiece's own algorithm). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"

/* SentencePiece's penalty under the lowest score for an unknown character. */
#define LP_HF_UNK_PENALTY 10.0

typedef struct {
  double score;
  int32_t start; /* -1: no path ends here yet */
  int32_t id;
} node_t;

int lp__hf_unigram_load(lp__hf_model_t *m, json_t *o, char *err, size_t errlen);
int lp__hf_unigram_load(lp__hf_model_t *m, json_t *o, char *err, size_t errlen) {
  json_t *v = json_object_get(o, "vocab");
  if (!json_is_array(v)) return lp__hf_bad(err, errlen, "model", "vocab must be an array of [\"piece\", score]");
  size_t n = json_array_size(v);
  if (n >= (size_t)LP_HF_MAX_ID) return lp__hf_bad(err, errlen, "model", "vocab has over 2^24 pieces");
  if (lp__hf_vocab_init(&m->vocab, (int32_t)n) || !(m->scores = malloc((n + 1) * sizeof(*m->scores)))) return -ENOMEM;
  if (lp__hf_trie_init(&m->start)) return -ENOMEM;
  m->min_score = INFINITY;
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(v, i), *p = json_array_get(e, 0), *sc = json_array_get(e, 1);
    if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_string(p) || !json_is_number(sc))
      return lp__hf_bad(err, errlen, "model", "vocab[%zu] must be [\"piece\", score]", i);
    const char *s = json_string_value(p);
    size_t len = json_string_length(p);
    m->scores[i] = json_number_value(sc);
    if (m->scores[i] < m->min_score) m->min_score = m->scores[i];
    int rc = lp__hf_vocab_set(&m->vocab, s, len, (int32_t)i);
    if (!rc) rc = lp__hf_trie_insert(&m->start, s, len, (int32_t)i, 1); /* a piece given twice: the last id, as the library's map */
    if (rc) return rc;
  }
  json_t *u = json_object_get(o, "unk_id");
  m->unk = -1;
  if (json_is_integer(u)) {
    if (json_integer_value(u) < 0 || (size_t)json_integer_value(u) >= n)
      return lp__hf_bad(err, errlen, "model", "unk_id is not in the vocab");
    m->unk = (int32_t)json_integer_value(u);
  }
  m->byte_fallback = json_is_true(json_object_get(o, "byte_fallback"));
  return 0;
}

/* One cut piece b[s..e) to ids: its own, its bytes' <0xAB> pieces, or the
 * unknown piece. */
static int emit(const lp__hf_model_t *m, const char *b, const lp__hf_al_t *al, size_t s, size_t e, int32_t id,
                lp__hf_enc_t *out) {
  uint32_t a0 = al[s].a0, a1 = al[e - 1].a1;
  if (id == m->unk && (e - s > 1 || id < 0)) id = lp__hf_vocab_get(&m->vocab, b + s, e - s); /* a fused run */
  if (id < 0 || id == m->unk) {
    int32_t own = lp__hf_vocab_get(&m->vocab, b + s, e - s);
    if (own >= 0 && own != m->unk) return lp__hf_enc_push(out, own, a0, a1, 0, 0);
    if (m->byte_fallback) {
      size_t first = out->n;
      for (size_t i = s; i < e; i++) {
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", (unsigned char)b[i]);
        int32_t bid = lp__hf_vocab_get(&m->vocab, name, 6);
        if (bid < 0) {
          out->n = first;
          goto unknown;
        }
        if (lp__hf_enc_push(out, bid, a0, a1, 0, 0)) return -ENOMEM;
      }
      return 0;
    }
  unknown:
    if (m->unk < 0) return -EINVAL;
    id = m->unk;
  }
  return lp__hf_enc_push(out, id, a0, a1, 0, 0);
}

int lp__hf_unigram_run(const lp__hf_model_t *m, lp__hf_work_t *w, const char *b, const lp__hf_al_t *al, size_t n,
                       lp__hf_enc_t *e);
int lp__hf_unigram_run(const lp__hf_model_t *m, lp__hf_work_t *w, const char *b, const lp__hf_al_t *al, size_t n,
                       lp__hf_enc_t *e) {
  size_t need = (n + 1) * sizeof(node_t) + (n + 1) * 2 * sizeof(uint32_t);
  if (w->scratch_cap < need) {
    void *s = realloc(w->scratch, need);
    if (!s) return -ENOMEM;
    w->scratch = s;
    w->scratch_cap = need;
  }
  node_t *best = w->scratch;
  uint32_t *cut = (uint32_t *)(void *)(best + n + 1);
  for (size_t i = 0; i <= n; i++) best[i] = (node_t){0, -1, -1};
  double unk_score = m->min_score - LP_HF_UNK_PENALTY;
  for (size_t at = 0; at < n;) {
    double here = best[at].score;
    int k;
    lp__hf_utf8_get(b, at, &k);
    int single = 0;
    uint32_t node = 0;
    for (size_t i = at; i < n; i++) {
      node = lp__hf_trie_next(&m->start, node, (unsigned char)b[i]);
      if (!node) break;
      int32_t id = m->start.id[node];
      if (id < 0) continue;
      double s = m->scores[id] + here;
      node_t *t = &best[i + 1];
      if (t->start < 0 || s > t->score) *t = (node_t){s, (int32_t)at, id};
      if (i + 1 - at == (size_t)k) single = 1;
    }
    if (!single) {
      node_t *t = &best[at + (size_t)k];
      double s = unk_score + here;
      if (t->start < 0 || s > t->score) *t = (node_t){s, (int32_t)at, m->unk};
    }
    at += (size_t)k;
  }
  /* back from the end: the cuts, unknown runs fused */
  size_t nc = 0;
  for (size_t end = n; end > 0;) {
    const node_t *t = &best[end];
    size_t start = (size_t)t->start;
    if (t->id == m->unk && nc && cut[2 * (nc - 1) + 1] == (uint32_t)m->unk) cut[2 * (nc - 1)] = (uint32_t)start;
    else {
      cut[2 * nc] = (uint32_t)start;
      cut[2 * nc + 1] = (uint32_t)t->id;
      nc++;
    }
    end = start;
  }
  for (size_t i = nc; i-- > 0;) {
    size_t s = cut[2 * i];
    size_t stop = i == 0 ? n : cut[2 * (i - 1)];
    int rc = emit(m, b, al, s, stop, (int32_t)cut[2 * i + 1], e);
    if (rc) return rc;
  }
  return 0;
}
