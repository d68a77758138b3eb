/* What every thread of the proxy reads or calls (src/proxy/common/ and a few
 * macros): container_of, the relaxed counters, the clock, refusals (perr.c),
 * giving memory back (trim.c). Every other header of src/proxy includes it. */
#ifndef LANEPACK_PROXY_COMMON_H
#define LANEPACK_PROXY_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* Counters one thread writes and another reads (a front's, read by the
 * front rendering /metrics): relaxed loads and stores, no locked
 * instruction (the owner is the only writer). */
#define LP_RELAXED_INC(x) __atomic_store_n(&(x), __atomic_load_n(&(x), __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED)
#define LP_RELAXED_ADD(x, v) __atomic_store_n(&(x), __atomic_load_n(&(x), __ATOMIC_RELAXED) + (v), __ATOMIC_RELAXED)
#define LP_RELAXED_LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define LP_RELAXED_STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/* Why a request was refused: status, code, message, more error members. */
typedef struct lp_perr_s {
  int status;
  const char *code;
  char msg[256];
  char extra[96];
} lp_perr_t;
/* common/perr.c: e set to status, code and the formatted message. */
void lp__perr_set(lp_perr_t *e, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void lp__perr_vset(lp_perr_t *e, int status, const char *code, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* The allocator's trim threshold (main.c sets it): under load the top of a
 * heap is kept, and the quiet ticks give it back. */
#define LP_TRIM_THRESHOLD (256 << 20)
/* common/trim.c, any thread, about its own arena: gives back the free top of
 * the calling thread's malloc arena. */
void lp__trim_arena(void);

/* The proxy's clock for the core. */
static inline uint64_t lp__now(void) { return uv_hrtime(); }

#endif
