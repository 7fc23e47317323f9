#!/usr/bin/env bash
# device run 58 (v20): validates b48b194 (review mends) and the row kernel's draws default-off host logic.
# Full suite, bench (+ FlashInfer), memcheck rules_, synccheck + racecheck rules_matmul (the epilogue's shared-memory key lists).
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dcuda=enabled && ninja -C build-dev tools/flashsample tests/gpu/gpu_tests ) > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
( nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -I .peers/flashinfer/include paper_repro/peers/fi_bench.cu -lcublas -o build-dev/fi_bench > /tmp/fi_build.log 2>&1; echo "fi_bench build rc=$?" ) &
echo "build $(( $(date +%s) - t0 )) s"
S=$OUT/summary.txt
{ timeout 200 build-dev/tests/gpu/gpu_tests > $OUT/gpu_tests.log 2>&1; echo "gpu_tests rc=$?"; grep -E "FAIL|suite" $OUT/gpu_tests.log | tail -8; echo "identical: $(grep -c "tokens \([0-9]*\)/\1 identical" $OUT/gpu_tests.log) of $(grep -c "RULES V=" $OUT/gpu_tests.log)"; grep -E "RULE MATMULS|RULES ASYNC [0-9]|AGREEMENT fused|draw path" $OUT/gpu_tests.log | head -16; } >> $S 2>&1
echo "tests $(( $(date +%s) - t0 )) s" >> $S
cat $S
wait
timeout 130 build-dev/tools/flashsample bench --device cuda --shapes 4096:151936,8192:128256 --batches 1,4,16,64,256 --reps 100 \
   --engines fused_wgmma,rule_minp005,rule_topk50,rule_k50_p09,rule_wr4,rule_nsigma1 --csv $OUT/bench_rules.csv > $OUT/bench.log 2>&1; echo "bench rc=$? $(( $(date +%s) - t0 )) s"; grep -E "rule_|^D =|rror" $OUT/bench.log | cut -c1-80
timeout 40 build-dev/fi_bench $OUT/flashinfer.csv 4096:151936,8192:128256 1,4,16,64,256 100 > /tmp/fi.log 2>&1; echo "fi rc=$? $(( $(date +%s) - t0 )) s"
S2=$OUT/sanitizers.txt
{ timeout 130 /usr/local/cuda/bin/compute-sanitizer --tool memcheck build-dev/tests/gpu/gpu_tests --only rules_ > /tmp/mc.log 2>&1; echo "memcheck rules_ rc=$?"; grep -E "ERROR SUMMARY|suite" /tmp/mc.log | tail -2; grep -m3 -A6 "Invalid\|rror:" /tmp/mc.log | head -20; } >> $S2 2>&1
echo "memcheck done $(( $(date +%s) - t0 )) s" >> $S2
{ timeout 60 /usr/local/cuda/bin/compute-sanitizer --tool synccheck build-dev/tests/gpu/gpu_tests --only rules_matmul > /tmp/sc.log 2>&1; echo "synccheck rules_matmul rc=$?"; grep -E "ERROR SUMMARY|suite" /tmp/sc.log | tail -2; } >> $S2 2>&1
left=$(( 585 - ($(date +%s) - t0) ))
echo "racecheck with $left s" >> $S2
{ timeout $left /usr/local/cuda/bin/compute-sanitizer --tool racecheck build-dev/tests/gpu/gpu_tests --only rules_matmul > /tmp/rc.log 2>&1; echo "racecheck rules_matmul rc=$?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|suite|FAIL" /tmp/rc.log | tail -3; tail -3 /tmp/rc.log; } >> $S2 2>&1
cat $S2
echo "all $(( $(date +%s) - t0 )) s"
