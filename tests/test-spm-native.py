#!/usr/bin/env python3
"""The native SentencePiece Unigram encoder (src/text/spm-*.c) gives
libsentencepiece 0.1.97's ids, and lp_tok_load uses it (issue 35: text
tokenized faster than the library does). Models are trained here with Debian's
spm_train on texts Debian ships plus words in several scripts, in many
settings: the default nmt_nfkc rules, identity, nfkc_cf, a rule file whose
keys overlap (longest match), byte fallback, no dummy prefix, extra
whitespace kept (and whitespace-only pieces), user-defined symbols, split
digits, whitespace as suffix, special pieces renamed and moved with control
symbols, spaces not escaped (a second normalizer_spec merged in), and a
third of the pieces typed UNUSED (which the search skips). Texts: the licenses' lines, multi-script
corpora (tests/test-tokwindow.py's), controls, malformed UTF-8, runs of
spaces and tabs, leading and trailing whitespace, characters NFKC changes
(fullwidth letters, ligatures, compatibility forms), NUL bytes.

For each model and encode options (none, "bos:eos", "reverse:bos:eos"):
tests/spm-oracle.c checks which engine lp_tok_load chose (native for
Unigram, the library for BPE and char models) and that every text's ids from
lp_tok_encode, _plain and _fit are the library's; tests/tok-encode.c
(lp_tok_encode) gives spm_encode's own output line for line.
Arguments: the spm-oracle and tok-encode binaries."""
import glob
import importlib.util
import os
import random
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LICENSES = sorted(glob.glob("/usr/share/common-licenses/*"))
GPL = "/usr/share/common-licenses/GPL-3"

ODD = [
    "", " ", "   ", "\t", "\n", " \t \n ", "a", " a ", "  leading", "trailing   ", "in   between\t\ttabs",
    "\x00nul\x00 inside", "\x01\x02\x1b[0m control \x7f", "line\r\nbreaks\rhere",
    "ＦＵＬＬＷＩＤＴＨ ｌｅｔｔｅｒｓ １２３", "ﬁ ﬂ ﬃ ligatures ℌ ℍ ① ㍿ ㌀", "ＡＢＣ\u3000ideographic\u3000space",
    "\u00a0nbsp\u2003em\u2009thin\u200bzero\u200dwidth\ufeffbom", "café cafe\u0301 Å A\u030a ñ n\u0303",
    "\u2581 literal lower block \u2581\u2581 \u2581", "digits 0123456789 3.14159 1,000,000",
    "日本語のテキストです。東京", "Ελληνικά γράμματα", "русский текст", "עברית", "العربية", "हिन्दी",
    "ภาษาไทย", "한국어 텍스트", "emoji 🙂🚀 mixed ☃ 👨‍👩‍👧", "<sep> <cls>text<sep>more <mask>",
    "foo foobar barfoo ▁bar", "ab abab aab ba", "<s> </s> <unk> <pad>", "x" * 3000, " " * 500 + "y",
    "word " * 400, "\U0010ffff \U000e0001 \ufffd \ufffe",
]
BAD_UTF8 = [b"\xff", b"\xfe\xff", b"abc\xc3", b"\xc3(", b"\xe2\x82", b"\xe2\x28\xa1", b"\xf0\x9f\x99",
            b"\xed\xa0\x80 surrogate", b"\xc0\xaf overlong", b"\xf4\x90\x80\x80 too big", b"\x80\x80\x80",
            b"mixed \xe6\x97\xa5\xff\xe6\x9c\xac \xc3\xa9\xc3", b"  \xff  \xfe  ", b"\xef\xbf\xbd real fffd"]


