/* The BPE model: a piece's characters become symbols, then the adjacent pair
 * of lowest merge rank (leftmost among equals) merges, again and again, as
 * the library's Word::merge_all does with its heap; the pair -> (rank, id)
 * table is one open-addressing map keyed by the two ids (tiktoken's rank
 * map), so a merge costs a probe, not a string. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"

static inline uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static inline uint32_t pair_slot(uint64_t k, uint32_t mask) {
  k *= 0x9E3779B97F4A7C15ull;
  return (uint32_t)(k >> 32) & mask;
}

/* The (rank, new id) of merging a then b, or 0 when they do not merge. */
static inline int merge_of(const lp__hf_model_t *m, int32_t a, int32_t b, uint32_t *rank, int32_t *id) {
  uint64_t k = pair_key(a, b);
  for (uint32_t i = pair_slot(k, m->mmask);; i = (i + 1) & m->mmask) {
    const lp__hf_merge_t *e = &m->merges[i];
    if (e->id < 0) return 0;
    if (e->key == k) {
      *rank = e->rank;
      *id = e->id;
      return 1;
    }
  }
}

static int merge_put(lp__hf_model_t *m, int32_t a, int32_t b, uint32_t rank, int32_t id) {
  uint64_t k = pair_key(a, b);
  uint32_t i = pair_slot(k, m->mmask);
  while (m->merges[i].id >= 0 && m->merges[i].key != k) i = (i + 1) & m->mmask;
  m->merges[i] = (lp__hf_merge_t){k, rank, id}; /* a later merge of the same pair replaces it, as the library's map does */
  return 0;
}

/* merges: ["a b", ...] or [["a", "b"], ...]. */
int lp__hf_bpe_load_merges(lp__hf_model_t *m, json_t *a, char *err, size_t errlen);
int lp__hf_bpe_load_merges(lp__hf_model_t *m, json_t *a, char *err, size_t errlen) {
  if (!json_is_array(a)) return lp__hf_bad(err, errlen, "model", "merges must be an array");
  size_t n = json_array_size(a);
  uint32_t slots = 16;
  while (slots < n * 2 + 2) slots *= 2; /* at most half full */
  if (!(m->merges = malloc(slots * sizeof(*m->merges)))) return -ENOMEM;
  for (uint32_t i = 0; i < slots; i++) m->merges[i].id = -1;
  m->mmask = slots - 1;
  char *buf = NULL;
  size_t bufcap = 0;
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    json_t *e = json_array_get(a, i);
    const char *x, *y;
    size_t xl, yl;
    if (json_is_string(e)) {
      x = json_string_value(e);
      const char *sp = strchr(x, ' ');
      if (!sp || strchr(sp + 1, ' ')) {
        rc = lp__hf_bad(err, errlen, "model", "merges[%zu] must be two pieces with one space between", i);
        break;
      }
      xl = (size_t)(sp - x);
      y = sp + 1;
      yl = strlen(y);
    } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
               json_is_string(json_array_get(e, 1))) {
      x = json_string_value(json_array_get(e, 0));
      xl = json_string_length(json_array_get(e, 0));
      y = json_string_value(json_array_get(e, 1));
      yl = json_string_length(json_array_get(e, 1));
    } else {
      rc = lp__hf_bad(err, errlen, "model", "merges[%zu] must be \"a b\" or [\"a\", \"b\"]", i);
      break;
    }
    int32_t ia = lp__hf_vocab_get(&m->vocab, x, xl), ib = lp__hf_vocab_get(&m->vocab, y, yl);
    size_t skip = m->prefix_len && yl >= m->prefix_len && memcmp(y, m->prefix, m->prefix_len) == 0 ? m->prefix_len : 0;
    if (xl + yl > bufcap) {
      bufcap = (xl + yl) * 2;
      char *b2 = realloc(buf, bufcap);
      if (!b2) {
        rc = -ENOMEM;
        break;
      }
      buf = b2;
    }
    memcpy(buf, x, xl);
    memcpy(buf + xl, y + skip, yl - skip);
    int32_t id = lp__hf_vocab_get(&m->vocab, buf, xl + yl - skip);
    if (ia < 0 || ib < 0 || id < 0) {
      rc = lp__hf_bad(err, errlen, "model", "merges[%zu]: a piece of it or what it makes is not in the vocab", i);
      break;
    }
    merge_put(m, ia, ib, (uint32_t)i, id);
  }
  free(buf);
  return rc;
}

typedef struct {
  int32_t c;
  int32_t prev, next;
  uint32_t len; /* bytes of the piece; 0 once merged into its left neighbour */
} sym_t;

typedef struct {
  uint32_t rank, pos;
  int32_t id;
} cand_t;

static inline int before(cand_t a, cand_t b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static void heap_push(cand_t *h, size_t *n, cand_t c) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!before(c, h[p])) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = c;
}

static cand_t heap_pop(cand_t *h, size_t *n) {
  cand_t top = h[0], last = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, s = i;
    cand_t best = last;
    if (l < *n && before(h[l], best)) {
      s = l;
      best = h[l];
    }
    if (r < *n && before(h[r], best)) s = r;
    if (s == i) break;
    h[i] = h[s];
    i = s;
  }
  h[i] = last;
  return top;
}

/* A symbol for the characters b[0..n) (with the prefix when not first, the
 * suffix when last); -1 when the vocabulary has none. */
