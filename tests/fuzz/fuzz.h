/*
 * fuzz.h — the libFuzzer entry points of the fuzz targets of tests/fuzz.
 *
 * Each target is built two ways: with clang -fsanitize=fuzzer,address,undefined
 * by tests/fuzz/run.sh (libFuzzer's main explores), and with the project's
 * compiler and replay_main.c (tests/cli/meson.build: suite unit, so also
 * under the ASan/UBSan and valgrind stages of tools/run-tests.sh), which runs
 * every file of the committed corpora and regression folders once.
 */
#ifndef FLS_FUZZ_H
#define FLS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant: abort with a message (a crash for libFuzzer). */
void fuzz_fail(const char *what);

#endif /* FLS_FUZZ_H */
