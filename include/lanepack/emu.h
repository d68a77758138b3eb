/* The accelerator emulator's answer function, shared by the emulator, the load
 * generator's --verify and the tests: the k-th output of a segment depends on
 * that segment's tokens 0..k only, so a misplaced token or a leak across
 * segments changes it. h(-1) = 7, h(k) = (h(k-1) * 31 + t(k) + 1) mod 1000000007. */
#ifndef LANEPACK_EMU_H
#define LANEPACK_EMU_H

#include <stddef.h>
#include <stdint.h>

#define LP_EMU_MOD 1000000007ll
#define LP_EMU_SEED 7ll

/* out[k] = h(k) for the segment tokens[0..n). */
static inline void lp_emu_outputs(const int32_t *tokens, size_t n, int32_t *out) {
  int64_t h = LP_EMU_SEED;
  for (size_t k = 0; k < n; k++) {
    h = (h * 31 + (int64_t)tokens[k] + 1) % LP_EMU_MOD;
    if (h < 0) h += LP_EMU_MOD;
    out[k] = (int32_t)h;
  }
}

/* The last output of a segment: the per-segment answer. */
static inline int32_t lp_emu_last(const int32_t *tokens, size_t n) {
  int64_t h = LP_EMU_SEED;
  for (size_t k = 0; k < n; k++) {
    h = (h * 31 + (int64_t)tokens[k] + 1) % LP_EMU_MOD;
    if (h < 0) h += LP_EMU_MOD;
  }
  return (int32_t)h;
}

/* Feature k of an output h in the emulator's float form (v2 with a trailing
 * dimension): small enough for FP32 (and FP16) to hold exactly. */
static inline float lp_emu_feature(int32_t h, unsigned k) {
  return (float)(h % 1000) + 0.25f * (float)k;
}

#endif
