/* lanepack-sim --advise: runs the latency-aware shape advisor (lanepack/shapeadv.h)
 * on the --lengths mix and the --shapes/--cost-ms given, and prints the current
 * set and the advice side by side. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lanepack/lengths.h"
#include "lanepack/shapeadv.h"
#include "simadvise.h"

#define MIX_DRAWS 20000

static double mono_s(void *arg) {
  (void)arg;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void print_set(const char *who, const lp_sadv_set_t *s) {
  for (size_t i = 0; i < s->n; i++)
    printf("  %-8s %6ux%-6u %9.3f  %s\n", i ? "" : who, s->s[i].lanes, s->s[i].bucket,
           (double)s->s[i].cost_ns / 1e6, s->s[i].fitted ? "fitted" : "measured");
}

static void summary(const char *who, const lp_sadv_set_t *s, double target) {
  char dev[32];
  if (s->devices_needed) snprintf(dev, sizeof(dev), "%u", s->devices_needed);
  else snprintf(dev, sizeof(dev), "> max");
  printf("  %-8s %6zu %12.1f %11.1f%s %9.1f %6.3f %9s\n", who, s->n, s->capacity_rps, s->p99_ms,
         s->p99_ms <= target && s->meets ? " " : "!", s->p50_ms, s->fill, dev);
}

int sim_advise(const sim_model_t *m, const sim_pool_t *pool, const sim_advise_opts_t *ao) {
  lp_sadv_params_t p;
  memset(&p, 0, sizeof(p));
  p.current = m->shapes;
  for (size_t i = 0; i < m->shapes.count; i++) p.current.shapes[i].cost_ns = m->cost_ns[i];
  if (ao->candidates) {
    char err[256];
    if (lp_bucket_set_parse(&p.candidates, ao->candidates, err, sizeof(err)) || !p.candidates.count) {
      fprintf(stderr, "lanepack-sim: --candidates: %s\n", p.candidates.count ? err : "no shape given");
      return 2;
    }
  }
  uint32_t *lens = NULL;
  size_t n = pool->n;
  if (pool->v) {
    lens = pool->v;
  } else { /* a mix: a sample of it */
    lens = malloc(MIX_DRAWS * sizeof(*lens));
    if (!lens) return 1;
    lp_rng_t r;
    lp_rng_seed(&r, ao->seed ^ 0x313);
    for (n = 0; n < MIX_DRAWS; n++) {
      uint32_t len = lp_lengths_next(pool->mix, &r);
      lens[n] = len < 1 ? 1 : len > pool->maxb ? pool->maxb : len;
    }
  }
  p.lens = lens;
  p.nlens = n;
  p.k = ao->k;
  p.p99_ms = ao->p99_ms;
  p.rate = ao->rate;
  p.backends = m->backends;
  p.devices = m->devices;
  p.lead_ns = m->lead_ns;
  p.seed = ao->seed;
  p.exhaustive = ao->exhaustive;
  p.short_requests = (size_t)ao->requests;
  p.clock = mono_s;
  p.budget_s = ao->budget_s;
  lp_sadv_result_t *r = calloc(1, sizeof(*r));
  if (!r) return 1;
  char err[256] = "";
  double t0 = mono_s(NULL);
  int rc = lp_sadv_run(&p, r, err, sizeof(err));
  double secs = mono_s(NULL) - t0;
  if (lens != pool->v) free(lens);
  if (rc) {
    fprintf(stderr, "lanepack-sim: --advise: %s\n", err);
    free(r);
    return rc == -EINVAL || rc == -ENODATA || rc == -E2BIG ? 2 : 1;
  }
  if (ao->json) {
    size_t need = lp_sadv_json(&p, r, NULL, 0) + 1;
    char *b = malloc(need);
    if (!b) return free(r), 1;
    lp_sadv_json(&p, r, b, need);
    printf("%s\n", b);
    free(b);
  } else {
    printf("lanepack-sim --advise %u: %zu of %zu lengths kept (longest %u), rate %.6g req/s, "
           "p99 target %.6g ms, %u backend(s) x %u device(s), seed %llu\n",
           p.k, pool->v ? pool->n : n, pool->v && pool->total ? pool->total : n, r->longest, p.rate, p.p99_ms, m->backends,
           m->devices, (unsigned long long)ao->seed);
    printf("cost model: %.3f ms + %.4f us per slot (least squares over %zu measured shape(s)); "
           "%zu candidates, %zu sets simulated, search %s%s, %.2f s\n",
           r->fixed_ns / 1e6, r->per_slot_ns / 1e3, r->fit_points, r->candidates, r->evaluated,
           ao->exhaustive ? "exhaustive" : "beam", r->complete ? "" : " (cut by --advise-budget-s)", secs);
    printf("  %-8s %13s %9s  %s\n", "set", "shape", "cost ms", "cost");
    print_set("current", &r->current);
    print_set("advice", &r->advice);
    printf("  %-8s %6s %12s %12s %9s %6s %9s\n", "", "shapes", "capacity/s", "p99 ms @R", "p50 ms", "fill",
           "devices");
    summary("current", &r->current, p.p99_ms);
    summary("advice", &r->advice, p.p99_ms);
    printf("(capacity: requests/s served under overload; p99, p50 and fill at the rate with the devices "
           "given; devices: the fewest whose p99 at the rate meets the target; ! misses it)\n");
  }
  free(r);
  return 0;
}
