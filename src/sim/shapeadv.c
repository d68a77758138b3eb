/* The latency-aware shape advisor (lanepack/shapeadv.h): a grid of candidate
 * shapes, a cost for each (measured or fitted), and a beam search over sets of
 * them scored by simulating the dispatch core at the target rate and under
 * overload; the best few are run again longer, and the devices the rate needs
 * are found by simulating more or fewer of them. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/rng.h"
#include "lanepack/shapeadv.h"
#include "lanepack/sim.h"

#define GRID_ROUND 32
#define MAX_DEVICES 64
#define MAX_EXHAUSTIVE 20000
#define CAP_TIE 0.01

/* A set in the search: which candidates (a bit each) and its figures. */
typedef struct node_s {
  uint64_t mask;
  lp_sadv_set_t set;
  int long_run;
} node_t;

typedef struct adv_s {
  const lp_sadv_params_t *p;
  lp_sadv_result_t *r;
  /* the kept lengths: values, cumulative weights, mean */
  uint32_t *len;
  double *cum;
  size_t nlen;
  double mean_len;
  /* arrivals at rate 1 (seconds) and their lengths, for the short and long runs */
  double *t_unit;
  uint32_t *t_len;
  size_t nunit;
  sim_req_t *reqs;      /* scratch: the arrivals scaled to a rate */
  size_t nshort, nlong;
  uint64_t cover;       /* candidates that take the longest length */
  size_t ncand;
  node_t *nodes;
  size_t nnodes, capnodes;
  double t0;
  int out_of_time;
} adv_t;

static int cmp_shape(const void *a, const void *b) {
  const lp_sadv_shape_t *x = a, *y = b;
  if (x->bucket != y->bucket) return x->bucket < y->bucket ? -1 : 1;
  return x->lanes < y->lanes ? -1 : x->lanes > y->lanes;
}

static uint64_t fit_cost(const lp_sadv_result_t *r, uint32_t lanes, uint32_t bucket) {
  double c = r->fixed_ns + r->per_slot_ns * (double)lanes * bucket;
  return c < 1000 ? 1000 : (uint64_t)c;
}

/* Least squares of cost on slots over the measured shapes. */
static int fit(const lp_sadv_params_t *p, lp_sadv_result_t *r) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < p->current.count; i++) {
    const lp_shape_t *s = &p->current.shapes[i];
    if (!s->lanes || !s->cost_ns) continue;
    double x = (double)s->lanes * s->bucket, y = (double)s->cost_ns;
    n++, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  r->fit_points = (size_t)n;
  if (n == 0) return -EINVAL;
  double det = n * sxx - sx * sx;
  if (n >= 2 && det > 0) {
    r->per_slot_ns = (n * sxy - sx * sy) / det;
    r->fixed_ns = (sy - r->per_slot_ns * sx) / n;
  }
  if (n < 2 || det <= 0 || r->fixed_ns < 0 || r->per_slot_ns <= 0) {
    /* one point, or a line that would make small shapes free: through 0 */
    r->fixed_ns = 0;
    r->per_slot_ns = sxy / sxx;
  }
  return 0;
}

static int add_cand(adv_t *a, uint32_t lanes, uint32_t bucket) {
  lp_sadv_result_t *r = a->r;
  if (!lanes || !bucket) return 0;
  for (size_t i = 0; i < a->ncand; i++)
    if (r->cand[i].lanes == lanes && r->cand[i].bucket == bucket) return 0;
  if (a->ncand == LP_SADV_MAX_CAND) return 0; /* the grid is full: the rest are left out */
  lp_sadv_shape_t *c = &r->cand[a->ncand++];
  c->lanes = lanes;
  c->bucket = bucket;
  int si = lp_bucket_set_find(&a->p->current, lanes, bucket);
  if (si >= 0 && a->p->current.shapes[si].cost_ns) {
    c->cost_ns = a->p->current.shapes[si].cost_ns;
    c->fitted = 0;
  } else {
    c->cost_ns = fit_cost(r, lanes, bucket);
    c->fitted = 1;
  }
  return 0;
}

