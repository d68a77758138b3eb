/* lanepack-sim: replays traffic at virtual time through lanepack's dispatch
 * policy against modelled devices and prints, per load, its latency,
 * utilization, fill and served rate next to the ideal policy's on the same
 * arrivals. This file is the command line and the report. */
#include <errno.h>

#ifndef LP_VERSION
#define LP_VERSION "0.1.0"
#endif

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lanepack/dispatch.h"
#include "lanepack/lengths.h"
#include "lanepack/sim.h"
#include "simadvise.h"

#define SIM_STR_(x) #x
#define SIM_STR(x) SIM_STR_(x)
#define LP_DISP_MAX_BACKENDS_S SIM_STR(LP_DISP_MAX_BACKENDS)

#define MAX_LOADS 64

typedef struct opts_s {
  const char *lengths, *trace, *shapes, *policy;
  const char *compare;  /* a second policy run on the same arrivals, or NULL */
  char cost_spec[LP_BUCKET_MAX_SHAPES][64];
  size_t ncost;
  double loads[MAX_LOADS];
  size_t nloads;
  double rate, duration, capacity_s;
  uint64_t seed;
  size_t requests;
  int json, no_ideal;
  uint32_t big_n;         /* --big N,MS: a request of N sequences every MS ms; 0 = none */
  double big_every_ms;
  sim_model_t model;
  sim_advise_opts_t adv;  /* --advise */
} opts_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: lanepack-sim (--lengths FILE|MIX | --trace FILE) --shapes 4x8192,8x2048\n"
          "         --cost-ms SHAPE=MS... (--load 0.2,0.5,0.8 | --rate R) [--duration S]\n"
          "         [--requests N] [--devices N] [--backends N] [--lead-ms MS] [--jitter F]\n"
          "         [--fail-rate P] [--stall-rate P] [--reset-rate P] [--slow-rate P --slow-ms MS]\n"
          "         [--slow-error-rate P [--slow-error-ms MS]] [--policy core|core-age|legacy]\n"
          "         [--compare core|core-age|legacy] [--big N,MS] [--check]\n"
          "         [--capacity-s S] [--no-ideal] [--seed N] [--json] [--version]\n"
          "       lanepack-sim --lengths FILE|MIX --shapes ... --cost-ms ... --advise K\n"
          "         --p99-ms X --rate R [--devices N] [--candidates SHAPES]\n"
          "         [--advise-budget-s S] [--advise-requests N] [--advise-exhaustive]\n"
          "         [--seed N] [--json]\n"
          "Replays Poisson arrivals (or a trace: ARRIVAL_MS LENGTH [PRIORITY [DEADLINE_MS]]\n"
          "per line) at virtual time through the policy and the ideal; --load is a fraction\n"
          "of the ideal's capacity, measured first on the same lengths. --big adds a request\n"
          "of N sequences every MS ms (lengths from the same pool) beside the one-sequence\n"
          "ones, whose figures are then printed apart (light). core-age: the dispatch core\n"
          "with every request's sequences in one age order (before the fair share).\n");
}

static int bad(const char *fmt, const char *what) {
  fprintf(stderr, "lanepack-sim: ");
  fprintf(stderr, fmt, what);
  fprintf(stderr, "\n");
  return 2;
}

static int parse_double(const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(v) || v < lo || v > hi) return -EINVAL;
  *out = v;
  return 0;
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
  char *end;
  errno = 0;
  if (*s == '-' || *s == '+') return -EINVAL;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > hi) return -EINVAL;
  *out = v;
  return 0;
}

static int parse_loads(const char *s, opts_t *o) {
  char buf[1024];
  if (strlen(s) >= sizeof(buf)) return -EINVAL;
  strcpy(buf, s);
  o->nloads = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (o->nloads == MAX_LOADS || parse_double(t, 1e-6, 10, &o->loads[o->nloads])) return -EINVAL;
    o->nloads++;
  }
  return o->nloads ? 0 : -EINVAL;
}

static int known_policy(const char *a) { return !strcmp(a, "core") || !strcmp(a, "core-age") || !strcmp(a, "legacy"); }

