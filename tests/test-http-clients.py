#!/usr/bin/env python3
"""Python's http.client (what `requests` uses) against the proxy: a client that
sends a whole oversized body or header before reading gets the 413 or 431, not
a broken pipe or a reset (lingering close), several times over, and the proxy
still serves. Arguments: the lanepack and lanepack-emulator binaries."""
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

from lphelp import model_config, start_emulator, start_proxy


def main():
    proxy_bin, emu_bin = sys.argv[1], sys.argv[2]
    emu, emu_port = start_emulator(emu_bin, "4x64", ["--cost-ms", "1"])
    cfg = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    cfg.close()
    try:
        proxy, port = start_proxy(proxy_bin, cfg.name, {"health_interval_ms": 100,
                                                        "models": {"m": model_config("4x64", [emu_port])}},
                                  stderr=subprocess.DEVNULL)
    except BaseException:
        emu.terminate()
        raise
    failures = 0
    try:
        cases = [
            ("9 MB body", 413, "body_too_large",
             lambda c: c.request("POST", "/v1/infer", body=b"{" + b" " * (9 * 1024 * 1024) + b"}",
                                 headers={"Content-Type": "application/json"})),
            ("2 MB header", 431, "headers_too_large",
             lambda c: c.request("GET", "/healthz", headers={"X-Big": "a" * (2 * 1024 * 1024)})),
        ]
        for name, want, code, send in cases:
            for attempt in range(3):
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                try:
                    send(c)
                    r = c.getresponse()
                    body = r.read().decode()
                    ok = r.status == want and code in body and json.loads(body)["error"]["code"] == code
                    print(f"{name}, try {attempt + 1}: {r.status} {body.strip()[:80]}")
                except (OSError, http.client.HTTPException) as e:
                    ok = False
                    print(f"{name}, try {attempt + 1}: {type(e).__name__}: {e}")
                failures += not ok
                c.close()
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("POST", "/v1/infer", body=json.dumps({"input_ids": [1, 2, 3]}))
        r = c.getresponse()
        r.read()
        print(f"afterwards: {r.status}")
        failures += r.status != 200
    finally:
        proxy.terminate()
        emu.terminate()
        rc = proxy.wait(10)
        emu.wait(10)
        os.unlink(cfg.name)
    if rc != 0:
        print(f"proxy exit status {rc}")
        failures += 1
    print(f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