static uint32_t quantile(const adv_t *a, double q) {
  double want = q * a->cum[a->nlen - 1];
  size_t lo = 0, hi = a->nlen - 1;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (a->cum[mid] < want) lo = mid + 1;
    else hi = mid;
  }
  return a->len[lo];
}

static void grid(adv_t *a, uint32_t maxb) {
  const lp_sadv_params_t *p = a->p;
  if (p->candidates.count) {
    for (size_t i = 0; i < p->candidates.count; i++)
      add_cand(a, p->candidates.shapes[i].lanes, p->candidates.shapes[i].bucket);
    return;
  }
  uint64_t budget = 0;
  for (size_t i = 0; i < p->current.count; i++) {
    const lp_shape_t *s = &p->current.shapes[i];
    if ((uint64_t)s->lanes * s->bucket > budget) budget = (uint64_t)s->lanes * s->bucket;
  }
  for (size_t i = 0; i < p->current.count; i++) add_cand(a, p->current.shapes[i].lanes, p->current.shapes[i].bucket);
  uint32_t b[40];
  size_t nb = 0;
  static const double qs[] = {1.0, 0.99, 0.9, 0.5};
  for (size_t i = 0; i < 4; i++) {
    uint32_t v = (quantile(a, qs[i]) + GRID_ROUND - 1) / GRID_ROUND * GRID_ROUND;
    b[nb++] = v > maxb ? maxb : v;
  }
  uint32_t lo = quantile(a, 0.1);
  for (uint64_t v = 16; nb < 40; v *= 2) {
    if (v >= lo) b[nb++] = v > maxb ? maxb : (uint32_t)v;
    if (v >= a->r->longest || v >= maxb) break;
  }
  /* the longest first, so a full grid keeps the shapes every set needs */
  for (size_t i = 0; i < nb; i++) {
    uint64_t lanes = budget / b[i];
    if (!lanes) continue;
    for (int h = 0; h < 3; h++) add_cand(a, (uint32_t)(lanes >> h), b[i]);
  }
}

typedef struct lw_s {
  uint32_t len;
  double w;
} lw_t;

static int cmp_lw(const void *a, const void *b) {
  const lw_t *x = a, *y = b;
  return x->len < y->len ? -1 : x->len > y->len;
}

/* The mix's lengths that fit, distinct and sorted, with cumulative weights. */
static int mix(adv_t *a, uint32_t maxb) {
  const lp_sadv_params_t *p = a->p;
  lw_t *lw = malloc(p->nlens * sizeof(*lw));
  uint32_t *v = malloc(p->nlens * sizeof(*v));
  double *cum = malloc(p->nlens * sizeof(*cum));
  if (!lw || !v || !cum) {
    free(lw), free(v), free(cum);
    return -ENOMEM;
  }
  for (size_t i = 0; i < p->nlens; i++) lw[i] = (lw_t){p->lens[i], p->weight ? p->weight[i] : 1};
  qsort(lw, p->nlens, sizeof(*lw), cmp_lw);
  size_t n = 0;
  double tot = 0, sum = 0;
  for (size_t i = 0; i < p->nlens; i++) {
    if (!(lw[i].w > 0)) continue;
    if (lw[i].len < 1 || lw[i].len > maxb) {
      a->r->dropped_weight += lw[i].w;
      continue;
    }
    tot += lw[i].w;
    sum += lw[i].w * lw[i].len;
    if (n && v[n - 1] == lw[i].len) {
      cum[n - 1] = tot;
    } else {
      v[n] = lw[i].len;
      cum[n++] = tot;
    }
  }
  free(lw);
  a->r->kept_weight = tot;
  if (!n) {
    free(v), free(cum);
    return -ENODATA;
  }
  a->len = v;
  a->cum = cum;
  a->nlen = n;
  a->mean_len = sum / tot;
  a->r->longest = v[n - 1];
  return 0;
}

