/* The last batches as they left: a fixed ring of what each rectangle held
 * (shape, each segment's lane, offset and length), where it went, the queue it
 * left behind and its device clock, and how it ended; rendered as the JSON of
 * GET /v1/batches/recent. Lengths and timings only: no token, no request id.
 * No I/O, no clock (times are passed in), nothing allocated per batch. */
#ifndef LANEPACK_RECENT_H
#define LANEPACK_RECENT_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/buf.h"
#include "lanepack/layout.h"

/* Batches kept: the live view redraws about once a second and shows a screen
 * of rectangles; 64 is a second of a busy proxy (tens of batches a second)
 * and keeps the JSON under a few hundred KB. */
#define LP_RECENT_BATCHES 64
/* Segments kept over all the batches kept (12 bytes each: 96 KB): 128 per
 * batch on average, a whole 8x2048 rectangle of 1-token sequences (16,384) does
 * not fit and is cut (segments_total says how many it had); a batch whose
 * segments are overwritten leaves the ring. */
#define LP_RECENT_SEGMENTS 8192
/* Devices whose clock is kept per batch: a host has up to 8 accelerators;
 * the rest of a larger backend's are counted, not listed. */
#define LP_RECENT_DEVICES 8
/* Names kept: a model's name and a backend's URL are at most these in the
 * configuration (LP_NAME_MAX, LP_URL_MAX); longer ones are cut. */
#define LP_RECENT_NAME 64
#define LP_RECENT_URL 256
#define LP_RECENT_WORD 24 /* a reason or an outcome: short static names */

/* What the scheduler says of a batch as it leaves. Strings and arrays are
 * borrowed for the call only (copied). Times are nanoseconds on the caller's
 * monotonic clock; 0 means unknown. */
typedef struct lp_recent_sent_s {
  uint64_t id;               /* the batch's id (its model's sequence number) */
  const char *model;
  const char *backend;       /* its URL */
  uint32_t backend_index;
  uint32_t device, devices;  /* the device it went to, of how many */
  uint32_t lanes, bucket;
  uint64_t real_tokens;
  const lp_segment_t *segs;  /* lane-major, as the layout holds them */
  size_t nsegs;
  const char *reason;        /* why it left now */
  uint32_t copies;           /* segments that are a hedge or retry copy */
  uint64_t queue_seqs, queue_tokens; /* still waiting when it left */
  uint64_t sent_ns;
  uint64_t lead_ns, cost_ns; /* the clock's learned lead and service time of its shape */
  uint64_t expect_ns;        /* when the clock expects it to end */
  const uint64_t *device_free_ns; /* each device's busy-until after it left (0: idle) */
  uint32_t ndevice_free;
} lp_recent_sent_t;

typedef struct lp_recent_s lp_recent_t;

/* The ring, empty. NULL without memory. Owned by the caller (lp_recent_free). */
lp_recent_t *lp_recent_new(void);
void lp_recent_free(lp_recent_t *r);
/* A copy of r as it is now (a page renders from it on another thread while r
 * goes on changing). NULL without memory; the caller owns it (lp_recent_free). */
lp_recent_t *lp_recent_dup(const lp_recent_t *r);

/* Records a batch that left; returns its ticket (never 0) for lp_recent_answered. */
uint64_t lp_recent_sent(lp_recent_t *r, const lp_recent_sent_t *s);
/* The batch of ticket ended at now_ns: outcome (a short name), the HTTP status
 * (0: none), device time the backend reported (0: none). 0, or -ENOENT when it
 * has left the ring. */
int lp_recent_answered(lp_recent_t *r, uint64_t ticket, const char *outcome, int http_status,
                       uint64_t device_ns, uint64_t now_ns);

/* Batches held now (at most LP_RECENT_BATCHES). */
size_t lp_recent_count(const lp_recent_t *r);

/* The n of GET /v1/batches/recent from its query (query[0..len), after the
 * '?', may be empty): LP_RECENT_BATCHES when absent. 0 with *n in
 * 1..LP_RECENT_BATCHES, or -EINVAL (not a decimal integer in that range, or the
 * parameter repeated). Other parameters are ignored. */
int lp_recent_query_n(const char *query, size_t len, uint32_t *n);

/* Appends the newest n batches, newest first, as JSON (doc/api.md has its
 * fields), times relative to each batch's send and its age at now_ns. */
void lp_recent_render(const lp_recent_t *r, uint32_t n, uint64_t now_ns, lp_buf_t *b);

#endif
