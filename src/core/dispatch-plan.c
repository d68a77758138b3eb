/* When a batch leaves and what it holds. A device that is idle gets a batch at
 * once; while every device is busy the next rectangle keeps filling and leaves
 * when the first device is expected free, less the lead time (above high
 * utilization, one batch waits queued at the device instead). What goes: the
 * oldest sequence past its age bound and the most urgent deadline must go; a
 * fair share for requests behind a large one (past a rectangle of the window:
 * the others of its priority or above are sought past the window and packed
 * next, and their oldest past its bound takes turns with its oldest as the one
 * that must go); the starving (a batch's time past it) next, oldest first; the
 * rest of the window longest first; the shape is the one with the least device time per
 * real token among those that hold what must go (an untried shape scored
 * optimistically). A short sequence stays off a slow rectangle when another
 * device answers it sooner in a cheap one; on one device a long sequence that
 * must go is held while a full cheap batch pays better, up to a bound. */
#include "dispatch-internal.h"

#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* nodes looked at per level head when searching an aged sequence beyond the window */
#define HEAD_LOOK 8
/* the window walk skips at most this many times the window in ineligible nodes */
#define SKIP_FACTOR 4
/* past the age bound plus this many times the slowest shape's time, a sequence
 * is starving: packed before the rest, oldest first */
#define STARVE_BATCHES 1
/* ... unless more than this many of the largest rectangles wait: overload, where
 * longest first serves more (the starving order cost up to a tenth of the
 * capacity in lanepack-sim) */
#define STARVE_OVERLOAD 8
/* a first batch's time, when nothing is known of it, is the transfer timeout
 * divided by this */
#define FIRST_SPAN_DIV 30
/* the oldest that only a slow shape holds is held (see choose) at most its age
 * bound plus this many of that shape's times (1: little gained; 2: p99 at 90%
 * load on one device with three shapes 0.95x the ideal, was 1.24x) */
#define HOLD_BATCHES 2
/* ... while the batch it would be left out of is at least this full (a part-full
 * cheap batch is no saving: holding then only delayed it) */
#define HOLD_FILL 0.8
/* ... and while at most this many of the largest rectangles' tokens wait (in a
 * backlog the age order serves more: 0.986 of the ideal's capacity with it) */
#define HOLD_QUEUE 2
/* the window holds up to this many of the largest rectangles' tokens (with 2,
 * a backlog was packed from its oldest few dozen sequences only: 0.91-0.95 of
 * the ideal's tokens/s under overload with three shapes, 0.94-0.97 with 8) */
#define WINDOW_RECTS 8
/* a batch queued behind a busy device's (rank "queued") leaves only this full:
 * it would wait there anyway, so it waits here and fills (HOLD_FILL is the
 * other bar: a batch's share left out by a hold) */
#define QUEUED_FILL_TENTHS 9
/* a device's busy share: an average over about the last 1 / (1 - UTIL_KEEP) =
 * 10 batches, each counting whether it had to queue behind another */
#define UTIL_KEEP 0.9
/* a placed sequence's sort key (lane, then offset, then window index) packed
 * in 64 bits: index below 2^20 (the window's bound), offset below 2^24 (the
 * largest bucket, LP_MAX_BUCKET, is 2^20), lane above both */
#define KEY_OFFSET_SHIFT 20
#define KEY_LANE_SHIFT 44
/* a request (job) holding more than this many of the largest rectangles' tokens
 * of a window is a large one: the sequences of other requests of its priority
 * or above go before its own (one rectangle: a request that fits one batch is
 * served in age order as before; beside one of 2,048 texts, ~27 rectangles on
 * one device, a one-text request waited behind all of them, 86-195 ms) */
#define FAIR_HEAVY_RECTS 1
/* ... and those others are looked for past the window, and pinned ahead of the
 * rest, up to this many of the largest rectangles' tokens per decision (the large
 * request keeps the rest of each batch: with one, a light load beside it takes
 * what it needs and no more) */
#define FAIR_RECTS 1

static disp_seq_t *seq_of(lp_qnode_t *n) { return n ? container_of(n, disp_seq_t, q) : NULL; }

/* What backend b can run now: its compiled shapes, their costs, the longest
 * sequence and the largest rectangle they take. */
typedef struct view_s {
  uint32_t b;
  size_t nsh;
  int sh[LP_BUCKET_MAX_SHAPES];
  uint64_t cost[LP_BUCKET_MAX_SHAPES];
  uint64_t score[LP_BUCKET_MAX_SHAPES]; /* cost as the shape is scored: halved while untried */
  uint32_t maxb;
  uint64_t maxcap, maxcost, mincost;
  int others_up;      /* another backend is healthy (an avoided sequence can go there) */
  size_t ncls;        /* distinct buckets of those shapes, largest first */
  uint32_t cls[LP_BUCKET_MAX_SHAPES];
} view_t;

