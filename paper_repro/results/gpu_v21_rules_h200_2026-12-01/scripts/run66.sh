#!/usr/bin/env bash
# device run 66 (v21): the final kernel as one block of 8 warps per (row, draw) (was one warp). Suite, the full
# bench (+ FlashInfer, + graph) for PERF, memcheck rules_, ncu chain times, same-run A/B against f38ad9d
# (build-scripts/base), FLS_CUDA_PDL=1 on the keys path.
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
export PATH="/usr/local/cuda/bin:$PATH"
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dcuda=enabled && ninja -C build-dev tools/flashsample tests/gpu/gpu_tests ) > /tmp/build.log 2>&1 &
p1=$!
( cd build-scripts/base && meson setup $ROOT/build-old --buildtype=release -Dtests=false -Dcuda=enabled && ninja -C $ROOT/build-old tools/flashsample ) > /tmp/build_old.log 2>&1 &
p2=$!
( nvcc -O3 -std=c++17 -arch=sm_90a -diag-suppress 177 -I .peers/flashinfer/include paper_repro/peers/fi_bench.cu -lcublas -o /tmp/fi_bench > /tmp/fi_build.log 2>&1; echo "fi_bench build rc=$?" ) &
p3=$!
wait $p1 || { tail -40 /tmp/build.log; exit 1; }
wait $p2 || { tail -40 /tmp/build_old.log; exit 1; }
wait $p3
S=$OUT/summary.txt
echo "build $(( $(date +%s) - t0 )) s" | tee $S
{ timeout 200 build-dev/tests/gpu/gpu_tests > $OUT/gpu_tests.log 2>&1; echo "gpu_tests rc=$?"; grep -E "FAIL|suite" $OUT/gpu_tests.log | tail -8; echo "identical: $(grep -c "tokens \([0-9]*\)/\1 identical" $OUT/gpu_tests.log) of $(grep -c "RULES V=" $OUT/gpu_tests.log)"; grep -E "RULE MATMULS|RULES ASYNC [0-9]|AGREEMENT fused|ASYNC graph" $OUT/gpu_tests.log | head -18; } >> $S 2>&1
echo "tests $(( $(date +%s) - t0 )) s" >> $S
cat $S
timeout 150 build-dev/tools/flashsample bench --device cuda --shapes 4096:151936,8192:128256 --batches 1,4,16,64,256 --reps 100 \
   --engines fused_wgmma,rule_minp005,rule_topk50,rule_k50_p09,rule_wr4,rule_nsigma1,rule_k50_p09_graph --csv $OUT/bench_rules.csv > $OUT/bench.log 2>&1; echo "bench rc=$? $(( $(date +%s) - t0 )) s"; grep -E "rule_|^D =|rror" $OUT/bench.log | cut -c1-80
timeout 40 /tmp/fi_bench $OUT/flashinfer.csv 4096:151936,8192:128256 1,4,16,64,256 100 > /tmp/fi.log 2>&1; echo "fi rc=$? $(( $(date +%s) - t0 )) s"
{ timeout 110 /usr/local/cuda/bin/compute-sanitizer --tool memcheck build-dev/tests/gpu/gpu_tests --only rules_ > /tmp/mc.log 2>&1; echo "memcheck rules_ rc=$?"; grep -E "ERROR SUMMARY|suite" /tmp/mc.log | tail -2; grep -m3 -A6 "Invalid\|rror:" /tmp/mc.log | head -20; } > $OUT/sanitizers.txt 2>&1
cat $OUT/sanitizers.txt; echo "memcheck $(( $(date +%s) - t0 )) s"
NCU=/usr/local/cuda/bin/ncu
for cfg in dev:rule_wr4:16 dev:rule_wr4:64 old:rule_wr4:64 dev:rule_minp005:64 old:rule_minp005:64; do
  IFS=: read side e b <<< "$cfg"
  [ $(( $(date +%s) - t0 )) -gt 470 ] && break
  echo "== $side $e B=$b"
  timeout 25 $NCU --clock-control none --cache-control none -k regex:"rfast|commit" --launch-skip 40 --launch-count 8 \
    --metrics gpu__time_duration.sum --csv --print-units base \
    build-$side/tools/flashsample bench --device cuda --quick --shapes 4096:151936 --batches $b --engines $e 2>/dev/null | grep -E "rfast|commit" | awk -F'","' '{print $5, $(NF)}' | sed -E 's/\(fls_rule_dev\)//; s/\(const int \*.*\)//; s/"//g' | cut -c1-90
done 2>&1 | tee $OUT/ncu_times.txt
mkdir -p /tmp/ab
run() { # build label [env]
  build-$1/tools/flashsample bench --device cuda --shapes 4096:151936,8192:128256 --batches 1,16,64 --reps 100 \
     --engines fused_wgmma,rule_wr4,rule_minp005 --csv /tmp/ab/ab_$2.csv > /tmp/ab/ab_$2.log 2>&1
  grep -E "rule_" /tmp/ab/ab_$2.log | cut -c1-70 | sed "s/^/$2 /"
}
for r in 1 2; do
  [ $(( $(date +%s) - t0 )) -gt 520 ] && break
  run old old$r; run dev new$r
  echo "round $r $(( $(date +%s) - t0 )) s"
done 2>&1 | tee /tmp/ab/ab.txt
if [ $(( $(date +%s) - t0 )) -lt 560 ]; then
  FLS_CUDA_PDL=1 run dev pdl1 2>&1 | tee -a /tmp/ab/ab.txt
fi
(cd /tmp/ab && tar cf $OUT/ab.tar *)
echo "all $(( $(date +%s) - t0 )) s"
