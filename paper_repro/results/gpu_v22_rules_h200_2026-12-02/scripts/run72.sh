#!/usr/bin/env bash
# device run 72: the shipped tree (the final-commit experiment reverted): full suite, memcheck of async_graph and rules_matmul_keys.
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
export PATH="/usr/local/cuda/bin:$PATH"
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dcuda=enabled && ninja -C build-dev tools/flashsample tests/gpu/gpu_tests ) > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
S=$OUT/summary.txt
echo "commit $(git rev-parse --short HEAD 2>/dev/null); build $(( $(date +%s) - t0 )) s" | tee $S
{ timeout 200 build-dev/tests/gpu/gpu_tests > $OUT/gpu_tests.log 2>&1; echo "gpu_tests rc=$?"; grep -E "FAIL|suite" $OUT/gpu_tests.log | tail -8; echo "identical: $(grep -c "tokens \([0-9]*\)/\1 identical" $OUT/gpu_tests.log) of $(grep -c "RULES V=" $OUT/gpu_tests.log)"; grep -E "RULE MATMUL|ASYNC graph|AGREEMENT fused" $OUT/gpu_tests.log | head -20; } >> $S 2>&1
echo "tests $(( $(date +%s) - t0 )) s" >> $S
{ timeout 90 /usr/local/cuda/bin/compute-sanitizer --tool memcheck build-dev/tests/gpu/gpu_tests --only async_graph > /tmp/mc2.log 2>&1; echo "memcheck async_graph rc=$?"; grep -E "ERROR SUMMARY|suite" /tmp/mc2.log | tail -2;
  timeout 90 /usr/local/cuda/bin/compute-sanitizer --tool memcheck build-dev/tests/gpu/gpu_tests --only rules_matmul_keys > /tmp/mc3.log 2>&1; echo "memcheck rules_matmul_keys rc=$?"; grep -E "ERROR SUMMARY|suite" /tmp/mc3.log | tail -2; } > $OUT/sanitizers.txt 2>&1
cat $S $OUT/sanitizers.txt
echo "all $(( $(date +%s) - t0 )) s"
