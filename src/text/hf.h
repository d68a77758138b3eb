/* Hugging Face tokenizer.json, loaded and run as Hugging Face's tokenizers
 * library does: the types shared by the files of src/text/hf-*.c (loader,
 * normalizers, pre-tokenizers, models, post-processors, added tokens). */
#ifndef LP_TEXT_HF_H
#define LP_TEXT_HF_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "pcmap.h"

/* Ids a file may name are below this: the vocabulary and name tables are
 * sized by the largest, and no vocabulary comes near 2^24. */
#define LP_HF_MAX_ID (1 << 24)

/* ---- a string being normalized: its bytes and, for each byte, the span
 * [a0, a1) of the original text's bytes it comes from (the library's
 * NormalizedString alignments; every byte of one character has the same). */
typedef struct {
  uint32_t a0, a1;
} lp__hf_al_t;

typedef struct {
  char *b;         /* owned; not NUL-terminated */
  lp__hf_al_t *al; /* owned; len entries */
  size_t len, cap;
  size_t max;      /* 0: unbounded; else growing past max bytes fails (-ENOMEM) and sets over */
  int over;
} lp__hf_ns_t;

/* A text's normalized form may be at most this many times its bytes, plus
 * LP_HF_NORM_SLACK: past it the text is refused (-EINVAL). The library's
 * normalizers grow a text by 11x at most (NFKD of U+FDFA, 3 bytes to 33);
 * a Sequence of Replace rules, each making one byte many, grows it
 * exponentially (8 rules of 1 -> 16 bytes made 4 bytes 17 GB). */
#define LP_HF_NORM_GROWTH 32
/* ... and room for what a normalizer adds once per text (Prepend's piece). */
#define LP_HF_NORM_SLACK (64u * 1024)

int lp__hf_ns_reserve(lp__hf_ns_t *s, size_t more);
/* Appends code point cp with alignment al; 0 or -ENOMEM. */
int lp__hf_ns_put(lp__hf_ns_t *s, uint32_t cp, lp__hf_al_t al);
/* Appends n bytes (whole characters) with their own alignments. */
int lp__hf_ns_append(lp__hf_ns_t *s, const char *b, const lp__hf_al_t *al, size_t n);
void lp__hf_ns_free(lp__hf_ns_t *s);
/* The regex work one text may cost (Split, Replace): a pattern the file
 * brings may backtrack (`(a|a)+c`), each match under PCRE2's own step limit
 * yet minutes in all. Set by lp__hf_budget_start as a text's encoding begins
 * (the calling thread's), checked by lp__hf_budget_spent between matches. */
void lp__hf_budget_start(size_t len);
/* 1 once the calling thread's text has spent its budget: the text is refused. */
int lp__hf_budget_spent(void);
/* The code point at b[i] (valid UTF-8, as every string here is) and its length. */
uint32_t lp__hf_utf8_get(const char *b, size_t i, int *n);
int lp__hf_utf8_put(char *out, uint32_t cp);
/* 0 when b[0..n) is valid UTF-8 (what the library's strings are), else -EINVAL. */
int lp__hf_utf8_check(const char *b, size_t n);

/* Writes "where: what" into err; returns -EINVAL. */
int lp__hf_bad(char *err, size_t errlen, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A Sequence's parts (o[key], an array) loaded by fn into *out (owned by the
 * caller, *n of elsize bytes, zeroed first), each told where it sits. */
typedef int (*lp__hf_load_fn)(void *elem, json_t *o, const char *where, char *err, size_t errlen);
int lp__hf_load_seq(json_t *o, const char *key, const char *where, size_t elsize, void **out, size_t *n,
                    lp__hf_load_fn fn, char *err, size_t errlen);

/* Unicode classes as Rust's std and the unicode_categories crate define them. */
int lp__hf_is_whitespace(uint32_t cp); /* char::is_whitespace: White_Space */
int lp__hf_is_punct(uint32_t cp);      /* P* */
int lp__hf_is_word(uint32_t cp);       /* regex's \w */

/* ---- a vocabulary: piece -> id (open addressing) and id -> piece. */
typedef struct {
  char **piece;   /* owned, by id; NULL for an id the file gave no piece */
  uint32_t *plen; /* by id */
  int32_t n;      /* ids are 0..n-1 */
  int32_t *slot;  /* owned: ids, -1 empty; mask+1 slots */
  uint32_t mask;
} lp__hf_vocab_t;

int lp__hf_vocab_init(lp__hf_vocab_t *v, int32_t n);
/* Sets piece (len bytes) to id; -EEXIST when id already has one, -ENOMEM. */
int lp__hf_vocab_set(lp__hf_vocab_t *v, const char *piece, size_t len, int32_t id);
int32_t lp__hf_vocab_get(const lp__hf_vocab_t *v, const char *piece, size_t len);
void lp__hf_vocab_free(lp__hf_vocab_t *v);
uint64_t lp__hf_hash(const void *p, size_t n);

