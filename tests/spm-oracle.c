/* The native SentencePiece encoder against libsentencepiece, for
 * tests/test-spm-native.py: the model loaded both ways (lp_tok_load and
 * lp_tok_load_library), the engines checked (the reference's the library's),
 * then every text
 * of stdin (each a little-endian uint32 length and its bytes) encoded by both
 * with lp_tok_encode, lp_tok_encode_plain and lp_tok_encode_fit (several
 * limits, from either end). Prints the count and the first mismatches; exits
 * 1 on any. Usage: spm-oracle MODEL ENGINE [EXTRA_OPTIONS] < texts */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/tokenizer.h"

/* ids a text may have here: the test's texts are well under this */
#define SO_CAP (1u << 22)

static void show(const char *what, const char *text, size_t len, const int32_t *a, long na, const int32_t *b,
                 long nb) {
  fprintf(stderr, "%s differs for a text of %zu bytes: \"", what, len);
  for (size_t i = 0; i < len && i < 60; i++) fprintf(stderr, (unsigned char)text[i] < 0x20 || text[i] == '"' ? "\\x%02x" : "%c", (unsigned char)text[i]);
  fprintf(stderr, "\"\n  native (%ld):", na);
  for (long i = 0; i < na && i < 40; i++) fprintf(stderr, " %d", a[i]);
  fprintf(stderr, "\n  library (%ld):", nb);
  for (long i = 0; i < nb && i < 40; i++) fprintf(stderr, " %d", b[i]);
  fputc('\n', stderr);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: spm-oracle MODEL ENGINE [EXTRA_OPTIONS] < texts\n");
    return 2;
  }
  char err[256];
  const char *opts = argc > 3 ? argv[3] : NULL, *why = NULL;
  lp_tok_t *nat = lp_tok_load(argv[1], opts, err, sizeof(err));
  lp_tok_t *lib = nat ? lp_tok_load_library(argv[1], opts, err, sizeof(err)) : NULL;
  if (!nat || !lib) {
    fprintf(stderr, "spm-oracle: %s\n", err);
    return 1;
  }
  const char *engine = lp_tok_engine(nat, &why), *lib_engine = lp_tok_engine(lib, NULL);
  int bad = strcmp(engine, argv[2]) != 0 || strcmp(lib_engine, "libsentencepiece") != 0;
  if (bad) fprintf(stderr, "spm-oracle: engine %s (%s), not %s; the reference's %s\n", engine, why, argv[2], lib_engine);
  int32_t *a = malloc(SO_CAP * sizeof(*a)), *b = malloc(SO_CAP * sizeof(*b));
  char *text = NULL;
  size_t texts = 0, mismatches = 0;
  unsigned char hdr[4];
  while (a && b && fread(hdr, 1, 4, stdin) == 4) {
    size_t len = (size_t)hdr[0] | (size_t)hdr[1] << 8 | (size_t)hdr[2] << 16 | (size_t)hdr[3] << 24;
    free(text);
    if (!(text = malloc(len + 1)) || fread(text, 1, len, stdin) != len) {
      fprintf(stderr, "spm-oracle: a short text on stdin\n");
      bad = 1;
      break;
    }
    texts++;
    static const size_t limits[] = {1, 2, 7, 64};
    for (int call = 0; call < 2 + 8; call++) {
      long na, nb;
      const char *what;
      if (call == 0) {
        what = "lp_tok_encode";
        na = lp_tok_encode(nat, text, len, a, SO_CAP);
        nb = lp_tok_encode(lib, text, len, b, SO_CAP);
      } else if (call == 1) {
        what = "lp_tok_encode_plain";
        na = lp_tok_encode_plain(nat, text, len, a, SO_CAP);
        nb = lp_tok_encode_plain(lib, text, len, b, SO_CAP);
      } else {
        what = call % 2 ? "lp_tok_encode_fit (left)" : "lp_tok_encode_fit";
        size_t max = limits[(call - 2) / 2];
        na = lp_tok_encode_fit(nat, text, len, max, call % 2, a, SO_CAP);
        nb = lp_tok_encode_fit(lib, text, len, max, call % 2, b, SO_CAP);
      }
      if (na != nb || (na > 0 && memcmp(a, b, (size_t)(na < (long)SO_CAP ? na : (long)SO_CAP) * sizeof(*a)))) {
        if (mismatches++ < 3) show(what, text, len, a, na, b, nb);
      }
    }
  }
  printf("%zu texts, %zu mismatches, engine %s\n", texts, mismatches, engine);
  free(text);
  free(a);
  free(b);
  lp_tok_free(nat);
  lp_tok_free(lib);
  return bad || mismatches || !texts;
}
