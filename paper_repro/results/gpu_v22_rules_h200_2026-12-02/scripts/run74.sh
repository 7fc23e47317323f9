#!/usr/bin/env bash
# device run 74: the shipped code (958c140) full bench with B = 32 added + FlashInfer in the same run.
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
export PATH="/usr/local/cuda/bin:$PATH"
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dcuda=enabled -Dtests=false && ninja -C build-dev tools/flashsample ) > /tmp/build.log 2>&1 &
p1=$!
( nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -I .peers/flashinfer/include paper_repro/peers/fi_bench.cu -lcublas -o /tmp/fi_bench > /tmp/fi_build.log 2>&1; echo "fi_bench build rc=$?" ) &
wait $p1 || { tail -40 /tmp/build.log; exit 1; }
wait
echo "build $(( $(date +%s) - t0 )) s"
timeout 200 build-dev/tools/flashsample bench --device cuda --shapes 4096:151936,8192:128256 --batches 1,4,16,32,64,256 --reps 100 \
   --engines fused_wgmma,rule_minp005,rule_topk50,rule_k50_p09,rule_wr4,rule_nsigma1,rule_k50_p09_graph --csv $OUT/bench_rules.csv > $OUT/bench.log 2>&1; echo "bench rc=$?"
timeout 60 /tmp/fi_bench $OUT/flashinfer.csv 4096:151936,8192:128256 1,4,16,32,64,256 100 > $OUT/fi.log 2>&1; echo "fi rc=$?"
echo "all $(( $(date +%s) - t0 )) s"
