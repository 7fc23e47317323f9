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
#include "npy.h"

#include <criterion/criterion.h>

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tmpdir.h"

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

/* Runs the tool with the NULL-terminated arguments; stdout and stderr land
 * in out_text and err_text. Returns the exit status (-1 if it crashed). */
static int run_tool(const char *arg0, ...)
{
    const char *tool = getenv("FLASHSAMPLE_TOOL");
    cr_assert_not_null(tool, "FLASHSAMPLE_TOOL is not set (run through meson test)");
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)tool;
    va_list ap;
    va_start(ap, arg0);
    for (const char *a = arg0; a; a = va_arg(ap, const char *)) {
        cr_assert(argc < 63);
        argv[argc++] = (char *)a;
    }
    va_end(ap);
    argv[argc] = NULL;
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
        execv(tool, argv);
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
    cr_expect(strstr(err_text, "int64") && strstr(err_text, "expected float32 ('<f4') or float16 ('<f2')"), "%s", err_text);
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
    if (rc == 0)
        cr_expect(strstr(text, "\"all_pass\": true") && !strstr(text, "\"pass\": false"), "%s", text);
    else
        cr_expect(strstr(text, "\"all_pass\": false"), "%s", text);
    cr_expect(strstr(out_text, "chi2") && strstr(out_text, "alpha"), "%s", out_text);
    cr_expect_eq(dir_entries(), 1);
}
