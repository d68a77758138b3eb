/* The ideal device-aware policy, the simulator's reference: whenever a device
 * frees, everything waiting is visible; the oldest item must go (unless run
 * without that constraint); each shape that holds it is packed with it first
 * and then the rest longest first (first fit); the shape with the least device
 * time per real token starts at once, with no lead time and no faults.
 * Waiting items are kept by length (a FIFO per length and a two-level bitmap of
 * the lengths present), so one decision costs what its batch holds, however
 * long the queue has grown under overload. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/sim.h"

#define NIL UINT32_MAX

typedef struct obatch_s {
  uint32_t *items;        /* owned; NULL once answered */
  uint32_t n, backend;
} obatch_t;

typedef struct ideal_s {
  const sim_model_t *m;
  const sim_req_t *reqs;
  int oldest;             /* the oldest item must go */
  uint32_t maxb;          /* largest bucket: lengths are 1..maxb */
  /* waiting items: request index -> links in its length's FIFO */
  uint32_t *prev, *next;  /* owned, grown with the requests seen */
  uint8_t *waiting;
  size_t cap, admitted, cursor;  /* cursor: no request before it waits */
  uint32_t *head, *tail, *count; /* per length, owned */
  uint64_t *bits, *sum;          /* length present; word present */
  size_t nwords, nsum;
  uint32_t free_dev[SIM_MAX_BACKENDS];
  obatch_t *out;         /* batches out: id - 1 -> what it holds */
  size_t nout, capout;
  sim_actq_t q;           /* actions for the world */
  uint32_t *picks, *best, *lanes; /* scratch */
  size_t cappicks;
} ideal_t;

static void bit_set(ideal_t *s, uint32_t len) {
  s->bits[len >> 6] |= 1ull << (len & 63);
  s->sum[len >> 12] |= 1ull << ((len >> 6) & 63);
}

static void bit_clear(ideal_t *s, uint32_t len) {
  s->bits[len >> 6] &= ~(1ull << (len & 63));
  if (!s->bits[len >> 6]) s->sum[len >> 12] &= ~(1ull << ((len >> 6) & 63));
}

static int highest(uint64_t x) { return 63 - __builtin_clzll(x); }

/* The largest length <= f with an item waiting, or 0. */
static uint32_t find_le(const ideal_t *s, uint32_t f) {
  if (f > s->maxb) f = s->maxb;
  size_t w = f >> 6;
  uint64_t x = s->bits[w] & (((f & 63) == 63) ? ~0ull : ((1ull << ((f & 63) + 1)) - 1));
  if (x) return (uint32_t)(w * 64 + (size_t)highest(x));
  if (w == 0) return 0;
  /* the highest word below w that has a length */
  size_t sw = (w - 1) >> 6;
  uint32_t bit = (uint32_t)((w - 1) & 63);
  uint64_t y = s->sum[sw] & ((bit == 63) ? ~0ull : ((1ull << (bit + 1)) - 1));
  while (!y) {
    if (sw == 0) return 0;
    y = s->sum[--sw];
  }
  size_t word = sw * 64 + (size_t)highest(y);
  return (uint32_t)(word * 64 + (size_t)highest(s->bits[word]));
}

static void take_count(ideal_t *s, uint32_t len) {
  if (--s->count[len] == 0) bit_clear(s, len);
}

static void give_count(ideal_t *s, uint32_t len) {
  if (s->count[len]++ == 0) bit_set(s, len);
}

static void unlink_item(ideal_t *s, uint32_t i) {
  uint32_t len = s->reqs[i].len;
  if (s->prev[i] != NIL) s->next[s->prev[i]] = s->next[i];
  else s->head[len] = s->next[i];
  if (s->next[i] != NIL) s->prev[s->next[i]] = s->prev[i];
  else s->tail[len] = s->prev[i];
  s->waiting[i] = 0;
  take_count(s, len);
}

static int grow(void **p, size_t *cap, size_t want, size_t size) {
  if (want <= *cap) return 0;
  size_t c = *cap ? *cap : 256;
  while (c < want) c *= 2;
  void *q = realloc(*p, c * size);
  if (!q) return -ENOMEM;
  *p = q;
  *cap = c;
  return 0;
}

