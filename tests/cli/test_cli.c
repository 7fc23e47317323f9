/*
 * test_cli.c — the flashsample command line, run as a separate process
 * (FLASHSAMPLE_TOOL names the binary; meson sets it).
 *
 * Pinned down: --help of every subcommand; `sample` gives exactly the tokens
 * of the library API for the same inputs, seeds, offset and draws (logits
 * and fused paths, float32/float16/bf16 weights, row seeds); counts.npy is
 * the histogram of the tokens; bad input exits non-zero with a clear message
 * and writes nothing (an existing output stays untouched, no temporary file
 * remains).
 */
#include "flashsample.h"
#include "tools/npy.h"

#include <criterion/criterion.h>

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/cli/tmpdir.h"

/* ---- running the tool ---- */

static char out_text[1 << 16], err_text[1 << 16];

static void make_tmpdir(void)
{
    tmpdir_make("fls_cli_test_");
}

TestSuite(cli, .init = make_tmpdir, .fini = tmpdir_remove, .timeout = 240);

static void slurp(const char *path, char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return;
    size_t n = fread(buf, 1, cap - 1, fp);
    buf[n] = '\0';
    fclose(fp);
}

/* Runs argv (argv[0] a path) with stdout and stderr into out_text and
 * err_text. Returns the exit status (-1 if it was killed or crashed). */
