/* libFuzzer: the tokenizer.json encoder on any bytes, through three small
 * tokenizers (BERT's WordPiece, byte-level BPE behind a Split regex, Unigram
 * behind Metaspace) that reach every normalizer and pre-tokenizer kind they
 * can: not UTF-8 is refused, anything else encodes with every offset inside
 * its text, ids in the vocabulary, and the same ids through lp_tok_encode. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"

static const char *const FILES[] = {
  "{\"added_tokens\": [{\"id\": 0, \"content\": \"[UNK]\", \"special\": true}, {\"id\": 1, \"content\": \"[CLS]\", \"special\": true},"
  " {\"id\": 2, \"content\": \"[SEP]\", \"special\": true}, {\"id\": 9, \"content\": \"ab\", \"single_word\": true, \"lstrip\": true,"
  " \"rstrip\": true, \"normalized\": true}],"
  " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"BertNormalizer\", \"lowercase\": true},"
  " {\"type\": \"NFKC\"}, {\"type\": \"Replace\", \"pattern\": {\"Regex\": \"\\\\s{2,}\"}, \"content\": \" \"}, {\"type\": \"Strip\"}]},"
  " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"BertPreTokenizer\"}, {\"type\": \"Digits\","
  " \"individual_digits\": true}, {\"type\": \"Split\", \"pattern\": {\"String\": \"a\"}, \"behavior\": \"MergedWithNext\"}]},"
  " \"post_processor\": {\"type\": \"BertProcessing\", \"sep\": [\"[SEP]\", 2], \"cls\": [\"[CLS]\", 1]},"
  " \"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"max_input_chars_per_word\": 20, \"vocab\": {\"[UNK]\": 0,"
  " \"[CLS]\": 1, \"[SEP]\": 2, \"a\": 3, \"b\": 4, \"##a\": 5, \"##b\": 6, \"1\": 7, \"\\u5317\": 8, \"ab\": 9, \"##\\u00e9\": 10}}}",
  "{\"added_tokens\": [{\"id\": 7, \"content\": \"<s>\", \"special\": true}],"
  " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\":"
  " \"(?i:'s|'t)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s+(?!\\\\S)|\\\\s+\"},"
  " \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"use_regex\": true}]},"
  " \"post_processor\": {\"type\": \"RobertaProcessing\", \"sep\": [\"<s>\", 7], \"cls\": [\"<s>\", 7]},"
  " \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"fuse_unk\": true, \"unk_token\": \"u\", \"vocab\": {\"\\u0120\": 0, \"a\": 1,"
  " \"b\": 2, \"ab\": 3, \"\\u0120a\": 4, \"\\u0120ab\": 5, \"u\": 6, \"<0x41>\": 8}, \"merges\": [\"a b\", [\"\\u0120\", \"a\"], [\"\\u0120a\", \"b\"]]}}",
  "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFD\"}, {\"type\": \"StripAccents\"}, {\"type\": \"Lowercase\"},"
  " {\"type\": \"Prepend\", \"prepend\": \"\\u2581\"}]},"
  " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"WhitespaceSplit\"}, {\"type\": \"Punctuation\"},"
  " {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"first\", \"split\": true}, {\"type\": \"CharDelimiterSplit\","
  " \"delimiter\": \"x\"}, {\"type\": \"Whitespace\"}]},"
  " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}},"
  " {\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}], \"pair\": [{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}},"
  " {\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}], \"special_tokens\": {\"</s>\": {\"id\": \"</s>\", \"ids\": [1], \"tokens\": [\"</s>\"]}}},"
  " \"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"byte_fallback\": true, \"vocab\": [[\"<unk>\", 0], [\"</s>\", 0], [\"\\u2581\", -1],"
  " [\"a\", -2], [\"ab\", -1.5], [\"\\u2581a\", -1], [\"b\", -2.5], [\"<0x62>\", -9]]}}",
};

static lp__hf_t *toks[3];

static void check(const lp__hf_t *h, const lp__hf_enc_t *e, size_t limit) {
  for (size_t i = 0; i < e->n; i++) {
    const lp__hf_token_t *t = &e->t[i];
    if (t->a0 > t->a1 || t->a1 > limit || t->id < 0 || t->id >= h->nnames) abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!toks[0])
    for (int i = 0; i < 3; i++) {
      char err[256];
      json_error_t je;
      json_t *r = json_loads(FILES[i], 0, &je);
      if (!r || !(toks[i] = lp__hf_load_json(r, err, sizeof(err)))) {
        fprintf(stderr, "fuzz-hftok-encode: tokenizer %d: %s %s\n", i, r ? err : je.text, r ? "" : "(JSON)");
        abort();
      }
      json_decref(r);
    }
  if (size < 1) return 0;
  const lp__hf_t *h = toks[data[0] % 3];
  const char *text = (const char *)data + 1;
  size_t n = size - 1;
  /* a NUL splits a pair */
  const char *nul = memchr(text, 0, n);
  size_t la = nul ? (size_t)(nul - text) : n;
  lp__hf_enc_t e = {0};
  int valid = lp__hf_utf8_check(text, la) == 0;
  int rc = lp__hf_encode(h, text, la, NULL, 0, data[0] & 4, &e);
  if (valid ? rc != 0 : rc != -EINVAL) abort(); /* each of these has an unknown piece: any text encodes */
  if (rc == 0) check(h, &e, la);
  if (nul) {
    const char *b = nul + 1;
    size_t lb = n - la - 1;
    rc = lp__hf_encode(h, text, la, b, lb, data[0] & 8, &e);
    if (rc == 0) check(h, &e, la > lb ? la : lb);
  }
  free(e.t);
  return 0;
}
