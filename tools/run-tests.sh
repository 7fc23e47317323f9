#!/usr/bin/env bash
# Quick start 2: set everything up and run every test suite. About 12 minutes
# on 2 cores (733-741 s measured with nvcc present, 709 s without; the
# statistical suite is about 4 of them); each stage prints a
# heading and its elapsed time, the statistical suite one line per test.
#  1. formatting check (clang-format 14, the version .clang-format is written
#     for; skipped, saying so, with another version);
#  2. release build with warnings as errors;
#  3. suites unit, cli (with the numpy interop test) and gpu (gpu tests skip,
#     saying why, where no GPU is present), then the Python bindings:
#     python/run-tests.sh (a fresh venv, pip install ./python, pytest, and every
#     notebook of notebooks/ executed headless; about 2 minutes);
#  4. suite stats (goodness of fit, minutes);
#  5. AddressSanitizer + UndefinedBehaviorSanitizer build: the unit suite;
#  6. valgrind memcheck over the unit suite (CPU-only build: the CUDA runtime
#     is not valgrind-clean on its own);
#  7. libFuzzer under ASan/UBSan (clang 14): the .npy reader and the command
#     line's argument parsing, FLS_FUZZ_SECONDS (default 60) per target, from
#     the committed corpora (tests/fuzz/run.sh; their replay on every build is
#     in the unit suite).
# FLS_TEST_CUDA=auto|enabled|disabled: whether the release build compiles the
# CUDA engine (auto: where nvcc is found; the other builds are CPU-only).
# Build folders: build-ci, build-asan, build-vg, build-fuzz and the venv
# build-pyvenv (FLS_BUILD_PREFIX=x uses x-ci, x-asan, x-vg, x-fuzz, x-pyvenv
# instead). A skipped test prints its reason: a test meson skips (exit 77) and
# a Criterion test skipped inside its binary (cr_skip_test), whose binary still
# passes.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${FLS_BUILD_PREFIX:-build}
start=$(date +%s)
stage_no=0
stage_start=$start
stage_name=""

stage_end() {
    if [ -n "$stage_name" ]; then
        local now
        now=$(date +%s)
        echo "---- [$stage_no/7] $stage_name: done in $((now - stage_start)) s (total $((now - start)) s)"
    fi
}
stage() {
    stage_end
    stage_no=$((stage_no + 1))
    stage_name=$1
    stage_start=$(date +%s)
    echo
    echo "==== [$stage_no/7] $stage_name"
}
trap 'rc=$?; [ $rc -eq 0 ] || echo "==== FAILED in stage [$stage_no/7] $stage_name after $(( $(date +%s) - start )) s (exit $rc)"' EXIT

# Criterion prints "[SKIP] suite::name: reason" for a test skipped inside its
# binary (cr_skip_test) only at verbosity level 1 or more; the binary itself
# then passes, so meson shows OK. At level 1 it also prints a line as each test
# starts and ends (in the test logs only; meson streams them with --verbose).
export CRITERION_VERBOSITY_LEVEL=${CRITERION_VERBOSITY_LEVEL:-1}

# The reason each skipped test gave: tests meson skipped (it shows only SKIP)
# and Criterion tests skipped inside a binary that passed or failed
# ("[SKIP] suite::name: reason" in its output, from meson-logs/testlog.json).
skip_reasons() {
    local log="$1/meson-logs/testlog.json"
    [ -f "$log" ] || return 0
    python3 - "$log" <<'EOF' || true
import json, re, sys
ansi = re.compile(r"\x1b\[[0-9;]*m")
crit = re.compile(r"^\[SKIP\] ([^\s:]+::[^\s:]+):?\s*(.*)$")
for line in open(sys.argv[1]):
    try:
        t = json.loads(line)
    except ValueError:
        continue
    text = ansi.sub("", (t.get("stdout") or "") + "\n" + (t.get("stderr") or ""))
    if t.get("result") == "SKIP":
        out = [l.strip() for l in text.splitlines() if l.strip()]
        why = next((l for l in out if "skip" in l.lower()), out[-1] if out else "no reason printed")
        print(f"skipped: {t.get('name')}: {why}")
        continue
    seen = set()
    for l in text.splitlines():
        m = crit.match(l.strip())
        if m and m.group(1) not in seen:
            seen.add(m.group(1))
            print(f"skipped: {t.get('name')}: {m.group(1)}: {m.group(2) or 'no reason printed'}")
EOF
}