/* Packs shape sh from what waits, the oldest first when pinned is not NIL:
 * writes the lengths taken (after the pinned one) to s->picks and returns
 * their count; *real gets the tokens. Counts are left as they were. */
static size_t trial(ideal_t *s, const lp_shape_t *sh, uint32_t pinned, uint64_t *real) {
  uint32_t *free_ = s->lanes;
  for (uint32_t l = 0; l < sh->lanes; l++) free_[l] = sh->bucket;
  size_t k = 0;
  *real = 0;
  if (pinned != NIL) {
    free_[0] -= s->reqs[pinned].len;
    *real += s->reqs[pinned].len;
    take_count(s, s->reqs[pinned].len);
  }
  for (;;) {
    uint32_t most = 0;
    for (uint32_t l = 0; l < sh->lanes; l++)
      if (free_[l] > most) most = free_[l];
    uint32_t len = most ? find_le(s, most) : 0;
    if (!len) break;
    uint32_t l = 0;
    while (free_[l] < len) l++;
    free_[l] -= len;
    *real += len;
    s->picks[k++] = len;
    take_count(s, len);
  }
  for (size_t j = 0; j < k; j++) give_count(s, s->picks[j]);
  if (pinned != NIL) give_count(s, s->reqs[pinned].len);
  return k;
}

/* Sends one batch to backend b from what waits. Returns 0, 1 when nothing
 * waits, or a negative errno. */
static int dispatch_one(ideal_t *s, uint32_t b) {
  while (s->cursor < s->admitted && !s->waiting[s->cursor]) s->cursor++;
  if (s->cursor >= s->admitted) return 1;
  uint32_t pinned = s->oldest ? (uint32_t)s->cursor : NIL;
  const lp_bucket_set_t *set = &s->m->shapes;
  int best = -1;
  double best_score = 0;
  uint64_t best_real = 0;
  size_t best_k = 0;
  for (size_t si = 0; si < set->count; si++) {
    const lp_shape_t *sh = &set->shapes[si];
    if (sh->state != LP_SHAPE_COMPILED) continue;
    if (pinned != NIL && sh->bucket < s->reqs[pinned].len) continue;
    uint64_t real;
    size_t k = trial(s, sh, pinned, &real);
    if (!real) continue;
    double score = (double)s->m->cost_ns[si] / (double)real;
    if (best < 0 || score < best_score || (score == best_score && real > best_real)) {
      best = (int)si;
      best_score = score;
      best_real = real;
      best_k = k;
      uint32_t *t = s->best;
      s->best = s->picks;
      s->picks = t;
    }
  }
  if (best < 0) return 1;
  size_t n = best_k + (pinned != NIL);
  uint32_t *items = malloc(n * sizeof(*items));
  if (!items) return -ENOMEM;
  size_t k = 0;
  if (pinned != NIL) {
    unlink_item(s, pinned);
    items[k++] = pinned;
  }
  for (size_t j = 0; j < best_k; j++) {
    uint32_t i = s->head[s->best[j]];
    unlink_item(s, i);
    items[k++] = i;
  }
  if (grow((void **)&s->out, &s->capout, s->nout + 1, sizeof(*s->out))) {
    free(items);
    return -ENOMEM;
  }
  s->out[s->nout++] = (obatch_t){.items = items, .n = (uint32_t)n, .backend = b};
  s->free_dev[b]--;
  return sim_actq_send(&s->q, b, best, s->nout, items, (uint32_t)n);
}

static int dispatch(ideal_t *s) {
  for (uint32_t b = 0; b < s->m->backends; b++)
    while (s->free_dev[b]) {
      int rc = dispatch_one(s, b);
      if (rc < 0) return rc;
      if (rc) return 0;
    }
  return 0;
}

