#!/usr/bin/env bash
# paper_repro/peers/audit_gallery.sh OUT [SCALE]
#
# The exactness gallery on the GPU machine, end to end: builds flashsample (CUDA engine, GSL
# for the audit: tools/gpu-gsl.sh) and fi_draw over FlashInfer's pinned headers, then
# paper_repro/peers/gallery.py draws every sampler's tokens for every case and audits them,
# writing OUT/gallery.json and OUT/gallery.md (and OUT/gallery.log). SCALE multiplies every
# case's draws (default 1). Peers, never part of this repository (paper_repro/README.md):
# FLASHINFER_DIR (default .peers/flashinfer, its include/), FLASHSAMPLING_DIR (default
# .peers/FlashSampling); a missing peer is left out, saying so. The table again, CPU only:
#     python3 paper_repro/peers/gallery.py table OUT/gallery.json
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: paper_repro/peers/audit_gallery.sh OUT [SCALE]" >&2; exit 2; }
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
SCALE=${2:-1}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${FLS_GALLERY_BUILD:-$ROOT/build-gallery}
export PATH=/usr/local/cuda/bin:$PATH
cd "$ROOT"
. tools/gpu-gsl.sh
echo "GSL: $GSL_NOTE"
if [ ! -x "$BUILD/tools/flashsample" ]; then
    (meson setup "$BUILD" --buildtype=release -Dcuda=enabled -Dtests=false >/dev/null &&
        ninja -C "$BUILD" -j "$(nproc)" tools/flashsample >"$OUT/build.log" 2>&1) ||
        { tail -30 "$OUT/build.log"; exit 1; }
fi
FI_DIR=${FLASHINFER_DIR:-$ROOT/.peers/flashinfer}
FI_OPT=()
if [ -f "$FI_DIR/include/flashinfer/sampling.cuh" ]; then
    if nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -I "$FI_DIR/include" \
        paper_repro/peers/fi_draw.cu -o "$BUILD/fi_draw" >"$OUT/fi_build.log" 2>&1; then
        FI_OPT=(--fi-draw "$BUILD/fi_draw")
    else
        echo "FlashInfer left out: fi_draw did not build (OUT/fi_build.log)"
    fi
else
    echo "FlashInfer left out: no pinned headers at $FI_DIR/include"
fi
FS_DIR=${FLASHSAMPLING_DIR:-$ROOT/.peers/FlashSampling}
FS_OPT=()
[ -d "$FS_DIR/src/fused_mm_sampling" ] && FS_OPT=(--flashsampling "$FS_DIR") ||
    echo "FlashSampling left out: no pinned copy at $FS_DIR"
python3 paper_repro/peers/gallery.py draw "$OUT" --tool "$BUILD/tools/flashsample" --scale "$SCALE" \
    "${FI_OPT[@]}" "${FS_OPT[@]}" 2>&1 | tee "$OUT/gallery.log"
