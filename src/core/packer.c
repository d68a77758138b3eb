/* Bin-packing of sequence lengths into fixed-capacity lanes. Pure computation:
 * no I/O, and no allocation once the scratch arrays have grown to the input size. */
#include "lanepack/packer.h"

#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* A group of identical bins in SPFHP: `count` bins that hold the lengths on the
 * chain from the root group down to this one (`mult` copies of `added` at each
 * step) and have `rem` slots free. */
typedef struct {
  uint64_t count;
  uint32_t rem;
  uint32_t segs;
  int32_t parent;
  uint32_t added;
  uint32_t mult;
} spf_group_t;

struct lp_packer_s {
  /* All arrays are owned here and grow on demand; *_cap counts elements. */
  uint64_t *keys; size_t keys_cap;      /* sort keys for the unpinned items */
  uint32_t *tree; size_t tree_cap;      /* max-tree over bins or capacity values */
  uint32_t *fill; size_t fill_cap;      /* per bin: tokens placed */
  uint32_t *segs; size_t segs_cap;      /* per bin: sequences placed */
  int32_t *heads; size_t heads_cap;     /* per capacity value: stack of bins/groups */
  uint32_t *captree; size_t captree_cap; /* max-tree over capacity values: which have a bin */
  size_t idx_size;                      /* leaves of captree (and entries of heads) kept clean */
  int idx_dirty;                        /* a pack stopped midway: clear the index in full */
  int32_t *next; size_t next_cap;       /* stack links, per bin or group */
  spf_group_t *groups; size_t groups_cap;
  uint32_t *cursor; size_t cursor_cap;  /* SPFHP expansion: next item per length */
  uint32_t *bylen; size_t bylen_cap;    /* SPFHP expansion: items grouped by length */
  uint32_t *chain; size_t chain_cap;
};

#define GROW(p, field, capfield, need) \
  lp__grow((void **)&(p)->field, &(p)->capfield, (need), sizeof(*(p)->field))

lp_packer_t *lp_packer_new(void) { return calloc(1, sizeof(lp_packer_t)); }

void lp_packer_free(lp_packer_t *p) {
  if (p == NULL) return;
  free(p->keys); free(p->tree); free(p->fill); free(p->segs); free(p->heads);
  free(p->captree);
  free(p->next); free(p->groups); free(p->cursor); free(p->chain);
  free(p->bylen);
  free(p);
}

const char *lp_algo_name(lp_algo_t a) {
  switch (a) {
    case LP_ALGO_FFD: return "ffd";
    case LP_ALGO_BFD: return "bfd";
    case LP_ALGO_SPFHP: return "spfhp";
    default: return "?";
  }
}

int lp_algo_parse(const char *s) {
  for (int a = 0; a < LP_ALGO_COUNT; a++)
    if (strcmp(s, lp_algo_name((lp_algo_t)a)) == 0) return a;
  return -EINVAL;
}

/* ---- max-tree: leaves hold values, inner nodes the max of their children ---- */

static size_t pow2_at_least(size_t n) {
  size_t s = 1;
  while (s < n) s <<= 1;
  return s;
}

static void tree_set(uint32_t *t, size_t size, size_t i, uint32_t v) {
  size_t k = size + i;
  t[k] = v;
  for (k >>= 1; k >= 1; k >>= 1) {
    uint32_t m = t[2 * k] > t[2 * k + 1] ? t[2 * k] : t[2 * k + 1];
    if (t[k] == m) break;
    t[k] = m;
  }
}

