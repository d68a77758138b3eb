/* The old online dispatch policy (see baseline-sched.h): which shape to send next
 * and when, trying every compiled shape on the items waiting. */
#include "baseline-sched.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct lp_baseline_s {
  lp_baseline_config_t cfg;
  lp_packer_t *packer;  /* owned */
  /* scratch, owned, grown to the window size */
  uint32_t *perm;       /* permuted position -> queue index: due items first */
  uint32_t *lens;       /* lengths in permuted order */
  lp_place_t *trial;    /* one shape's placements, permuted order */
  lp_place_t *best;     /* best shape's placements, permuted order */
  lp_place_t *out;      /* best placements back in queue order */
  size_t cap;
};

lp_baseline_t *lp_baseline_new(const lp_baseline_config_t *cfg) {
  if (cfg == NULL || cfg->algo >= LP_ALGO_COUNT || !(cfg->fill_target >= 0.0) ||
      cfg->fill_target > 1.0)
    return NULL;
  lp_baseline_t *s = calloc(1, sizeof(*s));
  if (s == NULL) return NULL;
  s->cfg = *cfg;
  if (s->cfg.max_window == 0) s->cfg.max_window = 4096;
  s->packer = lp_packer_new();
  if (s->packer == NULL) {
    free(s);
    return NULL;
  }
  return s;
}

void lp_baseline_free(lp_baseline_t *s) {
  if (s == NULL) return;
  lp_packer_free(s->packer);
  free(s->perm); free(s->lens); free(s->trial); free(s->best); free(s->out);
  free(s);
}

static int reserve(lp_baseline_t *s, size_t n) {
  if (n <= s->cap) return 0;
  size_t c = s->cap ? s->cap : 64;
  while (c < n) c *= 2;
  uint32_t *perm = realloc(s->perm, c * sizeof(*perm));
  if (perm) s->perm = perm;
  uint32_t *lens = realloc(s->lens, c * sizeof(*lens));
  if (lens) s->lens = lens;
  lp_place_t *t = realloc(s->trial, c * sizeof(*t));
  if (t) s->trial = t;
  lp_place_t *b = realloc(s->best, c * sizeof(*b));
  if (b) s->best = b;
  lp_place_t *o = realloc(s->out, c * sizeof(*o));
  if (o) s->out = o;
  if (!perm || !lens || !t || !b || !o) return -ENOMEM;
  s->cap = c;
  return 0;
}

/* Why an item must go in the next batch, or NULL if it need not. */
static const char *due_reason(const lp_baseline_config_t *cfg, const lp_baseline_item_t *it,
                              uint64_t now, uint64_t cost) {
  if (it->deadline_ns && it->deadline_ns <= now + cost) return "deadline";
  if (now >= it->enqueued_ns && now - it->enqueued_ns >= cfg->max_wait_ns) return "max_wait";
  if (cfg->max_bypass && it->bypassed >= cfg->max_bypass) return "bypass";
  return NULL;
}

/* Largest expected batch cost among usable shapes: the margin a deadline needs. */
static uint64_t max_cost(const lp_bucket_set_t *set) {
  uint64_t c = 0;
  for (size_t i = 0; i < set->count; i++)
    if (set->shapes[i].state == LP_SHAPE_COMPILED && set->shapes[i].cost_ns > c)
      c = set->shapes[i].cost_ns;
  return c;
}

/* Items considered: the queue prefix whose tokens reach twice the largest
 * capacity (more cannot change the next rectangle much), capped by max_window. */
static size_t window(const lp_baseline_config_t *cfg, const lp_bucket_set_t *set,
                     const lp_baseline_item_t *items, size_t n) {
  uint64_t cap = 0, acc = 0;
  for (size_t i = 0; i < set->count; i++) {
    uint64_t c = (uint64_t)set->shapes[i].lanes * set->shapes[i].bucket;
    if (set->shapes[i].state == LP_SHAPE_COMPILED && c > cap) cap = c;
  }
  size_t m = 0;
  while (m < n && m < cfg->max_window && acc < 2 * cap) acc += items[m++].len;
  return m;
}

int lp_baseline_decide(lp_baseline_t *s, const lp_bucket_set_t *set, lp_baseline_item_t *items,
                       size_t n, uint64_t now, lp_baseline_plan_t *plan) {
  return lp_baseline_decide_mode(s, set, items, n, now, LP_BASELINE_RULES, plan);
}

