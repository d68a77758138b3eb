/* Tensor datatypes and elements: reading raw little-endian bytes of any OIP
 * numeric type and writing them as exact JSON numbers. */
#include "lanepack/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "binary tensors are little-endian: this code reads them in host order"
#endif

static const struct {
  const char *name;
  size_t size;
} dtypes[] = {
    [LP_DT_INVALID] = {"INVALID", 0}, [LP_DT_BOOL] = {"BOOL", 1},     [LP_DT_UINT8] = {"UINT8", 1},
    [LP_DT_UINT16] = {"UINT16", 2},   [LP_DT_UINT32] = {"UINT32", 4}, [LP_DT_UINT64] = {"UINT64", 8},
    [LP_DT_INT8] = {"INT8", 1},       [LP_DT_INT16] = {"INT16", 2},   [LP_DT_INT32] = {"INT32", 4},
    [LP_DT_INT64] = {"INT64", 8},     [LP_DT_FP16] = {"FP16", 2},     [LP_DT_BF16] = {"BF16", 2},
    [LP_DT_FP32] = {"FP32", 4},       [LP_DT_FP64] = {"FP64", 8},     [LP_DT_BYTES] = {"BYTES", 0},
};

lp_dtype_t lp_dtype_parse(const char *name) {
  for (int t = LP_DT_BOOL; t <= LP_DT_BYTES; t++)
    if (strcmp(name, dtypes[t].name) == 0) return (lp_dtype_t)t;
  return LP_DT_INVALID;
}

const char *lp_dtype_name(lp_dtype_t t) { return t <= LP_DT_BYTES ? dtypes[t].name : "INVALID"; }
size_t lp_dtype_size(lp_dtype_t t) { return t <= LP_DT_BYTES ? dtypes[t].size : 0; }
int lp_dtype_is_float(lp_dtype_t t) { return t >= LP_DT_FP16 && t <= LP_DT_FP64; }

float lp_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal: normalise */
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) {
        man <<= 1;
        exp--;
      }
      bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

float lp_bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t lp_float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) /* infinity, or NaN kept quiet with its top payload bits */
    return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000u ? 0x200 | ((a >> 13) & 0x3ff) : 0));
  if (a >= 0x477ff000u) return sign | 0x7c00; /* 65520 and up round past 65504 */
  if (a < 0x38800000u) {                      /* under 2^-14: a subnormal half, or zero */
    if (a < 0x33000000u) return sign;         /* 2^-25 and under round to zero (the tie to even) */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* m x 2^(e-150) in units of 2^-24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return (uint16_t)(sign | q); /* 0x400 when it rounds up to the smallest normal: right */
  }
  uint32_t r = a - 0x38000000u; /* exponent re-biased from 127 to 15 */
  uint32_t q = r >> 13, rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1))) q++; /* a carry into the exponent is right */
  return (uint16_t)(sign | q);
}

uint16_t lp_float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* NaN stays NaN */
  x += 0x7fffu + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

/* Unaligned little-endian reads of element i. */
static uint16_t u16_at(const uint8_t *p, size_t i) { uint16_t v; memcpy(&v, p + i * 2, 2); return v; }
static uint32_t u32_at(const uint8_t *p, size_t i) { uint32_t v; memcpy(&v, p + i * 4, 4); return v; }
static uint64_t u64_at(const uint8_t *p, size_t i) { uint64_t v; memcpy(&v, p + i * 8, 8); return v; }

/* A double as an integer without undefined behaviour: truncated, saturated at
 * the ends, NaN as 0 (a float tensor read as integers). */
static int64_t real_to_int(double d) {
  if (d != d) return 0;
  if (d >= 9223372036854775808.0) return INT64_MAX;
  if (d < -9223372036854775808.0) return INT64_MIN;
  return (int64_t)d;
}

int64_t lp_tensor_int(const lp_tensor_t *t, size_t i) {
  if (!t->raw) return t->ints ? t->ints[i] : real_to_int(t->reals[i]);
  switch (t->dtype) {
    case LP_DT_BOOL: return t->raw[i] != 0;
    case LP_DT_UINT8: return t->raw[i];
    case LP_DT_UINT16: return u16_at(t->raw, i);
    case LP_DT_UINT32: return u32_at(t->raw, i);
    case LP_DT_UINT64: return (int64_t)u64_at(t->raw, i);
    case LP_DT_INT8: return (int8_t)t->raw[i];
    case LP_DT_INT16: return (int16_t)u16_at(t->raw, i);
    case LP_DT_INT32: return (int32_t)u32_at(t->raw, i);
    case LP_DT_INT64: return (int64_t)u64_at(t->raw, i);
    default: return real_to_int(lp_tensor_real(t, i));
  }
}

