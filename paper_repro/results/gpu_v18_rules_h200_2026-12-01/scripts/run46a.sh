#!/usr/bin/env bash
# device run 46a: validate 58139b0 + group skipping (collect/select read only the 64-token groups
# that reach their threshold) + the list kernel's draws (ldraw): full gpu suite, no-skip, sanitizers
set -u
export ROOT=$PWD BUILD=$PWD/build-dev
. tools/gpu-gsl.sh
t0=$(date +%s)
( meson setup build-dev --buildtype=release -Dcuda=enabled && ninja -C build-dev tools/flashsample tests/gpu/gpu_tests ) > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
S=$OUT/summary.txt
{ timeout 220 build-dev/tests/gpu/gpu_tests > $OUT/gpu_tests.log 2>&1; echo "gpu_tests rc=$?"; grep -E "FAIL|suite" $OUT/gpu_tests.log | tail -5; echo "identical: $(grep -c "tokens \([0-9]*\)/\1 identical" $OUT/gpu_tests.log) of $(grep -c "RULES V=" $OUT/gpu_tests.log)"; grep -E "RULE MATMULS|RULES ASYNC [0-9]|ASYNC graph|AGREE" $OUT/gpu_tests.log | head -20; } >> $S 2>&1
echo "tests $(( $(date +%s) - t0 )) s" >> $S
cat $S
{ FLS_CUDA_NO_SKIP=1 timeout 100 build-dev/tests/gpu/gpu_tests --only rules_logits > /tmp/noskip.log 2>&1; echo "noskip rc=$?"; echo "noskip identical: $(grep -c "tokens \([0-9]*\)/\1 identical" /tmp/noskip.log) of $(grep -c "RULES V=" /tmp/noskip.log)"; } >> $S 2>&1
{ timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck build-dev/tests/gpu/gpu_tests --only rules_ > /tmp/mc.log 2>&1; echo "memcheck rules_ rc=$?"; grep -E "ERROR SUMMARY|suite" /tmp/mc.log | tail -2; } >> $S 2>&1
{ timeout 90 /usr/local/cuda/bin/compute-sanitizer --tool racecheck build-dev/tests/gpu/gpu_tests --only rules_matmul > /tmp/rc.log 2>&1; echo "racecheck rules_matmul rc=$?"; grep -E "RACECHECK SUMMARY|suite" /tmp/rc.log | tail -2; } >> $S 2>&1
{ timeout 90 /usr/local/cuda/bin/compute-sanitizer --tool synccheck build-dev/tests/gpu/gpu_tests --only rules_matmul > /tmp/sc.log 2>&1; echo "synccheck rules_matmul rc=$?"; grep -E "ERROR SUMMARY|suite" /tmp/sc.log | tail -2; } >> $S 2>&1
echo "all $(( $(date +%s) - t0 )) s" >> $S
tail -12 $S
