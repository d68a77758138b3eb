/* The HTTP/1.1 server: connections on libuv, parsing by llhttp, answers in
 * request order. Requests are owned by their connection until written. */
#define _GNU_SOURCE /* accept4 */
#include "lanepack/httpd.h"

#include <sys/random.h>
#include "lanepack/timeheap.h"

#include <errno.h>
#include <llhttp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/sockios.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* Under AddressSanitizer nothing is pooled or carved from slabs: every record
 * is malloc'ed and freed, so that one used after its end is caught. */
#if defined(__SANITIZE_ADDRESS__)
#define LP_HTTP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LP_HTTP_ASAN 1
#endif
#endif
#ifndef LP_HTTP_ASAN
#define LP_HTTP_ASAN 0
#endif

/* The listener's queue (as nginx's default 511, rounded up): also the most a
 * drain takes in from it before closing it. */
#define LISTEN_BACKLOG 1024
/* Bytes read ahead while the pipeline is full, before reading stops. */
#define PENDING_MAX (64 * 1024)
/* Bytes read and dropped after a closing request, before reading stops. */
#define DISCARD_MAX (1024 * 1024)
/* Lingering close (as nginx's lingering_close): after an error answer to a
 * client that may still be sending, reading goes on and is dropped, so that the
 * client receives the answer instead of a reset; bounded in time and bytes. */
#define LINGER_MS 5000
#define LINGER_QUIET_MS 2000
#define LINGER_MAX (64u * 1024 * 1024)
/* While a connection is not read, how often its peer is checked for a hang-up. */
#define WATCH_MS 1000
/* Answers gathered into one write. */
#define FLUSH_MAX 16
/* Parser states kept for reuse; more are freed. */
#define PARSE_POOL_MAX 256
/* A streamed answer's piece: small, so that thousands of connections whose
 * clients do not read hold little each, and far larger than what a write
 * call costs. */
#define STREAM_PIECE (64 * 1024)
/* What streams' producers hold may fill at most this share (of 4) of
 * max_unsent_bytes_total, so that their pieces still find room. */
#define STREAM_HELD_QUARTERS 3
/* While streams wait for unsent bytes to go down, the first of them looks
 * again this often: bytes taken on another thread's server wake nobody here. */
#define STREAM_WAIT_MS 10
/* The tracestate bytes read of a request: what is kept is at most
 * LP_TRACESTATE_MAX, and room beyond that is for the whitespace and empty
 * members the cleaning drops; past it the value is cut at a whole member. */
#define LP_TRACESTATE_RAW (2 * LP_TRACESTATE_MAX)

/* The parser and what it keeps of the request being read. A connection holds
 * one only while bytes of a request are in hand; between requests it goes back
 * to the server's pool, so an idle keep-alive connection holds none (as nginx
 * frees its buffers on idle connections). */
typedef struct lp_http_parse_s {
  llhttp_t parser;
  struct lp_http_parse_s *next_free;
  char *pending;               /* bytes not yet parsed while paused; owned */
  size_t pending_len;
  size_t header_bytes;
  size_t body_most;            /* the body's buffer at most: Content-Length + 1, else
                                  max_body_bytes + 1 */
  int in_body;                 /* the headers are done and a Content-Length body is
                                  coming: reads may go straight into it (on_alloc) */
  size_t field_len;
  int field_done;
  int host_count;              /* Host headers of the request being parsed */
  int te_count;                /* Transfer-Encoding headers */
  int hdr;                     /* the current header's index in singles[], or -1 */
  int trailers;                /* the headers are done: fields now are a chunked trailer */
  unsigned seen;               /* bit i: singles[i] given in this request */
  size_t rid_len;              /* X-Request-Id bytes sent (rid keeps the first ones) */
  size_t tp_len;               /* traceparent bytes sent (tp keeps the first ones) */
  int tp_count;                /* traceparent headers: more than one is invalid (ignored) */
  size_t ts_len;               /* tracestate bytes kept in ts (the headers joined by ',') */
  int ts_over;                 /* ... more came than ts holds: cut at its last whole member */
  int err_status;              /* set by a callback that rejects the request */
  const char *err_code;        /* these four: string literals */
  const char *err_msg;
  const char *err_extra;
  const char *err_headers;
  char rid[LP_HTTP_ID_MAX + 1];/* X-Request-Id as sent, until settled */
  char tp[LP_TRACEPARENT_SIZE + 8]; /* traceparent as sent (room to see it is too long) */
  char field[64];              /* current header name (truncated) */
  char expect[32];             /* the Expect header of the request being parsed */
  char te[40];                 /* the Transfer-Encoding value (truncated) */
  char ts[LP_TRACESTATE_RAW];  /* tracestate as sent, its first bytes (not cleared: ts_len says) */
} lp_http_parse_t;

struct lp_httpd_s {
  uv_loop_t *loop;
  uv_tcp_t listener;
  int listening;
  int closing;
  lp_httpd_config_t cfg;
  llhttp_settings_t settings;  /* outlives every parser */
  size_t nconns;               /* open (tcp.data is s): what the connection limit counts */
  size_t alive;                /* allocated, handles maybe closing: free s at 0 */
  char *rbuf;                  /* one read buffer for the loop: every read is parsed
                                  before the next, so idle connections hold none */
  size_t rbuf_cap;
  lp_http_parse_t *parse_free; /* pool of parser states, owned */
  size_t parse_nfree;
  lp_http_req_t *req_free;     /* pool of finished requests with their answer
                                  buffers (linked by _next), owned */
  size_t req_nfree;
  struct lp_http_busy_s *busy_free; /* pool of busy records, owned */
  size_t busy_nfree;
  struct conn_slab_s *slabs;   /* slabs of connection records with room, owned */
  struct conn_slab_s *slab_spare; /* an empty one kept, owned (or NULL) */
  /* One timer for every connection: a heap of their next looks, lazily keyed
   * (a key may be earlier than needed: the look re-arms), so that traffic
   * moves no timer and an idle connection holds 16 bytes of timing. */
  lp_theap_t timers;
  /* Connections whose streamed answer waits for the unsent bytes to go below
   * max_unsent_bytes_total, in the order they began waiting (busy->wait_*). */
  struct lp_http_conn_s *wait_head, *wait_tail;
  size_t nwaiting;
  uv_timer_t tick;
  uint64_t tick_at;            /* when tick fires (uv_now ms), UINT64_MAX if stopped */
  int tick_open;
  int tick_closed;
  uint64_t id_base, id_count;  /* made request ids: random base + a count */
  lp_httpd_shared_t own;       /* the counts, when not shared with other servers */
  lp_httpd_shared_t *count;    /* cfg.shared or &own: updated atomically */
  uint64_t trace_rng;          /* splitmix64 state of new trace and span ids */
  void (*done)(void *);
  void *done_arg;
  char too_large_msg[96];      /* 413's message, naming max_body_bytes and its value
                                  (set with the limits, on the loop that answers) */
};

/* What a connection holds only while it has something in hand: a request
 * being read or waiting for its answer, answers being written, a closing or
 * lingering end. Taken from the server's pool by conn_busy(); an idle
 * keep-alive connection points at busy_idle instead (as nginx keeps only its
 * connection and event structs on an idle keep-alive connection). */
typedef struct lp_http_busy_s {
  lp_http_parse_t *ps;         /* borrowed from the pool while a request is read */
  lp_http_req_t *head, *tail;  /* requests in arrival order, head answered first */
  lp_http_req_t *cur;          /* being parsed (also in the list) */
  uint32_t since_ms;           /* the request being read began (conn_now); while
                                  lingering: when lingering began */
  uint32_t unanswered;
  uint32_t writing;            /* uv_writes in flight */
  uint32_t discarded;          /* bytes dropped (saturates; bounded far below) */
  uint32_t streams;            /* streamed answers not yet ended: reading stops */
  int waiting;                 /* in the server's list of streams waiting for room */
  struct lp_http_conn_s *wait_prev, *wait_next;
  struct lp_http_busy_s *next_free; /* in the server's pool */
} lp_http_busy_t;

/* The record of an idle connection: all zero, read-only, so that reading a
 * busy field needs no test, and a write that should have gone to a record of
 * its own (conn_busy first) faults at once in the tests. */
static const lp_http_busy_t busy_idle;

/* A connection as it stays while idle, held per open connection: a record
 * from the server's slabs (conn_alloc), 296 bytes. Everything else is lent
 * while busy (lp_http_busy_t), the parser state and requests from pools, the
 * read buffer per loop. Times are the loop's milliseconds cut to 32 bits
 * (conn_now): only differences are taken, and the longest a connection waits
 * on one (the idle timeout, at most a day in the configuration) is far below
 * their 49 days. */
struct lp_http_conn_s {
  uv_tcp_t tcp;                /* tcp.data: the server (lp_httpd_t) */
  lp_theap_node_t timer;       /* in srv->timers (ms) while a look is due */
  lp_http_busy_t *b;           /* owned from the pool while busy, else &busy_idle */
  uint32_t last_ms;            /* the last byte moved, either way (conn_now) */
  uint32_t requests;           /* read whole on this connection (saturates at the limit) */
  uint32_t last_wq;            /* unsent bytes at the last look (low bits: a change) */
  uint32_t burst_ms;           /* the loop's time (conn_now) of the turn counted in burst */
  uint32_t burst_ns;           /* when the first of them was (uv_hrtime, low 32 bits:
                                  a turn is far shorter than their 4 s) */
  unsigned burst : 20;         /* requests read whole in that turn (at most BURST_COUNT_MAX) */
  unsigned paused : 1;         /* parser paused: too many unanswered requests */
  unsigned reading : 1;
  unsigned closing : 1;        /* close once the queued answers are written */
  unsigned closed : 1;         /* uv_close called */
  unsigned wblocked : 1;       /* reading stopped: too much written and unread */
  unsigned discard : 1;        /* after a closing request or an error: bytes read are dropped */
  unsigned linger : 1;         /* linger after the closing answer is written */
  unsigned lingering : 1;      /* write side shut, reading and dropping until EOF */
  unsigned close_ready : 1;    /* the closing answer is written */
  unsigned executing : 1;      /* inside llhttp_execute: the parser state must stay */
  unsigned yielded : 1;        /* paused for the others' turn: resumed by its timer */
};

/* The most an idle connection's record may take. The goal (issue 25) is an
 * idle connection at most nginx's 440-520 resident bytes (doc/benchmarks.md);
 * besides the record it holds a timer-heap slot and a libuv watcher slot (8
 * to 16 bytes each), and the process' other threads move the figure by a
 * hundred bytes from run to run, so the record keeps to what it is now, 296
 * (it was 384, in a 400-byte malloc chunk): a field more belongs in
 * lp_http_busy_t unless an idle connection needs it. */
#define LP_HTTP_CONN_BUDGET 296
_Static_assert(sizeof(struct lp_http_conn_s) <= LP_HTTP_CONN_BUDGET,
               "an idle connection's record outgrew its budget");

/* burst's width: requests counted in one turn saturate here, and a larger
 * max_pipeline yields at this count (or after BURST_NS) instead. */
#define BURST_COUNT_MAX ((1u << 20) - 1)

static inline lp_httpd_t *conn_srv(const lp_http_conn_t *c) { return c->tcp.data; }

/* The loop's time in ms, cut to 32 bits: for differences only. */
static inline uint32_t conn_now(const lp_http_conn_t *c) { return (uint32_t)uv_now(c->tcp.loop); }

/* Milliseconds from t to now, both conn_now times. */
static inline uint32_t ms_since(uint32_t now, uint32_t t) { return now - t; }

/* ---- connection records, from slabs ---- */

