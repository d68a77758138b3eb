// SentencePiece model files behind tok.c's dispatch (Debian's libsentencepiece,
// C++): the one C++ file of the proxy (loaded with the configuration, called
// by the fronts as they parse text). A Unigram model the native encoder
// (spm.h) runs is encoded there, checked against the library at load; other
// models, and pieces, decoding and offsets, stay on the library. Nothing here
// allocates per call but the library's own id vector and piece list.
#include "sp.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include <sentencepiece_processor.h>

#include "spm.h"

struct lp__sp_s {
  sentencepiece::SentencePieceProcessor sp;    // with the encode options
  sentencepiece::SentencePieceProcessor plain; // without them (loaded only when there are some)
  bool has_options = false;
  std::string options;                         // "bos:eos", applied by hand after a cut
  lp__spm_t *fast = nullptr;                   // the native encoder, when it runs this model; owned
  std::string why;                             // why not, when not
  int bos = -1, eos = -1;                      // the ids the options' bos and eos add, as the library finds them
  ~lp__sp_s() { lp__spm_free(fast); }
  const sentencepiece::SentencePieceProcessor &raw() const { return has_options ? plain : sp; }
};

// Texts the native encoder must encode as the library does before it is
// trusted with a model: several scripts, spaces, controls, malformed UTF-8.
static const char *const kSelfCheck[] = {
    "", " ", "Hello, world!  The  quick\tbrown fox\n", "  caf\xc3\xa9 \xef\xac\x81 \xef\xbc\xa1\xef\xbc\xa2 12345 ",
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xd0\xa0\xd1\x83\xd1\x81 \xce\x95\xce\xbb \xd8\xb9\xd8\xb1 \xf0\x9f\x99\x82",
    "x\xff\xfe" "y\xc3 \x01\x02 <s> </s> <unk> \xe2\x96\x81" "a\xe2\x80\x8b"};

// Whether the native model is the library's: the same pieces, types, scores
// and special ids, and the same ids for kSelfCheck. Else why, in t->why.
static bool same_as_library(lp__sp_t *t) {
  const auto &sp = t->raw();
  const lp__spm_t *m = t->fast;
  if (sp.GetPieceSize() != m->npieces || sp.unk_id() != m->unk_id) {
    t->why = "the vocabulary differs from the library's";
    return false;
  }
  for (int32_t i = 0; i < m->npieces; i++) {
    const lp__spm_piece_t &p = m->pieces[i];
    float score = sp.GetScore(i);
    if (sp.IdToPiece(i) != std::string_view(p.s, p.len) || std::memcmp(&score, &p.score, sizeof(score)) ||
        sp.IsUnknown(i) != (p.type == LP_SPM_UNKNOWN) || sp.IsControl(i) != (p.type == LP_SPM_CONTROL) ||
        sp.IsUnused(i) != (p.type == LP_SPM_UNUSED) || sp.IsByte(i) != (p.type == LP_SPM_BYTE)) {
      t->why = "piece " + std::to_string(i) + " differs from the library's";
      return false;
    }
  }
  for (const char *text : kSelfCheck) {
    for (int opts = 0; opts < 2; opts++) {
      std::vector<int> want;
      int32_t got[256];
      if (!(opts ? t->sp : sp).Encode(std::string_view(text), &want).ok()) {
        t->why = "the library could not encode the self-check";
        return false;
      }
      long n = lp__spm_encode(m, text, std::strlen(text), opts, got, 256);
      if (n != static_cast<long>(want.size()) || n > 256 || !std::equal(want.begin(), want.end(), got)) {
        t->why = "the self-check's ids differ from the library's";
        return false;
      }
    }
  }
  return true;
}

// The native encoder for the model file at path, when it runs it as the library does.
static void try_native(lp__sp_t *t, const char *path) {
  FILE *f = std::fopen(path, "rb");
  if (!f) {
    t->why = "cannot read the file again";
    return;
  }
  std::vector<unsigned char> bytes;
  unsigned char chunk[65536];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof(chunk), f)) > 0) bytes.insert(bytes.end(), chunk, chunk + got);
  bool bad = std::ferror(f);
  std::fclose(f);
  unsigned char *buf = static_cast<unsigned char *>(std::malloc(bytes.size() + 1));
  if (bad || !buf) {
    std::free(buf);
    t->why = "cannot read the file again";
    return;
  }
  std::memcpy(buf, bytes.data(), bytes.size());
  char why[160];
  if (lp__spm_load(buf, bytes.size(), &t->fast, why, sizeof(why)) ||
      (t->has_options && lp__spm_set_options(t->fast, t->options.c_str()))) {
    t->why = t->fast ? "encode options it does not take" : why;
  } else if (same_as_library(t)) {
    return;
  }
  lp__spm_free(t->fast);
  t->fast = nullptr;
}

