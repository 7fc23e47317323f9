#!/usr/bin/env bash
# device run 65 (v21): why run 64's keys epilogue was slower at B = 64: same-run A/B old (f38ad9d) / new /
# new with FLS_CUDA_RULE_KTHR=0 (no sharing), ncu per kernel of the chain and of the keys matmul.
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
export PATH="/usr/local/cuda/bin:$PATH"
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dtests=false -Dcuda=enabled && ninja -C build-dev tools/flashsample ) > /tmp/build.log 2>&1 &
p1=$!
( cd build-scripts/base && meson setup $ROOT/build-old --buildtype=release -Dtests=false -Dcuda=enabled && ninja -C $ROOT/build-old tools/flashsample ) > /tmp/build_old.log 2>&1 &
p2=$!
wait $p1 || { tail -40 /tmp/build.log; exit 1; }
wait $p2 || { tail -40 /tmp/build_old.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
run() { # side label
  local side=$1 lab=$2
  build-$side/tools/flashsample bench --device cuda --shapes 4096:151936,8192:128256 --batches 16,64 --reps 100 \
     --engines fused_wgmma,rule_wr4 --csv /tmp/ab_${lab}.csv > /tmp/ab_${lab}.log 2>&1
  grep -E "rule_wr4" /tmp/ab_${lab}.log | cut -c1-70 | sed "s/^/$lab /"
}
for r in 1 2; do
  run old old$r; run dev new$r; FLS_CUDA_RULE_KTHR=0 run dev k0_$r
  echo "round $r $(( $(date +%s) - t0 )) s"
done 2>&1 | tee $OUT/ab.txt
(cd /tmp && tar cf $OUT/ab_csv.tar ab_*.csv ab_*.log)
NCU=/usr/local/cuda/bin/ncu
for cfg in old:old dev:new dev:k0; do
  side=${cfg%:*}; lab=${cfg#*:}
  [ $lab = k0 ] && export FLS_CUDA_RULE_KTHR=0 || unset FLS_CUDA_RULE_KTHR
  for b in 16 64; do
    [ $(( $(date +%s) - t0 )) -gt 520 ] && break
    echo "== $lab rule_wr4 B=$b chain"
    timeout 30 $NCU --clock-control none --cache-control none -k regex:"rfast|commit" --launch-skip 40 --launch-count 6 \
      --metrics gpu__time_duration.sum --csv --print-units base \
      build-$side/tools/flashsample bench --device cuda --quick --shapes 4096:151936 --batches $b --engines rule_wr4 2>/dev/null | grep -E "rfast|commit" | awk -F'","' '{print $5, $(NF)}' | sed -E 's/\(fls_rule_dev\)//; s/"//g' | cut -c1-90
    echo "== $lab rule_wr4 B=$b matmul (launches 1200-1205 of the wgmma kernel: inside the rule engine's)"
    timeout 40 $NCU --clock-control none --cache-control none -k regex:"wgmma" --launch-skip 1200 --launch-count 5 \
      --metrics gpu__time_duration.sum --csv --print-units base \
      build-$side/tools/flashsample bench --device cuda --quick --reps 800 --shapes 4096:151936 --batches $b --engines rule_wr4 2>/dev/null | grep -E "wgmma_kernel" | awk -F'","' '{print $5, $(NF)}' | sed -E 's/\(fls_wg_args\)//; s/"//g' | cut -c1-90
  done
done 2>&1 | tee $OUT/ncu_times.txt
echo "all $(( $(date +%s) - t0 )) s"
