#!/usr/bin/python3
"""Checks every deployment file: the Dockerfile's stages, user, health check and
runtime libraries; the Kubernetes objects agree with each other and with the
lanepack configuration they carry; the systemd unit is sandboxed and verifies;
every example configuration loads; install puts binaries and man pages in place.

Usage: test-deploy.py SOURCE_ROOT BUILD_ROOT"""
import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

src, build = sys.argv[1], sys.argv[2]
lanepack = os.path.join(build, "src", "lanepack")
results = []


def check(name, cond, detail=""):
    results.append(bool(cond))
    print("%s - %s%s" % ("ok" if cond else "not ok", name, "" if cond else ": " + str(detail)), flush=True)


def check_config(text, name):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(text)
    try:
        r = subprocess.run([lanepack, "--config", f.name, "--check-config"], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    check("%s passes lanepack --check-config" % name, r.returncode == 0, r.stderr.strip())
    return json.loads(r.stdout) if r.returncode == 0 else None


# ---- Dockerfile ----
lines = []
for raw in open(os.path.join(src, "deploy", "Dockerfile")).read().replace("\\\n", " ").splitlines():
    raw = raw.strip()
    if raw and not raw.startswith("#"):
        op, _, rest = raw.partition(" ")
        lines.append((op.upper(), rest.strip()))
froms = [r for op, r in lines if op == "FROM"]
check("Dockerfile is multi-stage on Debian 12", len(froms) >= 2 and all(f.startswith("debian:12") for f in froms), froms)
runtime = lines[max(i for i, (op, _) in enumerate(lines) if op == "FROM"):]
build_stage = lines[:max(i for i, (op, _) in enumerate(lines) if op == "FROM")]
build_runs = " ".join(r for op, r in build_stage if op == "RUN")
check("build stage uses the README's set-up and build", "scripts/setup.sh" in build_runs and "meson compile -C build" in build_runs, build_runs)
users = [r for op, r in runtime if op == "USER"]
check("runtime runs as a non-root user", users and users[-1] not in ("root", "0"), users)
hc = [r for op, r in runtime if op == "HEALTHCHECK"]
check("HEALTHCHECK probes /healthz", hc and "/healthz" in hc[0], hc)
cmd = " ".join(r for op, r in runtime if op in ("CMD", "ENTRYPOINT"))
check("configuration at /etc/lanepack/lanepack.json", "/etc/lanepack/lanepack.json" in cmd, cmd)
expose = [r for op, r in runtime if op == "EXPOSE"]
listen = re.search(r'"--listen", "[^"]*:(\d+)"', cmd)
check("EXPOSE matches the listen port", expose and listen and expose[0] == listen.group(1), (expose, cmd))
runtime_apt = " ".join(r for op, r in runtime if op == "RUN")
listed = re.findall(r"\b(lib[\w.+-]+)", runtime_apt)
# what the listed packages pull in with them
pulled = subprocess.run(["apt-cache", "depends", "--recurse", "--installed", "--no-suggests",
                         "--no-recommends"] + listed, capture_output=True, text=True).stdout
pulled = set(re.findall(r"^\s*(?:\|?Depends|PreDepends)?:?\s*<?([\w.+-]+)", pulled, re.M)) | set(listed)
libs = subprocess.run(["ldd", lanepack], capture_output=True, text=True).stdout
missing = []
for m in re.finditer(r"=> (/\S+)", libs):
    owner = subprocess.run(["dpkg", "-S", os.path.realpath(m.group(1))], capture_output=True, text=True).stdout
    pkg = owner.split(":")[0] if owner else ""
    if pkg and pkg not in pulled:
        missing.append(pkg)
check("runtime stage installs every shared library lanepack links", not missing, missing)

# ---- Kubernetes ----
k8s = {}
for name in ("configmap.yaml", "deployment.yaml", "service.yaml"):
    with open(os.path.join(src, "deploy", "k8s", name)) as f:
        for doc in yaml.safe_load_all(f):
            k8s[doc["kind"]] = doc
check("k8s has a ConfigMap, a Deployment and a Service", set(k8s) == {"ConfigMap", "Deployment", "Service"}, list(k8s))
dep, svc, cm = k8s["Deployment"], k8s["Service"], k8s["ConfigMap"]
pod = dep["spec"]["template"]
containers = {c["name"]: c for c in pod["spec"]["containers"]}
check("the Pod holds the model server and the lanepack sidecar", set(containers) >= {"lanepack", "model-server"}, list(containers))
lp, ms = containers["lanepack"], containers["model-server"]
cfg_text = cm["data"]["lanepack.json"]
cfg = check_config(cfg_text, "the ConfigMap's lanepack.json")
lp_port = {p["name"]: p["containerPort"] for p in lp["ports"]}
ms_port = {p["name"]: p["containerPort"] for p in ms["ports"]}
if cfg:
    check("lanepack listens on its container port", cfg["listen"].endswith(":%d" % lp_port["http"]), cfg["listen"])
    backends = [b for m in cfg["models"].values() for b in m["backends"]]
    check("lanepack's backend is the model server on localhost",
          backends == ["http://127.0.0.1:%d" % ms_port["backend"]], backends)
check("readiness probe on /readyz of lanepack",
      lp["readinessProbe"]["httpGet"]["path"] == "/readyz" and lp["readinessProbe"]["httpGet"]["port"] == lp_port["http"])
check("liveness probe on /healthz of lanepack",
      lp["livenessProbe"]["httpGet"]["path"] == "/healthz" and lp["livenessProbe"]["httpGet"]["port"] == lp_port["http"])
ann = pod["metadata"]["annotations"]
check("Prometheus scrapes lanepack's /metrics",
      ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/path") == "/metrics"
      and int(ann.get("prometheus.io/port")) == lp_port["http"], ann)
check("both containers request resources", all("requests" in c.get("resources", {}) for c in (lp, ms)))
mount = {m["name"]: m["mountPath"] for m in lp["volumeMounts"]}
vols = {v["name"]: v for v in pod["spec"]["volumes"]}
conf_path = os.path.join(mount["config"], "lanepack.json")
check("the ConfigMap is mounted where --config reads it",
      vols["config"]["configMap"]["name"] == cm["metadata"]["name"] and lp["args"] == ["--config", conf_path],
      (lp["args"], conf_path))
check("the Service selects the Pods", svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items())
check("the Service targets lanepack's port, not the model server's",
      all(p["targetPort"] in (lp_port["http"], "http") for p in svc["spec"]["ports"]), svc["spec"]["ports"])
check("drain fits the termination grace period",
      cfg and cfg["drain_timeout_ms"] / 1000 < pod["spec"]["terminationGracePeriodSeconds"])

# ---- systemd ----
unit_path = os.path.join(src, "deploy", "systemd", "lanepack.service")
unit = configparser.ConfigParser(strict=False, interpolation=None)
unit.optionxform = str
unit.read(unit_path)
svc_sec = unit["Service"]
for key, want in (("DynamicUser", "yes"), ("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                  ("ProtectHome", "yes"), ("PrivateTmp", "yes")):
    check("systemd %s=%s" % (key, want), svc_sec.get(key) == want, svc_sec.get(key))
check("systemd ExecStart reads /etc/lanepack/lanepack.json", "--config /etc/lanepack/lanepack.json" in svc_sec["ExecStart"])
check("systemd stops with SIGTERM (lanepack drains on it)", svc_sec.get("KillSignal") == "SIGTERM")
if shutil.which("systemd-analyze"):
    with tempfile.TemporaryDirectory() as d:
        text = open(unit_path).read().replace("/usr/local/bin/lanepack", os.path.abspath(lanepack))
        path = os.path.join(d, "lanepack.service")
        open(path, "w").write(text)
        r = subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True)
        # the man page is only installed on a real host: its lookup may fail here
        errors = [l for l in (r.stdout + r.stderr).splitlines()
                  if "lanepack.service" in l and "Command 'man " not in l]
        check("systemd-analyze verify finds nothing in the unit", not errors, errors or r.stderr)

# ---- example configurations ----
for name in sorted(os.listdir(os.path.join(src, "conf"))):
    if name.endswith(".json"):
        check_config(open(os.path.join(src, "conf", name)).read(), "conf/" + name)

# ---- install, man pages, --help and --version ----
with tempfile.TemporaryDirectory() as d:
    r = subprocess.run(["meson", "install", "-C", build, "--destdir", d, "--no-rebuild"], capture_output=True, text=True)
    check("meson install succeeds", r.returncode == 0, r.stderr[-500:])
    for prog in ("lanepack", "lanepack-emulator", "lanepack-loadgen", "lanepack-packbench"):
        binary = os.path.join(d, "usr", "local", "bin", prog)
        man = os.path.join(d, "usr", "local", "share", "man", "man1", prog + ".1")
        check("%s installed with its man page" % prog, os.access(binary, os.X_OK) and os.path.exists(man))
        if os.path.exists(man):
            check("%s.1 is a man page" % prog, open(man).read().startswith(".TH " + prog.upper()))
        if os.access(binary, os.X_OK):
            h = subprocess.run([binary, "--help"], capture_output=True, text=True)
            v = subprocess.run([binary, "--version"], capture_output=True, text=True)
            check("%s --help and --version" % prog, h.returncode == 0 and "usage:" in h.stdout
                  and v.returncode == 0 and v.stdout.startswith(prog + " "), (h.returncode, v.stdout))

print("%d passed, %d failed" % (sum(results), len(results) - sum(results)))
sys.exit(0 if all(results) else 1)
