/* The priority queue and the timer heap against plain reference models, over
 * random operation sequences. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "lanepack/queue.h"
#include "lanepack/rng.h"
#include "lanepack/timeheap.h"

#define N 3000

/* The order a reference keeps: priority descending, then seqno ascending. */
static int ref_cmp(const void *a, const void *b) {
  const lp_qnode_t *x = *(lp_qnode_t *const *)a, *y = *(lp_qnode_t *const *)b;
  if (x->priority != y->priority) return x->priority > y->priority ? -1 : 1;
  return x->seqno < y->seqno ? -1 : x->seqno > y->seqno;
}

START_TEST(queue_matches_sorted_reference) {
  static lp_qnode_t nodes[N];
  static lp_qnode_t *ref[N];
  lp_rng_t r;
  lp_rng_seed(&r, 11);
  lp_queue_t q;
  lp_queue_init(&q);
  memset(nodes, 0, sizeof(nodes));
  uint64_t seq = 0;
  for (int round = 0; round < 40000; round++) {
    lp_qnode_t *x = &nodes[lp_rng_next(&r) % N];
    int op = (int)(lp_rng_next(&r) % 3);
    if (!x->queued && op != 2) {
      x->priority = (int)(lp_rng_next(&r) % 5) - 2;
      x->seqno = ++seq;
      REQUIRE(lp_queue_push(&q, x) == 0);
    } else if (!x->queued) {
      /* a retry: an old seqno goes back among the oldest */
      x->priority = (int)(lp_rng_next(&r) % 5) - 2;
      x->seqno = seq ? lp_rng_next(&r) % seq : 0;
      REQUIRE(lp_queue_requeue(&q, x, (size_t)-1) == 0);
    } else {
      lp_queue_remove(&q, x);
      REQUIRE(!x->queued);
    }
    if (round % 997 == 0 || round == 39999) {
      size_t n = 0;
      for (int i = 0; i < N; i++)
        if (nodes[i].queued) ref[n++] = &nodes[i];
      REQUIRE(n == q.n);
      qsort(ref, n, sizeof(ref[0]), ref_cmp);
      size_t k = 0;
      for (lp_qnode_t *c = lp_queue_first(&q); c; c = lp_queue_next(&q, c)) {
        REQUIRE(k < n);
        /* equal (priority, seqno) pairs may come in either order */
        REQUIRE(c->priority == ref[k]->priority && c->seqno == ref[k]->seqno);
        k++;
      }
      REQUIRE(k == n);
    }
  }
  lp_queue_free(&q);
}
END_TEST

START_TEST(queue_requeue_limit_and_empty_levels) {
  lp_qnode_t a = {.priority = 0, .seqno = 5}, b = {.priority = 0, .seqno = 6},
             c = {.priority = 1, .seqno = 7}, d = {.priority = 0, .seqno = 1};
  lp_queue_t q;
  lp_queue_init(&q);
  ck_assert_ptr_null(lp_queue_first(&q));
  lp_queue_push(&q, &a);
  lp_queue_push(&q, &b);
  lp_queue_push(&q, &c);
  ck_assert_uint_eq(q.nlevels, 2);
  ck_assert_ptr_eq(lp_queue_first(&q), &c);
  lp_queue_remove(&q, &c);
  ck_assert_uint_eq(q.nlevels, 1); /* an empty level goes */
  lp_queue_requeue(&q, &d, 0);      /* no search: at the head */
  ck_assert_ptr_eq(lp_queue_first(&q), &d);
  ck_assert_ptr_eq(lp_queue_next(&q, &d), &a);
  ck_assert_ptr_eq(lp_queue_next(&q, &b), NULL);
  lp_queue_remove(&q, &d);
  lp_queue_remove(&q, &d); /* twice: no-op */
  ck_assert_uint_eq(q.n, 2);
  lp_queue_free(&q);
}
END_TEST

START_TEST(timeheap_matches_reference) {
  static lp_theap_node_t nodes[N];
  lp_rng_t r;
  lp_rng_seed(&r, 12);
  lp_theap_t h;
  lp_theap_init(&h);
  for (int i = 0; i < N; i++) lp_theap_node_init(&nodes[i]);
  for (int round = 0; round < 60000; round++) {
    lp_theap_node_t *x = &nodes[lp_rng_next(&r) % N];
    switch (lp_rng_next(&r) % 4) {
      case 0: case 1: REQUIRE(lp_theap_set(&h, x, lp_rng_next(&r) % 100000) == 0); break;
      case 2: lp_theap_remove(&h, x); break;
      default: {
        lp_theap_node_t *t = lp_theap_top(&h);
        if (t) lp_theap_remove(&h, t);
      }
    }
    if (round % 499 == 0) {
      uint64_t min = UINT64_MAX;
      size_t n = 0;
      for (int i = 0; i < N; i++)
        if (lp_theap_contains(&nodes[i])) {
          n++;
          if (nodes[i].at < min) min = nodes[i].at;
          REQUIRE(h.v[nodes[i].idx] == &nodes[i]);
        }
      REQUIRE(n == h.n);
      REQUIRE(n == 0 || lp_theap_top(&h)->at == min);
    }
  }
  /* drains in time order */
  uint64_t last = 0;
  while (lp_theap_top(&h)) {
    lp_theap_node_t *t = lp_theap_top(&h);
    REQUIRE(t->at >= last);
    last = t->at;
    lp_theap_remove(&h, t);
    REQUIRE(!lp_theap_contains(t));
  }
  lp_theap_free(&h);
}
END_TEST

LP_TEST_MAIN("queue", queue_matches_sorted_reference, queue_requeue_limit_and_empty_levels,
             timeheap_matches_reference)
