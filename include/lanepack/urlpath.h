/* A URL path segment's percent-escapes decoded (RFC 3986 section 2.1): a model
 * name in /v1/models/{model}/infer or /v2/models/{model}/... as a client's
 * library encoded it (a space as %20, a quote as %22). */
#ifndef LANEPACK_URLPATH_H
#define LANEPACK_URLPATH_H

#include <stddef.h>

/* in[0..n) decoded into out (cap bytes, NUL-terminated): the decoded length,
 * or -1 when a '%' is not followed by two hex digits, a byte decodes to NUL,
 * or the result does not fit in cap - 1 bytes. */
long lp_urlpath_decode(const char *in, size_t n, char *out, size_t cap);

#endif
