/* Helpers shared inside the packing core, and by the shell's scratch
 * buffers (header-only: no call crosses a layer). */
#ifndef LANEPACK_CORE_INTERNAL_H
#define LANEPACK_CORE_INTERNAL_H

#include <errno.h>
#include <stdlib.h>

/* Grows *p (elements of elem bytes, capacity *cap) to hold need elements,
 * doubling so that a steady workload stops allocating. Returns 0 or -ENOMEM;
 * on failure *p is unchanged. */
static inline int lp__grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * elem);
  if (q == NULL) return -ENOMEM;
  *p = q;
  *cap = c;
  return 0;
}

#endif
