/* Text to token ids with a model's SentencePiece model (Debian's
 * libsentencepiece, through tokenizer.cc's C interface): the tokenizer of T5,
 * Gemma, XLM-R (multilingual-e5, bge-m3) and LLaMA 2. Used on the front that
 * read the request, never on the scheduler. */
#ifndef LANEPACK_TOKENIZER_H
#define LANEPACK_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lp_tok_s lp_tok_t;

/* Loads the model file at path with the library's own encode options
 * (extra_options, e.g. "bos:eos" or "reverse:bos:eos"; NULL or "" for none).
 * Returns the tokenizer (owned by the caller: lp_tok_free), or NULL with err
 * saying why (the library's message). Safe to use from several threads at
 * once once loaded: encoding reads it only. */
lp_tok_t *lp_tok_load(const char *path, const char *extra_options, char *err, size_t errlen);

/* The ids of text (len bytes of UTF-8; any bytes are accepted, as the library
 * does), at most cap of them into ids. Returns how many there are (more than
 * cap: ids holds the first cap; call again with room), or -ENOMEM / -EINVAL
 * (the library refused the text). */
long lp_tok_encode(const lp_tok_t *t, const char *text, size_t len, int32_t *ids, size_t cap);

/* The model's vocabulary size: every id is below it. */
int32_t lp_tok_vocab(const lp_tok_t *t);

void lp_tok_free(lp_tok_t *t);

#ifdef __cplusplus
}
#endif

#endif