/* Leftmost leaf index >= lo whose value is >= x, or -1. */
static long tree_first(const uint32_t *t, size_t node, size_t nl, size_t nr, size_t lo,
                       uint32_t x) {
  if (nr <= lo || t[node] < x) return -1;
  if (nr - nl == 1) return (long)nl;
  size_t mid = nl + (nr - nl) / 2;
  long r = tree_first(t, 2 * node, nl, mid, lo, x);
  return r >= 0 ? r : tree_first(t, 2 * node + 1, mid, nr, lo, x);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Writes into p->keys the unpinned items in decreasing length, lower index first
 * on ties, encoded as (~len << 32 | index). Returns how many. */
static int sort_unpinned(lp_packer_t *p, const uint32_t *lens, size_t n, size_t pinned,
                         size_t *count) {
  if (GROW(p, keys, keys_cap, n + 1)) return -ENOMEM;
  size_t k = 0;
  for (size_t i = pinned; i < n; i++)
    p->keys[k++] = ((uint64_t)(UINT32_MAX - lens[i]) << 32) | (uint64_t)i;
  qsort(p->keys, k, sizeof(uint64_t), cmp_u64);
  *count = k;
  return 0;
}

static uint32_t bin_limit(const lp_pack_params_t *prm, size_t n) {
  if (prm->max_bins) return prm->max_bins;
  return n > UINT32_MAX ? UINT32_MAX : (uint32_t)(n ? n : 1);
}

static int seg_full(const lp_pack_params_t *prm, uint32_t segs) {
  return prm->max_segments && segs >= prm->max_segments;
}

/* ---- best fit: bins indexed by remaining capacity; a max-tree over capacity
 * values marks which have a bin, so "smallest capacity >= len" is O(log C) ---- */

static int capidx_init(lp_packer_t *p, uint32_t capacity, size_t nodes, size_t *size) {
  size_t need = pow2_at_least((size_t)capacity + 1);
  if (GROW(p, next, next_cap, nodes)) return -ENOMEM;
  /* The index is left empty by every pack that ends (capidx_clear), so it is
   * cleared in full only when it grows or a pack stopped midway: a decision
   * costs what its bins cost, not what the bucket length is. One size, the
   * largest seen, serves every smaller capacity. */
  if (need > p->idx_size) {
    if (GROW(p, captree, captree_cap, 2 * need) || GROW(p, heads, heads_cap, need)) return -ENOMEM;
    p->idx_size = need;
    p->idx_dirty = 1;
  }
  if (p->idx_dirty) {
    memset(p->captree, 0, 2 * p->idx_size * sizeof(uint32_t));
    memset(p->heads, 0xff, p->idx_size * sizeof(int32_t));
  }
  p->idx_dirty = 1; /* until capidx_clear */
  *size = p->idx_size;
  return 0;
}

static void capidx_push(lp_packer_t *p, size_t size, uint32_t rem, int32_t node) {
  p->next[node] = p->heads[rem];
  if (p->heads[rem] < 0) tree_set(p->captree, size, rem, 1);
  p->heads[rem] = node;
}

static void capidx_pop(lp_packer_t *p, size_t size, uint32_t rem) {
  int32_t node = p->heads[rem];
  p->heads[rem] = p->next[node];
  if (p->heads[rem] < 0) tree_set(p->captree, size, rem, 0);
}

/* Empties the index after a pack: only the capacity values still holding a bin
 * (or group) are touched. */
static void capidx_clear(lp_packer_t *p, size_t size, uint32_t rem) {
  if (p->heads[rem] < 0) return;
  p->heads[rem] = -1;
  tree_set(p->captree, size, rem, 0);
}

/* ---- any fit: first fit keeps a max-tree over bins of their remaining
 * capacity ("leftmost bin with room" is O(log B)); best fit the capacity index
 * ("tightest room" is O(log C)). Pinned items go first, then decreasing. ---- */

static long pack_any_fit(lp_packer_t *p, const lp_pack_params_t *prm, const uint32_t *lens,
                         size_t n, lp_place_t *out, uint32_t *bins_used, int best) {
  uint32_t nb = bin_limit(prm, n);
  size_t size;
  if (GROW(p, fill, fill_cap, nb) || GROW(p, segs, segs_cap, nb)) return -ENOMEM;
  if (best) {
    if (capidx_init(p, prm->capacity, nb, &size)) return -ENOMEM;
  } else {
    size = pow2_at_least(nb);
    if (GROW(p, tree, tree_cap, 2 * size)) return -ENOMEM;
    memset(p->tree, 0, 2 * size * sizeof(uint32_t));
    for (uint32_t b = 0; b < nb; b++) p->tree[size + b] = prm->capacity;
    for (size_t k = size - 1; k >= 1; k--)
      p->tree[k] = p->tree[2 * k] > p->tree[2 * k + 1] ? p->tree[2 * k] : p->tree[2 * k + 1];
    memset(p->fill, 0, nb * sizeof(uint32_t));
    memset(p->segs, 0, nb * sizeof(uint32_t));
  }

  size_t pinned = prm->n_pinned < n ? prm->n_pinned : n, nk;
  if (sort_unpinned(p, lens, n, pinned, &nk)) return -ENOMEM;
  long placed = 0;
  uint32_t used = 0;
  for (size_t k = 0; k < pinned + nk; k++) {
    size_t i = k < pinned ? k : (size_t)(p->keys[k - pinned] & 0xffffffffu);
    out[i].bin = -1;
    out[i].offset = 0;
    uint32_t len = lens[i];
    if (len == 0 || len > prm->capacity) continue;
    long b;
    if (!best) {
      b = tree_first(p->tree, 1, 0, size, 0, len);
    } else {
      long r = tree_first(p->captree, 1, 0, size, len, 1);
      if (r >= 0) {
        b = p->heads[r];
        capidx_pop(p, size, (uint32_t)r);
      } else if (used < nb) {
        b = used;
        p->fill[b] = 0;
        p->segs[b] = 0;
      } else {
        b = -1;
      }
    }
    if (b < 0) continue;
    out[i].bin = (int32_t)b;
    out[i].offset = p->fill[b];
    p->fill[b] += len;
    p->segs[b]++;
    uint32_t room = seg_full(prm, p->segs[b]) ? 0 : prm->capacity - p->fill[b];
    if (!best) tree_set(p->tree, size, (size_t)b, room);
    else if (room > 0) capidx_push(p, size, room, (int32_t)b);
    if ((uint32_t)b + 1 > used) used = (uint32_t)b + 1;
    placed++;
  }
  if (best) {
    for (uint32_t b = 0; b < used; b++)
      if (p->fill[b] < prm->capacity) capidx_clear(p, size, prm->capacity - p->fill[b]);
    p->idx_dirty = 0;
  }
  if (bins_used) *bins_used = used;
  return placed;
}

/* ---- SPFHP: best fit over groups of identical bins, one step per (length,
 * group) pair instead of per sequence ---- */

typedef struct {
  lp_packer_t *p;
  const lp_pack_params_t *prm;
  size_t size;       /* capacity index size */
  size_t ngroups;
  uint64_t bins;     /* bins opened */
  uint64_t max_bins; /* 0 = unlimited */
} spf_t;

static int spf_new_group(spf_t *s, uint64_t count, uint32_t rem, uint32_t segs,
                         int32_t parent, uint32_t added, uint32_t mult) {
  lp_packer_t *p = s->p;
  if (GROW(p, groups, groups_cap, s->ngroups + 1) || GROW(p, next, next_cap, s->ngroups + 1))
    return -ENOMEM;
  int32_t g = (int32_t)s->ngroups++;
  p->groups[g] = (spf_group_t){count, rem, segs, parent, added, mult};
  if (rem > 0 && !seg_full(s->prm, segs)) capidx_push(p, s->size, rem, g);
  return 0;
}

/* Copies of a length one bin with rem free slots and segs sequences can take. */
static uint64_t spf_room(const spf_t *s, uint32_t rem, uint32_t segs, uint32_t len) {
  uint64_t q = rem / len;
  if (s->prm->max_segments && q > s->prm->max_segments - segs) q = s->prm->max_segments - segs;
  return q;
}

/* Places c sequences of length len, best fit: the group with the tightest room
 * takes as many copies per bin as fit (a bin that took one copy stays the
 * tightest fit for the next), then new bins are opened. Returns how many could
 * not be placed, or a negative errno. */
static long spf_place(spf_t *s, uint32_t len, uint64_t c) {
  lp_packer_t *p = s->p;
  while (c > 0) {
    long r = tree_first(p->captree, 1, 0, s->size, len, 1);
    int32_t g = -1;
    uint64_t avail, q;
    uint32_t rem, segs;
    if (r >= 0) {
      g = p->heads[r];
      avail = p->groups[g].count;
      rem = (uint32_t)r;
      segs = p->groups[g].segs;
    } else {
      avail = s->max_bins ? s->max_bins - s->bins : UINT64_MAX;
      if (avail == 0) break;
      rem = s->prm->capacity;
      segs = 0;
    }
    q = spf_room(s, rem, segs, len);
    uint64_t full = c / q < avail ? c / q : avail;
    uint64_t part = full < avail ? c - full * q : 0; /* copies for one more bin */
    uint64_t used = full + (part > 0);
    if (g >= 0) {
      p->groups[g].count -= used;
      if (p->groups[g].count == 0) capidx_pop(p, s->size, (uint32_t)r);
    } else {
      s->bins += used;
    }
    if (full && spf_new_group(s, full, rem - (uint32_t)q * len, segs + (uint32_t)q, g, len,
                              (uint32_t)q))
      return -ENOMEM;
    if (part && spf_new_group(s, 1, rem - (uint32_t)part * len, segs + (uint32_t)part, g, len,
                              (uint32_t)part))
      return -ENOMEM;
    c -= full * q + part;
  }
  return (long)(c > (uint64_t)LONG_MAX ? LONG_MAX : c);
}

/* Leaves the index empty once the groups are placed. */
static void spf_clear(spf_t *s) {
  for (size_t g = 0; g < s->ngroups; g++)
    if (s->p->groups[g].rem <= s->prm->capacity) capidx_clear(s->p, s->size, s->p->groups[g].rem);
  s->p->idx_dirty = 0;
}

static int spf_init(spf_t *s, lp_packer_t *p, const lp_pack_params_t *prm, uint64_t max_bins) {
  s->p = p;
  s->prm = prm;
  s->ngroups = 0;
  s->bins = 0;
  s->max_bins = max_bins;
  return capidx_init(p, prm->capacity, 16, &s->size);
}

long lp_packer_spfhp_bins(lp_packer_t *p, const uint64_t *count, uint32_t capacity,
                          uint32_t max_segments) {
  if (capacity == 0) return -EINVAL;
  lp_pack_params_t prm = {.capacity = capacity, .max_segments = max_segments};
  spf_t s;
  if (spf_init(&s, p, &prm, 0)) return -ENOMEM;
  for (uint32_t l = capacity; l >= 1; l--) {
    if (count[l] == 0) continue;
    long left = spf_place(&s, l, count[l]);
    if (left < 0) return left;
  }
  spf_clear(&s);
  return (long)s.bins;
}

static long pack_spfhp(lp_packer_t *p, const lp_pack_params_t *prm, const uint32_t *lens,
                       size_t n, lp_place_t *out, uint32_t *bins_used) {
  spf_t s;
  if (spf_init(&s, p, prm, prm->max_bins)) return -ENOMEM;
  size_t cap1 = (size_t)prm->capacity + 1;
  if (GROW(p, cursor, cursor_cap, cap1)) return -ENOMEM;
  size_t pinned = prm->n_pinned < n ? prm->n_pinned : n, nk;
  if (sort_unpinned(p, lens, n, pinned, &nk)) return -ENOMEM;

  /* Pinned items first, one at a time in their order; then the histogram of the
   * rest, longest first. */
  for (size_t i = 0; i < n; i++) {
    out[i].bin = -1;
    out[i].offset = 0;
  }
  for (size_t i = 0; i < pinned; i++) {
    if (lens[i] == 0 || lens[i] > prm->capacity) continue;
    long left = spf_place(&s, lens[i], 1);
    if (left < 0) return left;
  }
  for (size_t k = 0; k < nk;) {
    uint32_t len = UINT32_MAX - (uint32_t)(p->keys[k] >> 32);
    size_t e = k;
    while (e < nk && UINT32_MAX - (uint32_t)(p->keys[e] >> 32) == len) e++;
    if (len >= 1 && len <= prm->capacity) {
      long left = spf_place(&s, len, e - k);
      if (left < 0) return left;
    }
    k = e;
  }

  /* Expansion: each group still holding bins stands for `count` real bins with
   * the lengths on its chain. bylen lists the items of each length, pinned ones
   * first, then in sorted order; the first hist[l] of length l are exactly the
   * ones placed (once an item of a length fails, every later one of it fails). */
  if (GROW(p, chain, chain_cap, (size_t)prm->capacity + 1) || GROW(p, bylen, bylen_cap, n + 1))
    return -ENOMEM;
  memset(p->cursor, 0, cap1 * sizeof(uint32_t));
  for (size_t i = 0; i < n; i++)
    if (lens[i] >= 1 && lens[i] <= prm->capacity) p->cursor[lens[i]]++;
  uint32_t acc = 0;
  for (size_t l = 0; l < cap1; l++) {
    uint32_t c = p->cursor[l];
    p->cursor[l] = acc;
    acc += c;
  }
  for (size_t k = 0; k < pinned + nk; k++) {
    size_t i = k < pinned ? k : (size_t)(p->keys[k - pinned] & 0xffffffffu);
    if (lens[i] >= 1 && lens[i] <= prm->capacity) p->bylen[p->cursor[lens[i]]++] = (uint32_t)i;
  }
  for (size_t l = cap1; l-- > 1;) p->cursor[l] = p->cursor[l - 1];
  p->cursor[0] = 0;
  /* cursor[l] is now the start of length l's run in bylen */

  long placed = 0;
  uint32_t bin = 0;
  for (size_t g = 0; g < s.ngroups; g++) {
    uint64_t cnt = p->groups[g].count;
    if (cnt == 0) continue;
    size_t depth = 0;
    for (int32_t q = (int32_t)g; q >= 0; q = p->groups[q].parent)
      p->chain[depth++] = (uint32_t)q;
    for (uint64_t c = 0; c < cnt; c++, bin++) {
      uint32_t off = 0;
      for (size_t d = depth; d-- > 0;) {
        const spf_group_t *step = &p->groups[p->chain[d]];
        for (uint32_t k = 0; k < step->mult; k++) {
          uint32_t i = p->bylen[p->cursor[step->added]++];
          out[i].bin = (int32_t)bin;
          out[i].offset = off;
          off += step->added;
          placed++;
        }
      }
    }
  }
  spf_clear(&s);
  if (bins_used) *bins_used = bin;
  return placed;
}

long lp_packer_pack(lp_packer_t *p, lp_algo_t algo, const lp_pack_params_t *prm,
                    const uint32_t *lens, size_t n, lp_place_t *out, uint32_t *bins_used) {
  if (bins_used) *bins_used = 0;
  if (p == NULL || prm == NULL || prm->capacity == 0 || (n && (!lens || !out)) ||
      n > UINT32_MAX)
    return -EINVAL;
  switch (algo) {
    case LP_ALGO_FFD: return pack_any_fit(p, prm, lens, n, out, bins_used, 0);
    case LP_ALGO_BFD: return pack_any_fit(p, prm, lens, n, out, bins_used, 1);
    case LP_ALGO_SPFHP: return pack_spfhp(p, prm, lens, n, out, bins_used);
    default: return -EINVAL;
  }
}
