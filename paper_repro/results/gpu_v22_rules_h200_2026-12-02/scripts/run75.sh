#!/usr/bin/env bash
# device run 75: the review mends (the select pass's occupancy cached per context): the rule tests.
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
export PATH="/usr/local/cuda/bin:$PATH"
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dcuda=enabled && ninja -C build-dev tests/gpu/gpu_tests ) > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 110 build-dev/tests/gpu/gpu_tests --only rules_ > $OUT/gpu_tests_rules.log 2>&1; echo "gpu_tests --only rules_ rc=$?"
grep -E "FAIL|suite|RULE MATMUL|identical" $OUT/gpu_tests_rules.log | tail -8
echo "all $(( $(date +%s) - t0 )) s"
