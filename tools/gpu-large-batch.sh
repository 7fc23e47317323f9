#!/usr/bin/env bash
# tools/gpu-large-batch.sh OUTDIR [FLASHSAMPLING_DIR]
#
# docs/PERF.md's large-batch table in one run, on a machine with an sm_90 GPU
# (nvcc, meson + ninja; python3 with PyTorch and Triton for the peers): builds
# the command line for sm_90a, then in one session
#   flashsample.csv  flashsample bench --device cuda: cuBLAS (eager, graph), the
#                    fused call, the wgmma mainloop alone, the min-first scheme,
#                    the grouped method, min-p 0.05, top-k 50, top-k 50 + top-p 0.9
#                    and without replacement K = 4 (bf16, T = 0.7)
#   torch.csv        torch's H @ W.T and FlashSampling's Triton kernel from a
#                    pinned copy of its repository (FLASHSAMPLING_DIR, default
#                    .peers/FlashSampling, paper_repro/README.md; skipped, saying
#                    so, without it)
#   TABLE.md         tools/large_batch_table.py: the ratios the targets are stated in
# Environment: FLS_LB_SHAPES (default 4096:151936,8192:128256), FLS_LB_BATCHES
# (default 1,16,64,128,256), FLS_LB_BUILD (build folder, default build-lb).
set -uo pipefail
if [ $# -lt 1 ]; then
    echo "usage: tools/gpu-large-batch.sh OUTDIR [FLASHSAMPLING_DIR]" >&2
    exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
FS_DIR=${2:-$ROOT/.peers/FlashSampling}
SHAPES=${FLS_LB_SHAPES:-4096:151936,8192:128256}
BATCHES=${FLS_LB_BATCHES:-1,16,64,128,256}
BUILD=${FLS_LB_BUILD:-$ROOT/build-lb}
export PATH="/usr/local/cuda/bin:$PATH"
t0=$SECONDS
say() { echo "[large-batch $((SECONDS - t0)) s] $*"; }
. "$ROOT/tools/gpu-gsl.sh"
say "building flashsample (CUDA) in $BUILD"
if ! { [ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=release -Dcuda=enabled -Dtests=false; } \
    >"$OUT/build.log" 2>&1 || ! ninja -C "$BUILD" tools/flashsample >>"$OUT/build.log" 2>&1; then
    tail -20 "$OUT/build.log"
    echo "gpu-large-batch: the build failed (log: $OUT/build.log)" >&2
    exit 1
fi
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
    git -C "$ROOT" rev-parse HEAD 2>/dev/null | sed 's/^/flashsample /'
    cat "$FS_DIR/COMMIT" 2>/dev/null | sed 's/^/FlashSampling /'
} >"$OUT/env.txt" 2>&1
say "flashsample bench"
"$BUILD/tools/flashsample" bench --device cuda --shapes "$SHAPES" --batches "$BATCHES" \
    --engines fused_wgmma,fused_wgmma_mf,wgmma_gemm_only,fused_grouped,rule_minp005,rule_topk50,rule_k50_p09,rule_wr4 \
    --csv "$OUT/flashsample.csv" >"$OUT/flashsample.log" 2>&1 || {
    tail -5 "$OUT/flashsample.log"
    echo "gpu-large-batch: the bench failed (log: $OUT/flashsample.log)" >&2
    exit 1
}
FS_OPT=()
[ -d "$FS_DIR/src/fused_mm_sampling" ] && FS_OPT=(--flashsampling "$FS_DIR")
say "torch's matmul and FlashSampling"
python3 "$ROOT/paper_repro/peers/torch_peers.py" "$OUT/torch.csv" --shapes "$SHAPES" --batches "$BATCHES" \
    --methods torch_matmul,flashsampling "${FS_OPT[@]}" >"$OUT/torch.log" 2>&1 || say "torch peers failed (log: $OUT/torch.log)"
grep -E "skipped|failed" "$OUT/torch.log"
python3 "$ROOT/tools/large_batch_table.py" "$OUT" | tee "$OUT/TABLE.md"
say "done: $OUT"
