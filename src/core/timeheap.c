/* The timer heap: a binary min-heap of node pointers, each node knowing its slot
 * so that it can be removed or re-keyed without a search. */
#include "lanepack/timeheap.h"

#include <errno.h>
#include <stdlib.h>

void lp_theap_init(lp_theap_t *h) {
  h->v = NULL;
  h->n = h->cap = 0;
}

void lp_theap_free(lp_theap_t *h) {
  for (size_t i = 0; i < h->n; i++) h->v[i]->idx = LP_THEAP_NONE;
  free(h->v);
  lp_theap_init(h);
}

static void put(lp_theap_t *h, size_t i, lp_theap_node_t *x) {
  h->v[i] = x;
  x->idx = i;
}

static void up(lp_theap_t *h, size_t i) {
  lp_theap_node_t *x = h->v[i];
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (h->v[parent]->at <= x->at) break;
    put(h, i, h->v[parent]);
    i = parent;
  }
  put(h, i, x);
}

static void down(lp_theap_t *h, size_t i) {
  lp_theap_node_t *x = h->v[i];
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && h->v[c + 1]->at < h->v[c]->at) c++;
    if (h->v[c]->at >= x->at) break;
    put(h, i, h->v[c]);
    i = c;
  }
  put(h, i, x);
}

int lp_theap_set(lp_theap_t *h, lp_theap_node_t *x, uint64_t at) {
  if (x->idx != LP_THEAP_NONE) {
    uint64_t was = x->at;
    x->at = at;
    if (at < was) up(h, x->idx);
    else down(h, x->idx);
    return 0;
  }
  if (h->n == h->cap) {
    size_t c = h->cap ? h->cap * 2 : 64;
    lp_theap_node_t **v = realloc(h->v, c * sizeof(*v));
    if (v == NULL) return -ENOMEM;
    h->v = v;
    h->cap = c;
  }
  x->at = at;
  put(h, h->n++, x);
  up(h, h->n - 1);
  return 0;
}

void lp_theap_remove(lp_theap_t *h, lp_theap_node_t *x) {
  size_t i = x->idx;
  if (i == LP_THEAP_NONE) return;
  x->idx = LP_THEAP_NONE;
  lp_theap_node_t *last = h->v[--h->n];
  if (i == h->n) return;
  put(h, i, last);
  if (i > 0 && h->v[(i - 1) / 2]->at > last->at) up(h, i);
  else down(h, i);
}