static int run_argv(char *const *argv)
{
    char so[512], se[512];
    snprintf(so, sizeof so, "%s/../%s.stdout", tmpdir, strrchr(tmpdir, '/') + 1);
    snprintf(se, sizeof se, "%s/../%s.stderr", tmpdir, strrchr(tmpdir, '/') + 1);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int fo = open(so, O_WRONLY | O_CREAT | O_TRUNC, 0644),
            fe = open(se, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0)
            _exit(126);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    slurp(so, out_text, sizeof out_text);
    slurp(se, err_text, sizeof err_text);
    unlink(so);
    unlink(se);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static const char *tool_path(void)
{
    const char *tool = getenv("FLASHSAMPLE_TOOL");
    cr_assert_not_null(tool, "FLASHSAMPLE_TOOL is not set (run through meson test)");
    return tool;
}

/* Appends the NULL-terminated arguments to argv from argv[argc] on. */
static int collect(char **argv, int argc, const char *arg0, va_list ap)
{
    for (const char *a = arg0; a; a = va_arg(ap, const char *)) {
        cr_assert(argc < 63);
        argv[argc++] = (char *)a;
    }
    argv[argc] = NULL;
    return argc;
}

/* Runs the tool with the NULL-terminated arguments; stdout and stderr land
 * in out_text and err_text. Returns the exit status (-1 if it crashed). */
static int run_tool(const char *arg0, ...)
{
    char *argv[64];
    argv[0] = (char *)tool_path();
    va_list ap;
    va_start(ap, arg0);
    collect(argv, 1, arg0, ap);
    va_end(ap);
    return run_argv(argv);
}

#if defined(__SANITIZE_ADDRESS__)
#define TOOL_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TOOL_UNDER_ASAN 1
#endif
#endif

/* AddressSanitizer reserves terabytes of address space at start: a tool
 * built with it cannot run under ulimit -v. */
static void skip_if_asan(void)
{
#ifdef TOOL_UNDER_ASAN
    cr_skip_test("built with AddressSanitizer, which cannot run under an address-space limit (ulimit -v)");
#endif
}

/* The same under an address-space limit (ulimit -v, in KiB) set by /bin/sh. */
static int run_tool_limited(long long kib, const char *arg0, ...)
{
    char script[128];
    snprintf(script, sizeof script, "ulimit -v %lld && exec \"$0\" \"$@\"", kib);
    char *argv[64] = {"/bin/sh", "-c", script, (char *)tool_path()};
    va_list ap;
    va_start(ap, arg0);
    collect(argv, 4, arg0, ap);
    va_end(ap);
    return run_argv(argv);
}

/* Starts the tool in the background (output discarded); returns its pid. */
static pid_t start_tool(const char *arg0, ...)
{
    char *argv[64];
    argv[0] = (char *)tool_path();
    va_list ap;
    va_start(ap, arg0);
    collect(argv, 1, arg0, ap);
    va_end(ap);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Files in tmpdir whose name holds ".tmp-" (a temporary output). */
static int tmp_files(void)
{
    DIR *d = opendir(tmpdir);
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strstr(e->d_name, ".tmp-") != NULL;
    closedir(d);
    return n;
}

static int exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* ---- inputs ---- */

static uint64_t rng_state;

static float frand(float scale)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return ((float)(z >> 40) * 0x1p-23f - 1.0f) * scale;
}

static float *random_f32(int64_t n, float scale, uint64_t seed)
{
    rng_state = seed;
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = frand(scale);
    return v;
}

static void save(const char *path, fls_npy_dtype dt, int ndim, const int64_t *shape, const void *data)
{
    char err[FLS_NPY_ERR_LEN];
    cr_assert_eq(fls_npy_write(path, dt, ndim, shape, data, err), FLS_OK, "%s", err);
}

static int64_t *load_i64(const char *path, int64_t rows, int64_t cols)
{
    fls_npy_array a;
    char err[FLS_NPY_ERR_LEN];
    cr_assert_eq(fls_npy_read(path, &a, err), FLS_OK, "%s", err);
    cr_assert_eq(a.dtype, FLS_NPY_I64);
    cr_assert_eq(a.ndim, 2);
    cr_assert_eq(a.shape[0], rows);
    cr_assert_eq(a.shape[1], cols);
    return a.data;
}

static fls_context_t *cpu_ctx(void)
{
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    cfg.threads = 1;
    fls_context_t *ctx;
    cr_assert_eq(fls_context_create(&ctx, &cfg), FLS_OK);
    return ctx;
}

/* ---- help and usage ---- */

Test(cli, help_of_every_subcommand)
{
    cr_expect_eq(run_tool("--help", NULL), 0);
    cr_expect(strstr(out_text, "usage: flashsample <command>"), "%s", out_text);
    const char *subs[] = {"sample", "audit", "bench"};
    for (int k = 0; k < 3; k++) {
        cr_expect_eq(run_tool(subs[k], "--help", NULL), 0, "%s --help: %s", subs[k], err_text);
        char want[64];
        snprintf(want, sizeof want, "usage: flashsample %s", subs[k]);
        cr_expect(strstr(out_text, want), "%s --help printed: %s", subs[k], out_text);
        cr_expect_eq(run_tool(subs[k], "-h", NULL), 0);
    }
    cr_expect_eq(run_tool("--version", NULL), 0);
    cr_expect(strstr(out_text, "flashsample 0."), "%s", out_text);
}

Test(cli, usage_errors)
{
    cr_expect_eq(run_tool(NULL), 2);
    cr_expect(strstr(err_text, "usage"), "%s", err_text);
    cr_expect_eq(run_tool("frobnicate", NULL), 2);
    cr_expect(strstr(err_text, "unknown command 'frobnicate'"), "%s", err_text);
    cr_expect_eq(run_tool("sample", NULL), 2);
    cr_expect(strstr(err_text, "an input is required"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--weights", "w.npy", NULL), 2);
    cr_expect(strstr(err_text, "--weights needs --hidden"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", "l.npy", "--weights", "w.npy", "--hidden", "h.npy", NULL), 2);
    cr_expect_eq(run_tool("sample", "--logits", NULL), 2);
    cr_expect(strstr(err_text, "--logits needs a value"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", "l.npy", "--bogus", "1", NULL), 2);
    cr_expect(strstr(err_text, "unknown option '--bogus'"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", "l.npy", "--seed", "1", "--seed", "2", NULL), 2);
    cr_expect(strstr(err_text, "given twice"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", "l.npy", "--seed", "-3", NULL), 2);
    cr_expect(strstr(err_text, "--seed"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", "l.npy", "--samples", "0", NULL), 2);
    cr_expect(strstr(err_text, "--samples"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", "l.npy", "--temperature", "nan", NULL), 2);
    cr_expect_eq(run_tool("sample", "--logits", "l.npy", "--temperature", "0.5x", NULL), 2);
    cr_expect_eq(run_tool("sample", "--logits", "l.npy", "--device", "tpu", NULL), 2);
    cr_expect(strstr(err_text, "cpu or cuda"), "%s", err_text);
    cr_expect_eq(
        run_tool("sample", "--weights", "w.npy", "--hidden", "h.npy", "--weights-dtype", "f64", NULL), 2);
    cr_expect(strstr(err_text, "--weights-dtype"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", "l.npy", "--out", "a.npy", "--counts", "a.npy", NULL), 2);
    cr_expect_eq(run_tool("audit", "--quick", "--full", NULL), 2);
    cr_expect_eq(run_tool("bench", "--reps", "0", NULL), 2);
    cr_expect_eq(dir_entries(), 0);
}

/* ---- sample: the same tokens as the API ---- */

Test(cli, sample_logits_matches_api)
{
    const int64_t B = 3, V = 50, N = 7;
    float *L = random_f32(B * V, 4.0f, 1);
    const int64_t shape[2] = {B, V};
    const char *lp = tpath("L.npy"), *tp = tpath("tokens.npy");
    save(lp, FLS_NPY_F32, 2, shape, L);
    cr_assert_eq(run_tool("sample", "--logits", lp, "--temperature", "0.8", "--seed", "12345", "--offset",
                          "9", "--samples", "7", "--threads", "2", "--out", tp, NULL),
                 0, "%s", err_text);
    int64_t *got = load_i64(tp, B, N);

    fls_context_t *ctx = cpu_ctx();
    fls_matrix m = {L, FLS_DTYPE_F32, B, V, V};
    fls_params p;
    fls_params_default(&p);
    p.temperature_value = 0.8f;
    p.seed = 12345;
    p.offset = 9;
    p.draws = N;
    int64_t want[21];
    fls_outputs out = {want, NULL, NULL};
    cr_assert_eq(fls_sample_logits(ctx, &m, &p, &out), FLS_OK);
    for (int64_t i = 0; i < B * N; i++)
        cr_expect_eq(got[i], want[i], "token %lld: tool %lld, api %lld", (long long)i, (long long)got[i],
                     (long long)want[i]);
    fls_context_destroy(ctx);
    free(got);
    free(L);
    cr_expect_eq(dir_entries(), 2, "no temporary files remain");
}

Test(cli, sample_fused_matches_api_for_every_weight_dtype)
{
    const int64_t B = 2, V = 37, D = 19, N = 5;
    float *W = random_f32(V * D, 1.0f, 2), *H = random_f32(B * D, 1.0f, 3);
    const int64_t ws[2] = {V, D}, hs[2] = {B, D};
    const char *wp = tpath("W.npy"), *hp = tpath("H.npy"), *tp = tpath("tokens.npy");
    save(wp, FLS_NPY_F32, 2, ws, W);
    save(hp, FLS_NPY_F32, 2, hs, H);
    fls_context_t *ctx = cpu_ctx();
    const char *names[3] = {"f32", "f16", "bf16"};
    const fls_dtype dts[3] = {FLS_DTYPE_F32, FLS_DTYPE_F16, FLS_DTYPE_BF16};
    uint16_t *w16 = malloc((size_t)(V * D) * sizeof *w16);
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(run_tool("sample", "--weights", wp, "--hidden", hp, "--weights-dtype", names[k],
                              "--temperature", "0.5", "--seed", "77", "--samples", "5", "--out", tp, NULL),
                     0, "%s: %s", names[k], err_text);
        int64_t *got = load_i64(tp, B, N);
        const void *wdata = W;
        if (dts[k] != FLS_DTYPE_F32) {
            for (int64_t i = 0; i < V * D; i++)
                w16[i] = dts[k] == FLS_DTYPE_F16 ? fls_f32_to_f16(W[i]) : fls_f32_to_bf16(W[i]);
            wdata = w16;
        }
        fls_matrix mw = {wdata, dts[k], V, D, D}, mh = {H, FLS_DTYPE_F32, B, D, D};
        fls_params p;
        fls_params_default(&p);
        p.temperature_value = 0.5f;
        p.seed = 77;
        p.draws = N;
        int64_t want[10];
        fls_outputs out = {want, NULL, NULL};
        cr_assert_eq(fls_sample_fused(ctx, &mw, &mh, &p, &out), FLS_OK);
        for (int64_t i = 0; i < B * N; i++)
            cr_expect_eq(got[i], want[i], "%s token %lld", names[k], (long long)i);
        free(got);
    }
    fls_context_destroy(ctx);
    free(w16);
    free(W);
    free(H);
}

Test(cli, sample_float16_inputs_and_row_seeds)
{
    const int64_t B = 4, V = 29, D = 8, N = 3;
    float *W = random_f32(V * D, 1.0f, 4), *H = random_f32(B * D, 2.0f, 5);
    uint16_t *w16 = malloc((size_t)(V * D) * 2), *h16 = malloc((size_t)(B * D) * 2);
    for (int64_t i = 0; i < V * D; i++)
        w16[i] = fls_f32_to_f16(W[i]);
    for (int64_t i = 0; i < B * D; i++)
        h16[i] = fls_f32_to_f16(H[i]);
    const uint64_t seeds[4] = {1, 0xffffffffffffffffull, 42, 1ull << 63};
    const int64_t ws[2] = {V, D}, hs[2] = {B, D}, ss[1] = {B};
    const char *wp = tpath("W16.npy"), *hp = tpath("H16.npy"), *sp = tpath("seeds.npy"), *tp = tpath("t.npy");
    save(wp, FLS_NPY_F16, 2, ws, w16);
    save(hp, FLS_NPY_F16, 2, hs, h16);
    save(sp, FLS_NPY_U64, 1, ss, seeds);
    cr_assert_eq(run_tool("sample", "--weights", wp, "--hidden", hp, "--row-seeds", sp, "--samples", "3",
                          "--out", tp, NULL),
                 0, "%s", err_text);
    int64_t *got = load_i64(tp, B, N);
    fls_context_t *ctx = cpu_ctx();
    fls_matrix mw = {w16, FLS_DTYPE_F16, V, D, D}, mh = {h16, FLS_DTYPE_F16, B, D, D};
    fls_params p;
    fls_params_default(&p);
    p.row_seeds = seeds;
    p.draws = N;
    int64_t want[12];
    fls_outputs out = {want, NULL, NULL};
    cr_assert_eq(fls_sample_fused(ctx, &mw, &mh, &p, &out), FLS_OK);
    for (int64_t i = 0; i < B * N; i++)
        cr_expect_eq(got[i], want[i], "token %lld", (long long)i);
    free(got);

    /* a request gets the same token wherever it sits: row 2 alone, with its seed */
    const int64_t h1[1] = {D};
    const uint64_t one_seed[1] = {seeds[2]};
    const int64_t s1[1] = {1};
    const char *h1p = tpath("h1.npy"), *s1p = tpath("s1.npy");
    save(h1p, FLS_NPY_F16, 1, h1, h16 + 2 * D);
    save(s1p, FLS_NPY_U64, 1, s1, one_seed);
    cr_assert_eq(run_tool("sample", "--weights", wp, "--hidden", h1p, "--row-seeds", s1p, "--samples", "3",
                          "--out", tp, NULL),
                 0, "%s", err_text);
    int64_t *row = load_i64(tp, 1, N);
    for (int64_t n = 0; n < N; n++)
        cr_expect_eq(row[n], want[2 * N + n]);
    free(row);
    fls_context_destroy(ctx);
    free(W);
    free(H);
    free(w16);
    free(h16);
}

Test(cli, greedy_and_summary)
{
    const int64_t V = 6;
    const float L[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f, -INFINITY};
    const int64_t s1[1] = {V};
    const char *lp = tpath("L1.npy");
    save(lp, FLS_NPY_F32, 1, s1, L);
    cr_assert_eq(run_tool("sample", "--logits", lp, "--temperature", "0", "--samples", "4", NULL), 0, "%s",
                 err_text);
    /* T = 0: argmax, lowest index on ties */
    cr_expect(strstr(out_text, "row 0 tokens: 1 1 1 1"), "%s", out_text);
    cr_expect(strstr(out_text, "V=6"), "%s", out_text);
    cr_expect_eq(dir_entries(), 1, "no output without --out");
}

Test(cli, counts_are_the_histogram_of_the_tokens)
{
    const int64_t B = 3, V = 11, N = 2000;
    float *L = random_f32(B * V, 2.0f, 6);
    L[1 * V + 4] = -INFINITY; /* a masked token is never drawn */
    const int64_t shape[2] = {B, V};
    const char *lp = tpath("L.npy"), *tp = tpath("t.npy"), *cp = tpath("c.npy");
    save(lp, FLS_NPY_F32, 2, shape, L);
    cr_assert_eq(run_tool("sample", "--logits", lp, "--samples", "2000", "--seed", "3", "--out", tp,
                          "--counts", cp, NULL),
                 0, "%s", err_text);
    int64_t *tok = load_i64(tp, B, N), *cnt = load_i64(cp, B, V);
    for (int64_t b = 0; b < B; b++) {
        int64_t sum = 0, hist[11] = {0};
        for (int64_t n = 0; n < N; n++)
            hist[tok[b * N + n]]++;
        for (int64_t v = 0; v < V; v++) {
            sum += cnt[b * V + v];
            cr_expect_eq(cnt[b * V + v], hist[v], "row %lld token %lld", (long long)b, (long long)v);
        }
        cr_expect_eq(sum, N, "row %lld counts sum to %lld", (long long)b, (long long)sum);
    }
    cr_expect_eq(cnt[1 * V + 4], 0);
    free(tok);
    free(cnt);

    /* counts alone (no --out): the summary goes to stdout, counts to the file */
    unlink(cp);
    cr_assert_eq(run_tool("sample", "--logits", lp, "--samples", "10", "--counts", cp, NULL), 0, "%s",
                 err_text);
    cnt = load_i64(cp, B, V);
    for (int64_t b = 0; b < B; b++) {
        int64_t sum = 0;
        for (int64_t v = 0; v < V; v++)
            sum += cnt[b * V + v];
        cr_expect_eq(sum, 10);
    }
    cr_expect(strstr(out_text, "row 0 tokens:"), "%s", out_text);
    free(cnt);
    free(L);
}

/* ---- bad input: non-zero exit, clear message, nothing written ---- */

/* Runs a failing command whose --out is tp, which holds "old": it must stay
 * "old", and no temporary file may remain. */
static void expect_untouched(const char *tp, int entries)
{
    char buf[16];
    slurp(tp, buf, sizeof buf);
    cr_expect_str_eq(buf, "old");
    cr_expect_eq(dir_entries(), entries, "a temporary file remained");
}

static void write_old(const char *p)
{
    FILE *fp = fopen(p, "w");
    fputs("old", fp);
    fclose(fp);
}

Test(cli, bad_inputs_fail_cleanly)
{
    const int64_t B = 2, V = 10, D = 4;
    float *W = random_f32(V * D, 1.0f, 7), *H = random_f32(B * (D + 1), 1.0f, 8);
    const int64_t ws[2] = {V, D}, hs_bad[2] = {B, D + 1}, hs[2] = {B, D}, ls[2] = {B, V};
    const char *wp = tpath("W.npy"), *hbad = tpath("Hbad.npy"), *hp = tpath("H.npy"), *lp = tpath("L.npy");
    const char *tp = tpath("out.npy"), *cp = tpath("counts.npy");
    save(wp, FLS_NPY_F32, 2, ws, W);
    save(hbad, FLS_NPY_F32, 2, hs_bad, H);
    save(hp, FLS_NPY_F32, 2, hs, H);
    save(lp, FLS_NPY_F32, 2, ls, W);
    write_old(tp);
    const int files = 5;

    /* W/H shape mismatch */
    cr_expect_eq(run_tool("sample", "--weights", wp, "--hidden", hbad, "--out", tp, "--counts", cp, NULL), 1);
    cr_expect(strstr(err_text, "shape mismatch") && strstr(err_text, "D=4") && strstr(err_text, "D=5"), "%s",
              err_text);
    expect_untouched(tp, files);

    /* negative temperature */
    cr_expect_eq(run_tool("sample", "--logits", lp, "--temperature", "-0.5", "--out", tp, NULL), 2);
    cr_expect(strstr(err_text, "--temperature must be >= 0"), "%s", err_text);
    expect_untouched(tp, files);

    /* missing file */
    cr_expect_eq(run_tool("sample", "--logits", tpath("nope.npy"), "--out", tp, NULL), 1);
    cr_expect(strstr(err_text, "nope.npy") && strstr(err_text, "cannot open"), "%s", err_text);
    expect_untouched(tp, files);

    /* malformed .npy: bad magic, truncated, fortran order, integer dtype */
    const char *bad = tpath("bad.npy");
    FILE *fp = fopen(bad, "w");
    fputs("this is not numpy", fp);
    fclose(fp);
    cr_expect_eq(run_tool("sample", "--logits", bad, "--out", tp, NULL), 1);
    cr_expect(strstr(err_text, "bad magic"), "%s", err_text);
    expect_untouched(tp, files + 1);

    char err[FLS_NPY_ERR_LEN];
    fls_npy_array a;
    cr_assert_eq(fls_npy_read(lp, &a, err), FLS_OK);
    fp = fopen(bad, "wb");
    fwrite("\x93NUMPY\x01\x00", 1, 8, fp);
    fputc(118, fp);
    fputc(0, fp);
    char hdr[119];
    memset(hdr, ' ', 118);
    const char *fdict = "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 10), }";
    memcpy(hdr, fdict, strlen(fdict));
    hdr[117] = '\n';
    fwrite(hdr, 1, 118, fp);
    fwrite(a.data, 1, a.bytes, fp);
    fclose(fp);
    cr_expect_eq(run_tool("sample", "--logits", bad, "--out", tp, NULL), 1);
    cr_expect(strstr(err_text, "fortran_order"), "%s", err_text);
    expect_untouched(tp, files + 1);

    save(bad, FLS_NPY_F32, 2, ls, W);
    cr_assert_eq(truncate(bad, 128 + 40), 0);
    cr_expect_eq(run_tool("sample", "--logits", bad, "--out", tp, NULL), 1);
    cr_expect(strstr(err_text, "truncated"), "%s", err_text);
    expect_untouched(tp, files + 1);
    fls_npy_free(&a);

    int64_t iv[20] = {0};
    save(bad, FLS_NPY_I64, 2, ls, iv);
    cr_expect_eq(run_tool("sample", "--logits", bad, "--out", tp, NULL), 1);
    cr_expect(strstr(err_text, "int64") && strstr(err_text, "expected float32 ('<f4') or float16 ('<f2')"),
              "%s", err_text);
    expect_untouched(tp, files + 1);

    /* row seeds of the wrong length / dtype */
    const int64_t s3[1] = {3};
    const uint64_t seeds[3] = {1, 2, 3};
    const char *sp = tpath("seeds.npy");
    save(sp, FLS_NPY_U64, 1, s3, seeds);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--row-seeds", sp, "--out", tp, NULL), 1);
    cr_expect(strstr(err_text, "--row-seeds") && strstr(err_text, "(2,)"), "%s", err_text);
    expect_untouched(tp, files + 2);
    save(sp, FLS_NPY_F32, 1, s3, W);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--row-seeds", sp, "--out", tp, NULL), 1);
    cr_expect(strstr(err_text, "uint64"), "%s", err_text);
    const int64_t neg[2] = {5, -1}, s2[1] = {2};
    save(sp, FLS_NPY_I64, 1, s2, neg);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--row-seeds", sp, "--out", tp, NULL), 1);
    cr_expect(strstr(err_text, "negative"), "%s", err_text);
    expect_untouched(tp, files + 2);

    /* a 1-D W */
    const int64_t w1[1] = {D};
    save(bad, FLS_NPY_F32, 1, w1, W);
    cr_expect_eq(run_tool("sample", "--weights", bad, "--hidden", hp, "--out", tp, NULL), 1);
    cr_expect(strstr(err_text, "2-D"), "%s", err_text);
    expect_untouched(tp, files + 2);

    /* NaN in the logits: the library's error, nothing written */
    float *Ln = random_f32(B * V, 1.0f, 9);
    Ln[3] = NAN;
    save(bad, FLS_NPY_F32, 2, ls, Ln);
    cr_expect_eq(run_tool("sample", "--logits", bad, "--out", tp, NULL), 1);
    cr_expect(strstr(err_text, "sampling failed") && strstr(err_text, "NaN"), "%s", err_text);
    expect_untouched(tp, files + 2);

    /* a row of all -inf */
    for (int64_t v = 0; v < V; v++)
        Ln[V + v] = -INFINITY;
    Ln[3] = 0.0f;
    save(bad, FLS_NPY_F32, 2, ls, Ln);
    cr_expect_eq(run_tool("sample", "--logits", bad, "--out", tp, NULL), 1);
    cr_expect(strstr(err_text, "-inf"), "%s", err_text);
    expect_untouched(tp, files + 2);
    free(Ln);

    /* an output in a directory that does not exist: fails before sampling, nothing written */
    cr_expect_eq(run_tool("sample", "--logits", lp, "--out", tp, "--counts", tpath("no/dir/c.npy"), NULL), 1);
    cr_expect(strstr(err_text, "cannot create"), "%s", err_text);
    expect_untouched(tp, files + 2);
    cr_expect(!exists(cp));

    /* the CUDA engine, where it is not available */
    if (!fls_cuda_available()) {
        cr_expect_eq(run_tool("sample", "--logits", lp, "--device", "cuda", "--out", tp, NULL), 1);
        cr_expect(strstr(err_text, "--device cuda") && strstr(err_text, "CUDA engine"), "%s", err_text);
        expect_untouched(tp, files + 2);
    }
    free(W);
    free(H);
}

/* ---- audit and bench ---- */

Test(cli, bench_without_cuda_says_so)
{
    if (fls_cuda_available())
        cr_skip_test("a CUDA device is present: the CUDA bench is covered by the gpu suite");
    int rc = run_tool("bench", "--device", "cuda", "--csv", tpath("b.csv"), NULL);
    cr_expect(rc == 2 || rc == 1, "exit %d", rc);
    cr_expect(strstr(err_text, "CUDA"), "%s", err_text);
    cr_expect_eq(dir_entries(), 0);
}

Test(cli, bench_quick_writes_long_csv)
{
    const char *csv = tpath("bench.csv");
    cr_assert_eq(run_tool("bench", "--quick", "--reps", "1", "--threads", "2", "--csv", csv, NULL), 0, "%s",
                 err_text);
    cr_expect(strstr(out_text, "fus/floor"), "%s", out_text);
    static char text[1 << 16];
    slurp(csv, text, sizeof text);
    cr_expect(strncmp(text, "device,engine,dtype,B,V,D,median_ms,", 36) == 0, "%s", text);
    int lines = 0;
    for (const char *c = text; *c; c++)
        lines += *c == '\n';
    cr_expect_eq(lines, 1 + 2 * 3 * 4, "header + 2 dtypes x 3 batch sizes x 4 engines:\n%s", text);
    cr_expect(strstr(text, "cpu,floor,bf16,1,32000,2048,"), "%s", text);
    cr_expect(strstr(text, "cpu,fused,f32,16,32000,2048,"), "%s", text);
    cr_expect(strstr(text, "cpu,unfused_multinomial,bf16,4,32000,2048,"), "%s", text);
    cr_expect(strstr(text, "cpu,unfused_gumbel,f32,1,32000,2048,"), "%s", text);
    cr_expect_eq(dir_entries(), 1);
}

/* --csv replaces a CSV the bench wrote, but no other file unless --force
 * (checked before any work, on both devices); the refused file is unchanged. */
Test(cli, bench_csv_refuses_to_replace_other_files)
{
    const char *npy = tpath("L.npy");
    const float x[2] = {1.0f, 2.0f};
    const int64_t shape[1] = {2};
    save(npy, FLS_NPY_F32, 1, shape, x);
    static char before[4096], after[4096];
    slurp(npy, before, sizeof before);
    cr_expect_eq(run_tool("bench", "--quick", "--reps", "1", "--csv", npy, NULL), 2, "%s", err_text);
    cr_expect(strstr(err_text, "not a CSV written by flashsample bench") && strstr(err_text, "--force"), "%s",
              err_text);
    cr_expect_eq(run_tool("bench", "--device", "cuda", "--csv", npy, NULL), 2, "%s", err_text);
    cr_expect(strstr(err_text, "refusing to replace it"), "%s", err_text);
    slurp(npy, after, sizeof after);
    cr_expect(memcmp(before, after, sizeof before) == 0, "the refused file changed");
    /* its own CSV it may replace; with --force, anything */
    const char *csv = tpath("own.csv");
    cr_assert_eq(run_tool("bench", "--quick", "--reps", "1", "--threads", "2", "--csv", csv, NULL), 0, "%s",
                 err_text);
    cr_expect_eq(run_tool("bench", "--quick", "--reps", "1", "--threads", "2", "--csv", csv, NULL), 0, "%s",
                 err_text);
    cr_expect_eq(run_tool("bench", "--quick", "--reps", "1", "--threads", "2", "--force", "--csv", npy, NULL),
                 0, "%s", err_text);
    slurp(npy, after, sizeof after);
    cr_expect(strncmp(after, "device,engine,", 14) == 0, "--force did not replace the file");
}

Test(cli, audit_quick_reports_and_exit_status_agrees)
{
    const char *js = tpath("audit.json");
    int rc = run_tool("audit", "--quick", "--json", js, "--threads", "2", NULL);
    cr_assert(rc == 0 || rc == 1, "exit %d: %s", rc, err_text);
    static char text[1 << 18];
    slurp(js, text, sizeof text);
    cr_assert(strstr(text, "\"rows\": ["), "%s", text);
    cr_expect(strstr(text, "\"test\": ") && strstr(text, "\"chi2\": ") && strstr(text, "\"alpha\": ") &&
                  strstr(text, "\"pass\": "),
              "%s", text);
    /* a row not tested has "pass": false without being a failure: the verdict says which */
    if (rc == 0)
        cr_expect(strstr(text, "\"all_pass\": true") && !strstr(text, "\"verdict\": \"fail\"") &&
                      strstr(text, "\"verdict\": \"pass\", \"passed\": "),
                  "%s", text);
    else
        cr_expect(strstr(text, "\"all_pass\": false") && strstr(text, "\"verdict\": \"fail\""), "%s", text);
    cr_expect(strstr(text, "\"untested\": ") && strstr(out_text, " not tested"), "%s", out_text);
    cr_expect(strstr(out_text, "chi2") && strstr(out_text, "alpha"), "%s", out_text);
    cr_expect_eq(dir_entries(), 1);
}

/* ---- data, files, messages ---- */

static void slurp_bytes(const char *path, char *buf, size_t cap, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    cr_assert_not_null(fp, "%s", path);
    *len = fread(buf, 1, cap, fp);
    fclose(fp);
}

Test(cli, output_that_names_an_input_is_refused)
{
    const int64_t B = 2, V = 9, D = 3;
    float *L = random_f32(V * D, 1.0f, 21); /* W (V, D) is the largest of the inputs saved from it */
    const int64_t ls[2] = {B, V}, ws[2] = {V, D}, hs[2] = {B, D}, ss[1] = {B};
    const uint64_t seeds[2] = {5, 6};
    const char *lp = tpath("L.npy"), *wp = tpath("W.npy"), *hp = tpath("H.npy"), *sp = tpath("s.npy");
    save(lp, FLS_NPY_F32, 2, ls, L);
    save(wp, FLS_NPY_F32, 2, ws, L);
    save(hp, FLS_NPY_F32, 2, hs, L);
    save(sp, FLS_NPY_U64, 1, ss, seeds);
    static char before[4096], after[4096];
    size_t nb, na;
    slurp_bytes(lp, before, sizeof before, &nb);

    /* the same inode through a symbolic link, a hard link, another spelling */
    const char *sym = tpath("sym.npy"), *hard = tpath("hard.npy");
    cr_assert_eq(symlink(lp, sym), 0);
    cr_assert_eq(link(lp, hard), 0);
    char dotted[600];
    snprintf(dotted, sizeof dotted, "%s/./L.npy", tmpdir);
    const char *names[4] = {lp, sym, hard, dotted};
    const char *outs[2] = {"--out", "--counts"};
    for (int k = 0; k < 4; k++)
        for (int o = 0; o < 2; o++) {
            cr_expect_eq(run_tool("sample", "--logits", lp, "--samples", "3", outs[o], names[k], NULL), 2,
                         "%s %s: %s", outs[o], names[k], err_text);
            cr_expect(strstr(err_text, "is the input file of --logits") && strstr(err_text, outs[o]), "%s",
                      err_text);
            slurp_bytes(lp, after, sizeof after, &na);
            cr_expect(na == nb && memcmp(before, after, nb) == 0, "the input changed (%s %s)", outs[o],
                      names[k]);
        }
    cr_expect_eq(tmp_files(), 0);

    /* the fused inputs and the row seeds too */
    cr_expect_eq(run_tool("sample", "--weights", wp, "--hidden", hp, "--out", hp, NULL), 2, "%s", err_text);
    cr_expect(strstr(err_text, "--hidden"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--weights", wp, "--hidden", hp, "--counts", wp, NULL), 2, "%s",
                 err_text);
    cr_expect(strstr(err_text, "--weights"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--row-seeds", sp, "--out", sp, NULL), 2, "%s", err_text);
    cr_expect(strstr(err_text, "--row-seeds"), "%s", err_text);
    /* --out and --counts: one file through a link */
    const char *t = tpath("t.npy"), *tl = tpath("tl.npy");
    write_old(t);
    cr_assert_eq(symlink(t, tl), 0);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--out", t, "--counts", tl, NULL), 2, "%s", err_text);
    cr_expect(strstr(err_text, "name the same file"), "%s", err_text);
    expect_untouched(t, 8);
    slurp_bytes(lp, after, sizeof after, &na);
    cr_expect(na == nb && memcmp(before, after, nb) == 0);
    free(L);
}

Test(cli, no_temporary_file_before_the_result_is_ready)
{
    /* a run that would take hours: killed while it samples */
    const int64_t V = 1000, s1[1] = {V};
    float *L = random_f32(V, 1.0f, 22);
    const char *lp = tpath("L.npy"), *tp = tpath("t.npy"), *cp = tpath("c.npy");
    save(lp, FLS_NPY_F32, 1, s1, L);
    pid_t pid = start_tool("sample", "--logits", lp, "--samples", "4000000000", "--counts", cp, NULL);
    for (int k = 0; k < 10; k++) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        cr_expect_eq(tmp_files(), 0, "a temporary file exists %d ms into the run", 50 * (k + 1));
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, WNOHANG), 0, "the long run ended early");
    cr_assert_eq(kill(pid, SIGKILL), 0);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFSIGNALED(status));
    cr_expect_eq(dir_entries(), 1, "the killed run left files behind");

    /* SIGINT: nothing to remove, and nothing left */
    pid = start_tool("sample", "--logits", lp, "--samples", "4000000000", "--counts", tp, NULL);
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    cr_expect_eq(tmp_files(), 0);
    kill(pid, SIGINT);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect_eq(dir_entries(), 1);

    /* failed mid-way (a NaN found while sampling) and success */
    L[500] = NAN;
    save(lp, FLS_NPY_F32, 1, s1, L);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--samples", "100", "--out", tp, "--counts", cp, NULL),
                 1);
    cr_expect_eq(dir_entries(), 1, "the failed run left files behind");
    L[500] = 0.0f;
    save(lp, FLS_NPY_F32, 1, s1, L);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--samples", "100", "--out", tp, "--counts", cp, NULL),
                 0);
    cr_expect_eq(dir_entries(), 3);
    cr_expect_eq(tmp_files(), 0);
    free(L);
}

/* The smallest power-of-two address-space limit (KiB) under which a small
 * `sample --counts` run succeeds. */
static long long small_run_limit(const char *lp, const char *cp)
{
    for (long long mib = 64; mib <= (1ll << 16); mib *= 2) {
        char n[32];
        snprintf(n, sizeof n, "%lld", mib * 1024);
        if (run_tool_limited(mib * 1024, "sample", "--logits", lp, "--samples", "1000", "--threads", "2",
                             "--counts", cp, NULL) == 0)
            return mib * 1024;
    }
    cr_assert_fail("the tool does not run under any address-space limit up to 64 GiB: %s", err_text);
    return 0;
}

Test(cli, counts_do_not_hold_every_token)
{
    skip_if_asan();
    /* 4 rows x 2^22 draws = 16 M tokens: 128 MiB as int64. Under a limit of
     * what a small run needs + 96 MiB, --out (which holds them all) must
     * fail and --counts alone (chunks of 2^20 tokens) must succeed. */
    const int64_t B = 4, V = 2, N = (int64_t)1 << 22;
    const float L[8] = {0.0f, 1.0f, 0.5f, 0.5f, -2.0f, 0.0f, 3.0f, -INFINITY};
    const int64_t ls[2] = {B, V};
    const char *lp = tpath("L.npy"), *cp = tpath("c.npy"), *tp = tpath("t.npy");
    save(lp, FLS_NPY_F32, 2, ls, L);
    long long base = small_run_limit(lp, cp);
    long long limit = base + 96 * 1024;
    cr_log_info("a small run needs at most %lld MiB of address space; limit %lld MiB", base / 1024,
                limit / 1024);
    cr_assert_eq(unlink(cp), 0);
    char ns[32];
    snprintf(ns, sizeof ns, "%lld", (long long)N);
    cr_expect_eq(run_tool_limited(limit, "sample", "--logits", lp, "--samples", ns, "--threads", "2", "--out",
                                  tp, NULL),
                 1, "holding every token fit under the limit, so the test proves nothing: %s", err_text);
    cr_expect(strstr(err_text, "out of memory"), "%s", err_text);
    cr_assert_eq(run_tool_limited(limit, "sample", "--logits", lp, "--samples", ns, "--threads", "2",
                                  "--counts", cp, NULL),
                 0, "%s", err_text);
    int64_t *cnt = load_i64(cp, B, V);
    for (int64_t b = 0; b < B; b++)
        cr_expect_eq(cnt[b * V] + cnt[b * V + 1], N, "row %lld", (long long)b);
    cr_expect_eq(cnt[3 * V + 1], 0, "a masked token was drawn");
    /* row 1 is a fair coin: within 6 sigma of N/2 */
    cr_expect(llabs(cnt[1 * V] - N / 2) < 6 * 1024, "%lld", (long long)cnt[1 * V]);
    free(cnt);
    cr_expect_eq(tmp_files(), 0);
}

Test(cli, chunked_counts_equal_the_histogram_of_all_tokens)
{
    /* 2 rows x 1.5 M draws: several chunks without --out, one call with it */
    const int64_t B = 2, V = 5, N = 1500000;
    float *L = random_f32(B * V, 1.0f, 23);
    const int64_t ls[2] = {B, V};
    const char *lp = tpath("L.npy"), *cp = tpath("c.npy"), *c2 = tpath("c2.npy"), *tp = tpath("t.npy");
    save(lp, FLS_NPY_F32, 2, ls, L);
    cr_assert_eq(
        run_tool("sample", "--logits", lp, "--samples", "1500000", "--seed", "4", "--counts", cp, NULL), 0,
        "%s", err_text);
    cr_expect(strstr(out_text, "wrote ") && strstr(out_text, "int64 (2, 5)"), "%s", out_text);
    cr_assert_eq(run_tool("sample", "--logits", lp, "--samples", "1500000", "--seed", "4", "--out", tp,
                          "--counts", c2, NULL),
                 0, "%s", err_text);
    int64_t *a = load_i64(cp, B, V), *b = load_i64(c2, B, V), *t = load_i64(tp, B, N);
    int64_t hist[10] = {0};
    for (int64_t r = 0; r < B; r++)
        for (int64_t n = 0; n < N; n++)
            hist[r * V + t[r * N + n]]++;
    for (int64_t i = 0; i < B * V; i++) {
        cr_expect_eq(a[i], b[i], "entry %lld: chunked %lld, one call %lld", (long long)i, (long long)a[i],
                     (long long)b[i]);
        cr_expect_eq(a[i], hist[i], "entry %lld", (long long)i);
    }
    free(a);
    free(b);
    free(t);
    free(L);
}

Test(cli, summary_says_what_was_written)
{
    const int64_t B = 3, V = 20;
    float *L = random_f32(B * V, 1.0f, 24);
    const int64_t ls[2] = {B, V};
    const char *lp = tpath("L.npy"), *tp = tpath("t.npy"), *cp = tpath("c.npy");
    save(lp, FLS_NPY_F32, 2, ls, L);
    cr_assert_eq(run_tool("sample", "--logits", lp, "--samples", "7", "--threads", "1", "--out", tp,
                          "--counts", cp, NULL),
                 0, "%s", err_text);
    char want[700];
    snprintf(want, sizeof want, "wrote %s: int64 (3, 7)", tp);
    cr_expect(strstr(out_text, want), "%s", out_text);
    snprintf(want, sizeof want, "wrote %s: int64 (3, 20)", cp);
    cr_expect(strstr(out_text, want), "%s", out_text);
    cr_expect(strstr(out_text, "sampled 3 rows") && strstr(out_text, "engine cpu (1 thread, "), "%s",
              out_text);
    cr_expect(!strstr(out_text, "row 0 tokens"), "%s", out_text);
    free(L);
}

/* An .npy file of any descr, written by hand (the writer has only our dtypes). */
static void save_raw(const char *path, const char *descr, int64_t n, size_t itemsize)
{
    char dict[128];
    int k = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%lld,), }", descr,
                     (long long)n);
    size_t hl = (10 + (size_t)k + 1 + 63) / 64 * 64 - 10;
    FILE *fp = fopen(path, "wb");
    cr_assert_not_null(fp);
    fwrite("\x93NUMPY\x01\x00", 1, 8, fp);
    fputc((int)(hl & 0xff), fp);
    fputc((int)(hl >> 8), fp);
    for (size_t i = 0; i < hl; i++)
        fputc(i < (size_t)k ? dict[i] : i + 1 == hl ? '\n' : ' ', fp);
    for (size_t i = 0; i < (size_t)n * itemsize; i++)
        fputc(0, fp);
    fclose(fp);
}

Test(cli, messages_say_what_and_where)
{
    /* float64: what each input takes, and the conversion */
    const char *f8 = tpath("f8.npy");
    save_raw(f8, "<f8", 10, 8);
    const char *const opts[3] = {"--logits", "--weights", "--hidden"};
    for (int k = 0; k < 3; k++) {
        int rc = k == 0   ? run_tool("sample", "--logits", f8, NULL)
                 : k == 1 ? run_tool("sample", "--weights", f8, "--hidden", f8, NULL)
                          : run_tool("sample", "--weights", tpath("none.npy"), "--hidden", f8, NULL);
        cr_expect_eq(rc, 1);
        if (k < 2)
            cr_expect(strstr(err_text, opts[k]) && strstr(err_text, "'<f8' (float64)") &&
                          strstr(err_text, "expected float32 ('<f4') or float16 ('<f2')") &&
                          strstr(err_text, ".astype(np.float32)") && !strstr(err_text, "<i8"),
                      "%s", err_text);
    }
    const char *i4 = tpath("i4.npy"), *lp = tpath("L.npy");
    save_raw(i4, "<i4", 2, 4);
    const int64_t ls[2] = {2, 10};
    float L[20];
    for (int i = 0; i < 20; i++)
        L[i] = (float)i / 10.0f;
    save(lp, FLS_NPY_F32, 2, ls, L);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--row-seeds", i4, NULL), 1);
    cr_expect(strstr(err_text, "'<i4' (int32)") && strstr(err_text, "uint64"), "%s", err_text);

    /* NaN, +inf, a row of -inf, an overflow of l / T: row and column */
    L[13] = NAN;
    save(lp, FLS_NPY_F32, 2, ls, L);
    cr_expect_eq(run_tool("sample", "--logits", lp, NULL), 1);
    cr_expect(strstr(err_text, "NaN at row 1, column 3"), "%s", err_text);
    L[13] = INFINITY;
    save(lp, FLS_NPY_F32, 2, ls, L);
    cr_expect_eq(run_tool("sample", "--logits", lp, NULL), 1);
    cr_expect(strstr(err_text, "+inf at row 1, column 3"), "%s", err_text);
    for (int v = 0; v < 10; v++)
        L[10 + v] = -INFINITY;
    save(lp, FLS_NPY_F32, 2, ls, L);
    cr_expect_eq(run_tool("sample", "--logits", lp, NULL), 1);
    cr_expect(strstr(err_text, "row 1 has every logit at -inf"), "%s", err_text);
    for (int v = 0; v < 10; v++)
        L[10 + v] = 0.0f;
    L[4] = 3e38f;
    save(lp, FLS_NPY_F32, 2, ls, L);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--temperature", "0.5", NULL), 1);
    cr_expect(strstr(err_text, "row 0, column 4") && strstr(err_text, "overflows float32"), "%s", err_text);

    /* fused: a NaN in H names its row; a logit W h that overflows names row and token */
    const int64_t V = 6, D = 4, B = 3, ws[2] = {V, D}, hs[2] = {B, D};
    float W[24], H[12];
    for (int i = 0; i < 24; i++)
        W[i] = (float)(i % 5) * 0.25f;
    for (int i = 0; i < 12; i++)
        H[i] = 1.0f - (float)i * 0.1f;
    const char *wp = tpath("W.npy"), *hp = tpath("H.npy");
    save(wp, FLS_NPY_F32, 2, ws, W);
    H[1 * D + 2] = NAN;
    save(hp, FLS_NPY_F32, 2, hs, H);
    cr_expect_eq(run_tool("sample", "--weights", wp, "--hidden", hp, NULL), 1);
    cr_expect(strstr(err_text, "--hidden") && strstr(err_text, "NaN at row 1, column 2"), "%s", err_text);
    H[1 * D + 2] = 0.5f;
    for (int d = 0; d < D; d++) {
        W[3 * D + d] = 1e30f;
        H[2 * D + d] = 1e10f;
    }
    save(wp, FLS_NPY_F32, 2, ws, W);
    save(hp, FLS_NPY_F32, 2, hs, H);
    cr_expect_eq(run_tool("sample", "--weights", wp, "--hidden", hp, NULL), 1);
    cr_expect(strstr(err_text, "row 2, token 3") && strstr(err_text, "overflows float32"), "%s", err_text);

    /* --temperature out of float range, --logits with --hidden */
    cr_expect_eq(run_tool("sample", "--logits", lp, "--temperature", "1e39", NULL), 2);
    cr_expect(strstr(err_text, "1e39 overflows float32"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--temperature", "1e-60", NULL), 2);
    cr_expect(strstr(err_text, "underflows"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--hidden", hp, NULL), 2);
    cr_expect(strstr(err_text, "--logits cannot be combined with --hidden") && !strstr(err_text, "not both"),
              "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--weights", wp, NULL), 2);
    cr_expect(strstr(err_text, "--logits cannot be combined with --weights"), "%s", err_text);
    cr_expect_eq(tmp_files(), 0);
}

Test(cli, help_lists_every_option)
{
    cr_assert_eq(run_tool("bench", "--help", NULL), 0);
    const char *bench[] = {"--device", "--csv",    "--quick",   "--reps",    "--threads",
                           "--simd",   "--shapes", "--batches", "--engines", "--rules"};
    for (size_t k = 0; k < sizeof bench / sizeof *bench; k++)
        cr_expect(strstr(out_text, bench[k]), "bench --help lacks %s", bench[k]);
    cr_assert_eq(run_tool("sample", "--help", NULL), 0);
    const char *sample[] = {"--logits",
                            "--weights",
                            "--hidden",
                            "--weights-dtype",
                            "--temperature",
                            "--seed",
                            "--row-seeds",
                            "--offset",
                            "--samples",
                            "--device",
                            "--threads",
                            "--simd",
                            "--out",
                            "--counts",
                            "--min-p",
                            "--top-k",
                            "--top-p",
                            "--filter",
                            "--without-replacement",
                            "--top-k-per-row",
                            "--top-p-per-row",
                            "--min-p-per-row",
                            "--filter-value-per-row",
                            "--method",
                            "--group-size",
                            "--noise",
                            "--stream-chunk",
                            "--early-finalize",
                            "--shards",
                            "--allowed-bitmask",
                            "--bitmask-rows",
                            "--logit-bias-ids",
                            "--logit-bias-values",
                            "--seen-ids",
                            "--seen-counts",
                            "--repetition-penalty",
                            "--presence-penalty",
                            "--frequency-penalty",
                            "--repetition-penalty-per-row",
                            "--presence-penalty-per-row",
                            "--frequency-penalty-per-row"};
    for (size_t k = 0; k < sizeof sample / sizeof *sample; k++)
        cr_expect(strstr(out_text, sample[k]), "sample --help lacks %s", sample[k]);
    cr_assert_eq(run_tool("audit", "--help", NULL), 0);
    const char *audit[] = {"--quick",
                           "--full",
                           "--json",
                           "--device",
                           "--seed",
                           "--threads",
                           "--simd",
                           "--logits",
                           "--tokens",
                           "--temperature",
                           "--temperature-per-row",
                           "--report",
                           "--pairs-rows",
                           "--top-k",
                           "--top-p",
                           "--min-p",
                           "--filter",
                           "--without-replacement"};
    for (size_t k = 0; k < sizeof audit / sizeof *audit; k++)
        cr_expect(strstr(out_text, audit[k]), "audit --help lacks %s", audit[k]);
    /* rows not tested, and the exit status when nothing was tested, are documented */
    cr_expect(strstr(out_text, "untested") && strstr(out_text, "3 nothing was tested"), "%s", out_text);

    /* --version: built without CUDA, or with it and whether a GPU is there */
    cr_assert_eq(run_tool("--version", NULL), 0);
    const char *want = !fls_cuda_built()      ? "built without CUDA"
                       : fls_cuda_available() ? "built with CUDA, GPU available"
                                              : "built with CUDA, no GPU found";
    cr_expect(strstr(out_text, want), "%s", out_text);
}

Test(cli, simd_option)
{
    const int64_t B = 2, V = 300, D = 40;
    float *W = random_f32(V * D, 1.0f, 25), *H = random_f32(B * D, 1.0f, 26);
    const int64_t ws[2] = {V, D}, hs[2] = {B, D};
    const char *wp = tpath("W.npy"), *hp = tpath("H.npy"), *a = tpath("a.npy"), *p = tpath("p.npy");
    save(wp, FLS_NPY_F32, 2, ws, W);
    save(hp, FLS_NPY_F32, 2, hs, H);
    cr_assert_eq(run_tool("sample", "--weights", wp, "--hidden", hp, "--weights-dtype", "bf16", "--samples",
                          "8", "--out", a, NULL),
                 0, "%s", err_text);
    cr_assert_eq(run_tool("sample", "--weights", wp, "--hidden", hp, "--weights-dtype", "bf16", "--samples",
                          "8", "--simd", "portable", "--out", p, NULL),
                 0, "%s", err_text);
    cr_expect(strstr(out_text, "portable"), "%s", out_text);
    int64_t *ta = load_i64(a, B, 8), *tp = load_i64(p, B, 8);
    cr_expect(memcmp(ta, tp, (size_t)(B * 8) * sizeof *ta) == 0, "--simd portable changed the tokens");
    free(ta);
    free(tp);
    cr_expect_eq(run_tool("sample", "--weights", wp, "--hidden", hp, "--simd", "sse9", NULL), 2);
    cr_expect(strstr(err_text, "auto, portable, avx2, avx512 or amx"), "%s", err_text);
    cr_expect_eq(run_tool("bench", "--simd", "sse9", NULL), 2);
    cr_expect_eq(run_tool("audit", "--simd", "sse9", NULL), 2);
    /* bench names the path it timed */
    cr_assert_eq(run_tool("bench", "--shapes", "64:1000", "--batches", "1", "--engines", "fused", "--reps",
                          "1", "--simd", "portable", "--csv", tpath("b.csv"), NULL),
                 0, "%s", err_text);
    cr_expect(strstr(out_text, "simd portable"), "%s", out_text);
    static char text[4096];
    slurp(tpath("b.csv"), text, sizeof text);
    cr_expect(strstr(text, "cpu,fused,bf16,1,1000,64,") && strstr(text, ",portable,"), "%s", text);
    free(W);
    free(H);
}

/* ---- the rule family on the command line ---- */

static int64_t *load_i64_3(const char *path, int64_t d0, int64_t d1, int64_t d2)
{
    fls_npy_array a;
    char err[FLS_NPY_ERR_LEN];
    cr_assert_eq(fls_npy_read(path, &a, err), FLS_OK, "%s", err);
    cr_assert_eq(a.dtype, FLS_NPY_I64);
    cr_assert_eq(a.ndim, 3);
    cr_assert(a.shape[0] == d0 && a.shape[1] == d1 && a.shape[2] == d2, "shape (%lld, %lld, %lld)",
              (long long)a.shape[0], (long long)a.shape[1], (long long)a.shape[2]);
    return a.data;
}

Test(cli, rule_flags_give_the_api_tokens)
{
    const int64_t B = 4, V = 300, N = 6;
    float *L = random_f32(B * V, 3.0f, 31);
    const int64_t ls[2] = {B, V}, bs[1] = {B};
    const int64_t krow[4] = {1, 7, 0, 300};
    const float prow[4] = {0.5f, 0.9f, 1.0f, 0.2f}, mrow[4] = {0.0f, 0.3f, 0.01f, 1.0f};
    const double frow[4] = {1.0, 0.0, 2.5, 0.5};
    const char *lp = tpath("L.npy"), *kp = tpath("k.npy"), *pp = tpath("p.npy"), *mp = tpath("m.npy"),
               *fp = tpath("f.npy"), *tp = tpath("t.npy");
    save(lp, FLS_NPY_F32, 2, ls, L);
    save(kp, FLS_NPY_I64, 1, bs, krow);
    save(pp, FLS_NPY_F32, 1, bs, prow);
    save(mp, FLS_NPY_F32, 1, bs, mrow);
    save(fp, FLS_NPY_F64, 1, bs, frow);
    fls_context_t *ctx = cpu_ctx();
    fls_matrix m = {L, FLS_DTYPE_F32, B, V, V};
    int64_t want[24];
    fls_outputs out = {want, NULL, NULL};
    for (int c = 0; c < 5; c++) {
        fls_params p;
        fls_params_default(&p);
        p.temperature_value = 0.9f;
        p.seed = 5;
        p.draws = N;
        int rc;
        switch (c) {
        case 0:
            p.top_k = 5;
            rc = run_tool("sample", "--logits", lp, "--temperature", "0.9", "--seed", "5", "--samples", "6",
                          "--top-k", "5", "--out", tp, NULL);
            break;
        case 1:
            p.top_p = 0.8f;
            p.min_p = 0.05f;
            rc = run_tool("sample", "--logits", lp, "--temperature", "0.9", "--seed", "5", "--samples", "6",
                          "--top-p", "0.8", "--min-p", "0.05", "--out", tp, NULL);
            break;
        case 2:
            p.filter = "top-nsigma";
            p.filter_value = 1.5;
            rc = run_tool("sample", "--logits", lp, "--temperature", "0.9", "--seed", "5", "--samples", "6",
                          "--filter", "top-nsigma=1.5", "--out", tp, NULL);
            break;
        case 3: /* --filter for a built-in is its own flag */
            p.top_k = 3;
            rc = run_tool("sample", "--logits", lp, "--temperature", "0.9", "--seed", "5", "--samples", "6",
                          "--filter", "top-k=3", "--out", tp, NULL);
            break;
        default:
            p.row_top_k = krow;
            p.row_top_p = prow;
            p.row_min_p = mrow;
            p.filter = "top-nsigma";
            p.row_filter_value = frow;
            rc = run_tool("sample", "--logits", lp, "--temperature", "0.9", "--seed", "5", "--samples", "6",
                          "--top-k-per-row", kp, "--top-p-per-row", pp, "--min-p-per-row", mp, "--filter",
                          "top-nsigma", "--filter-value-per-row", fp, "--out", tp, NULL);
            break;
        }
        cr_assert_eq(rc, 0, "case %d: %s", c, err_text);
        cr_expect(strstr(out_text, "exact second pass: "), "case %d: %s", c, out_text);
        int64_t *got = load_i64(tp, B, N);
        cr_assert_eq(fls_sample_logits(ctx, &m, &p, &out), FLS_OK);
        for (int64_t i = 0; i < B * N; i++)
            cr_expect_eq(got[i], want[i], "case %d token %lld: tool %lld, api %lld", c, (long long)i,
                         (long long)got[i], (long long)want[i]);
        free(got);
    }

    /* the fused path with a rule */
    const int64_t D = 16, ws[2] = {V, D}, hs[2] = {B, D};
    float *W = random_f32(V * D, 1.0f, 32), *H = random_f32(B * D, 2.0f, 33);
    const char *wp = tpath("W.npy"), *hp = tpath("H.npy");
    save(wp, FLS_NPY_F32, 2, ws, W);
    save(hp, FLS_NPY_F32, 2, hs, H);
    cr_assert_eq(run_tool("sample", "--weights", wp, "--hidden", hp, "--samples", "6", "--top-p", "0.7",
                          "--top-k", "40", "--out", tp, NULL),
                 0, "%s", err_text);
    int64_t *got = load_i64(tp, B, N);
    fls_matrix mw = {W, FLS_DTYPE_F32, V, D, D}, mh = {H, FLS_DTYPE_F32, B, D, D};
    fls_params p;
    fls_params_default(&p);
    p.draws = N;
    p.top_p = 0.7f;
    p.top_k = 40;
    cr_assert_eq(fls_sample_fused(ctx, &mw, &mh, &p, &out), FLS_OK);
    for (int64_t i = 0; i < B * N; i++)
        cr_expect_eq(got[i], want[i], "fused token %lld", (long long)i);
    free(got);
    fls_context_destroy(ctx);
    free(W);
    free(H);
    free(L);
}

Test(cli, without_replacement_writes_b_n_k_and_counts_every_position)
{
    const int64_t B = 3, V = 40, N = 5, K = 4;
    float *L = random_f32(B * V, 2.0f, 34);
    for (int64_t v = 3; v < V; v++)
        L[2 * V + v] = -INFINITY; /* row 2 has 3 tokens: position 3 is -1 */
    const int64_t ls[2] = {B, V};
    const char *lp = tpath("L.npy"), *tp = tpath("t.npy"), *cp = tpath("c.npy"), *c2 = tpath("c2.npy");
    save(lp, FLS_NPY_F32, 2, ls, L);
    cr_assert_eq(run_tool("sample", "--logits", lp, "--samples", "5", "--seed", "9", "--without-replacement",
                          "4", "--out", tp, "--counts", cp, NULL),
                 0, "%s", err_text);
    cr_expect(strstr(out_text, "int64 (3, 5, 4)"), "%s", out_text);
    int64_t *got = load_i64_3(tp, B, N, K), *cnt = load_i64(cp, B, V);
    fls_context_t *ctx = cpu_ctx();
    fls_matrix m = {L, FLS_DTYPE_F32, B, V, V};
    fls_params p;
    fls_params_default(&p);
    p.seed = 9;
    p.draws = N;
    p.without_replacement_k = K;
    int64_t want[60];
    fls_outputs out = {want, NULL, NULL};
    cr_assert_eq(fls_sample_logits(ctx, &m, &p, &out), FLS_OK);
    int64_t hist[120] = {0};
    for (int64_t i = 0; i < B * N * K; i++) {
        cr_expect_eq(got[i], want[i], "token %lld", (long long)i);
        if (got[i] >= 0)
            hist[(i / (N * K)) * V + got[i]]++;
    }
    for (int64_t n = 0; n < N; n++)
        cr_expect_eq(got[(2 * N + n) * K + 3], -1, "row 2 has 3 tokens: position 3 is -1");
    for (int64_t i = 0; i < B * V; i++)
        cr_expect_eq(cnt[i], hist[i], "count %lld", (long long)i);
    /* counts alone (chunked draws) equal the counts of the one call */
    cr_assert_eq(run_tool("sample", "--logits", lp, "--samples", "5", "--seed", "9", "--without-replacement",
                          "4", "--counts", c2, NULL),
                 0, "%s", err_text);
    int64_t *cnt2 = load_i64(c2, B, V);
    cr_expect(memcmp(cnt, cnt2, (size_t)(B * V) * sizeof *cnt) == 0);
    cr_expect(strstr(out_text, "row 0 tokens: "), "%s", out_text);
    free(cnt2);
    fls_context_destroy(ctx);
    free(got);
    free(cnt);
    free(L);
}

Test(cli, rule_values_out_of_range_name_the_flag_and_the_range)
{
    const int64_t B = 2, V = 30, ls[2] = {B, V}, bs[1] = {B}, b3[1] = {3};
    float *L = random_f32(B * V, 1.0f, 35);
    const char *lp = tpath("L.npy"), *kp = tpath("k.npy"), *pp = tpath("p.npy"), *tp = tpath("t.npy");
    save(lp, FLS_NPY_F32, 2, ls, L);
    write_old(tp);
    const struct {
        const char *flag, *value, *want;
    } bad[] = {
        {"--top-k", "31", "top-k is 0 (off) to V = 30"},
        {"--top-k", "-1", "--top-k"},
        {"--top-k", "2.5", "expected an integer"},
        {"--top-p", "0", "top-p is in (0, 1]"},
        {"--top-p", "1.5", "top-p is in (0, 1]"},
        {"--min-p", "-0.1", "min-p is in [0, 1]"},
        {"--min-p", "nan", "--min-p"},
        {"--without-replacement", "31", "K is 1 to V = 30"},
        {"--filter", "top-nsigma=-1", "top-nsigma is finite, >= 0"},
        {"--filter", "nosuch=1", "unknown rule 'nosuch'"},
        {"--filter", "top-nsigma", "expected NAME=VALUE"},
        {"--filter-value-per-row", "x.npy", "needs --filter NAME"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        cr_expect_eq(run_tool("sample", "--logits", lp, bad[k].flag, bad[k].value, "--out", tp, NULL), 2,
                     "%s %s: %s", bad[k].flag, bad[k].value, err_text);
        cr_expect(strstr(err_text, bad[k].want), "%s %s: '%s' lacks '%s'", bad[k].flag, bad[k].value,
                  err_text, bad[k].want);
        expect_untouched(tp, 2);
    }
    /* a per-row value names the row; a wrong shape or dtype names the file */
    const float prow[2] = {0.5f, 2.0f};
    save(pp, FLS_NPY_F32, 1, bs, prow);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--top-p-per-row", pp, "--out", tp, NULL), 2);
    cr_expect(strstr(err_text, "--top-p-per-row") && strstr(err_text, "row 1 has 2") &&
                  strstr(err_text, "(0, 1]"),
              "%s", err_text);
    const int64_t krow[3] = {1, 2, 3};
    save(kp, FLS_NPY_I64, 1, b3, krow);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--top-k-per-row", kp, "--out", tp, NULL), 1);
    cr_expect(strstr(err_text, "--top-k-per-row") && strstr(err_text, "expected shape (2,)"), "%s", err_text);
    save(kp, FLS_NPY_F32, 1, bs, prow);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--top-k-per-row", kp, "--out", tp, NULL), 1);
    cr_expect(strstr(err_text, "float32") && strstr(err_text, "int64"), "%s", err_text);
    /* combinations the library does not take, said before any work */
    cr_expect_eq(run_tool("sample", "--logits", lp, "--method", "grouped", "--top-k", "3", NULL), 2);
    cr_expect(strstr(err_text, "--method grouped takes no rule"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--method", "unfused-multinomial",
                          "--without-replacement", "2", NULL),
                 2);
    cr_expect(strstr(err_text, "one token per draw"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--filter", "top-k=3", "--top-k", "4", NULL), 2);
    cr_expect(strstr(err_text, "give one"), "%s", err_text);
    expect_untouched(tp, 4);
    free(L);
}

Test(cli, second_pass_count_is_printed)
{
    /* a flat row: its 0.9 nucleus holds ~90% of 5000 tokens, far beyond the kept list */
    const int64_t V = 5000, s1[1] = {V};
    float *L = calloc((size_t)V, sizeof *L);
    const char *lp = tpath("L.npy");
    save(lp, FLS_NPY_F32, 1, s1, L);
    cr_assert_eq(run_tool("sample", "--logits", lp, "--top-p", "0.9", "--samples", "3", NULL), 0, "%s",
                 err_text);
    cr_expect(strstr(out_text, "exact second pass: 1 of 1 row sampled (1 call) took it"), "%s", out_text);
    cr_assert_eq(run_tool("sample", "--logits", lp, "--top-k", "2", NULL), 0, "%s", err_text);
    cr_expect(strstr(out_text, "exact second pass: 0 of 1 row"), "%s", out_text);
    free(L);
}

Test(cli, bench_rules_writes_a_rule_column)
{
    const char *csv = tpath("rules.csv");
    cr_assert_eq(run_tool("bench", "--shapes", "64:2000", "--batches", "1,2", "--reps", "1", "--threads", "2",
                          "--rules",
                          "none,min-p=0.05,top-k=50,top-p=0.9,all,wr=4,grouped,grouped=64,top-nsigma=1",
                          "--csv", csv, NULL),
                 0, "%s", err_text);
    static char text[1 << 16];
    slurp(csv, text, sizeof text);
    cr_expect(strncmp(text, "device,engine,rule,dtype,B,V,D,median_ms,", 41) == 0, "%s", text);
    int lines = 0;
    for (const char *c = text; *c; c++)
        lines += *c == '\n';
    cr_expect_eq(lines, 1 + 9 * 2 * 2, "header + 9 rules x 2 dtypes x 2 batch sizes:\n%s", text);
    cr_expect(strstr(text, "cpu,fused,none,bf16,1,2000,64,"), "%s", text);
    cr_expect(strstr(text, "cpu,fused,all,f32,2,2000,64,"), "%s", text);
    cr_expect(strstr(text, "cpu,fused_grouped,grouped=64,bf16,2,2000,64,"), "%s", text);
    cr_expect(strstr(text, "cpu,fused,wr=4,f32,1,2000,64,"), "%s", text);
    cr_expect(strstr(out_text, "vs none"), "%s", out_text);
    cr_expect_eq(run_tool("bench", "--rules", "top-k=x", NULL), 2);
    cr_expect(strstr(err_text, "--rules"), "%s", err_text);
    cr_expect_eq(run_tool("bench", "--rules", "grouped+top-k=5", NULL), 2);
    cr_expect(strstr(err_text, "grouped takes no filter"), "%s", err_text);
    cr_expect_eq(run_tool("bench", "--rules", "top-k=5000", "--shapes", "64:2000", NULL), 2);
    cr_expect(strstr(err_text, "exceeds the vocabulary"), "%s", err_text);
    cr_expect_eq(run_tool("bench", "--rules", "none", "--engines", "fused", NULL), 2);
    cr_expect_eq(dir_entries(), 1);
}

/* ---- methods, streaming, early finalization, shards ---- */

Test(cli, streamed_and_sharded_tokens_equal_one_call_for_both_methods)
{
    const int64_t B = 3, V = 1000, D = 24, N = 4;
    float *W = random_f32(V * D, 1.0f, 36), *H = random_f32(B * D, 1.5f, 37),
          *L = random_f32(B * V, 3.0f, 38);
    const int64_t ws[2] = {V, D}, hs[2] = {B, D}, ls[2] = {B, V};
    const char *wp = tpath("W.npy"), *hp = tpath("H.npy"), *lp = tpath("L.npy"), *ap = tpath("a.npy"),
               *bp = tpath("b.npy");
    save(wp, FLS_NPY_F32, 2, ws, W);
    save(hp, FLS_NPY_F32, 2, hs, H);
    save(lp, FLS_NPY_F32, 2, ls, L);
    const char *methods[2] = {"fused", "grouped"};
    const char *gsize[2] = {"128", "64"};
    for (int mi = 0; mi < 2; mi++) {
        for (int src = 0; src < 2; src++) {
            const char *in1 = src ? "--weights" : "--logits", *p1 = src ? wp : lp;
            const char *in2 = src ? "--hidden" : "--temperature", *p2 = src ? hp : "0.8";
            const char *gs = mi ? "--group-size" : "--seed", *gv = mi ? gsize[src] : "0";
            cr_assert_eq(run_tool("sample", in1, p1, in2, p2, "--method", methods[mi], gs, gv, "--samples",
                                  "4", "--out", ap, NULL),
                         0, "%s", err_text);
            int64_t *one = load_i64(ap, B, N);
            /* chunk sizes that split groups, shard counts that do, and N = 1 */
            const char *chunks[3] = {"1", "77", "1000"};
            const char *shards[3] = {"1", "3", "7"};
            for (int c = 0; c < 3; c++)
                for (int s = 0; s < 3; s++) {
                    if (c == 0 && s == 2)
                        continue; /* 1-token chunks in 7 shards: slow and adds nothing */
                    cr_assert_eq(
                        run_tool("sample", in1, p1, in2, p2, "--method", methods[mi], gs, gv, "--samples",
                                 "4", "--stream-chunk", chunks[c], "--shards", shards[s], "--out", bp, NULL),
                        0, "%s %s chunk %s shards %s: %s", methods[mi], in1, chunks[c], shards[s], err_text);
                    cr_expect(strstr(out_text, "streamed: chunks of "), "%s", out_text);
                    if (s > 0)
                        cr_expect(strstr(out_text, "serialized bytes exchanged"), "%s", out_text);
                    int64_t *got = load_i64(bp, B, N);
                    for (int64_t i = 0; i < B * N; i++)
                        cr_expect_eq(got[i], one[i], "%s %s chunk %s shards %s token %lld: %lld vs %lld",
                                     methods[mi], in1, chunks[c], shards[s], (long long)i, (long long)got[i],
                                     (long long)one[i]);
                    free(got);
                }
            free(one);
        }
    }
    free(W);
    free(H);
    free(L);
}

/* --noise: min-first gives the API's min-first tokens on both paths and both
 * flat methods (and other tokens than per-token, the default); a bad value
 * and the combinations the library refuses are usage errors, said before any
 * work. */
Test(cli, noise_flag_gives_the_api_tokens_and_refuses_bad_values)
{
    const int64_t B = 3, V = 1000, D = 24, N = 6;
    float *W = random_f32(V * D, 1.0f, 41), *H = random_f32(B * D, 1.5f, 42),
          *L = random_f32(B * V, 3.0f, 43);
    const int64_t ws[2] = {V, D}, hs[2] = {B, D}, ls[2] = {B, V};
    const char *wp = tpath("W.npy"), *hp = tpath("H.npy"), *lp = tpath("L.npy"), *tp = tpath("t.npy");
    save(wp, FLS_NPY_F32, 2, ws, W);
    save(hp, FLS_NPY_F32, 2, hs, H);
    save(lp, FLS_NPY_F32, 2, ls, L);
    fls_context_t *ctx = cpu_ctx();
    fls_matrix mW = {W, FLS_DTYPE_F32, V, D, D}, mH = {H, FLS_DTYPE_F32, B, D, D},
               mL = {L, FLS_DTYPE_F32, B, V, V};
    const char *methods[2] = {"fused", "unfused-gumbel"};
    for (int src = 0; src < 2; src++)
        for (int mi = 0; mi < 2; mi++)
            for (int scheme = 0; scheme < 3; scheme++) { /* min-first, per-token, the default */
                const char *in1 = src ? "--weights" : "--logits", *p1 = src ? wp : lp;
                const char *in2 = src ? "--hidden" : "--offset", *p2 = src ? hp : "5";
                const char *nv = scheme == 0 ? "min-first" : "per-token";
                const int rc =
                    scheme < 2
                        ? run_tool("sample", in1, p1, in2, p2, "--method", methods[mi], "--noise", nv,
                                   "--seed", "7", "--temperature", "0.7", "--samples", "6", "--out", tp, NULL)
                        : run_tool("sample", in1, p1, in2, p2, "--method", methods[mi], "--seed", "7",
                                   "--temperature", "0.7", "--samples", "6", "--out", tp, NULL);
                cr_assert_eq(rc, 0, "%s %s scheme %d: %s", in1, methods[mi], scheme, err_text);
                cr_expect(scheme != 0 || strstr(out_text, "noise min-first"), "%s", out_text);
                cr_expect(scheme == 0 || !strstr(out_text, "min-first"), "%s", out_text);
                int64_t *got = load_i64(tp, B, N);
                fls_params p;
                fls_params_default(&p);
                p.method = mi ? FLS_METHOD_UNFUSED_GUMBEL : FLS_METHOD_FUSED;
                p.noise = scheme == 0 ? FLS_NOISE_MIN_FIRST : FLS_NOISE_PER_TOKEN;
                p.seed = 7;
                p.offset = src ? 0 : 5;
                p.temperature_value = 0.7f;
                p.draws = N;
                int64_t want[18], other[18];
                fls_outputs out = {want, NULL, NULL};
                cr_assert_eq(src ? fls_sample_fused(ctx, &mW, &mH, &p, &out)
                                 : fls_sample_logits(ctx, &mL, &p, &out),
                             FLS_OK);
                p.noise = scheme == 0 ? FLS_NOISE_PER_TOKEN : FLS_NOISE_MIN_FIRST;
                out.tokens = other;
                cr_assert_eq(src ? fls_sample_fused(ctx, &mW, &mH, &p, &out)
                                 : fls_sample_logits(ctx, &mL, &p, &out),
                             FLS_OK);
                int differ = 0;
                for (int64_t i = 0; i < B * N; i++) {
                    cr_expect_eq(got[i], want[i], "%s %s scheme %d token %lld: tool %lld, api %lld", in1,
                                 methods[mi], scheme, (long long)i, (long long)got[i], (long long)want[i]);
                    differ += other[i] != want[i];
                }
                cr_expect(differ > 0, "%s %s: min-first and per-token gave the same %lld tokens", in1,
                          methods[mi], (long long)(B * N));
                free(got);
            }
    fls_context_destroy(ctx);
    /* bad values and what min-first does not go with: exit 2, the flag named, nothing written */
    cr_expect_eq(run_tool("sample", "--logits", lp, "--noise", "min_first", NULL), 2);
    cr_expect(strstr(err_text, "--noise: expected per-token or min-first, got 'min_first'"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--noise", "", NULL), 2);
    cr_expect(strstr(err_text, "--noise"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--noise", NULL), 2);
    cr_expect(strstr(err_text, "--noise needs a value"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--noise", "min-first", "--method", "grouped", NULL), 2);
    cr_expect(strstr(err_text, "--noise min-first takes --method fused or unfused-gumbel"), "%s", err_text);
    cr_expect_eq(
        run_tool("sample", "--logits", lp, "--noise", "min-first", "--method", "unfused-multinomial", NULL),
        2);
    cr_expect(strstr(err_text, "unfused-multinomial"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--noise", "min-first", "--top-p", "0.9", NULL), 2);
    cr_expect(strstr(err_text, "--noise min-first takes no rule (--top-p)"), "%s", err_text);
    cr_expect_eq(
        run_tool("sample", "--logits", lp, "--noise", "min-first", "--without-replacement", "2", NULL), 2);
    cr_expect(strstr(err_text, "no rule"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--noise", "min-first", "--stream-chunk", "100", NULL),
                 2);
    cr_expect(strstr(err_text, "--stream-chunk"), "%s", err_text);
    cr_expect_eq(
        run_tool("sample", "--weights", wp, "--hidden", hp, "--noise", "min-first", "--shards", "2", NULL),
        2);
    cr_expect(strstr(err_text, "--shards"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--noise", "min-first", "--out", tp, "--seed", "x", NULL),
                 2);
    cr_expect_eq(dir_entries(), 4, "only the inputs and the last good output remain");
    free(W);
    free(H);
    free(L);
}

Test(cli, early_finalization_skips_and_keeps_the_tokens)
{
    /* peaked rows: token 7 of W is long and aligned with every h, the rest short */
    const int64_t B = 2, V = 4096, D = 32, N = 3;
    float *W = random_f32(V * D, 0.05f, 39), *H = malloc((size_t)(B * D) * sizeof *H);
    for (int64_t d = 0; d < D; d++)
        W[7 * D + d] = 1.0f;
    for (int64_t i = 0; i < B * D; i++)
        H[i] = 1.0f + 0.01f * (float)(i % 5);
    const int64_t ws[2] = {V, D}, hs[2] = {B, D};
    const char *wp = tpath("W.npy"), *hp = tpath("H.npy"), *ap = tpath("a.npy"), *bp = tpath("b.npy");
    save(wp, FLS_NPY_F32, 2, ws, W);
    save(hp, FLS_NPY_F32, 2, hs, H);
    const char *methods[2] = {"fused", "grouped"};
    for (int mi = 0; mi < 2; mi++) {
        cr_assert_eq(run_tool("sample", "--weights", wp, "--hidden", hp, "--method", methods[mi],
                              "--temperature", "0.7", "--samples", "3", "--out", ap, NULL),
                     0, "%s", err_text);
        cr_assert_eq(run_tool("sample", "--weights", wp, "--hidden", hp, "--method", methods[mi],
                              "--temperature", "0.7", "--samples", "3", "--stream-chunk", "256",
                              "--early-finalize", "--shards", "2", "--out", bp, NULL),
                     0, "%s", err_text);
        cr_expect(strstr(out_text, "early finalization: ") && strstr(out_text, "% of W skipped"), "%s",
                  out_text);
        const char *s = strstr(out_text, "chunks fed, ");
        cr_assert_not_null(s, "%s", out_text);
        cr_expect(atoll(s + strlen("chunks fed, ")) > 0, "%s: nothing skipped: %s", methods[mi], out_text);
        int64_t *a = load_i64(ap, B, N), *b = load_i64(bp, B, N);
        for (int64_t i = 0; i < B * N; i++)
            cr_expect_eq(a[i], b[i], "%s token %lld", methods[mi], (long long)i);
        free(a);
        free(b);
    }
    free(W);
    free(H);
}

Test(cli, streaming_refuses_what_it_cannot_do)
{
    const int64_t V = 50, s1[1] = {V};
    float *L = random_f32(V, 1.0f, 40);
    const char *lp = tpath("L.npy");
    save(lp, FLS_NPY_F32, 1, s1, L);
    cr_expect_eq(
        run_tool("sample", "--logits", lp, "--stream-chunk", "10", "--method", "unfused-gumbel", NULL), 2);
    cr_expect(strstr(err_text, "streaming supports --method fused and grouped only"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--shards", "2", "--top-p", "0.5", NULL), 2);
    cr_expect(strstr(err_text, "streaming takes no rule (--top-p)"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--early-finalize", NULL), 2);
    cr_expect(strstr(err_text, "needs --weights and --hidden"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--shards", "51", NULL), 2);
    cr_expect(strstr(err_text, "more shards than the V = 50 tokens"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--stream-chunk", "0", NULL), 2);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--group-size", "64", NULL), 2);
    cr_expect(strstr(err_text, "--method grouped only"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--method", "grouped", "--group-size", "48", NULL), 2);
    cr_expect(strstr(err_text, "not a power of two"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--method", "sorted", NULL), 2);
    cr_expect(strstr(err_text, "fused, grouped, unfused-gumbel or unfused-multinomial"), "%s", err_text);
    if (!fls_cuda_available()) { /* streaming runs on both engines; here no GPU */
        cr_expect_neq(run_tool("sample", "--logits", lp, "--stream-chunk", "10", "--device", "cuda", NULL),
                      0);
        cr_expect(strstr(err_text, "cuda") || strstr(err_text, "GPU"), "%s", err_text);
    }
    /* every method gives tokens; the unfused Gumbel baseline the fused one's */
    const char *a = tpath("a.npy"), *b = tpath("b.npy");
    cr_assert_eq(run_tool("sample", "--logits", lp, "--samples", "9", "--out", a, NULL), 0, "%s", err_text);
    cr_assert_eq(
        run_tool("sample", "--logits", lp, "--samples", "9", "--method", "unfused-gumbel", "--out", b, NULL),
        0, "%s", err_text);
    int64_t *ta = load_i64(a, 1, 9), *tb = load_i64(b, 1, 9);
    cr_expect(memcmp(ta, tb, 9 * sizeof *ta) == 0);
    free(ta);
    free(tb);
    cr_assert_eq(run_tool("sample", "--logits", lp, "--samples", "9", "--method", "unfused-multinomial",
                          "--out", b, NULL),
                 0, "%s", err_text);
    cr_expect(strstr(out_text, "method unfused-multinomial"), "%s", out_text);
    free(L);
}

/* ---- the audit of external tokens ---- */

static double u53(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-53;
}

/* N draws per row from softmax(l * scale) restricted to tokens within cut
 * nats of the row's max (cut = INFINITY: none), by inverse CDF in double. */
static int64_t *draw_softmax(const float *L, int64_t B, int64_t V, double scale, double cut, int64_t N,
                             uint64_t seed)
{
    int64_t *t = malloc((size_t)(B * N) * sizeof *t);
    double *p = malloc((size_t)V * sizeof *p);
    rng_state = seed;
    for (int64_t b = 0; b < B; b++) {
        double m = -INFINITY, z = 0.0;
        for (int64_t v = 0; v < V; v++)
            m = fmax(m, (double)L[b * V + v] * scale);
        for (int64_t v = 0; v < V; v++) {
            const double x = (double)L[b * V + v] * scale;
            p[v] = m - x <= cut ? exp(x - m) : 0.0;
            z += p[v];
        }
        for (int64_t n = 0; n < N; n++) {
            double u = u53() * z, acc = 0.0;
            int64_t v = 0;
            while (v < V - 1 && (acc += p[v]) <= u)
                v++;
            while (p[v] == 0.0 && v > 0) /* u at the very end: the last possible token */
                v--;
            t[b * N + n] = v;
        }
    }
    free(p);
    return t;
}

Test(cli, audit_of_external_tokens_passes_exact_and_fails_wrong_samplers)
{
    const int64_t B = 4, V = 64, N = 20000;
    float *L = random_f32(B * V, 3.0f, 41);
    const int64_t ls[2] = {B, V}, ts[2] = {B, N};
    const char *lp = tpath("L.npy"), *tp = tpath("t.npy"), *wp = tpath("wrong.npy"), *js = tpath("a.json");
    save(lp, FLS_NPY_F32, 2, ls, L);

    /* exact tokens from the library: exit 0, the power statement printed */
    cr_assert_eq(run_tool("sample", "--logits", lp, "--temperature", "0.7", "--seed", "8", "--samples",
                          "20000", "--out", tp, NULL),
                 0, "%s", err_text);
    cr_expect_eq(
        run_tool("audit", "--logits", lp, "--tokens", tp, "--temperature", "0.7", "--json", js, NULL), 0,
        "%s%s", out_text, err_text);
    cr_expect(strstr(out_text, "tokens/gof") && strstr(out_text, "tokens/tail15") &&
                  strstr(out_text, "tokens/pairs-draws") && strstr(out_text, "tokens/ties"),
              "%s", out_text);
    cr_expect(strstr(out_text, "with these 80000 draws, a total-variation error >= ") &&
                  strstr(out_text, "would be caught with probability 0.999"),
              "%s", out_text);
    /* (rows that tested nothing here, tails with no mass and ties with no tied logits, are
     * listed as not tested: the verdict is "every tested row passed", not "all pass") */
    cr_expect(strstr(out_text, " 0 failed") &&
                  (strstr(out_text, "all pass") || strstr(out_text, "every tested row passed")),
              "%s", out_text);
    static char text[1 << 18];
    slurp(js, text, sizeof text);
    cr_expect(strstr(text, "\"all_pass\": true") && strstr(text, "\"power\": [") &&
                  strstr(text, "\"groups\": [") && strstr(text, "\"tail\": {\"t\": ["),
              "%s", text);

    /* the temperature applied twice (numpy's softmax(l / T / T)): exit 1 */
    int64_t *w = draw_softmax(L, B, V, 1.0 / (0.7 * 0.7), INFINITY, N, 42);
    save(wp, FLS_NPY_I64, 2, ts, w);
    free(w);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", wp, "--temperature", "0.7", NULL), 1, "%s%s",
                 out_text, err_text);
    cr_expect(strstr(out_text, "FAIL"), "%s", out_text);
    /* an exact sampler at the stated temperature passes (the test's own inverse CDF) */
    w = draw_softmax(L, B, V, 1.0 / 0.7, INFINITY, N, 43);
    save(wp, FLS_NPY_I64, 2, ts, w);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", wp, "--temperature", "0.7", NULL), 0, "%s%s",
                 out_text, err_text);
    /* noise reused across draws: every draw of a row is its first */
    for (int64_t b = 0; b < B; b++)
        for (int64_t n = 1; n < N; n++)
            w[b * N + n] = w[b * N];
    save(wp, FLS_NPY_I64, 2, ts, w);
    free(w);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", wp, "--temperature", "0.7", NULL), 1, "%s%s",
                 out_text, err_text);

    /* a tail cut 9 nats below the head (a truncated candidate list): the 10-nat tail test fails */
    float *Lt = malloc((size_t)(B * V) * sizeof *Lt);
    for (int64_t i = 0; i < B * V; i++)
        Lt[i] = i % V == 0 ? 0.0f : -10.5f;
    save(lp, FLS_NPY_F32, 2, ls, Lt);
    w = draw_softmax(Lt, B, V, 1.0, 9.0, N, 44);
    save(wp, FLS_NPY_I64, 2, ts, w);
    free(w);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", wp, NULL), 1, "%s%s", out_text, err_text);
    const char *t10 = strstr(out_text, "tokens/tail10");
    cr_expect(t10 && strstr(t10, "FAIL"), "%s", out_text);
    w = draw_softmax(Lt, B, V, 1.0, INFINITY, N, 45);
    save(wp, FLS_NPY_I64, 2, ts, w);
    free(w);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", wp, NULL), 0, "%s%s", out_text, err_text);
    free(Lt);
    free(L);
}

/* Rows that test nothing are "untested", never passes: one draw per row has no pairs of draws,
 * logits without ties no tie class, a tail with no token below it nothing to count. The exit
 * status is 0 while every tested row passes, 1 when one fails; the JSON gives each row's verdict. */
Test(cli, audit_rows_that_test_nothing_are_not_passes)
{
    const int64_t B = 4, V = 64, N = 1, ls[2] = {B, V}, ts[2] = {B, N};
    float *L = malloc((size_t)(B * V) * sizeof *L);
    for (int64_t i = 0; i < B * V; i++)
        L[i] = -0.05f * (float)(i % V); /* distinct logits, 3.15 nats from head to last: no tail, no ties */
    const char *lp = tpath("L.npy"), *tp = tpath("t.npy"), *js = tpath("a.json");
    save(lp, FLS_NPY_F32, 2, ls, L);
    int64_t tok[4] = {0, 5, 17, 63};
    save(tp, FLS_NPY_I64, 2, ts, tok);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", tp, "--json", js, NULL), 0, "%s%s", out_text,
                 err_text);
    const char *untested[6] = {"tokens/pairs-draws", "tokens/ties",   "tokens/tail10",
                               "tokens/tail15",      "tokens/tail20", "tokens/tail25"};
    for (int k = 0; k < 6; k++) {
        const char *line = strstr(out_text, untested[k]);
        cr_assert(line, "%s missing: %s", untested[k], out_text);
        const char *eol = strchr(line, '\n');
        char buf[512];
        snprintf(buf, sizeof buf, "%.*s", (int)(eol ? eol - line : 200), line);
        cr_expect(strstr(buf, " untested ") && strstr(buf, "not tested: ") && !strstr(buf, " pass "), "%s",
                  buf);
    }
    cr_expect(strstr(out_text, "7 tests: 1 passed, 0 failed, 6 not tested") &&
                  strstr(out_text, "every tested row passed (6 not tested: not counted as passes)") &&
                  !strstr(out_text, "all pass"),
              "%s", out_text);
    static char text[1 << 18];
    slurp(js, text, sizeof text);
    cr_expect(strstr(text, "\"verdict\": \"pass\", \"passed\": 1, \"failed\": 0, \"untested\": 6"), "%s",
              text);
    const char *pd = strstr(text, "{\"test\": \"tokens/pairs-draws\"");
    cr_assert(pd, "%s", text);
    cr_expect(!strncmp(strstr(pd, "\"pass\": "),
                       "\"pass\": false, \"verdict\": \"untested\", \"untested\": true", 52),
              "%s", pd);
    cr_expect(strstr(pd, "\"p\": null"), "p is NaN: %s", pd);
    const char *gof = strstr(text, "{\"test\": \"tokens/gof\"");
    cr_expect(gof && strstr(gof, "\"pass\": true, \"verdict\": \"pass\", \"untested\": false"), "%s", text);

    /* a token outside the support (a masked one) fails every row that counts samples (gof, and
     * the tails: a sample that fails outright fails them whatever their mass); pairs and ties stay
     * untested */
    L[2 * V + 40] = -INFINITY;
    save(lp, FLS_NPY_F32, 2, ls, L);
    tok[2] = 40;
    save(tp, FLS_NPY_I64, 2, ts, tok);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", tp, "--json", js, NULL), 1, "%s%s", out_text,
                 err_text);
    cr_expect(strstr(out_text, "7 tests: 0 passed, 5 failed, 2 not tested") && strstr(out_text, "FAILED"),
              "%s", out_text);
    slurp(js, text, sizeof text);
    cr_expect(strstr(text, "\"verdict\": \"fail\", \"passed\": 0, \"failed\": 5, \"untested\": 2") &&
                  strstr(text, "\"all_pass\": false"),
              "%s", text);

    /* a token outside [0, V) is bad input, not a sample: exit 2 naming the first (row, draw,
     * value) and how many, and no test reported */
    tok[2] = 64;
    tok[3] = -1;
    save(tp, FLS_NPY_I64, 2, ts, tok);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", tp, NULL), 2, "%s%s", out_text, err_text);
    cr_expect(strstr(err_text, "2 token(s) out of range [0, V = 64)") &&
                  strstr(err_text, "the first at row 2, draw 0: 64"),
              "%s", err_text);
    cr_expect(!strstr(out_text, "tests:"), "tests reported on invalid tokens: %s", out_text);
    tok[3] = 63;

    /* two draws per row: pairs-draws is tested */
    const int64_t ts2[2] = {B, 2};
    int64_t tok2[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    save(tp, FLS_NPY_I64, 2, ts2, tok2);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", tp, NULL), 0, "%s%s", out_text, err_text);
    const char *line = strstr(out_text, "tokens/pairs-draws");
    cr_expect(line && !strncmp(strstr(line, "e-05 ") + 5, "pass ", 5), "%s", out_text);
    free(L);
}

Test(cli, audit_of_external_tokens_under_rules)
{
    const int64_t B = 3, V = 50, N = 20000, K = 3;
    float *L = random_f32(B * V, 3.0f, 46);
    const int64_t ls[2] = {B, V}, ts3[3] = {B, N, K};
    const char *lp = tpath("L.npy"), *tp = tpath("t.npy"), *up = tpath("u.npy"), *wp = tpath("w.npy");
    save(lp, FLS_NPY_F32, 2, ls, L);
    cr_assert_eq(run_tool("sample", "--logits", lp, "--samples", "20000", "--top-k", "7", "--top-p", "0.9",
                          "--out", tp, NULL),
                 0, "%s", err_text);
    cr_assert_eq(run_tool("sample", "--logits", lp, "--samples", "20000", "--seed", "2", "--out", up, NULL),
                 0, "%s", err_text);
    /* the rule's tokens pass against the rule; without it, or unfiltered tokens against it, fail */
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", tp, "--top-k", "7", "--top-p", "0.9", NULL), 0,
                 "%s%s", out_text, err_text);
    cr_expect(strstr(out_text, "rule: top-k 7, top-p 0.9"), "%s", out_text);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", tp, NULL), 1, "%s", out_text);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", up, "--top-k", "7", "--top-p", "0.9", NULL), 1,
                 "%s", out_text);
    cr_expect(strstr(out_text, "tokens/boundary") && strstr(out_text, "FAIL"), "%s", out_text);
    /* top-k off by one (k + 1) fails against k */
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", tp, "--top-k", "6", "--top-p", "0.9", NULL), 1,
                 "%s", out_text);

    /* without replacement: (B, N, K) tuples, every position given the earlier ones */
    cr_assert_eq(run_tool("sample", "--logits", lp, "--samples", "20000", "--min-p", "0.01",
                          "--without-replacement", "3", "--out", tp, NULL),
                 0, "%s", err_text);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", tp, "--min-p", "0.01", "--without-replacement",
                          "3", NULL),
                 0, "%s%s", out_text, err_text);
    cr_expect(strstr(out_text, "tokens/pl-cond") && strstr(out_text, "tokens/pl-tuples") &&
                  strstr(out_text, "tokens/boundary"),
              "%s", out_text);
    /* positions 1..K-1 drawn with replacement (independent draws): caught */
    int64_t *one = draw_softmax(L, B, V, 1.0, log(100.0), N * K, 47),
            *w = malloc((size_t)(B * N * K) * sizeof *w);
    for (int64_t i = 0; i < B * N * K; i++)
        w[i] = one[i];
    save(wp, FLS_NPY_I64, 3, ts3, w);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", wp, "--min-p", "0.01", "--without-replacement",
                          "3", NULL),
                 1, "%s%s", out_text, err_text);
    const char *s = strstr(out_text, "tokens/pl-cond");
    cr_expect(s && strstr(s, "FAIL"), "%s", out_text);
    free(one);
    free(w);
    free(L);
}

Test(cli, audit_of_external_tokens_bad_input_exits_2)
{
    const int64_t B = 2, V = 10, N = 5, ls[2] = {B, V}, ts[2] = {B, N}, tbad[2] = {B + 1, N}, bs[1] = {3};
    float *L = random_f32(B * V, 1.0f, 48);
    int64_t tok[15] = {0};
    const char *lp = tpath("L.npy"), *tp = tpath("t.npy"), *bp = tpath("bad.npy"), *fp = tpath("f.npy");
    save(lp, FLS_NPY_F32, 2, ls, L);
    save(tp, FLS_NPY_I64, 2, ts, tok);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", tpath("none.npy"), NULL), 2);
    cr_expect(strstr(err_text, "--tokens") && strstr(err_text, "cannot open"), "%s", err_text);
    save(bp, FLS_NPY_I64, 2, tbad, tok);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", bp, NULL), 2);
    cr_expect(strstr(err_text, "expected (B, N) = (2, N)"), "%s", err_text);
    save(bp, FLS_NPY_F32, 2, ts, L);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", bp, NULL), 2);
    cr_expect(strstr(err_text, "int64"), "%s", err_text);
    const int64_t t3[3] = {B, N, 1};
    save(bp, FLS_NPY_I64, 3, t3, tok);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", bp, NULL), 2);
    cr_expect(strstr(err_text, "--without-replacement"), "%s", err_text);
    L[3] = NAN;
    save(bp, FLS_NPY_F32, 2, ls, L);
    cr_expect_eq(run_tool("audit", "--logits", bp, "--tokens", tp, NULL), 2);
    cr_expect(strstr(err_text, "NaN at row 0, column 3"), "%s", err_text);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", tp, "--temperature", "-1", NULL), 2);
    const float tr[3] = {1.0f, 1.0f, 1.0f};
    save(fp, FLS_NPY_F32, 1, bs, tr);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", tp, "--temperature-per-row", fp, NULL), 2);
    cr_expect(strstr(err_text, "expected shape (2,)"), "%s", err_text);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", tp, "--temperature", "1",
                          "--temperature-per-row", fp, NULL),
                 2);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", tp, "--top-k", "11", NULL), 2);
    cr_expect(strstr(err_text, "top-k is 0 (off) to V = 10"), "%s", err_text);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", tp, "--quick", NULL), 2);
    cr_expect_eq(run_tool("audit", "--tokens", tp, NULL), 2);
    cr_expect(strstr(err_text, "needs both --logits"), "%s", err_text);
    cr_expect_eq(run_tool("audit", "--quick", "--top-k", "3", NULL), 2);
    cr_expect(strstr(err_text, "applies to the audit of external tokens"), "%s", err_text);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", tp, "--json", lp, NULL), 2);
    cr_expect(strstr(err_text, "refusing to overwrite an input"), "%s", err_text);
    /* --report without a python that has matplotlib: exit 2 before the audit, a clear message */
    setenv("FLASHSAMPLE_PYTHON", "/bin/false", 1);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", tp, "--report", tpath("rep"), NULL), 2);
    cr_expect(strstr(err_text, "cannot import matplotlib"), "%s", err_text);
    setenv("FLASHSAMPLE_PYTHON", tpath("no-such-python"), 1);
    cr_expect_eq(run_tool("audit", "--logits", lp, "--tokens", tp, "--report", tpath("rep"), NULL), 2);
    cr_expect(strstr(err_text, "is not an executable file"), "%s", err_text);
    unsetenv("FLASHSAMPLE_PYTHON");
    cr_expect(!exists(tpath("rep")));
    free(L);
}

Test(cli, audit_report_writes_markdown_and_figures)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1");
    if (system(cmd) != 0)
        cr_skip_test("no /usr/bin/python3 with matplotlib (bash tools/setup-deps.sh installs it)");
    const int64_t B = 2, V = 40, ls[2] = {B, V};
    float *L = random_f32(B * V, 2.0f, 49);
    const char *lp = tpath("L.npy"), *tp = tpath("t.npy"), *rp = tpath("report");
    save(lp, FLS_NPY_F32, 2, ls, L);
    cr_assert_eq(run_tool("sample", "--logits", lp, "--samples", "5000", "--out", tp, NULL), 0, "%s",
                 err_text);
    cr_assert_eq(run_tool("audit", "--logits", lp, "--tokens", tp, "--report", rp, NULL), 0, "%s%s", out_text,
                 err_text);
    const char *files[5] = {"report.md", "audit.json", "fig_bins.png", "fig_tail.png", "fig_pvalues.png"};
    for (int k = 0; k < 5; k++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", rp, files[k]);
        cr_expect(exists(p), "%s missing", p);
    }
    static char md[1 << 16];
    char p[600];
    snprintf(p, sizeof p, "%s/report.md", rp);
    slurp(p, md, sizeof md);
    cr_expect(strstr(md, "would be caught with probability 0.999") && strstr(md, "![tail](fig_tail.png)") &&
                  strstr(md, "| tokens/gof |"),
              "%s", md);
    free(L);
}

/* ---- inputs and outputs larger than memory ---- */

Test(cli, inputs_and_outputs_larger_than_memory_are_refused_clearly)
{
    skip_if_asan();
    /* a sparse 8 GiB float32 file under a 2 GiB address-space limit: refused
     * before anything is allocated, with both sizes and the limit named */
    const char *big = tpath("big.npy");
    const int64_t n = (int64_t)1 << 31, s1[1] = {n};
    char dict[128];
    int k = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld,), }",
                     (long long)n);
    size_t hl = (10 + (size_t)k + 1 + 63) / 64 * 64 - 10;
    FILE *fp = fopen(big, "wb");
    cr_assert_not_null(fp);
    fwrite("\x93NUMPY\x01\x00", 1, 8, fp);
    fputc((int)(hl & 0xff), fp);
    fputc((int)(hl >> 8), fp);
    for (size_t i = 0; i < hl; i++)
        fputc(i < (size_t)k ? dict[i] : i + 1 == hl ? '\n' : ' ', fp);
    fclose(fp);
    cr_assert_eq(truncate(big, (off_t)(10 + hl) + (off_t)n * 4), 0);
    (void)s1;
    cr_expect_eq(run_tool_limited(2048 * 1024, "sample", "--logits", big, NULL), 1);
    cr_expect(strstr(err_text, "too large to load") && strstr(err_text, "8.00 GiB is more than the") &&
                  strstr(err_text, "ulimit -v"),
              "%s", err_text);
    cr_expect_eq(run_tool_limited(2048 * 1024, "audit", "--logits", big, "--tokens", big, NULL), 2);
    cr_expect(strstr(err_text, "too large to load"), "%s", err_text);
    unlink(big);

    /* B x N tokens beyond memory: said before sampling, --counts suggested */
    const int64_t ls[2] = {3, 10};
    float *L = random_f32(30, 1.0f, 50);
    const char *lp = tpath("L.npy"), *tp = tpath("t.npy");
    save(lp, FLS_NPY_F32, 2, ls, L);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--samples", "4294967295", "--without-replacement", "10",
                          "--out", tp, NULL),
                 1);
    cr_expect(strstr(err_text, "do not fit") && strstr(err_text, "without --out, --counts needs far less"),
              "%s", err_text);
    cr_expect(!exists(tp));
    cr_expect_eq(tmp_files(), 0);
    free(L);
}

/* ---- masks, logit bias and penalties (docs/RULES.md) ---- */

/* A path in tmpdir in a buffer of the caller's (tpath keeps only 8). */
static const char *own_path(char *buf, const char *name)
{
    snprintf(buf, 512, "%s/%s", tmpdir, name);
    return buf;
}

/* The mask words of B rows that allow exactly token keep[b]. */
static int32_t *one_token_mask(const int64_t *keep, int64_t B, int64_t W)
{
    int32_t *m = calloc((size_t)(B * W), sizeof *m);
    for (int64_t b = 0; b < B; b++)
        m[b * W + keep[b] / 32] = (int32_t)(1u << (keep[b] % 32));
    return m;
}

Test(cli, mask_bias_and_penalty_flags_give_the_api_tokens)
{
    static char pb[16][512];
    const int64_t B = 3, V = 100, N = 8, W = 5; /* W > ceil(V / 32) = 4: a padded row stride */
    float *L = random_f32(B * V, 4.0f, 41);
    const int64_t ls[2] = {B, V}, ms[2] = {B, W}, bs[1] = {B}, ks[2] = {B, 2}, ss[2] = {B, 3};
    const char *lp = own_path(pb[0], "L.npy"), *mp = own_path(pb[1], "mask.npy"),
               *rp = own_path(pb[2], "rows.npy"), *ip = own_path(pb[3], "ids.npy"),
               *vp = own_path(pb[4], "vals.npy"), *sp = own_path(pb[5], "seen.npy"),
               *cp = own_path(pb[6], "cnt.npy"), *pp = own_path(pb[7], "rep.npy"),
               *tp = own_path(pb[8], "t.npy");
    save(lp, FLS_NPY_F32, 2, ls, L);

    /* a mask that leaves one token per row gives that token, every draw (31: the sign bit) */
    const int64_t keep[3] = {31, 64, 99};
    int32_t *mask = one_token_mask(keep, B, W);
    save(mp, FLS_NPY_I32, 2, ms, mask);
    cr_assert_eq(run_tool("sample", "--logits", lp, "--allowed-bitmask", mp, "--samples", "8",
                          "--temperature", "2", "--out", tp, NULL),
                 0, "%s", err_text);
    cr_expect(strstr(out_text, "logits changed by: allowed-token mask"), "%s", out_text);
    int64_t *got = load_i64(tp, B, N);
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < N; j++)
            cr_expect_eq(got[b * N + j], keep[b], "row %lld draw %lld: %lld", (long long)b, (long long)j,
                         (long long)got[b * N + j]);
    free(got);

    /* a bias of +1000 makes its token the certain winner (noise is at most 45.1): token 17 in row 0,
     * 50 in row 2 (row 1 has padding and a small bias); -1 is padding */
    const int64_t ids[6] = {17, -1, -1, 3, 50, 60};
    const float vals[6] = {1000.0f, 0.0f, 0.0f, 2.0f, 1000.0f, -5.0f};
    save(ip, FLS_NPY_I64, 2, ks, ids);
    save(vp, FLS_NPY_F32, 2, ks, vals);
    cr_assert_eq(run_tool("sample", "--logits", lp, "--logit-bias-ids", ip, "--logit-bias-values", vp,
                          "--samples", "8", "--out", tp, NULL),
                 0, "%s", err_text);
    got = load_i64(tp, B, N);
    for (int64_t j = 0; j < N; j++) {
        cr_expect_eq(got[0 * N + j], 17, "row 0 draw %lld: %lld", (long long)j, (long long)got[j]);
        cr_expect_eq(got[2 * N + j], 50, "row 2 draw %lld: %lld", (long long)j, (long long)got[2 * N + j]);
    }
    free(got);

    /* everything at once, with rules, against the API: bit-identical tokens */
    const uint8_t rows[3] = {1, 0, 1};
    const int64_t seen[9] = {5, 6, -1, 50, 7, 8, -1, -1, 99};
    const int32_t cnt[9] = {0, 3, 0, 1, 2, 0, 0, 0, 4};
    const float rep[3] = {1.5f, 1.0f, 0.7f};
    save(rp, FLS_NPY_U8, 1, bs, rows);
    save(sp, FLS_NPY_I64, 2, ss, seen);
    save(cp, FLS_NPY_I32, 2, ss, cnt);
    save(pp, FLS_NPY_F32, 1, bs, rep);
    /* the mask of the combined case allows every token but 0..9 in rows 0 and 2 */
    for (int64_t i = 0; i < B * W; i++)
        mask[i] = (i % W == 0) ? (int32_t)~0x3ffu : -1;
    save(mp, FLS_NPY_I32, 2, ms, mask);
    cr_assert_eq(run_tool("sample", "--logits", lp, "--seed", "9", "--offset", "4", "--samples", "8",
                          "--temperature", "0.8", "--top-k", "20", "--allowed-bitmask", mp, "--bitmask-rows",
                          rp, "--logit-bias-ids", ip, "--logit-bias-values", vp, "--seen-ids", sp,
                          "--seen-counts", cp, "--repetition-penalty-per-row", pp, "--presence-penalty",
                          "0.5", "--frequency-penalty", "0.25", "--out", tp, NULL),
                 0, "%s", err_text);
    got = load_i64(tp, B, N);
    fls_context_t *ctx = cpu_ctx();
    fls_matrix m = {L, FLS_DTYPE_F32, B, V, V};
    fls_params p;
    fls_params_default(&p);
    p.seed = 9;
    p.offset = 4;
    p.draws = N;
    p.temperature_value = 0.8f;
    p.top_k = 20;
    p.allowed_bitmask = mask;
    p.bitmask_ld = W;
    p.bitmask_rows = rows;
    p.logit_bias_ids = ids;
    p.logit_bias_values = vals;
    p.logit_bias_k = 2;
    p.seen_ids = seen;
    p.seen_counts = cnt;
    p.seen_k = 3;
    p.row_repetition_penalty = rep;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    int64_t want[24];
    fls_outputs out = {want, NULL, NULL};
    cr_assert_eq(fls_sample_logits(ctx, &m, &p, &out), FLS_OK);
    for (int64_t i = 0; i < B * N; i++)
        cr_expect_eq(got[i], want[i], "token %lld: tool %lld, api %lld", (long long)i, (long long)got[i],
                     (long long)want[i]);
    free(got);

    /* the fused path with a penalty and a bias */
    const int64_t D = 8, ws[2] = {V, D}, hs[2] = {B, D};
    float *Wt = random_f32(V * D, 1.0f, 42), *H = random_f32(B * D, 1.0f, 43);
    const char *wp = own_path(pb[9], "W.npy"), *hp = own_path(pb[10], "H.npy");
    save(wp, FLS_NPY_F32, 2, ws, Wt);
    save(hp, FLS_NPY_F32, 2, hs, H);
    cr_assert_eq(run_tool("sample", "--weights", wp, "--hidden", hp, "--samples", "8", "--seen-ids", sp,
                          "--repetition-penalty", "1.3", "--logit-bias-ids", ip, "--logit-bias-values", vp,
                          "--method", "unfused-gumbel", "--out", tp, NULL),
                 0, "%s", err_text);
    got = load_i64(tp, B, N);
    fls_matrix mw = {Wt, FLS_DTYPE_F32, V, D, D}, mh = {H, FLS_DTYPE_F32, B, D, D};
    fls_params_default(&p);
    p.draws = N;
    p.method = FLS_METHOD_UNFUSED_GUMBEL;
    p.seen_ids = seen;
    p.seen_k = 3;
    p.repetition_penalty = 1.3f;
    p.logit_bias_ids = ids;
    p.logit_bias_values = vals;
    p.logit_bias_k = 2;
    cr_assert_eq(fls_sample_fused(ctx, &mw, &mh, &p, &out), FLS_OK);
    for (int64_t i = 0; i < B * N; i++)
        cr_expect_eq(got[i], want[i], "fused token %lld", (long long)i);
    free(got);
    fls_context_destroy(ctx);
    free(Wt);
    free(H);
    free(mask);
    free(L);
}

Test(cli, mask_bias_and_penalty_errors_say_what_and_write_nothing)
{
    static char pb[32][512];
    const int64_t B = 2, V = 40, ls[2] = {B, V}, ks[2] = {B, 2}, k3[2] = {B, 3}, ms[2] = {B, 1}, bs[1] = {B};
    float *L = random_f32(B * V, 1.0f, 44);
    const char *lp = own_path(pb[11], "L.npy"), *ip = own_path(pb[12], "ids.npy"),
               *vp = own_path(pb[13], "vals.npy"), *v3 = own_path(pb[14], "v3.npy"),
               *mp = own_path(pb[15], "mask.npy"), *sp = own_path(pb[16], "seen.npy"),
               *cp = own_path(pb[17], "cnt.npy"), *pp = own_path(pb[18], "rep.npy"),
               *tp = own_path(pb[19], "t.npy");
    save(lp, FLS_NPY_F32, 2, ls, L);
    const float vals[4] = {1.0f, 2.0f, 3.0f, 4.0f}, vals3[6] = {0};
    save(vp, FLS_NPY_F32, 2, ks, vals);
    save(v3, FLS_NPY_F32, 2, k3, vals3);

    /* a bad id: the library's explanation (fls_params_explain), the flag, exit 2, nothing written */
    const int64_t bad_ids[4] = {3, -1, 7, 40};
    save(ip, FLS_NPY_I64, 2, ks, bad_ids);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--logit-bias-ids", ip, "--logit-bias-values", vp,
                          "--out", tp, NULL),
                 2);
    cr_expect(
        strstr(err_text, "--logit-bias-ids: logit_bias_ids = 40 (row 1) is out of range: 0 .. V - 1 = 39"),
        "%s", err_text);
    cr_expect(!exists(tp), "an output was written");
    cr_expect_eq(tmp_files(), 0);
    write_old(tp);
    const int entries = dir_entries();
    cr_expect_eq(run_tool("sample", "--logits", lp, "--logit-bias-ids", ip, "--logit-bias-values", vp,
                          "--out", tp, NULL),
                 2);
    expect_untouched(tp, entries);

    /* an id twice in a row, a non-finite bias, a negative count, penalties out of range */
    const int64_t dup_ids[4] = {3, 3, 7, 8}, ok_ids[4] = {3, 4, 7, 8};
    save(ip, FLS_NPY_I64, 2, ks, dup_ids);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--logit-bias-ids", ip, "--logit-bias-values", vp,
                          "--out", tp, NULL),
                 2);
    cr_expect(strstr(err_text, "logit_bias_ids = 3 (row 0) is listed twice"), "%s", err_text);
    save(ip, FLS_NPY_I64, 2, ks, ok_ids);
    const float inf_vals[4] = {1.0f, INFINITY, 0.0f, 0.0f};
    save(vp, FLS_NPY_F32, 2, ks, inf_vals);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--logit-bias-ids", ip, "--logit-bias-values", vp,
                          "--out", tp, NULL),
                 2);
    cr_expect(strstr(err_text, "--logit-bias-values: logit_bias_values = inf (row 0, token 4)"), "%s",
              err_text);
    const int32_t neg[4] = {1, 0, -2, 0};
    save(sp, FLS_NPY_I64, 2, ks, ok_ids);
    save(cp, FLS_NPY_I32, 2, ks, neg);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--seen-ids", sp, "--seen-counts", cp, "--out", tp, NULL),
                 2);
    cr_expect(strstr(err_text, "--seen-counts: seen_counts = -2 (row 1, token 7)"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--repetition-penalty", "-1", "--out", tp, NULL), 2);
    cr_expect(strstr(err_text, "--repetition-penalty: repetition_penalty = -1 is out of range"), "%s",
              err_text);
    const float rep[2] = {1.0f, 0.0f};
    save(pp, FLS_NPY_F32, 1, bs, rep);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--repetition-penalty-per-row", pp, "--out", tp, NULL),
                 2);
    cr_expect(strstr(err_text, "--repetition-penalty-per-row: repetition_penalty = 0") &&
                  strstr(err_text, "row 1"),
              "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--presence-penalty", "inf", "--out", tp, NULL), 2);
    cr_expect(strstr(err_text, "--presence-penalty"), "%s", err_text);

    /* dtypes and shapes name the flag and the file (exit 1) */
    save(vp, FLS_NPY_F32, 2, ks, vals);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--logit-bias-ids", ip, "--logit-bias-values", v3,
                          "--out", tp, NULL),
                 1);
    cr_expect(strstr(err_text, "--logit-bias-values") && strstr(err_text, "expected shape (2, 2)"), "%s",
              err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--logit-bias-ids", vp, "--logit-bias-values", vp,
                          "--out", tp, NULL),
                 1);
    cr_expect(strstr(err_text, "--logit-bias-ids") && strstr(err_text, "expected int64"), "%s", err_text);
    const int32_t narrow[2] = {-1, -1}; /* 1 word covers 32 < V = 40 tokens */
    save(mp, FLS_NPY_I32, 2, ms, narrow);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--allowed-bitmask", mp, "--out", tp, NULL), 1);
    cr_expect(strstr(err_text, "--allowed-bitmask") && strstr(err_text, "W >= ceil(V / 32) = 2"), "%s",
              err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--allowed-bitmask", ip, "--out", tp, NULL), 1);
    cr_expect(strstr(err_text, "expected int32"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--seen-ids", sp, "--seen-counts", sp, "--out", tp, NULL),
                 1);
    cr_expect(strstr(err_text, "--seen-counts") && strstr(err_text, "expected int32"), "%s", err_text);

    /* a mask that leaves a row nothing: the call's error, nothing written */
    const int32_t none[4] = {-1, -1, 0, 0};
    const int64_t m2[2] = {B, 2};
    save(mp, FLS_NPY_I32, 2, m2, none);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--allowed-bitmask", mp, "--out", tp, NULL), 1);
    cr_expect(strstr(err_text, "no finite logit left"), "%s", err_text);

    /* flags that need another, and streaming that refuses them: usage errors before any work */
    cr_expect_eq(run_tool("sample", "--logits", lp, "--logit-bias-ids", ip, "--out", tp, NULL), 2);
    cr_expect(strstr(err_text, "--logit-bias-ids needs --logit-bias-values"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--seen-counts", cp, "--out", tp, NULL), 2);
    cr_expect(strstr(err_text, "--seen-counts") && strstr(err_text, "--seen-ids"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--bitmask-rows", pp, "--out", tp, NULL), 2);
    cr_expect(strstr(err_text, "--allowed-bitmask"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--stream-chunk", "8", "--seen-ids", sp, NULL), 2);
    cr_expect(strstr(err_text, "streaming takes no mask"), "%s", err_text);
    cr_expect_eq(run_tool("sample", "--logits", lp, "--repetition-penalty", "x", NULL), 2);
    cr_expect(strstr(err_text, "--repetition-penalty"), "%s", err_text);
    /* an output that names one of these inputs */
    cr_expect_eq(run_tool("sample", "--logits", lp, "--seen-ids", sp, "--out", sp, NULL), 2);
    cr_expect(strstr(err_text, "--seen-ids"), "%s", err_text);
    expect_untouched(tp, entries + 4); /* + seen.npy, cnt.npy, rep.npy, mask.npy */
    free(L);
}
