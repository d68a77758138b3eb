/* jansson's allocations made to fail from the n-th on (json_set_alloc_funcs),
 * for the decoders' out-of-memory paths, and a long text body that reaches
 * lp_jload's in-place decoding (a top-level string past lp_jload_min, with
 * escapes). Tests only: one thread. */
#ifndef LANEPACK_TESTS_JFAIL_H
#define LANEPACK_TESTS_JFAIL_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/jload.h"

static long jfail_left = -1; /* allocations that still succeed; -1: all do */
static long jfail_count;     /* allocations asked for since armed */

static void *jfail_malloc(size_t n) {
  jfail_count++;
  if (jfail_left == 0) return NULL;
  if (jfail_left > 0) jfail_left--;
  return malloc(n);
}

/* The n-th allocation from now (0: the next) and every later one fail; n < 0:
 * none fails. */
static inline void jfail_arm(long n) {
  jfail_left = n;
  jfail_count = 0;
  json_set_alloc_funcs(jfail_malloc, free);
}

static inline void jfail_off(void) {
  jfail_left = -1;
  json_set_alloc_funcs(malloc, free);
}

/* Calls try(ctx, -1) with every allocation succeeding, then try(ctx, k) with
 * the k-th of those it made (and every later one) failing, for each k in
 * turn; try decodes afresh and asserts. Returns how many there were. */
static inline long jfail_each(void (*try)(void *ctx, long k), void *ctx) {
  jfail_arm(-1);
  try(ctx, -1);
  long allocs = jfail_count;
  for (long k = 0; k < allocs; k++) {
    jfail_arm(k);
    try(ctx, k);
  }
  jfail_off();
  return allocs;
}

/* The body the decoders are tried on: {"<key>": "<a text of about 6 KB with
 * escapes>"<rest>}, long enough to be decoded in place (lp_jload_min). */
static char jfail_src[8192];
static size_t jfail_src_len;

/* Sets jfail_src and runs jfail_each(try, ctx) on it: the count. */
static inline long jfail_body_each(const char *key, const char *rest, void (*try)(void *ctx, long k), void *ctx) {
  size_t n = (size_t)snprintf(jfail_src, sizeof(jfail_src), "{\"%s\": \"", key);
  for (int i = 0; n + 64 < sizeof(jfail_src) - strlen(rest) && i < 600; i++)
    n += (size_t)snprintf(jfail_src + n, sizeof(jfail_src) - n, "word %d \\\"q\\\" ", i);
  n += (size_t)snprintf(jfail_src + n, sizeof(jfail_src) - n, "\"%s}", rest);
  jfail_src_len = n;
  return n > lp_jload_min() ? jfail_each(try, ctx) : 0;
}

#endif
