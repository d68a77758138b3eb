/* The SentencePiece kind of lanepack/tokenizer.h (sp.cc, over Debian's
 * libsentencepiece): the same calls, which tok.c dispatches to. */
#ifndef LP_TEXT_SP_H
#define LP_TEXT_SP_H

#include "lanepack/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lp__sp_s lp__sp_t;

/* native: a Unigram model the native encoder (spm.h) runs is encoded there;
 * 0 keeps every model on the library. */
lp__sp_t *lp__sp_load(const char *path, const char *extra_options, int native, char *err, size_t errlen);
/* "native" or "libsentencepiece", and why not native ("" when it is). */
const char *lp__sp_engine(const lp__sp_t *t);
const char *lp__sp_engine_why(const lp__sp_t *t);
long lp__sp_encode(const lp__sp_t *t, const char *text, size_t len, int32_t *ids, size_t cap);
long lp__sp_encode_plain(const lp__sp_t *t, const char *text, size_t len, int32_t *ids, size_t cap);
long lp__sp_encode_fit(const lp__sp_t *t, const char *text, size_t len, size_t max, int left, int32_t *ids,
                       size_t cap);
long lp__sp_fit_ids(const lp__sp_t *t, const int32_t *plain, size_t n, size_t max, int left, int32_t *ids,
                    size_t cap);
int32_t lp__sp_piece_id(const lp__sp_t *t, const char *piece);
long lp__sp_pieces(const lp__sp_t *t, const char *text, size_t len, int special, lp_tok_piece_t *out, size_t cap);
const char *lp__sp_piece_name(const lp__sp_t *t, int32_t id);
int32_t lp__sp_vocab(const lp__sp_t *t);
long lp__sp_decode(const lp__sp_t *t, const int32_t *ids, size_t n, int skip_special, char *out, size_t cap);
void lp__sp_free(lp__sp_t *t);

#ifdef __cplusplus
}
#endif

#endif
