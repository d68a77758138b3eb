#!/usr/bin/python3
"""What /v1/embeddings and TEI's routes hold and what they accept from a
careless backend (found attacking them):

- A queued request holds no body: 40 requests of 2 MB (whitespace around a
  short text) waiting on a slow backend leave the proxy's RSS near where it
  was (each held its whole body, uncounted by max_queue_bytes, before).
- /rerank's return_text keeps the texts with the job: they count against
  max_queue_bytes (a rerank whose texts alone pass it is 413 naming it, was 200).
- /tokenize answers an input of at most the model's largest bucket, as /embed
  does without truncate: 422 Tokenizer naming the limit (before, any input: an
  8 MB body made a 350 MB answer on the front's thread).
- A backend's vectors must be non-empty, one length within a request, and not
  shorter than the model's embedding.dimensions: else 502 bad_backend_answer
  (/v1/embeddings) or 424 Backend (/embed), never a 200 with ragged vectors.
- A rerank pair with no tokens (empty query and text, a template without
  pieces) is 400 Empty, as an /embed input without tokens.
- A model with a tokenizer and no vocab_size takes token ids below its
  tokenizer's vocabulary only (any 31-bit id reached the backend before).
- 424 has its reason phrase, Failed Dependency (was "Unknown").

Arguments: the lanepack binary."""
import http.client
import json
import os
import socket
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish, model_config, rss_kb, start_lanepack, stop_lanepack, tei_error, train_spm  # noqa: E402

TEXT = "/usr/share/common-licenses/GPL-3"
DIMS = 8


