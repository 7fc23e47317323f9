#!/usr/bin/env bash
# tools/gpu-check.sh OUTDIR [--quick]
#
# One command for a machine with an sm_90 GPU (nvcc, meson + ninja, python3;
# GSL and Criterion may be absent): builds the library, the CLI and the GPU
# test driver for sm_90, runs the GPU checks (tests/gpu/gpu_tests.c, then compute-sanitizer
# memcheck and racecheck on a quick subset) and the GPU benchmark, and writes
# everything into OUTDIR:
#   env.txt         GPU, driver, nvcc, gcc
#   build.log       configure + compile
#   gpu_tests.log   the gpu suite (token identity, agreement rate, goodness of fit, audit)
#   sanitizer.log   compute-sanitizer memcheck / racecheck
#   bench.log       the benchmark table
#   bench_gpu.csv   the benchmark CSV (long format)
#   sass.txt        instruction counts of the tensor-core kernels' SASS (HGMMA, TMA, LDL/STL)
#   summary.txt     the summary, also printed last
#   ncu.txt         with FLS_GPU_NCU=1: Nsight Compute (--set full, clocks left alone) on one
#                   B = 256 call of the chunked path's sampler and one call of the wgmma
#                   kernel at B = FLS_NCU_B (default 128): the details page and the stall /
#                   issue metrics (FLS_GPU_NCU=chunked or =wgmma: that one only), and
#                   ncu_source_ENGINE.csv:
#                   per-instruction SASS with stall samples, and ncu_top_ENGINE.txt:
#                   the 60 instructions with the most (tools/ncu_top.py)
# Environment: FLS_BENCH_ARGS (extra benchmark options, e.g. --engines ...),
# FLS_GPU_TEST_ARGS (extra gpu_tests options, e.g. --only NAME), FLS_GPU_TEST_TIMEOUT and
# FLS_GPU_BENCH_TIMEOUT (seconds; defaults 420 and 600: a hung kernel cannot eat the lease),
# FLS_GPU_SAN_RUNS ('tool args:test;...', the compute-sanitizer runs; empty: none).
# GSL (for stats/ and the audit): taken from the system if present, else from
# .deb files in .gpudeps/ (libgsl27, libgslcblas0, libgsl-dev), unpacked into
# the build folder — never into /. Exit status: 0 when every step passed.
set -uo pipefail
if [ $# -lt 1 ]; then
    echo "usage: tools/gpu-check.sh OUTDIR [--quick]" >&2
    exit 2
fi
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
QUICK=""
[ "${2:-}" = "--quick" ] && QUICK="--quick"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${FLS_GPU_BUILD:-$ROOT/build-gpucheck}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
export PATH="$(dirname "$NVCC"):$PATH"
cd "$ROOT"
status_build=FAIL status_tests=FAIL status_san=SKIP status_bench=FAIL

{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1
    "$NVCC" --version | tail -2
    gcc --version | head -1
    meson --version 2>&1 | sed 's/^/meson /'
    nproc
} >"$OUT/env.txt" 2>&1

# ---- GSL ----
. "$ROOT/tools/gpu-gsl.sh"
echo "GSL: $GSL_NOTE" >>"$OUT/env.txt"

# ---- build: Meson (library, stats, CLI, the gpu suite's driver; Criterion's suites
#      are skipped where Criterion is absent) ----
# NCCL for libflashsample_nccl: the toolkit's, else the nvidia-nccl wheel's
# (its lib/ has only the versioned soname: a folder with the link beside it)
NCCL_OPT=""
if ! ls /usr/local/cuda/lib*/libnccl.so >/dev/null 2>&1; then
    NW=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null ||
        python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
    if [ -n "$NW" ] && [ -f "$NW/include/nccl.h" ]; then
        ND="$BUILD-nccl"
        rm -rf "$ND" && mkdir -p "$ND/lib"
        ln -s "$NW/include" "$ND/include"
        for f in "$NW"/lib/libnccl.so*; do ln -s "$f" "$ND/lib/"; done
        [ -e "$ND/lib/libnccl.so" ] || ln -s "$(ls "$NW"/lib/libnccl.so.* | head -1)" "$ND/lib/libnccl.so"
        NCCL_OPT="-Dnccl_dir=$ND"
        export LD_LIBRARY_PATH="$ND/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
fi
echo "NCCL: ${NCCL_OPT:-toolkit or none}" >>"$OUT/env.txt"
(
    set -x
    rm -rf "$BUILD"
    meson setup "$BUILD" --buildtype=release -Dcuda=enabled $NCCL_OPT && ninja -C "$BUILD" -j "$(nproc)"
) >"$OUT/build.log" 2>&1 && status_build=PASS

status_simd=SKIP
if [ "$status_build" = PASS ]; then
    # ---- SASS of the tensor-core kernels: instruction mix, no local memory ----
    for o in $(find "$BUILD" -name 'fused_wgmma.o' | sort); do
        echo "== $o"
        cuobjdump -sass "$o" 2>&1 | grep -oE '\b(HGMMA|HMMA|UTMALDG|LDL|STL|SYNCS)[A-Z0-9._]*' | sort | uniq -c
    done >"$OUT/sass.txt" 2>&1
    # ---- the CPU SIMD paths of this host (often AVX-512, which dev machines lack) ----
    if [ -x "$BUILD/tools/simd_check" ]; then
        if "$BUILD/tools/simd_check" >"$OUT/simd_check.log" 2>&1; then status_simd=PASS; else status_simd=FAIL; fi
    fi
    # ---- the gpu suite ----
    timeout "${FLS_GPU_TEST_TIMEOUT:-420}" "$BUILD/tests/gpu/gpu_tests" $QUICK ${FLS_GPU_TEST_ARGS:-} >"$OUT/gpu_tests.log" 2>&1
    rc=$?
    [ $rc -eq 124 ] && echo "gpu suite: timed out (FLS_GPU_TEST_TIMEOUT)" >>"$OUT/gpu_tests.log"
    if [ $rc -eq 0 ]; then status_tests=PASS; elif [ $rc -eq 77 ]; then status_tests=SKIP; fi
    # ---- the benchmark ----
    if timeout "${FLS_GPU_BENCH_TIMEOUT:-600}" "$BUILD/tools/flashsample" bench --device cuda $QUICK \
        ${FLS_BENCH_ARGS:-} --csv "$OUT/bench_gpu.csv" >"$OUT/bench.log" 2>&1; then
        status_bench=PASS
    fi
    # ---- Nsight Compute on single kernels (optional) ----
    NCU=${FLS_GPU_NCU:-0}
    if [ "$NCU" != 0 ] && command -v ncu >/dev/null 2>&1; then
        for prof in "fls_segments_kernel:256:fused_chunked" "fls_fused_wgmma_kernel:${FLS_NCU_B:-128}:fused_wgmma"; do
            IFS=: read -r kern pb eng <<<"$prof"
            [ "$NCU" = 1 ] || [ "fused_$NCU" = "$eng" ] || continue
            echo "=== ncu $kern B=$pb ($eng, D=4096, V=151936)" >>"$OUT/ncu.txt"
            timeout 150 ncu --clock-control none --set full -k "regex:$kern" -c 1 -o "$BUILD/ncu_$kern" -f \
                "$BUILD/tools/flashsample" bench --device cuda --profile --quick --reps 1 --shapes 4096:151936 \
                --batches "$pb" --engines "$eng" >>"$OUT/ncu.txt" 2>&1
            ncu --import "$BUILD/ncu_$kern.ncu-rep" --page details >>"$OUT/ncu.txt" 2>&1
            ncu --import "$BUILD/ncu_$kern.ncu-rep" --page raw 2>&1 |
                grep -E "issue_stalled|issue_active|inst_executed.avg.per_cycle|warps_active|sm__throughput|dram__throughput|gpu__time_duration" \
                    >>"$OUT/ncu.txt"
            # per-instruction SASS with its stall samples (where the warps wait)
            ncu --import "$BUILD/ncu_$kern.ncu-rep" --page source --print-source sass --csv \
                >"$OUT/ncu_source_$eng.csv" 2>&1
            python3 "$ROOT/tools/ncu_top.py" "$OUT/ncu_source_$eng.csv" 60 >"$OUT/ncu_top_$eng.txt" 2>&1
        done
    fi
    # ---- compute-sanitizer on a quick subset (kernels run 10-100x slower under it),
    #      within FLS_GPU_DEADLINE seconds of the start (default 520) ----
    DEADLINE=${FLS_GPU_DEADLINE:-520}
    if [ "$status_tests" != SKIP ] && command -v compute-sanitizer >/dev/null 2>&1; then
        status_san=PASS
        IFS=';' read -r -a san_runs <<<"${FLS_GPU_SAN_RUNS-memcheck --leak-check full:logits_path;memcheck:exact_tokens;racecheck:exact_tokens;synccheck:logits_path}"
        [ ${#san_runs[@]} -eq 0 ] && status_san=SKIP
        for run in "${san_runs[@]}"; do
            tool=${run%%:*}
            only=${run##*:}
            left=$((DEADLINE - SECONDS))
            if [ $left -lt 30 ]; then
                echo "=== skipped (deadline): $tool $only" >>"$OUT/sanitizer.log"
                status_san=PARTIAL
                continue
            fi
            echo "=== compute-sanitizer --tool $tool : $only (limit $left s)" >>"$OUT/sanitizer.log"
            timeout $left compute-sanitizer --error-exitcode 9 --tool $tool "$BUILD/tests/gpu/gpu_tests" --quick --only "$only" \
                >>"$OUT/sanitizer.log" 2>&1
            rc=$?
            echo "=== exit $rc" >>"$OUT/sanitizer.log"
            if [ $rc -eq 124 ]; then status_san=PARTIAL; elif [ $rc -ne 0 ]; then status_san=FAIL; fi
        done
    fi
fi

{
    echo "==== flashsample gpu-check summary ($(date -u +%Y-%m-%dT%H:%MZ)) ===="
    head -3 "$OUT/env.txt"
    echo "build:      $status_build   (GSL: $GSL_NOTE)"
    echo "gpu suite:  $status_tests   ($(grep -c '^\[  OK  \]' "$OUT/gpu_tests.log" 2>/dev/null) ok, $(grep -c '^\[ FAIL \]' "$OUT/gpu_tests.log" 2>/dev/null) failed)"
    echo "sanitizer:  $status_san"
    echo "cpu simd:   $status_simd   ($(grep -h 'simd-check: ' "$OUT/simd_check.log" 2>/dev/null | tr '\n' ';'))"
    echo "benchmark:  $status_bench"
    grep -h "AGREEMENT\|FAIL:" "$OUT/gpu_tests.log" 2>/dev/null | head -20
    [ "$status_build" = FAIL ] && tail -30 "$OUT/build.log"
    echo
    grep -v "^$" "$OUT/bench.log" 2>/dev/null | tail -60
} | tee "$OUT/summary.txt"
[ "$status_build$status_tests$status_bench" = PASSPASSPASS ] && [ "$status_san" != FAIL ] && [ "$status_simd" != FAIL ]
