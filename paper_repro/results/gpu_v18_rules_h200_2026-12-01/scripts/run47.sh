#!/usr/bin/env bash
# device run 47: where the rule kernels' time goes: a -lineinfo build, ncu source counters and
# warp states of the list kernel (k50+p0.9 B=1), select<4> (wr4 B=64), stats (nsigma B=64)
set -u
export ROOT=$PWD BUILD=$PWD/build-li
. tools/gpu-gsl.sh
t0=$(date +%s)
( NVCC_APPEND_FLAGS="-lineinfo" meson setup build-li --buildtype=release -Dcuda=enabled && NVCC_APPEND_FLAGS="-lineinfo" ninja -C build-li tools/flashsample ) > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
FS=build-li/tools/flashsample; NCU=/usr/local/cuda/bin/ncu
for spec in list:rule_k50_p09:1 select:rule_wr4:64 stats:rule_nsigma1:64 select:rule_minp005:64; do
  IFS=: read k e b <<< "$spec"; n=${k}_${e}_$b
  timeout 90 $NCU --clock-control none --cache-control none -k regex:"rfast_$k" --launch-skip 10 --launch-count 1 \
     --section SourceCounters --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section SpeedOfLight --section ComputeWorkloadAnalysis \
     --import-source yes -o $OUT/$n $FS bench --device cuda --quick --shapes 4096:151936 --batches $b --engines $e > /tmp/$n.log 2>&1; echo "$n rc=$?"
  $NCU -i $OUT/$n.ncu-rep --page details > $OUT/$n.details.txt 2>&1
  $NCU -i $OUT/$n.ncu-rep --page source --csv --print-source cuda > $OUT/$n.source.csv 2>&1 || echo "source page failed"
  grep -E "Duration|Registers|Achieved Occupancy|Stall|Warp Cycles|Issued Ipc|Eligible|No Eligible" $OUT/$n.details.txt | head -20
  ls -la $OUT/$n.*
done
echo "all $(( $(date +%s) - t0 )) s"
