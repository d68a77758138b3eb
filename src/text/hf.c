/* A tokenizer.json tokenizer as a whole: the file read with jansson into its
 * parts (added tokens, normalizer, pre-tokenizer, model, post-processor),
 * and one text (or a pair) run through them in the library's order. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"

/* A thread's work buffers are kept between calls up to this many bytes of
 * text (the usual request's size, so a busy thread does not allocate per
 * call); a larger one is given back after its call. */
#define LP_HF_WORK_KEEP (256u * 1024)

/* Each thread's buffers, found through a key whose destructor frees them
 * when the thread ends (a worker thread's exit leaks nothing). */
typedef struct {
  lp__hf_work_t w;
  lp__hf_enc_t enc[3]; /* the text's, the pair's, and the result tok.c reads */
} bufs_t;

static pthread_key_t bufs_key;
static pthread_once_t bufs_once = PTHREAD_ONCE_INIT;
static int bufs_ok;

static void work_free(lp__hf_work_t *w) {
  lp__hf_ns_free(&w->ns);
  lp__hf_ns_free(&w->tmp);
  lp__hf_ns_free(&w->pre);
  lp__hf_ns_free(&w->pre2);
  free(w->sp);
  free(w->sp2);
  free(w->scratch);
  memset(w, 0, sizeof(*w));
}

static void bufs_free(void *p) {
  bufs_t *b = p;
  work_free(&b->w);
  for (int i = 0; i < 3; i++) free(b->enc[i].t);
  free(b);
}

static void bufs_key_make(void) { bufs_ok = pthread_key_create(&bufs_key, bufs_free) == 0; }

/* This thread's buffers, made on its first call; NULL: out of memory. */
static bufs_t *bufs(void) {
  pthread_once(&bufs_once, bufs_key_make);
  if (!bufs_ok) return NULL;
  bufs_t *b = pthread_getspecific(bufs_key);
  if (!b && (b = calloc(1, sizeof(*b))) && pthread_setspecific(bufs_key, b)) {
    free(b);
    b = NULL;
  }
  return b;
}

/* A large encoding of the last call goes back before the next one. */
static void enc_trim(lp__hf_enc_t *e) {
  if (e->cap * sizeof(*e->t) <= LP_HF_WORK_KEEP) return;
  free(e->t);
  memset(e, 0, sizeof(*e));
}

lp__hf_enc_t *lp__hf_result(void) {
  bufs_t *b = bufs();
  if (!b) return NULL;
  enc_trim(&b->enc[2]);
  return &b->enc[2];
}

static void work_trim(bufs_t *b) {
  lp__hf_work_t *w = &b->w;
  if (w->ns.cap + w->pre.cap + w->pre2.cap + w->tmp.cap > 4 * LP_HF_WORK_KEEP) work_free(w);
  enc_trim(&b->enc[0]);
  enc_trim(&b->enc[1]);
}

/* One text's pieces into w->pre / w->sp: the added tokens matched raw, the
 * rest normalized, then the added tokens matched in the normalized text. */
