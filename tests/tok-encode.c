/* The tokenizer as a filter, for tests/test-tokenizer.py: each line of stdin
 * (without its newline) encoded with lanepack/tokenizer.h, its ids printed
 * space-separated on a line, as spm_encode --output_format=id prints them.
 * Usage: tok-encode MODEL [EXTRA_OPTIONS] < lines */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "lanepack/tokenizer.h"

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: tok-encode MODEL [EXTRA_OPTIONS] < lines\n");
    return 2;
  }
  char err[256];
  lp_tok_t *t = lp_tok_load(argv[1], argc > 2 ? argv[2] : NULL, err, sizeof(err));
  if (!t) {
    fprintf(stderr, "tok-encode: %s\n", err);
    return 1;
  }
  char *line = NULL;
  size_t cap = 0, idcap = 16;
  int32_t *ids = malloc(idcap * sizeof(*ids));
  ssize_t n;
  int rc = 0;
  while (ids && (n = getline(&line, &cap, stdin)) >= 0) {
    if (n > 0 && line[n - 1] == '\n') n--;
    long k = lp_tok_encode(t, line, (size_t)n, ids, idcap);
    if (k > (long)idcap) { /* room, and again: the contract says so */
      int32_t *more = realloc(ids, (size_t)k * sizeof(*ids));
      if (!more) break;
      ids = more;
      idcap = (size_t)k;
      k = lp_tok_encode(t, line, (size_t)n, ids, idcap);
    }
    if (k < 0) {
      fprintf(stderr, "tok-encode: %s\n", strerror((int)-k));
      rc = 1;
      break;
    }
    for (long i = 0; i < k; i++) printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
  }
  if (!ids) rc = 1;
  free(ids);
  free(line);
  lp_tok_free(t);
  return rc;
}
