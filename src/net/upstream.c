/* libcurl multi on the libuv loop. The pattern of curl's docs/examples/
 * multi-uv.c, with its known pitfalls handled: socket close owned through
 * CURLOPT_CLOSESOCKETFUNCTION (so libuv never polls a closed fd), poll errors
 * passed to curl as CURL_CSELECT_ERR, "run now" timeouts through a one-shot
 * idle handle instead of a 0 ms timer, and completions drained after every
 * socket action. */
#include "lanepack/upstream.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <strings.h>
#include <unistd.h>

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

typedef struct {
  uv_poll_t poll;
  curl_socket_t fd;
  lp_upstream_t *up;
} sock_ctx_t;

struct lp_upstream_s {
  uv_loop_t *loop;
  CURLM *multi;
  uv_timer_t timer;
  uv_idle_t kick;          /* curl asked for a timeout of 0: act on the next turn */
  int kicking;
  sock_ctx_t **by_fd;      /* poll context per socket fd; owned entries */
  size_t by_fd_cap;
  lp_xfer_t *free_list;    /* finished transfers with their easy handles, for reuse */
  lp_xfer_t *active;       /* transfers in flight, doubly linked through _next/_prev */
  struct curl_slist *headers;
  size_t max_answer;        /* the ceiling of any transfer's limit */
  int closing;
  int handles_open;
};

/* curl's global set-up, once per process, whatever thread asks first */
static once_flag curl_once = ONCE_FLAG_INIT;
static int curl_init_rc;

static void curl_start(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1; }

const char *lp_xfer_result_name(lp_xfer_result_t r) {
  switch (r) {
    case LP_XFER_OK: return "ok";
    case LP_XFER_CONNECT: return "connect";
    case LP_XFER_TIMEOUT: return "timeout";
    case LP_XFER_BROKEN: return "broken";
    case LP_XFER_TOO_LARGE: return "too_large";
    case LP_XFER_CANCELLED: return "cancelled";
  }
  return "?";
}

static void check_done(lp_upstream_t *up);

static void socket_action(lp_upstream_t *up, curl_socket_t fd, int flags) {
  int running;
  curl_multi_socket_action(up->multi, fd, flags, &running);
  check_done(up);
}

static void on_poll(uv_poll_t *h, int status, int events) {
  sock_ctx_t *ctx = container_of(h, sock_ctx_t, poll);
  int flags = 0;
  if (status < 0) flags = CURL_CSELECT_ERR;
  else {
    if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  }
  socket_action(ctx->up, ctx->fd, flags);
}

static void maybe_free(lp_upstream_t *up);

static void on_ctx_closed(uv_handle_t *h) {
  sock_ctx_t *ctx = container_of(h, sock_ctx_t, poll);
  lp_upstream_t *up = ctx->up;
  free(ctx);
  up->handles_open--;
  maybe_free(up);
}

static void drop_ctx(lp_upstream_t *up, curl_socket_t fd) {
  if (fd < 0 || up->by_fd == NULL || (size_t)fd >= up->by_fd_cap || !up->by_fd[fd]) return;
  sock_ctx_t *ctx = up->by_fd[fd];
  up->by_fd[fd] = NULL;
  uv_poll_stop(&ctx->poll);
  uv_close((uv_handle_t *)&ctx->poll, on_ctx_closed);
}

/* CURLMOPT_SOCKETFUNCTION: start, change or stop polling a socket. The context
 * is found by fd, never through curl's socketp: curl may report REMOVE after
 * the socket was closed (and the context dropped) in the close callback. A
 * context lives as long as its socket: made at the first poll, dropped when
 * curl closes the socket. */
static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
  lp_upstream_t *up = userp;
  (void)easy;
  (void)socketp;
  if (what == CURL_POLL_REMOVE) {
    /* the connection goes idle in curl's pool (or is about to close): stop
     * polling, but keep the handle for its next transfer; it is closed with
     * the socket (on_close_socket), so a pooled connection's next batch costs
     * one poll registration, not a handle's set-up and tear-down */
    if (fd >= 0 && (size_t)fd < up->by_fd_cap && up->by_fd[fd]) uv_poll_stop(&up->by_fd[fd]->poll);
    return 0;
  }
  if ((size_t)fd >= up->by_fd_cap) {
    size_t cap = up->by_fd_cap ? up->by_fd_cap : 64;
    while (cap <= (size_t)fd) cap *= 2;
    sock_ctx_t **n = realloc(up->by_fd, cap * sizeof(*n));
    if (!n) return -1;
    memset(n + up->by_fd_cap, 0, (cap - up->by_fd_cap) * sizeof(*n));
    up->by_fd = n;
    up->by_fd_cap = cap;
  }
  sock_ctx_t *ctx = up->by_fd[fd];
  if (!ctx) {
    ctx = calloc(1, sizeof(*ctx));
    if (!ctx) return -1;
    ctx->fd = fd;
    ctx->up = up;
    if (uv_poll_init_socket(up->loop, &ctx->poll, fd) < 0) {
      free(ctx);
      return -1;
    }
    up->handles_open++;
    up->by_fd[fd] = ctx;
  }
  int events = 0;
  if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) events |= UV_READABLE;
  if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) events |= UV_WRITABLE;
  uv_poll_start(&ctx->poll, events, on_poll);
  return 0;
}