static int gather(const lp__hf_t *h, lp__hf_work_t *w, const char *text, size_t len) {
  lp__hf_budget_start(len);
  w->pre.len = 0;
  w->nsp = 0;
  lp__hf_split_t *raw = NULL;
  size_t nraw = 0, rawcap = 0;
  int rc = 0;
  if (h->added.any_raw) rc = lp__hf_added_find(&h->added, 0, text, len, &raw, &nraw, &rawcap);
  else if (len) rc = lp__hf_split_push(&raw, &nraw, &rawcap, 0, (uint32_t)len, -1);
  for (size_t i = 0; i < nraw && !rc; i++) {
    lp__hf_split_t r = raw[i];
    lp__hf_ns_t *s = &w->ns;
    s->len = 0;
    if ((rc = lp__hf_ns_reserve(s, r.len))) break;
    memcpy(s->b, text + r.off, r.len);
    for (uint32_t j = 0; j < r.len;) { /* each byte: its character's span */
      int k = 1;
      unsigned char c = (unsigned char)text[r.off + j];
      if (c >= 0xF0) k = 4;
      else if (c >= 0xE0) k = 3;
      else if (c >= 0xC0) k = 2;
      for (int q = 0; q < k; q++) s->al[j + (uint32_t)q] = (lp__hf_al_t){r.off + j, r.off + j + (uint32_t)k};
      j += (uint32_t)k;
    }
    s->len = r.len;
    uint32_t base = (uint32_t)w->pre.len;
    if (r.added >= 0) {
      if ((rc = lp__hf_ns_append(&w->pre, s->b, s->al, s->len))) break;
      rc = lp__hf_split_push(&w->sp, &w->nsp, &w->spcap, base, r.len, r.added);
      continue;
    }
    if (h->has_norm) {
      /* bounded: a file's normalizers may multiply a text without end */
      w->ns.max = w->tmp.max = (size_t)r.len * LP_HF_NORM_GROWTH + LP_HF_NORM_SLACK;
      w->ns.over = w->tmp.over = 0;
      rc = lp__hf_norm_run(&h->norm, w, s);
      int over = w->ns.over || w->tmp.over;
      w->ns.max = w->tmp.max = 0;
      if (rc && over) rc = -EINVAL; /* the text, not the machine: refused */
      if (rc) break;
    }
    if ((rc = lp__hf_ns_append(&w->pre, s->b, s->al, s->len))) break;
    if (h->added.any_norm) {
      size_t before = w->nsp;
      rc = lp__hf_added_find(&h->added, 1, s->b, s->len, &w->sp, &w->nsp, &w->spcap);
      for (size_t k = before; k < w->nsp; k++) w->sp[k].off += base;
    } else if (s->len) {
      rc = lp__hf_split_push(&w->sp, &w->nsp, &w->spcap, base, (uint32_t)s->len, -1);
    }
  }
  free(raw);
  return rc;
}

/* ByteLevel's offsets: a token's leading and trailing spaces ('Ġ' or
 * whitespace) are not its surface, except the one space a first token got
 * from add_prefix_space. Counted in characters of the text, as the library
 * does for Python's and Node's offsets (it trims character offsets). */
static size_t char_fwd(const char *text, size_t at, size_t n, size_t limit) {
  while (n-- && at < limit) {
    at++;
    while (at < limit && ((unsigned char)text[at] & 0xC0) == 0x80) at++;
  }
  return at < limit ? at : limit;
}

static void trim_offsets(const lp__hf_t *h, const char *text, lp__hf_enc_t *e, size_t from) {
  for (size_t i = from; i < e->n; i++) {
    lp__hf_token_t *t = &e->t[i];
    const char *p = t->id >= 0 && t->id < h->nnames ? h->names[t->id] : NULL;
    if (!p) continue;
    size_t n = strlen(p), lead = 0, trail = 0, a = 0, b = n;
    while (a < n) {
      int k;
      uint32_t c = lp__hf_utf8_get(p, a, &k);
      if (c != 0x120 && !lp__hf_is_whitespace(c)) break;
      lead++;
      a += (size_t)k;
    }
    while (b > a) {
      size_t q = b - 1;
      while (q > a && ((unsigned char)p[q] & 0xC0) == 0x80) q--;
      int k;
      uint32_t c = lp__hf_utf8_get(p, q, &k);
      if (c != 0x120 && !lp__hf_is_whitespace(c)) break;
      trail++;
      b = q;
    }
    if (a == n) trail = lead; /* all spaces: the library counts them from both ends */
    if (lead) {
      int first = i == from || t->a0 == 0;
      if (!(first && h->trim_prefix && lead == 1)) t->a0 = (uint32_t)char_fwd(text, t->a0, lead, t->a1);
    }
    if (trail) { /* back trail characters, not below the start nor past the text's start */
      size_t at = t->a1, k = 0;
      while (k < trail && at > 0) {
        at--;
        while (at > 0 && ((unsigned char)text[at] & 0xC0) == 0x80) at--;
        k++;
      }
      if (k == trail) t->a1 = (uint32_t)(at > t->a0 ? at : t->a0);
    }
  }
}

