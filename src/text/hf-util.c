/* The small pieces every part of the tokenizer.json tokenizer uses: growing
 * buffers, UTF-8, the Unicode classes Rust's std defines (from utf8proc's
 * tables), and the piece -> id hash. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "hf.h"

/* A buffer grows to at least twice its size: amortized linear appends. */
static int grow(void **p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap * 2 : 64;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * size);
  if (!q) return -ENOMEM;
  *p = q;
  *cap = c;
  return 0;
}

int lp__hf_ns_reserve(lp__hf_ns_t *s, size_t more) {
  size_t cap = s->cap;
  if (s->max && s->len + more > s->max) {
    s->over = 1;
    return -ENOMEM;
  }
  if (s->len + more <= cap) return 0;
  size_t cap2 = cap;
  if (grow((void **)&s->b, &cap, s->len + more, 1)) return -ENOMEM;
  if (grow((void **)&s->al, &cap2, s->len + more, sizeof(*s->al))) return -ENOMEM;
  s->cap = cap < cap2 ? cap : cap2;
  return 0;
}

int lp__hf_utf8_put(char *out, uint32_t cp) {
  return (int)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)out);
}

int lp__hf_ns_put(lp__hf_ns_t *s, uint32_t cp, lp__hf_al_t al) {
  if (lp__hf_ns_reserve(s, 4)) return -ENOMEM;
  int n = lp__hf_utf8_put(s->b + s->len, cp);
  for (int i = 0; i < n; i++) s->al[s->len + (size_t)i] = al;
  s->len += (size_t)n;
  return 0;
}

int lp__hf_ns_append(lp__hf_ns_t *s, const char *b, const lp__hf_al_t *al, size_t n) {
  if (n == 0) return 0; /* an empty string may have no buffer yet */
  if (lp__hf_ns_reserve(s, n)) return -ENOMEM;
  memcpy(s->b + s->len, b, n);
  memcpy(s->al + s->len, al, n * sizeof(*al));
  s->len += n;
  return 0;
}

void lp__hf_ns_free(lp__hf_ns_t *s) {
  free(s->b);
  free(s->al);
  memset(s, 0, sizeof(*s));
}

