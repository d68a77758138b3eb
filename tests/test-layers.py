#!/usr/bin/env python3
"""The tree's layering, read off the built objects with nm (what a file calls
is what its object leaves undefined and another object defines):
- no two files of src/ call each other in a circle, directly or around several;
- a folder calls only the folders below it (process -> front -> sched ->
  relay -> handoff -> common -> core; net, sim and text (the tokenizers) sit
  on core, text below common): the scheduler never
  names a front, a front never names the process;
- the packing core (src/core) calls no libuv, curl, thread, clock or I/O
  function: time and bytes are passed in.
Usage: test-layers.py BUILD_DIR"""
import collections
import glob
import os
import subprocess
import sys

# What each folder may call besides itself. The order is the design's
# (doc/design.md): calls go down by name, up only through callbacks.
BELOW = {
    "process": {"front", "sched", "relay", "handoff", "common", "net", "core", "sim", "text"},
    "front": {"sched", "relay", "handoff", "common", "net", "core", "text"},
    "sched": {"relay", "handoff", "common", "net", "core", "sim", "text"},
    "relay": {"handoff", "common", "net", "core", "text"},
    "handoff": {"common", "core", "text"},
    "common": {"core", "text"},
    "net": {"core"},
    "sim": {"core"},
    "text": {"core"},
    "core": set(),
}
# The core's outside world is libc's memory, string and number functions and
# jansson's reader: anything that waits, reads a clock or touches a file or a
# socket is the shell's.
CORE_FORBIDDEN_PREFIXES = ("uv_", "curl_", "pthread_", "lp_log")
CORE_FORBIDDEN = {
    "clock_gettime", "gettimeofday", "time", "nanosleep", "usleep", "sleep",
    "read", "write", "open", "open64", "close", "fopen", "fopen64", "fread", "fwrite",
    "fprintf", "printf", "puts", "fputs", "perror", "socket", "connect", "send", "recv",
    "sendmsg", "recvmsg", "getenv", "abort", "exit", "rand", "random",
}


def folder(src_path):
    """src/proxy/front/route.c -> front; src/core/queue.c -> core."""
    parts = src_path.split("/")
    return parts[2] if parts[1] == "proxy" else parts[1]


def objects(build):
    """Each object of src/ with the source path it was built from (meson names
    an object after its source: proxy_front_route.c.o for proxy/front/route.c)."""
    srcdir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    sources = {}
    for path in glob.glob(srcdir + "/**/*.c*", recursive=True):
        rel = os.path.relpath(path, srcdir)
        sources[rel.replace("/", "_")] = "src/" + rel
    found = {}
    for obj in glob.glob(build + "/src/**/*.o", recursive=True):
        base = os.path.basename(obj)[:-2]
        if base in sources:
            found[sources[base]] = obj
    return found


def symbols(obj):
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) == 3 and f[1] in "TDBRV":
            defined.add(f[2])
        elif len(f) == 2 and f[0] == "U":
            undefined.add(f[1])
    return defined, undefined


def circles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    build = sys.argv[1]
    objs = objects(build)
    if len(objs) < 40:
        print(f"layers: only {len(objs)} objects of src/ under {build}: is it built?")
        return 1
    owner, calls = {}, {}
    for src, obj in objs.items():
        defined, undefined = symbols(obj)
        for s in defined:
            owner[s] = src
        calls[src] = undefined
    graph = collections.defaultdict(set)
    named = collections.defaultdict(set)  # (caller, callee) -> symbols
    for src, undefined in calls.items():
        graph[src]
        for s in undefined:
            callee = owner.get(s)
            if callee and callee != src:
                graph[src].add(callee)
                named[(src, callee)].add(s)
    bad = 0
    checks = 0
    for comp in circles(graph):
        bad += 1
        print("circle:", " <-> ".join(comp))
        for a in comp:
            for b in sorted(graph[a] & set(comp)):
                print(f"    {a} -> {b} ({', '.join(sorted(named[(a, b)]))})")
    checks += 1
    for (a, b), syms in sorted(named.items()):
        fa, fb = folder(a), folder(b)
        if fa == fb:
            continue
        checks += 1
        if fb not in BELOW.get(fa, set()):
            bad += 1
            print(f"upward call: {a} ({fa}/) -> {b} ({fb}/): {', '.join(sorted(syms))}")
    for src, undefined in sorted(calls.items()):
        if folder(src) != "core":
            continue
        checks += 1
        io = sorted(s for s in undefined
                    if s in CORE_FORBIDDEN or s.startswith(CORE_FORBIDDEN_PREFIXES))
        if io:
            bad += 1
            print(f"core does I/O, waits or reads a clock: {src}: {', '.join(io)}")
    print(f"layers: {len(objs)} files, {sum(len(v) for v in graph.values())} calls between files, "
          f"{checks} checks, {bad} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