static int encode_one(const lp__hf_t *h, lp__hf_work_t *w, const char *text, size_t len, uint8_t type,
                      lp__hf_enc_t *e) {
  e->n = 0;
  int rc = gather(h, w, text, len);
  if (!rc && h->has_pre) rc = lp__hf_pre_run(&h->pre, w);
  for (size_t i = 0; i < w->nsp && !rc; i++) {
    const lp__hf_split_t *s = &w->sp[i];
    const lp__hf_al_t *al = w->pre.al + s->off;
    if (s->added >= 0) {
      /* typed in the text: not special (the library's special_tokens_mask, TEI's "special") */
      rc = lp__hf_enc_push(e, s->added, al[0].a0, al[s->len - 1].a1, type, 0);
      continue;
    }
    size_t first = e->n;
    rc = lp__hf_model_run(&h->model, w, w->pre.b + s->off, al, s->len, e);
    for (size_t k = first; k < e->n; k++) e->t[k].type = type;
  }
  if (!rc && h->trim_offsets) trim_offsets(h, text, e, 0);
  return rc;
}

int lp__hf_encode(const lp__hf_t *h, const char *text, size_t len, const char *pair, size_t plen, int special,
                  lp__hf_enc_t *out) {
  if (lp__hf_utf8_check(text, len) || (pair && lp__hf_utf8_check(pair, plen))) return -EINVAL;
  bufs_t *b = bufs();
  if (!b) return -ENOMEM;
  int rc = encode_one(h, &b->w, text, len, 0, &b->enc[0]);
  if (!rc && pair) rc = encode_one(h, &b->w, pair, plen, 1, &b->enc[1]);
  if (!rc) rc = lp__hf_post_run(&h->post, &b->enc[0], pair ? &b->enc[1] : NULL, special, out);
  work_trim(b);
  return rc;
}

/* e (a text's own tokens) cut to max less the post-processor's tokens,
 * from the end (the start when left), and post-processed into out. */
static int fit_post(const lp__hf_t *h, lp__hf_enc_t *e, size_t max, size_t added, int left, lp__hf_enc_t *out) {
  if (e->n + added > max) {
    size_t keep = max - added;
    if (left) memmove(e->t, e->t + (e->n - keep), keep * sizeof(*e->t));
    e->n = keep;
  }
  return lp__hf_post_run(&h->post, e, NULL, 1, out);
}

int lp__hf_encode_fit(const lp__hf_t *h, const char *text, size_t len, size_t max, int left, lp__hf_enc_t *out) {
  if (lp__hf_utf8_check(text, len)) return -EINVAL;
  size_t added = lp__hf_post_added(&h->post, 0);
  if (added >= max) return -E2BIG;
  bufs_t *b = bufs();
  if (!b) return -ENOMEM;
  int rc = encode_one(h, &b->w, text, len, 0, &b->enc[0]);
  if (!rc) rc = fit_post(h, &b->enc[0], max, added, left, out);
  work_trim(b);
  return rc;
}

int lp__hf_fit_ids(const lp__hf_t *h, const int32_t *plain, size_t n, size_t max, int left, lp__hf_enc_t *out) {
  size_t added = lp__hf_post_added(&h->post, 0);
  if (added >= max) return -E2BIG;
  bufs_t *b = bufs();
  if (!b) return -ENOMEM;
  /* the tokens as encode_one gives them: type 0, not special; the offsets
   * no post-processor's ids depend on */
  lp__hf_enc_t *e = &b->enc[0];
  e->n = 0;
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) rc = lp__hf_enc_push(e, plain[i], 0, 0, 0, 0);
  if (!rc) rc = fit_post(h, e, max, added, left, out);
  work_trim(b);
  return rc;
}

int lp__hf_pair_template(const lp__hf_t *h, char *out, size_t cap) {
  const lp__hf_post_t *p = &h->post;
  for (size_t i = 0; p->kind == LP_HF_PP_SEQ && i < h->post.nseq; i++) /* the step that joins a pair */
    if (h->post.seq[i].npair) p = &h->post.seq[i];
  if (!p->npair || cap == 0) return -ENOENT;
  size_t k = 0;
  int seen = 0;
  out[0] = 0;
  for (size_t i = 0; i < p->npair; i++) {
    const lp__hf_tpl_item_t *it = &p->pair[i];
    const char *name = it->id < 0 ? (it->seq ? "$B" : "$A") : it->id < h->nnames ? h->names[it->id] : NULL;
    if (!name) return -ENOENT;
    seen |= it->id < 0 ? 1 << it->seq : 0;
    int w = snprintf(out + k, cap - k, "%s%s", k ? " " : "", name);
    if (w < 0 || (size_t)w >= cap - k) return -E2BIG;
    k += (size_t)w;
  }
  return seen == 3 ? 0 : -ENOENT;
}

