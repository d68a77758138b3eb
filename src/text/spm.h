/* The native encoder of SentencePiece Unigram models (spm-model.c reads the
 * .model protobuf, spm-encode.c normalizes and runs the Viterbi search):
 * libsentencepiece 0.1.97's ids, without the library, for sp.cc's encode
 * calls. Models it cannot run exactly so stay on the library. */
#ifndef LP_TEXT_SPM_H
#define LP_TEXT_SPM_H

#include <stddef.h>
#include <stdint.h>

#include "pcmap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ModelProto.SentencePiece.Type's values */
enum { LP_SPM_NORMAL = 1, LP_SPM_UNKNOWN = 2, LP_SPM_CONTROL = 3, LP_SPM_USER = 4, LP_SPM_UNUSED = 5, LP_SPM_BYTE = 6 };

typedef struct {
  const char *s; /* in the model's buffer, not NUL-ended */
  uint32_t len;
  float score;
  int type;
} lp__spm_piece_t;

/* A node of the pieces' trie: the piece ending here (or -1) with what the
 * search adds for it, and its children, by byte. */
typedef struct {
  int32_t id;      /* -1: no piece ends here */
  uint8_t kind;    /* 0 none, LP_SPM_NORMAL, LP_SPM_USER or LP_SPM_UNUSED */
  uint8_t dense;   /* 1: kids indexes a 256-wide table in next; 0: nkids sorted labels */
  uint16_t nkids;  /* children (at most 256) */
  float score;     /* the piece's score (NORMAL) */
  uint32_t kids;   /* first child's index into labels and next, or the dense table's into next */
} lp__spm_node_t;

/* What an ASCII byte of the input becomes before the search looks (built from
 * the character map at load, so most text never walks the map's trie): itself,
 * its one replacement, or what the map's trie says; LP_SPM_A_HI added: the
 * trie must be walked when the next byte is not ASCII (NFKC's keys "a" plus a
 * combining accent), else the byte is as the rest says. */
enum { LP_SPM_A_SELF = 0, LP_SPM_A_MAPPED = 1, LP_SPM_A_SLOW = 2, LP_SPM_A_HI = 4 };

typedef struct lp__spm_s lp__spm_t;
struct lp__spm_s {
  unsigned char *buf;        /* the .model file's bytes; owned (pieces and the map point into it) */
  lp__spm_piece_t *pieces;   /* owned, npieces */
  int32_t npieces;
  int model_type;            /* TrainerSpec.ModelType: 1 Unigram */
  int byte_fallback, ws_suffix;
  int add_dummy_prefix, remove_extra_ws, escape_ws;
  const unsigned char *charsmap; /* NormalizerSpec.precompiled_charsmap, in buf; NULL: none */
  size_t charsmap_len;
  const char *bos_piece, *eos_piece; /* TrainerSpec's (in buf, not NUL-ended), or NULL: "<s>", "</s>" */
  uint32_t bos_len, eos_len;
  /* derived at load (spm-encode.c's lp__spm_load) */
  lp__pcmap_t map;
  int32_t unk_id, bos_id, eos_id;
  int32_t byte_id[256];
  float min_score, max_score;
  lp__spm_node_t *nodes;     /* owned; [0] is the root */
  uint8_t *labels;           /* owned: children's bytes, sorted, for nodes without a dense table */
  uint32_t *next;            /* owned: the child node of each label, then the dense tables */
  uint8_t ascii[128];        /* LP_SPM_A_* per byte, LP_SPM_A_HI added */
  const char *ascii_to[128]; /* LP_SPM_A_MAPPED: the replacement (NUL-ended) */
  uint8_t user_start[256];   /* 1: a user-defined piece begins with this byte */
  int has_user;
  uint8_t ops[8];            /* the encode options in order: 'b' bos, 'e' eos, 'r' reverse */
  int nops, nadded;          /* of them, bos and eos */
};

/* Reads a .model file's bytes (buf, len; taken over: freed with the model
 * even on failure) into *out (spm-model.c): the protobuf only, no checks.
 * 0, -EINVAL (malformed protobuf) or -ENOMEM; why says which. */
int lp__spm_read(unsigned char *buf, size_t len, lp__spm_t **out, char *why, size_t whylen);

/* lp__spm_read, then the library's checks and the search's tables (the
 * pieces' trie, the map's ASCII table): spm-encode.c. 0; -EINVAL: not a model
 * this reads (malformed protobuf, no unknown piece, byte pieces missing, a
 * piece empty or twice); -ENOTSUP: a model the native encoder does not run
 * (not Unigram, a piece with a NUL, ...): the library still may; -ENOMEM.
 * why says which. */
int lp__spm_load(unsigned char *buf, size_t len, lp__spm_t **out, char *why, size_t whylen);

/* why (whylen bytes) set from fmt: returns rc, for the loaders' refusals. */
int lp__spm_why(char *why, size_t whylen, int rc, const char *fmt, ...);

/* The library's encode extra options ("bos:eos", "reverse", "unk", ...).
 * 0 or -EINVAL (an unknown option, or bos/eos without a piece). */
int lp__spm_set_options(lp__spm_t *m, const char *options);

/* The ids of text as the library's Encode gives them, with the options
 * (with_options) or without, at most cap into ids: the count (more than cap:
 * call again with room) or -ENOMEM. Thread-safe: scratch is per thread. */
long lp__spm_encode(const lp__spm_t *m, const char *text, size_t len, int with_options, int32_t *ids, size_t cap);

/* The ids without options cut to max minus the options' pieces (the end cut,
 * or the start when left), then the options applied: the count, -E2BIG when
 * the options alone fill max, or -ENOMEM. */
long lp__spm_encode_fit(const lp__spm_t *m, const char *text, size_t len, size_t max, int left, int32_t *ids,
                        size_t cap);

void lp__spm_free(lp__spm_t *m);

#ifdef __cplusplus
}
#endif

#endif
