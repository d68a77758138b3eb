/* Text to token ids with a model's SentencePiece model (Debian's
 * libsentencepiece: T5, Gemma, XLM-R, LLaMA 2) or Hugging Face tokenizer.json
 * (src/text/hf*.c: WordPiece for the BERT family, BPE, ...), the same ids as
 * Hugging Face's tokenizers library gives. Used where text is tokenized,
 * never on the scheduler. */
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

/* lp_tok_load, but a SentencePiece model stays on libsentencepiece even
 * where the native encoder would run it: for benchmarks and tests that set
 * the two side by side. */
lp_tok_t *lp_tok_load_library(const char *path, const char *extra_options, char *err, size_t errlen);

/* What encodes t's texts: "native" (a SentencePiece Unigram model, run by
 * lanepack's own encoder with the library's ids), "libsentencepiece" (any
 * other SentencePiece model; *why, when why is not NULL, says why not native)
 * or "tokenizer.json". Static strings, or valid while t is. */
const char *lp_tok_engine(const lp_tok_t *t, const char **why);

/* Loads a Hugging Face tokenizer.json (lp_tok_load takes one too: a file
 * whose first byte other than whitespace is '{', without options). Its
 * post-processor is what lp_tok_encode adds ([CLS] ... [SEP]); its
 * truncation and padding are ignored. NULL with err naming the part of the
 * file that cannot be run ("normalizer.normalizers[1]: type 'Foo' is not
 * supported"). */
lp_tok_t *lp_tok_load_hf(const char *path, char *err, size_t errlen);

/* The ids of text (len bytes of UTF-8; any bytes are accepted, as the library
 * does), at most cap of them into ids. Returns how many there are (more than
 * cap: ids holds the first cap; call again with room), or -ENOMEM / -EINVAL
 * (the library refused the text). */
long lp_tok_encode(const lp_tok_t *t, const char *text, size_t len, int32_t *ids, size_t cap);

/* The same without the encode options (no "bos"/"eos" pieces added): a part
 * of a pair, which a template joins. */
long lp_tok_encode_plain(const lp_tok_t *t, const char *text, size_t len, int32_t *ids, size_t cap);

/* The ids of text cut to at most max with the encode options applied after the
 * cut, so the pieces they add stay (an "eos" is not cut off): the text's own
 * pieces lose their end (or their start when left). Returns the count, or
 * -E2BIG when the options' pieces alone fill max, -ENOMEM / -EINVAL. */
long lp_tok_encode_fit(const lp_tok_t *t, const char *text, size_t len, size_t max, int left, int32_t *ids,
                       size_t cap);

/* What lp_tok_encode_fit gives for a text whose plain ids
 * (lp_tok_encode_plain's) are plain[0..n), from the ids alone: a caller that
 * has them tokenizes the text once. plain and ids may be the same array
 * when cap holds max ids (a second call would not see the plain ids). */
long lp_tok_fit_ids(const lp_tok_t *t, const int32_t *plain, size_t n, size_t max, int left, int32_t *ids,
                    size_t cap);

/* The id of a piece of the vocabulary (e.g. "</s>"), or -1 when it has none. */
int32_t lp_tok_piece_id(const lp_tok_t *t, const char *piece);

/* One piece of an encoded text: its id, where its surface lies in the text
 * (bytes [begin, end)), and whether it is a control piece the options add
 * ("<s>", "</s>": no surface). */
typedef struct lp_tok_piece_s {
  int32_t id;
  uint32_t begin, end;
  int special;
} lp_tok_piece_t;

/* The pieces of text (with the encode options when special), at most cap
 * into out: the count (more than cap: call again with room), or -ENOMEM /
 * -EINVAL. */
long lp_tok_pieces(const lp_tok_t *t, const char *text, size_t len, int special, lp_tok_piece_t *out,
                   size_t cap);

/* A piece's name in the vocabulary (e.g. "</s>"), NUL-terminated; valid while
 * t is; "" for an id out of range. */
const char *lp_tok_piece_name(const lp_tok_t *t, int32_t id);

/* ids as text (UTF-8, not NUL-terminated) into out, at most cap bytes, as
 * SentencePiece decodes them, or a tokenizer.json as Hugging Face's library
 * does (its "decoder"; none: the pieces joined by spaces); control pieces
 * ("<s>", "</s>"; a tokenizer.json's special added tokens) left out with
 * skip_special, else written by their names. Returns the length (more than
 * cap: out holds nothing; call again with room), or -EINVAL (an id out of the
 * vocabulary) / -ENOMEM. */
long lp_tok_decode(const lp_tok_t *t, const int32_t *ids, size_t n, int skip_special, char *out, size_t cap);
/* A tokenizer.json's own pair layout (its post-processor's, e.g. BERT's
 * "[CLS] $A [SEP] $B [SEP]") as a TEI pair template's text into out (cap
 * bytes): 0, or -ENOENT when the tokenizer has none (a SentencePiece model,
 * a file without a post-processor), -E2BIG when it does not fit. */
int lp_tok_pair_template(const lp_tok_t *t, char *out, size_t cap);

/* The model's vocabulary size: every id is below it. */
int32_t lp_tok_vocab(const lp_tok_t *t);

void lp_tok_free(lp_tok_t *t);

#ifdef __cplusplus
}
#endif

#endif