class Fake(BaseHTTPRequestHandler):
    """/MODE/v1/batch: per-segment vectors, spoiled by MODE."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send(self, body):
        body = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.send({"status": "ok"})

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        mode = self.path.split("/")[1]
        if mode == "slow":
            time.sleep(2)
        outs, n = [], 0
        for lane in req["segment_ids"]:
            row = []
            for s in range(max(lane) if lane else 0):
                v = [0.5 + k for k in range(DIMS)]
                if mode == "short" or (mode == "mixed" and n % 2):
                    v = v[:3]
                elif mode == "empty":
                    v = []
                row.append(v)
                n += 1
            outs.append(row)
        self.send({"batch_id": req["batch_id"], "segment_outputs": outs})


REASONS = {}  # status: the reason phrases seen


def post(port, path, body, raw=None, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, raw if raw is not None else json.dumps(body).encode(),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    REASONS.setdefault(r.status, set()).add(r.reason)
    try:
        return r.status, json.loads(data)
    except ValueError:
        return r.status, data


def oa_error(st, js, status, code):
    return st == status and isinstance(js, dict) and js.get("error", {}).get("code") == code


def main():
    lanepack = sys.argv[1]
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d/" % srv.server_address[1]
    with tempfile.TemporaryDirectory() as tmp:
        model = train_spm(tmp, TEXT, 400)
        tok = {"sentencepiece": model, "pair_template": "$A $B"}

        def m(mode, shapes="4x16", **kw):
            return model_config(shapes, [url + mode], **dict({"max_wait_ms": 1, "tokenizer": tok, "max_retries": 0,
                                                              "embedding": {"dimensions": DIMS}}, **kw))
        cfg = {"log_level": "error", "models": {
            "ok": m("ok"), "short": m("short"), "mixed": m("mixed", embedding={}), "empty": m("empty", embedding={}),
            "slow": m("slow", shapes="64x16", max_queue_bytes=1 << 20, backend_timeout_ms=20000)}}
        # under ASan freed memory waits in a quarantine, resident: none here
        proc, port, log = start_lanepack(lanepack, cfg, tmp, ready="/readyz")
        try:
            run_checks(port, proc)
        finally:
            stop_lanepack(proc, log)
    srv.shutdown()
    finish()


def run_checks(port, proc):
    # /tokenize within the model's 16 tokens, and past them
    st, js = post(port, "/tokenize", {"model": "ok", "inputs": ["a suitcase"]})
    check("/tokenize of a short text: 200", st == 200 and len(js) == 1 and js[0], (st, js))
    long_text = "the freedom to share and change all versions of a program " * 4
    st, js = post(port, "/tokenize", {"model": "ok", "inputs": ["a", long_text]})
    check("/tokenize of a text over the largest bucket: 422 Tokenizer naming inputs[1] and the limit",
          tei_error(st, js, 422, "Tokenizer", "`inputs[1]`", "at most 16 tokens"), (st, str(js)[:200]))

    # token ids within the tokenizer's 400 pieces (no vocab_size configured)
    st, js = post(port, "/v1/embeddings", {"model": "ok", "input": [[1, 399], [2, 400]], "encoding_format": "float"})
    check("/v1/embeddings of an id past the tokenizer's vocabulary: 400 token_out_of_range naming input[1]",
          oa_error(st, js, 400, "token_out_of_range") and "input[1]" in js["error"]["message"], (st, js))
    st, js = post(port, "/v1/embeddings", {"model": "ok", "input": [2147483647], "encoding_format": "float"})
    check("... and of id 2147483647: 400 token_out_of_range", oa_error(st, js, 400, "token_out_of_range"), (st, js))
    st, js = post(port, "/v1/embeddings", {"model": "ok", "input": [[1, 399]], "encoding_format": "float"})
    check("... the last id of it: 200", st == 200, (st, str(js)[:200]))

    # a rerank pair with no tokens at all
    st, js = post(port, "/rerank", {"model": "ok", "query": "", "texts": ["a", ""]})
    check("/rerank of a pair without tokens: 400 Empty naming texts[1]",
          tei_error(st, js, 400, "Empty", "texts[1]"), (st, js))

    # a backend's vectors: shorter than the model's dimensions, ragged, empty
    for model in ("short", "mixed", "empty"):
        st, js = post(port, "/v1/embeddings", {"model": model, "input": ["a b", "c d", "e"]})
        check("%s vectors on /v1/embeddings: 502 bad_backend_answer" % model,
              oa_error(st, js, 502, "bad_backend_answer"), (st, str(js)[:200]))
        st, js = post(port, "/embed", {"model": model, "inputs": ["a b", "c d", "e"]})
        check("%s vectors on /embed: 424 Backend" % model, tei_error(st, js, 424, "Backend"), (st, str(js)[:200]))
    check("424 with its reason phrase, Failed Dependency", REASONS.get(424) == {"Failed Dependency"}, REASONS)
    st, js = post(port, "/v1/embeddings", {"model": "ok", "input": ["a b", "c d", "e"], "encoding_format": "float"})
    check("the model's own vectors: 200", st == 200 and all(len(d["embedding"]) == DIMS for d in js["data"]),
          (st, str(js)[:200]))

    # return_text's texts count against max_queue_bytes (1 MiB here)
    texts = ["x" * 1500] * 1000
    st, js = post(port, "/rerank", {"model": "slow", "query": "q", "texts": texts, "truncate": True,
                                    "return_text": True})
    check("/rerank keeping 1.5 MB of texts on a model of max_queue_bytes 1 MiB: 413 Validation naming the "
          "limit (it can never fit: not a 429 to retry)",
          tei_error(st, js, 413, "Validation", "max_queue_bytes"), (st, str(js)[:200]))

    # queued requests hold no body: 40 of 2 MB waiting on a slow backend
    time.sleep(0.5)
    base = rss_kb(proc.pid)
    pad = b" " * (2 << 20)
    bodies = [b'{"model": "slow", "inputs": "a packed sentence", "truncate": true' + pad + b"}",
              b'{"model": "slow", "input": "a packed sentence"' + pad + b"}"]
    socks = []
    for i in range(40):  # one after another: the proxy reads each body whole before the next comes
        path = b"/embed" if i % 2 == 0 else b"/v1/embeddings"
        body = bodies[i % 2]
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                  % (path, len(body)) + body)
        socks.append(s)
        time.sleep(0.02)
    time.sleep(0.5)  # the backend answers after 2 s: all are queued or in flight now
    held = rss_kb(proc.pid)
    results = []
    for s in socks:
        s.settimeout(60)
        try:
            results.append(s.recv(400))
        except OSError as e:
            results.append(repr(e))
        s.close()
    check("40 queued requests of 2 MB each: all answered 200",
          sum(r.startswith(b"HTTP/1.1 200") for r in results if isinstance(r, bytes)) == 40,
          [(i, r) for i, r in enumerate(results) if not (isinstance(r, bytes) and r.startswith(b"HTTP/1.1 200"))])
    check("... and the proxy did not hold their bodies (RSS %d kB from %d kB)" % (held, base),
          held < base + 40 * 1024, (held, base))


if __name__ == "__main__":
    main()
