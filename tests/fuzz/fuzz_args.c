/*
 * fuzz_args.c — the argument parsing of the command line (tools/cli_util.c,
 * cli_rules.c and the checks of each subcommand) on any argument vector.
 *
 * Input: byte 0 picks the subcommand (sample, audit, bench), the rest is the
 * arguments, NUL-separated. cli_parse_only makes a subcommand return once its
 * arguments are checked, before it reads or writes any file, so every path
 * of the parsers (numbers, lists, NAME=VALUE, --rules, --shapes, option
 * combinations) runs without I/O. Anything but a return of 0, 1 or 2 (and
 * any sanitizer report) is a bug.
 */
#include "tools/cli.h"
#include "tests/fuzz/fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 48

void fuzz_fail(const char *what)
{
    fprintf(stderr, "fuzz_args: %s\n", what);
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    cli_parse_only = 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096)
        return 0;
    cli_parse_only = 1;
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    static const char *const subs[3] = {"sample", "audit", "bench"};
    static const char *const progs[3] = {"flashsample sample", "flashsample audit", "flashsample bench"};
    const int sub = data[0] % 3;
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = (char *)subs[sub];
    for (size_t i = 0; i < size - 1 && argc < MAX_ARGS + 1;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;
    cli_prog = progs[sub];
    int rc = sub == 0 ? cli_sample(argc, argv) : sub == 1 ? cli_audit(argc, argv) : cli_bench(argc, argv);
    if (rc < 0 || rc > 2)
        fuzz_fail("a subcommand returned an exit status other than 0, 1 or 2");
    free(buf);
    return 0;
}
