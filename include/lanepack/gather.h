/* A body as a gather list: small bytes written into an owned buffer, large
 * ones borrowed by reference, read out in order into whatever buffer the
 * sender offers (a read callback), so a body is never copied whole. */
#ifndef LANEPACK_GATHER_H
#define LANEPACK_GATHER_H
#include <stddef.h>
#include <stdint.h>

#include "lanepack/buf.h"

/* A borrowed piece: len bytes at ref, read after the owned bytes
 * own[..own_at) that come before it. */
typedef struct {
  size_t own_at;
  const char *ref;
  size_t len;
} lp_gather_ref_t;

typedef struct lp_gather_s {
  lp_buf_t own;           /* the bytes written here (punctuation, numbers, names); owned */
  lp_gather_ref_t *refs;  /* borrowed pieces in order; owned (the bytes are not) */
  size_t nrefs, refs_cap;
  size_t total;           /* bytes in all, owned and borrowed */
  int oom;                /* a piece could not be recorded: the body is incomplete */
  size_t cur_seg, cur_off; /* read cursor: segment (even: owned run k/2, odd: ref k/2), offset */
} lp_gather_t;

void lp_gather_init(lp_gather_t *g);
void lp_gather_free(lp_gather_t *g);
/* Empties g for a new body, keeping its memory. */
void lp_gather_reset(lp_gather_t *g);
/* The owned buffer to append small bytes to with the lp_buf_ writers; what is
 * appended there comes after every piece recorded so far. */
static inline lp_buf_t *lp_gather_buf(lp_gather_t *g) { return &g->own; }
/* Appends p[0..n), borrowed (it must live and stay unchanged until the last
 * read); short pieces are copied instead, as a reference costs more. */
void lp_gather_ref(lp_gather_t *g, const void *p, size_t n);
/* Takes back the last byte when it is c (a trailing separator). */
void lp_gather_unput(lp_gather_t *g, char c);
/* All bytes, owned and borrowed (0 when oom). */
size_t lp_gather_len(lp_gather_t *g);
/* Copies up to cap bytes from the cursor into dst and moves the cursor;
 * returns how many (0 at the end). */
size_t lp_gather_read(lp_gather_t *g, char *dst, size_t cap);
/* Moves the cursor to byte offset at (a resend starts again). Returns 0 or
 * -EINVAL past the end. */
int lp_gather_seek(lp_gather_t *g, size_t at);
/* Appends the whole body to out (from the start, whatever the cursor). */
void lp_gather_flatten(lp_gather_t *g, lp_buf_t *out);
#endif
