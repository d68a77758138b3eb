/* Windowed tokenizing against the whole text's, for tests/test-tokwindow.py:
 * each NUL-terminated text of stdin, for several kept lengths both ways,
 * through lanepack/tokwindow.h and through lanepack/tokenizer.h on the whole
 * text. Prints one line per text: "ok LEN READ IDS LEFTDIFF" (READ: the most
 * bytes one windowed call tokenized; IDS: the whole text's plain ids;
 * LEFTDIFF: the most kept ids of one cut from the left that differ from the
 * whole text's, see test-tokwindow.py) or "mismatch LEN WHAT MAX LEFT" (a
 * count that differs, or an id of a cut from the right). Exit 1 on any
 * mismatch. Usage: tok-window MODEL [EXTRA_OPTIONS] < texts */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "lanepack/tokwindow.h"

static const size_t maxes[] = {1, 64, 512};

/* Room for a text's ids in one call: a piece covers at least one byte, and
 * the options add a few (bos, eos); a count past it is encoded again. */
#define IDS_SPARE 16

/* The whole text's ids (fit to max when max, else plain) into a fresh array:
 * one encode where the guess holds (the reference is half of the test's time,
 * which ran past meson's 300 s under the sanitizers when it encoded twice). */
static long whole(const lp_tok_t *t, const char *s, size_t n, size_t max, int left, int32_t **out) {
  size_t cap = max ? max : n + IDS_SPARE;
  for (;;) {
    *out = malloc((cap + 1) * sizeof(int32_t));
    if (!*out) return -ENOMEM;
    long k = max ? lp_tok_encode_fit(t, s, n, max, left, *out, cap) : lp_tok_encode_plain(t, s, n, *out, cap);
    if (k < 0 || (size_t)k <= cap) return k;
    free(*out);
    cap = (size_t)k;
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: tok-window MODEL [EXTRA_OPTIONS] < texts\n");
    return 2;
  }
  char err[256];
  lp_tok_t *t = lp_tok_load(argv[1], argc > 2 ? argv[2] : NULL, err, sizeof(err));
  if (!t) {
    fprintf(stderr, "tok-window: %s\n", err);
    return 1;
  }
  char *text = NULL;
  size_t tcap = 0, cap = 0;
  int32_t *ids = NULL;
  ssize_t len;
  int bad = 0;
  while ((len = getdelim(&text, &tcap, '\0', stdin)) > 0) {
    size_t n = (size_t)len;
    if (text[n - 1] == '\0') n--;
    size_t most = 0, leftdiff = 0; /* ids of a cut from the left that differ */
    const char *what = NULL;
    size_t wmax = 0;
    int wleft = 0;
    int32_t *plain = NULL;
    long np = whole(t, text, n, 0, 0, &plain);
    for (size_t m = 0; m < sizeof(maxes) / sizeof(maxes[0]) && !what; m++) {
      for (int left = 0; left < 2 && !what; left++) {
        size_t max = maxes[m], read = 0, diff = 0;
        int32_t *want = NULL;
        long kw = whole(t, text, n, max, left, &want);
        long kg = lp_tokw_fit(t, text, n, max, left, &ids, &cap, &read);
        if (read > most) most = read;
        if (kw != kg) what = "fit";
        for (long i = 0; !what && i < kw; i++) diff += want[i] != ids[i];
        free(want);
        long kp = lp_tokw_plain(t, text, n, max, left, &ids, &cap, &read);
        long keep = np < 0 ? np : np > (long)max ? (long)max : np;
        if (read > most) most = read;
        if (!what && kp != keep) what = "plain";
        for (long i = 0; !what && i < keep; i++) diff += (left ? plain[np - keep + i] : plain[i]) != ids[i];
        if (!what && diff && !left) what = "ids";
        if (diff > leftdiff) leftdiff = diff;
        long at_least = 0;
        int over = lp_tokw_over(t, text, n, max, &at_least);
        if (!what && (over < 0 || (over && (np <= (long)max || at_least > np || at_least <= (long)max))))
          what = "over";
        wmax = max;
        wleft = left;
      }
    }
    free(plain);
    if (what) {
      printf("mismatch %zu %s %zu %d\n", n, what, wmax, wleft);
      bad = 1;
    } else {
      printf("ok %zu %zu %ld %zu\n", n, most, np, leftdiff);
    }
  }
  free(ids);
  free(text);
  lp_tok_free(t);
  return bad;
}
