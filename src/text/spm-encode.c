/* The native SentencePiece Unigram encoder: libsentencepiece 0.1.97's
 * Normalizer::Normalize, unigram::Model::EncodeOptimized and the processor's
 * unknown and byte-fallback handling and extra options, mirrored step by step
 * (its float and double sums included, so that ties fall as the library's),
 * over tables built once at load. */
#include <errno.h>
#include <float.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "spm.h"

/* The library's unknown piece costs this much below the lowest score
 * (unigram_model.cc's kUnkPenalty). */
#define SPM_UNK_PENALTY 10.0f
/* Trie nodes get 256-wide tables (one load per byte instead of a scan of
 * their sorted labels), those with most children first, within this many
 * bytes of tables: 256 nodes, the busiest (the root, "▁", common starts).
 * 64 KiB to 2 MiB gave the same rates within noise on models of 400 and
 * 4,000 pieces (lanepack-tokrate): the loads of the nodes themselves cost. */
#define SPM_DENSE_BYTES (256u << 10)
/* A thread keeps scratch up to this size between calls (a longer text's goes
 * back after it): a few typical texts' worth. */
#define SPM_SCRATCH_KEEP (1u << 20)
/* The normalized text's positions are int32 in the search. */
#define SPM_MAX_NORM ((size_t)INT32_MAX - 16)

static const char SPACE_SYMBOL[] = "\xe2\x96\x81"; /* U+2581, what escape_whitespaces makes of ' ' */

/* ---- load: checks as the library's InitializePieces, the trie, the tables ---- */

static int is_trie_type(int t) { return t == LP_SPM_NORMAL || t == LP_SPM_USER || t == LP_SPM_UNUSED; }

/* A piece as the load sorts them: the trie's pieces first, then by bytes. */
typedef struct {
  const char *s;
  uint32_t len;
  int32_t id;
  int trie;
} spm_key_t;

static int cmp_key(const void *a, const void *b) {
  const spm_key_t *x = a, *y = b;
  if (x->trie != y->trie) return y->trie - x->trie;
  uint32_t n = x->len < y->len ? x->len : y->len;
  int c = memcmp(x->s, y->s, n);
  if (c) return c;
  return (x->len > y->len) - (x->len < y->len);
}