/* CURLOPT_CLOSESOCKETFUNCTION: stop polling before the fd is closed. */
static int on_close_socket(void *clientp, curl_socket_t fd) {
  drop_ctx(clientp, fd);
  return close(fd);
}

static void on_timer(uv_timer_t *t) {
  lp_upstream_t *up = container_of(t, lp_upstream_t, timer);
  socket_action(up, CURL_SOCKET_TIMEOUT, 0);
}

static void on_kick(uv_idle_t *h) {
  lp_upstream_t *up = container_of(h, lp_upstream_t, kick);
  uv_idle_stop(&up->kick);
  up->kicking = 0;
  socket_action(up, CURL_SOCKET_TIMEOUT, 0);
}

/* CURLMOPT_TIMERFUNCTION: only arms handles; never calls back into curl. */
static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp) {
  lp_upstream_t *up = userp;
  (void)multi;
  if (timeout_ms < 0) {
    uv_timer_stop(&up->timer);
  } else if (timeout_ms == 0) {
    uv_timer_stop(&up->timer);
    if (!up->kicking) {
      up->kicking = 1;
      uv_idle_start(&up->kick, on_kick);
    }
  } else {
    uv_timer_start(&up->timer, on_timer, (uint64_t)timeout_ms, 0);
  }
  return 0;
}

static size_t on_write(char *data, size_t size, size_t n, void *userp) {
  lp_xfer_t *x = userp;
  size_t len = size * n;
  if (len > x->_max - x->body.len) { /* body.len <= _max always */
    x->result = LP_XFER_TOO_LARGE;
    return 0; /* curl stops the transfer */
  }
  lp_buf_append(&x->body, data, len);
  return x->body.oom ? 0 : len;
}

/* Picks the one answer header the v2 protocol needs. */
static size_t on_header(char *data, size_t size, size_t n, void *userp) {
  lp_xfer_t *x = userp;
  size_t len = size * n;
  static const char name[] = "inference-header-content-length:";
  if (len > sizeof(name) - 1 && strncasecmp(data, name, sizeof(name) - 1) == 0) {
    char num[32];
    size_t k = len - (sizeof(name) - 1);
    if (k >= sizeof(num)) k = sizeof(num) - 1;
    memcpy(num, data + sizeof(name) - 1, k);
    num[k] = '\0';
    char *end;
    long long v = strtoll(num, &end, 10);
    while (*end == ' ' || *end == '\r' || *end == '\n') end++;
    x->inference_header_len = *end == '\0' && v >= 0 ? v : -2; /* -2: present but bad */
  }
  static const char dev[] = "x-device-time-us:";
  if (len > sizeof(dev) - 1 && strncasecmp(data, dev, sizeof(dev) - 1) == 0) {
    unsigned long long us = strtoull(data + sizeof(dev) - 1, NULL, 10);
    x->device_ns = us < (1ull << 40) ? us * 1000ull : 0;
  }
  return len;
}

static void finish(lp_upstream_t *up, lp_xfer_t *x) {
  x->end_ns = uv_hrtime();
  x->_active = 0;
  if (x->_prev) x->_prev->_next = x->_next;
  else up->active = x->_next;
  if (x->_next) x->_next->_prev = x->_prev;
  x->_prev = NULL;
  x->_cb(x, x->_ud);
  /* back to the free list: the easy handle keeps its settings for reuse, the
   * body its buffer up to a batch's usual size; a larger one (a big answer
   * once) is given back, not kept by an idle transfer for ever */
  if (x->body.cap > LP_XFER_KEEP_BYTES) {
    lp_buf_free(&x->body);
    lp_buf_init(&x->body);
  }
  lp_buf_reset(&x->body);
  if (x->_headers) {
    curl_slist_free_all(x->_headers);
    x->_headers = NULL;
    curl_easy_setopt(x->_easy, CURLOPT_HTTPHEADER, up->headers);
  }
  x->_next = up->free_list;
  up->free_list = x;
}

