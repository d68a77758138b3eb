/* Writes a laid-out batch as the backend's JSON request. Segment and position
 * ids are runs ("3,3,3", "0,1,2,...") copied from prebuilt text, so a batch
 * costs little more than its token ids. */
#ifndef LANEPACK_BATCHJSON_H
#define LANEPACK_BATCHJSON_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/buf.h"
#include "lanepack/gather.h"
#include "lanepack/layout.h"

typedef struct lp_batchjson_s {
  uint32_t max_len;   /* runs up to this length are prebuilt */
  char *positions;    /* "0,1,2,...,max_len-1," ; owned */
  uint32_t *pos_end;  /* pos_end[n]: bytes of the first n positions with commas; owned */
  char *runs[10];     /* runs[d]: "d,d,d,..." (max_len times) for d = 0..9; owned */
} lp_batchjson_t;

/* Prebuilds runs up to max_len (the largest bucket). Returns 0 or -ENOMEM. */
int lp_batchjson_init(lp_batchjson_t *w, uint32_t max_len);
void lp_batchjson_free(lp_batchjson_t *w);

/* Appends {"batch_id": id, "model": model, "shape": [...], "input_ids": ...,
 * "segment_ids": ..., "position_ids": ..., "segments": [...]} (or the ragged
 * form with cu_seqlens and max_seqlen) to out; with item_ids (indexed by a
 * segment's item, may be NULL), also "request_ids" in segment order; with
 * item_traces likewise "traces" (W3C traceparents). */
void lp_batchjson_write(const lp_batchjson_t *w, lp_buf_t *out, const lp_layout_t *l,
                        uint64_t id, const char *model, const char *const *item_ids,
                        const char *const *item_traces);
/* The same body as a gather list appended to g (the same bytes, in order):
 * the clients' token text (l->texts) and w's runs are borrowed, not copied,
 * so they must live, unchanged, until g is read; the rest is written into g. */
void lp_batchjson_gather(const lp_batchjson_t *w, lp_gather_t *g, const lp_layout_t *l, uint64_t id,
                         const char *model, const char *const *item_ids,
                         const char *const *item_traces);

#endif
