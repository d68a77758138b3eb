#!/bin/sh
# Makes a length mix from a real corpus on a Debian machine: one length per
# document (each package's copyright file and each common licence), token-ish:
# whitespace-split words x 1.3, at least 1, clipped to 8192.
# Usage: bench/mk-copyright-lengths.sh > tests/data/copyright.lengths
set -eu
LC_ALL=C
export LC_ALL
{
  find /usr/share/doc -mindepth 2 -maxdepth 2 -name copyright -type f
  find /usr/share/common-licenses -type f
} | sort | while IFS= read -r f; do
  wc -w < "$f"
done | awk '{ n = int($1 * 1.3 + 0.5); if (n < 1) n = 1; if (n > 8192) n = 8192; print n }'
