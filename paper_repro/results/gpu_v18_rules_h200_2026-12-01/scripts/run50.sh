#!/usr/bin/env bash
# device run 50: run 49 + the select kernel keeps ordered 64-bit keys (one compare per slot; x read back when written): suite, sanitizers, bench, FlashInfer, ncu
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dcuda=enabled && ninja -C build-dev tools/flashsample tests/gpu/gpu_tests ) > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
S=$OUT/summary.txt
{ timeout 220 build-dev/tests/gpu/gpu_tests > $OUT/gpu_tests.log 2>&1; echo "gpu_tests rc=$?"; grep -E "FAIL|suite" $OUT/gpu_tests.log | tail -5; echo "identical: $(grep -c "tokens \([0-9]*\)/\1 identical" $OUT/gpu_tests.log) of $(grep -c "RULES V=" $OUT/gpu_tests.log)"; grep -E "RULE MATMULS|RULES ASYNC [0-9]|ASYNC graph|AGREE" $OUT/gpu_tests.log | head -20; } >> $S 2>&1
echo "tests $(( $(date +%s) - t0 )) s" >> $S
cat $S
{ FLS_CUDA_NO_SKIP=1 timeout 100 build-dev/tests/gpu/gpu_tests --only rules_logits > /tmp/noskip.log 2>&1; echo "noskip rc=$?"; echo "noskip identical: $(grep -c "tokens \([0-9]*\)/\1 identical" /tmp/noskip.log) of $(grep -c "RULES V=" /tmp/noskip.log)"; } >> $S 2>&1
{ timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck build-dev/tests/gpu/gpu_tests --only rules_ > /tmp/mc.log 2>&1; echo "memcheck rules_ rc=$?"; grep -E "ERROR SUMMARY|suite" /tmp/mc.log | tail -2; } >> $S 2>&1
{ timeout 90 /usr/local/cuda/bin/compute-sanitizer --tool synccheck build-dev/tests/gpu/gpu_tests --only rules_matmul > /tmp/sc.log 2>&1; echo "synccheck rules_matmul rc=$?"; grep -E "ERROR SUMMARY|suite" /tmp/sc.log | tail -2; } >> $S 2>&1
echo "all $(( $(date +%s) - t0 )) s" >> $S
( nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -I .peers/flashinfer/include paper_repro/peers/fi_bench.cu -lcublas -o build-dev/fi_bench > /tmp/fi_build.log 2>&1; echo "fi_bench build rc=$?" ) &
echo "build $(( $(date +%s) - t0 )) s"
wait
timeout 240 build-dev/tools/flashsample bench --device cuda --shapes 4096:151936,8192:128256 --batches 1,4,16,64,256 --reps 100 \
   --engines fused_wgmma,rule_minp005,rule_topk50,rule_k50_p09,rule_wr4,rule_nsigma1,rule_minp005_blas,rule_k50_p09_blas,rule_minp005_sync,rule_k50_p09_sync --csv $OUT/bench_rules.csv > $OUT/bench.log 2>&1; echo "bench rc=$? $(( $(date +%s) - t0 )) s"; grep -E "rule_|^D =|rror" $OUT/bench.log | cut -c1-80
timeout 150 build-dev/fi_bench $OUT/flashinfer.csv 4096:151936,8192:128256 1,4,16,64,256 100 > /tmp/fi.log 2>&1; echo "fi rc=$? $(( $(date +%s) - t0 )) s"
FS=build-dev/tools/flashsample; NCU=/usr/local/cuda/bin/ncu
for eb in rule_wr4:64 rule_minp005:64; do e=${eb%:*}; b=${eb#*:}; echo "== $e B=$b"
  timeout 40 $NCU --clock-control none --cache-control none -k regex:"rfast|commit" --launch-skip 30 --launch-count 6 \
    --metrics gpu__time_duration.sum --csv --print-units base \
    $FS bench --device cuda --quick --shapes 4096:151936 --batches $b --engines $e 2>/dev/null | grep -E "rfast|commit" | awk -F'","' '{print $5, $(NF)}' | cut -c1-100
done > $OUT/ncu_times.txt 2>&1
cat $OUT/ncu_times.txt
{ timeout 300 /usr/local/cuda/bin/compute-sanitizer --tool racecheck build-dev/tests/gpu/gpu_tests --only rules_matmul > /tmp/rc.log 2>&1; echo "racecheck rules_matmul rc=$?"; grep -E "RACECHECK SUMMARY|suite" /tmp/rc.log | tail -2; } 2>&1 | tee $OUT/racecheck.txt
echo "all $(( $(date +%s) - t0 )) s"
tail -8 $S