int32_t lp__hf_piece_id(const lp__hf_t *h, const char *piece) {
  size_t n = strlen(piece);
  for (size_t i = 0; i < h->added.ntok; i++)
    if (h->added.tok[i].len == n && memcmp(h->added.tok[i].content, piece, n) == 0) return h->added.tok[i].id;
  return lp__hf_vocab_get(&h->model.vocab, piece, n);
}

/* ---- loading */

static int load_added(lp__hf_t *h, json_t *a, char *err, size_t errlen) {
  if (!a || json_is_null(a)) return 0;
  if (!json_is_array(a)) {
    snprintf(err, errlen, "added_tokens: must be an array");
    return -EINVAL;
  }
  if (!(h->added.tok = calloc(json_array_size(a) + 1, sizeof(*h->added.tok)))) return -ENOMEM;
  for (size_t i = 0; i < json_array_size(a); i++) {
    json_t *o = json_array_get(a, i), *id = json_object_get(o, "id"), *c = json_object_get(o, "content");
    if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= LP_HF_MAX_ID || !json_is_string(c)) {
      snprintf(err, errlen, "added_tokens[%zu]: needs \"id\" (0 to 2^24) and \"content\"", i);
      return -EINVAL;
    }
    lp__hf_added_t *t = &h->added.tok[h->added.ntok++];
    t->len = json_string_length(c);
    if (!(t->content = malloc(t->len + 1))) return -ENOMEM;
    memcpy(t->content, json_string_value(c), t->len + 1);
    t->id = (int32_t)json_integer_value(id);
    t->special = json_is_true(json_object_get(o, "special"));
    t->single_word = json_is_true(json_object_get(o, "single_word"));
    t->lstrip = json_is_true(json_object_get(o, "lstrip"));
    t->rstrip = json_is_true(json_object_get(o, "rstrip"));
    json_t *nm = json_object_get(o, "normalized");
    t->normalized = nm ? json_is_true(nm) : !t->special;
  }
  return 0;
}

/* A normalized added token matches the normalizer's form of its content. */
static int normalize_added(lp__hf_t *h) {
  lp__hf_work_t tw = {0};
  int rc = 0;
  for (size_t i = 0; i < h->added.ntok && !rc; i++) {
    lp__hf_added_t *t = &h->added.tok[i];
    if (t->normalized && h->has_norm && t->len) {
      lp__hf_ns_t *s = &tw.ns;
      s->len = 0;
      if ((rc = lp__hf_ns_reserve(s, t->len))) break;
      memcpy(s->b, t->content, t->len);
      memset(s->al, 0, t->len * sizeof(*s->al));
      s->len = t->len;
      if ((rc = lp__hf_norm_run(&h->norm, &tw, s))) break;
      char *c = malloc(s->len + 1);
      if (!c) {
        rc = -ENOMEM;
        break;
      }
      memcpy(c, s->b, s->len);
      c[s->len] = 0;
      free(t->content);
      t->content = c;
      t->len = s->len;
    }
    if (!t->len) continue;
    if (t->normalized) {
      h->added.any_norm = 1;
      h->added.first_norm[(unsigned char)t->content[0]] = 1;
    } else {
      h->added.any_raw = 1;
      h->added.first_raw[(unsigned char)t->content[0]] = 1;
    }
  }
  work_free(&tw);
  return rc;
}

