#!/usr/bin/env bash
# device run 64 (v21): validates f38ad9d's mends and the new keys epilogue (CTAs share their lists' K-th keys,
# bound test without the division, K-th max only where K lanes reach tau) + the final kernel's two-chunk loads.
# Suite (new), same-run A/B old (f38ad9d, build-scripts/base) vs new, ncu per kernel for wr4, memcheck rules_.
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
export PATH="/usr/local/cuda/bin:$PATH"
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dcuda=enabled && ninja -C build-dev tools/flashsample tests/gpu/gpu_tests ) > /tmp/build.log 2>&1 &
p1=$!
( cd build-scripts/base && meson setup $ROOT/build-old --buildtype=release -Dtests=false -Dcuda=enabled && ninja -C $ROOT/build-old tools/flashsample ) > /tmp/build_old.log 2>&1 &
p2=$!
wait $p1 || { tail -40 /tmp/build.log; exit 1; }
wait $p2 || { tail -40 /tmp/build_old.log; exit 1; }
S=$OUT/summary.txt
echo "build $(( $(date +%s) - t0 )) s" | tee $S
{ timeout 200 build-dev/tests/gpu/gpu_tests > $OUT/gpu_tests.log 2>&1; echo "gpu_tests rc=$?"; grep -E "FAIL|suite" $OUT/gpu_tests.log | tail -8; echo "identical: $(grep -c "tokens \([0-9]*\)/\1 identical" $OUT/gpu_tests.log) of $(grep -c "RULES V=" $OUT/gpu_tests.log)"; grep -E "RULE MATMULS|RULES ASYNC [0-9]|AGREEMENT fused|ASYNC graph" $OUT/gpu_tests.log | head -18; } >> $S 2>&1
echo "tests $(( $(date +%s) - t0 )) s" >> $S
cat $S
FLS_AB_OLD_BUILD=$ROOT/build-old FLS_AB_NEW_BUILD=$ROOT/build-dev \
FLS_AB_ARGS="--shapes 4096:151936,8192:128256 --batches 1,4,16,64 --reps 100 --engines fused_wgmma,rule_wr4,rule_topk50" \
  timeout 260 tools/gpu-ab.sh build-scripts/base /tmp/ab 2 > /dev/null 2>&1; echo "ab rc=$? $(( $(date +%s) - t0 )) s"
cp /tmp/ab/ab_summary.txt $OUT/ 2>/dev/null; cat /tmp/ab/ab_summary.txt; (cd /tmp/ab && tar cf $OUT/ab_csv.tar *.csv ab.log)
NCU=/usr/local/cuda/bin/ncu
for side in new old; do
 for b in 16 64; do
  [ $(( $(date +%s) - t0 )) -gt 500 ] && break
  echo "== $side rule_wr4 B=$b"
  timeout 25 $NCU --clock-control none --cache-control none -k regex:"wgmma|rfast|commit" --launch-skip 40 --launch-count 8 \
    --metrics gpu__time_duration.sum --csv --print-units base \
    build-$side/tools/flashsample bench --device cuda --quick --shapes 4096:151936 --batches $b --engines rule_wr4 2>/dev/null | grep -E "wgmma|rfast|commit" | awk -F'","' '{print $5, $(NF)}' | sed -E 's/\(fls_rule_dev\)//; s/\(fls_wg_args\)//; s/"//g' | cut -c1-90
 done
done 2>&1 | tee $OUT/ncu_times.txt
{ timeout 100 /usr/local/cuda/bin/compute-sanitizer --tool memcheck build-dev/tests/gpu/gpu_tests --only rules_ > /tmp/mc.log 2>&1; echo "memcheck rules_ rc=$?"; grep -E "ERROR SUMMARY|suite" /tmp/mc.log | tail -2; grep -m3 -A6 "Invalid\|rror:" /tmp/mc.log | head -20; } > $OUT/sanitizers.txt 2>&1
cat $OUT/sanitizers.txt
echo "all $(( $(date +%s) - t0 )) s"