/* Applies "4x8192=20" (after the shapes are known). */
static int apply_cost(opts_t *o, const char *spec) {
  unsigned lanes, bucket;
  double ms;
  char tail;
  if (sscanf(spec, "%ux%u=%lf%c", &lanes, &bucket, &ms, &tail) != 3 || !(ms > 0) || ms > 3600000)
    return bad("--cost-ms: expected SHAPE=MS with MS > 0, e.g. 4x8192=20, got '%s'", spec);
  int si = lp_bucket_set_find(&o->model.shapes, lanes, bucket);
  if (si < 0) return bad("--cost-ms: '%s' names a shape not in --shapes", spec);
  o->model.cost_ns[si] = (uint64_t)(ms * 1e6);
  return 0;
}

static int parse(int argc, char **argv, opts_t *o) {
  static const struct option opts[] = {
      {"lengths", required_argument, 0, 'l'},   {"trace", required_argument, 0, 't'},
      {"shapes", required_argument, 0, 's'},    {"cost-ms", required_argument, 0, 'c'},
      {"load", required_argument, 0, 'L'},      {"rate", required_argument, 0, 'r'},
      {"duration", required_argument, 0, 'd'},  {"requests", required_argument, 0, 'n'},
      {"devices", required_argument, 0, 'D'},   {"backends", required_argument, 0, 'B'},
      {"lead-ms", required_argument, 0, 'e'},   {"jitter", required_argument, 0, 'j'},
      {"fail-rate", required_argument, 0, 'F'}, {"stall-rate", required_argument, 0, 'S'},
      {"slow-rate", required_argument, 0, 'W'}, {"slow-ms", required_argument, 0, 'w'},
      {"slow-error-rate", required_argument, 0, 'E'},
      {"slow-error-ms", required_argument, 0, 'x'}, {"reset-rate", required_argument, 0, 'R'},
      {"check", no_argument, 0, 'k'},
      {"policy", required_argument, 0, 'p'},    {"capacity-s", required_argument, 0, 'C'},
      {"no-ideal", no_argument, 0, 'I'},        {"seed", required_argument, 0, 'z'},
      {"json", no_argument, 0, 'J'},            {"help", no_argument, 0, 'h'},
      {"version", no_argument, 0, 'V'},        {"compare", required_argument, 0, 'K'},
      {"advise", required_argument, 0, 'a'},   {"p99-ms", required_argument, 0, 'P'},
      {"candidates", required_argument, 0, 'N'}, {"advise-budget-s", required_argument, 0, 'b'},
      {"advise-exhaustive", no_argument, 0, 'X'}, {"big", required_argument, 0, 'G'}, {"advise-requests", required_argument, 0, 'Q'},
      {0, 0, 0, 0}};
  sim_model_t *m = &o->model;
  double v;
  uint64_t u;
  int c, idx, rate_set = 0;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":", opts, &idx)) != -1) {
    const char *a = optarg;
    switch (c) {
    case 'l': o->lengths = a; break;
    case 't': o->trace = a; break;
    case 's': o->shapes = a; break;
    case 'c':
      if (o->ncost == LP_BUCKET_MAX_SHAPES || strlen(a) >= sizeof(o->cost_spec[0]))
        return bad("--cost-ms: too many or too long: '%s'", a);
      strcpy(o->cost_spec[o->ncost++], a);
      break;
    case 'L':
      if (parse_loads(a, o)) return bad("--load: expected fractions in (0, 10] joined by commas, got '%s'", a);
      break;
    case 'r':
      if (parse_double(a, 1e-3, 1e9, &o->rate)) return bad("--rate: expected requests/s > 0, got '%s'", a);
      rate_set = 1;
      break;
    case 'd':
      if (parse_double(a, 1e-3, 1e6, &o->duration)) return bad("--duration: expected seconds > 0, got '%s'", a);
      break;
    case 'n':
      if (parse_u64(a, 1, 100000000, &u)) return bad("--requests: expected 1..100000000, got '%s'", a);
      o->requests = (size_t)u;
      break;
    case 'D':
      if (parse_u64(a, 1, 1024, &u)) return bad("--devices: expected 1..1024, got '%s'", a);
      m->devices = (uint32_t)u;
      break;
    case 'B':
      if (parse_u64(a, 1, SIM_MAX_BACKENDS, &u)) return bad("--backends: expected 1..64, got '%s'", a);
      m->backends = (uint32_t)u;
      break;
    case 'e':
      if (parse_double(a, 0, 60000, &v)) return bad("--lead-ms: expected 0..60000, got '%s'", a);
      m->lead_ns = (uint64_t)(v * 1e6);
      break;
    case 'j':
      if (parse_double(a, 0, 1, &m->jitter)) return bad("--jitter: expected a fraction 0..1, got '%s'", a);
      break;
    case 'F':
      if (parse_double(a, 0, 1, &m->fail_rate)) return bad("--fail-rate: expected 0..1, got '%s'", a);
      break;
    case 'S':
      if (parse_double(a, 0, 1, &m->stall_rate)) return bad("--stall-rate: expected 0..1, got '%s'", a);
      break;
    case 'k': m->check = 1; break;
    case 'R':
      if (parse_double(a, 0, 1, &m->reset_rate)) return bad("--reset-rate: expected 0..1, got '%s'", a);
      break;
    case 'W':
      if (parse_double(a, 0, 1, &m->slow_rate)) return bad("--slow-rate: expected 0..1, got '%s'", a);
      break;
    case 'w':
      if (parse_double(a, 0, 3600000, &v)) return bad("--slow-ms: expected 0..3600000, got '%s'", a);
      m->slow_ns = (uint64_t)(v * 1e6);
      break;
    case 'E':
      if (parse_double(a, 0, 1, &m->slow_error_rate)) return bad("--slow-error-rate: expected 0..1, got '%s'", a);
      break;
    case 'x':
      if (parse_double(a, 0, 3600000, &v)) return bad("--slow-error-ms: expected 0..3600000, got '%s'", a);
      m->slow_error_ns = (uint64_t)(v * 1e6);
      break;
    case 'p':
      if (!known_policy(a)) return bad("--policy: expected core, core-age or legacy, got '%s'", a);
      o->policy = a;
      break;
    case 'K':
      if (!known_policy(a)) return bad("--compare: expected core, core-age or legacy, got '%s'", a);
      o->compare = a;
      break;
    case 'G': {
      unsigned long long bn;
      double ms;
      char tail;
      if (sscanf(a, "%llu,%lf%c", &bn, &ms, &tail) != 2 || bn < 2 || bn > 1000000 || !(ms >= 0.1) || ms > 3.6e6)
        return bad("--big: expected N,MS (a request of N >= 2 sequences every MS ms), got '%s'", a);
      o->big_n = (uint32_t)bn;
      o->big_every_ms = ms;
      break;
    }
    case 'C':
      if (parse_double(a, 0.1, 1e5, &o->capacity_s)) return bad("--capacity-s: expected seconds > 0, got '%s'", a);
      break;
    case 'I': o->no_ideal = 1; break;
    case 'z':
      if (parse_u64(a, 0, UINT64_MAX, &o->seed)) return bad("--seed: expected a non-negative integer, got '%s'", a);
      break;
    case 'J': o->json = 1; break;
    case 'a':
      if (parse_u64(a, 1, 8, &u)) return bad("--advise: expected a shape count 1..8, got '%s'", a);
      o->adv.k = (uint32_t)u;
      break;
    case 'P':
      if (parse_double(a, 1e-3, 3600000, &o->adv.p99_ms)) return bad("--p99-ms: expected ms > 0, got '%s'", a);
      break;
    case 'N': o->adv.candidates = a; break;
    case 'b':
      if (parse_double(a, 0.01, 3600, &o->adv.budget_s))
        return bad("--advise-budget-s: expected seconds 0.01..3600, got '%s'", a);
      break;
    case 'X': o->adv.exhaustive = 1; break;
    case 'Q':
      if (parse_u64(a, 50, 10000000, &o->adv.requests))
        return bad("--advise-requests: expected 50..10000000, got '%s'", a);
      break;
    case 'h': usage(stdout); exit(0);
    case 'V': printf("lanepack-sim %s\n", LP_VERSION); exit(0);
    case ':': return bad("%s needs a value", argv[optind - 1]);
    default: return bad("unknown option '%s' (see --help)", argv[optind - 1]);
    }
  }
  if (optind < argc) return bad("unexpected argument '%s'", argv[optind]);
  if (!o->lengths == !o->trace) return bad("%s", "give one of --lengths FILE and --trace FILE");
  if (!o->shapes) return bad("%s", "--shapes is required, e.g. --shapes 4x8192,8x2048");
  char err[256];
  if (lp_bucket_set_parse(&m->shapes, o->shapes, err, sizeof(err)) || m->shapes.count == 0)
    return bad("--shapes: %s", m->shapes.count ? err : "no shape given");
  for (size_t i = 0; i < o->ncost; i++)
    if (apply_cost(o, o->cost_spec[i])) return 2;
  for (size_t i = 0; i < m->shapes.count; i++)
    if (!m->cost_ns[i]) {
      char s[64];
      snprintf(s, sizeof(s), "%ux%u", m->shapes.shapes[i].lanes, m->shapes.shapes[i].bucket);
      return bad("shape %s has no --cost-ms (give --cost-ms SHAPE=MS for every shape)", s);
    }
  if (o->adv.k) {
    if (!rate_set || !o->adv.p99_ms || o->nloads || o->trace)
      return bad("%s", "--advise needs --lengths, --rate R and --p99-ms X (not --load or --trace)");
    o->adv.rate = o->rate;
    o->adv.seed = o->seed;
    o->adv.json = o->json;
    if (!o->adv.budget_s) o->adv.budget_s = 3;
    return 0;
  }
  if (o->adv.p99_ms || o->adv.candidates || o->adv.exhaustive || o->adv.budget_s || o->adv.requests)
    return bad("%s", "--p99-ms, --candidates and the --advise-* options go with --advise K");
  if (o->trace && (o->nloads || rate_set || o->requests))
    return bad("%s", "--trace brings its own arrivals: --load, --rate and --requests do not apply");
  if (!o->trace && !o->nloads == !rate_set) return bad("%s", "give one of --load LIST and --rate R");
  if (m->fail_rate + m->stall_rate + m->slow_rate + m->slow_error_rate + m->reset_rate > 1)
    return bad("%s", "the fault rates add up to more than 1");
  if (!o->policy) o->policy = "core";
  if (o->compare && !strcmp(o->compare, o->policy))
    return bad("--compare: '%s' is the policy already", o->compare);
  if (o->big_n && o->trace) return bad("%s", "--trace brings its own arrivals: --big does not apply");
  if ((strcmp(o->policy, "legacy") || (o->compare && strcmp(o->compare, "legacy"))) &&
      m->backends > LP_DISP_MAX_BACKENDS)
    return bad("--backends: the dispatch core takes at most %s", LP_DISP_MAX_BACKENDS_S);
  return 0;
}

