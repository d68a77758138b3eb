#!/usr/bin/env python3
"""A tokenizer.json whose normalizers multiply a text (a Sequence of Replace
rules, each making one byte many) has its texts refused once normalized past
LP_HF_NORM_GROWTH times their bytes (plus LP_HF_NORM_SLACK), not grown until
the machine's memory is gone (8 such rules made 4 bytes 17 GB); a normalizer
that grows a text as much as the library's own do (NFKD of U+FDFA, 11x) and
a Prepend still tokenize. A Split or Replace pattern that backtracks
(`(a|a)+c|.`: each match under PCRE2's step limit, minutes in all) has its text
refused once its regex time is spent, while a sound pattern on a long text
still tokenizes.
Usage: test-hf-bounds.py HF_ENCODE"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish  # noqa: E402

VOCAB = {"[UNK]": 0, "a": 1, "b": 2, "\u2581": 3}


def tokenizer(normalizer, pre=None):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": normalizer,
            "pre_tokenizer": pre or {"type": "Whitespace"}, "post_processor": None, "decoder": None,
            "model": {"type": "BPE", "dropout": None, "unk_token": "[UNK]", "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "vocab": VOCAB, "merges": []}}


def encode(hf_encode, tmp, name, normalizer, text, pre=None):
    """hf-encode's line for text under the normalizer: (its JSON, stderr)."""
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(tokenizer(normalizer, pre), f)
    r = subprocess.run([hf_encode, path], input=json.dumps({"a": text, "b": None, "special": True}) + "\n",
                       capture_output=True, text=True, timeout=120)
    try:
        return json.loads(r.stdout.splitlines()[0]), r.stderr
    except (ValueError, IndexError):
        return {}, (r.returncode, r.stdout[:200], r.stderr[-300:])


def main():
    hf_encode = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        # each rule makes one "a" eight: 6 rules make 4 bytes 4 x 8^6 = 1 Mi tokens
        grow = {"type": "Sequence", "normalizers": [{"type": "Replace", "pattern": {"String": "a"},
                                                     "content": "a " * 8}] * 6}
        js, err = encode(hf_encode, tmp, "grow", grow, "aaaa")
        check("a Sequence of Replace rules multiplying a text: the text refused, not grown",
              js.get("error") == "Invalid argument", (str(js)[:200], err))
        js, err = encode(hf_encode, tmp, "grow-short", grow, "b b")
        check("... a text the rules do not grow still tokenizes", js.get("ids") == [2, 2], (js, err))
        js, err = encode(hf_encode, tmp, "nfkd", {"type": "NFKD"}, "\ufdfa" * 4000)
        check("NFKD of 4,000 U+FDFA (12 KB to 132 KB, the library's largest growth): tokenized",
              len(js.get("ids", [])) > 4000 and "error" not in js, (str(js)[:200], err))
        js, err = encode(hf_encode, tmp, "prepend", {"type": "Sequence", "normalizers": [
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
            {"type": "Prepend", "prepend": "\u2581"}]}, "a b")
        check("Metaspace's Replace and Prepend: tokenized", js.get("ids") == [3, 1, 3, 2], (js, err))
        # 840 bytes cost this pattern 3.6 s of CPU before; refused in its budget (10 ms + 20 us a byte)
        evil = {"type": "Split", "pattern": {"Regex": "(a|a)+c|."}, "behavior": "Isolated", "invert": False}
        t0 = time.monotonic()
        js, err = encode(hf_encode, tmp, "backtrack", None, ("a" * 20 + "b") * 40, pre=evil)
        took = time.monotonic() - t0
        check("a Split pattern that backtracks: the text refused within its regex budget (%.2f s)" % took,
              js.get("error") == "Invalid argument" and took < 60, (str(js)[:200], err))
        js, err = encode(hf_encode, tmp, "sound", None, "ab " * 20000,
                         pre={"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed", "invert": False})
        check("a sound Split pattern on a 60 KB text: tokenized", len(js.get("ids", [])) == 40000, (str(js)[:200], err))
    finish()


if __name__ == "__main__":
    main()