double lp_tensor_real(const lp_tensor_t *t, size_t i) {
  if (!t->raw) {
    if (t->reals) return t->reals[i];
    return t->dtype == LP_DT_UINT64 ? (double)(uint64_t)t->ints[i] : (double)t->ints[i];
  }
  switch (t->dtype) {
    case LP_DT_FP16: return lp_half_to_float(u16_at(t->raw, i));
    case LP_DT_BF16: return lp_bf16_to_float(u16_at(t->raw, i));
    case LP_DT_FP32: {
      uint32_t b = u32_at(t->raw, i);
      float f;
      memcpy(&f, &b, 4);
      return f;
    }
    case LP_DT_FP64: {
      uint64_t b = u64_at(t->raw, i);
      double d;
      memcpy(&d, &b, 8);
      return d;
    }
    case LP_DT_UINT64: return (double)u64_at(t->raw, i);
    default: return (double)lp_tensor_int(t, i);
  }
}

void lp_tensor_put_raw(uint8_t *dst, const lp_tensor_t *t, size_t first, size_t n) {
  size_t esz = lp_dtype_size(t->dtype);
  if (t->raw) {
    memcpy(dst, t->raw + first * esz, n * esz);
    return;
  }
  for (size_t i = 0; i < n; i++, dst += esz) {
    size_t k = first + i;
    switch (t->dtype) {
      case LP_DT_FP64: {
        double d = lp_tensor_real(t, k);
        memcpy(dst, &d, 8);
        break;
      }
      case LP_DT_FP32: {
        float f = (float)lp_tensor_real(t, k);
        memcpy(dst, &f, 4);
        break;
      }
      case LP_DT_FP16:
      case LP_DT_BF16: {
        /* through float: the text of a half value reads back to it exactly */
        float f = (float)lp_tensor_real(t, k);
        uint16_t h = t->dtype == LP_DT_FP16 ? lp_float_to_half(f) : lp_float_to_bf16(f);
        memcpy(dst, &h, 2);
        break;
      }
      default: { /* integers and BOOL: the low bytes of the value (little-endian) */
        int64_t v = lp_tensor_int(t, k);
        memcpy(dst, &v, esz);
        break;
      }
    }
  }
}

/* Writes digits (p significant, as an integer m with decimal exponent e10 of
 * its first digit) the way %g would: fixed for -4 <= e10 < style (printf's
 * precision; the shortest form passes its digits, trailing zeros dropped
 * first), else d.ddde+XX. */
static size_t put_digits(char *out, int neg, uint64_t m, int p, int e10, int style) {
  char d[20];
  for (int i = p - 1; i >= 0; i--) {
    d[i] = (char)('0' + m % 10);
    m /= 10;
  }
  while (p > 1 && d[p - 1] == '0') p--; /* %g drops trailing zeros */
  if (style == 0) style = p;
  size_t k = 0;
  if (neg) out[k++] = '-';
  if (e10 >= -4 && e10 < style) {
    if (e10 < 0) {
      out[k++] = '0';
      out[k++] = '.';
      for (int i = -1; i > e10; i--) out[k++] = '0';
      for (int i = 0; i < p; i++) out[k++] = d[i];
    } else {
      for (int i = 0; i <= e10; i++) out[k++] = d[i];
      if (p > e10 + 1) {
        out[k++] = '.';
        for (int i = e10 + 1; i < p; i++) out[k++] = d[i];
      }
    }
  } else {
    out[k++] = d[0];
    if (p > 1) {
      out[k++] = '.';
      for (int i = 1; i < p; i++) out[k++] = d[i];
    }
    out[k++] = 'e';
    out[k++] = e10 < 0 ? '-' : '+';
    int a = e10 < 0 ? -e10 : e10;
    if (a >= 100) out[k++] = (char)('0' + a / 100);
    out[k++] = (char)('0' + a / 10 % 10);
    out[k++] = (char)('0' + a % 10);
  }
  out[k] = '\0';
  return k;
}

/* 5^0 .. 5^27: the largest below 2^63 */
static const uint64_t pow5_u64[28] = {
    1ull, 5ull, 25ull, 125ull, 625ull, 3125ull, 15625ull, 78125ull, 390625ull, 1953125ull, 9765625ull,
    48828125ull, 244140625ull, 1220703125ull, 6103515625ull, 30517578125ull, 152587890625ull,
    762939453125ull, 3814697265625ull, 19073486328125ull, 95367431640625ull, 476837158203125ull,
    2384185791015625ull, 11920928955078125ull, 59604644775390625ull, 298023223876953125ull,
    1490116119384765625ull, 7450580596923828125ull};

