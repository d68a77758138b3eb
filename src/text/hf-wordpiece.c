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

/* The slot a transition's key starts probing at: keys are dense small
 * integers, a multiply spreads them. */
static inline uint32_t slot_of(uint32_t k, uint32_t mask) { return (k * 0x9E3779B1u) >> 7 & mask; }

static int trie_grow(lp__hf_trie_t *t) {
  uint32_t slots = (t->mask + 1) * 2;
  uint32_t *key = calloc(slots, sizeof(*key)), *child = malloc(slots * sizeof(*child));
  if (!key || !child) {
    free(key);
    free(child);
    return -ENOMEM;
  }
  for (uint32_t i = 0; t->key && i <= t->mask; i++) {
    if (!t->key[i]) continue;
    uint32_t j = slot_of(t->key[i], slots - 1);
    while (key[j]) j = (j + 1) & (slots - 1);
    key[j] = t->key[i];
    child[j] = t->child[i];
  }
  free(t->key);
  free(t->child);
  t->key = key;
  t->child = child;
  t->mask = slots - 1;
  return 0;
}

/* The child of node by byte c, or 0 (the root is never a child). */
static inline uint32_t trie_next(const lp__hf_trie_t *t, uint32_t node, unsigned char c) {
  uint32_t k = (node << 8 | c) + 1;
  for (uint32_t i = slot_of(k, t->mask);; i = (i + 1) & t->mask) {
    if (t->key[i] == k) return t->child[i];
    if (!t->key[i]) return 0;
  }
}

static int trie_insert(lp__hf_trie_t *t, const char *s, size_t n, int32_t id) {
  uint32_t node = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    uint32_t nx = trie_next(t, node, c);
    if (!nx) {
      if (t->nnodes * 2 >= t->mask && trie_grow(t)) return -ENOMEM; /* at most half full */
      if (t->nnodes == t->capnodes) {
        uint32_t cap = t->capnodes * 2;
        int32_t *id2 = realloc(t->id, cap * sizeof(*id2));
        if (!id2) return -ENOMEM;
        t->id = id2;
        t->capnodes = cap;
      }
      if (t->nnodes >= (1u << 23)) return -E2BIG; /* node << 8 must fit 31 bits */
      nx = t->nnodes++;
      t->id[nx] = -1;
      uint32_t k = (node << 8 | c) + 1;
      uint32_t j = slot_of(k, t->mask);
      while (t->key[j]) j = (j + 1) & t->mask;
      t->key[j] = k;
      t->child[j] = nx;
    }
    node = nx;
  }
  if (t->id[node] < 0) t->id[node] = id; /* two ids for one piece: the first stands, as a map keeps one */
  return 0;
}

int lp__hf_trie_init(lp__hf_trie_t *t);
int lp__hf_trie_init(lp__hf_trie_t *t) {
  memset(t, 0, sizeof(*t));
  t->mask = 1023;
  t->key = calloc(t->mask + 1, sizeof(*t->key));
  t->child = malloc((t->mask + 1) * sizeof(*t->child));
  t->capnodes = 256;
  t->id = malloc(t->capnodes * sizeof(*t->id));
  if (!t->key || !t->child || !t->id) return -ENOMEM;
  t->id[0] = -1;
  t->nnodes = 1;
  return 0;
}

void lp__hf_trie_free(lp__hf_trie_t *t);
void lp__hf_trie_free(lp__hf_trie_t *t) {
  free(t->key);
  free(t->child);
  free(t->id);
  memset(t, 0, sizeof(*t));
}

int lp__hf_wordpiece_build(lp__hf_model_t *m);
int lp__hf_wordpiece_build(lp__hf_model_t *m) {
  if (lp__hf_trie_init(&m->start) || lp__hf_trie_init(&m->cont)) return -ENOMEM;
  for (int32_t id = 0; id < m->vocab.n; id++) {
    const char *p = m->vocab.piece[id];
    if (!p) continue;
    size_t n = m->vocab.plen[id];
    int rc = trie_insert(&m->start, p, n, id);
    if (!rc && m->prefix_len && n >= m->prefix_len && memcmp(p, m->prefix, m->prefix_len) == 0)
      rc = trie_insert(&m->cont, p + m->prefix_len, n - m->prefix_len, id);
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
        node = trie_next(t, node, (unsigned char)b[i]);
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
