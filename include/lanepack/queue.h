/* A model's waiting sequences: one FIFO per priority level, levels kept in
 * descending order, nodes intrusive. Insertion at a level's tail, removal from
 * anywhere and stepping to the next node cost O(1) (O(log levels) to find a
 * level), whatever the queue's length. No I/O. */
#ifndef LANEPACK_QUEUE_H
#define LANEPACK_QUEUE_H

#include <stddef.h>
#include <stdint.h>

/* Embedded in what waits. */
typedef struct lp_qnode_s {
  struct lp_qnode_s *prev, *next;  /* within its level */
  int priority;
  uint64_t seqno;                  /* arrival order: smaller is older */
  int queued;                      /* in a queue now */
} lp_qnode_t;

typedef struct lp_qlevel_s {
  int priority;
  lp_qnode_t *head, *tail;
  size_t n;
} lp_qlevel_t;

typedef struct lp_queue_s {
  lp_qlevel_t *levels;  /* owned; non-empty levels, priority descending */
  size_t nlevels, cap;
  size_t n;             /* nodes queued */
} lp_queue_t;

void lp_queue_init(lp_queue_t *q);
void lp_queue_free(lp_queue_t *q);

/* Appends x behind its level's tail (x->priority and x->seqno set by the caller).
 * Returns 0 or -ENOMEM (x is then not queued). */
int lp_queue_push(lp_queue_t *q, lp_qnode_t *x);
/* Puts x back by its seqno among the oldest of its level: a retried node goes
 * before what arrived after it. The search looks at no more than `limit` nodes
 * from the head (older ones that far back are rare: retried or passed over).
 * Returns 0 or -ENOMEM. */
int lp_queue_requeue(lp_queue_t *q, lp_qnode_t *x, size_t limit);
/* Takes x out (no-op if it is not queued). */
void lp_queue_remove(lp_queue_t *q, lp_qnode_t *x);
/* The first node (highest priority, oldest), or NULL. */
lp_qnode_t *lp_queue_first(const lp_queue_t *q);
/* The node after x in queue order, or NULL. */
lp_qnode_t *lp_queue_next(const lp_queue_t *q, const lp_qnode_t *x);

#endif
