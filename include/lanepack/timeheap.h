/* A min-heap of intrusive timer nodes keyed by a time in nanoseconds: O(log n)
 * insert, removal from anywhere and re-keying. No clock, no I/O. */
#ifndef LANEPACK_TIMEHEAP_H
#define LANEPACK_TIMEHEAP_H

#include <stddef.h>
#include <stdint.h>

#define LP_THEAP_NONE ((size_t)-1)

/* Embedded in what it times; idx is LP_THEAP_NONE while not in a heap. */
typedef struct lp_theap_node_s {
  uint64_t at;
  size_t idx;
} lp_theap_node_t;

typedef struct lp_theap_s {
  lp_theap_node_t **v;  /* owned array of borrowed nodes */
  size_t n, cap;
} lp_theap_t;

void lp_theap_init(lp_theap_t *h);
void lp_theap_free(lp_theap_t *h);
static inline void lp_theap_node_init(lp_theap_node_t *x) { x->at = 0; x->idx = LP_THEAP_NONE; }
static inline int lp_theap_contains(const lp_theap_node_t *x) { return x->idx != LP_THEAP_NONE; }

/* Inserts x at time `at`, or moves it there if it is in the heap already.
 * Returns 0 or -ENOMEM (x is then not in the heap). */
int lp_theap_set(lp_theap_t *h, lp_theap_node_t *x, uint64_t at);
/* Removes x if it is in the heap. */
void lp_theap_remove(lp_theap_t *h, lp_theap_node_t *x);
/* The earliest node, or NULL. */
static inline lp_theap_node_t *lp_theap_top(const lp_theap_t *h) { return h->n ? h->v[0] : NULL; }

#endif
