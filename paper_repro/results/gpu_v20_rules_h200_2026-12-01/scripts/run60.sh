#!/usr/bin/env bash
# device run 60 (v20): run 59 + the select pass deals its warps' support pairs out to the lanes (one Philox
# round for the few pairs of flat rows) and keeps 5 blocks a multiprocessor; PDL off where the matmul keeps keys.
# Full suite, bench (+ FlashInfer, + graph), memcheck rules_, synccheck rules_matmul, ncu select durations.
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
{ timeout 130 /usr/local/cuda/bin/compute-sanitizer --tool memcheck build-dev/tests/gpu/gpu_tests --only rules_ > /tmp/mc.log 2>&1; echo "memcheck rules_ rc=$?"; grep -E "ERROR SUMMARY|suite" /tmp/mc.log | tail -2; grep -m3 -A6 "Invalid\|rror:" /tmp/mc.log | head -20; } >> $OUT/sanitizers.txt 2>&1
{ timeout 90 /usr/local/cuda/bin/compute-sanitizer --tool synccheck build-dev/tests/gpu/gpu_tests --only rules_matmul > /tmp/sc.log 2>&1; echo "synccheck rules_matmul rc=$?"; grep -E "ERROR SUMMARY|suite" /tmp/sc.log | tail -2; } >> $OUT/sanitizers.txt 2>&1
cat $OUT/sanitizers.txt
FS=build-dev/tools/flashsample; NCU=/usr/local/cuda/bin/ncu
for eb in rule_minp005:16 rule_minp005:64 rule_nsigma1:64; do
  [ $(( $(date +%s) - t0 )) -gt 540 ] && break
  e=${eb%:*}; b=${eb#*:}; echo "== $e B=$b"
  timeout 25 $NCU --clock-control none --cache-control none -k regex:"rfast|commit" --launch-skip 40 --launch-count 8 \
    --metrics gpu__time_duration.sum --csv --print-units base \
    $FS bench --device cuda --quick --shapes 4096:151936 --batches $b --engines $e 2>/dev/null | grep -E "rfast|commit" | awk -F'","' '{print $5, $(NF)}' | sed -E 's/\(fls_rule_dev\)//; s/\(const [^)]*\)//; s/"//g' | cut -c1-90
done 2>&1 | tee $OUT/ncu_times.txt
echo "all $(( $(date +%s) - t0 )) s"
