/* Runs on any thread (send) and on the owner's loop (the callback): one
 * thread waking another's loop through an eventfd it polls, as h2o does. */
#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "handoff/handoff.h"

/* Why not uv_async_t: libuv 1.44's receiver, to run the callback, waits for
 * every sender that has marked the handle pending to finish its write(): it
 * spins 997 pauses, then sched_yield()s, and again. A sender descheduled
 * inside that write() (a wake-up is the kernel's costliest part of it) kept
 * the scheduler spinning for about a tenth of its time with 2 fronts and 2
 * relay threads (round 7) on 2 cores. An eventfd the owner reads before it takes its queue
 * needs no such wait: a push after the read finds the queue empty and writes
 * again (see lp__mbox_push). */
static void on_readable(uv_poll_t *h, int status, int events) {
  lp_wake_t *w = container_of(h, lp_wake_t, poll);
  (void)events;
  uint64_t n;
  /* the counter back to 0 before the queue is taken: a send from now on wakes
   * the loop again; EAGAIN: another read took it (a spurious wake is harmless) */
  if (status == 0 && read(w->fd, &n, sizeof(n)) < 0 && errno != EAGAIN) {
    /* nothing else can fail on an eventfd we own: the queue is taken anyway */
  }
  w->cb(w);
}

int lp__wake_init(lp_wake_t *w, uv_loop_t *loop, lp_wake_cb cb, void *data) {
  w->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (w->fd < 0) return -errno;
  w->cb = cb;
  w->data = data;
  int rc = uv_poll_init(loop, &w->poll, w->fd);
  if (rc) {
    close(w->fd);
    w->fd = -1;
    return rc;
  }
  if ((rc = uv_poll_start(&w->poll, UV_READABLE, on_readable)) != 0) {
    uv_close((uv_handle_t *)&w->poll, NULL); /* the owner's loop finishes it */
    close(w->fd);
    w->fd = -1;
    return rc;
  }
  return 0;
}

void lp__wake_send(lp_wake_t *w) {
  uint64_t one = 1;
  /* EAGAIN only at a counter of 2^64-2: the owner is already due to wake */
  while (write(w->fd, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void lp__wake_close(lp_wake_t *w, uv_close_cb cb) { uv_close((uv_handle_t *)&w->poll, cb); }

void lp__wake_destroy(lp_wake_t *w) {
  if (w->fd >= 0) close(w->fd);
  w->fd = -1;
}