static int names(lp__hf_t *h) {
  int32_t n = h->model.vocab.n;
  for (size_t i = 0; i < h->added.ntok; i++)
    if (h->added.tok[i].id >= n) n = h->added.tok[i].id + 1;
  h->nnames = n;
  h->names = calloc((size_t)n + 1, sizeof(*h->names));
  h->special = calloc((size_t)n + 1, 1);
  if (!h->names || !h->special) return -ENOMEM;
  for (int32_t i = 0; i < h->model.vocab.n; i++) h->names[i] = h->model.vocab.piece[i];
  /* the library names an id by its added token's content (normalized, as
     it matches), and skips on decode every piece equal to a special one */
  for (size_t i = 0; i < h->added.ntok; i++) h->names[h->added.tok[i].id] = h->added.tok[i].content;
  for (size_t i = 0; i < h->added.ntok; i++) {
    const lp__hf_added_t *t = &h->added.tok[i];
    if (!t->special) continue;
    h->special[t->id] = 1;
    int32_t v = lp__hf_vocab_get(&h->model.vocab, t->content, t->len);
    if (v >= 0 && h->names[v] == h->model.vocab.piece[v]) h->special[v] = 1;
  }
  return 0;
}

lp__hf_t *lp__hf_load_json(json_t *root, char *err, size_t errlen) {
  lp__hf_t *h = calloc(1, sizeof(*h));
  if (!h) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  int rc = -EINVAL;
  if (!json_is_object(root)) {
    snprintf(err, errlen, "the file must hold one JSON object");
    goto fail;
  }
  err[0] = 0;
  json_t *n = json_object_get(root, "normalizer"), *p = json_object_get(root, "pre_tokenizer");
  if ((rc = load_added(h, json_object_get(root, "added_tokens"), err, errlen))) goto fail;
  if (n && !json_is_null(n)) {
    h->has_norm = 1;
    if ((rc = lp__hf_norm_load(&h->norm, n, "normalizer", err, errlen))) goto fail;
  }
  if (p && !json_is_null(p)) {
    h->has_pre = 1;
    if ((rc = lp__hf_pre_load(&h->pre, p, "pre_tokenizer", err, errlen))) goto fail;
  }
  if ((rc = lp__hf_model_load(&h->model, json_object_get(root, "model"), err, errlen))) goto fail;
  if ((rc = lp__hf_post_load(&h->post, json_object_get(root, "post_processor"), "post_processor", err, errlen)))
    goto fail;
  json_t *d = json_object_get(root, "decoder");
  if (d && !json_is_null(d)) { /* none: the pieces joined by spaces */
    h->has_dec = 1;
    if ((rc = lp__hf_dec_load(&h->dec, d, "decoder", err, errlen))) goto fail;
  }
  if ((rc = normalize_added(h)) || (rc = names(h))) goto fail;
  const lp__hf_post_t *pp = &h->post;
  for (size_t i = 0; pp->kind == LP_HF_PP_SEQ && i < h->post.nseq; i++)
    if (h->post.seq[i].trim_offsets && (h->post.seq[i].kind == LP_HF_PP_BYTELEVEL || h->post.seq[i].kind == LP_HF_PP_ROBERTA)) {
      pp = &h->post.seq[i];
      break;
    }
  h->trim_offsets = pp->trim_offsets && (pp->kind == LP_HF_PP_BYTELEVEL || pp->kind == LP_HF_PP_ROBERTA);
  h->trim_prefix = pp->add_prefix_space;
  return h;
fail:
  if (!err[0] || rc == -ENOMEM) snprintf(err, errlen, "%s", rc == -ENOMEM ? "out of memory" : "cannot be read");
  lp__hf_free(h);
  return NULL;
}

lp__hf_t *lp__hf_load(const char *path, char *err, size_t errlen) {
  json_error_t je;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    snprintf(err, errlen, "%s: line %d: %s", path, je.line, je.text);
    return NULL;
  }
  lp__hf_t *h = lp__hf_load_json(root, err, errlen);
  json_decref(root);
  return h;
}

void lp__hf_free(lp__hf_t *h) {
  if (!h) return;
  for (size_t i = 0; i < h->added.ntok; i++) free(h->added.tok[i].content);
  free(h->added.tok);
  if (h->has_norm) lp__hf_norm_free(&h->norm);
  if (h->has_pre) lp__hf_pre_free(&h->pre);
  lp__hf_model_free(&h->model);
  lp__hf_post_free(&h->post);
  if (h->has_dec) lp__hf_dec_free(&h->dec);
  free(h->names);
  free(h->special);
  free(h);
}
