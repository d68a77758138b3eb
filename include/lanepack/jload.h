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
 * it cannot decode so is left to jansson. The caller owns the tree. Out of
 * memory, json_error_code(je) is json_error_out_of_memory (also where jansson
 * gives no message: its lexer could not start). */
json_t *lp_jload(const char *body, size_t len, size_t flags, json_error_t *je);

/* The same tree without copying the long strings: they are decoded in place
 * in body (which must be writable and outlive the tree) and the tree holds
 * references to them, read with lp_jload_str (json_string_value sees ""
 * there). A body refused is left as it came; one accepted is changed where
 * its long strings were. A 4 MiB text costs no copy and no fresh pages. */
json_t *lp_jload_inplace(char *body, size_t len, size_t flags, json_error_t *je);

/* A string of a tree from lp_jload or lp_jload_inplace: its text and length
 * in *len (a reference's text in the body), or NULL and 0 when v is not a
 * string. */
const char *lp_jload_str(const json_t *v, size_t *len);

/* What a route answers for a body jansson refuses for a \u0000 in a string
 * (json_error_null_character): valid JSON, whose NUL characters lanepack
 * does not take in text (its tokenizers read C strings). */
#define LP_JLOAD_NUL_MSG "a string holds \\u0000 (U+0000): text with NUL characters is not taken"

/* The least length of a string decoded apart (and of a body scanned for
 * them); tests and fuzzers set 1 to reach the scan with short inputs. */
size_t lp_jload_min(void);
void lp_jload_set_min(size_t min);

#endif
