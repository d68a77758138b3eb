#!/usr/bin/python3
"""The shipped Prometheus rules (deploy/prometheus): promtool accepts them,
their unit tests pass, and every metric they name is one a running lanepack
exports on /metrics (a renamed metric would leave an alert silently dead).

Usage: test-alert-rules.py SOURCE_ROOT LANEPACK EMULATOR [PROMTOOL]"""
import glob
import http.client
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import backend_url, check, finish, start_emulator, start_server  # noqa: E402

root, lanepack, emulator = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
promtool = sys.argv[4] if len(sys.argv) > 4 else "promtool"
pdir = os.path.join(root, "deploy", "prometheus")
rules = sorted(f for f in glob.glob(os.path.join(pdir, "*.yml")) if not f.endswith("-test.yml"))
tests = sorted(glob.glob(os.path.join(pdir, "*-test.yml")))
check("rule files ship", rules and tests, pdir)
# without promtool nothing below could be checked: a failure, not a pass
if not shutil.which(promtool):
    check("promtool is installed (LP_SETUP_TESTS=1 scripts/setup.sh installs it)", False, promtool)
    finish()

for f in rules:
    r = subprocess.run([promtool, "check", "rules", f], capture_output=True, text=True)
    check("promtool check rules " + os.path.basename(f), r.returncode == 0, r.stdout + r.stderr)
for f in tests:
    r = subprocess.run([promtool, "test", "rules", f], capture_output=True, text=True, cwd=pdir)
    check("promtool test rules " + os.path.basename(f), r.returncode == 0, r.stdout + r.stderr)

# Each alert needs a unit test, or it may never fire.
alerts = set()
for f in rules:
    alerts |= set(re.findall(r"^\s*- alert:\s*(\S+)", open(f).read(), re.M))
tested = set()
for f in tests:
    tested |= set(re.findall(r"alertname:\s*(\S+)", open(f).read()))
check("every alert has a promtool test", alerts and alerts <= tested, sorted(alerts - tested))

# Names in expressions: lanepack_* (recorded series are lanepack:..., skipped).
used = set()
for f in rules:
    for expr in re.findall(r"expr:\s*(\|[\s\S]*?(?=\n\s*(?:labels|for|annotations|- )|\Z)|.*)", open(f).read()):
        used |= set(re.findall(r"(?<![:\w])(lanepack_[a-z0-9_]+)", expr))
check("rules name metrics", used, used)

# Exact label values the rules match on (reason="no_shape_available",
# phase="total") are ones the source writes: a renamed error code would leave an
# alert matching nothing, as silently as a renamed metric.
src_text = ""
for dirpath, _, files in os.walk(os.path.join(root, "src")):
    for f in files:
        if f.endswith(".c"):
            src_text += open(os.path.join(dirpath, f), encoding="utf-8", errors="replace").read()
values = set()
for f in rules:
    for label, value in re.findall(r'\b(reason|phase|route)="([a-z_0-9]+)"', open(f).read()):
        values.add((label, value))
for label, value in sorted(values):
    check('%s="%s" is written by the source' % (label, value),
          '"%s"' % value in src_text or '%s=\\"%s\\"' % (label, value) in src_text)

tmp = tempfile.mkdtemp()
procs = []
try:
    emu, emu_port = start_emulator(emulator, "4x64", ["--cost-ms", "2"], stderr=open(os.path.join(tmp, "emu.log"), "w"))
    procs.append(emu)
    # configured by flags alone, no file
    lp, lp_port = start_server("lanepack", lambda listen: [lanepack, "--listen", listen,
                                                          "--backend", backend_url(emu_port), "--shapes", "4x64"],
                               ready="/readyz", timeout=30, stderr=open(os.path.join(tmp, "lp.log"), "w"))
    procs.append(lp)
    c = http.client.HTTPConnection("127.0.0.1", lp_port, timeout=10)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode()
    families = set(re.findall(r"^# TYPE (\S+) (\S+)", body, re.M))
    names = set()
    for name, kind in families:
        names.add(name)
        if kind == "histogram":
            names |= {name + "_bucket", name + "_sum", name + "_count"}
    for m in sorted(used):
        check("exported: " + m, m in names, "not in /metrics")
finally:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(timeout=10)
finish()