def tokwindow_corpus(rnd, english):
    spec = importlib.util.spec_from_file_location("tokwindow", os.path.join(HERE, "test-tokwindow.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return [t for t in mod.corpus(rnd, english) if len(t) < 40000], mod


def texts_of(rnd):
    out = []
    english = open(GPL, encoding="utf-8").read().split()
    for path in LICENSES:
        try:
            lines = open(path, encoding="utf-8").read().splitlines()
        except (UnicodeDecodeError, IsADirectoryError):
            continue
        out += rnd.sample(lines, min(len(lines), 150))
    multi, mod = tokwindow_corpus(rnd, english)
    out += multi
    out += ODD
    # random mixtures of all of the above, with odd spaces between
    pool = ODD + [rnd.choice(english) for _ in range(200)] + [
        "".join(rnd.choice(a) for _ in range(rnd.randrange(1, 8)))
        for a in list(mod.ALPHABETS.values()) + list(mod.NOSPACE.values()) for _ in range(20)]
    for _ in range(600):
        out.append("".join(rnd.choice(pool) + rnd.choice(["", " ", "  ", "\t", "\n", "\u3000", " \u00a0 "])
                           for _ in range(rnd.randrange(1, 14))))
    data = [t.encode("utf-8", "surrogatepass") for t in out] + BAD_UTF8
    for _ in range(100):
        t = bytearray(rnd.choice(data))
        for _ in range(rnd.randrange(1, 4)):
            if t:
                t[rnd.randrange(len(t))] = rnd.randrange(256)
        data.append(bytes(t))
    return data, mod


def varint(n):
    out = b""
    while True:
        out += bytes([(n & 0x7f) | (0x80 if n > 0x7f else 0)])
        n >>= 7
        if not n:
            return out


def read_varint(b, i):
    n = shift = 0
    while True:
        n |= (b[i] & 0x7f) << shift
        shift += 7
        i += 1
        if not b[i - 1] & 0x80:
            return n, i


def with_unused(model, unused):
    """The .model bytes with the pieces of the ids in unused typed UNUSED (5):
    a type field appended to each such piece (in protobuf the last one wins)."""
    out, i, k = b"", 0, 0
    while i < len(model):
        key, j = read_varint(model, i)
        if key == (1 << 3 | 2):  # pieces: field 1, length-delimited
            n, j = read_varint(model, j)
            body = model[j:j + n]
            if k in unused:
                body += b"\x18\x05"
            out += varint(key) + varint(len(body)) + body
            i, k = j + n, k + 1
            continue
        wt = key & 7
        if wt == 0:
            _, j = read_varint(model, j)
        elif wt == 2:
            n, j = read_varint(model, j)
            j += n
        else:
            j += 8 if wt == 1 else 4
        out += model[i:j]
        i = j
    return out


def train(tmp, name, text, args):
    prefix = os.path.join(tmp, name)
    r = subprocess.run(["spm_train", "--input=" + text, "--model_prefix=" + prefix, "--vocab_size=700",
                        "--hard_vocab_limit=false", "--character_coverage=0.9995"] + args,
                       capture_output=True)
    check("spm_train %s %s" % (name, " ".join(args)), r.returncode == 0, r.stderr[-400:])
    return prefix + ".model"


# name: spm_train's arguments, the engine lp_tok_load must choose
SETTINGS = {
    "default": ([], "native"),
    "identity": (["--normalization_rule_name=identity"], "native"),
    "nfkc_cf": (["--normalization_rule_name=nfkc_cf"], "native"),
    "overlapping-rules": (["--normalization_rule_tsv=@RULES@"], "native"),
    "byte-fallback": (["--byte_fallback=true"], "native"),
    "no-dummy-prefix": (["--add_dummy_prefix=false"], "native"),
    "extra-whitespace": (["--remove_extra_whitespaces=false", "--allow_whitespace_only_pieces=true",
                          "--split_by_whitespace=false"], "native"),
    "user-symbols": (["--user_defined_symbols=<sep>,<cls>,foo,\u2581bar,ab,a b,日本"], "native"),
    "split-digits": (["--split_digits=true", "--byte_fallback=true"], "native"),
    "ws-suffix": (["--treat_whitespace_as_suffix=true"], "native"),
    "ws-suffix-no-dummy": (["--treat_whitespace_as_suffix=true", "--add_dummy_prefix=false",
                            "--remove_extra_whitespaces=false"], "native"),
    "ids-moved": (["--unk_id=3", "--bos_id=0", "--eos_id=1", "--pad_id=2", "--unk_piece=[UNK]", "--bos_piece=[BOS]",
                   "--eos_piece=[EOS]", "--control_symbols=<ctl>,<sep>"], "native"),
    # no control <s> and </s>: bos_id() is -1, and the options' bos and eos are
    # the user-defined pieces (the library finds them by name)
    "user-bos-eos": (["--bos_id=-1", "--eos_id=-1", "--user_defined_symbols=<s>,</s>"], "native"),
    "bpe": (["--model_type=bpe"], "libsentencepiece"),
    "char": (["--model_type=char"], "libsentencepiece"),
}


OPTION_SETS = ([], ["bos:eos"], ["reverse:bos:eos"])


def option_sets(k):
    """Every option set; in the sanitizer build (scripts/test.sh sets
    ASAN_OPTIONS), which checks memory rather than ids a second time, one a
    model, in turn, to stay within meson's timeout on two busy cores."""
    return [OPTION_SETS[k % 3]] if os.environ.get("ASAN_OPTIONS") else OPTION_SETS


def main():
    oracle, tok_encode = sys.argv[1], sys.argv[2]
    rnd = random.Random(35)
    data, mod = texts_of(rnd)
    framed = b"".join(struct.pack("<I", len(t)) + t for t in data)
    # spm_encode reads lines: the texts without a newline of their own
    lines = [t for t in data if b"\n" not in t and b"\r" not in t and b"\x00" not in t]
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "train.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write("\n".join(l for l in open(GPL, encoding="utf-8").read().splitlines() if l.strip()) + "\n")
            for name, alpha in list(mod.ALPHABETS.items()) + list(mod.NOSPACE.items()):
                for _ in range(60):
                    f.write(" ".join("".join(rnd.choice(alpha) for _ in range(rnd.randrange(1, 7)))
                                     for _ in range(8)) + "\n")
            f.write("１２３ ＦＵＬＬ ﬁne ﬂow\n" * 5)
        rules = os.path.join(tmp, "rules.tsv")
        with open(rules, "w") as f:  # keys that share starts: the longest wins
            f.write("61 62\t78\n61\t61\n74 68 65\t54 48 45\n74\t74\n20 20\t20\nFF21\t41\n2581\t5F\n")
        models = []
        for name, (args, engine) in SETTINGS.items():
            models.append((name, train(tmp, name, corpus, [a.replace("@RULES@", rules) for a in args]), engine))
            if name in ("default", "user-symbols"):
                # no spm_train flag sets escape_whitespaces: a second normalizer_spec
                # (field 3) with escape_whitespaces (5) false, which protobuf merges
                # into the first, as lanepack's reader must
                with open(models[-1][1], "rb") as f:
                    raw = f.read()
                merged = os.path.join(tmp, name + "-no-escape.model")
                with open(merged, "wb") as f:
                    f.write(raw + b"\x1a\x02\x28\x00")
                models.append((name + "-no-escape", merged, "native"))
            if name == "default":  # pieces the search skips: common ones, so that texts meet them
                unused = os.path.join(tmp, "unused.model")
                with open(unused, "wb") as f:
                    f.write(with_unused(raw, set(range(5, 400, 3))))
                models.append(("unused-pieces", unused, "native"))
        for name, model, engine in models:
            for opts in option_sets(len(name)):
                r = subprocess.run([oracle, model, engine] + opts, input=framed, capture_output=True, timeout=240)
                check("%s, options %r: %s, the library's ids for %d texts (encode, plain, fit)"
                      % (name, opts or "", engine, len(data)),
                      r.returncode == 0, (r.stdout[-200:], r.stderr[-1500:].decode("utf-8", "replace")))
            want = subprocess.run(["spm_encode", "--model=" + model, "--output_format=id"],
                                  input=b"\n".join(lines) + b"\n", capture_output=True)
            got = subprocess.run([tok_encode, model], input=b"\n".join(lines) + b"\n", capture_output=True)
            w, g = want.stdout.splitlines(), got.stdout.splitlines()
            diff = [i for i in range(min(len(w), len(g))) if w[i] != g[i]]
            check("%s: lp_tok_encode gives spm_encode's ids on %d lines" % (name, len(lines)),
                  want.returncode == 0 and got.returncode == 0 and len(w) == len(lines) == len(g) and not diff,
                  (len(w), len(g), [(lines[i][:60], w[i][:80], g[i][:80]) for i in diff[:3]]))
    finish()


if __name__ == "__main__":
    main()
