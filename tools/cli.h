/*
 * cli.h — shared pieces of the flashsample command line: option parsing,
 * error messages, progress on a terminal, atomic outputs that a signal
 * cannot leave half-written.
 */
#ifndef FLS_CLI_H
#define FLS_CLI_H

#include "flashsample.h"
#include "tools/npy.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes: 0 success, 1 failure (bad input, I/O, a failed audit), 2 usage. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* Set by main from the subcommand, used as the prefix of every message. */
extern const char *cli_prog;
/* When set (the argument fuzzer, tests/fuzz), a subcommand returns CLI_OK
 * once its arguments are checked, before it reads or writes any file. */
extern int cli_parse_only;

#if defined(__GNUC__)
#define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLI_PRINTF(a, b)
#endif

/* "flashsample <sub>: error: ...\n" on stderr. */
void cli_error(const char *fmt, ...) CLI_PRINTF(1, 2);
/* Progress line on stderr, only when stderr is a terminal; "\r" rewrites it.
 * cli_progress_done ends the line. */
void cli_progress(const char *fmt, ...) CLI_PRINTF(1, 2);
void cli_progress_done(void);
int cli_progress_enabled(void);

/* One option of a subcommand. value options store the argument string in
 * *value; flags set *flag = 1. */
typedef struct cli_option {
    const char *name; /* "--seed" */
    const char **value;
    int *flag;
} cli_option;

/* Parses argv[1..argc) against opts (terminated by a zero entry). "--help"
 * and "-h" set *help. Returns CLI_OK or CLI_USAGE (message printed). Accepts
 * "--name value" and "--name=value"; an option given twice is an error. */
int cli_parse(int argc, char **argv, const cli_option *opts, int *help);

/* Strict number parsers; on error print "<option>: ..." and return -1. */
int cli_parse_u64(const char *opt, const char *s, uint64_t *out);
int cli_parse_i64(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);
/* A finite float; a decimal that overflows (or underflows to 0) float32 is
 * an error that says so. */
int cli_parse_float(const char *opt, const char *s, float *out);
int cli_parse_device(const char *s, fls_engine *out);
/* --simd auto|portable|avx2|avx512 (NULL: auto). */
int cli_parse_simd(const char *s, fls_simd *out);
/* Creates the context, with a message naming the engine or SIMD path that
 * could not be created. Returns 0 or -1. */
int cli_context_create(fls_context_t **ctx, fls_engine engine, int threads, fls_simd simd);
/* "cpu (2 threads, avx2)" or "cuda". */
void cli_engine_desc(const fls_context_t *ctx, char *out, size_t cap);

/* Atomic outputs registered for removal on SIGINT/SIGTERM/SIGHUP.
 * cli_out_check, before any work: the output can be created (no file is
 * made). cli_out_begin creates the temporary file: call it only when the
 * result is ready to be written, so an interrupted run leaves nothing. */
int cli_out_check(const char *opt, const char *path);
int cli_out_begin(fls_npy_file *f, const char *path);
int cli_out_commit(fls_npy_file *f);
void cli_out_abort(fls_npy_file *f);
/* Writes an array into an already begun output. */
int cli_out_write_npy(fls_npy_file *f, fls_npy_dtype dtype, int ndim, const int64_t *shape, const void *data);

/* JSON: a number (null for inf and NaN, which JSON lacks) and an escaped string of at most max bytes. */
void cli_json_num(FILE *fp, double v);
void cli_json_str(FILE *fp, const char *s, size_t max);

/* Whether path is an existing file that is also one of the n input paths
 * (same device and inode: through any path or link); if so says so (oopt
 * names the output option) and returns 1. */
int cli_output_names_input(const char *oopt, const char *path, const char *const *iopts,
                           const char *const *ipaths, int n);

double cli_now(void);            /* monotonic seconds */
void cli_utc_date(char out[32]); /* "2026-11-29T14:25:00Z" */
int cli_online_cores(void);

/* Subcommands. */
int cli_sample(int argc, char **argv);
int cli_audit(int argc, char **argv);
int cli_bench(int argc, char **argv);

#endif /* FLS_CLI_H */