uint32_t lp__hf_utf8_get(const char *b, size_t i, int *n) {
  const unsigned char *u = (const unsigned char *)b + i;
  if (u[0] < 0x80) {
    *n = 1;
    return u[0];
  }
  if (u[0] < 0xE0) {
    *n = 2;
    return (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
  }
  if (u[0] < 0xF0) {
    *n = 3;
    return (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
  }
  *n = 4;
  return (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 | (uint32_t)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
}

int lp__hf_utf8_check(const char *b, size_t n) {
  size_t i = 0;
  while (i < n) {
    if ((unsigned char)b[i] < 0x80) {
      i++;
      continue;
    }
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)b + i, (utf8proc_ssize_t)(n - i), &cp);
    if (k <= 0) return -EINVAL;
    i += (size_t)k;
  }
  return 0;
}

int lp__hf_is_whitespace(uint32_t cp) {
  if (cp == ' ' || (cp >= 9 && cp <= 13)) return 1;
  if (cp < 0x80) return 0;
  if (cp == 0x85) return 1;
  utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
  return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

int lp__hf_is_punct(uint32_t cp) {
  utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

int lp__hf_is_word(uint32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  if (cp == 0x200C || cp == 0x200D) return 1; /* Join_Control */
  utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_ME) || c == UTF8PROC_CATEGORY_ND ||
         c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_PC;
}

/* wyhash-style multiply-mix over 8-byte words: pieces are short, and this
 * is one multiply per word. */
uint64_t lp__hf_hash(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  while (n >= 8) {
    uint64_t k;
    memcpy(&k, s, 8);
    h = (h ^ k) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    s += 8;
    n -= 8;
  }
  uint64_t k = 0;
  memcpy(&k, s, n);
  h = (h ^ k) * 0x94D049BB133111EBull;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 32);
}

int lp__hf_vocab_init(lp__hf_vocab_t *v, int32_t n) {
  memset(v, 0, sizeof(*v));
  /* at most half full: short probe chains */
  uint32_t slots = 16;
  while (slots < (uint32_t)n * 2u) slots *= 2;
  v->piece = calloc((size_t)n + 1, sizeof(*v->piece));
  v->plen = calloc((size_t)n + 1, sizeof(*v->plen));
  v->slot = malloc(slots * sizeof(*v->slot));
  if (!v->piece || !v->plen || !v->slot) return -ENOMEM;
  memset(v->slot, 0xff, slots * sizeof(*v->slot));
  v->mask = slots - 1;
  v->n = n;
  return 0;
}

int32_t lp__hf_vocab_get(const lp__hf_vocab_t *v, const char *piece, size_t len) {
  if (!v->slot) return -1;
  for (uint32_t i = (uint32_t)lp__hf_hash(piece, len) & v->mask;; i = (i + 1) & v->mask) {
    int32_t id = v->slot[i];
    if (id < 0) return -1;
    if (v->plen[id] == len && memcmp(v->piece[id], piece, len) == 0) return id;
  }
}

int lp__hf_vocab_set(lp__hf_vocab_t *v, const char *piece, size_t len, int32_t id) {
  if (id < 0 || id >= v->n || v->piece[id]) return -EEXIST;
  char *c = malloc(len + 1);
  if (!c) return -ENOMEM;
  memcpy(c, piece, len);
  c[len] = 0;
  v->piece[id] = c;
  v->plen[id] = (uint32_t)len;
  uint32_t i = (uint32_t)lp__hf_hash(piece, len) & v->mask;
  while (v->slot[i] >= 0) i = (i + 1) & v->mask;
  v->slot[i] = id;
  return 0;
}

void lp__hf_vocab_free(lp__hf_vocab_t *v) {
  for (int32_t i = 0; v->piece && i < v->n; i++) free(v->piece[i]);
  free(v->piece);
  free(v->plen);
  free(v->slot);
  memset(v, 0, sizeof(*v));
}

int lp__hf_enc_push(lp__hf_enc_t *e, int32_t id, uint32_t a0, uint32_t a1, uint8_t type, uint8_t special) {
  if (grow((void **)&e->t, &e->cap, e->n + 1, sizeof(*e->t))) return -ENOMEM;
  e->t[e->n++] = (lp__hf_token_t){id, a0, a1, type, special};
  return 0;
}

int lp__hf_split_push(lp__hf_split_t **sp, size_t *n, size_t *cap, uint32_t off, uint32_t len, int32_t added) {
  if (grow((void **)sp, cap, *n + 1, sizeof(**sp))) return -ENOMEM;
  (*sp)[(*n)++] = (lp__hf_split_t){off, len, added};
  return 0;
}

int lp__hf_bad(char *err, size_t errlen, const char *where, const char *fmt, ...) {
  char m[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof(m), fmt, ap);
  va_end(ap);
  snprintf(err, errlen, "%s: %s", where, m);
  return -EINVAL;
}

int lp__hf_load_seq(json_t *o, const char *key, const char *where, size_t elsize, void **out, size_t *n,
                    lp__hf_load_fn fn, char *err, size_t errlen) {
  json_t *a = json_object_get(o, key);
  if (!json_is_array(a)) return lp__hf_bad(err, errlen, where, "needs \"%s\": [...]", key);
  if (!(*out = calloc(json_array_size(a) + 1, elsize))) return -ENOMEM;
  for (size_t i = 0; i < json_array_size(a); i++) {
    char w2[200];
    snprintf(w2, sizeof(w2), "%s.%s[%zu]", where, key, i);
    *n = i + 1; /* counted before it loads: a part loaded halfway is freed too */
    int rc = fn((char *)*out + i * elsize, json_array_get(a, i), w2, err, errlen);
    if (rc) return rc;
  }
  return 0;
}

/* A text's regex time: a fixed part and a part per byte, some 200 times
 * what real tokenizers' patterns take (about 0.1 us a byte), so that only a
 * pathological pattern ever reaches it: an 840-byte text that cost 3.6 s
 * is refused after about 27 ms. The clock is read once every
 * BUDGET_CHECK_EVERY matches (a match of a sound pattern takes well under a
 * microsecond). */
#define BUDGET_BASE_NS 10000000ull
#define BUDGET_PER_BYTE_NS 20000ull
#define BUDGET_CHECK_EVERY 64

static _Thread_local struct {
  uint64_t deadline; /* thread CPU time, ns; 0: no text under way */
  unsigned calls;
} budget;

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)) return 0;
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void lp__hf_budget_start(size_t len) {
  budget.deadline = thread_cpu_ns() + BUDGET_BASE_NS + (uint64_t)len * BUDGET_PER_BYTE_NS;
  budget.calls = 0;
}

int lp__hf_budget_spent(void) {
  if (!budget.deadline || ++budget.calls % BUDGET_CHECK_EVERY) return 0;
  return thread_cpu_ns() > budget.deadline;
}
