/* lanepack-tokrate: how fast the proxy's tokenizer (lanepack/tokenizer.h, the
 * very module a front calls) turns text into ids: every line of a file encoded
 * again and again for a while by N threads sharing one loaded model, as the
 * fronts share it; prints tokens/s per CPU-second and in all. A SentencePiece
 * model the native encoder runs is timed twice, native then through
 * libsentencepiece (LP_TOKRATE_ENGINE=native or =library: one of them), and
 * the ratio printed.
 * Usage: lanepack-tokrate MODEL FILE [SECONDS] [THREADS] [EXTRA_OPTIONS] */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lanepack/tokenizer.h"

/* Threads at most: more than the machines this runs on have cores. */
#define TR_MAX_THREADS 64

typedef struct {
  const lp_tok_t *tok;
  char **lines;        /* borrowed */
  size_t nlines;
  double seconds;
  unsigned long long tokens, encoded; /* results */
  int failed;
} tr_worker_t;

static double now_s(int clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *encode_loop(void *arg) {
  tr_worker_t *w = arg;
  size_t cap = 4096;
  int32_t *ids = malloc(cap * sizeof(*ids));
  double end = now_s(CLOCK_MONOTONIC) + w->seconds;
  /* the clock is read once per pass over the file, not per line */
  while (ids && !w->failed && now_s(CLOCK_MONOTONIC) < end) {
    for (size_t i = 0; i < w->nlines; i++) {
      long k = lp_tok_encode(w->tok, w->lines[i], strlen(w->lines[i]), ids, cap);
      if (k > (long)cap) { /* room, and again: the contract says so */
        int32_t *more = realloc(ids, (size_t)k * sizeof(*ids));
        if (!more) break;
        ids = more;
        cap = (size_t)k;
        k = lp_tok_encode(w->tok, w->lines[i], strlen(w->lines[i]), ids, cap);
      }
      if (k < 0) {
        w->failed = 1;
        break;
      }
      w->tokens += (unsigned long long)k;
      w->encoded++;
    }
  }
  if (!ids) w->failed = 1;
  free(ids);
  return NULL;
}

/* The file's lines (newlines cut) into *lines, pointing into *text (both
 * owned by the caller). The count, or -errno (-ENOMEM). */
static long read_lines(const char *path, char **text, char ***lines) {
  FILE *f = fopen(path, "rb");
  if (!f) return -errno;
  size_t len = 0, cap = 1 << 16, n = 0, lcap = 1024;
  char *t = malloc(cap + 1);
  char **l = malloc(lcap * sizeof(*l));
  size_t got;
  int rc = t && l ? 0 : -ENOMEM;
  while (!rc && (got = fread(t + len, 1, cap - len, f)) > 0) {
    len += got;
    if (len == cap) {
      char *more = realloc(t, 2 * cap + 1);
      if (!more) rc = -ENOMEM;
      else t = more, cap *= 2;
    }
  }
  if (!rc && ferror(f)) rc = -EIO;
  fclose(f);
  if (!rc) t[len] = 0;
  for (char *p = t; !rc && p < t + len;) {
    char *nl = memchr(p, '\n', (size_t)(t + len - p));
    if (!nl) nl = t + len;
    *nl = 0;
    if (n == lcap) {
      char **more = realloc(l, 2 * lcap * sizeof(*l));
      if (!more) {
        rc = -ENOMEM;
        break;
      }
      l = more;
      lcap *= 2;
    }
    l[n++] = p;
    p = nl + 1;
  }
  if (rc) {
    free(t);
    free(l);
    return rc;
  }
  *text = t;
  *lines = l;
  return (long)n;
}

/* threads workers encoding the lines for seconds with tok: prints the
 * figures (named by engine), *rate the tokens per CPU-second; 0 or 1 (failed). */
static int run(const lp_tok_t *tok, char **lines, long nlines, double seconds, long threads, const char *engine,
               double *rate) {
  tr_worker_t w[TR_MAX_THREADS];
  pthread_t th[TR_MAX_THREADS];
  double cpu0 = now_s(CLOCK_PROCESS_CPUTIME_ID), t0 = now_s(CLOCK_MONOTONIC);
  long started = 0;
  for (; started < threads; started++) {
    w[started] = (tr_worker_t){tok, lines, (size_t)nlines, seconds, 0, 0, 0};
    if (pthread_create(&th[started], NULL, encode_loop, &w[started])) break;
  }
  unsigned long long tokens = 0, encoded = 0;
  int failed = started < threads;
  for (long i = 0; i < started; i++) {
    pthread_join(th[i], NULL);
    tokens += w[i].tokens;
    encoded += w[i].encoded;
    failed |= w[i].failed;
  }
  double cpu = now_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0, wall = now_s(CLOCK_MONOTONIC) - t0;
  if (!failed) {
    printf("%s, %ld threads: %llu lines, %llu tokens in %.2f s (%.2f CPU s): %.0f tokens per CPU-second, "
           "%.0f tokens/s in all, %.0f lines per CPU-second\n",
           engine, threads, encoded, tokens, wall, cpu, tokens / cpu, tokens / wall, encoded / cpu);
    *rate = tokens / cpu;
  } else {
    fprintf(stderr, "lanepack-tokrate: the tokenizer refused a line or memory ran out\n");
  }
  return failed;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: lanepack-tokrate MODEL FILE [SECONDS] [THREADS] [EXTRA_OPTIONS]\n");
    return 2;
  }
  double seconds = argc > 3 ? strtod(argv[3], NULL) : 3;
  long threads = argc > 4 ? strtol(argv[4], NULL, 10) : 1;
  if (!(seconds > 0) || threads < 1 || threads > TR_MAX_THREADS) {
    fprintf(stderr, "lanepack-tokrate: SECONDS must be > 0 and THREADS 1..%d\n", TR_MAX_THREADS);
    return 2;
  }
  char *text = NULL, **lines = NULL;
  long nlines = read_lines(argv[2], &text, &lines);
  if (nlines <= 0) {
    fprintf(stderr, "lanepack-tokrate: cannot read lines from '%s': %s\n", argv[2],
            nlines ? strerror((int)-nlines) : "empty file");
    return 1;
  }
  const char *only = getenv("LP_TOKRATE_ENGINE");
  double rate[2] = {0, 0};
  int failed = 0, runs = 0;
  for (int lib = 0; lib < 2 && !failed; lib++) {
    if (only && *only && strcmp(only, lib ? "library" : "native")) continue;
    char err[256];
    const char *opts = argc > 5 ? argv[5] : NULL, *why = NULL;
    lp_tok_t *tok = lib ? lp_tok_load_library(argv[1], opts, err, sizeof(err)) : lp_tok_load(argv[1], opts, err, sizeof(err));
    if (!tok) {
      fprintf(stderr, "lanepack-tokrate: %s\n", err);
      failed = 1;
      break;
    }
    const char *engine = lp_tok_engine(tok, &why);
    if (!lib && strcmp(engine, "native")) { /* the library's run below is this model's only one */
      printf("engine %s (%s)\n", engine, why);
      lp_tok_free(tok);
      continue;
    }
    failed = run(tok, lines, nlines, seconds, threads, engine, &rate[lib]);
    runs++;
    lp_tok_free(tok);
  }
  if (!failed && rate[0] > 0 && rate[1] > 0)
    printf("native / libsentencepiece: %.2fx tokens per CPU-second\n", rate[0] / rate[1]);
  free(lines);
  free(text);
  return failed || !runs;
}
