#!/usr/bin/env bash
# paper_repro/peers/audit_gallery.sh OUT [SCALE [gallery.py draw options...]]
#
# The exactness gallery on the GPU machine, end to end: builds flashsample (CUDA engine, GSL
# for the audit: tools/gpu-gsl.sh) and fi_draw over FlashInfer's pinned headers, then
# paper_repro/peers/gallery.py draws every sampler's tokens for every case and audits them, runs
# the reproducibility checks and measures each peer's noise tail, writing OUT/gallery.json and
# OUT/gallery.md (and OUT/gallery.log, OUT/peer_sources.txt: the peers' noise code as installed).
# SCALE multiplies every case's draws (default 1). Options after SCALE go to `gallery.py draw`,
# e.g. --resume (keep what OUT/gallery.json holds: a run cut short goes on where it stopped) or
# --cases deep-tail,ties. Peers, never part of this repository (paper_repro/README.md):
# FLASHINFER_DIR (default .peers/flashinfer, its include/), FLASHSAMPLING_DIR (default
# .peers/FlashSampling); a missing peer is left out, saying so; a file COMMIT in either names
# the pinned commit, recorded in the JSON. The tables again, CPU only:
#     python3 paper_repro/peers/gallery.py table OUT/gallery.json
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: paper_repro/peers/audit_gallery.sh OUT [SCALE [draw options]]" >&2; exit 2; }
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
SCALE=${2:-1}
shift $(($# >= 2 ? 2 : 1))
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${FLS_GALLERY_BUILD:-$ROOT/build-gallery}
export PATH=/usr/local/cuda/bin:$PATH
cd "$ROOT"
. tools/gpu-gsl.sh
echo "GSL: $GSL_NOTE"
# configured once; ninja rebuilds what changed (a no-op when nothing did)
([ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=release -Dcuda=enabled -Dtests=false >/dev/null) &&
    ninja -C "$BUILD" -j "$(nproc)" tools/flashsample >"$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; exit 1; }
PEERS=""
FI_DIR=${FLASHINFER_DIR:-$ROOT/.peers/flashinfer}
FI_OPT=()
if [ -f "$FI_DIR/include/flashinfer/sampling.cuh" ]; then
    # FlashInfer's own JIT flags (flashinfer/jit/core.py): -use_fast_math -O3 -DNDEBUG
    if [ "$BUILD/fi_draw" -nt paper_repro/peers/fi_draw.cu ] ||
        nvcc -O3 -DNDEBUG -use_fast_math -std=c++17 -arch=sm_90a -diag-suppress 177 -I "$FI_DIR/include" \
            paper_repro/peers/fi_draw.cu -o "$BUILD/fi_draw" >"$OUT/fi_build.log" 2>&1; then
        FI_OPT=(--fi-draw "$BUILD/fi_draw")
        PEERS="flashinfer $(cat "$FI_DIR/COMMIT" 2>/dev/null || echo unknown)"
    else
        echo "FlashInfer left out: fi_draw did not build (OUT/fi_build.log)"
    fi
else
    echo "FlashInfer left out: no pinned headers at $FI_DIR/include"
fi
FS_DIR=${FLASHSAMPLING_DIR:-$ROOT/.peers/FlashSampling}
FS_OPT=()
if [ -d "$FS_DIR/src/fused_mm_sampling" ]; then
    FS_OPT=(--flashsampling "$FS_DIR")
    PEERS="$PEERS; FlashSampling $(cat "$FS_DIR/COMMIT" 2>/dev/null || echo unknown)"
else
    echo "FlashSampling left out: no pinned copy at $FS_DIR"
fi
# the noise code the peers run, as installed here (the causes in docs/AUDIT.md are read from it)
python3 - >"$OUT/peer_sources.txt" 2>&1 <<'PY'
import inspect, os
try:
    import torch
    h = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "core", "TransformationHelper.h")
    src = open(h).read()
    i = src.find("exponential(")
    print("torch %s, %s:\n%s\n" % (torch.__version__, h, src[max(0, i - 300) : i + 1400]))
except Exception as e:
    print("torch: %s" % e)
try:
    import triton
    import triton.language.random as r
    src = [inspect.getsource(getattr(f, "fn", f)) for f in (r.rand, r.uint_to_uniform_float)]
    print("triton %s:\n%s\n%s" % (triton.__version__, src[0], src[1]))
except Exception as e:
    print("triton: %s" % e)
PY
python3 paper_repro/peers/gallery.py draw "$OUT" --tool "$BUILD/tools/flashsample" --scale "$SCALE" \
    --peers "$PEERS" "${FI_OPT[@]}" "${FS_OPT[@]}" "$@" 2>&1 | tee -a "$OUT/gallery.log"