// bos's and eos's ids for fit(): the library's own, by PieceToId of the
// model's bos and eos pieces (a user-defined "<s>" too, where bos_id() says
// -1), read as the only ids it gives an empty text with that one option.
static sentencepiece::util::Status option_ids(lp__sp_t *t) {
  int *to[] = {&t->bos, &t->eos};
  const char *opt[] = {"bos", "eos"};
  for (int i = 0; i < 2; i++) {
    std::vector<int> v;
    // an option the model cannot take was refused with the options themselves
    if (t->plain.SetEncodeExtraOptions(opt[i]).ok() && t->plain.Encode("", &v).ok() && v.size() == 1) *to[i] = v[0];
  }
  return t->plain.SetEncodeExtraOptions("");
}

extern "C" lp__sp_t *lp__sp_load(const char *path, const char *extra_options, int native, char *err,
                                 size_t errlen) {
  lp__sp_t *t = new (std::nothrow) lp__sp_t;
  if (t == nullptr) {
    std::snprintf(err, errlen, "out of memory");
    return nullptr;
  }
  try {
    auto st = t->sp.Load(std::string_view(path));
    if (st.ok() && extra_options && *extra_options) {
      st = t->sp.SetEncodeExtraOptions(std::string_view(extra_options));
      if (st.ok()) st = t->plain.Load(std::string_view(path));
      t->has_options = true;
      t->options = extra_options;
      if (st.ok()) st = option_ids(t);
    }
    if (!st.ok()) {
      std::snprintf(err, errlen, "%s", st.ToString().c_str());
      delete t;
      return nullptr;
    }
    if (native) try_native(t, path);
    else t->why = "the library was asked for";
  } catch (const std::exception &e) { // the library may throw (std::bad_alloc)
    std::snprintf(err, errlen, "%s", e.what());
    delete t;
    return nullptr;
  }
  return t;
}

extern "C" const char *lp__sp_engine(const lp__sp_t *t) { return t->fast ? "native" : "libsentencepiece"; }

extern "C" const char *lp__sp_engine_why(const lp__sp_t *t) { return t->why.c_str(); }

static long encode_with(const sentencepiece::SentencePieceProcessor &sp, const char *text, size_t len,
                        int32_t *ids, size_t cap) {
  try {
    std::vector<int> v;
    auto st = sp.Encode(std::string_view(text, len), &v);
    if (!st.ok()) return -EINVAL;
    for (size_t i = 0; i < v.size() && i < cap; i++) ids[i] = v[i];
    return static_cast<long>(v.size());
  } catch (const std::bad_alloc &) {
    return -ENOMEM;
  } catch (const std::exception &) {
    return -EINVAL;
  }
}

extern "C" long lp__sp_encode(const lp__sp_t *t, const char *text, size_t len, int32_t *ids, size_t cap) {
  if (t->fast) return lp__spm_encode(t->fast, text, len, 1, ids, cap);
  return encode_with(t->sp, text, len, ids, cap);
}

extern "C" long lp__sp_encode_plain(const lp__sp_t *t, const char *text, size_t len, int32_t *ids, size_t cap) {
  if (t->fast) return lp__spm_encode(t->fast, text, len, 0, ids, cap);
  return encode_with(t->raw(), text, len, ids, cap);
}

// v (a text's plain ids) cut to at most max with the options applied after
// the cut, into ids (cap of them): the count, or -E2BIG when the options'
// pieces alone fill max.
static long fit(const lp__sp_t *t, std::vector<int> &v, size_t max, int left, int32_t *ids, size_t cap) {
  // the options, split at ':', in the library's order (it applies them so)
  std::vector<std::string> opts;
  size_t added = 0;
  for (size_t at = 0; at <= t->options.size() && t->has_options;) {
    size_t end = t->options.find(':', at);
    if (end == std::string::npos) end = t->options.size();
    opts.emplace_back(t->options.substr(at, end - at));
    added += opts.back() == "bos" || opts.back() == "eos";
    at = end + 1;
  }
  if (added >= max) return -E2BIG;
  if (v.size() + added > max) {
    size_t keep = max - added;
    if (left) v.erase(v.begin(), v.end() - static_cast<long>(keep));
    else v.resize(keep);
  }
  for (const auto &o : opts) {
    if (o == "reverse") std::reverse(v.begin(), v.end());
    else if (o == "bos") v.insert(v.begin(), t->bos);
    else if (o == "eos") v.push_back(t->eos);
  }
  for (size_t i = 0; i < v.size() && i < cap; i++) ids[i] = v[i];
  return static_cast<long>(v.size());
}

