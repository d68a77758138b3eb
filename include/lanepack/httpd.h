/* A small HTTP/1.1 server on libuv and llhttp, shared by the proxy and the
 * emulator: keep-alive, pipelining with answers in request order, chunked and
 * Content-Length bodies, Expect: 100-continue, and limits on header size, body
 * size, connections, pipelined requests and idle or slow clients. */
#ifndef LANEPACK_HTTPD_H
#define LANEPACK_HTTPD_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "lanepack/buf.h"
#include "lanepack/trace.h"

/* Request methods, as llhttp numbers them. */
#define LP_HTTP_DELETE 0
#define LP_HTTP_GET 1
#define LP_HTTP_HEAD 2
#define LP_HTTP_POST 3
#define LP_HTTP_PUT 4

/* A client's X-Request-Id is kept (and echoed) only if it is 1..LP_HTTP_ID_MAX
 * bytes of printable ASCII other than '"' and '\\' (no space, no control
 * byte); otherwise the server makes one. */
#define LP_HTTP_ID_MAX 63

typedef struct lp_httpd_s lp_httpd_t;
typedef struct lp_http_conn_s lp_http_conn_t;

/* The producer of a streamed answer's body: appends the next bytes to out
 * (about `room`; at least one byte while more follow), and returns 1 while
 * more follow, 0 after the last, or negative to give up (the connection then
 * closes: the client sees the answer cut short). Called once more with out
 * NULL when the stream ends, however it ends (written whole, the connection
 * closed first, given up): free what ud holds then. Called on the loop's
 * thread only, one piece per loop turn at most, and only while the
 * connection's earlier pieces are taken by the client and the server's
 * unsent bytes are within max_unsent_bytes_total. */
typedef int (*lp_http_stream_cb)(void *ud, lp_buf_t *out, size_t room);

typedef struct lp_http_req_s {
  int method;             /* llhttp_method_t: HTTP_GET, HTTP_POST, ...; -1 while unknown
                             (a request refused before its method was read) */
  char *url;              /* NUL-terminated, owned */
  size_t url_len;
  size_t path_len;        /* url[0..path_len) is the path, before any '?' */
  char content_type[96];  /* "" when absent; truncated if longer */
  char *authorization;    /* the whole Authorization value (NUL-terminated, owned), NULL
                             when absent; bounded by max_header_bytes */
  size_t authorization_len;
  char request_id[64];    /* X-Request-Id as sent when valid (see LP_HTTP_ID_MAX), else
                             one made here; echoed in the answer's head */
  /* W3C traceparent of this request's span in the server: the client's
   * trace-id and flags when its traceparent was valid (one header, see
   * lanepack/trace.h), else a new trace; a new span id either way. Sent back
   * in the answer's head; never the client's bytes as given. */
  char traceparent[LP_TRACEPARENT_SIZE];
  /* the client's tracestate, cleaned (lanepack/trace.h), kept only with its
   * valid traceparent; "" when none. Sent back in the answer's head. */
  char tracestate[LP_TRACESTATE_SIZE];
  int has_body_length;    /* Content-Length given or chunked */
  int64_t inference_header_len; /* Inference-Header-Content-Length (v2 binary): -1 absent, -2 bad */
  char *body;             /* owned; NUL-terminated (not counted in body_len) */
  size_t body_len;
  uint64_t start_ns;      /* when the request's first byte was parsed (uv_hrtime) */
  void *app;              /* the handler's own state for this request */
  /* private */
  lp_http_conn_t *_conn;
  struct lp_http_req_s *_next;
  size_t _body_cap;
  size_t _auth_cap;
  size_t _charged;        /* body bytes charged to the server's in-flight budget */
  int _answered;
  int _close_after;
  int _continue;          /* Expect: 100-continue, to be sent once earlier answers are */
  int _http10;            /* an HTTP/1.0 request: no chunked answer */
  int _piece_writing;     /* a streamed answer's piece is being written (uv_write) */
  size_t _out_charged;    /* answer bytes charged to the server's unsent count */
  size_t _reserved;       /* ... of them, by lp_http_reserve */
  lp_http_stream_cb _stream; /* a streamed answer not yet ended, and its producer's state */
  void *_stream_ud;
  char _ihcl[24];
  char _url_inline[128];  /* url lives here while it fits: no allocation */
  lp_buf_t _resp;
  size_t _resp_off;       /* the answer starts here in _resp */
  struct lp_http_req_s *_group; /* the first of the answers written with this one */
  uv_write_t _write;
} lp_http_req_t;

