/* The WordPiece model: the longest piece of the vocabulary that begins the
 * word, then the longest continuation piece ("##...") that begins the rest,
 * until the word is used up, or the whole word is the unknown piece. The
 * library tries every end from the longest down (quadratic in the word); a
 * byte trie walked once from each start finds the same longest piece in one
 * pass over the bytes it covers. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"

int lp__hf_wordpiece_build(lp__hf_model_t *m);
int lp__hf_wordpiece_build(lp__hf_model_t *m) {
  if (lp__hf_trie_init(&m->start) || lp__hf_trie_init(&m->cont)) return -ENOMEM;
  for (int32_t id = 0; id < m->vocab.n; id++) {
    const char *p = m->vocab.piece[id];
    if (!p) continue;
    size_t n = m->vocab.plen[id];
    int rc = lp__hf_trie_insert(&m->start, p, n, id, 0);
    if (!rc && m->prefix_len && n >= m->prefix_len && memcmp(p, m->prefix, m->prefix_len) == 0)
      rc = lp__hf_trie_insert(&m->cont, p + m->prefix_len, n - m->prefix_len, id, 0);
    if (rc) return rc;
  }
  return 0;
}

int lp__hf_wordpiece_run(const lp__hf_model_t *m, const char *b, const lp__hf_al_t *al, size_t n, lp__hf_enc_t *e);
int lp__hf_wordpiece_run(const lp__hf_model_t *m, const char *b, const lp__hf_al_t *al, size_t n, lp__hf_enc_t *e) {
  size_t chars = 0;
  for (size_t i = 0; i < n; i++) chars += ((unsigned char)b[i] & 0xC0) != 0x80;
  size_t first = e->n;
  if (chars <= m->max_chars) {
    /* without a prefix, a continuation is any piece, as the library looks it up */
    const lp__hf_trie_t *cont = m->prefix_len ? &m->cont : &m->start;
    for (size_t pos = 0; pos < n;) {
      const lp__hf_trie_t *t = pos ? cont : &m->start;
      uint32_t node = 0;
      int32_t best = -1;
      size_t end = pos;
      for (size_t i = pos; i < n; i++) {
        node = lp__hf_trie_next(t, node, (unsigned char)b[i]);
        if (!node) break;
        if (t->id[node] >= 0) {
          best = t->id[node];
          end = i + 1;
        }
      }
      if (best < 0) goto unknown;
      if (lp__hf_enc_push(e, best, al[pos].a0, al[end - 1].a1, 0, 0)) return -ENOMEM;
      pos = end;
    }
    return 0;
  }
unknown:
  e->n = first;
  if (m->unk < 0) return -EINVAL;
  return lp__hf_enc_push(e, m->unk, al[0].a0, al[n - 1].a1, 0, 0);
}