static lp_xfer_result_t classify(CURLcode rc) {
  switch (rc) {
    case CURLE_OK: return LP_XFER_OK;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return LP_XFER_CONNECT;
    case CURLE_OPERATION_TIMEDOUT: return LP_XFER_TIMEOUT;
    case CURLE_FILESIZE_EXCEEDED: return LP_XFER_TOO_LARGE; /* its Content-Length says so */
    default: return LP_XFER_BROKEN;
  }
}

/* Drains curl's completion messages. The transfer pointer is read from
 * CURLINFO_PRIVATE before the handle is removed (the message dies with it). */
static void check_done(lp_upstream_t *up) {
  CURLMsg *m;
  int left;
  while ((m = curl_multi_info_read(up->multi, &left))) {
    if (m->msg != CURLMSG_DONE) continue;
    CURL *easy = m->easy_handle;
    CURLcode rc = m->data.result;
    lp_xfer_t *x = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
    curl_multi_remove_handle(up->multi, easy);
    if (!x) continue;
    if (x->result != LP_XFER_TOO_LARGE) x->result = classify(rc);
    if (x->result == LP_XFER_TOO_LARGE) /* curl's words would be about the write callback */
      snprintf(x->error, sizeof(x->error), "the answer passed its limit of %zu bytes", x->_max);
    else if (rc != CURLE_OK && !x->error[0])
      snprintf(x->error, sizeof(x->error), "%s", curl_easy_strerror(rc));
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &x->status);
    finish(up, x);
  }
}

lp_upstream_t *lp_upstream_new(uv_loop_t *loop, size_t max_answer) {
  call_once(&curl_once, curl_start);
  if (curl_init_rc) return NULL;
  lp_upstream_t *up = calloc(1, sizeof(*up));
  if (!up) return NULL;
  up->loop = loop;
  up->max_answer = max_answer;
  up->multi = curl_multi_init();
  up->headers = curl_slist_append(NULL, "Content-Type: application/json");
  /* no "Expect: 100-continue" round trip before large batch bodies */
  if (up->headers) up->headers = curl_slist_append(up->headers, "Expect:");
  if (!up->multi || !up->headers) {
    if (up->multi) curl_multi_cleanup(up->multi);
    curl_slist_free_all(up->headers);
    free(up);
    return NULL;
  }
  uv_timer_init(loop, &up->timer);
  uv_idle_init(loop, &up->kick);
  up->handles_open = 2;
  curl_multi_setopt(up->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(up->multi, CURLMOPT_SOCKETDATA, up);
  curl_multi_setopt(up->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
  curl_multi_setopt(up->multi, CURLMOPT_TIMERDATA, up);
  return up;
}

lp_xfer_t *lp_upstream_request(lp_upstream_t *up, const char *url, const char *body, size_t len,
                               uint64_t timeout_ms, size_t max_answer, lp_xfer_cb cb, void *ud) {
  return lp_upstream_request_h(up, url, body, len, NULL, timeout_ms, max_answer, cb, ud);
}

/* The body read from a gather list, in the upload buffer's steps. */
static size_t on_read(char *dst, size_t size, size_t n, void *userp) {
  lp_xfer_t *x = userp;
  return lp_gather_read(x->_gather, dst, size * n);
}

/* curl rewinds a body it must send again (a reused connection the backend
 * had closed): the gather list's cursor goes back. */
static int on_seek(void *userp, curl_off_t offset, int origin) {
  lp_xfer_t *x = userp;
  if (origin != SEEK_SET || offset < 0) return CURL_SEEKFUNC_CANTSEEK;
  return lp_gather_seek(x->_gather, (size_t)offset) ? CURL_SEEKFUNC_FAIL : CURL_SEEKFUNC_OK;
}

static lp_xfer_t *start(lp_upstream_t *up, const char *url, const char *body, size_t len, lp_gather_t *g,
                        const char *const *headers, uint64_t timeout_ms, size_t max_answer, lp_xfer_cb cb,
                        void *ud) {
  if (up->closing) return NULL;
  lp_xfer_t *x = up->free_list;
  if (x) {
    up->free_list = x->_next;
  } else {
    x = calloc(1, sizeof(*x));
    if (!x) return NULL;
    x->_up = up;
    lp_buf_init(&x->body);
    x->_easy = curl_easy_init();
    if (!x->_easy) {
      free(x);
      return NULL;
    }
    CURL *e = x->_easy;
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->error);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, up->headers);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, up);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    /* A batch is hundreds of KB each way: with curl's defaults (16 KB down,
     * 64 KB up) it moves in dozens of recv/send calls, each with its own poll
     * and poll-interest change. Buffers sized to batches take a few (larger
     * ones measured no better: they leave the cache). */
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024);
    curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 256L * 1024);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(e, CURLOPT_READDATA, x);
    curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, on_seek);
    curl_easy_setopt(e, CURLOPT_SEEKDATA, x);
  }
  CURL *e = x->_easy;
  x->result = LP_XFER_OK;
  x->status = 0;
  x->error[0] = '\0';
  x->_cb = cb;
  x->_ud = ud;
  x->_next = NULL;
  x->start_ns = uv_hrtime();
  x->inference_header_len = -1;
  x->device_ns = 0;
  x->_max = max_answer && max_answer < up->max_answer ? max_answer : up->max_answer;
  lp_buf_reset(&x->body);
  if (headers) {
    struct curl_slist *l = curl_slist_append(NULL, "Expect:");
    for (size_t i = 0; l && headers[i]; i++) {
      struct curl_slist *n = curl_slist_append(l, headers[i]);
      if (!n) {
        curl_slist_free_all(l);
        l = NULL;
      } else {
        l = n;
      }
    }
    if (!l) {
      x->_next = up->free_list;
      up->free_list = x;
      return NULL;
    }
    x->_headers = l;
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, l);
  }
  curl_easy_setopt(e, CURLOPT_URL, url);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
  /* an answer announcing more than the limit is refused before it is read */
  curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)x->_max);
  x->_gather = g;
  if (g) {
    /* no POSTFIELDS: curl pulls the body through on_read, its length known
     * up front (Content-Length, no chunking) */
    (void)lp_gather_seek(g, 0);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, NULL);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
  } else if (body) {
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
  } else {
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  }
  if (curl_multi_add_handle(up->multi, e) != CURLM_OK) {
    if (x->_headers) {
      curl_slist_free_all(x->_headers);
      x->_headers = NULL;
      curl_easy_setopt(e, CURLOPT_HTTPHEADER, up->headers);
    }
    x->_next = up->free_list;
    up->free_list = x;
    return NULL;
  }
  x->_active = 1;
  x->_prev = NULL;
  x->_next = up->active;
  if (up->active) up->active->_prev = x;
  up->active = x;
  return x;
}