/* round(a * 10^(8 - e10)) half to even, for a = m * 2^e2 (m < 2^24) with
 * -19 <= e10 <= 19: exact in 128 bits. UINT64_MAX where it would not fit. */
static uint64_t scale9(uint64_t m, int e2, int e10) {
  int s = 8 - e10;
  /* outside the table (not reached within the caller's [1e-19, 1e19) guard):
   * e10 far too low scales a up past 10^9, far too high down to nothing */
  if (s > 27) return UINT64_MAX;
  if (s < -11) return 0;
  unsigned __int128 x, q, r, half;
  if (s >= 0) { /* m * 5^s * 2^(e2 + s): below 2^87 before the shift */
    x = (unsigned __int128)m * pow5_u64[s];
    int k = e2 + s;
    if (k >= 40) return UINT64_MAX;
    if (k >= 0) return (x << k) > UINT64_MAX ? UINT64_MAX : (uint64_t)(x << k);
    if (-k >= 127) return 0;
    q = x >> -k;
    r = x - (q << -k);
    half = (unsigned __int128)1 << (-k - 1);
  } else { /* a >= 10^9, so e2 >= 6: m * 2^e2 / 10^-s */
    if (e2 > 100) return UINT64_MAX;
    unsigned __int128 den = 1;
    for (int i = 0; i < -s; i++) den *= 10;
    x = (unsigned __int128)m << e2;
    q = x / den;
    r = (x % den) * 2;
    half = den;
  }
  if (r > half || (r == half && (q & 1))) q++;
  return q > UINT64_MAX ? UINT64_MAX : (uint64_t)q;
}

size_t lp_fmt_float_g9(char *out, float v) {
  double a = fabs((double)v);
  /* zero, NaN, infinities and the ends of the range: printf's own */
  if (!(a >= 1e-19 && a < 1e19)) return (size_t)snprintf(out, 32, "%.9g", (double)v);
  int ex;
  double fr = frexp(a, &ex);
  uint64_t m = (uint64_t)ldexp(fr, 24); /* exact: a float has 24 significant bits */
  /* the first digit's exponent from the binary one (log10(2) = 0.30103):
   * one low at most, or off by the carry of rounding to 10^9 */
  int e2 = ex - 24, e10 = (int)floor((ex - 1) * 0.30102999566398120);
  uint64_t q = scale9(m, e2, e10);
  for (int k = 0; k < 3 && (q < 100000000ull || q >= 1000000000ull); k++) {
    e10 += q < 100000000ull ? -1 : 1;
    q = scale9(m, e2, e10);
  }
  if (q < 100000000ull || q >= 1000000000ull) return (size_t)snprintf(out, 32, "%.9g", (double)v);
  return put_digits(out, v < 0, q, 9, e10, 9);
}

/* Shortest round trip without printf: for p = 1, 2, ... significant digits the
 * value is scaled to a p-digit integer in long double (enough headroom that the
 * scaling's own error stays far below half a unit of the last digit), written,
 * and kept when it parses back to the same value. A value whose digits the
 * scaling cannot pin down (at the range's ends) falls back to printf. */
/* Powers of ten 10^-360 .. 10^360 in long double, filled once (powl is slow). */
#define P10_MIN (-360)
#define P10_N 721
static long double p10[P10_N];
static once_flag p10_once = ONCE_FLAG_INIT; /* safe when loops run on several threads */

static void p10_fill(void) {
  for (int i = 0; i < P10_N; i++) p10[i] = powl(10.0L, (long double)(i + P10_MIN));
}

static long double pow10l_(int e) {
  call_once(&p10_once, p10_fill);
  return p10[e - P10_MIN];
}

static size_t shortest(char *out, long double v, int maxp, int is_float) {
  int neg = v < 0;
  long double a = neg ? -v : v;
  /* the decimal exponent of the first digit: from the binary one, then exact */
  int e2;
  frexpl(a, &e2);
  int e10 = (int)floor((double)(e2 - 1) * 0.30102999566398120);
  while (e10 + 1 < 330 && a >= pow10l_(e10 + 1)) e10++;
  while (e10 > -345 && a < pow10l_(e10)) e10--;
  uint64_t top = 1;
  for (int p = 1; p <= maxp; p++) {
    top *= 10;
    int sh = p - 1 - e10;
    if (sh < P10_MIN || sh >= P10_MIN + P10_N) break;
    uint64_t m = (uint64_t)llroundl(a * pow10l_(sh));
    int e = e10;
    if (m >= top) { /* rounding carried into a new digit */
      m /= 10;
      e++;
    }
    if (m == 0 || m < top / 10) continue;
    size_t n = put_digits(out, neg, m, p, e, 0);
    if (is_float ? strtof(out, NULL) == (float)v : strtod(out, NULL) == (double)v) return n;
  }
  int n = snprintf(out, 32, is_float ? "%.9g" : "%.17g", (double)v);
  return (size_t)n;
}

