/* The bucket manager: which shapes a model has, which may be chosen, and whether
 * a sequence length can ever be packed. */
#include "lanepack/bucket.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lp_bucket_set_init(lp_bucket_set_t *set) { memset(set, 0, sizeof(*set)); }

int lp_bucket_set_find(const lp_bucket_set_t *set, uint32_t lanes, uint32_t bucket) {
  for (size_t i = 0; i < set->count; i++)
    if (set->shapes[i].lanes == lanes && set->shapes[i].bucket == bucket) return (int)i;
  return -ENOENT;
}

int lp_bucket_set_add(lp_bucket_set_t *set, uint32_t lanes, uint32_t bucket) {
  if (lanes == 0 || bucket == 0) return -EINVAL;
  int i = lp_bucket_set_find(set, lanes, bucket);
  if (i >= 0) return i;
  size_t at = 0;
  while (at < set->count && set->shapes[at].lanes != 0) at++; /* a free slot, else the end */
  if (at == LP_BUCKET_MAX_SHAPES) return -ENOSPC;
  lp_shape_t *s = &set->shapes[at];
  memset(s, 0, sizeof(*s));
  s->lanes = lanes;
  s->bucket = bucket;
  s->state = LP_SHAPE_COMPILED;
  if (at == set->count) set->count++;
  return (int)at;
}

int lp_bucket_set_remove(lp_bucket_set_t *set, size_t i) {
  if (i >= set->count || set->shapes[i].lanes == 0) return -ENOENT;
  memset(&set->shapes[i], 0, sizeof(set->shapes[i]));
  set->shapes[i].state = LP_SHAPE_UNAVAILABLE;
  while (set->count && set->shapes[set->count - 1].lanes == 0) set->count--;
  return 0;
}

/* Parses a decimal in [1, max] at *p, advancing it. Returns 0 or -EINVAL. */
static int parse_dim(const char **p, uint32_t max, uint32_t *out) {
  const char *s = *p;
  uint64_t v = 0;
  if (*s < '0' || *s > '9') return -EINVAL;
  while (*s >= '0' && *s <= '9') {
    v = v * 10 + (uint64_t)(*s - '0');
    if (v > max) return -EINVAL;
    s++;
  }
  if (v == 0) return -EINVAL;
  *out = (uint32_t)v;
  *p = s;
  return 0;
}

int lp_bucket_set_parse(lp_bucket_set_t *set, const char *spec, char *err, size_t errlen) {
  const char *p = spec;
  if (err && errlen) err[0] = '\0';
  if (*p == '\0') {
    if (err) snprintf(err, errlen, "empty shape list");
    return -EINVAL;
  }
  for (;;) {
    const char *start = p;
    uint32_t lanes, bucket;
    if (parse_dim(&p, 65536, &lanes) || (*p != 'x' && *p != 'X') ||
        (p++, parse_dim(&p, 1u << 24, &bucket)) || (*p != ',' && *p != '\0')) {
      size_t n = strcspn(start, ",");
      if (err)
        snprintf(err, errlen, "bad shape '%.*s': want LANESxBUCKET, e.g. 4x8192 "
                 "(lanes 1..65536, bucket 1..16777216)", (int)(n > 64 ? 64 : n), start);
      return -EINVAL;
    }
    int r = lp_bucket_set_add(set, lanes, bucket);
    if (r < 0) {
      if (err) snprintf(err, errlen, "too many shapes (at most %d)", LP_BUCKET_MAX_SHAPES);
      return r;
    }
    if (*p == '\0') return 0;
    p++;
  }
}

uint32_t lp_bucket_set_max_len(const lp_bucket_set_t *set) {
  uint32_t m = 0;
  for (size_t i = 0; i < set->count; i++) {
    const lp_shape_t *s = &set->shapes[i];
    if (s->state != LP_SHAPE_UNAVAILABLE && s->bucket > m) m = s->bucket;
  }
  return m;
}

int lp_bucket_set_admit(const lp_bucket_set_t *set, uint32_t len, uint32_t *max_len) {
  uint32_t m = lp_bucket_set_max_len(set);
  if (max_len) *max_len = m;
  if (m == 0) return LP_ADMIT_NO_SHAPE;
  if (len == 0) return LP_ADMIT_EMPTY;
  if (len > m) return LP_ADMIT_TOO_LONG;
  return LP_ADMIT_OK;
}

void lp_bucket_set_account(lp_bucket_set_t *set, size_t shape, uint32_t segments,
                           uint64_t real) {
  if (shape >= set->count) return;
  lp_shape_t *s = &set->shapes[shape];
  uint64_t slots = (uint64_t)s->lanes * s->bucket;
  s->batches++;
  s->segments += segments;
  s->real_tokens += real;
  s->pad_tokens += real < slots ? slots - real : 0;
}

const char *lp_shape_state_name(lp_shape_state_t s) {
  switch (s) {
    case LP_SHAPE_COMPILED: return "compiled";
    case LP_SHAPE_COMPILING: return "compiling";
    case LP_SHAPE_UNAVAILABLE: return "unavailable";
  }
  return "?";
}

const char *lp_admit_reason(int verdict) {
  switch (verdict) {
    case LP_ADMIT_OK: return "ok";
    case LP_ADMIT_EMPTY: return "empty_sequence";
    case LP_ADMIT_TOO_LONG: return "sequence_too_long";
    case LP_ADMIT_NO_SHAPE: return "no_shape_available";
  }
  return "unknown";
}