static void view_of(const lp_disp_t *d, uint32_t b, view_t *v) {
  memset(v, 0, sizeof(*v));
  v->b = b;
  for (size_t k = 0; k < d->shapes.count; k++) {
    if (d->be[b].state[k] != LP_SHAPE_COMPILED) continue;
    const lp_shape_t *s = &d->shapes.shapes[k];
    v->sh[v->nsh] = (int)k;
    v->cost[v->nsh] = lp__disp_cost(d, b, (int)k);
    /* untried (nothing learned, seeded or known elsewhere) while another shape
     * is: its cost is only scaled by slots from that one, which ties a full
     * smaller rectangle with a full larger one for ever (a fresh proxy with no
     * configured cost ran a backlog in 4x8192 only). Scored optimistically, it
     * is tried once the clock has a scale and then learned. */
    int untried = lp_devclock_cost(&d->be[b].clock, (int)k) == 0 && lp__disp_prior(d, b, (int)k) == 0;
    v->score[v->nsh] = untried && lp__disp_clock_knows(d, b) ? v->cost[v->nsh] / 2 : v->cost[v->nsh];
    if (v->cost[v->nsh] > v->maxcost) v->maxcost = v->cost[v->nsh];
    if (v->mincost == 0 || v->cost[v->nsh] < v->mincost) v->mincost = v->cost[v->nsh];
    v->nsh++;
    if (s->bucket > v->maxb) v->maxb = s->bucket;
    if ((uint64_t)s->lanes * s->bucket > v->maxcap) v->maxcap = (uint64_t)s->lanes * s->bucket;
  }
  for (uint32_t o = 0; o < d->cfg.nbackends; o++) v->others_up |= o != b && d->be[o].up;
  for (size_t i = 0; i < v->nsh; i++) {
    uint32_t bk = d->shapes.shapes[v->sh[i]].bucket;
    size_t j = 0;
    while (j < v->ncls && v->cls[j] > bk) j++;
    if (j < v->ncls && v->cls[j] == bk) continue;
    memmove(v->cls + j + 1, v->cls + j, (v->ncls - j) * sizeof(*v->cls));
    v->cls[j] = bk;
    v->ncls++;
  }
}

/* The device time of the cheapest shape on b that holds len (0 when none). */
static uint64_t cheapest_for(const lp_disp_t *d, const view_t *v, uint32_t len) {
  uint64_t c = 0;
  for (size_t i = 0; i < v->nsh; i++)
    if (d->shapes.shapes[v->sh[i]].bucket >= len && (c == 0 || v->cost[i] < c)) c = v->cost[i];
  return c;
}

static int eligible(const view_t *v, const disp_seq_t *s) {
  if (s->len > v->maxb) return 0;
  return !(s->avoid & (1u << v->b)) || !v->others_up;
}

/* Past its age bound: it has waited max_wait less the time its cheapest shape
 * takes (a long sequence, which only a large and slow shape holds, must start
 * sooner to be answered as soon). */
static int aged(const lp_disp_t *d, const view_t *v, const disp_seq_t *s, uint64_t now) {
  uint64_t c = cheapest_for(d, v, s->len);
  uint64_t bound = d->cfg.max_wait_ns > c ? d->cfg.max_wait_ns - c : 0;
  return now >= s->enq_ns && now - s->enq_ns >= bound;
}

