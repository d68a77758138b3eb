/* Sequence-length sources: length files and synthetic mixes. */
#include "lanepack/lengths.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return rc;
}

/* Reads "key=value" or a bare value for the n-th positional parameter. */
static int parse_params(const char *s, const char **keys, double *vals, size_t nkeys,
                        int *seen) {
  size_t pos = 0;
  while (*s) {
    const char *comma = strchr(s, ',');
    size_t len = comma ? (size_t)(comma - s) : strlen(s);
    char item[64];
    if (len == 0 || len >= sizeof(item)) return -EINVAL;
    memcpy(item, s, len);
    item[len] = '\0';
    char *eq = strchr(item, '=');
    size_t k = nkeys;
    const char *num = item;
    if (eq) {
      *eq = '\0';
      for (k = 0; k < nkeys; k++)
        if (strcmp(item, keys[k]) == 0) break;
      num = eq + 1;
    } else {
      k = pos;
    }
    if (k >= nkeys) return -EINVAL;
    char *end;
    double v = strtod(num, &end);
    if (end == num || *end != '\0' || !isfinite(v)) return -EINVAL;
    vals[k] = v;
    seen[k] = 1;
    pos++;
    s += len;
    if (*s == ',') s++;
  }
  return 0;
}

static int parse_part(lp_dist_part_t *p, const char *s) {
  const char *colon = strchr(s, ':');
  if (!colon) return -EINVAL;
  size_t nlen = (size_t)(colon - s);
  double v[3] = {0, 0, 0};
  int seen[3] = {0, 0, 0};
  p->max = 0;
  if (nlen == 5 && strncmp(s, "fixed", 5) == 0) {
    const char *k[] = {"n"};
    if (parse_params(colon + 1, k, v, 1, seen) || !seen[0] || v[0] < 1) return -EINVAL;
    p->kind = LP_DIST_FIXED;
    p->a = v[0];
  } else if (nlen == 7 && strncmp(s, "uniform", 7) == 0) {
    const char *k[] = {"min", "max"};
    if (parse_params(colon + 1, k, v, 2, seen) || !seen[0] || !seen[1] || v[0] < 1 || v[1] < v[0])
      return -EINVAL;
    p->kind = LP_DIST_UNIFORM;
    p->a = v[0];
    p->b = v[1];
  } else if (nlen == 9 && strncmp(s, "lognormal", 9) == 0) {
    const char *k[] = {"mu", "sigma", "max"};
    if (parse_params(colon + 1, k, v, 3, seen) || !seen[0] || !seen[1] || v[1] < 0 ||
        (seen[2] && v[2] < 1))
      return -EINVAL;
    p->kind = LP_DIST_LOGNORMAL;
    p->a = v[0];
    p->b = v[1];
    p->max = seen[2] ? (uint32_t)v[2] : 0;
  } else if (nlen == 4 && strncmp(s, "zipf", 4) == 0) {
    const char *k[] = {"s", "max"};
    if (parse_params(colon + 1, k, v, 2, seen) || !seen[1] || v[1] < 1) return -EINVAL;
    p->kind = LP_DIST_ZIPF;
    p->a = seen[0] ? v[0] : 1.1;
    if (p->a <= 0) return -EINVAL;
    p->max = (uint32_t)v[1];
  } else {
    return -EINVAL;
  }
  return 0;
}

static int is_mix(const char *spec) {
  static const char *names[] = {"fixed:", "uniform:", "lognormal:", "zipf:"};
  const char *s = spec;
  const char *star = strchr(s, '*');
  const char *colon = strchr(s, ':');
  if (star && colon && star < colon) s = star + 1;
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strncmp(s, names[i], strlen(names[i])) == 0) return 1;
  return 0;
}

static int load_mix(lp_lengths_t *l, const char *spec, char *err, size_t errlen) {
  char buf[512];
  if (strlen(spec) >= sizeof(buf)) return fail(err, errlen, -EINVAL, "length mix too long");
  strcpy(buf, spec);
  size_t n = strlen(buf);
  if (n == 0 || buf[0] == '+' || buf[n - 1] == '+' || strstr(buf, "++"))
    return fail(err, errlen, -EINVAL, "empty part in length mix '%s'", spec);
  char *save = NULL;
  for (char *tok = strtok_r(buf, "+", &save); tok; tok = strtok_r(NULL, "+", &save)) {
    if (l->nparts == LP_LENGTHS_MAX_PARTS)
      return fail(err, errlen, -EINVAL, "length mix has more than %d parts", LP_LENGTHS_MAX_PARTS);
    lp_dist_part_t *p = &l->parts[l->nparts];
    double w = 1.0;
    char *star = strchr(tok, '*');
    char *body = tok;
    if (star && star < strchr(tok, ':')) {
      *star = '\0';
      char *end;
      w = strtod(tok, &end);
      if (end == tok || *end || !(w > 0) || !isfinite(w))
        return fail(err, errlen, -EINVAL, "bad weight '%s' in length mix", tok);
      body = star + 1;
    }
    if (parse_part(p, body))
      return fail(err, errlen, -EINVAL,
                  "bad length mix part '%s': want fixed:N, uniform:A,B, "
                  "lognormal:mu=M,sigma=S[,max=X] or zipf:s=S,max=X",
                  body);
    p->weight = w;
    l->total_weight += w;
    l->nparts++;
  }
  if (l->nparts == 0) return fail(err, errlen, -EINVAL, "empty length mix");
  return 0;
}

