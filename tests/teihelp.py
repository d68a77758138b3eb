"""Shared by the tests of TEI's and OpenAI's routes: the emulator's formula
(lp_emu_feature), float32 rounding, spm_encode's ids, a JSON POST that
returns (status, decoded body) whatever the status, and the emulators, models
and lanepack these tests run (started with lphelp's start_emulator and
start_proxy)."""
import json
import math
import os
import struct
import subprocess
import urllib.error
import urllib.request

from lphelp import emu_feature, emu_last, model_config, start_emulator, start_proxy


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def emu_h(ids):
    """The emulator's hash of a segment's ids: its value per segment without
    --dims (lphelp's emu_last: the formula is written once)."""
    return emu_last(ids)


def emu_vector(ids, dims):
    """The emulator's vector of a segment (--per-segment --dims dims)."""
    h = emu_h(ids)
    return [f32(emu_feature(h, k)) for k in range(dims)]


def normalized(v):
    s = sum(x * x for x in v)
    k = 1.0 / math.sqrt(s) if s > 0 else 0
    return [f32(x * k) for x in v] if s > 0 else v


def sigmoid(x):
    return f32(1.0 / (1.0 + math.exp(-x)))


def spm_ids(model, texts, opts=None):
    args = ["spm_encode", "--model=" + model, "--output_format=id"]
    if opts:
        args.append("--extra_options=" + opts)
    r = subprocess.run(args, input=("\n".join(texts) + "\n").encode(), capture_output=True, check=True)
    return [[int(x) for x in line.split()] for line in r.stdout.decode().splitlines()]


def post(port, path, body, token=None, raw=None, method=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data,
                                 headers={"Content-Type": "application/json"}, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            text = r.read()
            try:
                return r.status, json.loads(text)
            except ValueError:
                return r.status, text
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text


TEXT = "/usr/share/common-licenses/GPL-3"


def train_spm(tmp):
    """A SentencePiece model of 400 pieces trained by spm_train on TEXT (a text
    Debian ships): (its path, spm_train's result)."""
    prefix = os.path.join(tmp, "spm")
    r = subprocess.run(["spm_train", "--input=" + TEXT, "--model_prefix=" + prefix, "--vocab_size=400",
                        "--character_coverage=1.0"], capture_output=True)
    return prefix + ".model", r


def spm_tokenizer(tmp, template):
    """train_spm's model as a model's "tokenizer" (bos:eos, the pair template),
    its training checked: (the model's path, the tokenizer object)."""
    from lphelp import check
    model, r = train_spm(tmp)
    check("spm_train trained a model on %s" % TEXT, r.returncode == 0, r.stderr[-300:])
    return model, {"sentencepiece": model, "extra_options": "bos:eos", "pair_template": template}


def start_emulators(emulator, tmp, modes, procs):
    """One emulator (shapes 4x64, both wires) per list of extra flags in modes,
    each on a free port, its output to a log in tmp, appended to procs and
    answering: their ports."""
    ports = []
    for i, flags in enumerate(modes):
        p, port = start_emulator(emulator, "4x64", ["--protocol", "both"] + flags, stdout=subprocess.DEVNULL,
                                 stderr=open(os.path.join(tmp, "emu-%d.log" % i), "w"))
        procs.append(p)
        ports.append(port)
    return ports


def start_logged(lanepack, tmp, name, cfg, procs, ready="/readyz"):
    """lanepack on a free port with cfg (a dict, "listen" added) written to
    tmp/name.json, its output to tmp/name.log (printed if it never gets ready),
    appended to procs: its port."""
    log = os.path.join(tmp, name + ".log")
    try:
        p, port = start_proxy(lanepack, os.path.join(tmp, name + ".json"), cfg, ready=ready,
                              stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    except SystemExit:
        print(open(log).read()[-2000:])
        raise
    procs.append(p)
    return port


def model_cfg(port, tok, **kw):
    """A model of shape 4x64 behind the backend on port with tokenizer tok, and kw."""
    return model_config("4x64", [port], **dict({"max_wait_ms": 1, "tokenizer": tok}, **kw))
