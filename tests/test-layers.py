#!/usr/bin/env python3
"""The tree's layering, read off the built objects with nm (what a file calls
is what its object leaves undefined and another object defines):
- no two files of src/ call each other in a circle, directly or around several;
- a folder calls only the folders below it, as src/LAYERS lists them: the
  scheduler never names a front, a front never names the process;
- the packing core (src/core) calls no libuv, curl, thread, clock or I/O
  function: time and bytes are passed in;
and off the sources, without the build:
- a file of src/proxy includes (#include "...") the private header of its
  own folder and of the folders src/LAYERS lets it call, no other (a struct
  is seen only where its thread touches it), KNOWN_INCLUDES aside;
- no header under src/proxy is over MAX_HEADER_LINES lines.
Usage: test-layers.py BUILD_DIR"""
import collections
import glob
import os
import re
import subprocess
import sys


def read_layers():
    """What each folder may call besides itself, from src/LAYERS (the one
    place the order is written: calls go down by name, up only through
    callbacks)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "LAYERS")
    below = {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            name, _, rest = line.partition(":")
            below[name.strip()] = set(rest.split())
    for name, allowed in below.items():
        unknown = allowed - set(below)
        if unknown:
            sys.exit("src/LAYERS: %s names unknown folders %s" % (name, sorted(unknown)))
    return below


BELOW = read_layers()
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


SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
# A header longer than this is a second header waiting to be split off: one
# that every file of a thread reads whole should stay readable whole.
MAX_HEADER_LINES = 400
# Files that include the header of a folder LAYERS does not let them call,
# each for a reason its include line repeats; an entry no longer needed fails
# too, so that the list only shrinks.
KNOWN_INCLUDES = set()
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def header_folder(including, name):
    """The folder of src/ whose header `#include "name"` in file including
    names (as the compiler finds it: beside the file, then under src/proxy and
    src/), or None for a public (include/) or generated header."""
    here = os.path.dirname(including)
    for base in (here, os.path.join(SRC, "proxy"), SRC):
        path = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(path):
            return folder("src/" + os.path.relpath(path, SRC))
    return None


def include_problems():
    """Includes of headers of folders a file may not call, and long headers."""
    problems, used = [], set()
    for path in sorted(glob.glob(SRC + "/proxy/**/*.[ch]", recursive=True)):
        rel = "src/" + os.path.relpath(path, SRC)
        own = folder(rel)
        with open(path) as f:
            lines = f.read().split("\n")
        if rel.endswith(".h") and len(lines) - 1 > MAX_HEADER_LINES:
            problems.append(f"header too long: {rel}: {len(lines) - 1} lines (at most {MAX_HEADER_LINES})")
        for n, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            other = header_folder(path, m.group(1))
            if other is None or other == own or other in BELOW.get(own, set()):
                continue
            if (rel, other) in KNOWN_INCLUDES:
                used.add((rel, other))
                continue
            problems.append(f"private header of a folder {own}/ may not call: {rel}:{n}: "
                            f"#include \"{m.group(1)}\" ({other}/)")
    for rel, other in sorted(KNOWN_INCLUDES - used):
        problems.append(f"stale KNOWN_INCLUDES entry: {rel} no longer includes a header of {other}/")
    return problems


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
    problems = include_problems()
    for p in problems:
        print(p)
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
    bad = len(problems)
    checks = 1
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
