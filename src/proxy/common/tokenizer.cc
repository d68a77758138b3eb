// The C interface of lanepack/tokenizer.h over SentencePiece's C++ processor:
// the one C++ file of the proxy (loaded with the configuration, called by the
// fronts as they parse text); nothing here allocates per call but the
// library's own id vector.
#include "lanepack/tokenizer.h"

#include <cerrno>
#include <cstdio>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include <sentencepiece_processor.h>

struct lp_tok_s {
  sentencepiece::SentencePieceProcessor sp;
};

extern "C" lp_tok_t *lp_tok_load(const char *path, const char *extra_options, char *err, size_t errlen) {
  lp_tok_t *t = new (std::nothrow) lp_tok_t;
  if (t == nullptr) {
    std::snprintf(err, errlen, "out of memory");
    return nullptr;
  }
  try {
    auto st = t->sp.Load(std::string_view(path));
    if (st.ok() && extra_options && *extra_options) st = t->sp.SetEncodeExtraOptions(std::string_view(extra_options));
    if (!st.ok()) {
      std::snprintf(err, errlen, "%s", st.ToString().c_str());
      delete t;
      return nullptr;
    }
  } catch (const std::exception &e) { // the library may throw (std::bad_alloc)
    std::snprintf(err, errlen, "%s", e.what());
    delete t;
    return nullptr;
  }
  return t;
}

extern "C" long lp_tok_encode(const lp_tok_t *t, const char *text, size_t len, int32_t *ids, size_t cap) {
  try {
    std::vector<int> v;
    auto st = t->sp.Encode(std::string_view(text, len), &v);
    if (!st.ok()) return -EINVAL;
    for (size_t i = 0; i < v.size() && i < cap; i++) ids[i] = v[i];
    return static_cast<long>(v.size());
  } catch (const std::bad_alloc &) {
    return -ENOMEM;
  } catch (const std::exception &) {
    return -EINVAL;
  }
}

extern "C" int32_t lp_tok_vocab(const lp_tok_t *t) { return t->sp.GetPieceSize(); }

extern "C" void lp_tok_free(lp_tok_t *t) { delete t; }
