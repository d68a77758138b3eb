/* W3C Trace Context: the traceparent header read and written
 * ("00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>") and the
 * tracestate header checked, so a request can
 * be followed from its client through the proxy and its batch to the backend.
 * No I/O. */
#ifndef LANEPACK_TRACE_H
#define LANEPACK_TRACE_H

#include <stddef.h>
#include <stdint.h>

/* A version-00 traceparent's length, and the buffer that holds one. */
#define LP_TRACEPARENT_LEN 55
#define LP_TRACEPARENT_SIZE (LP_TRACEPARENT_LEN + 1)

typedef struct lp_trace_s {
  uint8_t trace_id[16];
  uint8_t parent_id[8];
  uint8_t flags;
} lp_trace_t;

/* Reads a traceparent value (v, n bytes; surrounding spaces and tabs allowed)
 * as the specification says: lower-case hex only, version ff refused, version
 * 00 exactly 55 characters, a later version at least that with a '-' after
 * the flags, trace-id and parent-id not all zero. 0 with *t, or -EINVAL. */
int lp_trace_parse(const char *v, size_t n, lp_trace_t *t);

/* Writes "00-<trace_id>-<span_id>-<flags>" and a NUL into out. */
void lp_trace_format(const uint8_t trace_id[16], const uint8_t span_id[8], uint8_t flags,
                     char out[LP_TRACEPARENT_SIZE]);

/* The tracestate the proxy keeps, at most (W3C: a proxy passes on at least
 * 512 characters; more is cut at whole list-members from the end), and the
 * most members a valid one has. */
#define LP_TRACESTATE_MAX 512
#define LP_TRACESTATE_SIZE (LP_TRACESTATE_MAX + 1)
#define LP_TRACESTATE_MEMBERS 32

/* Reads a tracestate value (v, n bytes: the headers of a request joined with
 * commas) into out as a clean list: members "key=value" checked against the
 * grammar, optional whitespace and empty members dropped, joined by ',';
 * members past LP_TRACESTATE_MAX characters dropped from the end. Returns the
 * length written (0: none), or -EINVAL when the value is invalid (a bad
 * member, a repeated key, more than LP_TRACESTATE_MEMBERS), which W3C says to
 * discard whole. */
int lp_trace_state_clean(const char *v, size_t n, char out[LP_TRACESTATE_SIZE]);

/* Fills n bytes from the splitmix64 state *s, never all zero (a valid id). */
void lp_trace_random(uint64_t *s, uint8_t *out, size_t n);

#endif
