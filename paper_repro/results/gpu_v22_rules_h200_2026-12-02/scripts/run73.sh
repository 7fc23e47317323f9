#!/usr/bin/env bash
# device run 73: the select pass sized to one wave of its resident blocks (cf from its occupancy): suite, A/B against FLS_CUDA_RULE_WAVE=0 (the old rule), memcheck rules_.
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
export PATH="/usr/local/cuda/bin:$PATH"
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dcuda=enabled && ninja -C build-dev tools/flashsample tests/gpu/gpu_tests ) > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
S=$OUT/summary.txt
echo "build $(( $(date +%s) - t0 )) s" | tee $S
{ timeout 200 build-dev/tests/gpu/gpu_tests > $OUT/gpu_tests.log 2>&1; echo "gpu_tests rc=$?"; grep -E "FAIL|suite" $OUT/gpu_tests.log | tail -8; echo "identical: $(grep -c "tokens \([0-9]*\)/\1 identical" $OUT/gpu_tests.log) of $(grep -c "RULES V=" $OUT/gpu_tests.log)"; grep -E "RULE MATMUL|ASYNC graph|RULES ASYNC" $OUT/gpu_tests.log | head -20; } >> $S 2>&1
echo "tests $(( $(date +%s) - t0 )) s" >> $S
cat $S
mkdir -p /tmp/ab
run() { # label
  build-dev/tools/flashsample bench --device cuda --shapes 4096:151936,8192:128256 --batches 8,16,32,64 --reps 100 \
     --engines fused_wgmma,rule_minp005,rule_topk50,rule_k50_p09,rule_nsigma1,rule_wr4 --csv /tmp/ab/ab_$1.csv > /tmp/ab/ab_$1.log 2>&1
  grep -E "rule_" /tmp/ab/ab_$1.log | cut -c1-60 | sed "s/^/$1 /"
}
for r in 1 2 3; do
  [ $(( $(date +%s) - t0 )) -gt 300 ] && break
  FLS_CUDA_RULE_WAVE=0 run old_$r; run new_$r
  echo "round $r $(( $(date +%s) - t0 )) s"
done 2>&1 > /tmp/ab/ab.txt
(cd /tmp/ab && tar cf $OUT/ab.tar *)
{ timeout 130 /usr/local/cuda/bin/compute-sanitizer --tool memcheck build-dev/tests/gpu/gpu_tests --only rules_ > /tmp/mc.log 2>&1; echo "memcheck rules_ rc=$?"; grep -E "ERROR SUMMARY|suite" /tmp/mc.log | tail -2;
} > $OUT/sanitizers.txt 2>&1
cat $OUT/sanitizers.txt
echo "all $(( $(date +%s) - t0 )) s"