/* Counts that several servers share (one per thread on one port), so that
 * their limits hold for the process, not for each server: the kernel spreads
 * connections over SO_REUSEPORT listeners unevenly, and an equal share each
 * refused below the limit. Updated atomically from every server's thread. */
typedef struct lp_httpd_shared_s {
  size_t conns;              /* open connections, counted against max_connections */
  size_t body_bytes;         /* bodies being received, against max_body_bytes_in_flight */
  size_t unsent_bytes;       /* answers held until their clients take them, and what
                                streamed answers hold to write the rest: against
                                max_unsent_bytes_total */
  size_t reserved_bytes;     /* ... of them, what streams' producers hold (lp_http_reserve) */
} lp_httpd_shared_t;

typedef struct lp_httpd_config_s {
  /* A request is complete: answer it with lp_http_respond, now or later. */
  void (*on_request)(lp_http_req_t *req, void *ud);
  /* The client went away before its answer: drop every reference to req,
   * which is freed when this returns. May be NULL if requests are answered
   * before on_request returns. */
  void (*on_cancel)(lp_http_req_t *req, void *ud);
  /* The server itself refuses a request (a limit, bad framing, a repeated
   * header, a timeout; code is the error's code, msg its message, headers
   * the extra header lines it would send or NULL): called for counting and
   * logging, and to answer req in the dialect of its route. Returns 1 when it
   * answered req, 0 for the server's own answer ({"error": {"code",
   * "message"}}). req's url may be "" and its method -1 when the refusal came
   * before they were read. May be NULL. */
  int (*on_reject)(lp_http_req_t *req, int status, const char *code, const char *msg, const char *headers,
                   void *ud);
  void *ud;
  size_t max_header_bytes;   /* request line and headers; over it: 431 */
  size_t max_body_bytes;     /* over it: 413 */
  size_t max_connections;    /* over it: 503 and close */
  size_t max_pipeline;       /* unanswered requests per connection before reading pauses */
  uint64_t idle_timeout_ms;  /* a connection with nothing in progress is closed */
  /* requests a connection carries: the last one's answer says Connection: close
   * (clients of a Service then reconnect, and may land on a new Pod); 0 = no limit */
  uint64_t max_requests_per_connection;
  uint64_t request_timeout_ms; /* a request must arrive whole within this: else 408 */
  size_t max_unsent_bytes;   /* written but not taken by the peer: over it, reading stops */
  /* Bytes of answers held for their clients (written and not yet taken, or
   * waiting behind earlier answers; a streamed answer's piece being written
   * and what its producer holds) on all connections together. Past it, a
   * connection with bytes still unsent is not read (its pipelined requests
   * wait), streamed answers make no new piece until bytes are taken, and a
   * stream is refused (lp_http_respond_stream). 0 = no bound. */
  size_t max_unsent_bytes_total;
  /* Bytes of bodies being received (not yet handed to on_request) on all
   * connections together; a body that would pass it gets 503 with
   * Retry-After before it is buffered. 0 = no bound. */
  size_t max_body_bytes_in_flight;
  /* Several servers (one per thread) on one port: the listener is bound with
   * SO_REUSEPORT, so that each has its own and the kernel spreads connections. */
  int reuseport;
  /* Made request ids of servers that share id_base (nonzero) are unique across
   * them: server id_shard of id_shards takes every id_shards-th. 0: alone. */
  uint64_t id_base;
  uint32_t id_shard, id_shards;
  /* The counts max_connections and max_body_bytes_in_flight bound: shared
   * with other servers (not owned; it must outlive them), or NULL for the
   * server's own. */
  lp_httpd_shared_t *shared;
} lp_httpd_config_t;

/* Fills cfg with defaults (handlers left NULL). */
void lp_httpd_config_default(lp_httpd_config_t *cfg);

/* Returns NULL on allocation failure. The server owns itself until
 * lp_httpd_close's callback. */
lp_httpd_t *lp_httpd_new(uv_loop_t *loop, const lp_httpd_config_t *cfg);

