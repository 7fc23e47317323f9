#!/usr/bin/env bash
# device run 70 (next session, first): the new rules_matmul_keys_tiles test (keys at tiles 64/128, 11 and 15
# warps), then the full suite, memcheck rules_, and the full bench + FlashInfer (the shipped 15 warps in the table).
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
export PATH="/usr/local/cuda/bin:$PATH"
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dcuda=enabled && ninja -C build-dev tools/flashsample tests/gpu/gpu_tests ) > /tmp/build.log 2>&1 &
p1=$!
( nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -I .peers/flashinfer/include paper_repro/peers/fi_bench.cu -lcublas -o /tmp/fi_bench > /tmp/fi_build.log 2>&1; echo "fi_bench build rc=$?" ) &
wait $p1 || { tail -40 /tmp/build.log; exit 1; }
wait
S=$OUT/summary.txt
timeout 60 build-dev/tests/gpu/gpu_tests --only rules_matmul_keys > $OUT/keys_tiles.log 2>&1; echo "keys tiles rc=$?" | tee $S; grep -E "RULE MATMUL KEYS|FAIL" $OUT/keys_tiles.log | head -8 | tee -a $S
{ timeout 200 build-dev/tests/gpu/gpu_tests > $OUT/gpu_tests.log 2>&1; echo "gpu_tests rc=$?"; grep -E "FAIL|suite" $OUT/gpu_tests.log | tail -8; echo "identical: $(grep -c "tokens \([0-9]*\)/\1 identical" $OUT/gpu_tests.log) of $(grep -c "RULES V=" $OUT/gpu_tests.log)"; grep -E "RULE MATMUL|AGREEMENT fused" $OUT/gpu_tests.log | head -18; } >> $S 2>&1
cat $S
timeout 150 build-dev/tools/flashsample bench --device cuda --shapes 4096:151936,8192:128256 --batches 1,4,16,64,256 --reps 100 \
   --engines fused_wgmma,rule_minp005,rule_topk50,rule_k50_p09,rule_wr4,rule_nsigma1,rule_k50_p09_graph --csv $OUT/bench_rules.csv > $OUT/bench.log 2>&1; echo "bench rc=$?"
timeout 40 /tmp/fi_bench $OUT/flashinfer.csv 4096:151936,8192:128256 1,4,16,64,256 100 > /tmp/fi.log 2>&1; echo "fi rc=$?"
{ timeout 110 /usr/local/cuda/bin/compute-sanitizer --tool memcheck build-dev/tests/gpu/gpu_tests --only rules_ > /tmp/mc.log 2>&1; echo "memcheck rules_ rc=$?"; grep -E "ERROR SUMMARY|suite" /tmp/mc.log | tail -2; } > $OUT/sanitizers.txt 2>&1
cat $OUT/sanitizers.txt
echo "all $(( $(date +%s) - t0 )) s"
