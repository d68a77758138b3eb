/* The bucket manager: the set of [lanes x bucket] shapes one model has compiled,
 * their states and counters, and admission of sequence lengths against them. */
#ifndef LANEPACK_BUCKET_H
#define LANEPACK_BUCKET_H

#include <stddef.h>
#include <stdint.h>

#define LP_BUCKET_MAX_SHAPES 16

typedef enum {
  LP_SHAPE_COMPILED = 0,  /* ready: the packer may choose it */
  LP_SHAPE_COMPILING,     /* being compiled: admits lengths, not chosen yet */
  LP_SHAPE_UNAVAILABLE    /* failed or withdrawn: neither admits nor is chosen */
} lp_shape_state_t;

typedef struct lp_shape_s {
  uint32_t lanes;
  uint32_t bucket;
  lp_shape_state_t state;
  uint64_t cost_ns;        /* expected backend time for one batch; 0 = unknown */
  /* counters, updated by lp_bucket_set_account() */
  uint64_t batches;
  uint64_t segments;
  uint64_t real_tokens;
  uint64_t pad_tokens;
} lp_shape_t;

typedef struct lp_bucket_set_s {
  lp_shape_t shapes[LP_BUCKET_MAX_SHAPES];
  size_t count;
} lp_bucket_set_t;

/* Admission verdicts. */
#define LP_ADMIT_OK 0
#define LP_ADMIT_EMPTY (-1)        /* zero-length sequence */
#define LP_ADMIT_TOO_LONG (-2)     /* longer than every usable bucket */
#define LP_ADMIT_NO_SHAPE (-3)     /* no shape is compiled or compiling */

void lp_bucket_set_init(lp_bucket_set_t *set);

/* Adds a shape; an existing shape with the same dimensions is left as it is.
 * A free slot (a removed shape's) is taken first. Returns its index, -EINVAL for zero dimensions, -ENOSPC when the set is full. */
int lp_bucket_set_add(lp_bucket_set_t *set, uint32_t lanes, uint32_t bucket);

/* Removes shape i, leaving its slot free (zero dimensions, unavailable) until
 * lp_bucket_set_add reuses it: the other shapes keep their indexes, which
 * batches in flight and per-shape counters hold. Free slots at the end leave
 * the count. Returns 0, or -ENOENT when there is no shape i. */
int lp_bucket_set_remove(lp_bucket_set_t *set, size_t i);

/* Parses "4x8192,8x2048" into the set (added to what is there). On a syntax error
 * returns -EINVAL and, if err is not NULL, writes a message naming the bad part. */
int lp_bucket_set_parse(lp_bucket_set_t *set, const char *spec, char *err, size_t errlen);

/* Index of the shape with these dimensions, or -ENOENT. */
int lp_bucket_set_find(const lp_bucket_set_t *set, uint32_t lanes, uint32_t bucket);

/* Largest bucket among shapes that are compiled or compiling; 0 if none. */
uint32_t lp_bucket_set_max_len(const lp_bucket_set_t *set);

/* Decides whether a sequence of len tokens can ever be packed: LP_ADMIT_OK or a
 * negative LP_ADMIT_* verdict; *max_len (if not NULL) gets the limit in force. */
int lp_bucket_set_admit(const lp_bucket_set_t *set, uint32_t len, uint32_t *max_len);

/* Records one dispatched batch of `segments` sequences holding `real` tokens. */
void lp_bucket_set_account(lp_bucket_set_t *set, size_t shape, uint32_t segments,
                           uint64_t real);

const char *lp_shape_state_name(lp_shape_state_t s);
const char *lp_admit_reason(int verdict);

#endif