echo "==== [0/7] dependencies (tools/setup-deps.sh)"
bash tools/setup-deps.sh

stage "formatting (clang-format)"
pinned=14
cf_major=$(clang-format --version 2>/dev/null | sed -n 's/.*version \([0-9][0-9]*\).*/\1/p' | head -n1)
if [ "$cf_major" = "$pinned" ]; then
    # Every C, C++ and CUDA source as clang-format (.clang-format) has it.
    clang-format --dry-run --Werror $(git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.cpp' 2>/dev/null ||
        find lib kernels stats tests tools variants -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cpp')
    echo "formatting: every source as clang-format $pinned has it"
else
    echo "formatting: skipped: clang-format ${cf_major:-not found} is not the pinned major version $pinned" \
        "(other versions format differently; Debian 12's clang-format is $pinned)"
fi

stage "release build, warnings are errors ($prefix-ci)"
# FLS_TEST_CUDA=auto (default: the CUDA engine is built where nvcc is found,
# once, in this build), enabled (fail without nvcc) or disabled (a CPU-only run)
case "${FLS_TEST_CUDA:-auto}" in
auto | enabled | disabled) ;;
*) echo "run-tests: FLS_TEST_CUDA must be auto, enabled or disabled" >&2; exit 2 ;;
esac
[ -f "$prefix-ci/build.ninja" ] || meson setup "$prefix-ci" --buildtype=release --werror -Dcuda="${FLS_TEST_CUDA:-auto}"
if grep "CUDA engine" "$prefix-ci/meson-logs/meson-log.txt" 2>/dev/null | tail -n 1 | grep -q True; then
    echo "CUDA engine: built, once, here (nvcc found; FLS_TEST_CUDA=disabled skips it)"
else
    echo "CUDA engine: not built (no nvcc, or FLS_TEST_CUDA=disabled); the gpu suite will skip"
fi
ninja -C "$prefix-ci"

stage "suites unit, cli, gpu; Python bindings and notebooks"
meson test -C "$prefix-ci" --print-errorlogs --num-processes 2 --suite unit --suite cli --suite gpu
skip_reasons "$prefix-ci"
# this build's command line for the CLI identity tests and the audit notebooks
FLASHSAMPLE_TOOL="$PWD/$prefix-ci/tools/flashsample" FLASHSAMPLE_VENV="$PWD/$prefix-pyvenv" bash python/run-tests.sh

stage "suite stats (goodness of fit; about 6 minutes on 2 cores, one line per test)"
# --verbose streams the tests' output; Criterion's --verbose prints a line as each test ends.
meson test -C "$prefix-ci" --print-errorlogs --num-processes 1 --suite stats --verbose --test-args=--verbose
skip_reasons "$prefix-ci"

stage "AddressSanitizer + UBSan build, suite unit ($prefix-asan)"
# CPU-only build (ASan and the CUDA runtime do not mix); unoptimised and
# instrumented, the kernels suite takes 30x its release time, hence the multiplier.
[ -f "$prefix-asan/build.ninja" ] || meson setup "$prefix-asan" --buildtype=debug -Dcuda=disabled \
    -Db_sanitize=address,undefined -Db_lundef=false --werror
ninja -C "$prefix-asan"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C "$prefix-asan" --print-errorlogs --num-processes 2 --suite unit --timeout-multiplier 2
skip_reasons "$prefix-asan"

stage "valgrind memcheck, suite unit ($prefix-vg)"
# memcheck errors and definite leaks fail the test (sweeps shrink under
# valgrind, see tests/unit/common.c).
[ -f "$prefix-vg/build.ninja" ] || meson setup "$prefix-vg" --buildtype=debugoptimized -Dcuda=disabled --werror
ninja -C "$prefix-vg"
meson test -C "$prefix-vg" --print-errorlogs --num-processes 2 --suite unit --timeout-multiplier 5 \
    --wrapper 'valgrind --quiet --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite --trace-children=yes'
skip_reasons "$prefix-vg"

stage "libFuzzer + ASan/UBSan: fuzz_npy, fuzz_args (${FLS_FUZZ_SECONDS:-60} s each, $prefix-fuzz)"
FLS_BUILD_PREFIX="$prefix" bash tests/fuzz/run.sh "${FLS_FUZZ_SECONDS:-60}"
stage_end

echo
echo "all suites passed in $(($(date +%s) - start)) s"
