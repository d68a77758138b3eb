#!/usr/bin/env python3
"""lanepack's SentencePiece ids are the library's own (issue 26): a model
trained here with Debian's spm_train on a text Debian ships (never downloaded),
then thousands of lines (the text's, Unicode of several scripts, empty,
whitespace only, control bytes, invalid UTF-8, a 1 MiB line) encoded by
lanepack's tokenizer (tests/tok-encode.c over lanepack/tokenizer.h) and by
spm_encode, with and without the encode options "bos:eos": the same ids,
line for line. A model file that cannot be loaded is named in the error.
Arguments: the tok-encode binary."""
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish  # noqa: E402

TEXT = "/usr/share/common-licenses/GPL-3"


def lines_to_encode():
    rnd = random.Random(26)
    text = open(TEXT, encoding="utf-8").read().splitlines()
    out = list(text)
    scripts = ["héllo wörld", "日本語のテキスト", "Ελληνικά γράμματα", "русский текст", "עברית", "العربية",
               "हिन्दी", "emoji 🙂🚀 mixed ☃", "ﬁ ligature ℌ", "tab\tinside", "\u00a0nbsp\u2003em"]
    for i in range(3000):
        words = [rnd.choice(text[rnd.randrange(len(text))].split() or ["x"]) for _ in range(rnd.randrange(1, 12))]
        if i % 3 == 0:
            words.insert(rnd.randrange(len(words) + 1), rnd.choice(scripts))
        out.append(" ".join(words))
    out += ["", " ", "   ", "\t", "\u3000", "\x01\x02 control", "a" * 5000]
    out.append(" ".join(rnd.choice(text) for _ in range(20000))[: 1 << 20])  # a 1 MiB line
    return out


def main():
    enc = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "m")
        r = subprocess.run(["spm_train", "--input=" + TEXT, "--model_prefix=" + prefix, "--vocab_size=400",
                            "--character_coverage=1.0"], capture_output=True)
        check("spm_train trained a model on %s" % TEXT, r.returncode == 0, r.stderr[-300:])
        data = ("\n".join(lines_to_encode()) + "\n").encode("utf-8")
        data += b"invalid \xff\xfe utf-8 \xc3\n"
        nlines = data.count(b"\n")
        for opts in ([], ["bos:eos"]):
            want = subprocess.run(["spm_encode", "--model=" + prefix + ".model", "--output_format=id"]
                                  + ["--extra_options=" + o for o in opts], input=data, capture_output=True)
            got = subprocess.run([enc, prefix + ".model"] + opts, input=data, capture_output=True)
            w, g = want.stdout.splitlines(), got.stdout.splitlines()
            diff = [i for i in range(min(len(w), len(g))) if w[i] != g[i]]
            check("%d lines with options %r: spm_encode and lanepack give the same ids"
                  % (nlines, opts or ""), want.returncode == 0 and got.returncode == 0
                  and len(w) == nlines and len(g) == nlines and not diff,
                  (want.returncode, got.returncode, len(w), len(g), diff[:3], got.stderr[-200:]))
        bad = subprocess.run([enc, os.path.join(tmp, "missing.model")], input=b"x\n", capture_output=True)
        check("a model file that cannot be loaded: an error naming it",
              bad.returncode != 0 and b"missing.model" in bad.stderr, bad.stderr[-200:])
    finish()


if __name__ == "__main__":
    main()
