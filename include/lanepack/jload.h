/* json_loadb for request bodies that carry long texts: the same tree, with the
 * long strings of the top level decoded by a scan 16 bytes at a time
 * instead of jansson's lexer (which costs 70-84 ms a MiB). */
#ifndef LANEPACK_JLOAD_H
#define LANEPACK_JLOAD_H

#include <jansson.h>
#include <stddef.h>

/* What json_loadb(body, len, flags, je) returns, the same tree and, on an
 * error, the same message: strings of at least lp_jload_min() bytes that are
 * the value of a top-level member or an element of a top-level array are
 * decoded apart and set into the tree jansson builds from the rest; anything
 * it cannot decode so is left to jansson. The caller owns the tree. */
json_t *lp_jload(const char *body, size_t len, size_t flags, json_error_t *je);

/* The least length of a string decoded apart (and of a body scanned for
 * them); tests and fuzzers set 1 to reach the scan with short inputs. */
size_t lp_jload_min(void);
void lp_jload_set_min(size_t min);

#endif
