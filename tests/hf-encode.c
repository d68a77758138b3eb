/* The tokenizer.json tokenizer as a filter, for tests/test-hf-tokenizer.mjs
 * and the benchmark: each stdin line is {"a": TEXT, "b": TEXT or null,
 * "special": bool}; each output line is {"ids", "types", "offsets" (bytes of
 * the text: of b for pieces of b), "special" (1: the post-processor's), "tok"} where tok is what
 * lanepack/tokenizer.h's lp_tok_encode (special) or lp_tok_encode_plain
 * gives for a alone, and for a alone "fit": how many cuts of it
 * lp_tok_fit_ids gives otherwise than lp_tok_encode_fit (0). A line {"decode": [IDS], "skip": bool} gives {"text"}:
 * lp_tok_decode's (skip: skip_special), or {"error"}.
 * Usage: hf-encode TOKENIZER.json < cases; hf-encode --bench TOKENIZER.json
 * FILE N: encodes FILE's lines N times, prints tokens and CPU seconds, then
 * decodes each line's ids N times (decode_bytes, decode_cpu_s). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "hf.h"
#include "lanepack/tokenizer.h"

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* How many of a few cuts of text (to max ids from either end) give other ids
 * through lp_tok_fit_ids on its plain ids than lp_tok_encode_fit on the text. */
static int fit_mismatches(const lp_tok_t *t, const char *text, size_t len) {
  int32_t plain[4096], want[4096], got[4096];
  long np = lp_tok_encode_plain(t, text, len, plain, 4096);
  if (np < 0 || np > 4096) return 0; /* (the cases are lines: never) */
  const size_t maxes[] = {1, 2, 3, (size_t)np / 2 + 1, (size_t)np, (size_t)np + 1, (size_t)np + 3};
  int bad = 0;
  for (size_t m = 0; m < sizeof(maxes) / sizeof(maxes[0]); m++) {
    for (int left = 0; left < 2; left++) {
      long kw = lp_tok_encode_fit(t, text, len, maxes[m], left, want, 4096);
      long kg = lp_tok_fit_ids(t, plain, (size_t)np, maxes[m], left, got, 4096);
      bad += kw != kg || (kw > 0 && memcmp(want, got, (size_t)kw * sizeof(*want)) != 0);
    }
  }
  return bad;
}

