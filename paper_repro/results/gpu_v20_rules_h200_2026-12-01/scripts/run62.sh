#!/usr/bin/env bash
# device run 62 (v21): staircases per (row, draw, CTA) in the wgmma kernel's epilogue for rows of one token
# a draw without a top list (min-p, top-n-sigma): the select pass passes those rows by.
# Full suite, bench (+ FlashInfer, + graph), A/B FLS_CUDA_RULE_STAIRS=0, memcheck rules_matmul + rules_agreement.
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dcuda=enabled && ninja -C build-dev tools/flashsample tests/gpu/gpu_tests ) > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
( nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -I .peers/flashinfer/include paper_repro/peers/fi_bench.cu -lcublas -o build-dev/fi_bench > /tmp/fi_build.log 2>&1; echo "fi_bench build rc=$?" ) &
echo "build $(( $(date +%s) - t0 )) s"
S=$OUT/summary.txt
{ timeout 200 build-dev/tests/gpu/gpu_tests > $OUT/gpu_tests.log 2>&1; echo "gpu_tests rc=$?"; grep -E "FAIL|suite" $OUT/gpu_tests.log | tail -8; echo "identical: $(grep -c "tokens \([0-9]*\)/\1 identical" $OUT/gpu_tests.log) of $(grep -c "RULES V=" $OUT/gpu_tests.log)"; grep -E "RULE MATMULS|RULES ASYNC [0-9]|AGREEMENT fused|ASYNC graph" $OUT/gpu_tests.log | head -18; } >> $S 2>&1
echo "tests $(( $(date +%s) - t0 )) s" >> $S
cat $S
wait
timeout 150 build-dev/tools/flashsample bench --device cuda --shapes 4096:151936,8192:128256 --batches 1,4,16,64,256 --reps 100 \
   --engines fused_wgmma,rule_minp005,rule_topk50,rule_k50_p09,rule_wr4,rule_nsigma1,rule_k50_p09_graph --csv $OUT/bench_rules.csv > $OUT/bench.log 2>&1; echo "bench rc=$? $(( $(date +%s) - t0 )) s"; grep -E "rule_|^D =|rror" $OUT/bench.log | cut -c1-80
timeout 40 build-dev/fi_bench $OUT/flashinfer.csv 4096:151936,8192:128256 1,4,16,64,256 100 > /tmp/fi.log 2>&1; echo "fi rc=$? $(( $(date +%s) - t0 )) s"
echo "== A/B: staircases off (FLS_CUDA_RULE_STAIRS=0) then on, D=4096, quick"
for sw in 0 1; do
  FLS_CUDA_RULE_STAIRS=$sw timeout 40 build-dev/tools/flashsample bench --device cuda --quick --shapes 4096:151936 --batches 1,16,64 --reps 100 \
     --engines fused_wgmma,rule_minp005,rule_nsigma1 > /tmp/sw$sw.log 2>&1; echo "stairs=$sw rc=$?"; grep -E "rule_|rror" /tmp/sw$sw.log | cut -c1-80
done 2>&1 | tee $OUT/stairs_ab.txt
left=$(( 590 - ($(date +%s) - t0) ))
{ timeout $left /usr/local/cuda/bin/compute-sanitizer --tool memcheck build-dev/tests/gpu/gpu_tests --only rules_ > /tmp/mc.log 2>&1; echo "memcheck rules_ rc=$? (limit $left s)"; grep -E "ERROR SUMMARY|suite|FAIL" /tmp/mc.log | tail -4; grep -m3 -A6 "Invalid\|rror:" /tmp/mc.log | head -20; } > $OUT/sanitizers.txt 2>&1
cat $OUT/sanitizers.txt
echo "all $(( $(date +%s) - t0 )) s"
