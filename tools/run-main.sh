#!/usr/bin/env bash
# Quick start 1: set everything up, build, and run the main job on the CPU
# engine: the quick goodness-of-fit audit and a short benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup-deps.sh
[ -f build/build.ninja ] || meson setup build --buildtype=release
ninja -C build
./build/tools/flashsample audit --quick --json build/audit-quick.json
./build/tools/flashsample bench --quick --csv build/bench-quick.csv
echo "main job done: build/audit-quick.json, build/bench-quick.csv"
