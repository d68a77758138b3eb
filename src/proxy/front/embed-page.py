#!/usr/bin/env python3
"""Turns a static HTML page into a C header at build time: its bytes as an
array and a Content-Security-Policy header line that allows its one inline
script and one inline style by their SHA-256 (nothing else: no other source,
no inline handler), so the page is edited as HTML and served as it is.

usage: embed-page.py PAGE.html OUT.h PREFIX
"""
import base64
import hashlib
import re
import sys


def fail(msg):
    sys.exit("embed-page.py: " + msg)


def one_block(html, tag):
    blocks = re.findall(r"<%s>(.*?)</%s>" % (tag, tag), html, re.S)
    if len(blocks) != 1 or len(re.findall(r"<%s[\s>]" % tag, html)) != 1:
        fail("the page must hold exactly one plain <%s> block" % tag)
    return blocks[0]


def main():
    if len(sys.argv) != 4:
        fail("usage: embed-page.py PAGE.html OUT.h PREFIX")
    src, out, prefix = sys.argv[1:]
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", prefix):
        fail("the prefix must be a C identifier in lower case")
    data = open(src, "rb").read()
    try:
        html = data.decode("utf-8")
    except UnicodeDecodeError as e:
        fail("%s is not UTF-8: %s" % (src, e))
    # what the policy would block in a browser is refused here, at build time
    if re.search(r"<[^>]*\s(on[a-z]+|style)\s*=", html):
        fail("inline event handlers and style attributes are blocked by the policy")
    if re.search(r"\s(src|href)\s*=", html):
        fail("the page may load nothing: no src or href")
    digests = []
    for tag in ("script", "style"):
        body = one_block(html, tag).encode("utf-8")
        digests.append("'sha256-%s'" % base64.b64encode(hashlib.sha256(body).digest()).decode())
    csp = ("default-src 'none'; script-src %s; style-src %s; connect-src 'self'; img-src 'none'; "
           "base-uri 'none'; form-action 'none'; frame-ancestors 'none'" % tuple(digests))
    rows = []
    for i in range(0, len(data), 16):
        rows.append("  " + ", ".join("0x%02x" % b for b in data[i:i + 16]) + ",")
    with open(out, "w") as f:
        f.write("/* Generated from %s by embed-page.py: edit the page, not this. */\n" % src.split("/")[-1])
        f.write("static const unsigned char %s_html[] = {\n%s\n};\n" % (prefix, "\n".join(rows)))
        f.write("#define %s_CSP \"Content-Security-Policy: %s\\r\\n\"\n" % (prefix.upper(), csp))


main()
