#!/usr/bin/env bash
# Builds the fuzz targets of tests/fuzz with clang's libFuzzer under
# AddressSanitizer + UndefinedBehaviorSanitizer and runs each for a bounded
# time from the committed corpus (tests/fuzz/corpus_*) and regressions
# (tests/fuzz/regress_*).
#
#   bash tests/fuzz/run.sh [SECONDS_PER_TARGET]    (default 60; FUZZ_SECONDS too)
#
# Targets: fuzz_npy (the .npy reader of tools/npy.c on any bytes) and
# fuzz_args (the command line's argument parsing, tools/cli_*.c and cmd_*.c,
# on any argument vector). The library and the statistics library are built
# once with clang and the sanitizers by Meson in $FUZZ_BUILD (default
# build-fuzz; FLS_BUILD_PREFIX=x gives x-fuzz); the targets are compiled
# directly against the sources of tools/ with -fsanitize=fuzzer.
#
# Needs clang 14 and its runtime (Debian: clang-14 libclang-rt-14-dev, which
# tools/setup-deps.sh installs). New inputs the fuzzer finds stay in
# $FUZZ_BUILD/corpus_* (the repository's corpus is not changed). On a crash
# the script stops with exit 1, names the input and prints how to minimize
# it into tests/fuzz/regress_<target>/ (the replay tests then run it on
# every build).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-${FUZZ_SECONDS:-60}}
prefix=${FLS_BUILD_PREFIX:-build}
out=${FUZZ_BUILD:-$prefix-fuzz}

cc=""
for c in clang-14 clang; do
    if command -v "$c" >/dev/null 2>&1; then
        cc=$c
        break
    fi
done
if [ -z "$cc" ]; then
    echo "fuzz: error: no clang found (Debian: apt-get install clang-14 libclang-rt-14-dev; bash tools/setup-deps.sh)" >&2
    exit 1
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$probe/p.c"
if ! "$cc" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" 2>"$probe/err"; then
    echo "fuzz: error: $cc cannot link -fsanitize=fuzzer (libFuzzer's runtime is missing; Debian: apt-get install libclang-rt-14-dev):" >&2
    cat "$probe/err" >&2
    exit 1
fi
echo "fuzz: $($cc --version | head -n1); $seconds s per target; build folder $out"

# The libraries, with clang and the sanitizers (not the fuzzer's coverage: the targets are the tools' code).
if [ ! -f "$out/build.ninja" ]; then
    CC=$cc meson setup "$out" --buildtype=debugoptimized -Dcuda=disabled -Dtests=false \
        -Db_sanitize=address,undefined -Db_lundef=false >"$probe/setup.log" 2>&1 ||
        { cat "$probe/setup.log" >&2; exit 1; }
fi
ninja -C "$out" lib/libflashsample.a stats/libfls_stats.a >/dev/null

cflags=(-g -O1 -std=c11 -D_POSIX_C_SOURCE=200809L -ffp-contract=off
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
    -I. -Ilib/include)
cli_sources=(tools/cli_util.c tools/cli_rules.c tools/cli_mods.c tools/cli_stream.c tools/cmd_sample.c tools/cmd_audit.c
    tools/cmd_audit_tokens.c tools/cmd_bench.c tools/bench_cuda_stub.c tools/npy.c)
"$cc" "${cflags[@]}" tests/fuzz/fuzz_npy.c tools/npy.c "$out/lib/libflashsample.a" -lm -lpthread \
    -o "$out/fuzz_npy"
"$cc" "${cflags[@]}" tests/fuzz/fuzz_args.c "${cli_sources[@]}" "$out/stats/libfls_stats.a" \
    "$out/lib/libflashsample.a" $(pkg-config --libs gsl) -lm -lpthread -o "$out/fuzz_args"

status=0
for t in npy args; do
    work="$out/corpus_$t"
    mkdir -p "$work"
    dict="tests/fuzz/$t.dict"
    echo "fuzz: fuzz_$t for $seconds s (corpus: tests/fuzz/corpus_$t, tests/fuzz/regress_$t; new inputs in $work)"
    # fuzz_args: -close_fd_mask=3 silences the command line's messages (libFuzzer and the
    # sanitizers keep their reports; replay a crash with $out/fuzz_args FILE to see its message)
    mask=1
    [ "$t" = npy ] || mask=3
    if ! ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        "$out/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
        -close_fd_mask=$mask -print_final_stats=1 -dict="$dict" -artifact_prefix="$out/crash-$t-" \
        "$work" "tests/fuzz/corpus_$t" "tests/fuzz/regress_$t" >"$out/fuzz_$t.log" 2>&1; then
        status=1
        tail -n 60 "$out/fuzz_$t.log" >&2
        crash=$(ls -t "$out"/crash-"$t"-* 2>/dev/null | head -n1 || true)
        echo "fuzz: fuzz_$t FAILED; input: ${crash:-see $out/fuzz_$t.log}" >&2
        echo "fuzz: minimize it: $out/fuzz_$t -minimize_crash=1 -runs=100000 -exact_artifact_path=tests/fuzz/regress_$t/<what-it-broke> ${crash:-CRASH}" >&2
    else
        grep -E "stat::number_of_executed_units|stat::new_units_added|stat::peak_rss_mb" "$out/fuzz_$t.log" |
            tr '\n' ' ' | sed 's/^/fuzz: /'
        echo
        echo "fuzz: fuzz_$t: no crash in $seconds s"
    fi
done
exit $status