/* The library's ByteToPiece: "<0x%02X>". -1 when name is not one. */
static int piece_byte(const char *s, uint32_t len) {
  static const char hex[] = "0123456789ABCDEF";
  if (len != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
  const char *h = strchr(hex, s[3]), *l = strchr(hex, s[4]);
  if (!s[3] || !s[4] || !h || !l) return -1;
  return (int)((h - hex) * 16 + (l - hex));
}

/* The library's PieceToId: a control, unknown or byte piece of that name
 * first, then a normal one, else the unknown piece. */
static int32_t piece_to_id(const lp__spm_t *m, const char *s, size_t len) {
  int32_t normal = -1;
  for (int32_t i = 0; i < m->npieces; i++) {
    const lp__spm_piece_t *p = &m->pieces[i];
    if (p->len != len || memcmp(p->s, s, len)) continue;
    if (!is_trie_type(p->type)) return i;
    if (normal < 0) normal = i;
  }
  return normal >= 0 ? normal : m->unk_id;
}

/* The pieces' trie from the sorted pieces (order[0, n)): built with sibling
 * lists, then laid out with each node's children together. */
static int build_trie(lp__spm_t *m, const spm_key_t *order, int32_t n) {
  size_t bytes = 1;
  for (int32_t i = 0; i < n; i++) bytes += order[i].len;
  if (bytes > UINT32_MAX / 2) return -ENOTSUP;
  uint32_t *first = calloc(bytes, sizeof(uint32_t)), *last = calloc(bytes, sizeof(uint32_t));
  uint32_t *sib = calloc(bytes, sizeof(uint32_t));
  uint8_t *label = calloc(bytes, 1);
  m->nodes = calloc(bytes, sizeof(*m->nodes));
  int rc = first && last && sib && label && m->nodes ? 0 : -ENOMEM;
  uint32_t nn = 1;
  for (int32_t i = 0; i < n && !rc; i++) {
    const lp__spm_piece_t *p = &m->pieces[order[i].id];
    uint32_t at = 0;
    for (uint32_t k = 0; k < p->len; k++) {
      uint8_t b = (uint8_t)p->s[k];
      /* sorted keys: a child with this byte, if any, is the last one made */
      if (last[at] && label[last[at]] == b) {
        at = last[at];
        continue;
      }
      uint32_t c = nn++;
      label[c] = b;
      m->nodes[c].id = -1;
      if (last[at]) sib[last[at]] = c;
      else first[at] = c;
      last[at] = c;
      at = c;
    }
    m->nodes[at].id = order[i].id;
    m->nodes[at].kind = (uint8_t)p->type;
    m->nodes[at].score = p->score;
  }
  if (m->nodes) m->nodes[0].id = -1;
  /* children counted and laid out: sorted labels, or a dense table */
  size_t nlab = 0, ndense = 0, with[258] = {0};
  for (uint32_t v = 0; v < nn && !rc; v++) {
    unsigned k = 0;
    for (uint32_t c = first[v]; c; c = sib[c]) k++;
    m->nodes[v].nkids = (uint16_t)k;
    with[k]++;
  }
  /* the fewest children a dense node has: as low as the budget allows */
  unsigned least = 257;
  for (size_t tables = 0; least > 2 && (tables + with[least - 1]) * 256 * sizeof(uint32_t) <= SPM_DENSE_BYTES;)
    tables += with[--least];
  for (uint32_t v = 0; v < nn && !rc; v++) {
    m->nodes[v].dense = v == 0 || m->nodes[v].nkids >= least;
    if (m->nodes[v].dense) ndense++;
    else nlab += m->nodes[v].nkids;
  }
  if (!rc) {
    m->labels = malloc(nlab + 1);
    m->next = calloc(nlab + 256 * ndense + 1, sizeof(uint32_t));
    if (!m->labels || !m->next) rc = -ENOMEM;
  }
  size_t at_lab = 0, at_dense = nlab;
  for (uint32_t v = 0; v < nn && !rc; v++) {
    lp__spm_node_t *d = &m->nodes[v];
    if (d->dense) {
      d->kids = (uint32_t)at_dense;
      for (uint32_t c = first[v]; c; c = sib[c]) m->next[at_dense + label[c]] = c;
      at_dense += 256;
    } else {
      d->kids = (uint32_t)at_lab;
      for (uint32_t c = first[v]; c; c = sib[c]) {
        m->labels[at_lab] = label[c];
        m->next[at_lab++] = c;
      }
    }
  }
  free(first);
  free(last);
  free(sib);
  free(label);
  return rc;
}

static inline uint32_t child(const lp__spm_t *m, const lp__spm_node_t *d, uint8_t b) {
  if (d->dense) return m->next[d->kids + b];
  const uint8_t *l = m->labels + d->kids;
  for (unsigned i = 0; i < d->nkids; i++) {
    if (l[i] == b) return m->next[d->kids + i];
    if (l[i] > b) break;
  }
  return 0;
}

/* The library's checks of the pieces, then the search's tables. */
static int prepare(lp__spm_t *m, char *why, size_t whylen) {
  if (m->model_type != 1) return lp__spm_why(why, whylen, -ENOTSUP, "not a Unigram model");
  m->unk_id = -1;
  for (int i = 0; i < 256; i++) m->byte_id[i] = -1;
  m->min_score = FLT_MAX;
  m->max_score = FLT_MIN; /* as the library starts them (FLT_MIN, not -FLT_MAX) */
  int32_t ntrie = 0;
  for (int32_t i = 0; i < m->npieces; i++) {
    const lp__spm_piece_t *p = &m->pieces[i];
    if (!p->len) return lp__spm_why(why, whylen, -EINVAL, "a piece is empty");
    if (memchr(p->s, 0, p->len)) return lp__spm_why(why, whylen, -ENOTSUP, "a piece holds a NUL byte");
    ntrie += is_trie_type(p->type);
    if (p->type == LP_SPM_UNKNOWN) {
      if (m->unk_id >= 0) return lp__spm_why(why, whylen, -EINVAL, "two unknown pieces");
      m->unk_id = i;
    }
    if (p->type == LP_SPM_BYTE) {
      int b = piece_byte(p->s, p->len);
      if (!m->byte_fallback || b < 0) return lp__spm_why(why, whylen, -EINVAL, "a byte piece without byte_fallback, or misnamed");
      m->byte_id[b] = i;
    }
    if (p->type == LP_SPM_NORMAL) { /* std::min / std::max's own comparisons (a NaN never wins) */
      if (p->score < m->min_score) m->min_score = p->score;
      if (m->max_score < p->score) m->max_score = p->score;
    }
  }
  if (m->unk_id < 0) return lp__spm_why(why, whylen, -EINVAL, "no unknown piece");
  for (int i = 0; i < 256 && m->byte_fallback; i++)
    if (m->byte_id[i] < 0) return lp__spm_why(why, whylen, -EINVAL, "byte_fallback without all 256 byte pieces");
  if (!ntrie) return lp__spm_why(why, whylen, -EINVAL, "no normal pieces");
  /* duplicates (the library refuses them) and the trie's order: one sort */
  spm_key_t *order = malloc((size_t)m->npieces * sizeof(*order));
  if (!order) return lp__spm_why(why, whylen, -ENOMEM, "out of memory");
  for (int32_t i = 0; i < m->npieces; i++)
    order[i] = (spm_key_t){m->pieces[i].s, m->pieces[i].len, i, is_trie_type(m->pieces[i].type)};
  qsort(order, (size_t)m->npieces, sizeof(*order), cmp_key);
  for (int32_t i = 1; i < m->npieces; i++)
    if (!cmp_key(&order[i - 1], &order[i])) {
      free(order);
      return lp__spm_why(why, whylen, -EINVAL, "a piece twice");
    }
  int rc = build_trie(m, order, ntrie);
  free(order);
  if (rc) return lp__spm_why(why, whylen, rc, rc == -ENOMEM ? "out of memory" : "pieces too long");
  const char *bos = m->bos_piece && m->bos_len ? m->bos_piece : "<s>";
  const char *eos = m->eos_piece && m->eos_len ? m->eos_piece : "</s>";
  /* the library names them through .data(): up to a NUL */
  m->bos_id = piece_to_id(m, bos, m->bos_piece && m->bos_len ? strnlen(bos, m->bos_len) : 3);
  m->eos_id = piece_to_id(m, eos, m->eos_piece && m->eos_len ? strnlen(eos, m->eos_len) : 4);
  if (m->charsmap && m->charsmap_len) {
    rc = lp__pcmap_init(&m->map, m->charsmap, m->charsmap_len);
    if (rc) return lp__spm_why(why, whylen, rc == -ENOMEM ? rc : -ENOTSUP, rc == -ENOMEM ? "out of memory" : "a character map this does not read");
  }
  /* user-defined pieces are matched raw before the map: their first bytes */
  for (int32_t i = 0; i < m->npieces; i++)
    if (m->pieces[i].type == LP_SPM_USER) {
      m->user_start[(uint8_t)m->pieces[i].s[0]] = 1;
      m->has_user = 1;
    }
  for (int c = 0; c < 128; c++) {
    const char *rep = NULL;
    int k = m->map.nunits ? lp__pcmap_first(&m->map, (unsigned char)c, &rep) : 0;
    m->ascii[c] = m->user_start[c] || (k & 2) ? LP_SPM_A_SLOW : (k & 1) ? LP_SPM_A_MAPPED : LP_SPM_A_SELF;
    if (k & 4) m->ascii[c] |= LP_SPM_A_HI;
    m->ascii_to[c] = rep;
  }
  return 0;
}

int lp__spm_load(unsigned char *buf, size_t len, lp__spm_t **out, char *why, size_t whylen) {
  int rc = lp__spm_read(buf, len, out, why, whylen);
  if (!rc && (rc = prepare(*out, why, whylen))) {
    lp__spm_free(*out);
    *out = NULL;
  }
  return rc;
}

int lp__spm_set_options(lp__spm_t *m, const char *options) {
  m->nops = m->nadded = 0;
  for (const char *p = options; p && *p;) {
    const char *e = strchr(p, ':');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    uint8_t op;
    if (n == 3 && !memcmp(p, "bos", 3)) op = 'b';
    else if (n == 3 && !memcmp(p, "eos", 3)) op = 'e';
    else if (n == 7 && !memcmp(p, "reverse", 7)) op = 'r';
    else if ((n == 3 && !memcmp(p, "unk", 3)) || (n == 9 && !memcmp(p, "unk_piece", 9))) op = 0; /* names, not ids */
    else return -EINVAL;
    if (op == 'b' && (m->bos_id < 0 || m->pieces[m->bos_id].type == LP_SPM_UNKNOWN)) return -EINVAL;
    if (op == 'e' && (m->eos_id < 0 || m->pieces[m->eos_id].type == LP_SPM_UNKNOWN)) return -EINVAL;
    if (op) {
      if (m->nops == (int)sizeof(m->ops)) return -ENOTSUP;
      m->ops[m->nops++] = op;
      m->nadded += op != 'r';
    }
    if (!e) break;
    p = e + 1;
    if (!*p) return -EINVAL; /* "bos:" names an empty option */
  }
  return 0;
}

/* ---- encode ---- */

/* The best path ending at a byte of the normalized text (the library's BestPathNode). */
typedef struct {
  float score;
  int32_t start; /* -1: none yet */
  int32_t id;
} best_t;

typedef struct {
  unsigned char *norm; /* the normalized text */
  size_t ncap;
  best_t *best;
  size_t bcap;
  int32_t *ids; /* the path's pieces (backwards), then the ids */
  size_t icap;
} scratch_t;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_ok;

static void scratch_free(void *p) {
  scratch_t *s = p;
  free(s->norm);
  free(s->best);
  free(s->ids);
  free(s);
}

static void scratch_key_make(void) { scratch_ok = pthread_key_create(&scratch_key, scratch_free) == 0; }

/* This thread's scratch, made on its first call; NULL: out of memory. */
static scratch_t *scratch(void) {
  pthread_once(&scratch_once, scratch_key_make);
  if (!scratch_ok) return NULL;
  scratch_t *s = pthread_getspecific(scratch_key);
  if (!s && (s = calloc(1, sizeof(*s))) && pthread_setspecific(scratch_key, s)) {
    free(s);
    s = NULL;
  }
  return s;
}

static void scratch_trim(scratch_t *s) {
  if (s->ncap > SPM_SCRATCH_KEEP) free(s->norm), s->norm = NULL, s->ncap = 0;
  if (s->bcap * sizeof(best_t) > SPM_SCRATCH_KEEP) free(s->best), s->best = NULL, s->bcap = 0;
  if (s->icap * sizeof(int32_t) > SPM_SCRATCH_KEEP) free(s->ids), s->ids = NULL, s->icap = 0;
}

static int grow(void **p, size_t *cap, size_t want, size_t size) {
  if (want <= *cap) return 0;
  size_t c = *cap * 2 > want ? *cap * 2 : want;
  void *q = realloc(*p, c * size);
  if (!q) return -ENOMEM;
  *p = q;
  *cap = c;
  return 0;
}

/* The library's DecodeUTF8 validity: a character's length, or 0 for a
 * malformed one (which the normalizer turns into U+FFFD, consuming a byte). */
static size_t utf8_len(const unsigned char *p, size_t n) {
  unsigned char c = p[0];
  if (c < 0x80) return 1;
  if (n >= 2 && (c & 0xE0) == 0xC0) {
    uint32_t cp = (uint32_t)(c & 0x1F) << 6 | (p[1] & 0x3F);
    return (p[1] & 0xC0) == 0x80 && cp >= 0x80 ? 2 : 0;
  }
  if (n >= 3 && (c & 0xF0) == 0xE0) {
    uint32_t cp = (uint32_t)(c & 0x0F) << 12 | (uint32_t)(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
    return (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80 && cp >= 0x800 && (cp < 0xD800 || cp >= 0xE000) ? 3 : 0;
  }
  if (n >= 4 && (c & 0xF8) == 0xF0) {
    uint32_t cp = (uint32_t)(c & 0x07) << 18 | (uint32_t)(p[1] & 0x3F) << 12 | (uint32_t)(p[2] & 0x3F) << 6 |
                  (p[3] & 0x3F);
    return (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80 && cp >= 0x10000 &&
                   cp <= 0x10FFFF
               ? 4
               : 0;
  }
  return 0;
}

/* The library's NormalizePrefix: what the start of p (n > 0 bytes) becomes
 * (*out, *outlen) and how many bytes it takes (the return). */
static size_t prefix(const lp__spm_t *m, const unsigned char *p, size_t n, const char **out, size_t *outlen) {
  if (m->has_user && m->user_start[p[0]]) { /* the longest user-defined piece, raw */
    size_t best = 0;
    uint32_t v = 0;
    for (size_t k = 0; k < n && (v = child(m, &m->nodes[v], p[k])); k++)
      if (m->nodes[v].kind == LP_SPM_USER) best = k + 1;
    if (best) {
      *out = (const char *)p;
      *outlen = best;
      return best;
    }
  }
  if (m->map.nunits) {
    size_t mlen;
    const char *rep = lp__pcmap_match(&m->map, p, n, 1, &mlen);
    if (rep) {
      *out = rep;
      *outlen = strlen(rep);
      return mlen;
    }
  }
  size_t k = utf8_len(p, n);
  if (!k) {
    *out = "\xef\xbf\xbd";
    *outlen = 3;
    return 1;
  }
  *out = (const char *)p;
  *outlen = k;
  return k;
}

/* Normalizer::Normalize into s->norm: its length, or -ENOMEM. */
static long normalize(const lp__spm_t *m, scratch_t *s, const unsigned char *text, size_t len) {
  const char *sp;
  size_t splen, i = 0;
  if (m->remove_extra_ws) /* heading spaces */
    while (i < len) {
      size_t k = prefix(m, text + i, len - i, &sp, &splen);
      if (splen != 1 || sp[0] != ' ') break;
      i += k;
    }
  if (i == len) return 0;
  /* room kept: 3 bytes per input byte left (a space's escape) plus the
   * dummy piece, grown where a replacement is longer */
  if (len > SPM_MAX_NORM / 3 || grow((void **)&s->norm, &s->ncap, 3 * len + 16, 1)) return -ENOMEM;
  unsigned char *o = s->norm;
  size_t n = 0;
  const int escape = m->escape_ws, remove = m->remove_extra_ws;
#define ADD_WS()                                                                                                      \
  do {                                                                                                                \
    if (escape) memcpy(o + n, SPACE_SYMBOL, 3), n += 3;                                                               \
    else o[n++] = ' ';                                                                                                \
  } while (0)
  if (!m->ws_suffix && m->add_dummy_prefix) ADD_WS();
  int prev_space = remove;
  while (i < len) {
    unsigned char c = text[i];
    unsigned a = c < 0x80 ? m->ascii[c] : LP_SPM_A_SLOW;
    if (a & LP_SPM_A_HI) /* a longer key may start here only when a non-ASCII byte follows */
      a = i + 1 < len && text[i + 1] >= 0x80 ? LP_SPM_A_SLOW : a & ~(unsigned)LP_SPM_A_HI;
    if (a == LP_SPM_A_SELF) { /* most text: a byte that stays itself */
      i++;
      if (c != ' ') {
        o[n++] = c;
        prev_space = 0;
      } else {
        if (!prev_space) ADD_WS();
        prev_space = remove;
      }
      continue;
    }
    size_t k;
    if (a == LP_SPM_A_MAPPED) {
      sp = m->ascii_to[c];
      splen = strlen(sp);
      k = 1;
    } else {
      k = prefix(m, text + i, len - i, &sp, &splen);
    }
    i += k;
    if (prev_space)
      while (splen && *sp == ' ') sp++, splen--;
    if (splen) {
      size_t want = n + 3 * splen + 3 * (len - i) + 16;
      if (want > SPM_MAX_NORM || grow((void **)&s->norm, &s->ncap, want, 1)) return -ENOMEM;
      o = s->norm;
      for (size_t j = 0; j < splen; j++) {
        if (escape && sp[j] == ' ') memcpy(o + n, SPACE_SYMBOL, 3), n += 3;
        else o[n++] = (unsigned char)sp[j];
      }
      prev_space = sp[splen - 1] == ' ';
    }
    if (!remove) prev_space = 0;
  }
  if (remove) { /* tailing spaces (the dummy prefix too, when nothing else is left) */
    if (escape)
      while (n >= 3 && !memcmp(o + n - 3, SPACE_SYMBOL, 3)) n -= 3;
    else
      while (n && o[n - 1] == ' ') n--;
  }
  if (m->ws_suffix && m->add_dummy_prefix) ADD_WS();
#undef ADD_WS
  return (long)n;
}

/* string_util::OneCharLen */
static inline size_t one_char_len(unsigned char c) { return "\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4"[c >> 4]; }

/* EncodeOptimized over s->norm[0, n), then the processor's handling of
 * unknown pieces: the ids without options into s->ids; their count or -ENOMEM. */
static long search(const lp__spm_t *m, scratch_t *s, size_t n) {
  if (grow((void **)&s->best, &s->bcap, n + 1, sizeof(best_t)) || grow((void **)&s->ids, &s->icap, 2 * n + 16, sizeof(int32_t)))
    return -ENOMEM;
  best_t *best = s->best;
  const unsigned char *t = s->norm;
  for (size_t j = 0; j <= n; j++) best[j] = (best_t){0.0f, -1, -1};
  const float unk_score = m->min_score - SPM_UNK_PENALTY;
  const lp__spm_node_t *nodes = m->nodes;
  for (size_t at = 0; at < n;) {
    const float till = best[at].score;
    size_t mblen = one_char_len(t[at]);
    if (mblen > n - at) mblen = n - at;
    int single = 0;
    const lp__spm_node_t *d = &nodes[0];
    for (size_t k = at; k < n; k++) {
      uint32_t v = child(m, d, t[k]);
      if (!v) break;
      d = &nodes[v];
      if (d->kind != LP_SPM_NORMAL && d->kind != LP_SPM_USER) continue;
      size_t length = k + 1 - at;
      /* as the library computes it: a double score (the user-defined bonus is
       * float times float less a double 0.1), added to a float, compared with
       * the float stored */
      double score = d->kind == LP_SPM_USER ? (double)((float)length * m->max_score) - 0.1 : (double)d->score;
      double cand = score + (double)till;
      best_t *b = &best[k + 1];
      if (b->start == -1 || cand > (double)b->score) {
        b->score = (float)cand;
        b->start = (int32_t)at;
        b->id = d->id;
      }
      if (length == mblen) single = 1;
    }
    if (!single) {
      best_t *b = &best[at + mblen];
      const float cand = unk_score + till; /* float, as the library's */
      if (b->start == -1 || cand > b->score) {
        b->score = cand;
        b->start = (int32_t)at;
        b->id = m->unk_id;
      }
    }
    at += mblen;
  }
  /* the path backwards into the top of s->ids (pieces' ends), then forwards
   * into its bottom (ids): at most n of each */
  int32_t *ends = s->ids + s->icap;
  size_t np = 0;
  for (size_t e = n; e > 0; e = (size_t)best[e].start) *--ends = (int32_t)e, np++;
  size_t k = 0, from = 0;
  int prev_unk = 0;
  for (size_t j = 0; j < np; j++) {
    size_t e = (size_t)ends[j];
    int32_t id = best[e].id;
    int unk = m->pieces[id].type == LP_SPM_UNKNOWN;
    if (unk && m->byte_fallback) /* the unknown piece's bytes as byte pieces */
      for (size_t b = from; b < e; b++) s->ids[k++] = m->byte_id[t[b]];
    else if (!(unk && prev_unk)) /* a run of unknown pieces is one */
      s->ids[k++] = id;
    prev_unk = unk;
    from = e;
  }
  return (long)k;
}

/* The options applied to a[0, n) (room for m->nadded more): the new count. */
static size_t with_options(const lp__spm_t *m, int32_t *a, size_t n) {
  for (int i = 0; i < m->nops; i++) {
    if (m->ops[i] == 'r') {
      for (size_t x = 0, y = n; x + 1 < y; x++, y--) {
        int32_t tmp = a[x];
        a[x] = a[y - 1];
        a[y - 1] = tmp;
      }
    } else if (m->ops[i] == 'b') {
      memmove(a + 1, a, n * sizeof(*a));
      a[0] = m->bos_id;
      n++;
    } else {
      a[n++] = m->eos_id;
    }
  }
  return n;
}

/* The ids of text without options into s->ids: the count or -ENOMEM. */
static long raw_ids(const lp__spm_t *m, scratch_t *s, const char *text, size_t len) {
  long n = normalize(m, s, (const unsigned char *)text, len);
  if (n <= 0) return n;
  return search(m, s, (size_t)n);
}

static long give(scratch_t *s, const int32_t *a, size_t n, int32_t *ids, size_t cap) {
  if (n && cap) memcpy(ids, a, (n < cap ? n : cap) * sizeof(*ids)); /* ids may be NULL with cap 0: a count only */
  scratch_trim(s);
  return (long)n;
}

long lp__spm_encode(const lp__spm_t *m, const char *text, size_t len, int with_opts, int32_t *ids, size_t cap) {
  scratch_t *s = scratch();
  if (!s) return -ENOMEM;
  long n = raw_ids(m, s, text, len);
  if (n < 0) return n;
  if (grow((void **)&s->ids, &s->icap, (size_t)n + 16, sizeof(int32_t))) return -ENOMEM;
  size_t k = with_opts ? with_options(m, s->ids, (size_t)n) : (size_t)n;
  return give(s, s->ids, k, ids, cap);
}

long lp__spm_encode_fit(const lp__spm_t *m, const char *text, size_t len, size_t max, int left, int32_t *ids,
                        size_t cap) {
  if ((size_t)m->nadded >= max) return -E2BIG;
  scratch_t *s = scratch();
  if (!s) return -ENOMEM;
  long n = raw_ids(m, s, text, len);
  if (n < 0) return n;
  if (grow((void **)&s->ids, &s->icap, (size_t)n + 16, sizeof(int32_t))) return -ENOMEM;
  size_t k = (size_t)n, keep = max - (size_t)m->nadded;
  if (k > keep) {
    if (left) memmove(s->ids, s->ids + (k - keep), keep * sizeof(int32_t));
    k = keep;
  }
  return give(s, s->ids, with_options(m, s->ids, k), ids, cap);
}
