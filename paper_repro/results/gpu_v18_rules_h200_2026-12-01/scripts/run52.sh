#!/usr/bin/env bash
# device run 52: v18 final: run 50 + collect/select blocks with no group reaching the threshold exit at once;
# the statistics pass sums each thread's moments shifted by one data point (one merge per thread).
# Suite, memcheck, bench (+ FlashInfer), peaked rows.
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dcuda=enabled && ninja -C build-dev tools/flashsample tests/gpu/gpu_tests ) > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
( nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -I .peers/flashinfer/include paper_repro/peers/fi_bench.cu -lcublas -o build-dev/fi_bench > /tmp/fi_build.log 2>&1; echo "fi_bench build rc=$?" ) &
echo "build $(( $(date +%s) - t0 )) s"
S=$OUT/summary.txt
{ timeout 150 build-dev/tests/gpu/gpu_tests > $OUT/gpu_tests.log 2>&1; echo "gpu_tests rc=$?"; grep -E "FAIL|suite" $OUT/gpu_tests.log | tail -5; echo "identical: $(grep -c "tokens \([0-9]*\)/\1 identical" $OUT/gpu_tests.log) of $(grep -c "RULES V=" $OUT/gpu_tests.log)"; grep -E "RULE MATMULS|RULES ASYNC [0-9]|top-nsigma" $OUT/gpu_tests.log | head -8; } >> $S 2>&1
echo "tests $(( $(date +%s) - t0 )) s" >> $S
{ timeout 70 /usr/local/cuda/bin/compute-sanitizer --tool memcheck build-dev/tests/gpu/gpu_tests --only rules_ > /tmp/mc.log 2>&1; echo "memcheck rules_ rc=$?"; grep -E "ERROR SUMMARY|suite" /tmp/mc.log | tail -2; } >> $S 2>&1
cat $S
wait
timeout 130 build-dev/tools/flashsample bench --device cuda --shapes 4096:151936,8192:128256 --batches 1,4,16,64,256 --reps 100 \
   --engines fused_wgmma,rule_minp005,rule_topk50,rule_k50_p09,rule_wr4,rule_nsigma1 --csv $OUT/bench_rules.csv > $OUT/bench.log 2>&1; echo "bench rc=$? $(( $(date +%s) - t0 )) s"; grep -E "rule_|^D =|rror" $OUT/bench.log | cut -c1-80
timeout 40 build-dev/fi_bench $OUT/flashinfer.csv 4096:151936,8192:128256 1,4,16,64,256 100 > /tmp/fi.log 2>&1; echo "fi rc=$? $(( $(date +%s) - t0 )) s"
timeout 90 build-dev/tools/flashsample bench --device cuda --shapes 4096:151936,8192:128256 --batches 1,4,16,64 --reps 100 --hscale 4 \
   --engines fused_wgmma,rule_minp005,rule_topk50,rule_k50_p09,rule_nsigma1,rule_wr4 --csv $OUT/bench_rules_peaked.csv > $OUT/bench_peaked.log 2>&1; echo "peaked rc=$? $(( $(date +%s) - t0 )) s"
echo "all $(( $(date +%s) - t0 )) s"