/* Listens on "HOST:PORT" ("[::1]:0" picks a free port); *port gets the port
 * bound. Returns 0 or a negative libuv error (UV_EINVAL for a bad address). */
int lp_httpd_listen(lp_httpd_t *s, const char *addr, int *port);

/* Stops accepting; connections close once their answers are written (idle ones
 * at once). done(arg) runs when every handle is closed and s is freed. */
void lp_httpd_close(lp_httpd_t *s, void (*done)(void *arg), void *arg);

size_t lp_httpd_connections(const lp_httpd_t *s);

/* New limits (cfg's sizes and times; its handlers are ignored) for what comes
 * next: open connections and requests being read keep going under them. */
void lp_httpd_set_limits(lp_httpd_t *s, const lp_httpd_config_t *cfg);

/* Answers req: status, extra header lines (each ending "\r\n", may be NULL), a
 * content type and the body (copied). The answer goes out when every earlier
 * request on the connection has been answered. */
void lp_http_respond(lp_http_req_t *req, int status, const char *headers,
                     const char *content_type, const void *body, size_t len);

/* Answers with {"error": {"code": code, "message": message<extra>}}; extra (may
 * be NULL) is more members of the error object, starting with ", ". */
void lp_http_respond_error(lp_http_req_t *req, int status, const char *headers,
                           const char *code, const char *message, const char *extra);

/* Appends the status line and headers for a body of len bytes to out; the
 * caller then appends the body and hands it over with lp_http_respond_raw. */
void lp_http_head(lp_http_req_t *req, lp_buf_t *out, int status, const char *headers,
                  const char *content_type, size_t len);
/* Answers with a complete response built by lp_http_head + body; takes the
 * buffer's contents (out is left empty and reusable). */
void lp_http_respond_raw(lp_http_req_t *req, lp_buf_t *out);
/* The same for an answer that starts at out->data + off (a body built behind
 * room left for its head, so that it is never copied). */
void lp_http_respond_raw_at(lp_http_req_t *req, lp_buf_t *out, size_t off);
/* Lends out (empty: lp_buf_init'ed) the buffer of an earlier answer kept with
 * the request, to build this one's in and hand back with lp_http_respond_raw*
 * (one allocation fewer per answer); out stays empty when there is none. */
void lp_http_take_buf(lp_http_req_t *req, lp_buf_t *out);

/* Whether the answers held for clients are at max_unsent_bytes_total now:
 * an answer built whole may then wait long (streamed answers wait without
 * their pieces). For any thread. */
int lp_http_unsent_full(const lp_http_req_t *req);

/* Who sent req, as an opaque key: the same for every request of one
 * connection while it is open (work shared fairly per client). */
static inline const void *lp_http_req_client(const lp_http_req_t *req) { return req->_conn; }

/* Counts n bytes that req's answer holds (a stream's producer: its
 * request's data) against max_unsent_bytes_total until req is freed. Returns
 * 0, or -ENOBUFS when what streams hold would pass 3/4 of the bound with them
 * (the rest is for the pieces being written): nothing is counted then. */
int lp_http_reserve(lp_http_req_t *req, size_t n);

/* Answers req with a body made by next as the client reads it: chunked
 * (HTTP/1.0: delimited by the close). next owns the answer from here (ud is
 * freed by its last call, maybe before this returns, with req); the
 * connection reads no more requests until it ends. */
void lp_http_respond_stream(lp_http_req_t *req, int status, const char *headers, const char *content_type,
                            lp_http_stream_cb next, void *ud);

/* Drops req's connection now: `partial` bytes (may be 0) are written first if
 * the socket takes them at once, then it closes; every request still queued on
 * the connection is cancelled. For fault injection and hopeless clients. */
void lp_http_abort(lp_http_req_t *req, const char *partial, size_t n);

const char *lp_http_reason(int status);

/* The client's address as "IP:PORT" ("" if unknown). */
void lp_http_peer(const lp_http_req_t *req, char *out, size_t n);

/* Parses "HOST:PORT" / "[V6]:PORT" into a sockaddr. Returns 0 or UV_EINVAL. */
int lp_parse_hostport(const char *addr, struct sockaddr_storage *ss);

#endif