static int reserve(lp_disp_t *d, size_t n) {
  if (n <= d->win_cap) return 0;
  size_t c = d->win_cap ? d->win_cap : 64;
  while (c < n) c *= 2;
  disp_seq_t **w = realloc(d->win, c * sizeof(*w));
  if (w) d->win = w;
  uint32_t *l = realloc(d->lens, c * sizeof(*l));
  if (l) d->lens = l;
  lp_place_t *t = realloc(d->trial, c * sizeof(*t));
  if (t) d->trial = t;
  lp_place_t *b = realloc(d->best, c * sizeof(*b));
  if (b) d->best = b;
  uint64_t *k = realloc(d->keys, c * sizeof(*k));
  if (k) d->keys = k;
  lp_disp_item_t *it = realloc(d->sitems, c * sizeof(*it));
  if (it) d->sitems = it;
  if (!w || !l || !t || !b || !k || !it) return -ENOMEM;
  d->win_cap = c;
  d->sitems_cap = c;
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The window is built in steps, each adding to d->win[0..*n) and marking what
 * it added with the decision's mark. Each returns 0 or -ENOMEM. */

/* Counts s into its job's share of the window (the decision's scratch on the
 * job); 1 when the job now holds more than FAIR_HEAVY_RECTS of the largest
 * rectangles' tokens there: a large request. */
static int job_count(disp_seq_t *s, uint32_t mark, const view_t *v) {
  disp_job_t *j = s->job;
  if (j->wmark != mark) {
    j->wmark = mark;
    j->wtok = 0;
  }
  j->wtok += s->len;
  return j->wtok > FAIR_HEAVY_RECTS * v->maxcap;
}

static int job_heavy(const disp_seq_t *s, uint32_t mark, const view_t *v) {
  return s->job->wmark == mark && s->job->wtok > FAIR_HEAVY_RECTS * v->maxcap;
}

/* The head of the queue in order (priority, then age), eligible ones only, up
 * to the window's bounds; *must: the oldest past its age bound among them.
 * When a large request fills the window, the walk goes on past it (within
 * the same skip bound) for the sequences of other requests of its priority or
 * above, up to FAIR_RECTS rectangles' tokens of them: a small request that came
 * after 2,048 sequences is in the window, and window_fair pins it. *fair_prio:
 * the most urgent large request's priority (INT_MIN: none, or age order). */
static int window_head(lp_disp_t *d, const view_t *v, uint64_t now, uint32_t mark, size_t *n,
                       disp_seq_t **must, int *fair_prio) {
  size_t limit = d->max_window, steps = 0, skip_limit = SKIP_FACTOR * (size_t)d->max_window;
  uint64_t tokens = 0;
  int fair = !d->cfg.age_order;
  *fair_prio = INT_MIN;
  if (reserve(d, 8)) return -ENOMEM;
  lp_qnode_t *q = lp_queue_first(&d->queue);
  for (; q && *n < limit && tokens < WINDOW_RECTS * v->maxcap && steps < skip_limit;
       q = lp_queue_next(&d->queue, q), steps++) {
    disp_seq_t *s = seq_of(q);
    if (!eligible(v, s)) continue;
    if (*n + 3 > d->win_cap && reserve(d, *n + 3)) return -ENOMEM;
    s->mark = mark;
    d->win[(*n)++] = s;
    tokens += s->len;
    if (aged(d, v, s, now) && (!*must || s->enq_ns < (*must)->enq_ns)) *must = s;
    if (fair && job_count(s, mark, v) && *fair_prio == INT_MIN) *fair_prio = s->job->priority;
  }
  /* past the window: others' sequences behind the large request */
  uint64_t extra = 0;
  for (; q && *fair_prio != INT_MIN && q->priority >= *fair_prio && *n < 2 * limit &&
         extra < FAIR_RECTS * v->maxcap && steps < skip_limit;
       q = lp_queue_next(&d->queue, q), steps++) {
    disp_seq_t *s = seq_of(q);
    if (!eligible(v, s) || job_heavy(s, mark, v)) continue;
    if (*n + 3 > d->win_cap && reserve(d, *n + 3)) return -ENOMEM;
    s->mark = mark;
    d->win[(*n)++] = s;
    extra += s->len;
    if (aged(d, v, s, now) && (!*must || s->enq_ns < (*must)->enq_ns)) *must = s;
    (void)job_count(s, mark, v);
  }
  return 0;
}

/* The oldest beyond the window, whatever its priority (age raises priority: a
 * flood of higher priority never starves a lower one): a level's head is its
 * oldest. */
static int window_oldest(lp_disp_t *d, const view_t *v, uint64_t now, uint32_t mark, size_t *n,
                         disp_seq_t **must) {
  if (reserve(d, *n + d->queue.nlevels + 2)) return -ENOMEM;
  for (size_t l = 0; l < d->queue.nlevels; l++) {
    lp_qnode_t *q = d->queue.levels[l].head;
    for (int k = 0; q && k < HEAD_LOOK; q = q->next, k++) {
      disp_seq_t *s = seq_of(q);
      if (s->mark == mark) break; /* this level was in the window */
      if (!eligible(v, s)) continue;
      if (aged(d, v, s, now) && (!*must || s->enq_ns < (*must)->enq_ns)) {
        s->mark = mark;
        d->win[(*n)++] = s;
        *must = s;
      }
      break;
    }
  }
  return 0;
}

/* The most urgent deadline: it must go now if after this batch (up to the
 * slowest shape's time) it could no longer make it. Room for it was reserved
 * by window_oldest. */
static disp_seq_t *window_urgent(lp_disp_t *d, const view_t *v, uint64_t now, uint32_t mark, size_t *n) {
  lp_theap_node_t *t = lp_theap_top(&d->deadlines);
  if (!t) return NULL;
  disp_job_t *j = container_of(t, disp_job_t, dl);
  for (uint32_t i = 0; i < j->nseq; i++) {
    disp_seq_t *s = &j->seqs[i];
    if (s->state != SEQ_QUEUED || !eligible(v, s)) continue;
    uint64_t need = lp_devclock_lead(&d->be[v->b].clock) + cheapest_for(d, v, s->len) + v->maxcost;
    if (j->deadline_ns > now + need) return NULL;
    if (s->mark != mark) {
      s->mark = mark;
      d->win[(*n)++] = s;
    }
    return s;
  }
  return NULL;
}

/* At most one suspect set per batch (the one of what must go, else the
 * first): the pinned (deadline, then age) first, then the rest of that set or
 * of none in queue order, alone-failed ones out. *k: how many unpinned; the
 * pinned count is returned. */
static size_t window_pin(lp_disp_t *d, size_t n, disp_seq_t *urgent, disp_seq_t *must, size_t *k,
                         int *by_age) {
  uint32_t group = urgent && urgent->group ? urgent->group : must && must->group ? must->group : 0;
  for (size_t i = 0; i < n && !group; i++) group = d->win[i]->alone ? 0 : d->win[i]->group;
  if (urgent && urgent->group && urgent->group != group) urgent = NULL;
  if (must && must->group && must->group != group) must = NULL;
  size_t p = 0;
  disp_seq_t *pins[2] = {urgent, must != urgent ? must : NULL};
  for (int i = 0; i < 2; i++)
    if (pins[i] && !pins[i]->alone) p++;
  /* shift the rest right by p, skipping pins and mismatched groups, in place:
   * first collect the rest at the front, then move it behind the pins */
  *k = 0;
  for (size_t i = 0; i < n; i++) {
    disp_seq_t *s = d->win[i];
    if (s == pins[0] || s == pins[1] || s->alone || (s->group && s->group != group)) continue;
    d->win[(*k)++] = s;
  }
  memmove(d->win + p, d->win, *k * sizeof(*d->win));
  p = 0;
  for (int i = 0; i < 2; i++)
    if (pins[i] && !pins[i]->alone) d->win[p++] = pins[i];
  *by_age = p == 1 && must && d->win[0] == must && must != urgent;
  return p;
}

/* The starving (waited past the age bound plus STARVE_BATCHES of the slowest
 * shape's time: a backlog after a hiccup of the host or the device) come
 * right after the p pinned, by the bucket they need, largest first, then
 * oldest first; a shape packs those that need its bucket or a larger one
 * before the rest (longest first alone left a short one behind every longer
 * newcomer until it was the oldest of all, one forced per batch: the p99 of a
 * backlog). Those a smaller bucket holds stay unpinned in a larger shape, which
 * keeps long sequences in the large shape and short ones in the cheap one
 * (capacity under overload). They do not choose the shape. Not under overload
 * (STARVE_OVERLOAD). starve_ge[c]: how many need v->cls[c] or a larger bucket.
 * Ahead of the starving, when a large request is in the window (fair_prio not
 * INT_MIN): the fair share, the sequences of the other requests of its priority
 * or above, in queue order, up to FAIR_RECTS of the largest rectangles' tokens;
 * starve_ge counts them in every class (the age order put all of a large
 * request's sequences before a newer small request's). */
static void window_starving(lp_disp_t *d, const view_t *v, uint64_t now, size_t p, size_t k, size_t *starve_ge,
                            uint32_t mark, int fair_prio) {
  uint64_t starve = d->cfg.max_wait_ns + STARVE_BATCHES * v->maxcost;
  if (d->st.queued_tokens > (uint64_t)STARVE_OVERLOAD * v->maxcap) starve = UINT64_MAX;
  for (size_t i = 0; i < k; i++) d->keys[i] = (uint64_t)(uintptr_t)d->win[p + i]; /* parked */
  size_t ns = 0, r = 0;
  uint64_t fair = 0;
  for (size_t i = 0; fair_prio != INT_MIN && i < k; i++) {
    disp_seq_t *s = (disp_seq_t *)(uintptr_t)d->keys[i];
    if (s->job->priority < fair_prio || job_heavy(s, mark, v) || fair + s->len > FAIR_RECTS * v->maxcap) continue;
    fair += s->len;
    d->win[p + ns++] = s;
    d->keys[i] = 0; /* taken */
  }
  for (size_t c = 0; c < v->ncls; c++) {
    uint32_t lo = c + 1 < v->ncls ? v->cls[c + 1] : 0;
    for (size_t i = 0; i < k; i++) {
      disp_seq_t *s = (disp_seq_t *)(uintptr_t)d->keys[i];
      if (s && s->len > lo && s->len <= v->cls[c] && now >= s->enq_ns && now - s->enq_ns >= starve) d->win[p + ns++] = s;
    }
    starve_ge[c] = ns;
  }
  for (size_t i = 0; i < k; i++) {
    disp_seq_t *s = (disp_seq_t *)(uintptr_t)d->keys[i];
    if (s && (!(now >= s->enq_ns && now - s->enq_ns >= starve) || s->len > v->cls[0])) d->win[p + ns + r++] = s;
  }
}

/* Builds the window for backend b into d->win: must-go sequences first (*npin of
 * them), then the starving by bucket class (starve_ge[c]: how many need v->cls[c]
 * or a larger bucket), then the rest in queue order. Returns how many, or -ENOMEM. */
static long window(lp_disp_t *d, const view_t *v, uint64_t now, size_t *npin, size_t *starve_ge, int *by_age) {
  uint32_t mark = ++d->decision;
  if (mark == 0) mark = ++d->decision;
  size_t n = 0, k = 0;
  disp_seq_t *must = NULL;
  int fair_prio;
  if (window_head(d, v, now, mark, &n, &must, &fair_prio) || window_oldest(d, v, now, mark, &n, &must))
    return -ENOMEM;
  /* the oldest past its bound is a large request's: it and the others' oldest past
   * theirs take turns (a long one of a small request, which only a slow shape
   * holds, waited for the whole large request: the slow shape was never chosen) */
  d->fair_pick = 0;
  if (fair_prio != INT_MIN && must && job_heavy(must, mark, v)) {
    disp_seq_t *other = NULL;
    for (size_t i = 0; i < n; i++) {
      disp_seq_t *s = d->win[i];
      if (s->job->priority < fair_prio || job_heavy(s, mark, v) || (other && s->enq_ns >= other->enq_ns)) continue;
      if (aged(d, v, s, now)) other = s;
    }
    d->fair_pick = other != NULL;
    if (other && d->fair_turn) must = other;
  }
  disp_seq_t *urgent = window_urgent(d, v, now, mark, &n);
  /* a sequence that failed alone goes alone: when it leads, or must go */
  disp_seq_t *solo = must ? (must->alone ? must : NULL) : n && d->win[0]->alone ? d->win[0] : NULL;
  memset(starve_ge, 0, LP_BUCKET_MAX_SHAPES * sizeof(*starve_ge));
  *by_age = 0;
  if (solo) {
    d->win[0] = solo;
    *npin = 1;
    return 1;
  }
  size_t p = window_pin(d, n, urgent, must, &k, by_age);
  *npin = p;
  window_starving(d, v, now, p, k, starve_ge, mark, fair_prio);
  return (long)(k + p);
}

/* When the first device other than device k of backend b can start a batch
 * (now when one is idle; UINT64_MAX when there is none or none is timed). */
static uint64_t other_free(const lp_disp_t *d, uint32_t b, uint32_t k, uint64_t now) {
  uint64_t t = UINT64_MAX;
  for (uint32_t o = 0; o < d->cfg.nbackends; o++) {
    const disp_backend_t *be = &d->be[o];
    if (!be->up) continue;
    for (uint32_t x = 0; x < be->clock.devices; x++) {
      if (o == b && x == k) continue;
      uint32_t live = be->dev[x].n - be->dev[x].lost;
      uint64_t f = live ? be->clock.dev[x].free_ns : now;
      if (live && f == 0) continue;
      if (f < now) f = now;
      if (f < t) t = f;
    }
  }
  return t;
}

/* Sequences of the window a shape of cost `cost` leaves to a cheaper shape on
 * another device: a short sequence that rides a slow rectangle (because a long
 * one must go) is answered later than it would be by a cheap batch on a device
 * that frees before this one would finish (with four devices, up to a third of
 * the short sequences rode the long ones' 20 ms batches: the p99). At most one
 * such cheaper batch's worth is held out, oldest first; the pinned and the
 * starving are never held out. One device, or none timed: nothing is. Marks
 * them in d->lens with UINT32_MAX (no lane holds that). */
static void hold_out(lp_disp_t *d, const view_t *v, size_t from, size_t n, uint64_t cost, uint64_t other,
                     uint64_t here) {
  if (other == UINT64_MAX || d->draining || other >= here + cost) return;
  uint64_t held = 0;
  for (size_t j = from; j < n; j++) {
    uint32_t len = d->lens[j];
    uint64_t alt = 0, cap = 0;
    for (size_t i = 0; i < v->nsh; i++) {
      const lp_shape_t *sh = &d->shapes.shapes[v->sh[i]];
      if (sh->bucket >= len && v->cost[i] < cost && (alt == 0 || v->cost[i] < alt)) {
        alt = v->cost[i];
        cap = (uint64_t)sh->lanes * sh->bucket;
      }
    }
    if (alt == 0 || other + alt >= here + cost || held + len > cap) continue;
    held += len;
    d->lens[j] = UINT32_MAX;
  }
}

/* Packs the window into each shape of b and keeps the one with the least device
 * time per real token among those that hold every pinned sequence (else the
 * first pinned). Returns the shape index or -1; d->best gets its placements. */
static int choose_once(lp_disp_t *d, const view_t *v, uint32_t k, size_t n, size_t npin, const size_t *starve_ge,
                       uint64_t now, uint64_t *real_out, double *score_out) {
  int best = -1, best_level = -1;
  double best_score = 0;
  uint64_t best_real = 0;
  /* when a batch sent now starts here (after the lead time, or after what runs
   * on this device), and the earliest another device could start one */
  const disp_backend_t *be = &d->be[v->b];
  uint64_t lead = lp_devclock_lead(&be->clock), here = now + lead;
  if (be->dev[k].n > be->dev[k].lost && be->clock.dev[k].free_ns > here) here = be->clock.dev[k].free_ns;
  uint64_t other = other_free(d, v->b, k, now);
  if (other != UINT64_MAX && other < now + lead) other = now + lead;
  size_t fixed = npin + (v->ncls ? starve_ge[v->ncls - 1] : 0);
  for (size_t i = 0; i < v->nsh; i++) {
    const lp_shape_t *sh = &d->shapes.shapes[v->sh[i]];
    for (size_t j = 0; j < n; j++) d->lens[j] = d->win[j]->len;
    if (npin && d->lens[0] > sh->bucket) continue;
    hold_out(d, v, fixed, n, v->cost[i], other, here);
    size_t c = 0;
    while (c + 1 < v->ncls && v->cls[c] > sh->bucket) c++;
    lp_pack_params_t prm = {.capacity = sh->bucket, .max_bins = sh->lanes,
                            .max_segments = d->cfg.max_segments, .n_pinned = (uint32_t)(npin + starve_ge[c])};
    long placed = lp_packer_pack(d->packer, d->cfg.packer, &prm, d->lens, n, d->trial, NULL);
    if (placed < 0) return (int)placed;
    if (placed == 0) continue;
    uint64_t real = 0;
    int level = 2;
    for (size_t j = 0; j < n; j++) {
      if (d->trial[j].bin >= 0 && d->lens[j] == UINT32_MAX) d->trial[j].bin = -1;
      if (d->trial[j].bin < 0) {
        if (j < npin) level = j == 0 ? 0 : level < 1 ? level : 1;
        continue;
      }
      real += d->lens[j];
    }
    double score = (double)v->score[i] / (double)real;
    int better = best < 0 || level > best_level ||
                 (level == best_level && (score < best_score || (score == best_score && real > best_real)));
    if (better) {
      best = v->sh[i];
      best_level = level;
      best_score = score;
      best_real = real;
      lp_place_t *t = d->best;
      d->best = d->trial;
      d->trial = t;
    }
  }
  *real_out = best_real;
  *score_out = best_score;
  return best;
}

/* The shape and placements of the next batch. The oldest sequence past its age
 * bound must go, but one that only a slower shape than the cheapest holds (a
 * long one) is held while a full batch without it costs less device time per
 * real token than the slow rectangle it forces, up to its age bound plus
 * HOLD_BATCHES of that rectangle's time: a lone long changelog entry sent a 4x8192 of short
 * ones each time (20 ms for what 8x2048 runs in 16), and at 80-90% load on one
 * device that cost more than a tenth of the chip. Long ones gather instead, and
 * a batch of several pays. Only on a backend's one timed device (with several,
 * hold_out keeps the short ones off the slow rectangle) and not in a backlog. */
static int choose(lp_disp_t *d, const view_t *v, uint32_t k, size_t n, size_t npin, int by_age,
                  const size_t *starve_ge, uint64_t now, uint64_t *real_out) {
  double score = 0, free_score = 0;
  int shape = choose_once(d, v, k, n, npin, starve_ge, now, real_out, &score);
  if (shape < 0 || !by_age || d->draining) return shape;
  const disp_seq_t *s = d->win[0];
  uint64_t c = cheapest_for(d, v, s->len);
  uint64_t bound = (d->cfg.max_wait_ns > c ? d->cfg.max_wait_ns - c : 0) + HOLD_BATCHES * c;
  if (c <= v->mincost || now < s->enq_ns || now - s->enq_ns >= bound) return shape;
  if (other_free(d, v->b, k, now) != UINT64_MAX) return shape; /* another device: hold_out's part */
  if (d->st.queued_tokens > (uint64_t)HOLD_QUEUE * v->maxcap) return shape; /* a backlog: age order */
  uint64_t real = 0;
  int other = choose_once(d, v, k, n, 0, starve_ge, now, &real, &free_score);
  const lp_shape_t *osh = other >= 0 ? &d->shapes.shapes[other] : NULL;
  int full = osh && (double)real >= HOLD_FILL * (double)osh->lanes * osh->bucket;
  if (other < 0 || !full || free_score >= score) return choose_once(d, v, k, n, npin, starve_ge, now, real_out, &score);
  *real_out = real;
  return other;
}

/* Sends the window's placed sequences as one batch to device k of backend b. */
static int send(lp_disp_t *d, const view_t *v, uint32_t k, int shape, size_t n, uint64_t real,
                const char *reason, uint64_t now) {
  disp_backend_t *be = &d->be[v->b];
  disp_dev_t *dv = &be->dev[k];
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (d->best[i].bin >= 0)
      d->keys[m++] = (uint64_t)d->best[i].bin << KEY_LANE_SHIFT | (uint64_t)d->best[i].offset << KEY_OFFSET_SHIFT | i;
  qsort(d->keys, m, sizeof(*d->keys), cmp_u64);
  disp_batch_t *bt = lp__disp_batch_get(d, m);
  if (!bt) return -ENOMEM;
  bt->id = ++d->next_batch_id;
  if (lp__disp_map_put(&d->batches, bt->id, bt)) {
    free(bt->seqs);
    free(bt);
    return -ENOMEM;
  }
  bt->backend = v->b;
  bt->device = k;
  bt->shape = shape;
  bt->sent_ns = now;
  bt->real = real;
  uint32_t copies = 0;
  for (size_t i = 0; i < m; i++) {
    size_t w = d->keys[i] & 0xfffff;
    disp_seq_t *s = d->win[w];
    bt->seqs[i] = s;
    s->inflight++;
    s->job->refs++;
    if (s->copies + s->free_sends > 0) copies++;
    if (s->free_next) s->free_sends++;
    else s->copies++;
    s->free_next = 0;
    s->batch_id = bt->id;
    s->sent_ns = now;
    lp__disp_unqueue(d, s, SEQ_OUT);
    d->sitems[i] = (lp_disp_item_t){.job_id = s->job->id, .seq = s->idx, .lane = (uint32_t)d->best[w].bin,
                                    .offset = d->best[w].offset, .len = s->len};
  }
  bt->n = (uint32_t)m;
  /* a backend whose clock nothing has taught yet has no expected answer to be
   * late against (no stall) nor a time its device frees (free_ns 0: the
   * answer reschedules) */
  int known = lp__disp_clock_knows(d, v->b);
  /* the device: it runs after what is ahead of it, or after the lead time */
  uint64_t lead = lp_devclock_lead(&be->clock), cost = lp__disp_cost(d, v->b, shape);
  lp_device_t *cd = &be->clock.dev[k];
  bt->behind = dv->n > dv->lost;
  uint64_t start = now + lead;
  if (bt->behind && cd->free_ns > start) start = cd->free_ns;
  bt->start_ns = start;
  bt->expect_ns = start + cost;
  dv->util = UTIL_KEEP * dv->util + (bt->behind ? 1 - UTIL_KEEP : 0.0);
  bt->dprev = dv->last;
  bt->dnext = NULL;
  if (dv->last) dv->last->dnext = bt;
  else dv->first = bt;
  dv->last = bt;
  dv->n++;
  cd->batches = dv->n - dv->lost;
  cd->free_ns = known ? bt->expect_ns : 0;
  if (d->cfg.stall_factor > 0) {
    uint64_t span = bt->expect_ns - now;
    /* no clock yet: what another backend knows of the shape stands for its
     * time, else a thirtieth of the transfer timeout (1 s of 30: room for a
     * cold device's first batch) and at least stall_min. A first batch that
     * stalled waited out the whole transfer timeout, and the device with it. */
    if (!known) {
      span = lead + lp__disp_prior(d, v->b, shape);
      if (span == 0) span = d->cfg.backend_timeout_ns / FIRST_SPAN_DIV;
      if (span < d->cfg.stall_min_ns) span = d->cfg.stall_min_ns;
      if (span == 0) span = 1;
    }
    (void)lp_theap_set(&d->stalls, &bt->stall, now + lp__disp_stall_wait(d, span)); /* without it: no hedge, still answered */
  }
  const lp_shape_t *sh = &d->shapes.shapes[shape];
  uint64_t slots = (uint64_t)sh->lanes * sh->bucket;
  d->st.batches++;
  d->st.inflight++;
  d->st.real_tokens += real;
  d->st.pad_tokens += slots - real;
  d->st.batches_by_shape[shape]++;
  d->st.real_by_shape[shape] += real;
  lp_disp_action_t a = {.kind = LP_DISP_ACT_SEND};
  a.send.batch_id = bt->id;
  a.send.backend = v->b;
  a.send.device = k;
  a.send.shape = shape;
  a.send.lanes = sh->lanes;
  a.send.bucket = sh->bucket;
  a.send.n = m;
  a.send.real_tokens = real;
  a.send.expect_ns = known ? bt->expect_ns : 0;
  a.send.copies = copies;
  a.send.reason = reason;
  return lp__disp_push(d, &a, d->sitems, m);
}

/* Plans and sends one batch for device k of backend b. Returns 1 when sent, 0
 * when nothing on the queue can go there (or, for a batch queued ahead, not a
 * full rectangle's worth), or -ENOMEM. */
static int plan(lp_disp_t *d, uint32_t b, uint32_t k, int rank, uint64_t now) {
  view_t v;
  view_of(d, b, &v);
  if (v.nsh == 0) return 0;
  size_t npin = 0, starve_ge[LP_BUCKET_MAX_SHAPES];
  int by_age = 0;
  long n = window(d, &v, now, &npin, starve_ge, &by_age);
  if (n <= 0) return (int)n;
  uint64_t real = 0;
  int shape = choose(d, &v, k, (size_t)n, npin, by_age, starve_ge, now, &real);
  if (shape < 0) return shape == -1 ? 0 : shape;
  if (rank == 2) {
    const lp_shape_t *sh = &d->shapes.shapes[shape];
    if (real < (uint64_t)sh->lanes * sh->bucket * QUEUED_FILL_TENTHS / 10) return 0; /* let it fill until just in time */
  }
  static const char *const reasons[] = {"idle", "just_in_time", "queued", "probe"};
  int rc = send(d, &v, k, shape, (size_t)n, real, d->draining && rank < 3 ? "drain" : reasons[rank], now);
  if (rc == 0 && rank == 3) d->be[b].probing = 1;
  if (rc == 0 && d->fair_pick) d->fair_turn = !d->fair_turn;
  if (rc == 0) d->rr = (b + 1) % d->cfg.nbackends;
  return rc ? rc : 1;
}

int lp__disp_schedule(lp_disp_t *d, uint64_t now, uint64_t *wake) {
  uint32_t tried = 0;
  while (d->queue.n) {
    int bb = -1, bk = -1, brank = 4;
    uint64_t bfree = 0, bleave = 0;
    /* backends from the one after the last that got a batch: among equals,
     * round robin */
    for (uint32_t i = 0; i < d->cfg.nbackends; i++) {
      uint32_t b = (d->rr + i) % d->cfg.nbackends;
      disp_backend_t *be = &d->be[b];
      if (tried & (1u << b)) continue;
      int probe = 0;
      if (!be->up) {
        /* down here: one probe batch when its time comes, to an idle device */
        if (!be->core_down || be->probing) continue;
        if (now < be->probe_at) {
          if (be->probe_at < *wake) *wake = be->probe_at;
          continue;
        }
        probe = 1;
      }
      uint64_t lead = lp_devclock_lead(&be->clock);
      for (uint32_t k = 0; k < be->clock.devices; k++) {
        disp_dev_t *dv = &be->dev[k];
        /* batches presumed lost hold it up no more, unless it stalled twice running */
        uint32_t live = dv->n - dv->lost;
        if (live >= 1 + d->max_queued) continue;
        if (dv->suspect >= DISP_SUSPECT_STALLS && now < dv->probe_at) {
          if (dv->probe_at < *wake) *wake = dv->probe_at;
          continue;
        }
        uint64_t free_at = live ? be->clock.dev[k].free_ns : 0;
        if (live && free_at == 0 && !d->draining) continue; /* no clock yet: its answer reschedules */
        uint64_t leave = free_at > lead ? free_at - lead : 0;
        int rank;
        if (probe && live) continue;
        if (live == 0) rank = probe ? 3 : 0;
        else if (d->draining || leave <= now) rank = 1;
        else if (dv->util > d->cfg.high_util) rank = 2;
        else {
          if (leave < *wake) *wake = leave;
          continue;
        }
        /* the device that can start first; among equals, one with nothing
         * stalled, then the backend with fewer failures in a row */
        int better = bb < 0 || rank < brank || (rank == brank && free_at < bfree);
        if (!better && bb >= 0 && rank == brank && free_at == bfree) {
          uint32_t st = d->be[bb].dev[bk].suspect;
          better = dv->suspect < st || (dv->suspect == st && be->fails_in_row < d->be[bb].fails_in_row);
        }
        if (better) {
          bb = (int)b;
          bk = (int)k;
          brank = rank;
          bfree = free_at;
          bleave = leave;
        }
      }
    }
    if (bb < 0) return 0;
    int rc = plan(d, (uint32_t)bb, (uint32_t)bk, brank, now);
    if (rc < 0) return rc;
    if (rc == 0) {
      tried |= 1u << bb;
      if (brank == 2 && bleave < *wake) *wake = bleave;
    }
  }
  return 0;
}
