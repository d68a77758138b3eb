/* A rectangle's binary INT32 tensors (input, segment and position ids, lane by
 * lane) as gather-list pieces: each sequence's tokens borrowed where the
 * client's request left them, padding and ids borrowed from constant runs
 * built once, so a v2 batch body is never assembled. */
#ifndef LANEPACK_RECTBIN_H
#define LANEPACK_RECTBIN_H
#include <stdint.h>

#include "lanepack/gather.h"
#include "lanepack/layout.h"

/* Segment ids 0..LP_RECTBIN_RUNS-1 have a prebuilt run: a lane rarely holds
 * more segments (8x4096 rectangles of 600-token requests hold 6); higher ids
 * are written out (4 bytes each). */
#define LP_RECTBIN_RUNS 16

typedef struct lp_rectbin_s {
  uint32_t max_len;                /* runs up to this length (the largest bucket) */
  int32_t pad_id;
  int32_t *pad;                    /* pad_id, max_len times; owned (runs[0] when pad_id is 0) */
  int32_t *pos;                    /* 0, 1, 2, ..., max_len - 1; owned */
  int32_t *runs[LP_RECTBIN_RUNS];  /* runs[d]: d, max_len times; owned */
} lp_rectbin_t;

enum { LP_RECTBIN_INPUT = 0, LP_RECTBIN_SEGMENT, LP_RECTBIN_POSITION };

int lp_rectbin_init(lp_rectbin_t *r, uint32_t max_len, int32_t pad_id);
void lp_rectbin_free(lp_rectbin_t *r);
/* Appends tensor `which` of the (not ragged) layout l to g in host order, as
 * lp_layout_build fills its arrays: pad_id, segment 0 and position 0 in the
 * padding. seqs are the build's (segs[].item indexes them); their tokens and
 * r's runs are borrowed until g is read. */
void lp_rectbin_gather(const lp_rectbin_t *r, lp_gather_t *g, const lp_layout_t *l,
                       const lp_seq_ref_t *seqs, int which);
#endif
