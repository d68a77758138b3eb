/* A small JSON scanner over raw bytes: skips values, compares keys, reads and
 * writes integer arrays without building a tree. Used where jansson's tree would
 * cost an allocation per element (token arrays, backend answers). */
#ifndef LANEPACK_JSCAN_H
#define LANEPACK_JSCAN_H

#include <stddef.h>
#include <stdint.h>

#define LP_JSCAN_MAX_DEPTH 64

/* Skips whitespace; returns the first other byte's position (maybe end). */
const char *lp_jscan_ws(const char *p, const char *end);

/* Skips one JSON value starting at p (no leading whitespace). Returns the byte
 * after it, or NULL when it is not valid JSON or nests deeper than max_depth. */
const char *lp_jscan_skip(const char *p, const char *end, int max_depth);

/* p points at a JSON string; sets *eq to whether it equals key exactly (escapes
 * are compared decoded only for plain ASCII keys). Returns the byte after it or NULL. */
const char *lp_jscan_key(const char *p, const char *end, const char *key, int *eq);

#endif
