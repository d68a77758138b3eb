/* Scatter: find each element of a backend answer in its raw bytes, so that each
 * request's slice is a byte range of the answer, copied once, never re-encoded. */
#ifndef LANEPACK_SCATTER_H
#define LANEPACK_SCATTER_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/layout.h"

/* What an answer says of its "batch_id" member (set by lp_scatter_index). */
enum { LP_SCATTER_ID_NONE = 0, LP_SCATTER_ID_SET, LP_SCATTER_ID_BAD };

typedef struct lp_scatter_s {
  int per_segment;  /* set by lp_scatter_index: 1 if the answer was segment_outputs */
  int id_state;     /* LP_SCATTER_ID_*: none, one unsigned integer (batch_id), or
                       anything else (not such an integer, or two that differ) */
  uint64_t batch_id;
  const char *body; /* borrowed: the answer being indexed */
  uint32_t *span;   /* per element: start, end byte offsets into body, set for
                       (at least) the first and last element of each segment:
                       what lp_scatter_slice reads; owned */
  size_t span_cap;
  uint64_t *wanted; /* bit per element: its span is read (first or last of a
                       segment); owned scratch */
  size_t wanted_cap;
  uint32_t *lane_start;  /* per lane: index of its first element in span; owned */
  size_t lane_cap;
  uint32_t lanes;
} lp_scatter_t;

void lp_scatter_init(lp_scatter_t *s);
void lp_scatter_free(lp_scatter_t *s);

/* Indexes an answer for the batch laid out in lay: {"outputs": [[...] x lanes]}
 * with bucket values per lane, or {"segment_outputs": [[...] x lanes]} with one
 * value per segment of the lane (flat arrays for a ragged layout). "batch_id"
 * is read into id_state and batch_id for the caller to compare with the batch
 * it sent; any other member is ignored. Returns 0, -EPROTO with a message in err when the answer is
 * malformed or its sizes do not match the batch, or -ENOMEM. */
int lp_scatter_index(lp_scatter_t *s, const char *body, size_t len, const lp_layout_t *lay,
                     char *err, size_t errlen);

/* The bytes of one segment's result: for per-token answers the elements of its
 * span joined by their separators (wrap in [ ] to get an array), for per-segment
 * answers the one value. */
void lp_scatter_slice(const lp_scatter_t *s, const lp_segment_t *seg, const char **start,
                      size_t *len);

#endif
