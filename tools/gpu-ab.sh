#!/usr/bin/env bash
# tools/gpu-ab.sh OLD_SRC OUTDIR [ROUNDS]
#
# A same-run A/B of the GPU benchmark: builds the source tree OLD_SRC (e.g. a
# `git archive` of the previous commit) and this tree, then runs
# `flashsample bench --device cuda $FLS_AB_ARGS` alternately old, new, old,
# new, ... (ROUNDS pairs, default 2), so both see the same card, clocks and
# power state, and writes into OUTDIR: ab_old_R.csv, ab_new_R.csv, ab.log,
# and ab_summary.txt (per engine, shape and B: the median over rounds of
# each side and new / old; "SLOWER" where new is more than 2 % slower).
set -uo pipefail
if [ $# -lt 2 ]; then
    echo "usage: tools/gpu-ab.sh OLD_SRC OUTDIR [ROUNDS]" >&2
    exit 2
fi
OLD=$(cd "$1" && pwd)
OUT=$(mkdir -p "$2" && cd "$2" && pwd)
ROUNDS=${3:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${FLS_AB_BUILD:-$ROOT/build-ab}
export PATH="/usr/local/cuda/bin:$PATH"
. "$ROOT/tools/gpu-gsl.sh"
{
    echo "GSL: $GSL_NOTE"
    # FLS_AB_OLD_BUILD / FLS_AB_NEW_BUILD: build folders that already hold
    # tools/flashsample for that side (built here otherwise)
    declare -A bdir=([old]="${FLS_AB_OLD_BUILD:-}" [new]="${FLS_AB_NEW_BUILD:-}")
    for side in old new; do
        [ -n "${bdir[$side]}" ] && [ -x "${bdir[$side]}/tools/flashsample" ] && continue
        src=$ROOT
        [ $side = old ] && src=$OLD
        bdir[$side]="$BUILD-$side"
        rm -rf "$BUILD-$side"
        (cd "$src" && meson setup "$BUILD-$side" --buildtype=release -Dtests=false -Dcuda=enabled >/dev/null &&
            ninja -C "$BUILD-$side" -j "$(nproc)" tools/flashsample >/dev/null) || {
            echo "build of $side failed"
            exit 1
        }
        echo "built $side"
    done
    for r in $(seq 1 "$ROUNDS"); do
        for side in old new; do
            echo "== round $r: $side"
            "${bdir[$side]}/tools/flashsample" bench --device cuda ${FLS_AB_ARGS:-} --csv "$OUT/ab_${side}_$r.csv"
        done
    done
} >"$OUT/ab.log" 2>&1 || {
    tail -20 "$OUT/ab.log"
    exit 1
}
python3 - "$OUT" "$ROUNDS" <<'PY' | tee "$OUT/ab_summary.txt"
import csv, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
t = {}
for side in ("old", "new"):
    for r in range(1, rounds + 1):
        for row in csv.DictReader(open(f"{out}/ab_{side}_{r}.csv")):
            if row["engine"] in ("copy",):
                continue
            k = (row["engine"], int(row["D"]), int(row["V"]), int(row["B"]))
            t.setdefault(k, {"old": [], "new": []})[side].append(float(row["median_ms"]))
print(f"same-run A/B, {rounds} rounds each, alternating old/new; ms = median over rounds of each run's median")
print(f"{'engine':24s} {'D':>5s} {'V':>7s} {'B':>4s} {'old':>8s} {'new':>8s} {'new/old':>8s}")
worst = 0.0
for k in sorted(t):
    o, n = t[k]["old"], t[k]["new"]
    if not o or not n:
        continue
    mo, mn = statistics.median(o), statistics.median(n)
    ratio = mn / mo
    flag = "  SLOWER" if ratio > 1.02 and not k[0].startswith(("floor", "cublas")) else ""
    if not k[0].startswith(("floor", "cublas")):
        worst = max(worst, ratio)
    print(f"{k[0]:24s} {k[1]:5d} {k[2]:7d} {k[3]:4d} {mo:8.4f} {mn:8.4f} {ratio:8.3f}{flag}")
print(f"worst new/old over the library's kernels: {worst:.3f}")
PY
