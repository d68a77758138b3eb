#!/usr/bin/env python3
"""The live view (issue 27): GET /v1/batches/recent lists the last batches
(shapes, each segment's lane, offset and length summing to what was sent,
device clocks, answers; never a token or a request id), an admin route with
the token rule of /metrics; GET / is the static page where /metrics is served,
drawn by a real browser: Debian's chromium headless takes a screenshot that
must show coloured blocks, and the DOM it renders names the shapes. Without
chromium the test fails (scripts/setup.sh installs it with the test packages).
Arguments: the lanepack and lanepack-emulator binaries."""
import http.client
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish, loopback, model_config, start_emulator, start_proxy, stop_all  # noqa: E402

SHAPES = {(4, 64), (8, 32)}
# a token id no length, offset or time in the JSON would be: seen there, it leaked
MARK_TOKEN = 987654321
REQUEST_ID = "view-secret-request-id"
TOKEN = "view-test-token-0123456789"


def get(port, path, headers=None, method="GET"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request(method, path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), body


def load(port, lengths, headers=None):
    """Sends every length at once, so batches pack several (the page's check of
    coloured blocks needs segments of several hues): every connection is opened
    first, then each request is written in one tight loop, and only then are
    the answers read. Threads that each connect and send (as before) trickled in
    under the sanitizer build, one request a batch. The statuses."""
    conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=30) for _ in lengths]
    for c in conns:
        c.connect()
    for c, n in zip(conns, lengths):
        body = json.dumps({"input_ids": [MARK_TOKEN] + [7] * (n - 1)})
        c.request("POST", "/v1/infer", body, dict(headers or {}, **{"Content-Type": "application/json",
                                                                    "X-Request-Id": REQUEST_ID}))
    out = []
    for c in conns:
        out.append(c.getresponse().status)
        c.close()
    return out


def png_pixels(path):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB or RGBA PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    w, h, depth, ctype = hdr[0], hdr[1], hdr[2], hdr[3]
    if depth != 8 or ctype not in (2, 6) or hdr[6] != 0:
        raise ValueError("PNG form not read here: depth %d type %d interlace %d" % (depth, ctype, hdr[6]))
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev, p = [], bytearray(stride), 0
    for _ in range(h):
        f, line = raw[p], bytearray(raw[p + 1:p + 1 + stride])
        p += 1 + stride
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return w, h, rows


# A pixel of strong colour: its channels differ by this much (grey, white and
# the page's text have none; anti-aliased edges little) and it is not dark.
MIN_CHROMA = 90
MIN_BRIGHT = 80
# Hue bins over the circle: 30 degrees each, so the page's hues (spread by the
# golden angle) fall into several.
HUE_BINS = 12
# how many batches a failed colour check lists (the screen shows the newest few)
SHOW_HINT = 8


def saturated_hues(rows):
    """Pixels of strong colour (not grey, white or black) counted by hue bin,
    every other row and column."""
    bins = [0] * HUE_BINS
    for row in rows[::2]:
        for r, g, b in row[::2]:
            mx, mn = max(r, g, b), min(r, g, b)
            if mx - mn < MIN_CHROMA or mx < MIN_BRIGHT:
                continue
            d = float(mx - mn)
            if mx == r:
                hue = ((g - b) / d) % 6
            elif mx == g:
                hue = (b - r) / d + 2
            else:
                hue = (r - g) / d + 4
            bins[int(hue * HUE_BINS / 6) % HUE_BINS] += 1
    return bins


def chromium(args, tmp, timeout=90):
    exe = shutil.which("chromium")
    if not exe:
        return None, "chromium is not installed (scripts/setup.sh installs it with LP_SETUP_TESTS=1)"
    # the sandbox needs a user namespace a container's root rarely has
    cmd = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
           "--user-data-dir=" + os.path.join(tmp, "chromium-profile"), "--window-size=1200,900",
           "--virtual-time-budget=4000"] + args
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "chromium ran past %d s" % timeout
    return p, p.stderr.decode(errors="replace")[-600:]


