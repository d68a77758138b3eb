/* The recent-batches ring behind the live view: fixed arrays, one entry per
 * batch and a shared circular store of their segments, rendered as JSON. */
#include "lanepack/recent.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct seg_s {
  uint32_t lane, offset, length;
} seg_t;

typedef struct entry_s {
  uint64_t ticket; /* 0: never used */
  uint64_t id;
  char model[LP_RECENT_NAME];
  char backend[LP_RECENT_URL];
  char reason[LP_RECENT_WORD];
  uint32_t backend_index, device, devices, lanes, bucket, copies;
  uint64_t real_tokens, queue_seqs, queue_tokens;
  uint64_t sent_ns, lead_ns, cost_ns, expect_ns;
  uint64_t device_free[LP_RECENT_DEVICES];
  uint32_t ndevice_free;
  /* its segments: store positions [seg_at, seg_at + nkept) of the running count */
  uint64_t seg_at;
  uint32_t nkept;
  uint64_t nsegs;
  /* how it ended */
  int answered;
  int http_status;
  char outcome[LP_RECENT_WORD];
  uint64_t answered_ns, device_ns;
} entry_t;

struct lp_recent_s {
  entry_t e[LP_RECENT_BATCHES];
  seg_t seg[LP_RECENT_SEGMENTS];
  uint64_t tickets;      /* batches recorded so far: the newest one's ticket */
  uint64_t segs_written; /* segments stored so far (the store wraps) */
};

lp_recent_t *lp_recent_new(void) { return calloc(1, sizeof(lp_recent_t)); }

void lp_recent_free(lp_recent_t *r) { free(r); }

lp_recent_t *lp_recent_dup(const lp_recent_t *r) {
  lp_recent_t *c = malloc(sizeof(*c)); /* fixed arrays only: one copy holds it all */
  if (c) memcpy(c, r, sizeof(*c));
  return c;
}

static void copy_str(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src ? src : "");
}

/* The entry of ticket while it is held whole (its slot not reused, its
 * segments not overwritten), else NULL. */
static const entry_t *held(const lp_recent_t *r, uint64_t ticket) {
  if (ticket == 0 || ticket > r->tickets || r->tickets - ticket >= LP_RECENT_BATCHES) return NULL;
  const entry_t *e = &r->e[(ticket - 1) % LP_RECENT_BATCHES];
  if (e->ticket != ticket || r->segs_written - e->seg_at > LP_RECENT_SEGMENTS) return NULL;
  return e;
}

uint64_t lp_recent_sent(lp_recent_t *r, const lp_recent_sent_t *s) {
  uint64_t ticket = ++r->tickets;
  entry_t *e = &r->e[(ticket - 1) % LP_RECENT_BATCHES];
  memset(e, 0, sizeof(*e));
  e->ticket = ticket;
  e->id = s->id;
  copy_str(e->model, sizeof(e->model), s->model);
  copy_str(e->backend, sizeof(e->backend), s->backend);
  copy_str(e->reason, sizeof(e->reason), s->reason);
  e->backend_index = s->backend_index;
  e->device = s->device;
  e->devices = s->devices;
  e->lanes = s->lanes;
  e->bucket = s->bucket;
  e->copies = s->copies;
  e->real_tokens = s->real_tokens;
  e->queue_seqs = s->queue_seqs;
  e->queue_tokens = s->queue_tokens;
  e->sent_ns = s->sent_ns;
  e->lead_ns = s->lead_ns;
  e->cost_ns = s->cost_ns;
  e->expect_ns = s->expect_ns;
  e->ndevice_free = s->ndevice_free < LP_RECENT_DEVICES ? s->ndevice_free : LP_RECENT_DEVICES;
  if (s->device_free_ns) memcpy(e->device_free, s->device_free_ns, e->ndevice_free * sizeof(uint64_t));
  else e->ndevice_free = 0;
  e->nsegs = s->segs ? s->nsegs : 0;
  e->nkept = (uint32_t)(e->nsegs < LP_RECENT_SEGMENTS ? e->nsegs : LP_RECENT_SEGMENTS);
  e->seg_at = r->segs_written;
  for (uint32_t i = 0; i < e->nkept; i++) {
    seg_t *g = &r->seg[(r->segs_written + i) % LP_RECENT_SEGMENTS];
    g->lane = s->segs[i].lane;
    g->offset = s->segs[i].offset;
    g->length = s->segs[i].length;
  }
  r->segs_written += e->nkept;
  return ticket;
}

int lp_recent_answered(lp_recent_t *r, uint64_t ticket, const char *outcome, int http_status,
                       uint64_t device_ns, uint64_t now_ns) {
  entry_t *e = (entry_t *)held(r, ticket);
  if (!e) return -ENOENT;
  e->answered = 1;
  copy_str(e->outcome, sizeof(e->outcome), outcome);
  e->http_status = http_status;
  e->device_ns = device_ns;
  e->answered_ns = now_ns;
  return 0;
}

size_t lp_recent_count(const lp_recent_t *r) {
  size_t n = 0;
  while (n < LP_RECENT_BATCHES && held(r, r->tickets - n)) n++;
  return n;
}

