#!/usr/bin/env bash
# device run 54 (v19): where the rule calls' time after the matmul goes: each kernel's duration (ncu,
# clocks and caches as they are), D = 4096, B = 1, 16, 64
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dcuda=enabled && ninja -C build-dev tools/flashsample ) > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
FS=build-dev/tools/flashsample; NCU=/usr/local/cuda/bin/ncu
for eb in rule_minp005:1 rule_k50_p09:1 rule_nsigma1:1 rule_wr4:1 rule_nsigma1:16 rule_minp005:16 rule_k50_p09:16 rule_wr4:16 rule_nsigma1:64 rule_wr4:64 rule_minp005:64; do
  e=${eb%:*}; b=${eb#*:}; echo "== $e B=$b"
  timeout 40 $NCU --clock-control none --cache-control none -k regex:"rfast|commit|pack" --launch-skip 40 --launch-count 8 \
    --metrics gpu__time_duration.sum --csv --print-units base \
    $FS bench --device cuda --quick --shapes 4096:151936 --batches $b --engines $e 2>/dev/null | grep -E "rfast|commit|pack" | awk -F'","' '{print $5, $(NF)}' | sed -E 's/\(fls_rule_dev\)//; s/\(const [^)]*\)//; s/"//g' | cut -c1-90
  [ "$e" != fused_wgmma ] && timeout 40 $NCU --clock-control none --cache-control none -k regex:"wgmma" --launch-skip 480 --launch-count 3 \
    --metrics gpu__time_duration.sum --csv --print-units base \
    $FS bench --device cuda --quick --shapes 4096:151936 --batches $b --engines $e 2>/dev/null | grep -E "wgmma" | awk -F'","' '{print $5, $(NF)}' | sed 's/"//g' | cut -c1-90
done 2>&1 | tee $OUT/ncu_times.txt
echo "all $(( $(date +%s) - t0 )) s"
