/* Upstream HTTP calls with libcurl's multi interface driven by the libuv loop:
 * one CURLM, one timer, one uv_poll per curl socket; connections are kept alive
 * and easy handles reused. */
#ifndef LANEPACK_UPSTREAM_H
#define LANEPACK_UPSTREAM_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "lanepack/buf.h"
#include "lanepack/gather.h"

typedef struct lp_upstream_s lp_upstream_t;
typedef struct lp_xfer_s lp_xfer_t;

typedef enum {
  LP_XFER_OK = 0,        /* an HTTP answer arrived (any status) */
  LP_XFER_CONNECT,       /* could not connect (refused, unreachable) */
  LP_XFER_TIMEOUT,       /* no complete answer within the timeout */
  LP_XFER_BROKEN,        /* connection reset or closed mid-answer, bad HTTP */
  LP_XFER_TOO_LARGE,     /* answer over the transfer's size limit: cut off there */
  LP_XFER_CANCELLED      /* lp_upstream_cancel was called */
} lp_xfer_result_t;

/* Called once per transfer, from the loop, never from inside a curl call. The
 * transfer is released when the callback returns. */
typedef void (*lp_xfer_cb)(lp_xfer_t *x, void *ud);

struct lp_xfer_s {
  lp_xfer_result_t result;
  long status;           /* HTTP status when result is LP_XFER_OK */
  lp_buf_t body;         /* the answer's body, owned by the transfer (the callback
                            may move it out, leaving an empty buffer) */
  char error[256];       /* curl's message for failures */
  uint64_t start_ns, end_ns;
  int64_t inference_header_len; /* the answer's Inference-Header-Content-Length; -1: none */
  uint64_t device_ns;           /* the answer's X-Device-Time-Us, in ns; 0: none */
  /* private */
  lp_gather_t *_gather;         /* the body being read out, or NULL; borrowed */
  struct curl_slist *_headers;  /* this request's own header lines; owned */
  lp_upstream_t *_up;
  void *_easy;
  lp_xfer_cb _cb;
  void *_ud;
  lp_xfer_t *_next;      /* free list, or the active list */
  lp_xfer_t *_prev;
  size_t _max;           /* this answer's limit in bytes */
  int _active;
};

/* A finished transfer waiting for reuse keeps a body buffer up to this size;
 * a larger one is freed. */
#define LP_XFER_KEEP_BYTES (1u << 20)

/* max_answer_bytes: the ceiling of every transfer's answer limit. Returns NULL
 * on failure (curl could not start, out of memory). */
lp_upstream_t *lp_upstream_new(uv_loop_t *loop, size_t max_answer_bytes);
/* Cancels what is in flight (callbacks run with LP_XFER_CANCELLED) and frees
 * everything, up included, once the loop has run the handles' close callbacks. */
void lp_upstream_close(lp_upstream_t *up);

/* Starts a POST of body[0..len) (borrowed: it must live until the callback) or
 * a GET when body is NULL. An answer body over max_answer bytes (0: the
 * ceiling) is cut off there and the transfer ends LP_XFER_TOO_LARGE, so a
 * backend can never make the proxy hold more than its caller expects. Returns
 * the transfer, or NULL on failure. */
lp_xfer_t *lp_upstream_request(lp_upstream_t *up, const char *url, const char *body,
                               size_t len, uint64_t timeout_ms, size_t max_answer, lp_xfer_cb cb,
                               void *ud);

/* The same, with this request's own header lines (each "Name: value", the list
 * NULL-terminated; copied), which replace the default Content-Type. */
lp_xfer_t *lp_upstream_request_h(lp_upstream_t *up, const char *url, const char *body, size_t len,
                                 const char *const *headers, uint64_t timeout_ms, size_t max_answer,
                                 lp_xfer_cb cb, void *ud);

/* The same with the body a gather list (borrowed: it and every piece it
 * borrows must live until the callback; its cursor is the transfer's), read
 * out straight into curl's upload buffer, never assembled. Returns NULL when
 * the list is incomplete (out of memory) or empty. */
lp_xfer_t *lp_upstream_request_g(lp_upstream_t *up, const char *url, lp_gather_t *body,
                                 const char *const *headers, uint64_t timeout_ms, size_t max_answer,
                                 lp_xfer_cb cb, void *ud);

/* Stops a transfer: its callback runs at once with LP_XFER_CANCELLED. */
void lp_upstream_cancel(lp_xfer_t *x);
/* Stops every transfer in flight, the same way. */
void lp_upstream_cancel_all(lp_upstream_t *up);

const char *lp_xfer_result_name(lp_xfer_result_t r);

#endif