/* ---- running ---- */

/* Runs one policy ("core", "core-age", "legacy", "ideal", "ideal-any") on reqs. */
static int run(const opts_t *o, const char *kind, const sim_req_t *reqs, size_t n, uint64_t horizon,
               sim_figures_t *f, double *secs) {
  sim_policy_t p;
  int rc = !strcmp(kind, "core")       ? sim_core_new(&p, &o->model, reqs, 0)
           : !strcmp(kind, "core-age") ? sim_core_new(&p, &o->model, reqs, 1)
           : !strcmp(kind, "legacy") ? sim_baseline_new(&p, &o->model, reqs)
                                     : sim_ideal_new(&p, &o->model, reqs, strcmp(kind, "ideal") == 0);
  if (rc) {
    fprintf(stderr, "lanepack-sim: %s: %s\n", kind, strerror(-rc));
    return rc;
  }
  char err[256] = "";
  double t0 = now_s();
  rc = sim_run(&o->model, &p, reqs, n, o->seed, horizon, f, err, sizeof(err));
  if (secs) *secs = now_s() - t0;
  p.free(p.st);
  if (rc) fprintf(stderr, "lanepack-sim: %s\n", err[0] ? err : strerror(-rc));
  return rc;
}

static uint64_t mix_seed(uint64_t seed, uint64_t k) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + k;
  return lp_rng__splitmix(&x);
}

