#!/usr/bin/env bash
# device run 69 (v21): the shipped tree (15 epilogue warps at tile 64 where the matmul keeps the keys, by default):
# gpu_tests --only rules_, one quick bench of without replacement at B = 64.
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
export PATH="/usr/local/cuda/bin:$PATH"
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dcuda=enabled && ninja -C build-dev tools/flashsample tests/gpu/gpu_tests ) > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 120 build-dev/tests/gpu/gpu_tests --only rules_ > $OUT/gpu_tests_rules.log 2>&1; echo "gpu_tests --only rules_ rc=$?"
grep -E "FAIL|suite" $OUT/gpu_tests_rules.log | tail -4; echo "identical: $(grep -c "tokens \([0-9]*\)/\1 identical" $OUT/gpu_tests_rules.log) of $(grep -c "RULES V=" $OUT/gpu_tests_rules.log)"; grep -E "RULE MATMULS|AGREEMENT fused.*wr=4 " $OUT/gpu_tests_rules.log | cut -c1-160
echo "tests $(( $(date +%s) - t0 )) s"
[ $(( $(date +%s) - t0 )) -lt 150 ] && timeout 30 build-dev/tools/flashsample bench --device cuda --quick --shapes 4096:151936 --batches 64 --engines fused_wgmma,rule_wr4 2>&1 | grep -E "rule_" | cut -c1-70
echo "all $(( $(date +%s) - t0 )) s"