/* Connection records are carved from slabs of their own, SLAB_BYTES each,
 * mapped aligned to their size (a record finds its slab by masking): packed
 * without malloc's chunk header (296 bytes took a 304-byte chunk), and apart
 * from the requests' short-lived allocations, so that the pages a burst's
 * freed buffers leave are not kept resident by the records of the
 * connections it left open (glibc trims only whole free pages). A slab's
 * pages become resident as its records are first lent (in address order);
 * an emptied slab is unmapped, but for one kept so that a connection opened
 * and closed over and over at a slab's edge does not map and unmap each time. 64 KB: 221 records, and the
 * slabs of 10,000 idle connections are 46 mappings. */
#define SLAB_BYTES (64 * 1024)

typedef struct conn_slab_s {
  struct conn_slab_s *prev, *next; /* in srv->slabs while it has room */
  void *free;                      /* records given back, linked through their first word */
  uint32_t used;                   /* records lent */
  uint32_t fresh;                  /* records never lent yet: from this index on */
  int listed;                      /* in srv->slabs */
} conn_slab_t;

#define SLAB_FIRST (((sizeof(conn_slab_t) + _Alignof(lp_http_conn_t) - 1) / _Alignof(lp_http_conn_t)) * \
                    _Alignof(lp_http_conn_t))
#define SLAB_RECORDS ((SLAB_BYTES - SLAB_FIRST) / sizeof(lp_http_conn_t))

static void slab_list(lp_httpd_t *s, conn_slab_t *sl) {
  sl->prev = NULL;
  sl->next = s->slabs;
  if (s->slabs) s->slabs->prev = sl;
  s->slabs = sl;
  sl->listed = 1;
}

static void slab_unlist(lp_httpd_t *s, conn_slab_t *sl) {
  if (sl->prev) sl->prev->next = sl->next;
  else s->slabs = sl->next;
  if (sl->next) sl->next->prev = sl->prev;
  sl->listed = 0;
}

/* A new slab: mapped twice its size and cut to its alignment. NULL if none. */
static conn_slab_t *slab_map(void) {
  size_t n = 2 * (size_t)SLAB_BYTES;
  char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  uintptr_t a = ((uintptr_t)p + SLAB_BYTES - 1) & ~(uintptr_t)(SLAB_BYTES - 1);
  size_t head = a - (uintptr_t)p;
  if (head) munmap(p, head);
  if (n - head > SLAB_BYTES) munmap((char *)a + SLAB_BYTES, n - head - SLAB_BYTES);
  return (conn_slab_t *)a; /* zero-filled */
}

/* A zeroed connection record, or NULL. */
static lp_http_conn_t *conn_alloc(lp_httpd_t *s) {
  if (LP_HTTP_ASAN) return calloc(1, sizeof(lp_http_conn_t));
  conn_slab_t *sl = s->slabs;
  if (sl == NULL) {
    if ((sl = s->slab_spare) != NULL) s->slab_spare = NULL;
    else if ((sl = slab_map()) == NULL) return NULL;
    slab_list(s, sl);
  }
  lp_http_conn_t *c;
  if (sl->free) {
    c = sl->free;
    memcpy(&sl->free, c, sizeof(void *));
  } else {
    c = (lp_http_conn_t *)((char *)sl + SLAB_FIRST) + sl->fresh++;
  }
  if (++sl->used == SLAB_RECORDS) slab_unlist(s, sl);
  memset(c, 0, sizeof(*c));
  return c;
}

static void conn_dealloc(lp_httpd_t *s, lp_http_conn_t *c) {
  if (LP_HTTP_ASAN) {
    free(c);
    return;
  }
  conn_slab_t *sl = (conn_slab_t *)((uintptr_t)c & ~(uintptr_t)(SLAB_BYTES - 1));
  memcpy(c, &sl->free, sizeof(void *));
  sl->free = c;
  if (!sl->listed) slab_list(s, sl);
  if (--sl->used) return;
  slab_unlist(s, sl);
  if (s->slab_spare) {
    munmap(sl, SLAB_BYTES);
    return;
  }
  sl->free = NULL; /* lent again from its first record: its resident pages first */
  sl->fresh = 0;
  s->slab_spare = sl;
}

static void conn_close(lp_http_conn_t *c);
static void conn_flush(lp_http_conn_t *c);
static void conn_parse(lp_http_conn_t *c, const char *data, size_t len);
static void conn_start_reading(lp_http_conn_t *c);
static void conn_arm_timer(lp_http_conn_t *c);
static void conn_update_reading(lp_http_conn_t *c);
static void conn_resume(lp_http_conn_t *c);
static void server_maybe_finish(lp_httpd_t *s);
static int conn_write_held(lp_http_conn_t *c, size_t most);
static void wait_wake(lp_httpd_t *s);
static void wait_remove(lp_http_conn_t *c);

/* ---- busy records, lent to connections while they have something in hand ---- */

/* Busy records kept for reuse (88 bytes each): as many as the parser states,
 * so that a steady load of that many busy connections allocates none; more
 * are freed when given back. */
#define BUSY_POOL_MAX (LP_HTTP_ASAN ? 0 : PARSE_POOL_MAX)

static int conn_is_busy(const lp_http_conn_t *c) { return c->b != &busy_idle; }

/* c's own busy record, taken from the pool (zeroed) if it had none; NULL when
 * out of memory. Every write to a busy field comes after this. */
static lp_http_busy_t *conn_busy(lp_http_conn_t *c) {
  if (conn_is_busy(c)) return c->b;
  lp_httpd_t *s = conn_srv(c);
  lp_http_busy_t *b = s->busy_free;
  if (b) {
    s->busy_free = b->next_free;
    s->busy_nfree--;
  } else if ((b = malloc(sizeof(*b))) == NULL) {
    return NULL;
  }
  memset(b, 0, sizeof(*b));
  c->b = b;
  return b;
}

/* c's busy record back to the pool, whatever it holds (its connection is
 * closed, or holds nothing: busy_maybe_give_back). */
static void busy_give_back(lp_http_conn_t *c) {
  if (!conn_is_busy(c)) return;
  lp_httpd_t *s = conn_srv(c);
  lp_http_busy_t *b = c->b;
  c->b = (lp_http_busy_t *)&busy_idle;
  if (s->busy_nfree >= BUSY_POOL_MAX) {
    free(b);
    return;
  }
  b->next_free = s->busy_free;
  s->busy_free = b;
  s->busy_nfree++;
}

/* A keep-alive connection with nothing in hand (nothing read, owed, written,
 * nor an end under way) goes back to holding its idle record only. */
static void busy_maybe_give_back(lp_http_conn_t *c) {
  const lp_http_busy_t *b = c->b;
  if (conn_is_busy(c) && !b->ps && !b->head && !b->cur && !b->unanswered && !b->writing &&
      !b->discarded && !c->paused && !c->closing && !c->discard && !c->lingering && !c->closed &&
      !c->executing)
    busy_give_back(c);
}

/* ---- parser states, lent to connections while they read a request ---- */

static lp_http_parse_t *parse_take(lp_http_conn_t *c) {
  lp_httpd_t *s = conn_srv(c);
  if (conn_busy(c) == NULL) return NULL;
  lp_http_parse_t *ps = s->parse_free;
  if (ps) {
    s->parse_free = ps->next_free;
    s->parse_nfree--;
  } else if ((ps = malloc(sizeof(*ps))) == NULL) {
    return NULL;
  }
  memset(ps, 0, offsetof(lp_http_parse_t, field) + 1); /* pending is NULL in the pool */
  ps->expect[0] = ps->te[0] = '\0';
  llhttp_init(&ps->parser, HTTP_REQUEST, &s->settings);
  ps->parser.data = c;
  c->b->ps = ps;
  return ps;
}

static void parse_give_back(lp_http_conn_t *c) {
  lp_httpd_t *s = conn_srv(c);
  lp_http_parse_t *ps = c->b->ps;
  if (ps == NULL) return;
  c->b->ps = NULL;
  free(ps->pending);
  ps->pending = NULL;
  ps->pending_len = 0;
  if (s->parse_nfree >= PARSE_POOL_MAX) {
    free(ps);
    return;
  }
  ps->next_free = s->parse_free;
  s->parse_free = ps;
  s->parse_nfree++;
}

/* Between requests (nothing half-read, nothing held back) a connection needs no
 * parser: llhttp's state there is its initial one. */
static void parse_maybe_give_back(lp_http_conn_t *c) {
  if (c->b->ps && !c->b->cur && !c->paused && !c->b->ps->pending_len && !c->closing && !c->discard &&
      !c->closed)
    parse_give_back(c);
}

/* ---- connection timing ---- */

static void on_tick(uv_timer_t *t);

static void tick_arm(lp_httpd_t *s) {
  lp_theap_node_t *top = lp_theap_top(&s->timers);
  if (top == NULL || !s->tick_open) {
    if (s->tick_at != UINT64_MAX) uv_timer_stop(&s->tick);
    s->tick_at = UINT64_MAX;
    return;
  }
  if (top->at == s->tick_at) return;
  uint64_t now = uv_now(s->loop);
  uv_timer_start(&s->tick, on_tick, top->at > now ? top->at - now : 0, 0);
  s->tick_at = top->at;
}

/* Asks for a look at c by `at` (uv_now ms). A look already due earlier stands
 * (it re-arms when it finds nothing due), so most calls change nothing. */
static void conn_timer_at(lp_http_conn_t *c, uint64_t at) {
  lp_httpd_t *s = conn_srv(c);
  if (lp_theap_contains(&c->timer) && c->timer.at <= at) return;
  if (lp_theap_set(&s->timers, &c->timer, at) < 0) return; /* next look finds it */
  if (at < s->tick_at) tick_arm(s);
}

const char *lp_http_reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 424: return "Failed Dependency"; /* TEI: a failed batch */
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
  }
  return "Unknown";
}

void lp_httpd_config_default(lp_httpd_config_t *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->max_header_bytes = 16 * 1024;
  cfg->max_body_bytes = 8 * 1024 * 1024;
  cfg->max_connections = 10000;
  cfg->max_pipeline = 64;
  cfg->idle_timeout_ms = 60000;
  cfg->request_timeout_ms = 30000;
  cfg->max_unsent_bytes = 1024 * 1024;
}

/* ---- requests ---- */

/* The url as far as it was read ("" if none) and its path's length. */
static void req_settle_url(lp_http_req_t *r) {
  if (r->url == NULL) {
    r->url = r->_url_inline;
    r->_url_inline[0] = '\0';
  }
  const char *q = memchr(r->url, '?', r->url_len);
  r->path_len = q ? (size_t)(q - r->url) : r->url_len;
}

/* Gives r its id, once: the client's X-Request-Id (ps->rid, when ps is the
 * parse state of r) if it is valid (LP_HTTP_ID_MAX: it is echoed in a header
 * and written in JSON logs), else a made one: unique within the process, and
 * across restarts by its random base. */
