#!/usr/bin/env python3
"""The HTTP layer's refusals in each route's dialect (issue 35): a POST
without Content-Length (not chunked) is 411 on every route, and 411, 413 (a
body over max_body_bytes) and 400 (Content-Length with Transfer-Encoding) come
in OpenAI's error shape on /v1/embeddings, TEI's on its routes, v2's under
/v2/ and lanepack's own on /v1/infer, the 413 naming max_body_bytes and its
value; so does 401 without a bearer token when
tokens are configured (with WWW-Authenticate). Raw HTTP over sockets.
Arguments: the lanepack binary."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish, free_port, model_config, raw, start_proxy, stop_all  # noqa: E402

MAX_BODY = 4096
TEI_ROUTES = ["/embed", "/rerank", "/tokenize", "/predict", "/embed_all", "/similarity", "/decode"]


def openai_shape(st, body, status, code):
    try:
        e = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return st == status and set(e) == {"message", "type", "param", "code"} and e["code"] == code


def tei_shape(st, body, status):
    try:
        js = json.loads(body)
    except ValueError:
        return False
    return st == status and isinstance(js, dict) and set(js) == {"error", "error_type"} \
        and js["error_type"] == "Validation"


def v2_shape(st, body, status, code):
    try:
        js = json.loads(body)
    except ValueError:
        return False
    return st == status and set(js) == {"error"} and isinstance(js["error"], str) and code in js["error"]


def lanepack_shape(st, body, status, code):
    try:
        e = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return st == status and isinstance(e, dict) and e.get("code") == code


def main():
    lanepack = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        def serve(name, cfg, checks):
            """lanepack with cfg answering checks, then stopped."""
            proc, port = start_proxy(lanepack, os.path.join(tmp, name + ".json"), cfg, ready="/healthz",
                                     stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, name + ".log"), "w"))
            try:
                checks(port)
            finally:
                stop_all([proc])
        # the backend a free port nobody listens on: the routes checked here never reach it
        cfg = {"log_level": "warn", "max_body_bytes": MAX_BODY, "models": {"m": model_config("4x64", [free_port()])}}
        serve("lp", cfg, run_checks)
        # with bearer tokens: a request without one is 401 in its route's dialect too
        tokens = os.path.join(tmp, "tokens")
        with open(tokens, "w") as t:
            t.write("s3cret\n")
        serve("auth", dict(cfg, auth_tokens_file=tokens), auth_checks)
    finish()


def auth_checks(port):
    body = b'{"inputs": "x"}'
    hdrs = b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)

    def refused(path):
        st, hd, got = raw(port, b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + hdrs + body)
        return st, got, b"bearer" in hd.get("www-authenticate", b"").lower()

    st, got, challenge = refused("/v1/embeddings")
    check("/v1/embeddings without a token: 401 in OpenAI's shape, with WWW-Authenticate",
          openai_shape(st, got, 401, "unauthorized") and challenge, (st, got))
    for route in TEI_ROUTES + ["/embed_sparse"]:
        st, got, challenge = refused(route)
        check("%s without a token: 401 in TEI's shape, with WWW-Authenticate" % route,
              tei_shape(st, got, 401) and challenge, (st, got))
    st, got, challenge = refused("/v2/models/m/infer")
    check("/v2/models/m/infer without a token: 401 in v2's shape, with WWW-Authenticate",
          v2_shape(st, got, 401, "unauthorized") and challenge, (st, got))
    st, got, challenge = refused("/v1/infer")
    check("/v1/infer without a token: 401 in lanepack's shape, with WWW-Authenticate",
          lanepack_shape(st, got, 401, "unauthorized") and challenge, (st, got))


def post(port, path, headers):
    return raw(port, b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               + headers + b"\r\n")


def run_checks(port):
    no_length = b"Connection: close\r\n"
    too_large = b"Content-Length: %d\r\n" % (MAX_BODY + 1)
    both = b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n"

    st, _, body = post(port, "/v1/embeddings", no_length)
    check("/v1/embeddings POST without a length: 411 in OpenAI's shape", openai_shape(st, body, 411, "length_required"),
          (st, body))
    st, _, body = post(port, "/v1/embeddings", too_large)
    check("/v1/embeddings body over max_body_bytes: 413 in OpenAI's shape",
          openai_shape(st, body, 413, "body_too_large"), (st, body))
    st, _, body = post(port, "/v1/embeddings", both)
    check("/v1/embeddings with Content-Length and Transfer-Encoding: 400 in OpenAI's shape",
          st == 400 and openai_shape(st, body, 400, json.loads(body)["error"]["code"]), (st, body))
    for route in TEI_ROUTES:
        for name, hdrs, status in (("without a length", no_length, 411), ("over max_body_bytes", too_large, 413),
                                   ("with both lengths", both, 400)):
            st, _, body = post(port, route, hdrs)
            check("%s POST %s: %d in TEI's shape" % (route, name, status), tei_shape(st, body, status), (st, body))
    st, _, body = post(port, "/v2/models/m/infer", no_length)
    check("/v2/models/m/infer without a length: 411 in v2's shape", v2_shape(st, body, 411, "length_required"),
          (st, body))
    st, _, body = post(port, "/v1/infer", no_length)
    check("/v1/infer without a length: 411 in lanepack's shape", lanepack_shape(st, body, 411, "length_required"),
          (st, body))
    st, _, body = post(port, "/v1/infer", too_large)
    check("/v1/infer over max_body_bytes: 413 in lanepack's shape", lanepack_shape(st, body, 413, "body_too_large"),
          (st, body))
    st, _, body = post(port, "/v2/models/m/infer", too_large)
    check("/v2/models/m/infer over max_body_bytes: 413 in v2's shape", v2_shape(st, body, 413, "max_body_bytes"),
          (st, body))
    # every dialect's 413 names the key and its value: a client knows the
    # bound, an operator the key to raise; a chunked body over it too
    named = "max_body_bytes (%d bytes)" % MAX_BODY
    chunk = b"%x\r\n" % (MAX_BODY + 1) + b"a" * (MAX_BODY + 1) + b"\r\n0\r\n\r\n"
    for route in ["/v1/embeddings", "/v2/models/m/infer", "/v1/infer"] + TEI_ROUTES:
        st, _, body = post(port, route, too_large)
        check("%s over max_body_bytes: the 413 says %s" % (route, named), st == 413 and named in body.decode(),
              (st, body))
        st, _, body = raw(port, b"POST " + route.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: "
                          b"application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk)
        check("%s chunked over max_body_bytes: the 413 says %s" % (route, named), st == 413 and named in body.decode(),
              (st, body))


if __name__ == "__main__":
    main()
