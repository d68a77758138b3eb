/* A SentencePiece .model file (a ModelProto, protobuf 2) read into lp__spm_t:
 * the pieces, the trainer's and normalizer's settings the encoder needs, read
 * as protobuf reads them (absent fields take the proto's defaults, a repeated
 * scalar's last value wins, a message met twice is merged, an enum value or
 * wire type the proto does not know is skipped as an unknown field). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spm.h"

/* protobuf's wire types */
enum { W_VARINT = 0, W_I64 = 1, W_LEN = 2, W_I32 = 5 };

typedef struct {
  const unsigned char *p, *end;
} rd_t;

static int varint(rd_t *r, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 70 && r->p < r->end; shift += 7) {
    unsigned char b = *r->p++;
    if (shift < 64) *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return 0;
  }
  return -EINVAL;
}

/* One field's key and, for a LEN field, its bytes in *sub. -EINVAL: malformed
 * (groups, which no ModelProto has, are refused). */
static int field(rd_t *r, uint32_t *num, int *wt, uint64_t *v, rd_t *sub) {
  uint64_t key;
  if (varint(r, &key)) return -EINVAL;
  *num = (uint32_t)(key >> 3);
  *wt = (int)(key & 7);
  if (*num == 0 || key >> 32) return -EINVAL;
  switch (*wt) {
  case W_VARINT:
    return varint(r, v);
  case W_I64:
    if (r->end - r->p < 8) return -EINVAL;
    r->p += 8;
    return 0;
  case W_I32:
    if (r->end - r->p < 4) return -EINVAL;
    *v = (uint64_t)r->p[0] | (uint64_t)r->p[1] << 8 | (uint64_t)r->p[2] << 16 | (uint64_t)r->p[3] << 24;
    r->p += 4;
    return 0;
  case W_LEN:
    if (varint(r, v) || *v > (uint64_t)(r->end - r->p)) return -EINVAL;
    sub->p = r->p;
    sub->end = r->p + *v;
    r->p += *v;
    return 0;
  default:
    return -EINVAL;
  }
}

int lp__spm_why(char *why, size_t whylen, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (why && whylen) vsnprintf(why, whylen, fmt, ap);
  va_end(ap);
  return rc;
}

/* A field's value as on_field callbacks see it: the varint or fixed32 in v,
 * a LEN field's bytes in sub. */
typedef void (*on_field_cb)(void *ctx, uint32_t num, int wt, uint64_t v, rd_t sub);

/* Each field of a message to on: 0, or -EINVAL when it is malformed. */
static int each_field(rd_t r, on_field_cb on, void *ctx) {
  uint32_t num;
  int wt;
  uint64_t v;
  rd_t sub = {NULL, NULL};
  while (r.p < r.end) {
    if (field(&r, &num, &wt, &v, &sub)) return -EINVAL;
    on(ctx, num, wt, v, sub);
  }
  return 0;
}

static void on_piece(void *ctx, uint32_t num, int wt, uint64_t v, rd_t sub) {
  lp__spm_piece_t *pc = ctx;
  if (num == 1 && wt == W_LEN) {
    pc->s = (const char *)sub.p;
    pc->len = (uint32_t)(sub.end - sub.p);
  } else if (num == 2 && wt == W_I32) {
    uint32_t u = (uint32_t)v;
    memcpy(&pc->score, &u, sizeof(u));
  } else if (num == 3 && wt == W_VARINT && (int32_t)v >= LP_SPM_NORMAL && (int32_t)v <= LP_SPM_BYTE) {
    pc->type = (int32_t)v;
  }
}

static void on_trainer(void *ctx, uint32_t num, int wt, uint64_t v, rd_t sub) {
  lp__spm_t *m = ctx;
  if (wt == W_VARINT) {
    if (num == 3 && (int32_t)v >= 1 && (int32_t)v <= 4) m->model_type = (int32_t)v;
    else if (num == 24) m->ws_suffix = v != 0;
    else if (num == 35) m->byte_fallback = v != 0;
  } else if (wt == W_LEN && (num == 46 || num == 47)) {
    const char **s = num == 46 ? &m->bos_piece : &m->eos_piece;
    uint32_t *l = num == 46 ? &m->bos_len : &m->eos_len;
    *s = (const char *)sub.p;
    *l = (uint32_t)(sub.end - sub.p);
  }
}

static void on_normalizer(void *ctx, uint32_t num, int wt, uint64_t v, rd_t sub) {
  lp__spm_t *m = ctx;
  if (wt == W_VARINT) {
    if (num == 3) m->add_dummy_prefix = v != 0;
    else if (num == 4) m->remove_extra_ws = v != 0;
    else if (num == 5) m->escape_ws = v != 0;
  } else if (wt == W_LEN && num == 2) {
    m->charsmap = sub.p;
    m->charsmap_len = (size_t)(sub.end - sub.p);
  }
}

/* The pieces: counted first, so that one array holds them. */
static int read_model(lp__spm_t *m, size_t len) {
  uint32_t num;
  int wt;
  uint64_t v;
  rd_t sub, r = {m->buf, m->buf + len};
  size_t n = 0;
  while (r.p < r.end) {
    if (field(&r, &num, &wt, &v, &sub)) return -EINVAL;
    n += num == 1 && wt == W_LEN;
  }
  if (n > INT32_MAX / 2) return -EINVAL;
  if (!(m->pieces = calloc(n ? n : 1, sizeof(*m->pieces)))) return -ENOMEM;
  r = (rd_t){m->buf, m->buf + len};
  while (r.p < r.end) {
    field(&r, &num, &wt, &v, &sub); /* read once already: well formed */
    int rc = 0;
    if (num == 1 && wt == W_LEN) {
      lp__spm_piece_t *pc = &m->pieces[m->npieces++];
      *pc = (lp__spm_piece_t){"", 0, 0.0f, LP_SPM_NORMAL};
      rc = each_field(sub, on_piece, pc);
    } else if (num == 2 && wt == W_LEN) {
      rc = each_field(sub, on_trainer, m);
    } else if (num == 3 && wt == W_LEN) {
      rc = each_field(sub, on_normalizer, m);
    }
    if (rc) return rc;
  }
  return 0;
}

int lp__spm_read(unsigned char *buf, size_t len, lp__spm_t **out, char *why, size_t whylen) {
  *out = NULL;
  lp__spm_t *m = calloc(1, sizeof(*m));
  if (!m) {
    free(buf);
    return lp__spm_why(why, whylen, -ENOMEM, "out of memory");
  }
  m->buf = buf;
  m->model_type = 1; /* the proto's defaults */
  m->add_dummy_prefix = m->remove_extra_ws = m->escape_ws = 1;
  int rc = read_model(m, len);
  if (rc) {
    lp__spm_free(m);
    return lp__spm_why(why, whylen, rc, rc == -ENOMEM ? "out of memory" : "not a SentencePiece model (malformed protobuf)");
  }
  *out = m;
  return 0;
}

void lp__spm_free(lp__spm_t *m) {
  if (!m) return;
  lp__pcmap_free(&m->map);
  free(m->nodes);
  free(m->labels);
  free(m->next);
  free(m->pieces);
  free(m->buf);
  free(m);
}