static void request_id_settle(lp_httpd_t *s, lp_http_req_t *r, const lp_http_parse_t *ps) {
  if (r->request_id[0]) return;
  size_t n = ps ? ps->rid_len : 0;
  int ok = n > 0 && n <= LP_HTTP_ID_MAX;
  for (size_t i = 0; ok && i < n; i++) {
    unsigned char ch = (unsigned char)ps->rid[i];
    ok = ch > 0x20 && ch < 0x7f && ch != '"' && ch != '\\';
  }
  /* the trace: the client's when its one traceparent is valid, else a new one */
  lp_trace_t t;
  uint8_t span[8];
  /* tp keeps the first bytes: enough to see a version-00 value is too long,
   * and that a later version's extra fields follow a '-' */
  size_t tpn = ps && ps->tp_len < sizeof(ps->tp) ? ps->tp_len : sizeof(ps->tp) - 1;
  if (!(ps && ps->tp_count == 1 && lp_trace_parse(ps->tp, tpn, &t) == 0)) {
    lp_trace_random(&s->trace_rng, t.trace_id, sizeof(t.trace_id));
    t.flags = 0;
  }
  else if (ps->ts_len) {
    /* the client's tracestate goes with its trace (W3C: never without it);
     * an invalid one is dropped whole, one too long for ts kept to its last
     * whole member */
    size_t tsn = ps->ts_len;
    if (ps->ts_over)
      while (tsn && ps->ts[tsn - 1] != ',') tsn--;
    if (lp_trace_state_clean(ps->ts, tsn, r->tracestate) < 0) r->tracestate[0] = '\0';
  }
  lp_trace_random(&s->trace_rng, span, sizeof(span));
  lp_trace_format(t.trace_id, span, t.flags, r->traceparent);
  if (ok) {
    memcpy(r->request_id, ps->rid, n + 1);
    return;
  }
  static const char hex[] = "0123456789abcdef";
  uint64_t v = s->id_base + ++s->id_count * (s->cfg.id_shards ? s->cfg.id_shards : 1) + s->cfg.id_shard;
  for (int i = 15; i >= 0; i--, v >>= 4) r->request_id[i] = hex[v & 15];
  r->request_id[16] = '\0';
}

/* Answer bytes held for a client, charged to the server's unsent count
 * (shared by every server of the process) until given back. */
static void out_charge(lp_http_req_t *r, size_t n) {
  if (!n) return;
  __atomic_add_fetch(&conn_srv(r->_conn)->count->unsent_bytes, n, __ATOMIC_RELAXED);
  r->_out_charged += n;
}

static void out_uncharge(lp_http_req_t *r, size_t n) {
  if (!n) return;
  __atomic_sub_fetch(&conn_srv(r->_conn)->count->unsent_bytes, n, __ATOMIC_RELAXED);
  r->_out_charged -= n;
}

/* Whether the unsent answer bytes of the process are at their bound. */
static int unsent_full(const lp_httpd_t *s) {
  size_t most = s->cfg.max_unsent_bytes_total;
  return most && __atomic_load_n(&s->count->unsent_bytes, __ATOMIC_RELAXED) >= most;
}

/* A streamed answer ends (written whole, or its connection closed first):
 * its producer frees its state, and what it held is given back. */
static void stream_end(lp_http_req_t *r) {
  if (!r->_stream) return;
  lp_http_stream_cb next = r->_stream;
  r->_stream = NULL;
  next(r->_stream_ud, NULL, 0);
  r->_stream_ud = NULL;
  if (r->_conn->b->streams) r->_conn->b->streams--;
}

/* Gives back what a request's body had charged to the in-flight budget. */
static void body_uncharge(lp_http_req_t *r) {
  lp_httpd_t *s = conn_srv(r->_conn);
  if (r->_charged) __atomic_sub_fetch(&s->count->body_bytes, r->_charged, __ATOMIC_RELAXED);
  r->_charged = 0;
}

/* Finished requests kept for the next ones, each with its answer buffer (what
 * lp_http_take_buf lends): at most this many, buffers up to REQ_POOL_BUF
 * bytes, so a burst's peak is not kept. Two allocations fewer per request. */
#define REQ_POOL_MAX (LP_HTTP_ASAN ? 0 : 64)
#define REQ_POOL_BUF (64 * 1024)

static void req_free(lp_http_req_t *r) {
  body_uncharge(r);
  stream_end(r);
  out_uncharge(r, r->_out_charged);
  if (r->_reserved) __atomic_sub_fetch(&conn_srv(r->_conn)->count->reserved_bytes, r->_reserved, __ATOMIC_RELAXED);
  r->_reserved = 0;
  if (r->url != r->_url_inline) free(r->url);
  free(r->authorization);
  free(r->body);
  lp_httpd_t *s = conn_srv(r->_conn);
  if (s->req_nfree < REQ_POOL_MAX && !s->closing) {
    if (r->_resp.cap > REQ_POOL_BUF) lp_buf_free(&r->_resp);
    lp_buf_reset(&r->_resp);
    r->_next = s->req_free;
    s->req_free = r;
    s->req_nfree++;
    return;
  }
  lp_buf_free(&r->_resp);
  free(r);
}

static lp_http_req_t *req_new(lp_http_conn_t *c) {
  lp_httpd_t *s = conn_srv(c);
  if (conn_busy(c) == NULL) return NULL;
  lp_http_req_t *r = s->req_free;
  if (r) {
    s->req_free = r->_next;
    s->req_nfree--;
    lp_buf_t resp = r->_resp;
    memset(r, 0, sizeof(*r));
    r->_resp = resp;
  } else if ((r = calloc(1, sizeof(*r))) == NULL) {
    return NULL;
  } else {
    lp_buf_init(&r->_resp);
  }
  r->_conn = c;
  r->method = -1;
  r->start_ns = uv_hrtime();
  if (c->b->tail) c->b->tail->_next = r;
  else c->b->head = r;
  c->b->tail = r;
  c->b->unanswered++;
  return r;
}

/* How an answer's body ends: at its Content-Length, at its last chunk, or
 * at the connection's close (HTTP/1.0 has no chunks). */
enum { BODY_LENGTH, BODY_CHUNKED, BODY_TO_CLOSE };

static void head_put(lp_http_req_t *req, lp_buf_t *out, int status, const char *headers,
                     const char *content_type, size_t len, int framing) {
  lp_http_conn_t *c = req->_conn;
  /* shutting down: the last request queued on a connection closes it */
  int close = req->_close_after ||
              (conn_srv(c)->closing && req->_next == NULL && c->b->cur == NULL);
  /* every answer starts here: no printf */
  lp_buf_puts(out, "HTTP/1.1 ");
  lp_buf_u64(out, (uint64_t)status);
  lp_buf_puts(out, " ");
  lp_buf_puts(out, lp_http_reason(status));
  lp_buf_puts(out, "\r\nContent-Type: ");
  lp_buf_puts(out, content_type);
  if (framing == BODY_LENGTH) {
    lp_buf_puts(out, "\r\nContent-Length: ");
    lp_buf_u64(out, len);
    lp_buf_puts(out, "\r\n");
  } else {
    lp_buf_puts(out, framing == BODY_CHUNKED ? "\r\nTransfer-Encoding: chunked\r\n" : "\r\n");
  }
  if (headers) lp_buf_puts(out, headers);
  if (req->request_id[0]) {
    lp_buf_puts(out, "X-Request-Id: ");
    lp_buf_puts(out, req->request_id);
    lp_buf_puts(out, "\r\n");
  }
  if (req->traceparent[0]) {
    lp_buf_puts(out, "traceparent: ");
    lp_buf_puts(out, req->traceparent);
    lp_buf_puts(out, "\r\n");
  }
  if (req->tracestate[0]) {
    lp_buf_puts(out, "tracestate: ");
    lp_buf_puts(out, req->tracestate);
    lp_buf_puts(out, "\r\n");
  }
  if (close) lp_buf_puts(out, "Connection: close\r\n");
  lp_buf_puts(out, "\r\n");
  if (close) req->_close_after = 1;
}

void lp_http_head(lp_http_req_t *req, lp_buf_t *out, int status, const char *headers,
                  const char *content_type, size_t len) {
  head_put(req, out, status, headers, content_type, len, BODY_LENGTH);
}

void lp_http_respond_raw(lp_http_req_t *req, lp_buf_t *out) { lp_http_respond_raw_at(req, out, 0); }

void lp_http_take_buf(lp_http_req_t *req, lp_buf_t *out) {
  if (req->_answered || out->data) return;
  *out = req->_resp;
  lp_buf_init(&req->_resp);
  lp_buf_reset(out);
}

void lp_http_respond_raw_at(lp_http_req_t *req, lp_buf_t *out, size_t off) {
  if (req->_answered) return;
  lp_buf_t t = req->_resp;
  req->_resp = *out;
  req->_resp_off = off <= out->len ? off : out->len;
  *out = t;
  lp_buf_reset(out);
  req->_answered = 1;
  out_charge(req, req->_resp.len - req->_resp_off);
  lp_http_conn_t *c = req->_conn;
  c->b->unanswered--;
  conn_flush(c);
  conn_resume(c);
}

int lp_http_unsent_full(const lp_http_req_t *req) { return unsent_full(conn_srv(req->_conn)); }

int lp_http_reserve(lp_http_req_t *req, size_t n) {
  lp_httpd_t *s = conn_srv(req->_conn);
  size_t most = s->cfg.max_unsent_bytes_total / 4 * STREAM_HELD_QUARTERS;
  /* taken first, given back if over: servers on other threads charge the
   * same count at the same time */
  size_t now = __atomic_add_fetch(&s->count->reserved_bytes, n, __ATOMIC_RELAXED);
  if (s->cfg.max_unsent_bytes_total && now > most) {
    __atomic_sub_fetch(&s->count->reserved_bytes, n, __ATOMIC_RELAXED);
    return -ENOBUFS;
  }
  out_charge(req, n);
  req->_reserved += n;
  return 0;
}

void lp_http_respond_stream(lp_http_req_t *req, int status, const char *headers, const char *content_type,
                            lp_http_stream_cb next, void *ud) {
  if (req->_answered) {
    next(ud, NULL, 0);
    return;
  }
  lp_http_conn_t *c = req->_conn;
  if (req->_http10) req->_close_after = 1; /* its end is the connection's */
  lp_buf_t *out = &req->_resp;
  lp_buf_reset(out);
  req->_resp_off = 0;
  head_put(req, out, status, headers, content_type, 0, req->_http10 ? BODY_TO_CLOSE : BODY_CHUNKED);
  req->_stream = next;
  req->_stream_ud = ud;
  req->_answered = 1;
  c->b->unanswered--;
  c->b->streams++;
  if (req->method == LP_HTTP_HEAD) {
    stream_end(req); /* the head only */
    out_charge(req, out->len);
  }
  conn_flush(c);
  conn_resume(c);
}

/* Room again in the pipeline and the peer reading its answers: parse what was
 * held back, and read again. */
static void conn_resume(lp_http_conn_t *c) {
  if (c->paused && !c->closed && !c->executing && !c->wblocked &&
      c->b->unanswered < conn_srv(c)->cfg.max_pipeline) {
    c->paused = 0;
    llhttp_resume(&c->b->ps->parser);
    char *p = c->b->ps->pending;
    size_t n = c->b->ps->pending_len;
    c->b->ps->pending = NULL;
    c->b->ps->pending_len = 0;
    if (n) conn_parse(c, p, n);
    free(p);
  }
  if (!c->closed) {
    conn_update_reading(c);
    conn_arm_timer(c);
  }
}

void lp_http_respond(lp_http_req_t *req, int status, const char *headers,
                     const char *content_type, const void *body, size_t len) {
  lp_buf_t out;
  lp_buf_init(&out);
  lp_buf_reserve(&out, len + 256); /* one allocation, not a doubling series */
  lp_http_head(req, &out, status, headers, content_type, len);
  if (req->method != LP_HTTP_HEAD) lp_buf_append(&out, body, len); /* HEAD: the length only */
  if (out.oom) {
    /* no memory for the answer: the connection cannot stay consistent */
    lp_buf_free(&out);
    req->_close_after = 1;
    lp_buf_init(&out);
    lp_buf_puts(&out, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                      "Connection: close\r\n\r\n");
  }
  lp_http_respond_raw(req, &out);
  lp_buf_free(&out);
}

