/* Lays a packing plan out as the arrays the backend consumes: the rectangle
 * (input_ids, segment_ids, position_ids, segments) or the ragged form. */
#ifndef LANEPACK_LAYOUT_H
#define LANEPACK_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/packer.h"

typedef struct lp_seq_ref_s {
  const int32_t *tokens;  /* borrowed */
  uint32_t len;
} lp_seq_ref_t;

/* A sequence's tokens as JSON text without brackets, exactly as
 * lp_buf_i32_list writes them ("1,2,3"): a JSON writer copies it instead of
 * writing the numbers again. text NULL: not known. */
typedef struct lp_seq_text_s {
  const char *text;  /* borrowed */
  uint32_t len;
} lp_seq_text_t;

typedef struct lp_segment_s {
  uint32_t lane;
  uint32_t segment;  /* 1-based within the lane */
  uint32_t offset;
  uint32_t length;
  uint32_t item;     /* index of the sequence in the caller's array */
} lp_segment_t;

typedef struct lp_layout_s {
  int ragged;              /* 1: flat form, one "lane" of `bucket` = total tokens */
  int skip_ids;            /* set by the owner: segment_ids and position_ids are not
                              filled (a writer that derives them from segs) */
  int segs_only;           /* set by the owner: only the segments are built (a
                              writer that borrows each sequence's tokens and
                              writes the rest from runs); the arrays untouched */
  uint32_t lanes;
  uint32_t bucket;
  uint64_t real_tokens;
  /* rectangle, lanes * bucket each, row-major; owned, reused across builds */
  int32_t *input_ids;
  int32_t *segment_ids;
  int32_t *position_ids;
  size_t slots_cap;
  /* segments sorted by lane then offset; owned */
  lp_segment_t *segs;
  size_t nsegs;
  size_t segs_cap;
  /* ragged form: cu_seqlens has nsegs + 1 entries; owned */
  int32_t *cu_seqlens;
  size_t cu_cap;
  uint32_t max_seqlen;
  /* optional, per sequence of the last build (segs[].item indexes it): their
   * text, set by the caller after the build for the writer right after it;
   * borrowed; each build sets it back to NULL */
  const lp_seq_text_t *texts;
  /* the last build's sequences (segs[].item indexes them) and padding id, for
   * a writer of a segments-only build; borrowed, like texts */
  const lp_seq_ref_t *seqs;
  int32_t pad_id;
} lp_layout_t;

void lp_layout_init(lp_layout_t *l);
void lp_layout_free(lp_layout_t *l);

/* Builds the rectangle from placements: seqs[i] goes to lane place[i].bin at
 * place[i].offset (bin -1: left out). Returns 0, -EINVAL when a placement is
 * outside the rectangle or overlaps another, or -ENOMEM. */
int lp_layout_build(lp_layout_t *l, uint32_t lanes, uint32_t bucket, int32_t pad_id,
                    const lp_place_t *place, const lp_seq_ref_t *seqs, size_t n);

/* Builds the ragged form of the sequences whose place[i].bin >= 0 (place may be
 * NULL: all), in index order. Returns 0, -EINVAL or -ENOMEM. */
int lp_layout_build_ragged(lp_layout_t *l, const lp_place_t *place, const lp_seq_ref_t *seqs,
                           size_t n);

#endif