lp_xfer_t *lp_upstream_request_h(lp_upstream_t *up, const char *url, const char *body, size_t len,
                                 const char *const *headers, uint64_t timeout_ms, size_t max_answer,
                                 lp_xfer_cb cb, void *ud) {
  return start(up, url, body, len, NULL, headers, timeout_ms, max_answer, cb, ud);
}

lp_xfer_t *lp_upstream_request_g(lp_upstream_t *up, const char *url, lp_gather_t *body,
                                 const char *const *headers, uint64_t timeout_ms, size_t max_answer,
                                 lp_xfer_cb cb, void *ud) {
  size_t len = lp_gather_len(body);
  if (!len) return NULL; /* incomplete (no memory) or empty: not a body to send */
  return start(up, url, NULL, len, body, headers, timeout_ms, max_answer, cb, ud);
}

void lp_upstream_cancel(lp_xfer_t *x) {
  if (!x->_active) return;
  lp_upstream_t *up = x->_up;
  curl_multi_remove_handle(up->multi, x->_easy);
  x->result = LP_XFER_CANCELLED;
  finish(up, x);
}

void lp_upstream_cancel_all(lp_upstream_t *up) {
  while (up->active) lp_upstream_cancel(up->active);
}

static void maybe_free(lp_upstream_t *up) {
  if (up->closing && up->handles_open == 0) free(up);
}

static void on_handle_closed(uv_handle_t *h) {
  lp_upstream_t *up = h->data;
  up->handles_open--;
  maybe_free(up);
}

void lp_upstream_close(lp_upstream_t *up) {
  up->closing = 1; /* callbacks of the cancelled cannot start new transfers */
  lp_upstream_cancel_all(up);
  for (lp_xfer_t *x = up->free_list, *n; x; x = n) {
    n = x->_next;
    curl_easy_cleanup(x->_easy);
    lp_buf_free(&x->body);
    free(x);
  }
  up->free_list = NULL;
  curl_multi_cleanup(up->multi); /* closes idle connections: contexts dropped on close */
  for (size_t i = 0; i < up->by_fd_cap; i++) drop_ctx(up, (curl_socket_t)i);
  free(up->by_fd);
  up->by_fd = NULL;
  up->by_fd_cap = 0;
  curl_slist_free_all(up->headers);
  up->timer.data = up->kick.data = up;
  uv_close((uv_handle_t *)&up->timer, on_handle_closed);
  uv_close((uv_handle_t *)&up->kick, on_handle_closed);
}