static uint32_t draw(const adv_t *a, lp_rng_t *rng) {
  double u = lp_rng_double(rng) * a->cum[a->nlen - 1];
  size_t lo = 0, hi = a->nlen - 1;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (a->cum[mid] <= u) lo = mid + 1;
    else hi = mid;
  }
  return a->len[lo];
}

/* Poisson arrivals at rate 1 with lengths from the mix; every run scales them,
 * so all sets see the same traffic (their differences are theirs). */
static int arrivals(adv_t *a) {
  size_t n = a->nlong > a->nshort ? a->nlong : a->nshort;
  a->t_unit = malloc(n * sizeof(*a->t_unit));
  a->t_len = malloc(n * sizeof(*a->t_len));
  a->reqs = malloc(n * sizeof(*a->reqs));
  if (!a->t_unit || !a->t_len || !a->reqs) return -ENOMEM;
  lp_rng_t rng;
  lp_rng_seed(&rng, a->p->seed ^ 0xad71ce5eedull);
  double t = 0;
  for (size_t i = 0; i < n; i++) {
    t += -log(1 - lp_rng_double(&rng));
    a->t_unit[i] = t;
    a->t_len[i] = draw(a, &rng);
  }
  a->nunit = n;
  return 0;
}

static void scale(adv_t *a, size_t n, double rate) {
  for (size_t i = 0; i < n; i++)
    a->reqs[i] = (sim_req_t){.arrive_ns = (uint64_t)(a->t_unit[i] / rate * 1e9), .len = a->t_len[i]};
}

static void model_of(const adv_t *a, const lp_sadv_set_t *s, uint32_t backends, uint32_t devices,
                     sim_model_t *m) {
  memset(m, 0, sizeof(*m));
  lp_bucket_set_init(&m->shapes);
  for (size_t i = 0; i < s->n; i++) {
    int k = lp_bucket_set_add(&m->shapes, s->s[i].lanes, s->s[i].bucket);
    if (k >= 0) m->cost_ns[k] = s->s[i].cost_ns;
  }
  m->backends = backends;
  m->devices = devices;
  m->lead_ns = a->p->lead_ns;
}

static int simulate(adv_t *a, const sim_model_t *m, size_t n, double rate, uint64_t horizon,
                    sim_figures_t *f) {
  sim_policy_t pol;
  int rc = sim_core_new(&pol, m, a->reqs, 0);
  if (rc) return rc;
  scale(a, n, rate);
  if (horizon == 1) horizon = a->reqs[n - 1].arrive_ns;
  char err[160];
  rc = sim_run(m, &pol, a->reqs, n, a->p->seed, horizon, f, err, sizeof(err));
  pol.free(pol.st);
  return rc;
}

/* The p99 at the rate with devices per backend (backends as given). */
static int at_rate(adv_t *a, lp_sadv_set_t *s, uint32_t backends, uint32_t devices, size_t n,
                   sim_figures_t *f) {
  sim_model_t m;
  model_of(a, s, backends, devices, &m);
  return simulate(a, &m, n, a->p->rate, 0, f);
}

static int meets(const adv_t *a, const sim_figures_t *f) {
  return f->ok == f->requests && f->p99_ms <= a->p->p99_ms;
}

/* Simulates a set: p99 and fill at the target rate, capacity under overload
 * (offered at 1.5 x the fill-1 bound of its best shape). */
