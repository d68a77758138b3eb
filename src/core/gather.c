/* Gather lists (see gather.h): a body in owned runs and borrowed pieces,
 * read out in order without being assembled. */
#include "lanepack/gather.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Borrowed pieces shorter than this are copied: recording one costs a piece
 * (24 bytes) and a segment switch on every read, about a 64-byte copy. */
#define LP_GATHER_MIN_REF 64

void lp_gather_init(lp_gather_t *g) {
  memset(g, 0, sizeof(*g));
  lp_buf_init(&g->own);
}

void lp_gather_free(lp_gather_t *g) {
  lp_buf_free(&g->own);
  free(g->refs);
  memset(g, 0, sizeof(*g));
}

void lp_gather_reset(lp_gather_t *g) {
  lp_buf_reset(&g->own);
  g->nrefs = 0;
  g->total = 0;
  g->oom = 0;
  g->cur_seg = g->cur_off = 0;
}

void lp_gather_ref(lp_gather_t *g, const void *p, size_t n) {
  if (n < LP_GATHER_MIN_REF) {
    lp_buf_append(&g->own, p, n);
    return;
  }
  if (g->nrefs == g->refs_cap) {
    size_t c = g->refs_cap ? g->refs_cap * 2 : 64;
    lp_gather_ref_t *r = realloc(g->refs, c * sizeof(*r));
    if (!r) {
      g->oom = 1;
      return;
    }
    g->refs = r;
    g->refs_cap = c;
  }
  g->refs[g->nrefs++] = (lp_gather_ref_t){.own_at = g->own.len, .ref = p, .len = n};
  g->total += n;
}

void lp_gather_unput(lp_gather_t *g, char c) {
  lp_gather_ref_t *last = g->nrefs ? &g->refs[g->nrefs - 1] : NULL;
  if (last && last->own_at == g->own.len) { /* nothing owned after the last piece */
    if (last->len && last->ref[last->len - 1] == c) {
      last->len--;
      g->total--;
    }
    return;
  }
  if (!g->own.oom && g->own.len && g->own.data[g->own.len - 1] == c) g->own.len--;
}

size_t lp_gather_len(lp_gather_t *g) { return g->oom || g->own.oom ? 0 : g->total + g->own.len; }

/* Segment k: even k is the owned run before ref k/2 (the tail after the last
 * one when k/2 == nrefs), odd k is ref k/2. */
static const char *segment(const lp_gather_t *g, size_t k, size_t *len) {
  size_t r = k / 2;
  if (k & 1) {
    *len = g->refs[r].len;
    return g->refs[r].ref;
  }
  size_t from = r ? g->refs[r - 1].own_at : 0;
  size_t to = r < g->nrefs ? g->refs[r].own_at : g->own.len;
  *len = to - from;
  return g->own.data + from;
}

size_t lp_gather_read(lp_gather_t *g, char *dst, size_t cap) {
  size_t put = 0, nseg = 2 * g->nrefs + 1;
  while (put < cap && g->cur_seg < nseg) {
    size_t len;
    const char *s = segment(g, g->cur_seg, &len);
    size_t k = len - g->cur_off < cap - put ? len - g->cur_off : cap - put;
    if (k) memcpy(dst + put, s + g->cur_off, k);
    put += k;
    g->cur_off += k;
    if (g->cur_off == len) {
      g->cur_seg++;
      g->cur_off = 0;
    }
  }
  return put;
}

int lp_gather_seek(lp_gather_t *g, size_t at) {
  size_t nseg = 2 * g->nrefs + 1;
  g->cur_seg = g->cur_off = 0;
  while (g->cur_seg < nseg) {
    size_t len;
    (void)segment(g, g->cur_seg, &len);
    if (at < len) {
      g->cur_off = at;
      return 0;
    }
    at -= len;
    g->cur_seg++;
  }
  return at == 0 ? 0 : -EINVAL;
}

void lp_gather_flatten(lp_gather_t *g, lp_buf_t *out) {
  if (g->oom || g->own.oom) {
    out->oom = 1;
    return;
  }
  size_t n = g->total + g->own.len;
  if (lp_buf_reserve(out, n)) return;
  (void)lp_gather_seek(g, 0);
  out->len += lp_gather_read(g, out->data + out->len, n);
}