static int32_t char_id(const lp__hf_model_t *m, char *tmp, const char *b, size_t n, int first, int last) {
  size_t k = 0;
  if (!first && m->prefix_len) {
    memcpy(tmp, m->prefix, m->prefix_len);
    k = m->prefix_len;
  }
  memcpy(tmp + k, b, n);
  k += n;
  if (last && m->suffix_len) {
    memcpy(tmp + k, m->suffix, m->suffix_len);
    k += m->suffix_len;
  }
  return lp__hf_vocab_get(&m->vocab, tmp, k);
}

int lp__hf_bpe_run(const lp__hf_model_t *m, lp__hf_work_t *w, const char *b, const lp__hf_al_t *al, size_t n,
                   lp__hf_enc_t *e);
int lp__hf_bpe_run(const lp__hf_model_t *m, lp__hf_work_t *w, const char *b, const lp__hf_al_t *al, size_t n,
                   lp__hf_enc_t *e) {
  if (m->ignore_merges) {
    int32_t id = lp__hf_vocab_get(&m->vocab, b, n);
    if (id >= 0) return lp__hf_enc_push(e, id, al[0].a0, al[n - 1].a1, 0, 0);
  }
  /* scratch: n symbols, up to n merges queued per symbol, and the lookup buffer */
  size_t need = n * sizeof(sym_t) + 4 * n * sizeof(cand_t) + 16 + m->prefix_len + m->suffix_len + 64;
  if (w->scratch_cap < need) {
    void *s = realloc(w->scratch, need);
    if (!s) return -ENOMEM;
    w->scratch = s;
    w->scratch_cap = need;
  }
  sym_t *sy = (sym_t *)(void *)w->scratch;
  cand_t *heap = (cand_t *)(void *)(sy + n);
  size_t cap_heap = 4 * n;
  char *tmp = (char *)(heap + cap_heap);
  size_t ns = 0;
  int32_t unk_id = -1;
  uint32_t unk_len = 0;
  int have_unk = 0;
  for (size_t i = 0; i < n;) {
    int k;
    lp__hf_utf8_get(b, i, &k);
    int32_t id = char_id(m, tmp, b + i, (size_t)k, i == 0, i + (size_t)k == n);
    if (id >= 0) {
      if (have_unk) {
        sy[ns] = (sym_t){unk_id, (int32_t)ns - 1, (int32_t)ns + 1, unk_len};
        ns++;
        have_unk = 0;
      }
      sy[ns] = (sym_t){id, (int32_t)ns - 1, (int32_t)ns + 1, (uint32_t)k};
      ns++;
    } else {
      int done = 0;
      if (m->byte_fallback) { /* <0xAB> pieces for each byte, when all are there */
        int32_t ids[4];
        int all = 1;
        for (int q = 0; q < k && all; q++) {
          char name[8];
          snprintf(name, sizeof(name), "<0x%02X>", (unsigned char)b[i + (size_t)q]);
          all = (ids[q] = lp__hf_vocab_get(&m->vocab, name, 6)) >= 0;
        }
        if (all) {
          for (int q = 0; q < k; q++) {
            sy[ns] = (sym_t){ids[q], (int32_t)ns - 1, (int32_t)ns + 1, 1};
            ns++;
          }
          done = 1;
        }
      }
      if (!done && m->unk >= 0) {
        if (have_unk && m->fuse_unk) unk_len += (uint32_t)k;
        else {
          if (have_unk) {
            sy[ns] = (sym_t){unk_id, (int32_t)ns - 1, (int32_t)ns + 1, unk_len};
            ns++;
          }
          have_unk = 1;
          unk_id = m->unk;
          unk_len = (uint32_t)k;
        }
      }
    }
    i += (size_t)k;
  }
  if (have_unk) {
    sy[ns] = (sym_t){unk_id, (int32_t)ns - 1, (int32_t)ns + 1, unk_len};
    ns++;
  }
  if (ns) sy[ns - 1].next = -1;
  size_t nh = 0;
  for (size_t i = 0; i + 1 < ns; i++) {
    uint32_t rank;
    int32_t id;
    if (merge_of(m, sy[i].c, sy[i + 1].c, &rank, &id)) heap_push(heap, &nh, (cand_t){rank, (uint32_t)i, id});
  }
  while (nh) {
    cand_t top = heap_pop(heap, &nh);
    sym_t *s = &sy[top.pos];
    if (s->len == 0 || s->next < 0) continue;
    sym_t *r = &sy[s->next];
    uint32_t rank;
    int32_t id;
    if (!merge_of(m, s->c, r->c, &rank, &id) || id != top.id) continue; /* an expired entry */
    s->c = top.id;
    s->len += r->len;
    r->len = 0;
    s->next = r->next;
    if (r->next >= 0) sy[r->next].prev = (int32_t)top.pos;
    if (nh + 2 > cap_heap) continue; /* cannot happen: each merge queues at most two */
    if (s->prev >= 0 && merge_of(m, sy[s->prev].c, s->c, &rank, &id))
      heap_push(heap, &nh, (cand_t){rank, (uint32_t)s->prev, id});
    if (s->next >= 0 && merge_of(m, s->c, sy[s->next].c, &rank, &id))
      heap_push(heap, &nh, (cand_t){rank, top.pos, id});
  }
  size_t off = 0;
  for (size_t i = 0; i < ns; i++) {
    if (!sy[i].len) continue;
    if (lp__hf_enc_push(e, sy[i].c, al[off].a0, al[off + sy[i].len - 1].a1, 0, 0)) return -ENOMEM;
    off += sy[i].len;
  }
  return 0;
}
