#!/usr/bin/env bash
# paper_repro/run.sh [OUTDIR] — the paper's tables on this GPU, in one command.
#
# On a machine with an sm_90 GPU (H200), nvcc, meson + ninja and a python3 with PyTorch and
# Triton: builds the flashsample command line for sm_90a, then times in one session, on the
# same shapes and batches (default: the paper's Tables 4 and 5, D:V = 4096:151936 and
# 8192:128256, B = 1, 2, 4, ..., 256; bf16, T = 0.7, one sample per row):
#   flashsample.csv   flashsample bench --device cuda: the read floor, cuBLAS (eager and graph),
#                     the fused kernel the library picks, the grouped method, the unfused
#                     baselines (engine column)
#   flashinfer.csv    paper_repro/peers/fi_bench: FI1 (softmax + top-k/top-p sampling from probs)
#                     and FI2 (Gumbel sampling from logits) behind a cuBLAS GEMM, and min-p,
#                     over a pinned copy of FlashInfer's header-only include/flashinfer
#                     (FLASHINFER_DIR, the folder holding include/; skipped, saying so, without)
#   torch.csv         paper_repro/peers/torch_peers.py: torch's matmul alone, the compiled
#                     multinomial baseline, Gumbel argmax eager, FlashSampling's Triton kernel
#                     with and without storing logits from a pinned copy of its repository
#                     (FLASHSAMPLING_DIR; skipped, saying so, without)
# and writes REPORT.md and the figures (paper_repro/paper_tables.py) into OUTDIR (default
# paper_repro/results/repro_<date>). Copy OUTDIR/REPORT.md and the PNGs to paper_repro/ to
# publish a run. Neither peer's code is part of this repository: fetch them at the pinned
# commits named in paper_repro/README.md.
# Environment: FLS_REPRO_SHAPES, FLS_REPRO_BATCHES, FLS_REPRO_DEADLINE (seconds for the torch
# peers, default 240), FI_BENCH (a prebuilt fi_bench), FLS_REPRO_BUILD (build folder).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHAPES=${FLS_REPRO_SHAPES:-4096:151936,8192:128256}
BATCHES=${FLS_REPRO_BATCHES:-1,2,4,8,16,32,64,128,256}
BUILD=${FLS_REPRO_BUILD:-$ROOT/build-repro}
export PATH="/usr/local/cuda/bin:$PATH"
t0=$SECONDS
say() { echo "[paper_repro $((SECONDS - t0)) s] $*"; }
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || {
    echo "paper_repro: no NVIDIA GPU here (nvidia-smi finds none); the reproduction needs an H200." >&2
    echo "paper_repro: without a GPU, regenerate the report from the committed run instead:" >&2
    echo "    python3 paper_repro/paper_tables.py paper_repro/results/repro_h200_2026-12-01 --out /tmp/report" >&2
    exit 77
}
# the results folder only once the run can start (no empty folder is left behind)
OUTDIR=$(mkdir -p "${1:-$ROOT/paper_repro/results/repro_$(date -u +%F)}" && cd "${1:-$ROOT/paper_repro/results/repro_$(date -u +%F)}" && pwd)
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
    nvcc --version | tail -1
    python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' 2>&1
    git -C "$ROOT" rev-parse HEAD 2>/dev/null | sed 's/^/flashsample /'
    cat "$ROOT/.peers/PINNED" 2>/dev/null
} >"$OUTDIR/env.txt"
cat "$OUTDIR/env.txt"

# ---- flashsample: the command line, CUDA engine ----
. "$ROOT/tools/gpu-gsl.sh"
say "building flashsample (CUDA) in $BUILD"
if ! { [ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=release -Dcuda=enabled -Dtests=false; } \
    >"$OUTDIR/build.log" 2>&1 || ! ninja -C "$BUILD" tools/flashsample >>"$OUTDIR/build.log" 2>&1; then
    tail -20 "$OUTDIR/build.log"
    echo "paper_repro: the build failed (log: $OUTDIR/build.log)" >&2
    exit 1
fi
say "flashsample bench"
"$BUILD/tools/flashsample" bench --device cuda --shapes "$SHAPES" --batches "$BATCHES" \
    --engines fused_wgmma,fused_grouped,unfused_multinomial,unfused_gumbel \
    --csv "$OUTDIR/flashsample.csv" 2>&1 | tee "$OUTDIR/flashsample.log" | tail -30

# ---- FlashInfer (FI1, FI2) over its pinned headers ----
FI_DIR=${FLASHINFER_DIR:-$ROOT/.peers/flashinfer}
FI=${FI_BENCH:-}
if [ -z "$FI" ] && [ -f "$FI_DIR/include/flashinfer/sampling.cuh" ]; then
    FI="$BUILD/fi_bench"
    say "building fi_bench over $FI_DIR/include"
    nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -I "$FI_DIR/include" \
        "$ROOT/paper_repro/peers/fi_bench.cu" -lcublas -o "$FI" >"$OUTDIR/fi_build.log" 2>&1 || FI=""
fi
if [ -n "$FI" ] && [ -x "$FI" ]; then
    say "FlashInfer baselines"
    "$FI" "$OUTDIR/flashinfer.csv" "$SHAPES" "$BATCHES" 100 2>&1 | tee "$OUTDIR/flashinfer.log" | tail -5
else
    say "FlashInfer skipped: no pinned copy of its headers (FLASHINFER_DIR/include/flashinfer) or no fi_bench"
fi

# ---- torch and FlashSampling's Triton kernel ----
FS_DIR=${FLASHSAMPLING_DIR:-$ROOT/.peers/FlashSampling}
FS_OPT=()
[ -d "$FS_DIR/src/fused_mm_sampling" ] && FS_OPT=(--flashsampling "$FS_DIR")
say "torch and FlashSampling baselines"
python3 "$ROOT/paper_repro/peers/torch_peers.py" "$OUTDIR/torch.csv" --shapes "$SHAPES" \
    --batches "$BATCHES" --deadline "${FLS_REPRO_DEADLINE:-240}" "${FS_OPT[@]}" 2>&1 |
    tee "$OUTDIR/torch.log" | grep -v "^  D="

# ---- the tables and figures ----
say "report"
python3 "$ROOT/paper_repro/paper_tables.py" "$OUTDIR" 2>&1 | tail -5
say "done: $OUTDIR"