/* The ideal's capacity: requests/s it serves under overload (offered at 1.5x
 * the fill-1 bound of the best shape), measured over a horizon after a fifth
 * of it as warm-up; also the policy's on the same arrivals. */
typedef struct caps_s {
  double ideal_rps, ideal_tps;  /* the ideal's, the reference */
  double rps[2], tps[2];        /* the policy's and the compared one's */
} caps_t;

static int capacity(const opts_t *o, const sim_pool_t *pool, int policies_too, caps_t *c) {
  const sim_model_t *m = &o->model;
  double best = 0, mean = 0;
  for (size_t i = 0; i < m->shapes.count; i++) {
    const lp_shape_t *sh = &m->shapes.shapes[i];
    double tps = (double)sh->lanes * sh->bucket / ((double)m->cost_ns[i] / 1e9);
    if (tps > best) best = tps;
  }
  if (pool->v) {
    for (size_t i = 0; i < pool->n; i++) mean += pool->v[i];
    mean /= (double)pool->n;
  } else {
    lp_rng_t r;
    lp_rng_seed(&r, 1);
    for (int i = 0; i < 10000; i++) {
      uint32_t len = lp_lengths_next(pool->mix, &r);
      mean += len > pool->maxb ? pool->maxb : len;
    }
    mean /= 10000;
  }
  double bound = best * m->backends * m->devices / (mean > 0 ? mean : 1);
  double secs = o->capacity_s ? o->capacity_s : (o->duration < 20 ? o->duration : 20);
  sim_req_t *reqs;
  size_t n;
  if (sim_poisson(pool, 1.5 * bound, secs, 0, mix_seed(o->seed, 999), &reqs, &n)) return -ENOMEM;
  sim_figures_t f;
  uint64_t horizon = (uint64_t)(secs * 1e9);
  /* the ideal with the oldest constraint: it serves the mix as it comes (the
   * other would serve the short sequences first and count more requests while
   * the long ones pile up) */
  int rc = run(o, "ideal", reqs, n, horizon, &f, NULL);
  c->ideal_rps = f.served_rps;
  c->ideal_tps = f.served_tps;
  const char *pol[2] = {o->policy, o->compare};
  for (int i = 0; !rc && policies_too && i < 2 && pol[i]; i++) {
    rc = run(o, pol[i], reqs, n, horizon, &f, NULL);
    c->rps[i] = f.served_rps;
    c->tps[i] = f.served_tps;
  }
  free(reqs);
  return rc;
}