int lp_baseline_decide_mode(lp_baseline_t *s, const lp_bucket_set_t *set, lp_baseline_item_t *items,
                            size_t n, uint64_t now, lp_baseline_mode_t mode, lp_baseline_plan_t *plan) {
  memset(plan, 0, sizeof(*plan));
  plan->shape = -1;
  if (n == 0) {
    plan->action = LP_BASELINE_IDLE;
    return 0;
  }
  int any = 0;
  for (size_t i = 0; i < set->count; i++) any |= set->shapes[i].state == LP_SHAPE_COMPILED;
  if (!any) {
    plan->action = LP_BASELINE_NO_SHAPE;
    return 0;
  }
  const lp_baseline_config_t *cfg = &s->cfg;
  uint64_t cost = max_cost(set);
  size_t m = window(cfg, set, items, n);
  if (reserve(s, m)) return -ENOMEM;

  /* Due items first, in queue order, then the rest in queue order. An item no
   * compiled shape here can hold is never due: it would force a dispatch on
   * every decision and turn batching off for everyone. */
  uint32_t maxb = 0;
  for (size_t i = 0; i < set->count; i++)
    if (set->shapes[i].state == LP_SHAPE_COMPILED && set->shapes[i].bucket > maxb) maxb = set->shapes[i].bucket;
  /* Under the device clock (NOW, FULL_ONLY) an item merely older than max_wait
   * is placed first but does not choose the shape: at saturation almost every
   * item is that old, and letting them pick would always pick the largest shape.
   * Deadlines and bypass still choose (bypass bounds how long an item the
   * cheaper shapes cannot hold waits). */
  int clocked = mode != LP_BASELINE_RULES;
  size_t npin = 0, nstrong = 0;
  const char *why = NULL;
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < m; i++) {
      const char *r = items[i].len <= maxb ? due_reason(cfg, &items[i], now, cost) : NULL;
      /* "max_wait" is soft when clocked, until the item has also sat out two of
       * the longest batches */
      int strong = r && !(clocked && r[0] == 'm' && now - items[i].enqueued_ns < cfg->max_wait_ns + 2 * cost);
      if (r && strong == (pass == 0)) {
        if (!why) why = r;
        s->perm[npin++] = (uint32_t)i;
        nstrong += strong;
      }
    }
  size_t k = npin;
  for (size_t i = 0; i < m; i++)
    if (items[i].len > maxb || !due_reason(cfg, &items[i], now, cost)) s->perm[k++] = (uint32_t)i;
  for (size_t j = 0; j < m; j++) s->lens[j] = items[s->perm[j]].len;

  /* Score each compiled shape: all due items placed first, then least device
   * time per real token when every shape's cost is known (else least padding
   * per real token, the same when cost follows the slots), then most tokens. */
  int by_cost = 1;
  for (size_t si = 0; si < set->count; si++)
    if (set->shapes[si].state == LP_SHAPE_COMPILED && set->shapes[si].cost_ns == 0) by_cost = 0;
  int best = -1;
  uint32_t best_pinned = 0;
  uint64_t best_real = 0;
  double best_waste = 0;
  uint32_t best_placed = 0;
  for (size_t si = 0; si < set->count; si++) {
    const lp_shape_t *sh = &set->shapes[si];
    if (sh->state != LP_SHAPE_COMPILED) continue;
    lp_pack_params_t prm = {.capacity = sh->bucket, .max_bins = sh->lanes,
                            .max_segments = cfg->max_segments, .n_pinned = (uint32_t)npin};
    long placed = lp_packer_pack(s->packer, cfg->algo, &prm, s->lens, m, s->trial, NULL);
    if (placed < 0) return (int)placed;
    if (placed == 0) continue;
    uint32_t pinned = 0;
    uint64_t real = 0;
    for (size_t j = 0; j < m; j++) {
      if (s->trial[j].bin < 0) continue;
      real += s->lens[j];
      if (j < nstrong) pinned++;
    }
    uint64_t slots = (uint64_t)sh->lanes * sh->bucket;
    double waste = by_cost ? (double)sh->cost_ns / (double)real : (double)(slots - real) / (double)real;
    int better = best < 0 || pinned > best_pinned ||
                 (pinned == best_pinned &&
                  (waste < best_waste || (waste == best_waste && real > best_real)));
    if (better) {
      best = (int)si;
      best_pinned = pinned;
      best_real = real;
      best_waste = waste;
      best_placed = (uint32_t)placed;
      lp_place_t *t = s->best;
      s->best = s->trial;
      s->trial = t;
    }
  }

  if (best < 0) {
    /* Nothing waiting fits a compiled shape (e.g. only a compiling one admits it):
     * wake when a rule could change that. */
    plan->action = LP_BASELINE_WAIT;
    plan->wake_ns = now + (cfg->max_wait_ns ? cfg->max_wait_ns : 1000000);
    return 0;
  }
  const lp_shape_t *sh = &set->shapes[best];
  double fill = (double)best_real / ((double)sh->lanes * sh->bucket);
  if (mode == LP_BASELINE_FULL_ONLY && fill < cfg->fill_target) {
    plan->action = LP_BASELINE_WAIT;
    plan->wake_ns = UINT64_MAX; /* the device clock says when */
    plan->fill = fill;
    return 0;
  }
  if (mode == LP_BASELINE_RULES && npin == 0 && fill < cfg->fill_target) {
    uint64_t wake = UINT64_MAX;
    for (size_t i = 0; i < m; i++) {
      uint64_t t = items[i].enqueued_ns + cfg->max_wait_ns;
      if (t < wake) wake = t;
      if (items[i].deadline_ns) {
        uint64_t d = items[i].deadline_ns > cost ? items[i].deadline_ns - cost : 0;
        if (d < wake) wake = d;
      }
    }
    plan->action = LP_BASELINE_WAIT;
    plan->wake_ns = wake > now ? wake : now;
    plan->fill = fill;
    return 0;
  }

  for (size_t j = 0; j < m; j++) s->out[s->perm[j]] = s->best[j];
  size_t last = 0;
  for (size_t i = 0; i < m; i++)
    if (s->out[i].bin >= 0) last = i;
  for (size_t i = 0; i < last; i++)
    if (s->out[i].bin < 0) items[i].bypassed++;
  plan->action = LP_BASELINE_DISPATCH;
  plan->shape = best;
  plan->n = m;
  plan->place = s->out;
  plan->placed = best_placed;
  plan->real_tokens = best_real;
  plan->fill = fill;
  plan->reason = npin ? why : "fill";
  return 0;
}
