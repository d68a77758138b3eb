/* lanepack --probe URL: a health check with no other tool (see probe.c). */
#ifndef LANEPACK_PROXY_PROBE_H
#define LANEPACK_PROXY_PROBE_H

#include <stddef.h>

/* GET url (http://HOST[:PORT]/PATH) within timeout_ms. Returns 0 for a 2xx
 * answer, 1 for anything else (err says what), 2 for a URL it cannot use. */
int lp_probe(const char *url, int timeout_ms, char *err, size_t errlen);

#endif