/* ---- the report ---- */

static void json_fig(const char *name, const sim_figures_t *f) {
  printf("\"%s\": {\"p50_ms\": %.3f, \"p99_ms\": %.3f, \"p999_ms\": %.3f, \"max_ms\": %.3f, "
         "\"mean_ms\": %.3f, \"util\": %.4f, \"fill\": %.4f, \"served_rps\": %.2f, "
         "\"served_tps\": %.1f, \"queue_ms\": %.3f, \"service_ms\": %.3f, "
         "\"requests\": %llu, \"ok\": %llu, \"errors\": %llu, \"unanswered\": %llu, "
         "\"double_answered\": %llu, \"batches\": %llu, \"failed_batches\": %llu",
         name, f->p50_ms, f->p99_ms, f->p999_ms, f->max_ms, f->mean_ms, f->util, f->fill, f->served_rps,
         f->served_tps, f->queue_ms, f->service_ms, (unsigned long long)f->requests,
         (unsigned long long)f->ok, (unsigned long long)f->errors,
         (unsigned long long)f->unanswered, (unsigned long long)f->double_answered,
         (unsigned long long)f->batches, (unsigned long long)f->failed_batches);
  if (f->grouped)
    printf(", \"light_requests\": %llu, \"light_p50_ms\": %.3f, \"light_p99_ms\": %.3f, "
           "\"light_wait_p99_ms\": %.3f",
           (unsigned long long)f->light_ok, f->light_p50_ms, f->light_p99_ms, f->light_wait_p99_ms);
  printf(", \"errors_by_status\": {");
  for (int k = 0; k < 4 && f->err_count[k]; k++)
    printf("%s\"%d\": %llu", k ? ", " : "", f->err_status[k], (unsigned long long)f->err_count[k]);
  printf("}}");
}

static void row(const char *who, const sim_figures_t *f) {
  printf("  %-9s %8.1f %8.1f %8.1f %8.1f %6.3f %6.3f %9.1f", who, f->p50_ms, f->p99_ms, f->p999_ms,
         f->max_ms, f->util, f->fill, f->served_rps);
}