void lp_http_respond_error(lp_http_req_t *req, int status, const char *headers,
                           const char *code, const char *message, const char *extra) {
  lp_buf_t b;
  lp_buf_init(&b);
  lp_buf_puts(&b, "{\"error\": {\"code\": ");
  lp_buf_json_str(&b, code, strlen(code));
  lp_buf_puts(&b, ", \"message\": ");
  lp_buf_json_str(&b, message, strlen(message));
  if (extra) lp_buf_puts(&b, extra);
  lp_buf_puts(&b, "}}\n");
  lp_http_respond(req, status, headers, "application/json", b.data, b.len);
  lp_buf_free(&b);
}

void lp_http_abort(lp_http_req_t *req, const char *partial, size_t n) {
  lp_http_conn_t *c = req->_conn;
  if (c->closed) return;
  if (n) {
    uv_buf_t b = uv_buf_init((char *)partial, (unsigned)n);
    uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
  }
  req->app = NULL; /* the caller knows: no cancel callback for this one */
  conn_close(c);
}

/* ---- writing answers in order ---- */

/* The request is owned by libuv until here (also when the connection closes
 * first: it then ends with UV_ECANCELED, before the close callback). */
static void on_shutdown(uv_shutdown_t *sh, int status) {
  (void)status; /* the linger timer or the peer's EOF ends it either way */
  free(sh);
}

/* The closing answer is out: close, or linger so the client reads it. */
static void conn_finish(lp_http_conn_t *c) {
  if (c->closed || c->lingering) return;
  if (!c->linger && c->b->discarded == 0) {
    conn_close(c);
    return;
  }
  c->lingering = 1;
  c->discard = 1;
  c->b->discarded = 0;
  c->b->since_ms = c->last_ms = conn_now(c);
  uv_shutdown_t *sh = malloc(sizeof(*sh));
  if (sh == NULL) {
    conn_close(c);
    return;
  }
  if (uv_shutdown(sh, (uv_stream_t *)&c->tcp, on_shutdown) < 0) {
    free(sh);
    conn_close(c);
    return;
  }
  conn_update_reading(c);
  conn_arm_timer(c);
}

/* Whether c is not read for what it has not taken: a streamed answer under
 * way, more than `most` bytes written and unsent, or any while the process'
 * unsent answer bytes are at their bound. */
static int conn_write_held(lp_http_conn_t *c, size_t most) {
  if (c->b->streams) return 1;
  size_t wq = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
  return wq > most || (wq && unsent_full(conn_srv(c)));
}

/* After any write: progress for the idle clock; reading again once the peer has
 * taken its answers; the end of a connection that owes nothing more. */
static void conn_wrote(lp_http_conn_t *c, int status) {
  c->b->writing--;
  if (c->closed) return;
  if (status < 0) {
    conn_close(c);
    return;
  }
  c->last_ms = conn_now(c);
  if (c->wblocked && !conn_write_held(c, conn_srv(c)->cfg.max_unsent_bytes / 2)) {
    c->wblocked = 0;
    conn_resume(c);
    if (c->closed) return;
  }
  /* a streamed answer at the head: its next piece */
  if (c->b->head && c->b->head->_stream && !c->b->writing) {
    conn_flush(c);
    if (c->closed) return;
  }
  /* bytes were taken: streams waiting for room may go on */
  if (conn_srv(c)->wait_head) {
    wait_wake(conn_srv(c));
    if (c->closed) return;
  }
  if (c->close_ready) {
    if (!c->b->writing) conn_finish(c);
    return;
  }
  /* draining: a connection whose last answer is written goes */
  if (conn_srv(c)->closing && !c->b->head && !c->b->cur && !c->b->writing && !c->lingering) {
    conn_close(c);
    return;
  }
  busy_maybe_give_back(c);
  conn_arm_timer(c);
}

/* Frees a group of answers written together: first..last along _next. */
static void free_group(lp_http_conn_t *c, lp_http_req_t *r) {
  while (r) {
    lp_http_req_t *n = r->_next;
    if (r->_close_after) c->close_ready = 1;
    req_free(r);
    r = n;
  }
}

static void on_written(uv_write_t *w, int status) {
  lp_http_req_t *last = container_of(w, lp_http_req_t, _write);
  lp_http_conn_t *c = last->_conn;
  if (last->_piece_writing) { /* a streamed answer's piece: the answer goes on */
    last->_piece_writing = 0;
    out_uncharge(last, last->_out_charged - last->_reserved);
    /* freed, not kept: a stream between pieces holds nothing uncounted (a
     * malloc per 64 KiB piece is little beside making the piece) */
    lp_buf_free(&last->_resp);
    if (c->closed) req_free(last); /* conn_close left it to this */
  } else {
    free_group(c, last->_group);
  }
  conn_wrote(c, status);
}

/* ---- streamed answers ---- */

static void wait_remove(lp_http_conn_t *c) {
  lp_http_busy_t *b = c->b;
  if (!b->waiting) return;
  lp_httpd_t *s = conn_srv(c);
  if (b->wait_prev) b->wait_prev->b->wait_next = b->wait_next;
  else s->wait_head = b->wait_next;
  if (b->wait_next) b->wait_next->b->wait_prev = b->wait_prev;
  else s->wait_tail = b->wait_prev;
  b->wait_prev = b->wait_next = NULL;
  b->waiting = 0;
  s->nwaiting--;
}

/* c's stream waits for room: last in line; the first in line looks again
 * after STREAM_WAIT_MS (a piece taken on this server wakes it sooner). */
static void wait_add(lp_http_conn_t *c) {
  lp_http_busy_t *b = c->b;
  if (b->waiting) return;
  lp_httpd_t *s = conn_srv(c);
  b->waiting = 1;
  b->wait_next = NULL;
  b->wait_prev = s->wait_tail;
  if (s->wait_tail) s->wait_tail->b->wait_next = c;
  else s->wait_head = c;
  s->wait_tail = c;
  s->nwaiting++;
  conn_timer_at(s->wait_head, uv_now(s->loop) + STREAM_WAIT_MS);
}

/* Streams waiting for room go on in their order while there is room (each
 * makes a piece, or waits again at the end of the line). */
static void wait_wake(lp_httpd_t *s) {
  size_t n = s->nwaiting;
  lp_http_conn_t *c;
  while (n-- && (c = s->wait_head) != NULL && !unsent_full(s)) {
    wait_remove(c);
    conn_flush(c);
  }
  if (s->wait_head) conn_timer_at(s->wait_head, uv_now(s->loop) + STREAM_WAIT_MS);
}

/* Makes and writes the next piece of r, the streamed answer at c's head
 * (its head first). Returns 1 when that was its last: r is then an ordinary
 * answer, left for the caller to write; 0 when it waits (for its piece being
 * written, or for room under max_unsent_bytes_total); -1 when the
 * connection closed. */
static int stream_piece(lp_http_conn_t *c, lp_http_req_t *r) {
  lp_httpd_t *s = conn_srv(c);
  if (c->b->writing) return 0; /* conn_wrote comes back */
  if (unsent_full(s)) {
    wait_add(c);
    return 0;
  }
  wait_remove(c);
  lp_buf_t *out = &r->_resp;
  int chunked = !r->_http10;
  size_t start = out->len; /* the head, before the first piece */
  if (chunked) lp_buf_append(out, "00000000\r\n", 10); /* the size, filled in below */
  size_t body = out->len;
  int rc;
  do rc = r->_stream(r->_stream_ud, out, STREAM_PIECE);
  while (rc == 1 && out->len == body && !out->oom);
  if (rc < 0 || out->oom) {
    conn_close(c);
    return -1;
  }
  if (chunked) {
    size_t n = out->len - body;
    if (n) {
      static const char hex[] = "0123456789abcdef";
      for (int i = 7; i >= 0; i--, n >>= 4) out->data[start + (size_t)i] = hex[n & 15];
      lp_buf_append(out, "\r\n", 2);
    } else {
      out->len = start;
    }
    if (rc == 0) lp_buf_append(out, "0\r\n\r\n", 5);
    if (out->oom) {
      conn_close(c);
      return -1;
    }
  }
  out_charge(r, out->len); /* until written */
  if (rc == 0) {
    stream_end(r);
    r->_resp_off = 0;
    return 1;
  }
  uv_buf_t b = uv_buf_init(out->data, (unsigned)out->len);
  r->_group = NULL;
  if (uv_write(&r->_write, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0) {
    conn_close(c);
    return -1;
  }
  r->_piece_writing = 1;
  c->b->writing++;
  return 0;
}

static void on_continue_written(uv_write_t *w, int status) {
  lp_http_conn_t *c = w->data;
  free(w);
  conn_wrote(c, status);
}

/* Writes the interim "100 Continue", queued behind any answer still being
 * written, never dropped. Returns 0 or -1. */
static int send_continue(lp_http_conn_t *c) {
  static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
  uv_buf_t b = uv_buf_init((char *)cont, sizeof(cont) - 1);
  uv_write_t *w = malloc(sizeof(*w));
  if (w == NULL) return -1;
  w->data = c;
  if (uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, on_continue_written) < 0) {
    free(w);
    return -1;
  }
  c->b->writing++;
  return 0;
}

/* Writes the answers at the head that are ready, in order: together in one
 * writev, tried on the socket at once (most answers leave in this call: no
 * write request, and libuv does not re-arm the poll for it); what the socket
 * does not take goes to libuv's queue as one write of the rest. */
static void conn_flush(lp_http_conn_t *c) {
  uv_stream_t *st = (uv_stream_t *)&c->tcp;
  while (c->b->head && c->b->head->_answered && !c->closed) {
    if (c->b->head->_stream) { /* written a piece at a time, alone */
      if (c->b->head->_piece_writing || stream_piece(c, c->b->head) <= 0) break;
      continue;
    }
    uv_buf_t iov[FLUSH_MAX];
    lp_http_req_t *first = c->b->head, *last = NULL;
    size_t n = 0, total = 0;
    int closing = 0;
    while (c->b->head && c->b->head->_answered && !c->b->head->_stream && n < FLUSH_MAX) {
      lp_http_req_t *r = c->b->head;
      c->b->head = r->_next;
      if (c->b->head == NULL) c->b->tail = NULL;
      if (c->b->cur == r) c->b->cur = NULL;
      iov[n++] = uv_buf_init(r->_resp.data + r->_resp_off, (unsigned)(r->_resp.len - r->_resp_off));
      total += r->_resp.len - r->_resp_off;
      last = r;
      /* nothing after a closing answer is sent; a connection that is only
       * draining (c->closing from the server) still gets every answer it owes */
      if (r->_close_after) {
        c->closing = 1;
        closing = 1;
        break;
      }
    }
    last->_next = NULL;
    size_t done = 0;
    if (c->b->writing == 0) { /* nothing queued ahead: the socket may take it now */
      int k = uv_try_write(st, iov, (unsigned)n);
      if (k < 0 && k != UV_EAGAIN) {
        free_group(c, first);
        conn_close(c);
        return;
      }
      if (k > 0) done = (size_t)k;
    }
    if (done == total) {
      free_group(c, first);
      c->last_ms = conn_now(c);
      if (c->close_ready) {
        conn_finish(c);
        return;
      }
      continue;
    }
    size_t i = 0;
    while (done >= iov[i].len) done -= iov[i++].len;
    iov[i].base += done;
    iov[i].len -= done;
    last->_group = first;
    if (uv_write(&last->_write, st, iov + i, (unsigned)(n - i), on_written) < 0) {
      free_group(c, first);
      conn_close(c);
      return;
    }
    c->b->writing++;
    if (closing) break;
  }
  if (c->closed) return;
  /* an Expect: 100-continue request that waited behind earlier answers is
   * first in line now: its interim answer goes out behind them */
  if (c->b->head && c->b->head->_continue && !c->b->head->_answered) {
    c->b->head->_continue = 0;
    if (send_continue(c) < 0) {
      conn_close(c);
      return;
    }
  }
  /* draining: a connection whose last answer is written goes */
  if (conn_srv(c)->closing && !c->b->head && !c->b->cur && !c->b->writing && !c->lingering) {
    conn_close(c);
    return;
  }
  /* a client that does not read its answers is not read either: what it can
   * make us hold is bounded by max_unsent_bytes plus its pipeline (and
   * nothing more once the process holds max_unsent_bytes_total); nor while
   * a streamed answer is under way */
  size_t most = conn_srv(c)->cfg.max_unsent_bytes;
  if (!c->wblocked && conn_write_held(c, most)) {
    c->wblocked = 1;
    conn_update_reading(c);
    conn_arm_timer(c);
  }
  busy_maybe_give_back(c);
  if (c->wblocked && !c->b->writing && !conn_write_held(c, most / 2)) { /* a stream ended, written at once */
    c->wblocked = 0;
    conn_resume(c);
  }
}