extern "C" long lp__sp_encode_fit(const lp__sp_t *t, const char *text, size_t len, size_t max, int left,
                                  int32_t *ids, size_t cap) {
  if (t->fast) return lp__spm_encode_fit(t->fast, text, len, max, left, ids, cap);
  try {
    std::vector<int> v;
    auto st = t->raw().Encode(std::string_view(text, len), &v);
    if (!st.ok()) return -EINVAL;
    return fit(t, v, max, left, ids, cap);
  } catch (const std::bad_alloc &) {
    return -ENOMEM;
  } catch (const std::exception &) {
    return -EINVAL;
  }
}

extern "C" long lp__sp_fit_ids(const lp__sp_t *t, const int32_t *plain, size_t n, size_t max, int left,
                               int32_t *ids, size_t cap) {
  try {
    // only the kept ids are copied (plain may be ids): at most max of them
    size_t keep = std::min(n, max), from = left ? n - keep : 0;
    std::vector<int> v(plain + from, plain + from + keep);
    return fit(t, v, max, left, ids, cap);
  } catch (const std::bad_alloc &) {
    return -ENOMEM;
  }
}

extern "C" int32_t lp__sp_piece_id(const lp__sp_t *t, const char *piece) {
  int id = t->sp.PieceToId(std::string_view(piece));
  // an unknown piece comes back as the unknown piece's id: only a match counts
  if (id < 0 || t->sp.IdToPiece(id) != piece) return -1;
  return id;
}

extern "C" long lp__sp_pieces(const lp__sp_t *t, const char *text, size_t len, int special, lp_tok_piece_t *out,
                              size_t cap) {
  try {
    sentencepiece::ImmutableSentencePieceText spt;
    const auto &sp = special ? t->sp : t->raw();
    auto st = sp.Encode(std::string_view(text, len), spt.mutable_proto());
    if (!st.ok()) return -EINVAL;
    size_t n = spt.pieces_size();
    for (size_t i = 0; i < n && i < cap; i++) {
      auto p = spt.pieces(static_cast<int>(i));
      int id = static_cast<int>(p.id());
      out[i] = lp_tok_piece_t{id, p.begin(), p.end(), sp.IsControl(id) ? 1 : 0};
    }
    return static_cast<long>(n);
  } catch (const std::bad_alloc &) {
    return -ENOMEM;
  } catch (const std::exception &) {
    return -EINVAL;
  }
}

extern "C" const char *lp__sp_piece_name(const lp__sp_t *t, int32_t id) {
  if (id < 0 || id >= t->sp.GetPieceSize()) return "";
  return t->sp.IdToPiece(id).c_str();
}

extern "C" long lp__sp_decode(const lp__sp_t *t, const int32_t *ids, size_t n, int skip_special, char *out,
                              size_t cap) {
  try {
    const auto &sp = t->raw();
    std::string text, part;
    std::vector<int> run; // ids between control pieces, decoded together (spaces join across pieces)
    auto flush = [&]() {
      if (run.empty()) return true;
      if (!sp.Decode(run, &part).ok()) return false;
      text += part;
      run.clear();
      return true;
    };
    for (size_t i = 0; i < n; i++) {
      if (ids[i] < 0 || ids[i] >= sp.GetPieceSize()) return -EINVAL;
      if (!sp.IsControl(ids[i])) {
        run.push_back(ids[i]);
      } else if (!skip_special) { // the control piece by its name, as Hugging Face's decode writes it
        if (!flush()) return -EINVAL;
        text += sp.IdToPiece(ids[i]);
      }
    }
    if (!flush()) return -EINVAL;
    if (!text.empty() && text.size() <= cap) std::memcpy(out, text.data(), text.size());
    return static_cast<long>(text.size());
  } catch (const std::bad_alloc &) {
    return -ENOMEM;
  } catch (const std::exception &) {
    return -EINVAL;
  }
}

extern "C" int32_t lp__sp_vocab(const lp__sp_t *t) { return t->sp.GetPieceSize(); }

extern "C" void lp__sp_free(lp__sp_t *t) { delete t; }