/* ---- the work of one encode call: its buffers, reused by a thread. */
typedef struct {
  uint32_t off, len; /* bytes of the pre-tokenized string (lp__hf_work_t.pre) */
  int32_t added;     /* an added token's id (the split is that token), else -1 */
} lp__hf_split_t;

typedef struct {
  int32_t id;
  uint32_t a0, a1;  /* offsets in the original text (bytes) */
  uint8_t type;     /* type id */
  uint8_t special;  /* added by the post-processor */
} lp__hf_token_t;

typedef struct {
  lp__hf_token_t *t;
  size_t n, cap;
} lp__hf_enc_t;

int lp__hf_enc_push(lp__hf_enc_t *e, int32_t id, uint32_t a0, uint32_t a1, uint8_t type, uint8_t special);

typedef struct {
  lp__hf_ns_t ns, tmp;  /* the normalized string and a second buffer */
  lp__hf_ns_t pre;      /* the pre-tokenized pieces' bytes, one after another */
  lp__hf_split_t *sp, *sp2;
  size_t nsp, nsp2, spcap, sp2cap;
  lp__hf_ns_t pre2;     /* the pieces' bytes as a pre-tokenizer rewrites them */
  void *scratch;        /* per-model scratch (BPE symbols and queue) */
  size_t scratch_cap;
} lp__hf_work_t;

int lp__hf_split_push(lp__hf_split_t **sp, size_t *n, size_t *cap, uint32_t off, uint32_t len, int32_t added);

/* ---- normalizers */
typedef enum {
  LP_HF_N_BERT, LP_HF_N_NFC, LP_HF_N_NFD, LP_HF_N_NFKC, LP_HF_N_NFKD, LP_HF_N_LOWER, LP_HF_N_STRIP_ACCENTS,
  LP_HF_N_STRIP, LP_HF_N_REPLACE, LP_HF_N_PREPEND, LP_HF_N_SEQ, LP_HF_N_PRECOMPILED
} lp__hf_norm_kind_t;

typedef struct lp__hf_norm_s lp__hf_norm_t;
struct lp__hf_norm_s {
  lp__hf_norm_kind_t kind;
  int clean_text, chinese, strip_accents, lowercase; /* BertNormalizer */
  int left, right;                                   /* Strip */
  char *pattern, *content;                           /* Replace (pattern string or regex), Prepend */
  size_t pattern_len, content_len;
  pcre2_code *re;                                    /* Replace's regex; owned */
  lp__hf_norm_t *seq;                                /* Sequence; owned, nseq */
  unsigned char *blob;                               /* Precompiled's map, decoded; owned */
  lp__pcmap_t pc;                                    /* its trie and strings (in blob) */
  size_t nseq;
};

/* Normalizes w->ns in place (w->tmp is its second buffer). 0 or -ENOMEM. */
int lp__hf_norm_run(const lp__hf_norm_t *n, lp__hf_work_t *w, lp__hf_ns_t *s);
int lp__hf_norm_load(void *n, json_t *o, const char *where, char *err, size_t errlen);
void lp__hf_norm_free(lp__hf_norm_t *n);

/* ---- pre-tokenizers */
typedef enum {
  LP_HF_P_BERT, LP_HF_P_WHITESPACE, LP_HF_P_WSSPLIT, LP_HF_P_BYTELEVEL, LP_HF_P_SPLIT, LP_HF_P_PUNCT,
  LP_HF_P_DIGITS, LP_HF_P_CHARDELIM, LP_HF_P_METASPACE, LP_HF_P_SEQ
} lp__hf_pre_kind_t;

typedef enum { LP_HF_B_REMOVED, LP_HF_B_ISOLATED, LP_HF_B_PREV, LP_HF_B_NEXT, LP_HF_B_CONTIGUOUS } lp__hf_behavior_t;

typedef struct lp__hf_pre_s lp__hf_pre_t;
struct lp__hf_pre_s {
  lp__hf_pre_kind_t kind;
  lp__hf_behavior_t behavior;
  int invert, add_prefix_space, use_regex, individual_digits;
  int prepend, split;        /* Metaspace: 0 never, 1 first, 2 always; split at the replacement */
  uint32_t delim;            /* CharDelimiterSplit's delimiter, Metaspace's replacement */
  char *pattern;             /* Split's String pattern; owned */
  size_t pattern_len;
  pcre2_code *re;            /* Split's Regex, ByteLevel's; owned */
  lp__hf_pre_t *seq;         /* Sequence; owned */
  size_t nseq;
};

