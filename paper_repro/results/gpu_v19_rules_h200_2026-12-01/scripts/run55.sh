#!/usr/bin/env bash
# device run 55 (v19): source-level hotspots (ncu SourceCounters, -lineinfo build) of the row kernel
# (min-p B=1, top-n-sigma B=16) and the final kernel (wr4 B=16)
set -u
export ROOT=$PWD BUILD=$PWD/build-li
. tools/gpu-gsl.sh
t0=$(date +%s)
( NVCC_APPEND_FLAGS="-lineinfo" meson setup build-li --buildtype=release -Dcuda=enabled && NVCC_APPEND_FLAGS="-lineinfo" ninja -C build-li tools/flashsample ) > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
FS=build-li/tools/flashsample; NCU=/usr/local/cuda/bin/ncu
for spec in row:rule_minp005:1 row:rule_nsigma1:16 final:rule_wr4:16; do
  IFS=: read k e b <<< "$spec"; n=${k}_${e}_$b
  timeout 90 $NCU --clock-control none --cache-control none -k regex:"rfast_$k" --launch-skip 10 --launch-count 1 \
     --section SourceCounters --section WarpStateStats --section LaunchStats --section SpeedOfLight \
     --import-source yes -o /tmp/$n $FS bench --device cuda --quick --shapes 4096:151936 --batches $b --engines $e > /tmp/$n.log 2>&1; echo "$n rc=$?"
  $NCU -i /tmp/$n.ncu-rep --page details > $OUT/$n.details.txt 2>&1
  $NCU -i /tmp/$n.ncu-rep --page source --print-source cuda,sass --csv 2>/dev/null | gzip > $OUT/$n.cusass.csv.gz
  grep -E "Duration|Registers Per|Warp Cycles Per Issued|Executed Ipc A" $OUT/$n.details.txt | head -6
  python3 paper_repro/results/gpu_v18_rules_h200_2026-12-01/run48/hotspots.py $OUT/$n.cusass.csv.gz 22 2>&1 | tee $OUT/$n.hot.txt | head -60
done
echo "all $(( $(date +%s) - t0 )) s"
