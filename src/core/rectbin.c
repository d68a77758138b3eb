/* Binary rectangle tensors as gather pieces (see rectbin.h): borrowed tokens,
 * constant runs for padding and ids. */
#include "lanepack/rectbin.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void lp_rectbin_free(lp_rectbin_t *r) {
  if (r->pad != r->runs[0]) free(r->pad);
  free(r->pos);
  for (int d = 0; d < LP_RECTBIN_RUNS; d++) free(r->runs[d]);
  memset(r, 0, sizeof(*r));
}

int lp_rectbin_init(lp_rectbin_t *r, uint32_t max_len, int32_t pad_id) {
  memset(r, 0, sizeof(*r));
  r->max_len = max_len ? max_len : 1;
  r->pad_id = pad_id;
  size_t n = r->max_len;
  r->pos = malloc(n * sizeof(int32_t));
  for (int d = 0; d < LP_RECTBIN_RUNS; d++) r->runs[d] = malloc(n * sizeof(int32_t));
  r->pad = pad_id == 0 ? r->runs[0] : malloc(n * sizeof(int32_t));
  int ok = r->pos && r->pad;
  for (int d = 0; d < LP_RECTBIN_RUNS; d++) ok = ok && r->runs[d];
  if (!ok) {
    lp_rectbin_free(r);
    return -ENOMEM;
  }
  for (size_t i = 0; i < n; i++) {
    r->pos[i] = (int32_t)i;
    r->pad[i] = pad_id;
    for (int d = 0; d < LP_RECTBIN_RUNS; d++) r->runs[d][i] = d;
  }
  return 0;
}

/* n copies of v: borrowed from a run of v when there is one, else written. */
static void put_run(const lp_rectbin_t *r, lp_gather_t *g, const int32_t *run, int32_t v, uint32_t n) {
  while (run && n > 0) {
    uint32_t k = n < r->max_len ? n : r->max_len;
    lp_gather_ref(g, run, (size_t)k * sizeof(int32_t));
    n -= k;
  }
  for (uint32_t i = 0; i < n; i++) lp_buf_append(lp_gather_buf(g), &v, sizeof(v));
}

/* Positions 0..n-1: a prefix of the constant run, written past its end. */
static void put_positions(const lp_rectbin_t *r, lp_gather_t *g, uint32_t n) {
  uint32_t k = n < r->max_len ? n : r->max_len;
  lp_gather_ref(g, r->pos, (size_t)k * sizeof(int32_t));
  for (int32_t i = (int32_t)k; i < (int32_t)n; i++) lp_buf_append(lp_gather_buf(g), &i, sizeof(i));
}

void lp_rectbin_gather(const lp_rectbin_t *r, lp_gather_t *g, const lp_layout_t *l,
                       const lp_seq_ref_t *seqs, int which) {
  int32_t padv = which == LP_RECTBIN_INPUT ? r->pad_id : 0;
  const int32_t *pad = which == LP_RECTBIN_INPUT ? r->pad : r->runs[0];
  size_t s = 0;
  for (uint32_t lane = 0; lane < l->lanes; lane++) {
    uint32_t at = 0;
    for (; s < l->nsegs && l->segs[s].lane == lane; s++) {
      const lp_segment_t *sg = &l->segs[s];
      if (sg->offset > at) put_run(r, g, pad, padv, sg->offset - at);
      if (which == LP_RECTBIN_INPUT)
        lp_gather_ref(g, seqs[sg->item].tokens, (size_t)sg->length * sizeof(int32_t));
      else if (which == LP_RECTBIN_POSITION)
        put_positions(r, g, sg->length);
      else
        put_run(r, g, sg->segment < LP_RECTBIN_RUNS ? r->runs[sg->segment] : NULL, (int32_t)sg->segment,
                sg->length);
      at = sg->offset + sg->length;
    }
    if (l->bucket > at) put_run(r, g, pad, padv, l->bucket - at);
  }
}