/* With --big: the one-sequence requests' figures apart. */
static void print_light(const char *who, const sim_figures_t *f) {
  if (!f->grouped) return;
  printf("%16s %s: light (one-sequence requests, %llu): p50 %.1f ms, p99 %.1f ms, wait to first send p99 %.1f ms\n",
         "", who, (unsigned long long)f->light_ok, f->light_p50_ms, f->light_p99_ms, f->light_wait_p99_ms);
}

static void print_errors(const char *who, const sim_figures_t *f) {
  if (!f->errors && !f->unanswered && !f->double_answered) return;
  printf("%16s %s: %llu errors (", "", who, (unsigned long long)f->errors);
  for (int e = 0; e < 4 && f->err_count[e]; e++)
    printf("%s%llu x %d", e ? ", " : "", (unsigned long long)f->err_count[e], f->err_status[e]);
  printf("), %llu unanswered, %llu answered twice\n", (unsigned long long)f->unanswered,
         (unsigned long long)f->double_answered);
}

int main(int argc, char **argv) {
  opts_t o;
  memset(&o, 0, sizeof(o));
  o.duration = 10;
  o.model.backends = 1;
  o.model.devices = 1;
  o.model.slow_error_ns = 400000000ull;
  int rc = parse(argc, argv, &o);
  if (rc) return rc;
  char err[512];
  uint32_t maxb = lp_bucket_set_max_len(&o.model.shapes);
  sim_pool_t pool;
  memset(&pool, 0, sizeof(pool));
  sim_req_t *trace = NULL;
  size_t ntrace = 0;
  if (o.lengths && (rc = sim_pool_load(&pool, o.lengths, maxb, err, sizeof(err)))) {
    fprintf(stderr, "lanepack-sim: --lengths: %s\n", err);
    return 2;
  }
  if (o.trace) {
    if ((rc = sim_trace_load(o.trace, &trace, &ntrace, err, sizeof(err)))) {
      fprintf(stderr, "lanepack-sim: --trace: %s\n", err);
      return 2;
    }
    /* capacity is measured on the trace's lengths */
    pool.v = malloc(ntrace * sizeof(uint32_t));
    if (!pool.v) return 1;
    pool.maxb = maxb;
    for (size_t i = 0; i < ntrace; i++)
      if (trace[i].len <= maxb) pool.v[pool.n++] = trace[i].len;
    pool.total = ntrace;
    pool.dropped = ntrace - pool.n;
    if (!pool.n) {
      fprintf(stderr, "lanepack-sim: --trace: no length fits the largest bucket (%u)\n", maxb);
      return 2;
    }
  }
  if (o.adv.k) {
    rc = sim_advise(&o.model, &pool, &o.adv);
    sim_pool_free(&pool);
    return rc;
  }
  caps_t caps;
  memset(&caps, 0, sizeof(caps));
  double t0 = now_s();
  if ((!o.no_ideal || o.nloads) && capacity(&o, &pool, !o.no_ideal, &caps)) return 1;
  double cap = caps.ideal_rps;
  const char *pol[2] = {o.policy, o.compare};
  int npol = o.compare ? 2 : 1;
  if (!o.json) {
    printf("lanepack-sim: %s on %s, costs", o.lengths ? o.lengths : o.trace, o.shapes);
    for (size_t i = 0; i < o.model.shapes.count; i++)
      printf(" %ux%u=%.3gms", o.model.shapes.shapes[i].lanes, o.model.shapes.shapes[i].bucket,
             (double)o.model.cost_ns[i] / 1e6);
    printf(", %u backend(s) x %u device(s), lead %.3g ms, policy %s, seed %llu\n", o.model.backends,
           o.model.devices, (double)o.model.lead_ns / 1e6, o.policy, (unsigned long long)o.seed);
    if (pool.dropped)
      printf("lengths: %zu of %zu longer than the largest bucket (%u) left out\n", pool.dropped, pool.total, maxb);
    if (cap > 0) {
      printf("capacity under overload: ideal %.1f req/s", cap);
      for (int i = 0; i < npol && !o.no_ideal; i++)
        printf(", %s %.1f req/s (%.3f of the ideal; tokens/s %.3f)", pol[i], caps.rps[i], caps.rps[i] / cap,
               caps.ideal_tps > 0 ? caps.tps[i] / caps.ideal_tps : 0);
      printf("\n");
    }
    printf("%5s %9s | %-9s %8s %8s %8s %8s %6s %6s %9s\n", "load", "offered", "policy", "p50 ms", "p99 ms",
           "p99.9 ms", "max ms", "util", "fill", "served/s");
  }
  size_t runs = o.trace ? 1 : o.nloads ? o.nloads : 1;
  size_t total_requests = 0;
  double lp_secs = 0;
  for (size_t k = 0; k < runs; k++) {
    sim_req_t *reqs = trace;
    size_t n = ntrace;
    double rate = o.rate;
    if (!o.trace) {
      if (o.nloads) rate = o.loads[k] * cap;
      if ((rc = sim_poisson(&pool, rate, o.duration, o.requests, mix_seed(o.seed, k), &reqs, &n))) return 1;
      if (o.big_n && sim_add_big(&pool, o.big_n, (uint64_t)(o.big_every_ms * 1e6), mix_seed(o.seed, 1000 + k), &reqs, &n))
        return 1;
    }
    sim_figures_t f[2], id, ida;
    double secs = 0;
    for (int i = 0; i < npol; i++)
      if (run(&o, pol[i], reqs, n, 0, &f[i], i ? NULL : &secs)) return 1;
    lp_secs += secs;
    total_requests += n;
    rate = f[0].offered_rps;
    double load = cap > 0 ? rate / cap : 0;
    int have_ideal = !o.no_ideal;
    if (have_ideal && (run(&o, "ideal", reqs, n, 0, &id, NULL) || run(&o, "ideal-any", reqs, n, 0, &ida, NULL)))
      return 1;
    /* the reference: the better p99 of the two ideals */
    const sim_figures_t *ref = have_ideal && ida.p99_ms < id.p99_ms ? &ida : &id;
    double ratio[2] = {0, 0};
    for (int i = 0; i < npol; i++) ratio[i] = have_ideal && ref->p99_ms > 0 ? f[i].p99_ms / ref->p99_ms : 0;
    if (o.json) {
      printf("{\"load\": %.4f, \"offered_rps\": %.2f, \"requests\": %zu, \"policy\": \"%s\", "
             "\"capacity_rps\": %.2f, \"lanepack_capacity_rps\": %.2f, \"capacity_tps\": %.1f, "
             "\"lanepack_capacity_tps\": %.1f, ",
             o.nloads ? o.loads[k] : load, rate, n, o.policy, cap, caps.rps[0], caps.ideal_tps, caps.tps[0]);
      json_fig("lanepack", &f[0]);
      if (have_ideal) {
        printf(", ");
        json_fig("ideal", ref);
        printf(", \"ideal_variant\": \"%s\", ", ref == &id ? "oldest" : "any");
        json_fig("ideal_oldest", &id);
        printf(", ");
        json_fig("ideal_any", &ida);
        printf(", \"p99_ratio\": %.4f", ratio[0]);
      }
      if (o.compare) {
        printf(", \"compared_policy\": \"%s\", \"compared_capacity_rps\": %.2f, "
               "\"compared_capacity_tps\": %.1f, \"compared_p99_ratio\": %.4f, ",
               o.compare, caps.rps[1], caps.tps[1], ratio[1]);
        json_fig("compared", &f[1]);
      }
      printf("}\n");
    } else {
      if (cap > 0) printf("%4.0f%% %9.1f |", load * 100, rate);
      else printf("%5s %9.1f |", "-", rate);
      for (int i = 0; i < npol; i++) {
        if (i) printf("%5s %9s |", "", "");
        row(pol[i], &f[i]);
        if (have_ideal) printf("  p99 x%.2f", ratio[i]);
        printf("\n");
        print_light(pol[i], &f[i]);
        print_errors(pol[i], &f[i]);
      }
      if (have_ideal) {
        printf("%5s %9s |", "", "");
        row(ref == &id ? "ideal" : "ideal-any", ref);
        printf("\n");
      }
    }
    fflush(stdout);
    if (reqs != trace) free(reqs);
  }
  fprintf(stderr, "lanepack-sim: %zu requests through %s in %.2f s (%.0f requests/s); %.2f s in all\n",
          total_requests, o.policy, lp_secs, lp_secs > 0 ? (double)total_requests / lp_secs : 0,
          now_s() - t0);
  free(trace);
  sim_pool_free(&pool);
  return 0;
}
