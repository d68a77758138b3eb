/* A byte trie over a vocabulary's pieces (WordPiece's longest match,
 * Unigram's every prefix): transitions in one open-addressing table keyed
 * by (node, byte), each node's piece id beside. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"


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
    uint32_t j = lp__hf_trie_slot(t->key[i], slots - 1);
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

int lp__hf_trie_insert(lp__hf_trie_t *t, const char *s, size_t n, int32_t id, int replace) {
  uint32_t node = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    uint32_t nx = lp__hf_trie_next(t, node, c);
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
      uint32_t j = lp__hf_trie_slot(k, t->mask);
      while (t->key[j]) j = (j + 1) & t->mask;
      t->key[j] = k;
      t->child[j] = nx;
    }
    node = nx;
  }
  if (t->id[node] < 0 || replace) t->id[node] = id; /* two ids for one piece: the model says which stands */
  return 0;
}

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

void lp__hf_trie_free(lp__hf_trie_t *t) {
  free(t->key);
  free(t->child);
  free(t->id);
  memset(t, 0, sizeof(*t));
}