static int evaluate(adv_t *a, lp_sadv_set_t *s, size_t n) {
  const lp_sadv_params_t *p = a->p;
  uint32_t be = p->backends ? p->backends : 1, dev = p->devices ? p->devices : 1;
  sim_figures_t f;
  int rc = at_rate(a, s, be, dev, n, &f);
  if (rc) return rc;
  s->p99_ms = f.p99_ms;
  s->p50_ms = f.p50_ms;
  s->fill = f.fill;
  s->meets = meets(a, &f);
  double best = 0;
  for (size_t i = 0; i < s->n; i++) {
    double tps = (double)s->s[i].lanes * s->s[i].bucket / ((double)s->s[i].cost_ns / 1e9);
    if (tps > best) best = tps;
  }
  double bound = best * be * dev / a->mean_len;
  sim_model_t m;
  model_of(a, s, be, dev, &m);
  if ((rc = simulate(a, &m, n, 1.5 * bound, 1, &f))) return rc;
  s->capacity_rps = f.served_rps;
  a->r->evaluated++;
  return 0;
}

/* The fewest devices (one backend) whose p99 at the rate meets the target. */
static int devices_needed(adv_t *a, lp_sadv_set_t *s) {
  const lp_sadv_params_t *p = a->p;
  uint32_t maxd = p->max_devices ? p->max_devices : MAX_DEVICES;
  if (maxd > MAX_DEVICES) maxd = MAX_DEVICES;
  uint32_t have = (p->backends ? p->backends : 1) * (p->devices ? p->devices : 1);
  double per = s->capacity_rps > 0 ? s->capacity_rps / have : 0;
  uint32_t d = per > 0 ? (uint32_t)(p->rate / per) : 1;
  if (d < 1) d = 1;
  if (d > maxd) d = maxd;
  sim_figures_t f;
  int rc, ok_at = 0;
  for (;;) {
    if ((rc = at_rate(a, s, 1, d, a->nlong, &f))) return rc;
    if (meets(a, &f)) {
      ok_at = (int)d;
      if (d == 1) break;
      d--;
    } else {
      if (ok_at || d == maxd) break;
      d++;
    }
  }
  s->devices_needed = (uint32_t)ok_at;
  return 0;
}

/* a ranks before b. */
static int better(const lp_sadv_set_t *a, const lp_sadv_set_t *b) {
  if (a->meets != b->meets) return a->meets;
  if (!a->meets) return a->p99_ms < b->p99_ms;
  /* capacities within 1% are a tie (the simulation's noise): fewer shapes to
   * compile, then the lower p99, decide */
  double hi = a->capacity_rps > b->capacity_rps ? a->capacity_rps : b->capacity_rps;
  if (fabs(a->capacity_rps - b->capacity_rps) > CAP_TIE * hi) return a->capacity_rps > b->capacity_rps;
  if (a->n != b->n) return a->n < b->n;
  return a->p99_ms < b->p99_ms;
}

static void set_of(const adv_t *a, uint64_t mask, lp_sadv_set_t *s) {
  memset(s, 0, sizeof(*s));
  for (size_t i = 0; i < a->ncand; i++)
    if (mask >> i & 1) s->s[s->n++] = a->r->cand[i];
  qsort(s->s, s->n, sizeof(s->s[0]), cmp_shape);
}

static int out_of_time(adv_t *a) {
  const lp_sadv_params_t *p = a->p;
  if (!a->out_of_time && p->clock && p->budget_s > 0 && p->clock(p->clock_arg) - a->t0 > p->budget_s)
    a->out_of_time = 1;
  return a->out_of_time;
}