/* A request the server itself rejects (limits, bad framing, a timeout): the
 * answer joins the queue behind earlier ones, and the connection closes after
 * it. The request being read keeps what was read of it (method, url, a valid
 * X-Request-Id), for the answer and the app's log. */
static void conn_reject(lp_http_conn_t *c, int status, const char *code, const char *msg,
                        const char *extra, const char *headers) {
  lp_http_req_t *r = c->b->cur;
  const lp_http_parse_t *ps = c->b->ps;
  if (r == NULL || r->_answered) {
    r = req_new(c);
    ps = NULL; /* the parse state, if any, is another request's */
  }
  if (r == NULL) {
    conn_close(c);
    return;
  }
  c->b->cur = NULL;
  req_settle_url(r);
  /* llhttp knows the method once the url began */
  if (r->method < 0 && ps && r->url_len) r->method = ps->parser.method;
  request_id_settle(conn_srv(c), r, ps);
  body_uncharge(r); /* the body is dropped */
  free(r->body);
  r->body = NULL;
  r->body_len = r->_body_cap = 0;
  r->_close_after = 1;
  c->closing = 1;
  c->linger = 1;
  c->discard = 1; /* the parser is done with this connection; keep reading, drop */
  lp_httpd_t *s = conn_srv(c);
  /* the app may answer in its route's dialect (OpenAI's, TEI's) */
  if (!s->cfg.on_reject || !s->cfg.on_reject(r, status, code, msg, headers, s->cfg.ud))
    lp_http_respond_error(r, status, headers, code, msg, extra);
  if (!c->closed) {
    conn_update_reading(c);
    conn_arm_timer(c);
  }
}

/* ---- parser callbacks ---- */

#define CONN(p) ((lp_http_conn_t *)(p)->data)

/* A callback refuses the request: conn_parse answers once execute returns.
 * Every argument is a string literal or the server's own (NULL for extra and
 * headers): it is read when execute returns, on this loop. */
static int fail_cb_x(lp_http_conn_t *c, int status, const char *code, const char *msg,
                     const char *extra, const char *headers) {
  c->b->ps->err_status = status;
  c->b->ps->err_code = code;
  c->b->ps->err_msg = msg;
  c->b->ps->err_extra = extra;
  c->b->ps->err_headers = headers;
  return -1;
}

static int fail_cb(lp_http_conn_t *c, int status, const char *code, const char *msg) {
  return fail_cb_x(c, status, code, msg, NULL, NULL);
}

/* A body over max_body_bytes: the key and its value named, so that a client
 * knows the bound and an operator the key (the message lives in the server). */
static int fail_too_large(lp_http_conn_t *c) {
  return fail_cb(c, 413, "body_too_large", conn_srv(c)->too_large_msg);
}

static int count_header(lp_http_conn_t *c, size_t n) {
  c->b->ps->header_bytes += n;
  if (c->b->ps->header_bytes > conn_srv(c)->cfg.max_header_bytes)
    return fail_cb(c, 431, "headers_too_large", "request line and headers exceed the limit");
  return 0;
}

static int on_message_begin(llhttp_t *p) {
  lp_http_conn_t *c = CONN(p);
  c->b->ps->header_bytes = 0;
  c->b->ps->field_len = 0;
  c->b->ps->field_done = 0;
  c->b->ps->expect[0] = '\0';
  c->b->ps->host_count = 0;
  c->b->ps->te_count = 0;
  c->b->ps->te[0] = '\0';
  c->b->ps->hdr = -1;
  c->b->ps->trailers = 0;
  c->b->ps->seen = 0;
  c->b->ps->rid_len = 0;
  c->b->ps->rid[0] = '\0';
  c->b->ps->tp_len = 0;
  c->b->ps->tp_count = 0;
  c->b->ps->ts_len = 0;
  c->b->ps->ts_over = 0;
  c->b->ps->in_body = 0;
  lp_http_req_t *r = req_new(c);
  if (r == NULL) return fail_cb(c, 503, "out_of_memory", "server out of memory");
  c->b->cur = r;
  c->b->since_ms = conn_now(c);
  conn_arm_timer(c); /* a request has begun: it must now arrive whole in time */
  return 0;
}

static int append(char **dst, size_t *len, size_t *cap, const char *at, size_t n) {
  if (*len + n + 1 > *cap) {
    size_t nc = *cap ? *cap : 128;
    while (nc < *len + n + 1) nc *= 2;
    char *d = realloc(*dst, nc);
    if (d == NULL) return -1;
    *dst = d;
    *cap = nc;
  }
  memcpy(*dst + *len, at, n);
  *len += n;
  (*dst)[*len] = '\0';
  return 0;
}

/* A body whose Content-Length is at most this many times what has come gets
 * its whole buffer at once: the last doublings' reallocs copied about the
 * whole body again (a 4 MiB text: 5% of the front's time), and jumping at an
 * eighth copies an eighth as much. The budget is still charged by what has
 * come (see body_room): a buffer this large is mapped by the allocator, and
 * its pages cost memory only once written. */
#define BODY_ONCE_SHARE 8

/* Makes room in r's body for `need` bytes (its NUL included) as they arrive.
 * The budget is charged by doubling what has come, at most `most`
 * (Content-Length + 1 when given), before anything is allocated or read into:
 * past it, 503 with Retry-After, so that clients holding partial bodies cannot
 * make the server hold more than the budget together. Only bytes received
 * count (at most twice over): a Content-Length alone, sent with little after
 * it, would let a few clients fill the budget with a few hundred bytes of
 * headers (or an eighth of a body) and shut every other upload out. The
 * buffer follows the charge, or is `most` at once when that is within
 * BODY_ONCE_SHARE of need; a direct read fills only what is charged. */
static int body_room(lp_http_conn_t *c, lp_http_req_t *r, size_t need, size_t most) {
  if (need <= r->_body_cap && need <= r->_charged) return 0;
  lp_httpd_t *s = conn_srv(c);
  size_t nc = r->_charged ? r->_charged : 128;
  while (nc < need) nc *= 2;
  if (nc > most) nc = most > need ? most : need;
  size_t more = nc > r->_charged ? nc - r->_charged : 0;
  size_t budget = s->cfg.max_body_bytes_in_flight;
  /* taken first, given back if over: servers on other threads charge the
   * same count at the same time */
  size_t now = __atomic_add_fetch(&s->count->body_bytes, more, __ATOMIC_RELAXED);
  if (budget && now > budget) {
    __atomic_sub_fetch(&s->count->body_bytes, more, __ATOMIC_RELAXED);
    return fail_cb_x(c, 503, "bodies_in_flight_full",
                     "request bodies being received exceed the server's max_body_bytes_in_flight; "
                     "retry later", NULL, "Retry-After: 1\r\n");
  }
  size_t alloc = nc;
  if (c->b->ps->in_body && most / BODY_ONCE_SHARE <= need && most > alloc) alloc = most; /* Content-Length known */
  if (alloc > r->_body_cap) {
    char *d = realloc(r->body, alloc);
    if (d == NULL) {
      __atomic_sub_fetch(&s->count->body_bytes, more, __ATOMIC_RELAXED);
      return fail_cb(c, 503, "out_of_memory", "server out of memory");
    }
    r->body = d;
    r->_body_cap = alloc;
  }
  r->_charged += more;
  return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t n) {
  lp_http_conn_t *c = CONN(p);
  if (count_header(c, n)) return -1;
  /* the url is bounded by the header limit and usually arrives whole */
  lp_http_req_t *r = c->b->cur;
  char *u;
  if (r->url_len + n + 1 <= sizeof(r->_url_inline) && (r->url == NULL || r->url == r->_url_inline)) {
    u = r->_url_inline;
  } else if (r->url == r->_url_inline) {
    u = malloc(r->url_len + n + 1);
    if (u) memcpy(u, r->_url_inline, r->url_len);
  } else {
    u = realloc(r->url, r->url_len + n + 1);
  }
  if (u == NULL) return fail_cb(c, 503, "out_of_memory", "server out of memory");
  memcpy(u + c->b->cur->url_len, at, n);
  c->b->cur->url = u;
  c->b->cur->url_len += n;
  u[c->b->cur->url_len] = '\0';
  return 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t n) {
  lp_http_conn_t *c = CONN(p);
  if (count_header(c, n)) return -1;
  if (c->b->ps->field_done) {
    c->b->ps->field_len = 0;
    c->b->ps->field_done = 0;
    c->b->ps->hdr = -1;
  }
  size_t k = n < sizeof(c->b->ps->field) - 1 - c->b->ps->field_len ? n : sizeof(c->b->ps->field) - 1 - c->b->ps->field_len;
  memcpy(c->b->ps->field + c->b->ps->field_len, at, k);
  c->b->ps->field_len += k;
  c->b->ps->field[c->b->ps->field_len] = '\0';
  return 0;
}

/* Appends a header value piece into a fixed field, truncating. */
static void put_value(char *dst, size_t cap, const char *at, size_t n) {
  size_t have = strlen(dst);
  size_t k = n < cap - 1 - have ? n : cap - 1 - have;
  memcpy(dst + have, at, k);
  dst[have + k] = '\0';
}

/* The headers the server reads. A value may come in pieces (one read ends
 * inside it), which are joined; a second header of the same name would be
 * joined to the first without a separator ("1" and "0" reading as "10"), and
 * two values of a field defined once are ambiguous anyway (RFC 9110 5.3): a
 * repeat of a `once` header is refused with 400 naming it. Host and
 * Transfer-Encoding have their own answers (400 bad_host, 501); a repeated
 * Content-Length llhttp refuses itself. */
enum { H_HOST, H_TE, H_EXPECT, H_CTYPE, H_AUTH, H_RID, H_IHCL, H_TP, H_TS, H_COUNT };
#define SINGLE(name) "the header '" name "' may be given only once", ", \"header\": \"" name "\""
static const struct {
  const char *name; /* lower case */
  int once;
  const char *msg, *extra;
} singles[H_COUNT] = {
  [H_HOST] = {"host", 0, NULL, NULL},
  [H_TE] = {"transfer-encoding", 0, NULL, NULL},
  [H_EXPECT] = {"expect", 1, SINGLE("Expect")},
  [H_CTYPE] = {"content-type", 1, SINGLE("Content-Type")},
  [H_AUTH] = {"authorization", 1, SINGLE("Authorization")},
  [H_RID] = {"x-request-id", 1, SINGLE("X-Request-Id")},
  [H_IHCL] = {"inference-header-content-length", 1, SINGLE("Inference-Header-Content-Length")},
  /* repeated: invalid, so ignored (W3C), not refused */
  [H_TP] = {"traceparent", 0, NULL, NULL},
  /* repeats are one list joined by commas (RFC 9110 5.3) */
  [H_TS] = {"tracestate", 0, NULL, NULL},
};
#undef SINGLE

