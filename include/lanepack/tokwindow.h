/* Tokenizing only what is kept: the ids a model keeps of a long text (its
 * first or last max of them), or whether it is too long, read from a bounded
 * window of the text rather than the whole, over lanepack/tokenizer.h alone
 * (any backend behind it). Safe from several threads at once, as the
 * tokenizer is. */
#ifndef LANEPACK_TOKWINDOW_H
#define LANEPACK_TOKWINDOW_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tokens a window's ids must hold beyond those kept: the ids next to its cut
 * may differ from the whole text's (a word or a run without spaces cut in two
 * tokenizes otherwise), so they are never the kept ones. A cut at a space
 * changes none with a model that splits at spaces (SentencePiece's default);
 * within a script without spaces the Viterbi path settles again within a few
 * pieces: 32 is several times what the corpora of tests/test-tokwindow.py
 * needed. */
#define LP_TOKW_MARGIN 32

/* The first window's bytes per token wanted: about twice the bytes of a piece
 * of English or of a CJK character (3 bytes), so that one window usually
 * suffices; a window short of tokens grows (at least doubling). */
#define LP_TOKW_BYTES_PER_TOKEN 8

/* How far from a window's end a cut looks for a space (else it cuts at a
 * character's start): a word is rarely longer, and a text without spaces
 * costs no more than this scan. */
#define LP_TOKW_SCAN 256

/* The ids lp_tok_encode_fit(t, text, len, max, left, ...) gives, into *ids
 * (grown with realloc as needed: *cap ids; owned by the caller), reading a
 * prefix (a suffix when left) of the text only as long as its first (last)
 * max ids need. Returns the count, or what lp_tok_encode_fit returns on an
 * error, or -ENOMEM. *read (may be NULL) gets the bytes tokenized. */
long lp_tokw_fit(const lp_tok_t *t, const char *text, size_t len, size_t max, int left, int32_t **ids,
                 size_t *cap, size_t *read);

/* The same for the ids without the encode options (lp_tok_encode_plain's):
 * their first (last when left) keep, or all of them when there are fewer. */
long lp_tokw_plain(const lp_tok_t *t, const char *text, size_t len, size_t keep, int left, int32_t **ids,
                   size_t *cap, size_t *read);

/* Whether text has more than limit ids (with or without the encode options,
 * which add at most a few), judged from a prefix: 1 when a prefix already
 * has more (*at_least: a count the whole text surely has, over limit), 0
 * when not found so (the whole text must be tokenized to know), or negative
 * as lp_tok_encode_plain. Reads at most a window of about
 * (limit + LP_TOKW_MARGIN) tokens. */
int lp_tokw_over(const lp_tok_t *t, const char *text, size_t len, size_t limit, long *at_least);

#ifdef __cplusplus
}
#endif

#endif
