/* The priority queue of waiting sequences: a sorted array of levels (few: one
 * per priority in use), each a doubly linked FIFO of intrusive nodes. */
#include "lanepack/queue.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void lp_queue_init(lp_queue_t *q) { memset(q, 0, sizeof(*q)); }

void lp_queue_free(lp_queue_t *q) {
  free(q->levels);
  lp_queue_init(q);
}

/* Index of the level with priority p, or where it would go (levels descend). */
static size_t find(const lp_queue_t *q, int p, int *found) {
  size_t lo = 0, hi = q->nlevels;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (q->levels[mid].priority == p) {
      *found = 1;
      return mid;
    }
    if (q->levels[mid].priority > p) lo = mid + 1;
    else hi = mid;
  }
  *found = 0;
  return lo;
}

static lp_qlevel_t *level_for(lp_queue_t *q, int p) {
  int found;
  size_t i = find(q, p, &found);
  if (found) return &q->levels[i];
  if (q->nlevels == q->cap) {
    size_t c = q->cap ? q->cap * 2 : 4;
    lp_qlevel_t *l = realloc(q->levels, c * sizeof(*l));
    if (l == NULL) return NULL;
    q->levels = l;
    q->cap = c;
  }
  memmove(q->levels + i + 1, q->levels + i, (q->nlevels - i) * sizeof(*q->levels));
  q->nlevels++;
  q->levels[i] = (lp_qlevel_t){.priority = p};
  return &q->levels[i];
}

static void link_after(lp_qlevel_t *l, lp_qnode_t *at, lp_qnode_t *x) {
  /* at == NULL: at the head */
  x->prev = at;
  x->next = at ? at->next : l->head;
  if (x->next) x->next->prev = x;
  else l->tail = x;
  if (at) at->next = x;
  else l->head = x;
  l->n++;
}

int lp_queue_push(lp_queue_t *q, lp_qnode_t *x) {
  lp_qlevel_t *l = level_for(q, x->priority);
  if (l == NULL) return -ENOMEM;
  link_after(l, l->tail, x);
  x->queued = 1;
  q->n++;
  return 0;
}

int lp_queue_requeue(lp_queue_t *q, lp_qnode_t *x, size_t limit) {
  lp_qlevel_t *l = level_for(q, x->priority);
  if (l == NULL) return -ENOMEM;
  lp_qnode_t *at = NULL;
  for (lp_qnode_t *c = l->head; c && c->seqno < x->seqno && limit; c = c->next, limit--) at = c;
  link_after(l, at, x);
  x->queued = 1;
  q->n++;
  return 0;
}

void lp_queue_remove(lp_queue_t *q, lp_qnode_t *x) {
  if (!x->queued) return;
  int found;
  size_t i = find(q, x->priority, &found);
  lp_qlevel_t *l = &q->levels[i];
  if (x->prev) x->prev->next = x->next;
  else l->head = x->next;
  if (x->next) x->next->prev = x->prev;
  else l->tail = x->prev;
  x->prev = x->next = NULL;
  x->queued = 0;
  q->n--;
  if (--l->n == 0) {
    memmove(q->levels + i, q->levels + i + 1, (q->nlevels - i - 1) * sizeof(*q->levels));
    q->nlevels--;
  }
}

lp_qnode_t *lp_queue_first(const lp_queue_t *q) { return q->nlevels ? q->levels[0].head : NULL; }

lp_qnode_t *lp_queue_next(const lp_queue_t *q, const lp_qnode_t *x) {
  if (x->next) return x->next;
  int found;
  size_t i = find(q, x->priority, &found);
  return i + 1 < q->nlevels ? q->levels[i + 1].head : NULL;
}