static int ideal_admit(void *st, uint64_t now, uint32_t req, const sim_req_t *r) {
  (void)now;
  ideal_t *s = st;
  if (req >= s->cap) {
    size_t c = s->cap ? s->cap : 256;
    while (c <= req) c *= 2;
    uint32_t *pv = realloc(s->prev, c * sizeof(*pv));
    if (pv) s->prev = pv;
    uint32_t *nx = realloc(s->next, c * sizeof(*nx));
    if (nx) s->next = nx;
    uint8_t *wt = realloc(s->waiting, c);
    if (wt) s->waiting = wt;
    if (!pv || !nx || !wt) return -ENOMEM;
    s->cap = c;
  }
  for (size_t i = s->admitted; i <= req; i++) s->waiting[i] = 0;
  if (req + 1 > s->admitted) s->admitted = (size_t)req + 1;
  if (r->len == 0 || r->len > s->maxb) {
    return sim_actq_answer(&s->q, req, 413);
  }
  s->waiting[req] = 1;
  s->next[req] = NIL;
  s->prev[req] = s->tail[r->len];
  if (s->tail[r->len] != NIL) s->next[s->tail[r->len]] = req;
  else s->head[r->len] = req;
  s->tail[r->len] = req;
  give_count(s, r->len);
  return dispatch(s);
}

static int ideal_result(void *st, uint64_t now, const sim_result_t *res) {
  (void)now;
  ideal_t *s = st;
  if (res->batch == 0 || res->batch > s->nout || !s->out[res->batch - 1].items) return -EINVAL;
  obatch_t *o = &s->out[res->batch - 1];
  for (uint32_t i = 0; i < o->n; i++) {
    if (sim_actq_answer(&s->q, o->items[i], 200)) return -ENOMEM;
  }
  free(o->items);
  o->items = NULL;
  s->free_dev[o->backend]++;
  return dispatch(s);
}

static int ideal_tick(void *st, uint64_t now) {
  (void)now;
  ideal_t *s = st;
  return dispatch(s);
}

static int ideal_next(void *st, sim_action_t *a) {
  ideal_t *s = st;
  sim_actq_next(&s->q, a);
  return 0;
}

static void ideal_free(void *st) {
  ideal_t *s = st;
  if (!s) return;
  for (size_t i = 0; i < s->nout; i++) free(s->out[i].items);
  free(s->out);
  free(s->prev); free(s->next); free(s->waiting);
  free(s->head); free(s->tail); free(s->count);
  free(s->bits); free(s->sum);
  sim_actq_free(&s->q);
  free(s->picks); free(s->best); free(s->lanes);
  free(s);
}

int sim_ideal_new(sim_policy_t *p, const sim_model_t *m, const sim_req_t *reqs, int oldest) {
  ideal_t *s = calloc(1, sizeof(*s));
  if (!s) return -ENOMEM;
  s->m = m;
  s->reqs = reqs;
  s->oldest = oldest;
  uint32_t lanes = 1;
  uint64_t slots = 1;
  for (size_t i = 0; i < m->shapes.count; i++) {
    const lp_shape_t *sh = &m->shapes.shapes[i];
    if (sh->bucket > s->maxb) s->maxb = sh->bucket;
    if (sh->lanes > lanes) lanes = sh->lanes;
    if ((uint64_t)sh->lanes * sh->bucket > slots) slots = (uint64_t)sh->lanes * sh->bucket;
  }
  s->nwords = s->maxb / 64 + 1;
  s->nsum = s->nwords / 64 + 1;
  s->head = malloc((s->maxb + 1) * sizeof(uint32_t));
  s->tail = malloc((s->maxb + 1) * sizeof(uint32_t));
  s->count = calloc(s->maxb + 1, sizeof(uint32_t));
  s->bits = calloc(s->nwords, sizeof(uint64_t));
  s->sum = calloc(s->nsum, sizeof(uint64_t));
  s->picks = malloc(slots * sizeof(uint32_t));
  s->best = malloc(slots * sizeof(uint32_t));
  s->lanes = malloc(lanes * sizeof(uint32_t));
  if (!s->head || !s->tail || !s->count || !s->bits || !s->sum || !s->picks || !s->best || !s->lanes) {
    ideal_free(s);
    return -ENOMEM;
  }
  for (uint32_t l = 0; l <= s->maxb; l++) s->head[l] = s->tail[l] = NIL;
  for (uint32_t b = 0; b < m->backends && b < SIM_MAX_BACKENDS; b++) s->free_dev[b] = m->devices;
  memset(p, 0, sizeof(*p));
  p->name = oldest ? "ideal" : "ideal-any";
  p->st = s;
  p->admit = ideal_admit;
  p->result = ideal_result;
  p->tick = ideal_tick;
  p->next = ideal_next;
  p->free = ideal_free;
  p->lead_ns = 0;
  p->faultless = 1;
  return 0;
}
