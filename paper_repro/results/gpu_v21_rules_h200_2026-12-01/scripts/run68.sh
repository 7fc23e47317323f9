#!/usr/bin/env bash
# device run 68 (v21): 15 epilogue warps for the rule matmul at tile 64 (FLS_CUDA_LOGITS_WARPS=15) against the
# default 11: the suite with 15 (exactness), a same-run A/B at B = 33, 64 (alternating, 2 rounds).
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
export PATH="/usr/local/cuda/bin:$PATH"
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dcuda=enabled && ninja -C build-dev tools/flashsample tests/gpu/gpu_tests ) > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
S=$OUT/summary.txt
echo "build $(( $(date +%s) - t0 )) s" | tee $S
{ FLS_CUDA_LOGITS_WARPS=15 timeout 200 build-dev/tests/gpu/gpu_tests > $OUT/gpu_tests_w15.log 2>&1; echo "gpu_tests (FLS_CUDA_LOGITS_WARPS=15) rc=$?"; grep -E "FAIL|suite" $OUT/gpu_tests_w15.log | tail -8; echo "identical: $(grep -c "tokens \([0-9]*\)/\1 identical" $OUT/gpu_tests_w15.log) of $(grep -c "RULES V=" $OUT/gpu_tests_w15.log)"; grep -E "RULE MATMULS|AGREEMENT fused.*wr=4 " $OUT/gpu_tests_w15.log | head -4; } >> $S 2>&1
echo "tests $(( $(date +%s) - t0 )) s" >> $S
cat $S
mkdir -p /tmp/ab
run() { # label
  build-dev/tools/flashsample bench --device cuda --shapes 4096:151936,8192:128256 --batches 33,64 --reps 100 \
     --engines fused_wgmma,rule_wr4,rule_minp005,rule_topk50,rule_nsigma1 --csv /tmp/ab/ab_$1.csv > /tmp/ab/ab_$1.log 2>&1
  grep -E "rule_" /tmp/ab/ab_$1.log | cut -c1-70 | sed "s/^/$1 /"
}
for r in 1 2; do
  [ $(( $(date +%s) - t0 )) -gt 420 ] && break
  run w11_$r; FLS_CUDA_LOGITS_WARPS=15 run w15_$r
  echo "round $r $(( $(date +%s) - t0 )) s"
done 2>&1 | tee /tmp/ab/ab.txt
(cd /tmp/ab && tar cf $OUT/ab.tar *)
echo "all $(( $(date +%s) - t0 )) s"
