/* The relay threads (lp-relay-N): each runs its own loop and libcurl
 * connections, sends the batches the scheduler hands it and opens their
 * answers, so that the scheduler's thread touches no byte of either; a batch
 * comes back, its outcome written, by one queue the scheduler's loop drains
 * once per wake-up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "lanepack/log.h"
#include "proxy.h"

typedef struct lp_relay_s {
  lp_relays_t *pool;
  unsigned index;
  uv_thread_t thread;
  uv_loop_t loop;          /* the relay's own; its thread's only */
  lp_wake_t wake;          /* on loop: something was queued */
  lp_upstream_t *up;       /* the relay's connections; its thread's only */
  uv_mutex_t lock;         /* guards what follows */
  lp_batch_t *in, **in_tail; /* handed over, by relay_next */
  int cancel, stop;
  unsigned inflight;       /* the scheduler's count: sent, not yet back */
  int started;
} lp_relay_t;

struct lp_relays_s {
  lp_relay_t *r;
  unsigned n;
  unsigned next;           /* where a tie between equally busy relays goes */
  lp_wake_t back;          /* on the scheduler's loop: batches came back */
  uv_mutex_t lock;         /* guards the list below */
  lp_batch_t *done, **done_tail;
  void (*finish)(lp_batch_t *bt); /* the scheduler's, for each batch back */
};

/* Appends bt to a queue, then wakes its owner: only the push that finds it
 * empty sends (the owner reads the wake-up back, then takes the queue whole
 * under the lock, as the mailbox's). */
static void push(uv_mutex_t *lock, lp_batch_t **head, lp_batch_t ***tail, lp_batch_t *bt, lp_wake_t *w) {
  bt->relay_next = NULL;
  uv_mutex_lock(lock);
  int was_empty = !*head;
  **tail = bt;
  *tail = &bt->relay_next;
  uv_mutex_unlock(lock);
  if (was_empty) lp__wake_send(w);
}

/* The whole list, in order, the queue left empty; the caller holds lock. */
static lp_batch_t *take_locked(lp_batch_t **head, lp_batch_t ***tail) {
  lp_batch_t *all = *head;
  *head = NULL;
  *tail = head;
  return all;
}

/* relay thread: the transfer ended, its outcome is in bt */
static void relay_done(lp_batch_t *bt, void *ud) {
  lp_relays_t *pool = ud;
  push(&pool->lock, &pool->done, &pool->done_tail, bt, &pool->back);
}

/* relay thread: what the scheduler queued */
static void on_wake(lp_wake_t *w) {
  lp_relay_t *r = w->data;
  uv_mutex_lock(&r->lock);
  lp_batch_t *in = take_locked(&r->in, &r->in_tail);
  int cancel = r->cancel, stop = r->stop;
  r->cancel = 0;
  uv_mutex_unlock(&r->lock);
  while (in) {
    lp_batch_t *bt = in;
    in = bt->relay_next;
    bt->on_done = relay_done;
    bt->on_done_ud = r->pool;
    if (lp__transfer_start(r->up, bt) != 0) {
      bt->unstarted = 1;
      relay_done(bt, r->pool);
    }
  }
  if (cancel || stop) lp_upstream_cancel_all(r->up); /* each comes back LP_XFER_CANCELLED */
  if (stop) {
    lp_upstream_close(r->up);
    r->up = NULL;
    lp__wake_close(&r->wake, NULL); /* the loop ends once the upstream's handles are closed */
  }
}

static void relay_main(void *arg) {
  lp_relay_t *r = arg;
  char name[16]; /* the kernel's limit, with its NUL */
  snprintf(name, sizeof(name), "lp-relay-%u", r->index);
  prctl(PR_SET_NAME, name, 0, 0, 0);
  uv_run(&r->loop, UV_RUN_DEFAULT);
}

/* scheduler thread: the batches back since the last wake-up, in order */
static void on_back(lp_wake_t *w) {
  lp_relays_t *pool = w->data;
  uv_mutex_lock(&pool->lock);
  lp_batch_t *done = take_locked(&pool->done, &pool->done_tail);
  uv_mutex_unlock(&pool->lock);
  while (done) {
    lp_batch_t *bt = done;
    done = bt->relay_next; /* before: finishing frees or reuses it */
    lp_relay_t *r = bt->relay;
    r->inflight--;
    pool->finish(bt);
  }
}

void lp__relay_send(lp_relays_t *pool, lp_batch_t *bt) {
  /* the least busy, ties in turn: batches differ in size, so a turn alone
   * would leave one relay behind another */
  lp_relay_t *r = &pool->r[pool->next++ % pool->n];
  for (unsigned i = 0; i < pool->n; i++)
    if (pool->r[i].inflight < r->inflight) r = &pool->r[i];
  r->inflight++;
  bt->relay = r;
  push(&r->lock, &r->in, &r->in_tail, bt, &r->wake);
}

