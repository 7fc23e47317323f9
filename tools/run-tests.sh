#!/usr/bin/env bash
# Quick start 2: set everything up and run every test suite.
#  0. formatting check (clang-format);
#  1. release build with warnings as errors: suites unit, cli, stats, gpu
#     (gpu tests skip, saying so, where no GPU is present);
#  2. AddressSanitizer + UndefinedBehaviorSanitizer build: the unit suite;
#  3. valgrind memcheck over the unit suite (CPU-only build: the CUDA runtime
#     is not valgrind-clean on its own).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup-deps.sh
start=$(date +%s)

# Formatting: every C, C++ and CUDA source as clang-format (.clang-format) has it.
clang-format --dry-run --Werror $(git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.cpp' 2>/dev/null || find lib kernels stats tests tools variants -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cpp')

[ -f build-ci/build.ninja ] || meson setup build-ci --buildtype=release --werror
ninja -C build-ci
meson test -C build-ci --print-errorlogs --num-processes 2 --suite unit --suite cli --suite gpu
meson test -C build-ci --print-errorlogs --num-processes 1 --suite stats

# Sanitizers: CPU-only build (ASan and the CUDA runtime do not mix), unit suite.
[ -f build-asan/build.ninja ] || meson setup build-asan --buildtype=debug -Dcuda=disabled \
    -Db_sanitize=address,undefined -Db_lundef=false --werror
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-asan --print-errorlogs --num-processes 2 --suite unit

# valgrind: memcheck errors and definite leaks fail the test (sweeps shrink
# under valgrind, see tests/unit/common.c).
[ -f build-vg/build.ninja ] || meson setup build-vg --buildtype=debugoptimized -Dcuda=disabled --werror
ninja -C build-vg
meson test -C build-vg --print-errorlogs --num-processes 2 --suite unit --timeout-multiplier 5 \
    --wrapper 'valgrind --quiet --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite --trace-children=yes'

echo "all suites passed in $(( $(date +%s) - start )) s"