def check_batches(doc, sent_lengths):
    bs = doc.get("batches", [])
    check("recent: batches listed, at most the capacity", 0 < len(bs) <= doc.get("capacity", 0), doc)
    keys = {"id", "model", "shape", "backend", "device", "devices", "reason", "copies", "real_tokens", "fill",
            "queue", "age_ms", "clock", "answer", "segments_total", "segments"}
    check("recent: each batch has exactly the documented fields", all(set(b) == keys for b in bs),
          [sorted(b) for b in bs[:1]])
    check("recent: shapes are configured ones", all(tuple(b["shape"]) in SHAPES for b in bs),
          [b["shape"] for b in bs])
    ids = [b["id"] for b in bs]
    check("recent: newest first", ids == sorted(ids, reverse=True), ids)
    geometry = True
    for b in bs:
        lanes, bucket = b["shape"]
        ends = {}
        for lane, off, n in sorted(b["segments"]):
            if not (0 <= lane < lanes and n > 0 and off >= ends.get(lane, 0) and off + n <= bucket):
                geometry = False
            ends[lane] = off + n
        total = sum(s[2] for s in b["segments"])
        if total != b["real_tokens"] or b["segments_total"] != len(b["segments"]) or \
                abs(b["fill"] - total / float(lanes * bucket)) > 1e-3:
            geometry = False
    check("recent: segments inside their lanes, summing to real_tokens and fill", geometry, bs[:2])
    got = sorted(s[2] for b in bs for s in b["segments"])
    check("recent: the segments' lengths are the lengths sent", got == sorted(sent_lengths),
          (len(got), len(sent_lengths)))
    answered = [b["answer"] for b in bs]
    check("recent: every batch answered ok, after its send",
          all(a and a["outcome"] == "ok" and a["status"] == 200 and a["after_ms"] > 0 for a in answered),
          answered[:3])
    clocks = [b["clock"] for b in bs]
    check("recent: device clocks listed (cost, end, each device's busy-until)",
          all(len(k["device_busy_ms"]) == 2 for k in clocks) and any(k["cost_ms"] for k in clocks)
          and all(b["device"] < b["devices"] == 2 for b in bs), clocks[:2])