/* Splits w->sp (pieces of w->pre) further, as the pre-tokenizer does. */
int lp__hf_pre_run(const lp__hf_pre_t *p, lp__hf_work_t *w);
int lp__hf_pre_load(void *p, json_t *o, const char *where, char *err, size_t errlen);
void lp__hf_pre_free(lp__hf_pre_t *p);

/* ---- models */
typedef enum { LP_HF_M_WORDPIECE, LP_HF_M_BPE, LP_HF_M_UNIGRAM, LP_HF_M_WORDLEVEL } lp__hf_model_kind_t;

typedef struct {
  uint32_t *key;   /* (node << 8 | byte) + 1, 0 empty; owned */
  uint32_t *child; /* owned */
  int32_t *id;     /* by node: the piece ending there, or -1; owned */
  uint32_t mask, nnodes, capnodes;
} lp__hf_trie_t;

/* The slot a transition's key starts probing at: keys are dense small
 * integers, a multiply spreads them. */
static inline uint32_t lp__hf_trie_slot(uint32_t k, uint32_t mask) { return (k * 0x9E3779B1u) >> 7 & mask; }

/* The child of node by byte c, or 0 (the root, node 0, is never a child). */
static inline uint32_t lp__hf_trie_next(const lp__hf_trie_t *t, uint32_t node, unsigned char c) {
  uint32_t k = (node << 8 | c) + 1;
  for (uint32_t i = lp__hf_trie_slot(k, t->mask);; i = (i + 1) & t->mask) {
    if (t->key[i] == k) return t->child[i];
    if (!t->key[i]) return 0;
  }
}

int lp__hf_trie_init(lp__hf_trie_t *t);
/* Adds piece s (n bytes) as id; where the piece is there already, replace
 * says whether the new id stands. 0, -ENOMEM or -E2BIG. */
int lp__hf_trie_insert(lp__hf_trie_t *t, const char *s, size_t n, int32_t id, int replace);
void lp__hf_trie_free(lp__hf_trie_t *t);

typedef struct {
  uint64_t key; /* left id << 32 | right id */
  uint32_t rank;
  int32_t id;   /* what they make; -1: an empty slot */
} lp__hf_merge_t;

typedef struct {
  lp__hf_model_kind_t kind;
  lp__hf_vocab_t vocab;
  int32_t unk;                 /* the unknown piece's id, or -1 */
  /* WordPiece */
  char *prefix;                /* continuing_subword_prefix; owned */
  size_t prefix_len;
  uint32_t max_chars;          /* max_input_chars_per_word */
  lp__hf_trie_t start, cont;   /* pieces, and pieces after the prefix */
  /* BPE (prefix above is its continuing_subword_prefix too) */
  lp__hf_merge_t *merges;      /* owned; mmask+1 slots */
  uint32_t mmask;
  char *suffix;                /* end_of_word_suffix; owned */
  size_t suffix_len;
  int byte_fallback, fuse_unk, ignore_merges;
  /* Unigram (start above is its trie; byte_fallback too) */
  double *scores;              /* by id; owned */
  double min_score;
} lp__hf_model_t;

/* Appends the tokens of one pre-tokenized piece (bytes b[0..n), alignments
 * al) to e. 0, -ENOMEM, or -EINVAL (no unknown piece where one is needed). */
int lp__hf_model_run(const lp__hf_model_t *m, lp__hf_work_t *w, const char *b, const lp__hf_al_t *al, size_t n,
                     lp__hf_enc_t *e);
int lp__hf_model_load(lp__hf_model_t *m, json_t *o, char *err, size_t errlen);
void lp__hf_model_free(lp__hf_model_t *m);

/* ---- post-processors */
typedef enum { LP_HF_PP_NONE, LP_HF_PP_BERT, LP_HF_PP_ROBERTA, LP_HF_PP_TEMPLATE, LP_HF_PP_BYTELEVEL, LP_HF_PP_SEQ } lp__hf_post_kind_t;

typedef struct {
  int32_t id;  /* a special token's id, or -1 for a sequence */
  int seq;     /* 0 = $A, 1 = $B (when id < 0) */
  uint8_t type;
} lp__hf_tpl_item_t;

typedef struct lp__hf_post_s lp__hf_post_t;
struct lp__hf_post_s {
  lp__hf_post_kind_t kind;
  lp__hf_tpl_item_t *single, *pair; /* owned */
  size_t nsingle, npair;
  int trim_offsets, add_prefix_space; /* Roberta, ByteLevel */
  lp__hf_post_t *seq;
  size_t nseq;
};

/* Joins a (and b, when pair) into out with the special tokens. */
int lp__hf_post_run(const lp__hf_post_t *p, const lp__hf_enc_t *a, const lp__hf_enc_t *b, int special,
                    lp__hf_enc_t *out);
