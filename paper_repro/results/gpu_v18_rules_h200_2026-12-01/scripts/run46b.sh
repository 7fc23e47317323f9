#!/usr/bin/env bash
# device run 46b: the bench of run 44 (+ FlashInfer) on the group skipping + list draws; ncu per kernel
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dcuda=enabled && ninja -C build-dev tools/flashsample tests/gpu/gpu_tests ) > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
( nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -I .peers/flashinfer/include paper_repro/peers/fi_bench.cu -lcublas -o build-dev/fi_bench > /tmp/fi_build.log 2>&1; echo "fi_bench build rc=$?" ) &
echo "build $(( $(date +%s) - t0 )) s"
wait
timeout 240 build-dev/tools/flashsample bench --device cuda --shapes 4096:151936,8192:128256 --batches 1,4,16,64,256 --reps 100 \
   --engines fused_wgmma,rule_minp005,rule_topk50,rule_k50_p09,rule_wr4,rule_nsigma1,rule_minp005_blas,rule_k50_p09_blas,rule_minp005_sync,rule_k50_p09_sync --csv $OUT/bench_rules.csv > $OUT/bench.log 2>&1; echo "bench rc=$? $(( $(date +%s) - t0 )) s"; grep -E "rule_|^D =|rror" $OUT/bench.log | cut -c1-80
timeout 150 build-dev/fi_bench $OUT/flashinfer.csv 4096:151936,8192:128256 1,4,16,64,256 100 > /tmp/fi.log 2>&1; echo "fi rc=$? $(( $(date +%s) - t0 )) s"
FS=build-dev/tools/flashsample; NCU=/usr/local/cuda/bin/ncu
for eb in rule_wr4:1 rule_wr4:64 rule_nsigma1:64 rule_k50_p09:1 rule_k50_p09:64 rule_minp005:64; do e=${eb%:*}; b=${eb#*:}; echo "== $e B=$b"
  timeout 40 $NCU --clock-control none --cache-control none -k regex:"rfast|commit" --launch-skip 30 --launch-count 6 \
    --metrics gpu__time_duration.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size --csv --print-units base \
    $FS bench --device cuda --quick --shapes 4096:151936 --batches $b --engines $e 2>/dev/null | grep -E "rfast|commit" | awk -F'","' '{print $5, $(NF-2), $(NF)}' | cut -c1-120
done > $OUT/ncu_times.txt 2>&1
cat $OUT/ncu_times.txt
echo "all $(( $(date +%s) - t0 )) s"
