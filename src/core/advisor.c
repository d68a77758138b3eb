/* The bucket advisor. Choosing K bucket lengths to minimize padding is a 1-D
 * k-segmentation: dynamic programming over candidate lengths, exact on the
 * histogram. The packed estimate then runs SPFHP on the same histogram. */
#include "lanepack/advisor.h"

#include <errno.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>

int lp_lenhist_init(lp_lenhist_t *h, uint32_t max) {
  memset(h, 0, sizeof(*h));
  if (max == 0) return -EINVAL;
  h->count = calloc((size_t)max + 1, sizeof(uint64_t));
  if (h->count == NULL) return -ENOMEM;
  h->max = max;
  return 0;
}

void lp_lenhist_free(lp_lenhist_t *h) {
  free(h->count);
  memset(h, 0, sizeof(*h));
}

void lp_lenhist_add(lp_lenhist_t *h, uint32_t len, uint64_t times) {
  if (len == 0) return;
  h->total += times;
  if (len > h->max) h->over += times;
  else h->count[len] += times;
}

/* Fills of a shape set on the histogram: padded (one sequence per lane) and
 * packed (SPFHP per bucket). Sequences go to the smallest bucket that fits. */
static int evaluate(lp_packer_t *pk, const lp_lenhist_t *h, size_t k, const uint32_t *lanes,
                    const uint32_t *bucket, uint32_t max_segments, double *padded,
                    double *packed) {
  *padded = *packed = 0;
  if (k == 0) return 0;
  uint32_t top = bucket[k - 1];
  uint64_t *sub = calloc((size_t)top + 1, sizeof(uint64_t));
  if (sub == NULL) return -ENOMEM;
  double tokens = 0, pad_slots = 0, pack_slots = 0;
  uint32_t lo = 0;
  int rc = 0;
  for (size_t b = 0; b < k; b++) {
    memset(sub, 0, ((size_t)top + 1) * sizeof(uint64_t));
    uint64_t n = 0;
    for (uint32_t l = lo + 1; l <= bucket[b] && l <= h->max; l++) {
      sub[l] = h->count[l];
      n += h->count[l];
      tokens += (double)h->count[l] * l;
    }
    lo = bucket[b];
    if (n == 0) continue;
    uint64_t rect_pad = (n + lanes[b] - 1) / lanes[b];
    pad_slots += (double)rect_pad * lanes[b] * bucket[b];
    long bins = lp_packer_spfhp_bins(pk, sub, bucket[b], max_segments);
    if (bins < 0) {
      rc = (int)bins;
      break;
    }
    uint64_t rect_pack = ((uint64_t)bins + lanes[b] - 1) / lanes[b];
    pack_slots += (double)rect_pack * lanes[b] * bucket[b];
  }
  free(sub);
  if (rc) return rc;
  *padded = pad_slots > 0 ? tokens / pad_slots : 0;
  *packed = pack_slots > 0 ? tokens / pack_slots : 0;
  return 0;
}

static uint32_t lanes_for(const lp_advise_params_t *prm, uint32_t bucket) {
  uint64_t l = prm->token_budget / bucket;
  return l == 0 ? 1 : (l > 65536 ? 65536 : (uint32_t)l);
}

/* Reads the buckets of the optimum with t+1 buckets ending at the last
 * candidate out of the DP's back pointers (-2: same as with one bucket fewer,
 * -1: no bucket below). */
static void walk_back(lp_advice_t *out, const lp_advise_params_t *prm, const uint32_t *cand,
                      size_t m, const int32_t *from, size_t tt) {
  uint32_t chosen[LP_ADVISE_MAX_K];
  size_t nc = 0;
  long t = (long)tt, j = (long)m - 1;
  while (j >= 0 && t >= 0) {
    int32_t f = from[(size_t)t * m + (size_t)j];
    if (f == -2) {
      t--;
      continue;
    }
    chosen[nc++] = cand[j];
    j = f;
    t--;
  }
  out->k = nc;
  for (size_t i = 0; i < nc; i++) {
    out->bucket[i] = chosen[nc - 1 - i];
    out->lanes[i] = lanes_for(prm, out->bucket[i]);
  }
}

