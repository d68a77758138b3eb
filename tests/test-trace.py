#!/usr/bin/env python3
"""W3C trace context through the proxy (issue 27): a client's traceparent is
kept with its request, and one trace is joined across the client's answer
(its traceparent header: the same trace-id, the proxy's own span), the proxy's
access log (trace_id) and the backend's batch on both wires (the body's
"traces" / v2's "lanepack_traceparents" in segment order, and the batch's own
traceparent header under its first member's trace). A request without one,
or with a malformed one (upper case, all-zero ids, version ff, too long,
repeated), gets a new trace: the bad value is never echoed. The client's
tracestate goes with its trace (cleaned: back in the answer, and as the
batch's tracestate header), never without it, and an invalid one is dropped.
Arguments: the lanepack and lanepack-emulator binaries."""
import http.client
import json
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish, model_config, start_emulator, start_proxy, stop_all, stop_proxy  # noqa: E402

TP = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_TP = "00-%s-00f067aa0ba902b7-01" % CLIENT_TRACE


def post(port, path, body, headers):
    """Status, the answer's headers and body; headers a list of pairs (repeats allowed)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.putrequest("POST", path)
    for k, v in headers + [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]:
        c.putheader(k, v)
    c.endheaders(body.encode())
    r = c.getresponse()
    data = r.read()
    c.close()
    post.tracestate = r.getheader("tracestate")
    return r.status, r.getheader("traceparent"), data


def as_list(text):
    """The emulator logs an array's text: with its brackets (v2's string
    parameter) or without (the JSON wire's array)."""
    return json.loads(text if text.startswith("[") else "[" + text + "]")


def lines(path):
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def main():
    lanepack, emulator = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp()
    elog, alog = os.path.join(tmp, "emu.log"), os.path.join(tmp, "access.log")
    emu, pe = start_emulator(emulator, "4x64", ["--protocol", "both", "--log-batches"], stderr=open(elog, "w"))
    lp = None
    try:
        lp, pl = start_proxy(lanepack, os.path.join(tmp, "lp.json"), {
            "log_level": "warn", "access_log": alog, "access_log_sample": 1.0,
            "models": {"j": model_config("4x64", [pe], max_wait_ms=1),
                       "v": model_config("4x64", [pe], max_wait_ms=1, protocol="v2",
                                         v2={"model": "lanepack_{lanes}x{bucket}"})}})
        for model in ("j", "v"):
            st, tp, _ = post(pl, "/v1/models/%s/infer" % model, '{"input_ids": [1, 2, 3]}', [("traceparent", CLIENT_TP)])
            m = TP.match(tp or "")
            check("%s: the answer names the client's trace with the proxy's span" % model,
                  st == 200 and m and m.group(1) == CLIENT_TRACE and m.group(2) != "00f067aa0ba902b7"
                  and m.group(3) == "01", (st, tp))
        st, tp, _ = post(pl, "/v1/models/j/infer", '{"input_ids": [4, 5]}', [])
        fresh = TP.match(tp or "")
        check("no traceparent: a new trace, valid", st == 200 and fresh and fresh.group(1) != CLIENT_TRACE, tp)
        bad = ["00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
               "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
               "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
               "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
               "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
               "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
               "x" * 5000, "00-zzf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]
        res = []
        for b in bad:
            st, tp, _ = post(pl, "/v1/models/j/infer", '{"input_ids": [6]}', [("traceparent", b)])
            res.append((st, tp))
        st, tp, _ = post(pl, "/v1/models/j/infer", '{"input_ids": [7]}', [("traceparent", CLIENT_TP), ("traceparent", CLIENT_TP)])
        res.append((st, tp))
        check("malformed or repeated traceparents are ignored (a new trace), never echoed",
              all(s == 200 and TP.match(t or "") and CLIENT_TRACE not in t and t.upper() != t for s, t in res), res)
        # a later version's extra fields are allowed (the spec's forward compatibility)
        st, tp, _ = post(pl, "/v1/models/j/infer", '{"input_ids": [8]}',
                         [("traceparent", "01-%s-00f067aa0ba902b7-01-whatever" % CLIENT_TRACE)])
        check("a later version with more fields: its trace kept", TP.match(tp or "") and CLIENT_TRACE in tp, tp)
        # tracestate: kept with a valid trace, cleaned; dropped without one or when invalid
        STATE_TRACE = "0af7651916cd43dd8448eb211c80319c"
        st, tp, _ = post(pl, "/v1/models/j/infer", '{"input_ids": [9, 9]}',
                         [("traceparent", "00-%s-b7ad6b7169203331-01" % STATE_TRACE),
                          ("tracestate", " rojo=00f067aa0ba902b7 , "), ("tracestate", "congo=t61rcWkgMzE")])
        check("a client's tracestate comes back with its trace, cleaned (headers joined, spaces dropped)",
              st == 200 and STATE_TRACE in (tp or "") and post.tracestate == "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
              (st, tp, post.tracestate))
        dropped = []
        OTHER_TP = "00-%s-b7ad6b7169203331-00" % ("1" * 32)
        for hdrs in ([("tracestate", "rojo=1")],
                     [("traceparent", "00-zz-bad"), ("tracestate", "rojo=1")],
                     [("traceparent", OTHER_TP), ("tracestate", "Rojo=1,a=1,a=2")],
                     [("traceparent", OTHER_TP), ("tracestate", "x" * 3000)]):
            st, tp, _ = post(pl, "/v1/models/j/infer", '{"input_ids": [10]}', hdrs)
            dropped.append((st, post.tracestate))
        check("a tracestate without a valid traceparent, or invalid, is dropped (never echoed)",
              all(s == 200 and t is None for s, t in dropped), dropped)
        long_state = ",".join("k%d=%s" % (i, "v" * 95) for i in range(10))
        st, tp, body = post(pl, "/v1/models/j/infer", '{"input_ids": [11]}',
                         [("traceparent", OTHER_TP), ("tracestate", long_state)])
        kept = post.tracestate or ""
        check("a long tracestate is cut at whole members to 512 characters",
              st == 200 and 0 < len(kept) <= 512 and long_state.startswith(kept) and long_state[len(kept)] == ",",
              (st, len(kept), body))
        time.sleep(1.5)  # the access log is written once a second
        al = [l for l in lines(alog) if l.get("trace_id") == CLIENT_TRACE]
        check("the access log names the client's trace (three requests)", len(al) == 3, al)
        el = lines(elog)
        traced = [e for e in el if "traces" in e and CLIENT_TRACE in e["traces"]]
        heads = [e for e in el if TP.match(e.get("traceparent", "")) and TP.match(e["traceparent"]).group(1) == CLIENT_TRACE]
        check("the backend saw the client's trace in the batch body, on both wires (and the later version's)",
              len(traced) == 3, el[-8:])
        check("... and as the trace of each such batch's own traceparent header", len(heads) == 3, el[-8:])
        stated = [e for e in el if TP.match(e.get("traceparent", "")) and TP.match(e["traceparent"]).group(1) == STATE_TRACE]
        check("the batch led by the traced request carries its tracestate header",
              len(stated) == 1 and stated[0].get("tracestate") == "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", stated)
        check("a batch's traces are traceparents in segment order, one per segment",
              all(TP.match(t) for e in traced for t in as_list(e["traces"])), traced)
    finally:
        if lp is not None:
            stop_proxy(lp)
        stop_all([emu])
    finish()


if __name__ == "__main__":
    main()
