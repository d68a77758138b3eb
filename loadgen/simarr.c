/* The simulator's traffic: a pool of lengths (a length file or a mix), Poisson
 * arrivals drawn from it with a seed, or a recorded trace read from a file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/arrivals.h"
#include "lanepack/lengths.h"
#include "lanepack/sim.h"

int sim_pool_load(sim_pool_t *p, const char *spec, uint32_t maxb, char *err, size_t errlen) {
  memset(p, 0, sizeof(*p));
  p->maxb = maxb;
  lp_lengths_t *l = calloc(1, sizeof(*l));
  if (!l) return -ENOMEM;
  int rc = lp_lengths_load(l, spec, err, errlen);
  if (rc) {
    free(l);
    return rc;
  }
  if (!l->values) { /* a mix: drawn as needed */
    p->mix = l;
    return 0;
  }
  p->v = malloc((l->count ? l->count : 1) * sizeof(uint32_t));
  if (!p->v) {
    lp_lengths_free(l);
    free(l);
    return -ENOMEM;
  }
  for (size_t i = 0; i < l->count; i++) {
    if (l->values[i] >= 1 && l->values[i] <= maxb) p->v[p->n++] = l->values[i];
    else p->dropped++;
  }
  p->total = l->count;
  lp_lengths_free(l);
  free(l);
  if (!p->n) {
    snprintf(err, errlen, "%s: no length fits the largest bucket (%u)", spec, maxb);
    sim_pool_free(p);
    return -EINVAL;
  }
  return 0;
}

void sim_pool_free(sim_pool_t *p) {
  free(p->v);
  if (p->mix) {
    lp_lengths_free(p->mix);
    free(p->mix);
  }
  memset(p, 0, sizeof(*p));
}

static uint32_t draw(const sim_pool_t *p, lp_rng_t *rng) {
  if (p->v) return p->v[lp_rng_below(rng, p->n)];
  /* a mix is clamped to what a shape holds (its max= part bounds it) */
  uint32_t len = lp_lengths_next(p->mix, rng);
  if (len < 1) len = 1;
  return len > p->maxb ? p->maxb : len;
}

int sim_poisson(const sim_pool_t *p, double rate, double seconds, size_t count, uint64_t seed,
                sim_req_t **out, size_t *n) {
  *out = NULL;
  *n = 0;
  size_t cap = count ? count : (size_t)(rate * seconds * 1.05) + 64;
  sim_req_t *v = malloc(cap * sizeof(*v));
  if (!v) return -ENOMEM;
  lp_rng_t rng;
  lp_rng_seed(&rng, seed);
  uint64_t t = 0, end = (uint64_t)(seconds * 1e9);
  size_t k = 0;
  for (;;) {
    t += lp_arrival_gap_ns(&rng, rate);
    if (count ? k >= count : t > end) break;
    if (k == cap) {
      sim_req_t *w = realloc(v, cap * 2 * sizeof(*w));
      if (!w) {
        free(v);
        return -ENOMEM;
      }
      v = w;
      cap *= 2;
    }
    v[k++] = (sim_req_t){.arrive_ns = t, .len = draw(p, &rng)};
  }
  *out = v;
  *n = k;
  return 0;
}

int sim_add_big(const sim_pool_t *p, uint32_t big, uint64_t every_ns, uint64_t seed, sim_req_t **reqs, size_t *n) {
  sim_req_t *in = *reqs;
  uint64_t last = *n ? in[*n - 1].arrive_ns : 0;
  size_t groups = every_ns && last >= every_ns / 2 ? (size_t)((last - every_ns / 2) / every_ns) + 1 : 0;
  if (!groups) return 0;
  sim_req_t *v = malloc((*n + groups * big) * sizeof(*v));
  if (!v) return -ENOMEM;
  lp_rng_t rng;
  lp_rng_seed(&rng, seed);
  size_t i = 0, k = 0;
  for (size_t g = 0; g < groups; g++) {
    uint64_t at = every_ns / 2 + g * every_ns;
    while (i < *n && in[i].arrive_ns <= at) v[k++] = in[i++];
    for (uint32_t s = 0; s < big; s++)
      v[k++] = (sim_req_t){.arrive_ns = at, .len = draw(p, &rng), .group = s ? 0 : big, .in_group = s > 0};
  }
  while (i < *n) v[k++] = in[i++];
  free(in);
  *reqs = v;
  *n = k;
  return 0;
}

static int cmp_arrival(const void *a, const void *b) {
  const sim_req_t *x = a, *y = b;
  return x->arrive_ns < y->arrive_ns ? -1 : x->arrive_ns > y->arrive_ns;
}

int sim_trace_load(const char *path, sim_req_t **out, size_t *n, char *err, size_t errlen) {
  *out = NULL;
  *n = 0;
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return -ENOENT;
  }
  size_t cap = 1024, k = 0, lineno = 0;
  sim_req_t *v = malloc(cap * sizeof(*v));
  char line[512];
  int rc = v ? 0 : -ENOMEM;
  while (!rc && fgets(line, sizeof(line), f)) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    for (char *c = line; *c; c++)
      if (*c == ',' || *c == '\t') *c = ' ';
    double arrive, deadline = 0;
    long long len, prio = 0;
    int got = sscanf(line, "%lf %lld %lld %lf", &arrive, &len, &prio, &deadline);
    if (got <= 0) {
      char *c = line;
      while (*c == ' ' || *c == '\n' || *c == '\r') c++;
      if (*c == '\0') continue; /* blank or comment */
    }
    if (got < 2 || !(arrive >= 0) || arrive > 1e9 || len < 1 || len > 1000000000 || !(deadline >= 0) ||
        prio < -1000000 || prio > 1000000) {
      snprintf(err, errlen, "%s:%zu: expected ARRIVAL_MS LENGTH [PRIORITY [DEADLINE_MS]]", path, lineno);
      rc = -EINVAL;
      break;
    }
    if (k == cap) {
      sim_req_t *w = realloc(v, cap * 2 * sizeof(*w));
      if (!w) {
        rc = -ENOMEM;
        break;
      }
      v = w;
      cap *= 2;
    }
    uint64_t at = (uint64_t)(arrive * 1e6);
    v[k++] = (sim_req_t){.arrive_ns = at, .len = (uint32_t)len, .prio = (int32_t)prio,
                         .deadline_ns = deadline > 0 ? at + (uint64_t)(deadline * 1e6) : 0};
  }
  fclose(f);
  if (!rc && k == 0) {
    snprintf(err, errlen, "%s: no requests", path);
    rc = -EINVAL;
  }
  if (rc) {
    if (rc == -ENOMEM) snprintf(err, errlen, "%s: out of memory", path);
    free(v);
    return rc;
  }
  qsort(v, k, sizeof(*v), cmp_arrival); /* a merged trace may be out of order */
  *out = v;
  *n = k;
  return 0;
}
