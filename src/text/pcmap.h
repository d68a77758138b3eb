/* SentencePiece's compiled character map (a Darts double-array trie over
 * UTF-8 keys, then the NUL-ended strings they map to): read once from its
 * blob, looked up by tokenizer.json's Precompiled normalizer (hf-precompiled.c)
 * and by the native SentencePiece encoder (spm-encode.c). */
#ifndef LP_TEXT_PCMAP_H
#define LP_TEXT_PCMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct lp__pcmap_s {
  uint32_t *units;  /* the double array, host order; owned */
  size_t nunits;
  const char *norm; /* the replacement strings, each NUL-ended (in the caller's blob) */
  size_t nnorm;
} lp__pcmap_t;

/* Reads the blob (len bytes: a little-endian uint32 size of the array, the
 * array, the strings; borrowed: m->norm points into it while m is used).
 * 0, -EINVAL (not such a map: the strings must end with a NUL and be UTF-8)
 * or -ENOMEM. */
int lp__pcmap_init(lp__pcmap_t *m, const unsigned char *blob, size_t len);

/* A match of key[0, len) from its start: the shortest one (longest == 0, as
 * tokenizer.json's Precompiled takes it) or the longest (as the library's
 * Normalizer takes it). Its replacement (NUL-ended), *mlen its key length;
 * NULL when none. Every index is checked: the map comes from a file. */
const char *lp__pcmap_match(const lp__pcmap_t *m, const unsigned char *key, size_t len, int longest, size_t *mlen);

/* What the keys beginning with byte c are, as bits: 1 c itself (*rep its
 * replacement, else NULL), 2 longer ones whose second byte is ASCII, 4 longer
 * ones whose second byte is not. */
int lp__pcmap_first(const lp__pcmap_t *m, unsigned char c, const char **rep);

void lp__pcmap_free(lp__pcmap_t *m);

#endif