static void tell(lp_relay_t *r, int stop) {
  uv_mutex_lock(&r->lock);
  if (stop) r->stop = 1;
  else r->cancel = 1;
  uv_mutex_unlock(&r->lock);
  lp__wake_send(&r->wake);
}

void lp__relays_cancel_all(lp_relays_t *pool) {
  for (unsigned i = 0; pool && i < pool->n; i++) tell(&pool->r[i], 0);
}

static void relay_free(lp_relay_t *r) {
  if (!r->started) return;
  uv_loop_close(&r->loop);
  lp__wake_destroy(&r->wake);
  uv_mutex_destroy(&r->lock);
}

static void pool_closed(uv_handle_t *h) { free(container_of((uv_poll_t *)h, lp_wake_t, poll)->data); }

void lp__relays_stop(lp_relays_t *pool, void (*drop)(lp_batch_t *bt)) {
  if (!pool) return;
  for (unsigned i = 0; i < pool->n; i++)
    if (pool->r[i].started) tell(&pool->r[i], 1);
  for (unsigned i = 0; i < pool->n; i++) {
    if (!pool->r[i].started) continue;
    uv_thread_join(&pool->r[i].thread);
    relay_free(&pool->r[i]);
  }
  /* the threads are gone: what they handed back is this thread's alone */
  while (pool->done) {
    lp_batch_t *bt = pool->done;
    pool->done = bt->relay_next;
    drop(bt);
  }
  uv_mutex_destroy(&pool->lock);
  free(pool->r);
  pool->r = NULL;
  /* the record goes with its handle, if the scheduler's loop runs again */
  lp__wake_close(&pool->back, pool_closed);
  lp__wake_destroy(&pool->back); /* the relays, its only senders, are joined */
}

static int relay_init(lp_relays_t *pool, lp_relay_t *r, unsigned index, size_t max_answer_bytes) {
  r->pool = pool;
  r->index = index;
  r->in_tail = &r->in;
  int rc = uv_loop_init(&r->loop);
  if (rc) return rc;
  if ((rc = uv_mutex_init(&r->lock)) != 0) {
    uv_loop_close(&r->loop);
    return rc;
  }
  if ((rc = lp__wake_init(&r->wake, &r->loop, on_wake, r)) != 0 ||
      !(r->up = lp_upstream_new(&r->loop, max_answer_bytes))) {
    if (!rc) {
      lp__wake_close(&r->wake, NULL);
      lp__wake_destroy(&r->wake);
    }
    uv_run(&r->loop, UV_RUN_NOWAIT); /* the handle's close */
    uv_loop_close(&r->loop);
    uv_mutex_destroy(&r->lock);
    return rc ? rc : -ENOMEM;
  }
  if ((rc = uv_thread_create(&r->thread, relay_main, r)) != 0) {
    lp_upstream_close(r->up);
    lp__wake_close(&r->wake, NULL);
    lp__wake_destroy(&r->wake);
    uv_run(&r->loop, UV_RUN_DEFAULT);
    uv_loop_close(&r->loop);
    uv_mutex_destroy(&r->lock);
    return rc;
  }
  r->started = 1;
  return 0;
}

lp_relays_t *lp__relays_start(uv_loop_t *loop, unsigned n, size_t max_answer_bytes, void (*finish)(lp_batch_t *bt)) {
  lp_relays_t *pool = calloc(1, sizeof(*pool));
  if (!pool) return NULL;
  pool->r = calloc(n, sizeof(*pool->r));
  pool->n = n;
  pool->finish = finish;
  pool->done_tail = &pool->done;
  if (!pool->r || uv_mutex_init(&pool->lock) != 0) {
    free(pool->r);
    free(pool);
    return NULL;
  }
  if (lp__wake_init(&pool->back, loop, on_back, pool) != 0) {
    uv_mutex_destroy(&pool->lock);
    free(pool->r);
    free(pool);
    return NULL;
  }
  for (unsigned i = 0; i < n; i++) {
    int rc = relay_init(pool, &pool->r[i], i, max_answer_bytes);
    if (rc) {
      lp_log(LP_LOG_ERROR, "relay thread did not start", "\"relay\": %u, \"error\": \"%s\"", i, uv_strerror(rc));
      lp__relays_stop(pool, NULL); /* nothing was sent: nothing to drop */
      return NULL;
    }
  }
  lp_log(LP_LOG_INFO, "relay threads", "\"relays\": %u", n);
  return pool;
}