static int on_header_value(llhttp_t *p, const char *at, size_t n) {
  lp_http_conn_t *c = CONN(p);
  if (count_header(c, n)) return -1;
  lp_http_parse_t *ps = c->b->ps;
  ps->field_done = 1;
  lp_http_req_t *r = c->b->cur;
  switch (ps->hdr) {
    case H_CTYPE: put_value(r->content_type, sizeof(r->content_type), at, n); break;
    case H_EXPECT: put_value(ps->expect, sizeof(ps->expect), at, n); break;
    case H_TE: put_value(ps->te, sizeof(ps->te), at, n); break;
    case H_IHCL: put_value(r->_ihcl, sizeof(r->_ihcl), at, n); break;
    case H_AUTH:
      /* whole, however long: bounded by max_header_bytes (count_header) */
      if (append(&r->authorization, &r->authorization_len, &r->_auth_cap, at, n))
        return fail_cb(c, 503, "out_of_memory", "server out of memory");
      break;
    case H_TP: {
      if (ps->tp_len < sizeof(ps->tp) - 1) {
        size_t k = sizeof(ps->tp) - 1 - ps->tp_len;
        if (k > n) k = n;
        memcpy(ps->tp + ps->tp_len, at, k);
      }
      ps->tp_len += n;
      break;
    }
    case H_TS: {
      size_t k = sizeof(ps->ts) - ps->ts_len;
      if (k > n) k = n;
      memcpy(ps->ts + ps->ts_len, at, k);
      ps->ts_len += k;
      ps->ts_over |= k < n;
      break;
    }
    case H_RID: {
      /* the first bytes kept; the length counted, so that a long id is refused
       * rather than cut */
      if (ps->rid_len < LP_HTTP_ID_MAX) {
        size_t k = LP_HTTP_ID_MAX - ps->rid_len;
        if (k > n) k = n;
        memcpy(ps->rid + ps->rid_len, at, k);
        ps->rid[ps->rid_len + k] = '\0';
      }
      ps->rid_len += n;
      break;
    }
    default: break;
  }
  return 0;
}

/* A header's name is whole: which one it is, counted once whatever pieces its
 * value comes in. */
static int on_header_field_complete(llhttp_t *p) {
  lp_http_conn_t *c = CONN(p);
  lp_http_parse_t *ps = c->b->ps;
  ps->hdr = -1;
  /* a chunked body's trailer fields are not headers (RFC 9110 6.5.1): ignored */
  if (ps->trailers) return 0;
  for (int i = 0; i < H_COUNT; i++)
    if (strcasecmp(ps->field, singles[i].name) == 0) {
      ps->hdr = i;
      break;
    }
  if (ps->hdr == H_HOST) ps->host_count++;
  else if (ps->hdr == H_TP) ps->tp_count++;
  else if (ps->hdr == H_TS && ps->ts_len && ps->ts_len < sizeof(ps->ts)) ps->ts[ps->ts_len++] = ',';
  else if (ps->hdr == H_TE) ps->te_count++;
  else if (ps->hdr >= 0 && singles[ps->hdr].once) {
    if (ps->seen & (1u << ps->hdr))
      return fail_cb_x(c, 400, "repeated_header", singles[ps->hdr].msg, singles[ps->hdr].extra, NULL);
    ps->seen |= 1u << ps->hdr;
  }
  return 0;
}

/* Chunk extensions are allowed and ignored, but they count against the header
 * limit: without a bound a client could send one without end. */
static int on_chunk_ext(llhttp_t *p, const char *at, size_t n) {
  lp_http_conn_t *c = CONN(p);
  (void)at;
  c->b->ps->header_bytes += n;
  if (c->b->ps->header_bytes > conn_srv(c)->cfg.max_header_bytes)
    return fail_cb(c, 400, "chunk_extensions_too_large",
                   "chunk extensions exceed the header size limit");
  return 0;
}

static int is_chunked(const char *v) {
  while (*v == ' ' || *v == '\t') v++;
  size_t n = strlen(v);
  while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
  return n == 7 && strncasecmp(v, "chunked", 7) == 0;
}

static int on_header_value_complete(llhttp_t *p) {
  lp_http_conn_t *c = CONN(p);
  c->b->ps->field_done = 1;
  return 0;
}

static int on_headers_complete(llhttp_t *p) {
  lp_http_conn_t *c = CONN(p);
  lp_http_req_t *r = c->b->cur;
  req_settle_url(r);
  r->method = p->method;
  c->b->ps->trailers = 1;
  request_id_settle(conn_srv(c), r, c->b->ps); /* first: every answer from here echoes it */
  /* RFC 9112: what this server cannot or must not serve, said once, then closed */
  if (p->method == HTTP_CONNECT)
    return fail_cb(c, 405, "method_not_allowed", "CONNECT is not supported");
  if (p->http_major != 1 || p->http_minor > 1)
    return fail_cb(c, 505, "http_version_not_supported", "only HTTP/1.0 and HTTP/1.1 are served");
  if (c->b->ps->host_count > 1 || (p->http_minor == 1 && c->b->ps->host_count == 0))
    return fail_cb(c, 400, "bad_host", "an HTTP/1.1 request needs exactly one Host header");
  if (c->b->ps->te_count > 1 || (c->b->ps->te_count == 1 && !is_chunked(c->b->ps->te)))
    return fail_cb(c, 501, "transfer_coding_not_implemented",
                   "the only transfer coding served is 'chunked'");
  p->upgrade = 0; /* no protocol switch: an Upgrade header is ignored */
  r->inference_header_len = -1;
  if (r->_ihcl[0]) {
    char *end;
    errno = 0;
    long long v = strtoll(r->_ihcl, &end, 10);
    /* a value that filled the field was cut: not a size */
    int whole = strlen(r->_ihcl) < sizeof(r->_ihcl) - 1;
    r->inference_header_len =
        *end == '\0' && whole && errno == 0 && v >= 0 && r->_ihcl[0] != '-' ? v : -2;
  }
  r->has_body_length = (p->flags & (F_CONTENT_LENGTH | F_CHUNKED)) != 0;
  r->_http10 = p->http_minor == 0;
  if ((p->flags & F_CONTENT_LENGTH) && p->content_length > conn_srv(c)->cfg.max_body_bytes)
    return fail_too_large(c);
  c->b->ps->body_most = (p->flags & F_CONTENT_LENGTH) ? (size_t)p->content_length + 1
                                                    : conn_srv(c)->cfg.max_body_bytes + 1;
  if (c->b->ps->expect[0]) {
    if (strcasecmp(c->b->ps->expect, "100-continue") != 0)
      return fail_cb(c, 417, "expectation_failed", "only 'Expect: 100-continue' is supported");
    /* The interim answer may only go out when no earlier answer is owed:
     * now, or once the earlier answers are handed to writing (conn_flush). */
    if (r->has_body_length) {
      if (c->b->head != r) r->_continue = 1;
      else if (send_continue(c) < 0)
        return fail_cb(c, 503, "write_failed", "could not write 100 Continue");
    }
  }
  c->b->ps->in_body = (p->flags & F_CONTENT_LENGTH) && !(p->flags & F_CHUNKED);
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n) {
  lp_http_conn_t *c = CONN(p);
  lp_http_req_t *r = c->b->cur;
  if (r->body_len + n > conn_srv(c)->cfg.max_body_bytes)
    return fail_too_large(c);
  if (body_room(c, r, r->body_len + n + 1, c->b->ps->body_most)) return -1;
  if (at != r->body + r->body_len) memcpy(r->body + r->body_len, at, n); /* else read there (on_alloc) */
  r->body_len += n;
  r->body[r->body_len] = '\0';
  return 0;
}

/* A connection's requests answered at once take at most about this long of
 * one loop turn before the others get theirs (a /metrics page is ~0.5 ms). */
#define BURST_NS 1000000u

static int on_message_complete(llhttp_t *p) {
  lp_http_conn_t *c = CONN(p);
  lp_http_req_t *r = c->b->cur;
  c->b->cur = NULL;
  if (r->body == NULL) {
    r->body = calloc(1, 1);
    if (r->body == NULL) return fail_cb(c, 503, "out_of_memory", "server out of memory");
  }
  body_uncharge(r); /* handed over: the app's to account for now */
  r->_continue = 0;  /* the body came without it */
  uint64_t most = conn_srv(c)->cfg.max_requests_per_connection;
  if (!llhttp_should_keep_alive(p) || (most && ++c->requests >= most)) {
    r->_close_after = 1;
    c->closing = 1;
  }
  c->last_ms = conn_now(c);
  conn_arm_timer(c); /* between requests only the idle timeout runs */
  conn_srv(c)->cfg.on_request(r, conn_srv(c)->cfg.ud);
  if (c->closed) return HPE_PAUSED;
  if (c->closing) return HPE_PAUSED; /* nothing after a closing request is read */
  if (c->wblocked) { /* its answers wait for it to read: so do its next requests */
    c->paused = 1;
    return HPE_PAUSED;
  }
  if (c->b->unanswered >= conn_srv(c)->cfg.max_pipeline) {
    c->paused = 1;
    return HPE_PAUSED;
  }
  /* Requests answered at once (pages, refusals) never fill the pipeline: one
   * client pipelining them kept the loop in its read for thousands, every
   * other connection and the backends' traffic (health probes too) waiting.
   * After max_pipeline in one loop turn, or BURST_NS of them, it yields: the
   * rest is parsed on the next turn (on_conn_timer). */
  uint32_t now = conn_now(c), ns = (uint32_t)uv_hrtime();
  if (c->burst_ms != now || c->burst == 0) {
    c->burst_ms = now;
    c->burst = 0;
    c->burst_ns = ns;
  }
  size_t most_burst = conn_srv(c)->cfg.max_pipeline;
  if (most_burst > BURST_COUNT_MAX) most_burst = BURST_COUNT_MAX;
  if (++c->burst >= most_burst || (uint32_t)(ns - c->burst_ns) >= BURST_NS) {
    c->paused = 1;
    c->yielded = 1;
    /* not now: the tick running would take it at once */
    conn_timer_at(c, uv_now(c->tcp.loop) + 1);
    return HPE_PAUSED;
  }
  return 0;
}

/* ---- connections ---- */

static void on_conn_handle_closed(uv_handle_t *h) {
  lp_http_conn_t *c = container_of(h, lp_http_conn_t, tcp);
  lp_httpd_t *s = conn_srv(c);
  /* kept until here: writes still in flight end (UV_ECANCELED) before this */
  busy_give_back(c);
  conn_dealloc(s, c);
  s->alive--;
  server_maybe_finish(s);
}