int lp_advise(lp_packer_t *pk, const lp_lenhist_t *h, const lp_advise_params_t *prm,
              const lp_bucket_set_t *current, lp_advice_t *out) {
  memset(out, 0, sizeof(*out));
  if (!prm->k || prm->k > LP_ADVISE_MAX_K || !prm->max_bucket || !prm->granule ||
      !prm->token_budget)
    return -EINVAL;
  uint32_t limit = prm->max_bucket < h->max ? prm->max_bucket : h->max;
  uint32_t longest = 0;
  for (uint32_t l = 1; l <= limit; l++) {
    if (!h->count[l]) continue;
    longest = l;
    out->sequences += h->count[l];
    out->tokens += h->count[l] * l;
  }
  out->rejected = h->total - out->sequences;
  if (longest == 0) return -ENODATA;

  /* Candidates: multiples of the granule below the longest length, and the
   * smallest multiple at or above it (capped at max_bucket). The granule grows
   * so there are at most 2048 candidates. */
  uint32_t g = prm->granule;
  while ((uint64_t)longest / g > 2048) g *= 2;
  uint32_t last = (uint32_t)(((uint64_t)longest + g - 1) / g * g);
  if (last > prm->max_bucket) last = prm->max_bucket;
  size_t m = 0;
  uint32_t *cand = malloc(((size_t)last / g + 2) * sizeof(uint32_t));
  double *pc = NULL, *ps = NULL, *dp = NULL;
  int32_t *from = NULL;
  int rc = -ENOMEM;
  if (cand == NULL) goto done;
  for (uint32_t c = g; c < last; c += g) cand[m++] = c;
  cand[m++] = last;

  /* Prefix count and token sums at each candidate, then
   * dp[t][j] = least padding covering lengths <= cand[j] with t+1 buckets, the
   * largest being cand[j]. */
  pc = calloc(m + 1, sizeof(double));
  ps = calloc(m + 1, sizeof(double));
  dp = malloc((size_t)prm->k * m * sizeof(double));
  from = malloc((size_t)prm->k * m * sizeof(int32_t));
  if (!pc || !ps || !dp || !from) goto done;
  {
    uint32_t l = 1;
    for (size_t j = 0; j < m; j++) {
      pc[j + 1] = pc[j];
      ps[j + 1] = ps[j];
      for (; l <= cand[j] && l <= limit; l++) {
        pc[j + 1] += (double)h->count[l];
        ps[j + 1] += (double)h->count[l] * l;
      }
    }
  }
#define COST(i, j) (cand[j] * (pc[(j) + 1] - pc[(i) + 1]) - (ps[(j) + 1] - ps[(i) + 1]))
  for (size_t j = 0; j < m; j++) {
    dp[j] = cand[j] * pc[j + 1] - ps[j + 1];
    from[j] = -1;
  }
  for (size_t t = 1; t < prm->k; t++) {
    for (size_t j = 0; j < m; j++) {
      double best = dp[(t - 1) * m + j];
      int32_t arg = -2; /* -2: no gain from one more bucket ending here */
      for (size_t i = 0; i < j; i++) {
        double v = dp[(t - 1) * m + i] + COST(i, j);
        if (v < best - 1e-9) {
          best = v;
          arg = (int32_t)i;
        }
      }
      dp[t * m + j] = best;
      from[t * m + j] = arg;
    }
  }
#undef COST
  /* Padding objective: the K-bucket optimum. Packing objective: of the optima
   * for 1..K buckets, the one that packs best (fewer shapes on a tie), since
   * packing makes a bucket count past some point worth nothing. */
  {
    size_t tmax = prm->k - 1, tbest = tmax;
    double best_fill = -1;
    for (size_t t = (prm->objective == LP_ADVISE_PACKED ? 0 : tmax); t <= tmax; t++) {
      walk_back(out, prm, cand, m, from, t);
      double padded, packed;
      rc = evaluate(pk, h, out->k, out->lanes, out->bucket, prm->max_segments, &padded, &packed);
      if (rc) goto done;
      double f = prm->objective == LP_ADVISE_PACKED ? packed : padded;
      if (f > best_fill + 1e-9) {
        best_fill = f;
        tbest = t;
      }
    }
    walk_back(out, prm, cand, m, from, tbest);
  }
  rc = evaluate(pk, h, out->k, out->lanes, out->bucket, prm->max_segments, &out->padded_fill,
                &out->packed_fill);
  if (rc == 0 && current && current->count) {
    /* The current set, sorted by bucket; a bucket's lanes are its own. */
    uint32_t cl[LP_BUCKET_MAX_SHAPES], cb[LP_BUCKET_MAX_SHAPES];
    size_t nc = 0;
    for (size_t i = 0; i < current->count; i++) {
      if (current->shapes[i].state == LP_SHAPE_UNAVAILABLE) continue;
      size_t at = nc++;
      while (at > 0 && cb[at - 1] > current->shapes[i].bucket) {
        cb[at] = cb[at - 1];
        cl[at] = cl[at - 1];
        at--;
      }
      cb[at] = current->shapes[i].bucket;
      cl[at] = current->shapes[i].lanes;
    }
    rc = evaluate(pk, h, nc, cl, cb, prm->max_segments, &out->current_padded_fill,
                  &out->current_packed_fill);
  }
done:
  free(cand); free(pc); free(ps); free(dp); free(from);
  return rc;
}
