/* Lays a packing plan out as the backend's arrays. The buffers are reused from
 * batch to batch, so a steady stream of batches allocates nothing. */
#include "lanepack/layout.h"

#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void lp_layout_init(lp_layout_t *l) { memset(l, 0, sizeof(*l)); }

void lp_layout_free(lp_layout_t *l) {
  free(l->input_ids); free(l->segment_ids); free(l->position_ids);
  free(l->segs); free(l->cu_seqlens);
  memset(l, 0, sizeof(*l));
}

static int reserve_slots(lp_layout_t *l, size_t slots) {
  if (slots <= l->slots_cap) return 0;
  size_t c = l->slots_cap;
  size_t c1 = c, c2 = c;
  if (lp__grow((void **)&l->input_ids, &c, slots, sizeof(int32_t)) ||
      lp__grow((void **)&l->segment_ids, &c1, slots, sizeof(int32_t)) ||
      lp__grow((void **)&l->position_ids, &c2, slots, sizeof(int32_t)))
    return -ENOMEM;
  l->slots_cap = c;
  return 0;
}

static int cmp_seg(const void *a, const void *b) {
  const lp_segment_t *x = a, *y = b;
  if (x->lane != y->lane) return x->lane < y->lane ? -1 : 1;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Padding from..to: the pad token, segment 0, position 0. */
static void fill_pad(int32_t *ids, int32_t *sid, int32_t *pos, uint32_t from, uint32_t to,
                     int32_t pad_id, int with_ids) {
  if (from >= to) return;
  if (pad_id == 0) memset(ids + from, 0, (size_t)(to - from) * sizeof(int32_t));
  else
    for (uint32_t k = from; k < to; k++) ids[k] = pad_id;
  if (!with_ids) return;
  memset(sid + from, 0, (size_t)(to - from) * sizeof(int32_t));
  memset(pos + from, 0, (size_t)(to - from) * sizeof(int32_t));
}

int lp_layout_build(lp_layout_t *l, uint32_t lanes, uint32_t bucket, int32_t pad_id,
                    const lp_place_t *place, const lp_seq_ref_t *seqs, size_t n) {
  if (lanes == 0 || bucket == 0) return -EINVAL;
  size_t slots = (size_t)lanes * bucket;
  int arrays = !l->segs_only;
  if ((arrays && reserve_slots(l, slots)) || lp__grow((void **)&l->segs, &l->segs_cap, n + 1, sizeof(lp_segment_t)))
    return -ENOMEM;
  l->ragged = 0;
  l->texts = NULL;
  l->seqs = seqs;
  l->pad_id = pad_id;
  l->lanes = lanes;
  l->bucket = bucket;
  l->nsegs = 0;
  l->real_tokens = 0;
  l->max_seqlen = 0;
  for (size_t i = 0; i < n; i++) {
    if (place[i].bin < 0) continue;
    uint32_t lane = (uint32_t)place[i].bin, off = place[i].offset, len = seqs[i].len;
    if (lane >= lanes || len == 0 || off > bucket || len > bucket - off) return -EINVAL;
    l->segs[l->nsegs++] = (lp_segment_t){lane, 0, off, len, (uint32_t)i};
  }
  qsort(l->segs, l->nsegs, sizeof(lp_segment_t), cmp_seg);

  /* Walk each lane left to right, writing segments and the padding between. */
  size_t s = 0;
  for (uint32_t lane = 0; lane < lanes; lane++) {
    /* no arrays (segments only): nothing is written, and no offset is taken
     * from their NULL pointers (undefined even when unused) */
    size_t row = (size_t)lane * bucket;
    int32_t *ids = arrays ? l->input_ids + row : NULL, *sid = arrays ? l->segment_ids + row : NULL,
            *pos = arrays ? l->position_ids + row : NULL;
    int with_ids = !l->skip_ids;
    uint32_t at = 0, segno = 0;
    for (; s < l->nsegs && l->segs[s].lane == lane; s++) {
      lp_segment_t *g = &l->segs[s];
      if (g->offset < at) return -EINVAL; /* overlaps the previous segment */
      g->segment = ++segno;
      uint32_t prev = at;
      at = g->offset + g->length;
      l->real_tokens += g->length;
      if (g->length > l->max_seqlen) l->max_seqlen = g->length;
      if (!arrays) continue;
      fill_pad(ids, sid, pos, prev, g->offset, pad_id, with_ids);
      memcpy(ids + g->offset, seqs[g->item].tokens, (size_t)g->length * sizeof(int32_t));
      if (with_ids)
        for (uint32_t k = 0; k < g->length; k++) {
          sid[g->offset + k] = (int32_t)segno;
          pos[g->offset + k] = (int32_t)k;
        }
    }
    if (arrays) fill_pad(ids, sid, pos, at, bucket, pad_id, with_ids);
  }
  return 0;
}

int lp_layout_build_ragged(lp_layout_t *l, const lp_place_t *place, const lp_seq_ref_t *seqs,
                           size_t n) {
  uint64_t total = 0;
  size_t count = 0;
  for (size_t i = 0; i < n; i++) {
    if (place && place[i].bin < 0) continue;
    if (seqs[i].len == 0) return -EINVAL;
    total += seqs[i].len;
    count++;
  }
  if (total > INT32_MAX) return -EINVAL;
  if (reserve_slots(l, total ? total : 1) ||
      lp__grow((void **)&l->segs, &l->segs_cap, count + 1, sizeof(lp_segment_t)) ||
      lp__grow((void **)&l->cu_seqlens, &l->cu_cap, count + 1, sizeof(int32_t)))
    return -ENOMEM;
  l->ragged = 1;
  l->texts = NULL;
  l->seqs = seqs;
  l->lanes = 1;
  l->bucket = (uint32_t)total;
  l->real_tokens = total;
  l->nsegs = 0;
  l->max_seqlen = 0;
  l->cu_seqlens[0] = 0;
  uint32_t at = 0;
  for (size_t i = 0; i < n; i++) {
    if (place && place[i].bin < 0) continue;
    uint32_t len = seqs[i].len;
    memcpy(l->input_ids + at, seqs[i].tokens, (size_t)len * sizeof(int32_t));
    for (uint32_t k = 0; k < len && !l->skip_ids; k++) {
      l->segment_ids[at + k] = (int32_t)(l->nsegs + 1);
      l->position_ids[at + k] = (int32_t)k;
    }
    l->segs[l->nsegs] = (lp_segment_t){0, (uint32_t)l->nsegs + 1, at, len, (uint32_t)i};
    at += len;
    l->nsegs++;
    l->cu_seqlens[l->nsegs] = (int32_t)at;
    if (len > l->max_seqlen) l->max_seqlen = len;
  }
  return 0;
}