static void conn_close(lp_http_conn_t *c) {
  if (c->closed) return;
  c->closed = 1;
  lp_httpd_t *s = conn_srv(c);
  /* counted out first: the app's cancel handlers may look at the server */
  s->nconns--;
  __atomic_sub_fetch(&s->count->conns, 1, __ATOMIC_RELAXED);
  /* requests not yet handed to writing: cancel and free them */
  lp_http_req_t *r = c->b->head;
  if (conn_is_busy(c)) {
    wait_remove(c);
    c->b->head = c->b->tail = c->b->cur = NULL;
  }
  while (r) {
    lp_http_req_t *n = r->_next;
    if (!r->_answered && r->app && s->cfg.on_cancel) s->cfg.on_cancel(r, s->cfg.ud);
    if (!r->_piece_writing) req_free(r); /* else its write's end frees it (UV_ECANCELED) */
    r = n;
  }
  lp_theap_remove(&s->timers, &c->timer);
  /* A callback can close the connection inside llhttp_execute (an answer
   * given at once whose write fails, or that closes): llhttp writes into its
   * state when the callback returns, so the state goes back only once execute
   * has returned (conn_parse). */
  if (!c->executing) parse_give_back(c);
  uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
}

static void discard_count(lp_http_conn_t *c, size_t n) {
  c->b->discarded = n > UINT32_MAX - c->b->discarded ? UINT32_MAX : c->b->discarded + (uint32_t)n;
}

static void conn_parse(lp_http_conn_t *c, const char *data, size_t len) {
  if (c->b->ps == NULL && parse_take(c) == NULL) {
    conn_close(c);
    return;
  }
  /* never re-entered for one connection: a callback that answers can resume
   * the parser only of a paused connection, and a connection is paused only
   * once execute has returned */
  c->executing = 1;
  llhttp_errno_t e = llhttp_execute(&c->b->ps->parser, data, len);
  c->executing = 0;
  if (c->closed) {
    parse_give_back(c);
    return;
  }
  if (e == HPE_OK) {
    parse_maybe_give_back(c);
    busy_maybe_give_back(c);
    return;
  }
  if (e == HPE_PAUSED) {
    if (c->closing) {
      /* the rest after a closing request is dropped, but reading goes on, so
       * that a client hanging up while its request waits is noticed */
      c->discard = 1;
      const char *pos = llhttp_get_error_pos(&c->b->ps->parser);
      discard_count(c, pos ? len - (size_t)(pos - data) : 0);
      conn_update_reading(c);
      return;
    }
    const char *pos = llhttp_get_error_pos(&c->b->ps->parser);
    size_t rest = pos ? len - (size_t)(pos - data) : 0;
    if (rest) {
      char *keep = malloc(rest);
      if (keep == NULL) {
        conn_close(c);
        return;
      }
      memcpy(keep, pos, rest);
      c->b->ps->pending = keep;
      c->b->ps->pending_len = rest;
    }
    conn_update_reading(c);
    conn_arm_timer(c);
    return;
  }
  if (c->b->ps->err_status) {
    lp_http_parse_t *ps = c->b->ps;
    conn_reject(c, ps->err_status, ps->err_code, ps->err_msg, ps->err_extra, ps->err_headers);
  } else {
    char msg[160];
    const char *why = llhttp_get_error_reason(&c->b->ps->parser);
    snprintf(msg, sizeof(msg), "malformed HTTP request: %s", why ? why : "");
    /* 505 for a well-formed version that is not served; a bare CR or other
     * damage on the request line is a malformed request */
    int version = e == HPE_INVALID_VERSION && why && strcmp(why, "Invalid HTTP version") == 0;
    conn_reject(c, version ? 505 : 400, version ? "http_version_not_supported" : "bad_http", msg,
                NULL, NULL);
  }
}

/* A body with at least this many bytes still to come is read straight into
 * its buffer while that has room for such a read: a 4 MiB text then costs
 * the kernel's copy only, not a second one out of rbuf (a tenth of the
 * front's time on it). Smaller bodies arrive in a read or two: rbuf costs
 * them nothing worth having. */
#define DIRECT_BODY_MIN (16 * 1024)

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  lp_httpd_t *s = h->data;
  lp_http_conn_t *c = container_of((uv_tcp_t *)h, lp_http_conn_t, tcp);
  (void)suggested;
  buf->base = s->rbuf;
  buf->len = s->rbuf_cap;
  if (c->discard || c->paused || !conn_is_busy(c) || !c->b->ps || !c->b->ps->in_body || !c->b->cur) return;
  lp_http_req_t *r = c->b->cur;
  /* llhttp counts down what the body still has: no more is offered, so a
   * read holds nothing of the next request; its NUL needs a byte */
  uint64_t left = c->b->ps->parser.content_length;
  /* what is charged, not the whole buffer: the budget counts bytes before
   * they are read in */
  size_t held = r->_body_cap < r->_charged ? r->_body_cap : r->_charged;
  size_t room = held > r->body_len ? held - r->body_len - 1 : 0;
  if (left < DIRECT_BODY_MIN || room < DIRECT_BODY_MIN) return;
  buf->base = r->body + r->body_len;
  buf->len = room < left ? room : (size_t)left;
}

/* EOF counts as the client going away (as nginx does): its queued requests are
 * cancelled, not sent upstream. */
static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  lp_http_conn_t *c = container_of((uv_tcp_t *)st, lp_http_conn_t, tcp);
  if (n < 0) {
    conn_close(c);
    return;
  }
  if (n == 0) return;
  c->last_ms = conn_now(c);
  if (c->discard) {
    discard_count(c, (size_t)n);
    if (c->lingering && c->b->discarded > LINGER_MAX) conn_close(c);
    else conn_update_reading(c);
    return;
  }
  if (c->paused) {
    /* the pipeline is full: hold a little more, so that a hang-up is seen */
    char *p = realloc(c->b->ps->pending, c->b->ps->pending_len + (size_t)n);
    if (p == NULL) {
      conn_close(c);
      return;
    }
    memcpy(p + c->b->ps->pending_len, buf->base, (size_t)n);
    c->b->ps->pending = p;
    c->b->ps->pending_len += (size_t)n;
    conn_update_reading(c);
    return;
  }
  conn_parse(c, buf->base, (size_t)n);
}

static void conn_start_reading(lp_http_conn_t *c) {
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) c->reading = 1;
  else conn_close(c);
}

/* Reads unless the peer does not take its answers, the held-back bytes of a
 * full pipeline reach their bound, or the dropped bytes after a closing
 * request do. */
static void conn_update_reading(lp_http_conn_t *c) {
  if (c->closed) return;
  int want = !c->wblocked;
  if (c->discard && !c->lingering && c->b->discarded >= DISCARD_MAX) want = 0;
  if (!c->discard && c->paused && c->b->ps && c->b->ps->pending_len >= PENDING_MAX) want = 0;
  if (want && !c->reading) {
    conn_start_reading(c);
  } else if (!want && c->reading) {
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = 0;
  }
}

/* Bytes written and not yet taken by the peer: libuv's queue and the kernel's
 * unacknowledged send queue (the kernel only reports the socket writable once
 * much of its buffer is free, so libuv's queue alone hides a slow reader's
 * progress). */
static size_t unsent(lp_http_conn_t *c) {
  size_t n = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
  uv_os_fd_t fd;
  int out = 0;
  if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 && ioctl(fd, SIOCOUTQ, &out) == 0 && out > 0)
    n += (size_t)out;
  return n;
}

/* The peer has sent its FIN (or reset) although we are not reading. */
static int peer_gone(lp_http_conn_t *c) {
  uv_os_fd_t fd;
  struct tcp_info ti;
  socklen_t len = sizeof(ti);
  if (uv_fileno((uv_handle_t *)&c->tcp, &fd) < 0) return 0;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0) return 0;
  return ti.tcpi_state == TCP_CLOSE_WAIT || ti.tcpi_state == TCP_CLOSE;
}

/* The connection timer: the whole-request deadline while one is being received;
 * else idleness, timed from the last byte moved either way (a slow reader of a
 * long answer is not idle while it reads); the linger deadline; and, while the
 * connection is not read, a look at whether its peer hung up. Requests waiting
 * on the app do not time out here. */
static void on_conn_timer(lp_http_conn_t *c) {
  if (c->closed) return;
  if (c->b->waiting) { /* first in line for room: bytes may have been taken on other threads */
    wait_wake(conn_srv(c));
    if (c->closed) return;
  }
  if (c->yielded) { /* the others had their turn: the rest of what it sent */
    c->yielded = 0;
    c->burst = 0;
    conn_resume(c);
    if (c->closed) return;
  }
  uint32_t now = conn_now(c);
  if (c->lingering) {
    if (ms_since(now, c->b->since_ms) >= LINGER_MS || ms_since(now, c->last_ms) >= LINGER_QUIET_MS)
      conn_close(c);
    else
      conn_arm_timer(c);
    return;
  }
  if (c->b->cur && !c->discard) {
    uint64_t limit = conn_srv(c)->cfg.request_timeout_ms;
    if (limit && ms_since(now, c->b->since_ms) >= limit)
      conn_reject(c, 408, "request_timeout", "the request did not arrive in time", NULL, NULL);
    else
      conn_arm_timer(c);
    return;
  }
  size_t wq = unsent(c);
  if ((uint32_t)wq != c->last_wq) {
    c->last_wq = (uint32_t)wq;
    c->last_ms = now;
  }
  if (!c->reading && (c->b->unanswered || c->b->writing || c->b->streams) && peer_gone(c)) {
    conn_close(c);
    return;
  }
  int waiting_on_app = c->b->unanswered > 0 || (c->b->head && !c->b->writing);
  uint64_t idle = conn_srv(c)->cfg.idle_timeout_ms;
  if (!waiting_on_app && idle && ms_since(now, c->last_ms) >= idle) {
    conn_close(c);
    return;
  }
  conn_arm_timer(c);
}

static void on_tick(uv_timer_t *t) {
  lp_httpd_t *s = container_of(t, lp_httpd_t, tick);
  s->tick_at = UINT64_MAX;
  uint64_t now = uv_now(s->loop);
  lp_theap_node_t *top;
  while ((top = lp_theap_top(&s->timers)) != NULL && top->at <= now) {
    lp_http_conn_t *c = container_of(top, lp_http_conn_t, timer);
    lp_theap_remove(&s->timers, top);
    on_conn_timer(c);
  }
  tick_arm(s);
}

static void conn_arm_timer(lp_http_conn_t *c) {
  if (c->closed) return;
  uint64_t now = uv_now(c->tcp.loop), ms;
  uint32_t now32 = (uint32_t)now;
  if (c->lingering) {
    uint32_t since = ms_since(now32, c->b->since_ms);
    ms = since < LINGER_MS ? LINGER_MS - since : 1;
    if (ms > LINGER_QUIET_MS) ms = LINGER_QUIET_MS;
  } else if (c->b->cur && !c->discard) {
    uint64_t limit = conn_srv(c)->cfg.request_timeout_ms, since = ms_since(now32, c->b->since_ms);
    if (!limit) return;
    ms = since < limit ? limit - since : 1;
  } else {
    uint64_t idle = conn_srv(c)->cfg.idle_timeout_ms;
    uint64_t since = ms_since(now32, c->last_ms);
    ms = idle ? (since < idle ? idle - since : 1) : UINT64_MAX;
    if (!c->reading && (c->b->unanswered || c->b->writing || c->b->streams) && ms > WATCH_MS) ms = WATCH_MS;
    if (c->b->writing && ms > idle / 4 + 1) ms = idle / 4 + 1; /* notice write progress */
    if (ms == UINT64_MAX) return;
  }
  conn_timer_at(c, now + ms);
}

/* A connection's record and handle, before its socket is given: NULL when
 * out of memory. */
static lp_http_conn_t *conn_new(lp_httpd_t *s) {
  lp_http_conn_t *c = conn_alloc(s);
  if (c == NULL) return NULL;
  if (uv_tcp_init(s->loop, &c->tcp) < 0) {
    conn_dealloc(s, c);
    return NULL;
  }
  s->alive++;
  c->tcp.data = s; /* what lp_httpd_close finds its connections by */
  c->b = (lp_http_busy_t *)&busy_idle;
  lp_theap_node_init(&c->timer);
  return c;
}

