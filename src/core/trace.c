/* The traceparent codec and the tracestate checker (see trace.h). */
#include "lanepack/trace.h"

#include <errno.h>
#include <string.h>

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10; /* lower case only: upper case is invalid */
  return -1;
}

/* n bytes from 2n hex digits at p: 0, or -1 on a bad digit. */
static int unhex(const char *p, uint8_t *out, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int hi = hexval(p[2 * i]), lo = hexval(p[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return 0;
}

static int all_zero(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

int lp_trace_parse(const char *v, size_t n, lp_trace_t *t) {
  while (n && (*v == ' ' || *v == '\t')) v++, n--;
  while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
  uint8_t ver;
  if (n < LP_TRACEPARENT_LEN || unhex(v, &ver, 1) || ver == 0xff) return -EINVAL;
  if (ver == 0 ? n != LP_TRACEPARENT_LEN : (n > LP_TRACEPARENT_LEN && v[LP_TRACEPARENT_LEN] != '-'))
    return -EINVAL;
  if (v[2] != '-' || v[35] != '-' || v[52] != '-') return -EINVAL;
  lp_trace_t x;
  if (unhex(v + 3, x.trace_id, 16) || unhex(v + 36, x.parent_id, 8) || unhex(v + 53, &x.flags, 1))
    return -EINVAL;
  if (all_zero(x.trace_id, 16) || all_zero(x.parent_id, 8)) return -EINVAL;
  *t = x;
  return 0;
}

static void put_hex(char *o, const uint8_t *p, size_t n) {
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) o[2 * i] = hex[p[i] >> 4], o[2 * i + 1] = hex[p[i] & 15];
}

void lp_trace_format(const uint8_t trace_id[16], const uint8_t span_id[8], uint8_t flags,
                     char out[LP_TRACEPARENT_SIZE]) {
  out[0] = '0', out[1] = '0', out[2] = '-';
  put_hex(out + 3, trace_id, 16);
  out[35] = '-';
  put_hex(out + 36, span_id, 8);
  out[52] = '-';
  put_hex(out + 53, &flags, 1);
  out[LP_TRACEPARENT_LEN] = '\0';
}

void lp_trace_random(uint64_t *s, uint8_t *out, size_t n) {
  do {
    for (size_t i = 0; i < n; i += 8) {
      uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      for (size_t k = 0; k < 8 && i + k < n; k++) out[i + k] = (uint8_t)(z >> (8 * k));
    }
  } while (all_zero(out, n));
}

static int lcalpha(char c) { return c >= 'a' && c <= 'z'; }
static int digit(char c) { return c >= '0' && c <= '9'; }
static int keychr(char c) { return lcalpha(c) || digit(c) || c == '_' || c == '-' || c == '*' || c == '/'; }

/* key = simple-key / tenant-id "@" system-id (W3C Trace Context 3.3.1.3.1). */
static int key_ok(const char *k, size_t n) {
  const char *at = memchr(k, '@', n);
  if (!at) {
    if (n < 1 || n > 256 || !lcalpha(k[0])) return 0;
    for (size_t i = 1; i < n; i++)
      if (!keychr(k[i])) return 0;
    return 1;
  }
  size_t tn = (size_t)(at - k), sn = n - tn - 1;
  if (tn < 1 || tn > 241 || !(lcalpha(k[0]) || digit(k[0]))) return 0;
  if (sn < 1 || sn > 14 || !lcalpha(at[1])) return 0;
  for (size_t i = 1; i < n; i++)
    if (i != tn && !keychr(k[i])) return 0;
  return 1;
}

/* value = 0*255(chr) nblk-chr: printable ASCII but ',' and '=', not ending in a space. */
static int value_ok(const char *v, size_t n) {
  if (n < 1 || n > 256 || v[n - 1] == ' ') return 0;
  for (size_t i = 0; i < n; i++)
    if (v[i] < 0x20 || v[i] > 0x7e || v[i] == ',' || v[i] == '=') return 0;
  return 1;
}

int lp_trace_state_clean(const char *v, size_t n, char out[LP_TRACESTATE_SIZE]) {
  struct { const char *k; size_t kn, n; } m[LP_TRACESTATE_MEMBERS];
  size_t nm = 0, len = 0, i = 0;
  while (i <= n) {
    size_t e = i;
    while (e < n && v[e] != ',') e++;
    size_t a = i, b = e;
    while (a < b && (v[a] == ' ' || v[a] == '\t')) a++;
    while (b > a && (v[b - 1] == ' ' || v[b - 1] == '\t')) b--;
    if (a < b) {
      const char *eq = memchr(v + a, '=', b - a);
      if (!eq || nm == LP_TRACESTATE_MEMBERS) return -EINVAL;
      size_t kn = (size_t)(eq - (v + a));
      if (!key_ok(v + a, kn) || !value_ok(eq + 1, b - a - kn - 1)) return -EINVAL;
      for (size_t j = 0; j < nm; j++)
        if (m[j].kn == kn && memcmp(m[j].k, v + a, kn) == 0) return -EINVAL;
      m[nm].k = v + a, m[nm].kn = kn, m[nm].n = b - a;
      nm++;
    }
    i = e + 1;
  }
  for (size_t j = 0; j < nm; j++) {
    size_t need = m[j].n + (len ? 1 : 0);
    if (len + need > LP_TRACESTATE_MAX) break; /* the rest cut from the end */
    if (len) out[len++] = ',';
    memcpy(out + len, m[j].k, m[j].n);
    len += m[j].n;
  }
  out[len] = '\0';
  return (int)len;
}