/* Simulates the set `mask` (short or long) unless it was; its node or NULL. */
static int visit(adv_t *a, uint64_t mask, int long_run, node_t **out) {
  *out = NULL;
  for (size_t i = 0; i < a->nnodes; i++)
    if (a->nodes[i].mask == mask) {
      if (long_run && !a->nodes[i].long_run) {
        int rc = evaluate(a, &a->nodes[i].set, a->nlong);
        if (rc) return rc;
        a->nodes[i].long_run = 1;
      }
      *out = &a->nodes[i];
      return 0;
    }
  if (a->nnodes == a->capnodes) {
    size_t c = a->capnodes ? a->capnodes * 2 : 256;
    node_t *v = realloc(a->nodes, c * sizeof(*v));
    if (!v) return -ENOMEM;
    a->nodes = v;
    a->capnodes = c;
  }
  node_t *nd = &a->nodes[a->nnodes];
  memset(nd, 0, sizeof(*nd));
  nd->mask = mask;
  nd->long_run = long_run;
  set_of(a, mask, &nd->set);
  int rc = evaluate(a, &nd->set, long_run ? a->nlong : a->nshort);
  if (rc) return rc;
  a->nnodes++;
  *out = nd;
  return 0;
}

static int popcount(uint64_t m) {
  int n = 0;
  for (; m; m &= m - 1) n++;
  return n;
}

/* Indices of the best `keep` nodes of `size` shapes (0: any) into best[]. */
static size_t top(const adv_t *a, int size, int long_only, size_t keep, size_t *best) {
  size_t nb = 0;
  for (size_t i = 0; i < a->nnodes; i++) {
    if (size && popcount(a->nodes[i].mask) != size) continue;
    if (long_only && !a->nodes[i].long_run) continue;
    size_t at = nb;
    while (at > 0 && better(&a->nodes[i].set, &a->nodes[best[at - 1]].set)) at--;
    if (at >= keep) continue;
    if (nb < keep) nb++;
    memmove(best + at + 1, best + at, (nb - 1 - at) * sizeof(*best));
    best[at] = i;
  }
  return nb;
}

static int beam_search(adv_t *a) {
  const lp_sadv_params_t *p = a->p;
  size_t beam = p->beam ? p->beam : 3, confirm = p->confirm ? p->confirm : 5;
  size_t best[64];
  if (beam > 64) beam = 64;
  if (confirm > 64) confirm = 64;
  node_t *nd;
  int rc;
  /* one set at least, however short the budget: there is always an answer */
  for (size_t i = 0; i < a->ncand && !(a->nnodes && out_of_time(a)); i++)
    if (a->cover >> i & 1 && (rc = visit(a, 1ull << i, 0, &nd))) return rc;
  for (uint32_t size = 2; size <= p->k && !out_of_time(a); size++) {
    size_t nb = top(a, (int)size - 1, 0, beam, best);
    uint64_t from[64];
    for (size_t j = 0; j < nb; j++) from[j] = a->nodes[best[j]].mask;
    for (size_t j = 0; j < nb && !out_of_time(a); j++)
      for (size_t i = 0; i < a->ncand && !out_of_time(a); i++)
        if (!(from[j] >> i & 1) && (rc = visit(a, from[j] | 1ull << i, 0, &nd))) return rc;
  }
  a->r->complete = !a->out_of_time;
  /* the best few of each size run long: a short run's noise may rank a set
   * of one size above a better one of another, and within a size put the best
   * fourth or fifth (the scheduler's policy moved capacities 1-3% apart: three
   * missed the exhaustive search's best set) */
  for (uint32_t size = 1; size <= p->k; size++) {
    size_t nb = top(a, (int)size, 0, confirm, best);
    uint64_t masks[64];
    for (size_t j = 0; j < nb; j++) masks[j] = a->nodes[best[j]].mask;
    for (size_t j = 0; j < nb; j++)
      if ((rc = visit(a, masks[j], 1, &nd))) return rc;
  }
  return 0;
}

