/* cli_util.c — option parsing, messages, progress and atomic outputs (cli.h). */
#include "tools/cli.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *cli_prog = "flashsample";
int cli_parse_only;

void cli_error(const char *fmt, ...)
{
    cli_progress_done();
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: error: ", cli_prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static int progress_state = -1; /* -1 unknown, 0 off, 1 on */
static int progress_open;

int cli_progress_enabled(void)
{
    if (progress_state < 0)
        progress_state = isatty(STDERR_FILENO) ? 1 : 0;
    return progress_state;
}

void cli_progress(const char *fmt, ...)
{
    if (!cli_progress_enabled())
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("\r\033[K", stderr); /* carriage return, clear to end of line */
    vfprintf(stderr, fmt, ap);
    fflush(stderr);
    va_end(ap);
    progress_open = 1;
}

void cli_progress_done(void)
{
    if (progress_open) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        progress_open = 0;
    }
}

int cli_parse(int argc, char **argv, const cli_option *opts, int *help)
{
    *help = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            *help = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            cli_error("unexpected argument '%s' (options start with --; see %s --help)", a, cli_prog);
            return CLI_USAGE;
        }
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        const cli_option *o = NULL;
        for (const cli_option *k = opts; k->name; k++)
            if (strlen(k->name) == nlen && strncmp(k->name, a, nlen) == 0) {
                o = k;
                break;
            }
        if (!o) {
            cli_error("unknown option '%.*s' (see %s --help)", (int)nlen, a, cli_prog);
            return CLI_USAGE;
        }
        if (o->flag) {
            if (eq) {
                cli_error("option %s takes no value", o->name);
                return CLI_USAGE;
            }
            *o->flag = 1;
            continue;
        }
        const char *v;
        if (eq) {
            v = eq + 1;
        } else {
            if (i + 1 >= argc) {
                cli_error("option %s needs a value", o->name);
                return CLI_USAGE;
            }
            v = argv[++i];
        }
        if (*o->value) {
            cli_error("option %s given twice", o->name);
            return CLI_USAGE;
        }
        if (!*v) {
            cli_error("option %s has an empty value", o->name);
            return CLI_USAGE;
        }
        *o->value = v;
    }
    return CLI_OK;
}

