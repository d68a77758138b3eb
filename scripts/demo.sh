#!/usr/bin/env bash
# The main job: builds lanepack and packs two real length mixes with every
# algorithm and the strategies peers use, printing fill and speed side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
meson compile -C build >/dev/null
pb=build/loadgen/lanepack-packbench
for mix in changelog-entries manpages; do
  echo
  "$pb" --lengths "tests/data/$mix.lengths" --shapes 4x8192,8x2048
done
echo
"$pb" --lengths tests/data/changelog-entries.lengths --shapes 4x8192,8x2048 --advise 3