static int exhaustive(adv_t *a) {
  const lp_sadv_params_t *p = a->p;
  /* how many sets: sum of C(n, 1..k) */
  double sets = 0, c = 1;
  for (uint32_t s = 1; s <= p->k && s <= a->ncand; s++) {
    c = c * (double)(a->ncand - s + 1) / s;
    sets += c;
  }
  if (sets > MAX_EXHAUSTIVE) return -E2BIG;
  /* every mask of at most k bits holding a covering candidate, by Gosper's walk per size */
  for (uint32_t s = 1; s <= p->k && s <= a->ncand; s++) {
    uint64_t m = (1ull << s) - 1, lim = a->ncand == 64 ? 0 : 1ull << a->ncand;
    while (m && (lim == 0 || m < lim)) {
      node_t *nd;
      int rc;
      if (m & a->cover && (rc = visit(a, m, 1, &nd))) return rc;
      uint64_t lo = m & -m, r = m + lo;
      if (!r) break;
      m = (((r ^ m) >> 2) / lo) | r;
    }
  }
  a->r->complete = 1;
  return 0;
}

int lp_sadv_run(const lp_sadv_params_t *p, lp_sadv_result_t *out, char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  if (p->k < 1 || p->k > LP_SADV_MAX_K) return snprintf(err, errlen, "k must be 1..%d", LP_SADV_MAX_K), -EINVAL;
  if (!(p->p99_ms > 0) || !isfinite(p->p99_ms)) return snprintf(err, errlen, "p99_ms must be > 0"), -EINVAL;
  /* at most 1e9 and at least 1e-3 requests/s: virtual nanoseconds stay in 64 bits */
  if (!(p->rate >= 1e-3 && p->rate <= 1e9))
    return snprintf(err, errlen, "the rate must be 0.001..1e9 requests/s"), -EINVAL;
  if (!p->nlens) return snprintf(err, errlen, "no lengths"), -ENODATA;
  if (p->backends > SIM_MAX_BACKENDS) return snprintf(err, errlen, "at most %d backends", SIM_MAX_BACKENDS), -EINVAL;
  adv_t a;
  memset(&a, 0, sizeof(a));
  a.p = p;
  a.r = out;
  a.nshort = p->short_requests ? p->short_requests : 1500;
  a.nlong = p->long_requests ? p->long_requests : 4 * a.nshort;
  if (p->clock) a.t0 = p->clock(p->clock_arg);
  uint32_t maxb = lp_bucket_set_max_len(&p->current);
  int rc = fit(p, out);
  if (rc) {
    snprintf(err, errlen, "no shape has a measured cost to fit the cost model from");
    return rc;
  }
  if ((rc = mix(&a, maxb))) {
    snprintf(err, errlen, rc == -ENODATA ? "no length fits the largest bucket (%u)" : "out of memory", maxb);
    goto done;
  }
  grid(&a, maxb);
  out->candidates = a.ncand;
  for (size_t i = 0; i < a.ncand; i++)
    if (out->cand[i].bucket >= out->longest) a.cover |= 1ull << i;
  if (!a.cover) {
    snprintf(err, errlen, "no candidate takes the longest length (%u)", out->longest);
    rc = -EINVAL;
    goto done;
  }
  if ((rc = arrivals(&a))) goto done;
  /* the current set, run long, measured costs where it has them */
  lp_sadv_set_t *cur = &out->current;
  uint64_t cur_mask = 0;
  int cur_in_grid = 1;
  for (size_t i = 0; i < p->current.count; i++) {
    const lp_shape_t *s = &p->current.shapes[i];
    if (!s->lanes) continue;
    lp_sadv_shape_t *c = &cur->s[cur->n++];
    c->lanes = s->lanes;
    c->bucket = s->bucket;
    c->cost_ns = s->cost_ns ? s->cost_ns : fit_cost(out, s->lanes, s->bucket);
    c->fitted = !s->cost_ns;
    size_t j = 0;
    while (j < a.ncand && (out->cand[j].lanes != s->lanes || out->cand[j].bucket != s->bucket)) j++;
    if (j < a.ncand) cur_mask |= 1ull << j;
    else cur_in_grid = 0;
  }
  qsort(cur->s, cur->n, sizeof(cur->s[0]), cmp_shape);
  if ((rc = evaluate(&a, cur, a.nlong))) goto done;
  if ((rc = p->exhaustive ? exhaustive(&a) : beam_search(&a))) {
    if (rc == -E2BIG) snprintf(err, errlen, "too many sets for an exhaustive search (at most %d)", MAX_EXHAUSTIVE);
    goto done;
  }
  size_t best;
  if (!top(&a, 0, 1, 1, &best)) {
    snprintf(err, errlen, "no set was simulated within the time budget");
    rc = -ETIME;
    goto done;
  }
  out->advice = a.nodes[best].set;
  /* the current set is a candidate set too when the grid holds it */
  if (cur_in_grid && (size_t)popcount(cur_mask) <= p->k && better(cur, &out->advice)) out->advice = *cur;
  if (!p->no_devices && ((rc = devices_needed(&a, cur)) || (rc = devices_needed(&a, &out->advice)))) goto done;
done:
  if (rc && rc != -EINVAL && rc != -ENODATA && rc != -E2BIG && rc != -ETIME)
    snprintf(err, errlen, "simulation failed: %s", strerror(-rc));
  free(a.len);
  free(a.cum);
  free(a.t_unit);
  free(a.t_len);
  free(a.reqs);
  free(a.nodes);
  return rc;
}