static int bench(const char *tpath, const char *file, int reps) {
  char err[256];
  lp_tok_t *t = lp_tok_load(tpath, NULL, err, sizeof(err));
  if (!t) {
    fprintf(stderr, "hf-encode: %s\n", err);
    return 1;
  }
  FILE *f = fopen(file, "r");
  if (!f) return 1;
  char **lines = NULL, *line = NULL;
  size_t n = 0, cap = 0, lcap = 0;
  ssize_t k;
  while ((k = getline(&line, &lcap, f)) >= 0) {
    if (k > 0 && line[k - 1] == '\n') line[--k] = 0;
    if (n == cap) {
      cap = cap ? cap * 2 : 1024;
      lines = realloc(lines, cap * sizeof(*lines));
    }
    lines[n++] = strdup(line);
  }
  fclose(f);
  static int32_t ids[1 << 20];
  long total = 0;
  double t0 = cpu_now();
  for (int r = 0; r < reps; r++)
    for (size_t i = 0; i < n; i++) {
      long c = lp_tok_encode_plain(t, lines[i], strlen(lines[i]), ids, sizeof(ids) / sizeof(ids[0]));
      if (c < 0) {
        fprintf(stderr, "hf-encode: line %zu: %s\n", i, strerror((int)-c));
        return 1;
      }
      total += c;
    }
  double dt = cpu_now() - t0;
  /* decode: each line's ids (encoded once, kept) back to text, reps times */
  int32_t **lids = calloc(n + 1, sizeof(*lids));
  long *nids = calloc(n + 1, sizeof(*nids)), chars = 0;
  static char text[1 << 22];
  for (size_t i = 0; i < n; i++) {
    nids[i] = lp_tok_encode_plain(t, lines[i], strlen(lines[i]), ids, sizeof(ids) / sizeof(ids[0]));
    lids[i] = malloc(((size_t)nids[i] + 1) * sizeof(int32_t));
    memcpy(lids[i], ids, (size_t)nids[i] * sizeof(int32_t));
  }
  double d0 = cpu_now();
  for (int r = 0; r < reps; r++)
    for (size_t i = 0; i < n; i++) {
      long m = lp_tok_decode(t, lids[i], (size_t)nids[i], 1, text, sizeof(text));
      if (m < 0 || m > (long)sizeof(text)) {
        fprintf(stderr, "hf-encode: decode line %zu: %ld\n", i, m);
        return 1;
      }
      chars += m;
    }
  double dd = cpu_now() - d0;
  printf("{\"tokens\": %ld, \"cpu_s\": %.6f, \"decode_bytes\": %ld, \"decode_cpu_s\": %.6f}\n", total, dt, chars, dd);
  for (size_t i = 0; i < n; i++) free(lids[i]);
  free(lids);
  free(nids);
  for (size_t i = 0; i < n; i++) free(lines[i]);
  free(lines);
  free(line);
  lp_tok_free(t);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "--bench") == 0) return bench(argv[2], argv[3], atoi(argv[4]));
  if (argc != 2) {
    fprintf(stderr, "usage: hf-encode TOKENIZER.json < cases\n");
    return 2;
  }
  char err[256];
  lp__hf_t *h = lp__hf_load(argv[1], err, sizeof(err));
  lp_tok_t *t = h ? lp_tok_load(argv[1], NULL, err, sizeof(err)) : NULL;
  if (!h || !t) {
    printf("{\"error\": \"%s\"}\n", err);
    return 1;
  }
  char *line = NULL;
  size_t lcap = 0;
  lp__hf_enc_t e = {0};
  int32_t *ids = NULL;
  size_t idcap = 0;
  while (getline(&line, &lcap, stdin) >= 0) {
    json_error_t je;
    json_t *c = json_loads(line, JSON_ALLOW_NUL, &je);
    if (!c) {
      fprintf(stderr, "hf-encode: bad case: %s\n", je.text);
      return 2;
    }
    json_t *dec = json_object_get(c, "decode");
    if (json_is_array(dec)) {
      size_t nd = json_array_size(dec);
      int32_t *di = malloc((nd + 1) * sizeof(*di));
      for (size_t i = 0; i < nd; i++) di[i] = (int32_t)json_integer_value(json_array_get(dec, i));
      int skip = json_is_true(json_object_get(c, "skip"));
      long k = lp_tok_decode(t, di, nd, skip, NULL, 0);
      char *text = k >= 0 ? malloc((size_t)k + 1) : NULL;
      if (text) k = lp_tok_decode(t, di, nd, skip, text, (size_t)k);
      json_t *o = k >= 0 ? json_pack("{s:s%}", "text", text, (size_t)k) : json_pack("{s:s}", "error", strerror((int)-k));
      char *js = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
      puts(js);
      free(js);
      json_decref(o);
      free(text);
      free(di);
      json_decref(c);
      continue;
    }
    json_t *a = json_object_get(c, "a"), *b = json_object_get(c, "b");
    int special = json_is_true(json_object_get(c, "special"));
    int rc = lp__hf_encode(h, json_string_value(a), json_string_length(a), json_is_string(b) ? json_string_value(b) : NULL,
                           json_string_length(b), special, &e);
    json_t *o = json_object();
    if (rc) {
      json_object_set_new(o, "error", json_string(strerror(-rc)));
    } else {
      json_t *ji = json_array(), *jt = json_array(), *jo = json_array(), *js = json_array();
      for (size_t i = 0; i < e.n; i++) {
        json_array_append_new(ji, json_integer(e.t[i].id));
        json_array_append_new(js, json_integer(e.t[i].special));
        json_array_append_new(jt, json_integer(e.t[i].type));
        json_array_append_new(jo, json_pack("[ii]", (int)e.t[i].a0, (int)e.t[i].a1));
      }
      json_object_set_new(o, "ids", ji);
      json_object_set_new(o, "types", jt);
      json_object_set_new(o, "offsets", jo);
      json_object_set_new(o, "special", js);
      long k = special ? lp_tok_encode(t, json_string_value(a), json_string_length(a), ids, idcap)
                       : lp_tok_encode_plain(t, json_string_value(a), json_string_length(a), ids, idcap);
      if (k > (long)idcap) {
        idcap = (size_t)k;
        ids = realloc(ids, idcap * sizeof(*ids));
        k = special ? lp_tok_encode(t, json_string_value(a), json_string_length(a), ids, idcap)
                    : lp_tok_encode_plain(t, json_string_value(a), json_string_length(a), ids, idcap);
      }
      json_t *jk = json_array();
      for (long i = 0; i < k; i++) json_array_append_new(jk, json_integer(ids[i]));
      json_object_set_new(o, "tok", jk);
      if (!json_is_string(b))
        json_object_set_new(o, "fit", json_integer(fit_mismatches(t, json_string_value(a), json_string_length(a))));
    }
    char *s = json_dumps(o, JSON_COMPACT);
    puts(s);
    free(s);
    json_decref(o);
    json_decref(c);
  }
  free(e.t);
  free(ids);
  free(line);
  lp__hf_free(h);
  lp_tok_free(t);
  return 0;
}