static int load_file(lp_lengths_t *l, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) return fail(err, errlen, -ENOENT, "%s: %s", path, strerror(errno));
  size_t cap = 1024, line = 0;
  int rc = 0;
  l->values = malloc(cap * sizeof(uint32_t));
  char buf[128];
  if (!l->values) rc = -ENOMEM;
  while (rc == 0 && fgets(buf, sizeof(buf), f)) {
    line++;
    size_t n = strlen(buf);
    if (n == sizeof(buf) - 1 && buf[n - 1] != '\n') {
      rc = fail(err, errlen, -EINVAL, "%s:%zu: line too long", path, line);
      break;
    }
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = 0;
    if (n == 0) continue; /* blank lines are allowed, e.g. a final one */
    char *end;
    errno = 0;
    unsigned long v = strtoul(buf, &end, 10);
    if (buf[0] < '0' || buf[0] > '9' || *end || errno || v == 0 || v > UINT32_MAX) {
      rc = fail(err, errlen, -EINVAL, "%s:%zu: '%.32s' is not a positive integer", path, line, buf);
      break;
    }
    if (l->count == cap) {
      uint32_t *nv = realloc(l->values, cap * 2 * sizeof(uint32_t));
      if (!nv) {
        rc = -ENOMEM;
        break;
      }
      l->values = nv;
      cap *= 2;
    }
    l->values[l->count++] = (uint32_t)v;
  }
  if (rc == 0 && ferror(f)) rc = fail(err, errlen, -EIO, "%s: read error", path);
  fclose(f);
  if (rc == 0 && l->count == 0) rc = fail(err, errlen, -EINVAL, "%s: no lengths in file", path);
  return rc;
}

int lp_lengths_load(lp_lengths_t *l, const char *spec, char *err, size_t errlen) {
  memset(l, 0, sizeof(*l));
  snprintf(l->name, sizeof(l->name), "%s", spec);
  int rc = is_mix(spec) ? load_mix(l, spec, err, errlen) : load_file(l, spec, err, errlen);
  if (rc) lp_lengths_free(l);
  return rc;
}

void lp_lengths_free(lp_lengths_t *l) {
  free(l->values);
  l->values = NULL;
  l->count = 0;
}

static double normal(lp_rng_t *r) {
  double u1 = lp_rng_double(r), u2 = lp_rng_double(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Zipf over 1..max by rejection-inversion (Hoermann & Derflinger 1996). */
static uint32_t zipf(lp_rng_t *r, double s, uint32_t max) {
  if (max <= 1) return 1;
  double q = s;
  double hx0 = (q == 1.0) ? log(0.5) : (pow(0.5, 1 - q) - 1) / (1 - q);
  double hn = (q == 1.0) ? log(max + 0.5) : (pow(max + 0.5, 1 - q) - 1) / (1 - q);
  for (int tries = 0; tries < 1000; tries++) {
    double u = hx0 + lp_rng_double(r) * (hn - hx0);
    double x = (q == 1.0) ? exp(u) : pow(u * (1 - q) + 1, 1 / (1 - q));
    uint32_t k = (uint32_t)(x + 0.5);
    if (k < 1) k = 1;
    if (k > max) k = max;
    double hk = (q == 1.0) ? log(k + 0.5) : (pow(k + 0.5, 1 - q) - 1) / (1 - q);
    if (u >= hk - pow(k, -q)) return k;
  }
  return 1;
}

static uint32_t clamp_len(double v, uint32_t max) {
  if (!(v >= 1)) v = 1;
  if (max && v > max) v = max;
  if (v > UINT32_MAX) v = UINT32_MAX;
  return (uint32_t)v;
}

uint32_t lp_lengths_next(lp_lengths_t *l, lp_rng_t *rng) {
  if (l->count) {
    uint32_t v = l->values[l->next++];
    if (l->next == l->count) l->next = 0;
    return v;
  }
  const lp_dist_part_t *p = &l->parts[0];
  if (l->nparts > 1) {
    double u = lp_rng_double(rng) * l->total_weight;
    for (size_t i = 0; i < l->nparts; i++) {
      p = &l->parts[i];
      if (u < p->weight) break;
      u -= p->weight;
    }
  }
  switch (p->kind) {
    case LP_DIST_FIXED: return clamp_len(p->a, 0);
    case LP_DIST_UNIFORM:
      return clamp_len(p->a + (double)lp_rng_below(rng, (uint64_t)(p->b - p->a) + 1), 0);
    case LP_DIST_LOGNORMAL: return clamp_len(round(exp(p->a + p->b * normal(rng))), p->max);
    case LP_DIST_ZIPF: return zipf(rng, p->a, p->max);
  }
  return 1;
}

void lp_lengths_fill(lp_lengths_t *l, lp_rng_t *rng, uint32_t *out, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = lp_lengths_next(l, rng);
}
