#!/usr/bin/env bash
# device run 67 (v21): run 66's tree with fls_wg_row_keys inlined (only the four tilings that run sample mode 2
# compile it) against run 66's tree (build-scripts/base66): suite, same-run A/B, memcheck rules_matmul.
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
export PATH="/usr/local/cuda/bin:$PATH"
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dcuda=enabled && ninja -C build-dev tools/flashsample tests/gpu/gpu_tests ) > /tmp/build.log 2>&1 &
p1=$!
( cd build-scripts/base66 && meson setup $ROOT/build-old --buildtype=release -Dtests=false -Dcuda=enabled && ninja -C $ROOT/build-old tools/flashsample ) > /tmp/build_old.log 2>&1 &
p2=$!
wait $p1 || { tail -40 /tmp/build.log; exit 1; }
wait $p2 || { tail -40 /tmp/build_old.log; exit 1; }
S=$OUT/summary.txt
echo "build $(( $(date +%s) - t0 )) s" | tee $S
{ timeout 200 build-dev/tests/gpu/gpu_tests > $OUT/gpu_tests.log 2>&1; echo "gpu_tests rc=$?"; grep -E "FAIL|suite" $OUT/gpu_tests.log | tail -8; echo "identical: $(grep -c "tokens \([0-9]*\)/\1 identical" $OUT/gpu_tests.log) of $(grep -c "RULES V=" $OUT/gpu_tests.log)"; grep -E "RULE MATMULS|AGREEMENT fused.*wr=4 " $OUT/gpu_tests.log | head -4; } >> $S 2>&1
echo "tests $(( $(date +%s) - t0 )) s" >> $S
cat $S
mkdir -p /tmp/ab
run() { # build label
  build-$1/tools/flashsample bench --device cuda --shapes 4096:151936,8192:128256 --batches 1,16,64 --reps 100 \
     --engines fused_wgmma,rule_wr4,rule_topk50 --csv /tmp/ab/ab_$2.csv > /tmp/ab/ab_$2.log 2>&1
  grep -E "rule_" /tmp/ab/ab_$2.log | cut -c1-70 | sed "s/^/$2 /"
}
for r in 1 2; do
  [ $(( $(date +%s) - t0 )) -gt 420 ] && break
  run old old$r; run dev new$r
  echo "round $r $(( $(date +%s) - t0 )) s"
done 2>&1 | tee /tmp/ab/ab.txt
(cd /tmp/ab && tar cf $OUT/ab.tar *)
{ timeout 90 /usr/local/cuda/bin/compute-sanitizer --tool memcheck build-dev/tests/gpu/gpu_tests --only rules_matmul > /tmp/mc.log 2>&1; echo "memcheck rules_matmul rc=$?"; grep -E "ERROR SUMMARY|suite" /tmp/mc.log | tail -2; grep -m3 -A6 "Invalid\|rror:" /tmp/mc.log | head -20; } > $OUT/sanitizers.txt 2>&1
cat $OUT/sanitizers.txt
echo "all $(( $(date +%s) - t0 )) s"