int cli_parse_u64(const char *opt, const char *s, uint64_t *out)
{
    /* strtoull accepts "-1" (wrapping to 2^64-1) and leading spaces: refuse both. */
    if (!s || !*s || *s == '-' || *s == '+' || *s == ' ') {
        cli_error("%s: expected a non-negative integer, got '%s'", opt, s ? s : "");
        return -1;
    }
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno == ERANGE) {
        cli_error("%s: '%s' does not fit in 64 bits", opt, s);
        return -1;
    }
    if (*end || end == s) {
        cli_error("%s: expected a non-negative integer, got '%s'", opt, s);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

int cli_parse_i64(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (!*s || *s == ' ' || *end || end == s) {
        cli_error("%s: expected an integer, got '%s'", opt, s);
        return -1;
    }
    if (errno == ERANGE || v < lo || v > hi) {
        cli_error("%s: %s is out of range [%lld, %lld]", opt, s, (long long)lo, (long long)hi);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

int cli_parse_float(const char *opt, const char *s, float *out)
{
    /* strtof rounds the decimal once, straight to float (no double rounding). */
    errno = 0;
    char *end;
    float v = strtof(s, &end);
    if (!*s || *s == ' ' || *end || end == s) {
        cli_error("%s: expected a number, got '%s'", opt, s);
        return -1;
    }
    if (isnan(v) || (isinf(v) && errno != ERANGE)) {
        cli_error("%s: %s is not a finite number", opt, s);
        return -1;
    }
    if (isinf(v)) {
        cli_error("%s: %s overflows float32 (the largest float32 is %.9g)", opt, s, (double)FLT_MAX);
        return -1;
    }
    if (v == 0.0f && errno == ERANGE) {
        cli_error("%s: %s underflows float32 to 0 (the smallest positive float32 is %.9g)", opt, s,
                  (double)FLT_TRUE_MIN);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_simd(const char *s, fls_simd *out)
{
    static const struct {
        const char *name;
        fls_simd simd;
    } known[] = {{"auto", FLS_SIMD_AUTO},
                 {"portable", FLS_SIMD_PORTABLE},
                 {"avx2", FLS_SIMD_AVX2},
                 {"avx512", FLS_SIMD_AVX512},
                 {"amx", FLS_SIMD_AMX}};
    if (!s) {
        *out = FLS_SIMD_AUTO;
        return 0;
    }
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        if (strcmp(s, known[k].name) == 0) {
            *out = known[k].simd;
            return 0;
        }
    cli_error("--simd: expected auto, portable, avx2, avx512 or amx, got '%s'", s);
    return -1;
}

int cli_context_create(fls_context_t **ctx, fls_engine engine, int threads, fls_simd simd)
{
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    cfg.engine = engine;
    cfg.threads = threads;
    cfg.simd = simd;
    fls_status st = fls_context_create(ctx, &cfg);
    if (st == FLS_OK)
        return 0;
    *ctx = NULL;
    if (engine == FLS_ENGINE_CPU && simd != FLS_SIMD_AUTO && st == FLS_ERR_UNSUPPORTED)
        cli_error("--simd %s: this processor (or this build) lacks that path; --simd auto picks one that "
                  "runs here",
                  fls_simd_name(simd));
    else
        cli_error("cannot create the %s engine: %s", engine == FLS_ENGINE_CUDA ? "CUDA" : "CPU",
                  fls_status_string(st));
    return -1;
}

void cli_engine_desc(const fls_context_t *ctx, char *out, size_t cap)
{
    if (fls_context_engine(ctx) == FLS_ENGINE_CUDA)
        snprintf(out, cap, "cuda");
    else
        snprintf(out, cap, "cpu (%d thread%s, %s)", fls_context_threads(ctx),
                 fls_context_threads(ctx) == 1 ? "" : "s", fls_simd_name(fls_context_simd(ctx)));
}

int cli_parse_device(const char *s, fls_engine *out)
{
    if (!s || strcmp(s, "cpu") == 0) {
        *out = FLS_ENGINE_CPU;
        return 0;
    }
    if (strcmp(s, "cuda") == 0) {
        *out = FLS_ENGINE_CUDA;
        return 0;
    }
    cli_error("--device: expected cpu or cuda, got '%s'", s);
    return -1;
}

/* ---- atomic outputs, removed if a signal ends the run ---- */

#define CLI_MAX_OUT 8
static char *volatile out_tmp[CLI_MAX_OUT];
static int handlers_installed;

static void on_signal(int sig)
{
    for (int k = 0; k < CLI_MAX_OUT; k++)
        if (out_tmp[k])
            unlink(out_tmp[k]); /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_handlers(void)
{
    if (handlers_installed)
        return;
    handlers_installed = 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

static void unregister(const char *tmp)
{
    for (int k = 0; k < CLI_MAX_OUT; k++)
        if (out_tmp[k] == tmp)
            out_tmp[k] = NULL;
}

int cli_out_check(const char *opt, const char *path)
{
    char err[FLS_NPY_ERR_LEN];
    if (fls_npy_file_check(path, err) != FLS_OK) {
        cli_error("%s: %s", opt, err);
        return -1;
    }
    return 0;
}

int cli_out_begin(fls_npy_file *f, const char *path)
{
    char err[FLS_NPY_ERR_LEN];
    install_handlers();
    if (fls_npy_file_begin(f, path, err) != FLS_OK) {
        cli_error("%s", err);
        return -1;
    }
    for (int k = 0; k < CLI_MAX_OUT; k++)
        if (!out_tmp[k]) {
            out_tmp[k] = f->tmp_path;
            break;
        }
    return 0;
}

int cli_out_commit(fls_npy_file *f)
{
    char err[FLS_NPY_ERR_LEN];
    unregister(f->tmp_path);
    if (fls_npy_file_commit(f, err) != FLS_OK) {
        cli_error("%s", err);
        return -1;
    }
    return 0;
}

void cli_out_abort(fls_npy_file *f)
{
    if (f->tmp_path)
        unregister(f->tmp_path);
    fls_npy_file_abort(f);
}

int cli_out_write_npy(fls_npy_file *f, fls_npy_dtype dtype, int ndim, const int64_t *shape, const void *data)
{
    char err[FLS_NPY_ERR_LEN];
    if (fls_npy_write_stream(f->fp, dtype, ndim, shape, data, err) != FLS_OK) {
        cli_error("%s: %s", f->path, err);
        return -1;
    }
    return 0;
}

void cli_json_num(FILE *fp, double v)
{
    if (isfinite(v))
        fprintf(fp, "%.17g", v);
    else
        fputs("null", fp);
}

void cli_json_str(FILE *fp, const char *s, size_t max)
{
    fputc('"', fp);
    for (size_t i = 0; i < max && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(fp, "\\%c", c);
        else if (c < 0x20)
            fprintf(fp, "\\u%04x", c);
        else
            fputc(c, fp);
    }
    fputc('"', fp);
}

int cli_output_names_input(const char *oopt, const char *path, const char *const *iopts,
                           const char *const *ipaths, int n)
{
    struct stat so, si;
    if (!path || stat(path, &so) != 0)
        return 0; /* a new file cannot be an input */
    for (int k = 0; k < n; k++)
        if (ipaths[k] && stat(ipaths[k], &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
            cli_error("%s '%s' is the input file of %s ('%s'): refusing to overwrite an input", oopt, path,
                      iopts[k], ipaths[k]);
            return 1;
        }
    return 0;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cli_utc_date(char out[32])
{
    time_t t = time(NULL);
    struct tm tm;
    if (gmtime_r(&t, &tm))
        strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
    else
        snprintf(out, 32, "unknown");
}

int cli_online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > 1024 ? 1024 : (int)n);
}
