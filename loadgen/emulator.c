/* lanepack-emulator: a static-shape accelerator on loopback. It accepts only
 * its compiled shapes, costs a fixed time per batch whatever the fill, runs one
 * batch at a time per device, checks every batch's layout and answers with a
 * function of each token's own segment (lanepack/emu.h). Fault switches make
 * it fail, reset, stall or garble at seeded rates. */
#include <errno.h>

#ifndef LP_VERSION
#define LP_VERSION "0.1.0"
#endif

#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "lanepack/bucket.h"
#include "lanepack/buf.h"
#include "lanepack/emu.h"
#include "lanepack/httpd.h"
#include "lanepack/jscan.h"
#include "lanepack/rng.h"

#include "emulator.h"

void emu_job_free(job_t *j) {
  free(j->ids);
  free(j->sids);
  free(j->pos);
  free(j->cu);
  free(j);
}

int emu_shapes_missing(const emu_t *emu) { return emu->missing_file && access(emu->missing_file, F_OK) == 0; }

/* ---- parsing and checking a batch ---- */

typedef struct {
  char msg[256];
} perr_t;

static int bad(perr_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(perr_t *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
  va_end(ap);
  return -1;
}

/* Reads rows x cols integers from an array of arrays (or a flat array when
 * rows == 0: then *cols gets its length, at most max). */
static const char *read_matrix(const char *p, const char *end, int32_t *out, uint32_t rows,
                               uint32_t *cols, size_t max, const char *name, perr_t *e) {
  size_t n;
  int err;
  if (rows == 0) {
    const char *q = lp_jscan_int_array(p, end, out, max, INT32_MIN, INT32_MAX, &n, &err);
    if (!q) return bad(e, "'%s' is not a flat array of integers", name), NULL;
    *cols = (uint32_t)n;
    return q;
  }
  if (p >= end || *p != '[') return bad(e, "'%s' is not an array of lanes", name), NULL;
  p = lp_jscan_ws(p + 1, end);
  for (uint32_t r = 0; r < rows; r++) {
    if (r) {
      if (p >= end || *p != ',')
        return bad(e, "'%s' has %ld lanes, the shape says %ld", name, (long)r, (long)rows), NULL;
      p = lp_jscan_ws(p + 1, end);
    }
    const char *q = lp_jscan_int_array(p, end, out + (size_t)r * *cols, *cols, INT32_MIN,
                                       INT32_MAX, &n, &err);
    if (!q && err == LP_JSCAN_E_TOO_MANY)
      return bad(e, "'%s' lane %ld is longer than the bucket %ld", name, (long)r, (long)*cols), NULL;
    if (!q) return bad(e, "'%s' lane %ld is not an array of integers", name, (long)r), NULL;
    if (n != *cols)
      return bad(e, "'%s' lane has %ld values, the bucket is %ld", name, (long)n, (long)*cols), NULL;
    p = lp_jscan_ws(q, end);
  }
  if (p >= end || *p != ']')
    return bad(e, "'%s' has more lanes than the shape's %ld", name, (long)rows), NULL;
  return p + 1;
}

/* Checks segment and position ids against the segments list. Returns 0 or -1. */
static int check_segments(job_t *j, json_t *segs, perr_t *e) {
  size_t slots = (size_t)j->lanes * j->bucket;
  uint8_t *covered = calloc(slots ? slots : 1, 1);
  if (!covered) return bad(e, "%s", "out of memory");
  int rc = 0;
  uint32_t *last_seg = calloc(j->lanes, sizeof(uint32_t));
  size_t i;
  json_t *s;
  json_array_foreach(segs, i, s) {
    json_int_t lane = json_integer_value(json_object_get(s, "lane"));
    json_int_t seg = json_integer_value(json_object_get(s, "segment"));
    json_int_t off = json_integer_value(json_object_get(s, "offset"));
    json_int_t len = json_integer_value(json_object_get(s, "length"));
    if (!json_is_object(s) || lane < 0 || lane >= j->lanes || len <= 0 || off < 0 ||
        off + len > j->bucket) {
      rc = bad(e, "segments[%ld] is out of the rectangle (lane %ld)", (long)i, (long)lane);
      break;
    }
    if ((uint32_t)seg != last_seg[lane] + 1) {
      rc = bad(e, "segments[%ld]: segment ids must count 1, 2, ... per lane, got %ld", (long)i, (long)seg);
      break;
    }
    last_seg[lane] = (uint32_t)seg;
    size_t base = (size_t)lane * j->bucket + (size_t)off;
    for (json_int_t k = 0; k < len && rc == 0; k++) {
      if (covered[base + k]) {
        rc = bad(e, "segments[%ld] overlaps another", (long)i);
        break;
      }
      covered[base + k] = 1;
      if (j->sids[base + k] != seg)
        rc = bad(e, "segment_ids at lane %ld slot %ld disagree with segments", (long)lane, (long)(off + k));
      else if (j->pos[base + k] != k)
        rc = bad(e, "position_ids at lane %ld slot %ld should restart at 0 per segment", (long)lane, (long)(off + k));
    }
    if (rc) break;
  }
  for (size_t k = 0; rc == 0 && k < slots; k++)
    if (!covered[k] && (j->sids[k] != 0 || j->pos[k] != 0))
      rc = bad(e, "padding at lane %ld slot %ld must have segment and position id 0", (long)(k / j->bucket), (long)(k % j->bucket));
  free(covered);
  free(last_seg);
  return rc;
}

/* Parses and checks a batch. Returns 0, or an HTTP status with e->msg set. */
static int parse_batch(emu_t *emu, job_t *j, const char *body, size_t len, perr_t *e) {
  const char *p = lp_jscan_ws(body, body + len), *end = body + len;
  const char *ids_at = NULL, *sids_at = NULL, *pos_at = NULL;
  json_t *segs = NULL;
  int64_t lanes = -1, bucket = -1;
  int read_in_place = 0; /* input_ids 1, segment_ids 2, position_ids 4: read already */
  j->shape = -1;
  int have_cu = 0;
  if (p >= end || *p != '{') return bad(e, "batch is not a JSON object"), 400;
  p = lp_jscan_ws(p + 1, end);
  while (p < end && *p != '}') {
    int k_ids, k_sids, k_pos, k_shape, k_segs, k_id, k_cu;
    const char *key = p;
    if (*p != '"' || !(p = lp_jscan_key(key, end, "input_ids", &k_ids)))
      return bad(e, "batch is not valid JSON"), 400;
    lp_jscan_key(key, end, "segment_ids", &k_sids);
    lp_jscan_key(key, end, "position_ids", &k_pos);
    lp_jscan_key(key, end, "shape", &k_shape);
    lp_jscan_key(key, end, "segments", &k_segs);
    lp_jscan_key(key, end, "batch_id", &k_id);
    lp_jscan_key(key, end, "cu_seqlens", &k_cu);
    p = lp_jscan_ws(p, end);
    if (p >= end || *p != ':') return bad(e, "batch is not valid JSON"), 400;
    p = lp_jscan_ws(p + 1, end);
    const char *v = p;
    /* the arrays of a rectangle whose shape came first (lanepack writes it
     * first) are read where they are, not skipped and read again */
    int32_t *into = !have_cu && j->shape >= 0 ? (k_ids ? j->ids : k_sids ? j->sids : k_pos ? j->pos : NULL) : NULL;
    if (into) {
      uint32_t b = j->bucket;
      p = read_matrix(v, end, into, j->lanes, &b, 0, k_ids ? "input_ids" : k_sids ? "segment_ids" : "position_ids", e);
      if (!p) {
        json_decref(segs);
        return 400;
      }
      read_in_place |= k_ids ? 1 : k_sids ? 2 : 4;
    } else {
      p = lp_jscan_skip(p, end, 8);
    }
    if (!p) return bad(e, "batch is not valid JSON"), 400;
    if (k_ids) ids_at = v;
    else if (k_sids) sids_at = v;
    else if (k_pos) pos_at = v;
    else if (k_shape || k_segs || k_id || k_cu) {
      json_error_t je;
      json_t *x = json_loadb(v, (size_t)(p - v), JSON_DECODE_ANY, &je);
      if (!x) return bad(e, "batch is not valid JSON"), 400;
      if (k_shape) {
        if (!json_is_array(x) || json_array_size(x) != 2 ||
            !json_is_integer(json_array_get(x, 0)) || !json_is_integer(json_array_get(x, 1))) {
          json_decref(x);
          return bad(e, "'shape' must be [lanes, bucket]"), 400;
        }
        lanes = json_integer_value(json_array_get(x, 0));
        bucket = json_integer_value(json_array_get(x, 1));
        json_decref(x);
        if (j->shape < 0 && !ids_at && !sids_at && !pos_at && lanes > 0 && bucket > 0 && lanes <= 65536 &&
            bucket <= (1 << 24)) {
          int si = lp_bucket_set_find(&emu->shapes, (uint32_t)lanes, (uint32_t)bucket);
          size_t slots = (size_t)lanes * (size_t)bucket;
          if (si >= 0 && (j->ids = malloc(slots * sizeof(int32_t))) && (j->sids = malloc(slots * sizeof(int32_t))) &&
              (j->pos = malloc(slots * sizeof(int32_t)))) {
            j->shape = si;
            j->lanes = (uint32_t)lanes;
            j->bucket = (uint32_t)bucket;
          }
        }
      } else if (k_segs) {
        if (!json_is_array(x)) {
          json_decref(x);
          return bad(e, "'segments' must be an array"), 400;
        }
        json_decref(segs);
        segs = x;
      } else if (k_id) {
        j->batch_id = json_integer_value(x);
        json_decref(x);
      } else {
        json_decref(x);
        have_cu = 1;
        /* cu_seqlens is read with the fast reader below */
        size_t n;
        int err;
        free(j->cu);
        j->cu = malloc(((size_t)(p - v) / 2 + 2) * sizeof(int32_t));
        if (!j->cu || !lp_jscan_int_array(v, p, j->cu, (size_t)(p - v) / 2 + 1, 0, INT32_MAX,
                                          &n, &err)) {
          json_decref(segs);
          return bad(e, "'cu_seqlens' must be an array of non-negative integers"), 400;
        }
        j->ncu = n;
      }
    }
    p = lp_jscan_ws(p, end);
    if (p < end && *p == ',') p = lp_jscan_ws(p + 1, end);
  }
  if (!ids_at) {
    json_decref(segs);
    return bad(e, "batch has no 'input_ids'"), 400;
  }
  if (have_cu) {
    /* ragged form: a flat token list cut by cu_seqlens */
    if (!emu->ragged_ok) {
      json_decref(segs);
      return bad(e, "shape mismatch: this device takes rectangles only"), 500;
    }
    size_t max = (size_t)(end - ids_at) / 2 + 1;
    j->shape = -1; /* a shape named beside cu_seqlens is ignored, as before */
    free(j->ids);
    j->ids = malloc(max * sizeof(int32_t));
    uint32_t n = 0;
    if (!j->ids || !read_matrix(ids_at, end, j->ids, 0, &n, max, "input_ids", e)) {
      json_decref(segs);
      return 400;
    }
    if (j->ncu < 2 || j->cu[0] != 0 || (uint32_t)j->cu[j->ncu - 1] != n) {
      json_decref(segs);
      return bad(e, "'cu_seqlens' must run from 0 to the token count %ld", (long)n), 400;
    }
    for (size_t i = 1; i < j->ncu; i++)
      if (j->cu[i] <= j->cu[i - 1]) {
        json_decref(segs);
        return bad(e, "'cu_seqlens' must increase (at %ld)", (long)i), 400;
      }
    j->lanes = 1;
    j->bucket = n;
    json_decref(segs);
    return 0;
  }
  if (lanes <= 0 || bucket <= 0 || lanes > 65536 || bucket > (1 << 24)) {
    json_decref(segs);
    return bad(e, "batch has no valid 'shape'"), 400;
  }
  int si = lp_bucket_set_find(&emu->shapes, (uint32_t)lanes, (uint32_t)bucket);
  if (si < 0) {
    json_decref(segs);
    return bad(e, "shape mismatch: [%ld, %ld] is not compiled", (long)lanes, (long)bucket),
           500;
  }
  size_t slots = (size_t)lanes * (size_t)bucket;
  if (j->shape != si || j->lanes != (uint32_t)lanes || j->bucket != (uint32_t)bucket) {
    /* the shape named last (or twice): the arrays are read below */
    free(j->ids), free(j->sids), free(j->pos);
    j->ids = malloc(slots * sizeof(int32_t));
    j->sids = malloc(slots * sizeof(int32_t));
    j->pos = malloc(slots * sizeof(int32_t));
    read_in_place = 0;
  }
  j->shape = si;
  j->lanes = (uint32_t)lanes;
  j->bucket = (uint32_t)bucket;
  if (!j->ids || !j->sids || !j->pos) {
    json_decref(segs);
    return bad(e, "out of memory"), 500;
  }
  if (!sids_at || !pos_at || !segs) {
    json_decref(segs);
    return bad(e, "batch needs 'segment_ids', 'position_ids' and 'segments'"), 400;
  }
  uint32_t b = j->bucket;
  if ((!(read_in_place & 1) && !read_matrix(ids_at, end, j->ids, j->lanes, &b, 0, "input_ids", e)) ||
      (!(read_in_place & 2) && !read_matrix(sids_at, end, j->sids, j->lanes, &b, 0, "segment_ids", e)) ||
      (!(read_in_place & 4) && !read_matrix(pos_at, end, j->pos, j->lanes, &b, 0, "position_ids", e))) {
    json_decref(segs);
    return 400;
  }
  int rc = check_segments(j, segs, e);
  json_decref(segs);
  return rc ? 400 : 0;
}

/* ---- computing and answering ---- */


/* n outputs as a JSON array: the hashes themselves, or with dims K each a
 * vector of K floats, lp_emu_feature(h, 0..K-1) (an embedding's stand-in, as
 * the v2 wire's FP32 [.., K] output). %.9g writes a float exactly. */
static void put_values(lp_buf_t *b, const int32_t *v, size_t n, unsigned dims) {
  if (!dims) {
    lp_buf_i32_array(b, v, n);
    return;
  }
  lp_buf_puts(b, "[");
  for (size_t i = 0; i < n; i++) {
    lp_buf_puts(b, i ? ",[" : "[");
    for (unsigned k = 0; k < dims; k++) lp_buf_printf(b, k ? ",%.9g" : "%.9g", (double)lp_emu_feature(v[i], k));
    lp_buf_puts(b, "]");
  }
  lp_buf_puts(b, "]");
}

static void answer(job_t *j) {
  emu_t *emu = j->emu;
  lp_buf_t out;
  lp_buf_init(&out);
  lp_buf_t body;
  lp_buf_init(&body);
  lp_buf_puts(&body, "{\"batch_id\": ");
  lp_buf_i64(&body, j->batch_id);
  int32_t *h = malloc(((size_t)j->bucket + 1) * sizeof(int32_t));
  int32_t *segv = malloc(((size_t)j->bucket + 1) * sizeof(int32_t));
  if (!h || !segv) {
    lp_http_respond_error(j->req, 500, NULL, "out_of_memory", "emulator out of memory", NULL);
    free(h);
    free(segv);
    lp_buf_free(&body);
    return;
  }
  lp_buf_puts(&body, emu->per_segment ? ", \"segment_outputs\": " : ", \"outputs\": ");
  if (j->cu) {
    /* ragged: flat outputs over the whole token list */
    int32_t *all = malloc(((size_t)j->bucket + 1) * sizeof(int32_t));
    size_t nseg = 0;
    for (size_t s = 0; all && s + 1 < j->ncu; s++) {
      size_t a = (size_t)j->cu[s], n = (size_t)(j->cu[s + 1] - j->cu[s]);
      lp_emu_outputs(j->ids + a, n, all + a);
      segv[nseg++] = all[a + n - 1];
    }
    if (emu->per_segment) put_values(&body, segv, nseg, emu->v2_dims);
    else put_values(&body, all, j->bucket, emu->v2_dims);
    free(all);
  } else {
    lp_buf_puts(&body, "[");
    for (uint32_t lane = 0; lane < j->lanes; lane++) {
      const int32_t *ids = j->ids + (size_t)lane * j->bucket;
      const int32_t *sid = j->sids + (size_t)lane * j->bucket;
      size_t nseg = 0;
      uint32_t k = 0;
      while (k < j->bucket) {
        if (sid[k] == 0) {
          h[k++] = 0;
          continue;
        }
        uint32_t e = k;
        while (e < j->bucket && sid[e] == sid[k]) e++;
        lp_emu_outputs(ids + k, e - k, h + k);
        segv[nseg++] = h[e - 1];
        k = e;
      }
      if (lane) lp_buf_puts(&body, ",");
      if (emu->per_segment) put_values(&body, segv, nseg, emu->v2_dims);
      else put_values(&body, h, j->bucket, emu->v2_dims);
    }
    lp_buf_puts(&body, "]");
  }
  lp_buf_puts(&body, "}\n");
  free(h);
  free(segv);
  if (j->fault == FAULT_GARBAGE) {
    /* a wrong-sized answer: one value short in the first lane, or cut short */
    if (lp_rng_below(&emu->rng, 2) && body.len > 8) body.len /= 2;
    else {
      char *c = memchr(body.data, ',', body.len);
      if (c) memmove(c, c + 1, body.len - (size_t)(c - body.data) - 1), body.len--;
    }
  }
  char hdr[64];
  snprintf(hdr, sizeof(hdr), "X-Device-Time-Us: %llu\r\n", (unsigned long long)j->device_us);
  lp_http_head(j->req, &out, 200, hdr, "application/json", body.len);
  lp_buf_append(&out, body.data, body.len);
  lp_buf_free(&body);
  lp_http_respond_raw(j->req, &out);
  lp_buf_free(&out);
}

/* ---- the devices' clock ---- */

static void arm(emu_t *emu) {
  uint64_t at = 0;
  for (unsigned d = 0; d < emu->devices; d++)
    if (emu->running[d] && (at == 0 || emu->running[d]->done_ns < at)) at = emu->running[d]->done_ns;
  if (at == emu->armed_ns) return;
  emu->armed_ns = at;
  /* absolute on CLOCK_MONOTONIC, the clock uv_hrtime reads; 0 disarms */
  struct itimerspec its = {{0, 0}, {(time_t)(at / 1000000000ull), (long)(at % 1000000000ull)}};
  if (timerfd_settime(emu->tfd, TFD_TIMER_ABSTIME, &its, NULL)) {
    fprintf(stderr, "{\"msg\": \"timerfd_settime failed\", \"error\": \"%s\"}\n", strerror(errno));
    abort(); /* the emulator cannot keep time: better dead than silently wrong */
  }
}

/* What job j costs its device, in microseconds (faults and jitter drawn here). */
static uint64_t cost_us(emu_t *emu, job_t *j) {
  uint64_t ms = emu->delay_ms;
  if (j->shape >= 0) {
    ms += emu->cost_ms[j->shape] ? emu->cost_ms[j->shape] : emu->default_cost_ms;
    if (emu->compile_ms && !emu->used[j->shape]) {
      ms += emu->compile_ms;
      emu->used[j->shape] = 1;
    }
  } else {
    ms += emu->default_cost_ms;
  }
  uint64_t us = ms * 1000;
  if (emu->cost_jitter > 0) {
    double f = 1 + emu->cost_jitter * (2 * lp_rng_double(&emu->rng) - 1);
    us = (uint64_t)((double)us * (f > 0 ? f : 0) + 0.5);
  }
  if (emu->slow_rate > 0 && lp_rng_double(&emu->rng) < emu->slow_rate) us += emu->slow_ms * 1000;
  return us;
}

/* Idle devices take the queue's head: it starts when it arrived or when the
 * device was done with the one before, whichever is later (on the devices'
 * clock, not when this runs). */
static void start_next(emu_t *emu) {
  for (unsigned d = 0; d < emu->devices && emu->qhead; d++) {
    while (!emu->running[d] && emu->qhead) {
      job_t *j = emu->qhead;
      emu->qhead = j->next;
      if (!emu->qhead) emu->qtail = NULL;
      if (j->req == NULL) { /* cancelled while queued */
        emu_job_free(j);
        continue;
      }
      j->device_us = cost_us(emu, j);
      if (j->fault == FAULT_STALL) { /* never answers, holds no device; freed when the client leaves */
        j->stalled = 1;
        continue;
      }
      j->start_ns = j->recv_ns > emu->free_ns[d] ? j->recv_ns : emu->free_ns[d];
      j->done_ns = j->start_ns + j->device_us * 1000;
      emu->free_ns[d] = j->done_ns;
      emu->busy_ns += j->device_us * 1000;
      emu->running[d] = j;
    }
  }
}

static void job_done(emu_t *emu, job_t *j, uint64_t now) {
  uint64_t late = now > j->done_ns ? now - j->done_ns : 0;
  emu->late_ns_sum += late;
  if (late > emu->late_ns_max) emu->late_ns_max = late;
  if (j->req) {
    j->req->app = NULL;
    if (emu->log_batches)
      fprintf(stderr, "{\"batch_times\": \"%lld\", \"recv_ns\": %llu, \"start_ns\": %llu, \"done_ns\": %llu, "
              "\"answer_ns\": %llu}\n", (long long)j->batch_id, (unsigned long long)j->recv_ns,
              (unsigned long long)j->start_ns, (unsigned long long)j->done_ns, (unsigned long long)now);
    if (j->fault == FAULT_FAIL || j->poisoned)
      lp_http_respond_error(j->req, 500, NULL, "injected_failure",
                            j->poisoned ? "the batch holds the poison token" : "injected failure", NULL);
    else if (j->fault == FAULT_RESET) {
      static const char part[] =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
          "{\"outputs\": [[";
      /* half the resets come before any byte, half mid-answer */
      size_t n = lp_rng_below(&emu->rng, 2) ? sizeof(part) - 1 : 0;
      lp_http_abort(j->req, part, n);
    } else if (j->v2) {
      emu_v2_answer(j);
    } else {
      answer(j);
    }
  }
  emu->batches++;
  emu_job_free(j);
}

/* The timer: every batch whose device time is over is answered (the next on
 * its device has started on the clock already), then the timer is armed for
 * the next end. */
static void on_tick(uv_poll_t *h, int status, int events) {
  emu_t *emu = h->data;
  (void)status;
  (void)events;
  uint64_t expirations;
  if (read(emu->tfd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN) {
    /* nothing to read (EAGAIN) is a spurious wake: the loop below checks the time */
  }
  emu->armed_ns = 0; /* fired (or read empty): armed again below */
  for (int again = 1; again;) {
    again = 0;
    uint64_t now = uv_hrtime();
    for (unsigned d = 0; d < emu->devices; d++) {
      job_t *j = emu->running[d];
      if (!j || j->done_ns > now) continue;
      emu->running[d] = NULL;
      job_done(emu, j, now);
      again = 1;
    }
    start_next(emu);
  }
  arm(emu);
}

static void handle_batch(emu_t *emu, lp_http_req_t *req) {
  job_t *j = calloc(1, sizeof(*j));
  if (!j) {
    lp_http_respond_error(req, 500, NULL, "out_of_memory", "emulator out of memory", NULL);
    return;
  }
  j->emu = emu;
  perr_t e = {{0}};
  int status = parse_batch(emu, j, req->body, req->body_len, &e);
  if (status == 0 && emu_shapes_missing(emu)) /* as while its model reloads */
    status = 500, snprintf(e.msg, sizeof(e.msg), "shape mismatch: [%u, %u] is not loaded right now",
                           j->lanes, j->bucket);
  if (status) {
    emu->rejected++;
    lp_http_respond_error(req, status, NULL, status == 500 ? "shape_mismatch" : "bad_batch", e.msg,
                          NULL);
    emu_job_free(j);
    return;
  }
  if (emu->log_batches) {
    char id[32];
    snprintf(id, sizeof(id), "%lld", (long long)j->batch_id);
    emu_log_batch(id, req->body, req->body_len, "\"request_ids\": [", "\"traces\": [", ']',
                  req->traceparent, req->tracestate);
  }
  emu_enqueue(emu, j, req);
}

/* Writes, as a JSON string field "name", the text after key in body up to
 * close; a value closed by a quote is a JSON string (v2's parameter, itself a
 * JSON array): up to the first unescaped quote, read unescaped. */
static void log_field(FILE *f, const char *name, const char *body, size_t len, const char *key, char close) {
  size_t kl = strlen(key);
  const char *at = NULL;
  for (size_t i = 0; i + kl <= len && !at; i++)
    if (memcmp(body + i, key, kl) == 0) at = body + i + kl;
  int str = close == '"';
  size_t n = 0;
  if (at)
    while (at + n < body + len && at[n] != close) n += str && at[n] == '\\' && at + n + 1 < body + len ? 2 : 1;
  fprintf(f, ", \"%s\": \"", name);
  for (size_t i = 0; i < n; i++) {
    if (str && at[i] == '\\' && i + 1 < n) i++;
    if (at[i] == '"' || at[i] == '\\') fputc('\\', f);
    fputc((unsigned char)at[i] < 0x20 ? ' ' : at[i], f);
  }
  fputc('"', f);
}

void emu_log_batch(const char *batch_id, const char *body, size_t len, const char *ids_key,
                   const char *traces_key, char close, const char *traceparent, const char *tracestate) {
  fprintf(stderr, "{\"batch\": \"%s\"", batch_id);
  log_field(stderr, "request_ids", body, len, ids_key, close);
  log_field(stderr, "traces", body, len, traces_key, close);
  /* the batch's own traceparent header: its trace-id is what this server's
   * span carries on (characters outside hex and '-' are not ours to echo) */
  fputs(", \"traceparent\": \"", stderr);
  for (const char *c = traceparent ? traceparent : ""; *c; c++)
    if ((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f') || *c == '-') fputc(*c, stderr);
  /* ... and its tracestate (printable ASCII, cleaned by the server) */
  fputs("\", \"tracestate\": \"", stderr);
  for (const char *c = tracestate ? tracestate : ""; *c; c++) {
    if (*c == '"' || *c == '\\') fputc('\\', stderr);
    fputc(*c, stderr);
  }
  fputs("\"}\n", stderr);
}

void emu_enqueue(emu_t *emu, job_t *j, lp_http_req_t *req) {
  double u = lp_rng_double(&emu->rng);
  if (emu->poison_token >= 0) { /* content that makes the model fail, like a bad input */
    size_t n = (size_t)j->lanes * j->bucket;
    for (size_t i = 0; j->ids && i < n && !j->poisoned; i++) j->poisoned = j->ids[i] == emu->poison_token;
  }
  if ((u -= emu->fail_rate) < 0) j->fault = FAULT_FAIL;
  else if ((u -= emu->reset_rate) < 0) j->fault = FAULT_RESET;
  else if ((u -= emu->stall_rate) < 0) j->fault = FAULT_STALL;
  else if ((u -= emu->garbage_rate) < 0) j->fault = FAULT_GARBAGE;
  j->recv_ns = emu->arrived_ns ? emu->arrived_ns : uv_hrtime();
  j->req = req;
  req->app = j;
  if (emu->qtail) emu->qtail->next = j;
  else emu->qhead = j;
  emu->qtail = j;
  start_next(emu);
  arm(emu);
}

static int path_is(const lp_http_req_t *r, const char *p) {
  return r->path_len == strlen(p) && memcmp(r->url, p, r->path_len) == 0;
}

static void on_request(lp_http_req_t *req, void *ud) {
  emu_t *emu = ud;
  emu->arrived_ns = uv_hrtime(); /* before parsing: a device has its input by now */
  if ((emu->protocols & EMU_PROTO_V2) && emu_v2_route(emu, req)) return;
  if (path_is(req, "/healthz")) { /* liveness, whatever the protocol */
    lp_http_respond(req, 200, NULL, "application/json", "{\"status\": \"ok\"}\n", 17);
  } else if (!(emu->protocols & EMU_PROTO_LANEPACK)) {
    lp_http_respond_error(req, 404, NULL, "not_found", "this emulator speaks v2 only", NULL);
  } else if (path_is(req, "/v1/batch")) {
    if (req->method != LP_HTTP_POST) {
      lp_http_respond_error(req, 405, "Allow: POST\r\n", "method_not_allowed", "use POST", NULL);
      return;
    }
    handle_batch(emu, req);
  } else if (path_is(req, "/healthz")) {
    lp_http_respond(req, 200, NULL, "application/json", "{\"status\": \"ok\"}\n", 17);
  } else if (path_is(req, "/v1/shapes") && !emu->hide_shapes) {
    lp_buf_t b;
    lp_buf_init(&b);
    lp_buf_puts(&b, "{\"shapes\": [");
    for (size_t i = 0; i < emu->shapes.count; i++)
      lp_buf_printf(&b, "%s[%u, %u]", i ? ", " : "", emu->shapes.shapes[i].lanes,
                    emu->shapes.shapes[i].bucket);
    lp_buf_printf(&b, "], \"devices\": %u}\n", emu->devices);
    lp_http_respond(req, 200, NULL, "application/json", b.data, b.len);
    lp_buf_free(&b);
  } else {
    lp_http_respond_error(req, 404, NULL, "not_found", "no such route", NULL);
  }
}

static void on_cancel(lp_http_req_t *req, void *ud) {
  (void)ud;
  job_t *j = req->app;
  if (!j) return;
  j->req = NULL; /* freed when its turn comes or its device is done with it */
  if (j->stalled) emu_job_free(j);
}

static void on_closed(void *arg) {
  emu_t *emu = arg;
  uv_close((uv_handle_t *)&emu->sigterm, NULL);
  uv_close((uv_handle_t *)&emu->sigint, NULL);
}

static void on_signal(uv_signal_t *s, int signum) {
  emu_t *emu = s->data;
  (void)signum;
  uv_signal_stop(&emu->sigterm);
  uv_signal_stop(&emu->sigint);
  uv_poll_stop(&emu->tpoll);
  /* drop queued and stalled work: their clients see the connection close */
  lp_httpd_close(emu->httpd, on_closed, emu);
  uv_stop(emu->loop);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: lanepack-emulator --listen HOST:PORT --shapes 4x8192,8x2048\n"
          "         [--cost-ms SHAPE=MS]... [--cost-ms MS] [--compile-ms MS] [--devices N]\n"
          "         [--per-segment] [--ragged] [--fail-rate P] [--reset-rate P]\n"
          "         [--stall-rate P] [--garbage-rate P] [--delay-ms MS] [--seed S]\n"
          "         [--hide-shapes] [--log-batches] [--protocol lanepack|v2|both] [--v2-model TEMPLATE]\n"
          "         [--v2-output NAME] [--dims K] [--cost-jitter F] [--slow-rate P --slow-ms MS]\n"
          "         [--poison-token T] [--missing-file PATH]\n");
}

static int parse_rate(const char *s, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end || !(v >= 0 && v <= 1)) return -1;
  *out = v;
  return 0;
}

static int parse_u64(const char *s, uint64_t *out) {
  char *end;
  if (*s < '0' || *s > '9') return -1;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end || errno) return -1;
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  static emu_t emu;
  const char *listen = NULL, *shapes = NULL;
  const char *costs[LP_BUCKET_MAX_SHAPES * 2];
  size_t ncost = 0;
  uint64_t devices = 1, seed = 1;
  emu.default_cost_ms = 5;
  emu.protocols = EMU_PROTO_LANEPACK;
  emu.poison_token = -1;
  snprintf(emu.v2_model, sizeof(emu.v2_model), "lanepack_{lanes}x{bucket}");
  snprintf(emu.v2_output, sizeof(emu.v2_output), "output");
  static const struct option opts[] = {
      {"listen", required_argument, 0, 'l'},       {"shapes", required_argument, 0, 's'},
      {"cost-ms", required_argument, 0, 'c'},      {"compile-ms", required_argument, 0, 'C'},
      {"devices", required_argument, 0, 'd'},      {"per-segment", no_argument, 0, 'p'},
      {"ragged", no_argument, 0, 'r'},             {"fail-rate", required_argument, 0, 'F'},
      {"reset-rate", required_argument, 0, 'R'},   {"stall-rate", required_argument, 0, 'S'},
      {"garbage-rate", required_argument, 0, 'G'}, {"delay-ms", required_argument, 0, 'D'},
      {"seed", required_argument, 0, 'e'},         {"hide-shapes", no_argument, 0, 'H'},
      {"log-batches", no_argument, 0, 'B'},
      {"protocol", required_argument, 0, 'P'},     {"v2-model", required_argument, 0, 'M'},
      {"v2-output", required_argument, 0, 'O'},    {"v2-dims", required_argument, 0, 'K'},
      {"dims", required_argument, 0, 'K'},
      {"cost-jitter", required_argument, 0, 'J'},  {"slow-rate", required_argument, 0, 'W'},
      {"slow-ms", required_argument, 0, 'X'},      {"poison-token", required_argument, 0, 'Y'},
      {"missing-file", required_argument, 0, 'I'},
      {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'Z'},
      {0, 0, 0, 0}};
  int c, idx = 0;
  while ((c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
    int bad_arg = 0;
    switch (c) {
      case 'l': listen = optarg; break;
      case 's': shapes = optarg; break;
      case 'c':
        if (ncost < sizeof(costs) / sizeof(costs[0])) costs[ncost++] = optarg;
        break;
      case 'C': bad_arg = parse_u64(optarg, &emu.compile_ms); break;
      case 'd': bad_arg = parse_u64(optarg, &devices) || devices == 0 || devices > 1024; break;
      case 'p': emu.per_segment = 1; break;
      case 'r': emu.ragged_ok = 1; break;
      case 'F': bad_arg = parse_rate(optarg, &emu.fail_rate); break;
      case 'R': bad_arg = parse_rate(optarg, &emu.reset_rate); break;
      case 'S': bad_arg = parse_rate(optarg, &emu.stall_rate); break;
      case 'G': bad_arg = parse_rate(optarg, &emu.garbage_rate); break;
      case 'D': bad_arg = parse_u64(optarg, &emu.delay_ms); break;
      case 'e': bad_arg = parse_u64(optarg, &seed); break;
      case 'H': emu.hide_shapes = 1; break;
      case 'I': emu.missing_file = optarg; break;
      case 'B': emu.log_batches = 1; break;
      case 'J': bad_arg = parse_rate(optarg, &emu.cost_jitter); break;
      case 'W': bad_arg = parse_rate(optarg, &emu.slow_rate); break;
      case 'X': bad_arg = parse_u64(optarg, &emu.slow_ms); break;
      case 'Y': {
        uint64_t t = 0;
        bad_arg = parse_u64(optarg, &t) || t > INT32_MAX;
        emu.poison_token = (int64_t)t;
        break;
      }
      case 'P':
        if (strcmp(optarg, "lanepack") == 0) emu.protocols = EMU_PROTO_LANEPACK;
        else if (strcmp(optarg, "v2") == 0) emu.protocols = EMU_PROTO_V2;
        else if (strcmp(optarg, "both") == 0) emu.protocols = EMU_PROTO_LANEPACK | EMU_PROTO_V2;
        else bad_arg = 1;
        break;
      case 'M': bad_arg = strlen(optarg) == 0 || strlen(optarg) >= sizeof(emu.v2_model);
        if (!bad_arg) snprintf(emu.v2_model, sizeof(emu.v2_model), "%s", optarg);
        break;
      case 'O': bad_arg = strlen(optarg) == 0 || strlen(optarg) >= sizeof(emu.v2_output);
        if (!bad_arg) snprintf(emu.v2_output, sizeof(emu.v2_output), "%s", optarg);
        break;
      case 'K': {
        uint64_t k = 0;
        bad_arg = parse_u64(optarg, &k) || k > 64;
        emu.v2_dims = (unsigned)k;
        break;
      }
      case 'Z': printf("%s %s\n", "lanepack-emulator", LP_VERSION); return 0;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
    if (bad_arg) {
      fprintf(stderr, "lanepack-emulator: bad value '%s' for --%s\n", optarg, opts[idx].name);
      return 2;
    }
  }
  if (!listen || !shapes || optind < argc) {
    usage(stderr);
    return 2;
  }
  char err[200];
  lp_bucket_set_init(&emu.shapes);
  if (lp_bucket_set_parse(&emu.shapes, shapes, err, sizeof(err))) {
    fprintf(stderr, "lanepack-emulator: --shapes: %s\n", err);
    return 2;
  }
  for (size_t i = 0; i < ncost; i++) {
    const char *eq = strchr(costs[i], '=');
    uint64_t ms;
    if (!eq) {
      if (parse_u64(costs[i], &ms)) goto bad_cost;
      emu.default_cost_ms = ms;
      continue;
    }
    char spec[64];
    if ((size_t)(eq - costs[i]) >= sizeof(spec)) goto bad_cost;
    memcpy(spec, costs[i], (size_t)(eq - costs[i]));
    spec[eq - costs[i]] = 0;
    lp_bucket_set_t one;
    lp_bucket_set_init(&one);
    if (lp_bucket_set_parse(&one, spec, NULL, 0) || one.count != 1 || parse_u64(eq + 1, &ms))
      goto bad_cost;
    int si = lp_bucket_set_find(&emu.shapes, one.shapes[0].lanes, one.shapes[0].bucket);
    if (si < 0) {
      fprintf(stderr, "lanepack-emulator: --cost-ms %s: shape not in --shapes\n", costs[i]);
      return 2;
    }
    emu.cost_ms[si] = ms;
    continue;
  bad_cost:
    fprintf(stderr, "lanepack-emulator: bad --cost-ms '%s': want LANESxBUCKET=MS or MS\n",
            costs[i]);
    return 2;
  }
  if (emu.fail_rate + emu.reset_rate + emu.stall_rate + emu.garbage_rate > 1) {
    fprintf(stderr, "lanepack-emulator: fault rates add up to more than 1\n");
    return 2;
  }
  emu.devices = (unsigned)devices;
  emu.running = calloc(devices, sizeof(*emu.running));
  emu.free_ns = calloc(devices, sizeof(*emu.free_ns));
  if (!emu.running || !emu.free_ns) {
    fprintf(stderr, "lanepack-emulator: out of memory\n");
    return 1;
  }
  lp_rng_seed(&emu.rng, seed);
  signal(SIGPIPE, SIG_IGN);
  emu.loop = uv_default_loop();
  emu.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (emu.tfd < 0 || uv_poll_init(emu.loop, &emu.tpoll, emu.tfd)) {
    fprintf(stderr, "lanepack-emulator: timerfd: %s\n", strerror(errno));
    return 1;
  }
  emu.tpoll.data = &emu;
  uv_poll_start(&emu.tpoll, UV_READABLE, on_tick);
  lp_httpd_config_t hc;
  lp_httpd_config_default(&hc);
  hc.on_request = on_request;
  hc.on_cancel = on_cancel;
  hc.ud = &emu;
  hc.max_body_bytes = 1024u * 1024 * 1024;
  hc.max_pipeline = 1024;
  emu.httpd = lp_httpd_new(emu.loop, &hc);
  int port = 0;
  int rc = emu.httpd ? lp_httpd_listen(emu.httpd, listen, &port) : UV_ENOMEM;
  if (rc) {
    fprintf(stderr, "lanepack-emulator: cannot listen on %s: %s\n", listen, uv_strerror(rc));
    return 1;
  }
  uv_signal_init(emu.loop, &emu.sigterm);
  uv_signal_init(emu.loop, &emu.sigint);
  emu.sigterm.data = emu.sigint.data = &emu;
  uv_signal_start(&emu.sigterm, on_signal, SIGTERM);
  uv_signal_start(&emu.sigint, on_signal, SIGINT);
  fprintf(stderr, "{\"msg\": \"emulator listening\", \"port\": %d, \"shapes\": \"%s\"}\n", port,
          shapes);
  uv_run(emu.loop, UV_RUN_DEFAULT);
  /* what the devices still held or had queued (their clients are gone) */
  for (unsigned d = 0; d < emu.devices; d++)
    if (emu.running[d]) emu_job_free(emu.running[d]);
  while (emu.qhead) {
    job_t *j = emu.qhead;
    emu.qhead = j->next;
    emu_job_free(j);
  }
  fprintf(stderr,
          "{\"msg\": \"emulator stopped\", \"batches\": %llu, \"rejected\": %llu, \"device_busy_s\": %.3f, "
          "\"answer_late_ms_mean\": %.3f, \"answer_late_ms_max\": %.3f}\n",
          (unsigned long long)emu.batches, (unsigned long long)emu.rejected, (double)emu.busy_ns / 1e9,
          emu.batches ? (double)emu.late_ns_sum / (double)emu.batches / 1e6 : 0.0, (double)emu.late_ns_max / 1e6);
  free(emu.running);
  free(emu.free_ns);
  close(emu.tfd);
  return 0;
}