/* How many tokens the post-processor adds to one sequence (two when pair). */
size_t lp__hf_post_added(const lp__hf_post_t *p, int pair);
int lp__hf_post_load(void *p, json_t *o, const char *where, char *err, size_t errlen);
void lp__hf_post_free(lp__hf_post_t *p);

/* ---- added tokens */
typedef struct {
  char *content; /* owned */
  size_t len;
  int32_t id;
  int special, single_word, lstrip, rstrip, normalized;
} lp__hf_added_t;

typedef struct {
  lp__hf_added_t *tok; /* owned, ntok */
  size_t ntok;
  int any_raw, any_norm;
  uint8_t first_raw[256], first_norm[256]; /* first bytes of the contents matched raw / normalized */
} lp__hf_addedset_t;

/* Splits s (a piece of text; offsets relative to it) at the added tokens
 * matched raw (normalized = 0) or in normalized text (1), as the library does. */
int lp__hf_added_find(const lp__hf_addedset_t *a, int normalized, const char *s, size_t n, lp__hf_split_t **sp,
                      size_t *nsp, size_t *cap);

/* ---- decoders: pieces back to text (hf-decode.c) */
typedef enum {
  LP_HF_D_WORDPIECE, LP_HF_D_BYTELEVEL, LP_HF_D_METASPACE, LP_HF_D_BPE, LP_HF_D_BYTEFALLBACK, LP_HF_D_FUSE,
  LP_HF_D_STRIP, LP_HF_D_REPLACE, LP_HF_D_CTC, LP_HF_D_SEQ
} lp__hf_dec_kind_t;

typedef struct lp__hf_dec_s lp__hf_dec_t;
struct lp__hf_dec_s {
  lp__hf_dec_kind_t kind;
  char *a, *b;        /* WordPiece's prefix, BPE's suffix, Replace's pattern and content, CTC's pad and delimiter; owned */
  size_t alen, blen;
  lp__hf_norm_t *rep; /* Replace, run as the Replace normalizer it is; owned */
  int cleanup;        /* WordPiece, CTC */
  int prepend;        /* Metaspace: 0 never, else first/always */
  uint32_t ch;        /* Metaspace's replacement, Strip's content */
  size_t start, stop; /* Strip */
  lp__hf_dec_t *seq;  /* Sequence; owned */
  size_t nseq;
};

int lp__hf_dec_load(void *d, json_t *o, const char *where, char *err, size_t errlen);
void lp__hf_dec_free(lp__hf_dec_t *d);

/* ---- the whole tokenizer */
typedef struct {
  lp__hf_addedset_t added;
  int has_norm, has_pre;
  lp__hf_norm_t norm;
  lp__hf_pre_t pre;
  lp__hf_model_t model;
  lp__hf_post_t post;
  int has_dec;
  lp__hf_dec_t dec;
  uint8_t *special; /* by id: the piece is a special added token's (decode skips it); owned, nnames */
  int trim_offsets, trim_prefix; /* a ByteLevel/Roberta post-processor trims offsets (its add_prefix_space) */
  char **names;     /* id -> piece, the added tokens' included; owned (the pieces are the vocabulary's and added tokens') */
  int32_t nnames;
} lp__hf_t;

lp__hf_t *lp__hf_load(const char *path, char *err, size_t errlen);
lp__hf_t *lp__hf_load_json(json_t *root, char *err, size_t errlen);
/* Encodes text (and pair when not NULL) with the special tokens when special.
 * 0, -ENOMEM or -EINVAL (not UTF-8). */
int lp__hf_encode(const lp__hf_t *h, const char *text, size_t len, const char *pair, size_t plen, int special,
                  lp__hf_enc_t *out);
/* This thread's encoding for a caller's result (tok.c's), kept between
 * calls and freed when the thread ends; NULL: out of memory. */
lp__hf_enc_t *lp__hf_result(void);
int lp__hf_encode_fit(const lp__hf_t *h, const char *text, size_t len, size_t max, int left, lp__hf_enc_t *out);
/* The same from a text's plain ids (lp__hf_encode's without special), not
 * its text: plain may be the ids a caller read out of out. */
int lp__hf_fit_ids(const lp__hf_t *h, const int32_t *plain, size_t n, size_t max, int left, lp__hf_enc_t *out);
int lp__hf_pair_template(const lp__hf_t *h, char *out, size_t cap);
/* ids as text, as the library's decode (its decoder, or the pieces joined
 * by spaces): the length, written when it fits cap; -EINVAL (an id out of
 * the vocabulary) or -ENOMEM. */
long lp__hf_decode(const lp__hf_t *h, const int32_t *ids, size_t n, int skip_special, char *out, size_t cap);
int32_t lp__hf_piece_id(const lp__hf_t *h, const char *piece);
void lp__hf_free(lp__hf_t *h);

#endif