int lp_recent_query_n(const char *query, size_t len, uint32_t *n) {
  *n = LP_RECENT_BATCHES;
  int seen = 0;
  for (size_t i = 0; i < len;) {
    size_t end = i;
    while (end < len && query[end] != '&') end++;
    if (end - i >= 1 && query[i] == 'n' && (end - i == 1 || query[i + 1] == '=')) {
      if (seen++) return -EINVAL;
      size_t k = i + 2;
      uint32_t v = 0;
      if (end - i < 3) return -EINVAL; /* "n" or "n=" */
      for (; k < end; k++) {
        if (query[k] < '0' || query[k] > '9') return -EINVAL;
        v = v * 10 + (uint32_t)(query[k] - '0');
        if (v > LP_RECENT_BATCHES) return -EINVAL;
      }
      if (v < 1) return -EINVAL;
      *n = v;
    }
    i = end + 1;
  }
  return 0;
}

/* A time after the batch's send in milliseconds, or null when unknown. */
static void put_after(lp_buf_t *b, uint64_t t, uint64_t sent) {
  if (!t || !sent) lp_buf_puts(b, "null");
  else lp_buf_printf(b, "%.3f", (double)(int64_t)(t - sent) / 1e6);
}

static void put_ms(lp_buf_t *b, uint64_t ns) {
  if (!ns) lp_buf_puts(b, "null");
  else lp_buf_printf(b, "%.3f", (double)ns / 1e6);
}

static void render_one(const lp_recent_t *r, const entry_t *e, uint64_t now_ns, lp_buf_t *b) {
  double slots = (double)e->lanes * (double)e->bucket;
  lp_buf_printf(b, "{\"id\": %llu, \"model\": ", (unsigned long long)e->id);
  lp_buf_json_str(b, e->model, strlen(e->model));
  lp_buf_printf(b, ", \"shape\": [%u, %u], \"backend\": {\"index\": %u, \"url\": ", e->lanes, e->bucket,
                e->backend_index);
  lp_buf_json_str(b, e->backend, strlen(e->backend));
  lp_buf_printf(b, "}, \"device\": %u, \"devices\": %u, \"reason\": ", e->device, e->devices);
  lp_buf_json_str(b, e->reason, strlen(e->reason));
  lp_buf_printf(b,
                ", \"copies\": %u, \"real_tokens\": %llu, \"fill\": %.4f, "
                "\"queue\": {\"sequences\": %llu, \"tokens\": %llu}, \"age_ms\": ",
                e->copies, (unsigned long long)e->real_tokens, slots > 0 ? (double)e->real_tokens / slots : 0.0,
                (unsigned long long)e->queue_seqs, (unsigned long long)e->queue_tokens);
  lp_buf_printf(b, "%.3f", now_ns > e->sent_ns ? (double)(now_ns - e->sent_ns) / 1e6 : 0.0);
  lp_buf_puts(b, ", \"clock\": {\"lead_ms\": ");
  put_ms(b, e->lead_ns);
  lp_buf_puts(b, ", \"cost_ms\": ");
  put_ms(b, e->cost_ns);
  lp_buf_puts(b, ", \"start_ms\": ");
  put_after(b, e->expect_ns && e->cost_ns && e->expect_ns > e->cost_ns ? e->expect_ns - e->cost_ns : 0, e->sent_ns);
  lp_buf_puts(b, ", \"end_ms\": ");
  put_after(b, e->expect_ns, e->sent_ns);
  lp_buf_puts(b, ", \"device_busy_ms\": [");
  for (uint32_t d = 0; d < e->ndevice_free; d++) {
    if (d) lp_buf_puts(b, ", ");
    put_after(b, e->device_free[d], e->sent_ns);
  }
  lp_buf_puts(b, "]}, \"answer\": ");
  if (e->answered) {
    lp_buf_puts(b, "{\"outcome\": ");
    lp_buf_json_str(b, e->outcome, strlen(e->outcome));
    lp_buf_printf(b, ", \"status\": %d, \"after_ms\": ", e->http_status);
    put_after(b, e->answered_ns, e->sent_ns);
    lp_buf_puts(b, ", \"device_ms\": ");
    put_ms(b, e->device_ns);
    lp_buf_puts(b, "}");
  } else {
    lp_buf_puts(b, "null");
  }
  lp_buf_printf(b, ", \"segments_total\": %llu, \"segments\": [", (unsigned long long)e->nsegs);
  for (uint32_t i = 0; i < e->nkept; i++) {
    const seg_t *g = &r->seg[(e->seg_at + i) % LP_RECENT_SEGMENTS];
    lp_buf_printf(b, "%s[%u, %u, %u]", i ? ", " : "", g->lane, g->offset, g->length);
  }
  lp_buf_puts(b, "]}");
}

void lp_recent_render(const lp_recent_t *r, uint32_t n, uint64_t now_ns, lp_buf_t *b) {
  lp_buf_printf(b, "{\"capacity\": %d, \"batches\": [", LP_RECENT_BATCHES);
  for (uint32_t k = 0; k < n && k < LP_RECENT_BATCHES; k++) {
    const entry_t *e = held(r, r->tickets - k);
    if (!e) break; /* older ones are gone too */
    if (k) lp_buf_puts(b, ",\n ");
    render_one(r, e, now_ns, b);
  }
  lp_buf_puts(b, "]}\n");
}
