#!/usr/bin/env python3
"""Tokenizing only what is kept (issue 35): with truncation a text is read
only as far as its kept ids need (a prefix, or a suffix when cut from the
left), and those ids are the whole text's, on corpora in several scripts
(Latin, Greek, Cyrillic, Arabic, Hebrew, Devanagari, Thai and CJK without
spaces, emoji, runs of spaces and newlines, invalid UTF-8) with two
SentencePiece models trained here (the GPL's English, as test-tokenizer.py's,
and one on the multi-script corpus itself) and with the encode options none,
"bos:eos" and "reverse:bos:eos". A long text reads a small part of itself.

A cut from the right is exact: SentencePiece's Viterbi pass runs from the
start, so a prefix's lattice is the whole text's. A cut from the left cannot
always be: the library sums path scores in float from the text's start, so
where two segmentations of a word score nearly alike, the whole text's choice
depends on how far into the text the word lies (the same word segmented from
offsets 100,000 and 175,000 agrees, from 0 not). With the GPL's model the
kept ids are asserted equal; with the multi-script model (random words of
equal-frequency letters: near ties everywhere) the share that differs is
asserted small and printed.
Arguments: the tok-window binary (tests/tok-window.c)."""
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish  # noqa: E402

TEXT = "/usr/share/common-licenses/GPL-3"
ALPHABETS = {
    "greek": "αβγδεζηθικλμνξοπρστυφχψω",
    "cyrillic": "абвгдежзийклмнопрстуфхцчшщыэюя",
    "arabic": "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
    "hebrew": "אבגדהוזחטיכלמנסעפצקרשת",
    "devanagari": "कखगघचछजझटठडढणतथदधनपफबभमयरलवशसह" + "ािीुूेैोौं",
    "emoji": "🙂🚀☃✨🎉🔥💡",
}
NOSPACE = {  # scripts written without spaces: a cut falls inside a run
    "cjk": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家",
    "kana": "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをん",
    "thai": "กขคงจฉชซญดตถทนบปผพฟมยรลวศสหอฮะาิีึืุู่้",
}


def corpus(rnd, english):
    texts = []
    def words(alpha, n):
        return " ".join("".join(rnd.choice(alpha) for _ in range(rnd.randrange(1, 9))) for _ in range(n))
    for size in (300, 5000, 60000, 250000):
        for name, alpha in ALPHABETS.items():
            texts.append(words(alpha, size // 6))
        for name, alpha in NOSPACE.items():
            # (SentencePiece's own time grows faster than the length on a long
            # run without spaces: the whole-text reference is kept short)
            run = "".join(rnd.choice(alpha) for _ in range(min(size, 60000) // 3))
            # now and then a full stop or a line break, as such text has
            texts.append("".join(c + ("。" if rnd.random() < 0.02 else "\n" if rnd.random() < 0.005 else "")
                                 for c in run))
        texts.append(" ".join(rnd.choice(english) for _ in range(size // 5)))
        mixed = []
        for _ in range(size // 40):
            pick = rnd.choice(list(ALPHABETS.values()) + list(NOSPACE.values()))
            mixed.append(words(pick, 3) if rnd.random() < 0.5 else rnd.choice(english))
            mixed.append(rnd.choice([" ", "  ", "\n", "\t", " \n\n ", ""]))
        texts.append("".join(mixed))
    texts += ["", " ", "a", "   \n\t  " * 2000, "x" * 20000, ("word " * 30000).strip(), "日本" * 3000]
    return texts


# Every option set on both models. The sanitizer build (scripts/test.sh sets
# ASAN_OPTIONS for it) checks memory, not ids a second time: one set a model
# there, plain on one and reversed with both pieces on the other, as the six
# ran past meson's 300 s on two busy cores.
OPTION_SETS = ([], ["bos:eos"], ["reverse:bos:eos"])


def option_sets(first_model):
    if os.environ.get("ASAN_OPTIONS"):
        return [OPTION_SETS[0] if first_model else OPTION_SETS[2]]
    return OPTION_SETS


def main():
    win = sys.argv[1]
    rnd = random.Random(35)
    english = open(TEXT, encoding="utf-8").read().split()
    texts = corpus(rnd, english)
    data = b"".join(t.encode("utf-8") + b"\0" for t in texts)
    data += b"invalid \xff\xfe utf-8 \xc3 " * 5000 + b"\0"
    with tempfile.TemporaryDirectory() as tmp:
        gpl = os.path.join(tmp, "gpl")
        r = subprocess.run(["spm_train", "--input=" + TEXT, "--model_prefix=" + gpl, "--vocab_size=400",
                            "--character_coverage=1.0"], capture_output=True)
        check("spm_train trained a model on %s" % TEXT, r.returncode == 0, r.stderr[-300:])
        multi_in = os.path.join(tmp, "multi.txt")
        with open(multi_in, "w", encoding="utf-8") as f:  # lines of the corpus, a model's food
            for t in texts[:40]:
                for k in range(0, min(len(t), 20000), 400):
                    f.write(t[k:k + 400].replace("\n", " ") + "\n")
        multi = os.path.join(tmp, "multi")
        r = subprocess.run(["spm_train", "--input=" + multi_in, "--model_prefix=" + multi, "--vocab_size=2000",
                            "--character_coverage=1.0", "--input_sentence_size=200000"], capture_output=True)
        check("spm_train trained a model on the multi-script corpus", r.returncode == 0, r.stderr[-300:])
        for model in (gpl, multi):
            for opts in option_sets(model == gpl):
                out = subprocess.run([win, model + ".model"] + opts, input=data, capture_output=True)
                lines = out.stdout.decode().splitlines()
                bad = [ln for ln in lines if not ln.startswith("ok ")]
                ok = [tuple(map(int, ln.split()[1:])) for ln in lines if ln.startswith("ok ")]
                name = os.path.basename(model)
                check("%s model, options %r: %d texts, the kept ids of windows cut from the right equal the "
                      "whole text's, and the counts both ways" % (name, opts or "", len(lines)),
                      out.returncode == 0 and len(lines) == len(texts) + 1 and not bad,
                      (out.returncode, len(lines), bad[:5], out.stderr[-300:]))
                differ = sum(d for _, _, _, d in ok)
                kept = sum(min(ids, 512) for _, _, ids, _ in ok)
                if model == gpl:
                    check("%s model, options %r: cut from the left, equal too" % (name, opts or ""),
                          differ == 0, [x for x in ok if x[3]][:5])
                else:
                    check("%s model, options %r: cut from the left, %d of %d kept ids differ (near ties "
                          "the whole text's float sums decide)" % (name, opts or "", differ, kept),
                          differ * 50 <= kept, [x for x in ok if x[3]][:5])
                # a text of many more ids than a window holds reads a small part of itself
                long = [(n, read, ids) for n, read, ids, _ in ok if ids > 64 * (512 + 32)]
                heavy = [x for x in long if x[1] > x[0] // 4]
                check("%s model, options %r: %d long texts each read at most a quarter of itself (most: %.3f)"
                      % (name, opts or "", len(long), max((r / n for n, r, _ in long), default=0)),
                      len(long) >= 5 and not heavy, heavy[:5])
    finish()


if __name__ == "__main__":
    main()