size_t lp_fmt_double(char *out, double v) {
  if (v == 0) {
    strcpy(out, signbit(v) ? "-0.0" : "0");
    return strlen(out);
  }
  return shortest(out, (long double)v, 17, 0);
}

size_t lp_fmt_float(char *out, float v) {
  if (v == 0) {
    strcpy(out, signbit(v) ? "-0.0" : "0");
    return strlen(out);
  }
  return shortest(out, (long double)v, 9, 1);
}

static void put_elem(lp_buf_t *b, const lp_tensor_t *t, size_t i, unsigned flags) {
  char tmp[32];
  size_t n;
  if (!lp_dtype_is_float(t->dtype)) {
    if (t->dtype == LP_DT_UINT64) { /* its bits, read unsigned in either form */
      lp_buf_u64(b, (uint64_t)lp_tensor_int(t, i));
      return;
    }
    if (t->dtype == LP_DT_BOOL) {
      lp_buf_puts(b, lp_tensor_int(t, i) ? "true" : "false");
      return;
    }
    lp_buf_i64(b, lp_tensor_int(t, i));
    return;
  }
  double v = lp_tensor_real(t, i);
  /* single precision for every float type but FP64: a JSON value too large for
   * it (an FP16 tensor's "data" may hold anything) becomes infinite there */
  if (t->dtype != LP_DT_FP64) v = (double)(float)v;
  if (!isfinite(v)) {
    if (!(flags & LP_TENSOR_JSON_NONFINITE)) lp_buf_puts(b, "null");
    else lp_buf_puts(b, isnan(v) ? "NaN" : v < 0 ? "-Infinity" : "Infinity");
    return;
  }
  n = t->dtype == LP_DT_FP64 ? lp_fmt_double(tmp, v) : lp_fmt_float(tmp, (float)v);
  lp_buf_append(b, tmp, n);
}

void lp_tensor_write_json(lp_buf_t *b, const lp_tensor_t *t, size_t first, size_t n, size_t inner) {
  lp_tensor_write_json_ex(b, t, first, n, inner, 0);
}

void lp_tensor_write_json_ex(lp_buf_t *b, const lp_tensor_t *t, size_t first, size_t n, size_t inner,
                             unsigned flags) {
  if (inner <= 1 && !lp_dtype_is_float(t->dtype) && t->dtype != LP_DT_BOOL &&
      t->dtype != LP_DT_UINT64) {
    /* the common answer, integers: one reservation, digits written in place */
    if (lp_buf_reserve(b, n * 21 + 1)) return;
    char *o = b->data + b->len;
    if (t->raw && (t->dtype == LP_DT_INT64 || t->dtype == LP_DT_INT32)) {
      /* the binary answers of token models: read in place, no call per element */
      size_t w = t->dtype == LP_DT_INT64 ? 8 : 4;
      const uint8_t *at = t->raw + first * w;
      for (size_t i = 0; i < n; i++, at += w) {
        if (i) *o++ = ',';
        int64_t v;
        if (w == 8) {
          memcpy(&v, at, 8);
        } else {
          int32_t v32;
          memcpy(&v32, at, 4);
          v = v32;
        }
        o += lp_fmt_i64(o, v);
      }
      b->len = (size_t)(o - b->data);
      return;
    }
    for (size_t i = 0; i < n; i++) {
      if (i) *o++ = ',';
      o += lp_fmt_i64(o, lp_tensor_int(t, first + i));
    }
    b->len = (size_t)(o - b->data);
    return;
  }
  if (inner <= 1) {
    for (size_t i = 0; i < n; i++) {
      if (i) lp_buf_puts(b, ",");
      put_elem(b, t, first + i, flags);
    }
    return;
  }
  for (size_t g = 0; g < n / inner; g++) {
    lp_buf_puts(b, g ? ",[" : "[");
    for (size_t k = 0; k < inner; k++) {
      if (k) lp_buf_puts(b, ",");
      put_elem(b, t, first + g * inner + k, flags);
    }
    lp_buf_puts(b, "]");
  }
}