def main():
    lanepack, emulator = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp()
    emu, pe = start_emulator(emulator, "4x64,8x32", ["--devices", "2", "--cost-ms", "3"])
    procs = [emu]
    # a 20 ms window: the 40 requests written at once reach the packer within it
    # even under the sanitizer build, so batches carry several segments
    model = model_config("4x64,8x32", [pe], max_wait_ms=20)
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write(TOKEN + "\n")
    try:
        # A: an admin listener (the page and the route live there only), two front threads
        a, pa, padm = start_proxy(lanepack, os.path.join(tmp, "a.json"), lambda c, adm: {
            "listen": loopback(c), "admin_listen": loopback(adm), "threads": 2,
            "log_level": "warn", "models": {"default": model}}, nports=2)
        procs.append(a)
        # B: bearer tokens, admin routes on the client port
        b, pb = start_proxy(lanepack, os.path.join(tmp, "b.json"), {
            "auth_tokens_file": tokens, "log_level": "warn", "models": {"default": model}})
        procs.append(b)
        st, hd, body = get(padm, "/v1/batches/recent")
        check("recent: empty before any batch", st == 200 and json.loads(body)["batches"] == [], body)
        rnd = random.Random(7)
        lengths = [rnd.randint(1, 60) for _ in range(40)]
        sts = load(pa, lengths)
        check("load: every request answered", sts == [200] * len(lengths), sts)

        st, hd, body = get(padm, "/v1/batches/recent")
        check("recent: 200 JSON, not cached", st == 200 and hd.get("content-type") == "application/json"
              and "no-store" in hd.get("cache-control", ""), (st, hd))
        doc = json.loads(body)
        check_batches(doc, lengths)
        text = body.decode()
        check("recent: no token id, no request id in it", str(MARK_TOKEN) not in text and REQUEST_ID not in text
              and "input_ids" not in text, text[:200])
        st, _, body = get(padm, "/v1/batches/recent?n=2")
        two = json.loads(body)["batches"] if st == 200 else []
        newest = [b["id"] for b in doc.get("batches", [])[:2]]
        check("recent: ?n=2 gives the newest two", len(two) == 2 and [b["id"] for b in two] == newest,
              (st, body[:200]))
        for bad in ("n=0", "n=65", "n=x", "n=1&n=2"):
            st, _, body = get(padm, "/v1/batches/recent?" + bad)
            check("recent: ?%s refused, 400 bad_parameter" % bad,
                  st == 400 and json.loads(body)["error"]["code"] == "bad_parameter", (st, body))

        st, hd, page = get(padm, "/")
        csp = hd.get("content-security-policy", "")
        check("page: 200 HTML on the admin listener, strict CSP, revalidated",
              st == 200 and hd.get("content-type", "").startswith("text/html") and "default-src 'none'" in csp
              and "script-src 'sha256-" in csp and "connect-src 'self'" in csp and "unsafe" not in csp
              and hd.get("cache-control") == "no-cache" and b"/v1/batches/recent" in page, (st, hd))
        st, hd2, head_body = get(padm, "/", method="HEAD")
        check("page: HEAD gives the length, no body",
              st == 200 and head_body == b"" and hd2.get("content-length") == str(len(page)), (st, hd2))
        st, _, _ = get(pa, "/")
        check("page: not on the client port when an admin listener is set", st == 404, st)
        st, _, _ = get(pa, "/v1/batches/recent")
        check("recent: not on the client port when an admin listener is set", st == 404, st)
        st, _, _ = get(padm, "/", method="POST")
        check("page: POST is 405", st == 405, st)

        shot = os.path.join(tmp, "view.png")
        p, err = chromium(["--screenshot=" + shot, "http://127.0.0.1:%d/" % padm], tmp)
        check("browser: chromium took a screenshot", p is not None and p.returncode == 0 and os.path.exists(shot),
              err)
        if p is not None and os.path.exists(shot):
            w, h, rows = png_pixels(shot)
            bins = saturated_hues(rows)
            # 100 sampled pixels: a block of 20x20 on screen, not an edge or a glyph
            strong = [n for n in bins if n >= 100]
            check("browser: the screenshot shows coloured blocks (4+ hues of 100+ sampled pixels)",
                  w == 1200 and len(strong) >= 4,
                  (bins, "segments per batch", [len(b["segments"]) for b in doc.get("batches", [])][:SHOW_HINT]))
        # the shapes of the batches the page draws: its newest 24 (view.html's SHOW);
        # a slow build packs the 40 requests into more batches than that, and a
        # shape only older ones had is rightly not on the page
        show = int(re.search(rb"const SHOW = (\d+);", page).group(1))
        st, _, body = get(padm, "/v1/batches/recent?n=%d" % show)
        shapes = {"%dx%d" % tuple(b["shape"]) for b in json.loads(body).get("batches", [])} if st == 200 else set()
        # the virtual time budget does not wait for the page's fetch: on a
        # loaded machine (the sanitizer build beside the gcc one) the DOM can
        # be dumped before the batches arrive, so a dump without them is taken again
        # (up to 6 times, a second apart: the ASan build beside the gcc one on 2
        # cores once missed 3 in a row)
        for attempt in range(6):
            if attempt:
                time.sleep(1)
            p, err = chromium(["--dump-dom", "http://127.0.0.1:%d/" % padm], tmp)
            dom = p.stdout.decode(errors="replace") if p is not None else ""
            if p is None or (shapes and all('class="shape">%s<' % s in dom for s in shapes)):
                break
        check("browser: the rendered DOM names every shape drawn",
              shapes and all('class="shape">%s<' % s in dom for s in shapes) and dom.count("<canvas") >= 1,
              (sorted(shapes), dom[:300], err[-200:]))

        # B: tokens, the page on the client port
        st, hd, page_b = get(pb, "/")
        check("tokens: the page (no data) is served without a token", st == 200 and page_b == page, st)
        st, hd, _ = get(pb, "/v1/batches/recent")
        check("tokens: the route needs the token (401)", st == 401 and "bearer" in hd.get("www-authenticate", "").lower(),
              (st, hd))
        auth = {"Authorization": "Bearer " + TOKEN}
        sts = load(pb, [5, 9, 13], auth)
        st, _, body = get(pb, "/v1/batches/recent", auth)
        check("tokens: with the token, the batches", st == 200 and sorted(
            s[2] for b in json.loads(body)["batches"] for s in b["segments"]) == [5, 9, 13], (st, body[:200], sts))
        p, err = chromium(["--dump-dom", "http://127.0.0.1:%d/" % pb], tmp)
        dom = p.stdout.decode(errors="replace") if p is not None else ""
        check("tokens: the page asks for the token (its form shown, no batch drawn)",
              '<form id="auth">' in dom and "token is required" in dom and "<canvas" not in dom,
              err or dom[:600])
    finally:
        stop_all(procs)
        shutil.rmtree(tmp, ignore_errors=True)
    # a sanitizer's finding (a leak of the ring, say) shows as the exit status
    check("both proxies exit cleanly on SIGTERM", [p.returncode for p in procs[1:]] == [0, 0],
          [p.returncode for p in procs])
    finish()


main()