/* A connection given its socket: counted, timed and read. */
static void conn_begin(lp_http_conn_t *c) {
  lp_httpd_t *s = conn_srv(c);
  uv_tcp_nodelay(&c->tcp, 1);
  s->nconns++;
  c->last_ms = conn_now(c);
  if (__atomic_add_fetch(&s->count->conns, 1, __ATOMIC_RELAXED) > s->cfg.max_connections) {
    conn_reject(c, 503, "too_many_connections", "connection limit reached", NULL, "Retry-After: 1\r\n");
    return;
  }
  conn_arm_timer(c);
  conn_start_reading(c);
}

static void on_connection(uv_stream_t *server, int status) {
  lp_httpd_t *s = container_of(server, lp_httpd_t, listener);
  if (status < 0) return;
  lp_http_conn_t *c = conn_new(s);
  if (c == NULL) return;
  if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
    uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
    return;
  }
  conn_begin(c);
}

/* At a drain, before the listener closes: the connections in its queue are
 * taken in, as the loop would have taken them. Their clients connected and
 * may have sent a request before the drain; closing the listener would reset
 * them. Those that sent nothing are closed at once by the walk that follows.
 * At most the listen backlog: a client connecting meanwhile is not waited for. */
static void accept_queued(lp_httpd_t *s) {
  uv_os_fd_t lfd;
  if (uv_fileno((uv_handle_t *)&s->listener, &lfd) < 0) return;
  for (int i = 0; i < LISTEN_BACKLOG; i++) {
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return; /* EAGAIN: the queue is empty; else nothing more can be taken */
    }
    lp_http_conn_t *c = conn_new(s);
    if (c == NULL) {
      close(fd);
      continue;
    }
    if (uv_tcp_open(&c->tcp, (uv_os_sock_t)fd) < 0) {
      close(fd);
      uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
      continue;
    }
    conn_begin(c);
  }
}

/* ---- the server ---- */

static void set_too_large_msg(lp_httpd_t *s) {
  snprintf(s->too_large_msg, sizeof(s->too_large_msg), "request body exceeds max_body_bytes (%zu bytes)",
           s->cfg.max_body_bytes);
}

lp_httpd_t *lp_httpd_new(uv_loop_t *loop, const lp_httpd_config_t *cfg) {
  lp_httpd_t *s = calloc(1, sizeof(*s));
  if (s == NULL) return NULL;
  s->loop = loop;
  s->cfg = *cfg;
  s->count = cfg->shared ? cfg->shared : &s->own;
  /* trace ids should be random (W3C): a seed from the kernel, else the ids' base */
  if (getrandom(&s->trace_rng, sizeof(s->trace_rng), GRND_NONBLOCK) != sizeof(s->trace_rng))
    s->trace_rng = cfg->id_base ^ uv_hrtime();
  if (s->cfg.max_pipeline == 0) s->cfg.max_pipeline = 1;
  set_too_large_msg(s);
  s->rbuf_cap = 64 * 1024;
  s->rbuf = malloc(s->rbuf_cap);
  if (s->rbuf == NULL) {
    free(s);
    return NULL;
  }
  lp_theap_init(&s->timers);
  /* the base of made request ids: no two processes start alike */
  s->id_base = cfg->id_base ? cfg->id_base
                            : (uv_hrtime() * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)uv_os_getpid() << 32) ^ (uintptr_t)s;
  uv_timer_init(loop, &s->tick);
  s->tick_open = 1;
  s->tick_at = UINT64_MAX;
  llhttp_settings_init(&s->settings);
  s->settings.on_message_begin = on_message_begin;
  s->settings.on_url = on_url;
  s->settings.on_header_field = on_header_field;
  s->settings.on_header_value = on_header_value;
  s->settings.on_header_value_complete = on_header_value_complete;
  s->settings.on_header_field_complete = on_header_field_complete;
  s->settings.on_chunk_extension_name = on_chunk_ext;
  s->settings.on_chunk_extension_value = on_chunk_ext;
  s->settings.on_headers_complete = on_headers_complete;
  s->settings.on_body = on_body;
  s->settings.on_message_complete = on_message_complete;
  return s;
}

int lp_parse_hostport(const char *addr, struct sockaddr_storage *ss) {
  char host[256];
  const char *colon;
  if (addr[0] == '[') {
    const char *rb = strchr(addr, ']');
    if (!rb || rb[1] != ':' || (size_t)(rb - addr - 1) >= sizeof(host)) return UV_EINVAL;
    memcpy(host, addr + 1, (size_t)(rb - addr - 1));
    host[rb - addr - 1] = '\0';
    colon = rb + 1;
  } else {
    colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= sizeof(host)) return UV_EINVAL;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
  }
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (colon[1] == '\0' || *end || port < 0 || port > 65535) return UV_EINVAL;
  if (strcmp(host, "localhost") == 0) strcpy(host, "127.0.0.1");
  if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)ss) == 0) return 0;
  if (uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)ss) == 0) return 0;
  return UV_EINVAL;
}

/* libuv 1.44 has no UV_TCP_REUSEPORT: the socket is made and bound here with
 * SO_REUSEPORT, then handed to the listener. */
static int reuseport_open(lp_httpd_t *s, const struct sockaddr_storage *ss) {
  socklen_t len = ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
  int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return uv_translate_sys_error(errno);
  int one = 1, rc = 0;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
      setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
      bind(fd, (const struct sockaddr *)ss, len) < 0)
    rc = uv_translate_sys_error(errno);
  if (!rc) rc = uv_tcp_open(&s->listener, (uv_os_sock_t)fd);
  if (rc) close(fd);
  return rc;
}

int lp_httpd_listen(lp_httpd_t *s, const char *addr, int *port) {
  struct sockaddr_storage ss;
  int rc = lp_parse_hostport(addr, &ss);
  if (rc) return rc;
  if ((rc = uv_tcp_init(s->loop, &s->listener)) < 0) return rc;
  s->listening = 1;
  if (s->cfg.reuseport && (rc = reuseport_open(s, &ss)) < 0) return rc;
  if ((!s->cfg.reuseport && (rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&ss, 0)) < 0) ||
      (rc = uv_listen((uv_stream_t *)&s->listener, LISTEN_BACKLOG, on_connection)) < 0)
    return rc;
  struct sockaddr_storage got;
  int len = sizeof(got);
  if (port && uv_tcp_getsockname(&s->listener, (struct sockaddr *)&got, &len) == 0)
    *port = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
                                            : ((struct sockaddr_in *)&got)->sin_port);
  return 0;
}

size_t lp_httpd_connections(const lp_httpd_t *s) { return s->nconns; }

void lp_httpd_set_limits(lp_httpd_t *s, const lp_httpd_config_t *cfg) {
  s->cfg.max_header_bytes = cfg->max_header_bytes;
  s->cfg.max_body_bytes = cfg->max_body_bytes;
  set_too_large_msg(s);
  s->cfg.max_connections = cfg->max_connections;
  s->cfg.max_pipeline = cfg->max_pipeline ? cfg->max_pipeline : 1;
  s->cfg.idle_timeout_ms = cfg->idle_timeout_ms;
  s->cfg.request_timeout_ms = cfg->request_timeout_ms;
  s->cfg.max_unsent_bytes = cfg->max_unsent_bytes;
  s->cfg.max_unsent_bytes_total = cfg->max_unsent_bytes_total;
  s->cfg.max_body_bytes_in_flight = cfg->max_body_bytes_in_flight;
  s->cfg.max_requests_per_connection = cfg->max_requests_per_connection; /* open connections keep their count */
}

void lp_http_peer(const lp_http_req_t *req, char *out, size_t n) {
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  char ip[64];
  out[0] = '\0';
  if (uv_tcp_getpeername(&req->_conn->tcp, (struct sockaddr *)&ss, &len) < 0) return;
  if (ss.ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
    if (uv_ip6_name(a, ip, sizeof(ip)) == 0) snprintf(out, n, "[%s]:%d", ip, ntohs(a->sin6_port));
  } else {
    const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
    if (uv_ip4_name(a, ip, sizeof(ip)) == 0) snprintf(out, n, "%s:%d", ip, ntohs(a->sin_port));
  }
}

/* Frees the server once it is closing, its listener is closed and every
 * connection's handles are closed. */
static void on_tick_closed(uv_handle_t *h) {
  lp_httpd_t *s = container_of(h, lp_httpd_t, tick);
  s->tick_closed = 1;
  server_maybe_finish(s);
}

static void server_maybe_finish(lp_httpd_t *s) {
  if (!s->closing || s->listening || s->alive > 0) return;
  if (s->tick_open) {
    s->tick_open = 0;
    uv_close((uv_handle_t *)&s->tick, on_tick_closed);
    return;
  }
  if (!s->tick_closed) return;
  void (*done)(void *) = s->done;
  void *arg = s->done_arg;
  while (s->parse_free) {
    lp_http_parse_t *ps = s->parse_free;
    s->parse_free = ps->next_free;
    free(ps);
  }
  while (s->busy_free) {
    lp_http_busy_t *b = s->busy_free;
    s->busy_free = b->next_free;
    free(b);
  }
  while (s->req_free) {
    lp_http_req_t *r = s->req_free;
    s->req_free = r->_next;
    lp_buf_free(&r->_resp);
    free(r);
  }
  if (s->slab_spare) munmap(s->slab_spare, SLAB_BYTES); /* every slab else is empty: unmapped */
  lp_theap_free(&s->timers);
  free(s->rbuf);
  free(s);
  if (done) done(arg);
}

static void on_listener_closed(uv_handle_t *h) {
  lp_httpd_t *s = container_of(h, lp_httpd_t, listener);
  s->listening = 0;
  server_maybe_finish(s);
}

/* Whether a client has sent bytes not yet read (a peek: nothing is taken). */
static int bytes_waiting(lp_http_conn_t *c) {
  uv_os_fd_t fd;
  char one;
  if (uv_fileno((uv_handle_t *)&c->tcp, &fd) < 0) return 0;
  return recv(fd, &one, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

/* For lp_httpd_close, on each handle of the loop: the server's open
 * connections are its TCP handles whose data is the server (the listener's is
 * not), so that a connection needs no list links of its own. uv_walk goes
 * over a copy of the loop's list: closing here is safe. */
static void close_walk(uv_handle_t *h, void *arg) {
  lp_httpd_t *s = arg;
  if (h->type != UV_TCP || h->data != s || h == (uv_handle_t *)&s->listener || uv_is_closing(h))
    return;
  lp_http_conn_t *c = container_of((uv_tcp_t *)h, lp_http_conn_t, tcp);
  /* an answer still being written is not cut: it closes when written */
  if (c->b->head == NULL && c->b->cur == NULL && c->b->writing == 0 && !c->lingering) {
    /* idle, unless a request's bytes wait unread in its socket: sent before
     * the drain, so answered (the server's closing ends the connection after
     * it, with Connection: close). A keep-alive client sending after this
     * look meets the close, as with any server. */
    if (!c->closing && !c->discard && bytes_waiting(c)) return;
    conn_close(c);
  } else {
    c->closing = 1;
  }
}

void lp_httpd_close(lp_httpd_t *s, void (*done)(void *), void *arg) {
  s->closing = 1;
  s->done = done;
  s->done_arg = arg;
  /* idle connections go now; busy ones after their last answer */
  if (s->listening) accept_queued(s);
  uv_walk(s->loop, close_walk, s);
  if (s->listening) uv_close((uv_handle_t *)&s->listener, on_listener_closed);
  else server_maybe_finish(s);
}