/* snprintf into b at *len, keeping count of what it would need */
static void put(char *b, size_t cap, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char *b, size_t cap, size_t *len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(*len < cap ? b + *len : NULL, *len < cap ? cap - *len : 0, fmt, ap);
  va_end(ap);
  if (n > 0) *len += (size_t)n;
}

static void json_set(char *b, size_t cap, size_t *len, const char *name, const lp_sadv_set_t *s, int devices) {
  put(b, cap, len, "\"%s\": {\"shapes\": [", name);
  for (size_t i = 0; i < s->n; i++)
    put(b, cap, len, "%s{\"lanes\": %u, \"bucket\": %u, \"cost_ms\": %.3f, \"cost\": \"%s\"}", i ? ", " : "",
        s->s[i].lanes, s->s[i].bucket, (double)s->s[i].cost_ns / 1e6, s->s[i].fitted ? "fitted" : "measured");
  put(b, cap, len, "], \"capacity_rps\": %.2f, \"p99_ms\": %.3f, \"p50_ms\": %.3f, \"fill\": %.4f, "
      "\"meets_target\": %s", s->capacity_rps, s->p99_ms, s->p50_ms, s->fill, s->meets ? "true" : "false");
  if (devices) put(b, cap, len, ", \"devices_needed\": %u", s->devices_needed);
  put(b, cap, len, "}");
}

size_t lp_sadv_json(const lp_sadv_params_t *p, const lp_sadv_result_t *r, char *buf, size_t cap) {
  size_t len = 0;
  if (cap) buf[0] = 0;
  put(buf, cap, &len, "{\"k\": %u, \"rate\": %.3f, \"p99_target_ms\": %.3f, \"backends\": %u, "
      "\"devices\": %u, \"longest\": %u, \"lengths_kept\": %.0f, \"lengths_dropped\": %.0f, "
      "\"cost_model\": {\"fixed_ms\": %.4f, \"per_slot_us\": %.6f, \"measured_shapes\": %zu}, "
      "\"candidates\": %zu, \"sets_simulated\": %zu, \"search_complete\": %s, ",
      p->k, p->rate, p->p99_ms, p->backends ? p->backends : 1, p->devices ? p->devices : 1, r->longest,
      r->kept_weight, r->dropped_weight, r->fixed_ns / 1e6, r->per_slot_ns / 1e3, r->fit_points, r->candidates,
      r->evaluated, r->complete ? "true" : "false");
  json_set(buf, cap, &len, "current", &r->current, !p->no_devices);
  put(buf, cap, &len, ", ");
  json_set(buf, cap, &len, "advice", &r->advice, !p->no_devices);
  put(buf, cap, &len, "}");
  return len;
}
