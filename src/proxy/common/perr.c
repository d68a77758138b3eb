/* Why a request is refused, written down where it is found (a front parsing
 * it, the scheduler admitting it) and answered by the front in its dialect. */
#include <stdarg.h>
#include <stdio.h>

#include "common/common.h"

void lp__perr_vset(lp_perr_t *e, int status, const char *code, const char *fmt, va_list ap) {
  vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
  e->status = status;
  e->code = code;
}

void lp__perr_set(lp_perr_t *e, int status, const char *code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lp__perr_vset(e, status, code, fmt, ap);
  va_end(ap);
}
