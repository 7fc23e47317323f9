/*
 * gpu_tests.c — the GPU suite (meson suite 'gpu'; tools/gpu-check.sh).
 *
 * A plain C driver (no Criterion, no GSL needed) so that the same binary runs
 * in CI (no GPU: it says so and exits 77, which Meson reports as SKIP) and on
 * the GPU machine, whose image has neither library. When built with
 * FLS_HAVE_AUDIT it also runs the stats/ goodness-of-fit audit on the CUDA
 * engine. Every test compares the GPU engine with the CPU engine (the
 * reference) or with exact probabilities, with guard-filled outputs.
 *
 *   gpu_tests [--quick] [--only NAME]
 */
#include "flashsample.h"
#include "lib/base/fls_noise.h"
#include "lib/front/internal.h"
#ifndef FLS_NO_CUDA_ENGINE
#include "kernels/fls_cuda.h"
#include "tests/gpu/gpu_kat.h"
#endif
#ifdef FLS_HAVE_AUDIT
#include "stats/fls_audit.h"
#include "stats/fls_stats.h"
#include "stats/fls_tokens.h"
#endif
#ifdef FLS_HAVE_NCCL
#include "flashsample_nccl.h"
#include <nccl.h>
#endif

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SKIP_CODE 77

#ifdef FLS_NO_CUDA_ENGINE
int main(void)
{
    printf("SKIP: flashsample was built without the CUDA engine (no nvcc); the gpu suite needs it\n");
    return SKIP_CODE;
}
#else

static int g_fail = 0, g_pass = 0, g_quick = 0;
static const char *g_only = NULL;
static int g_case_fail;

static void failf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("    FAIL: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    g_case_fail = 1;
}

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            failf(__VA_ARGS__);                                                                              \
            return;                                                                                          \
        }                                                                                                    \
    } while (0)

#define CHECK_ST(expr)                                                                                       \
    do {                                                                                                     \
        fls_status st_ = (expr);                                                                             \
        if (st_ != FLS_OK) {                                                                                 \
            failf("%s -> %s (line %d)", #expr, fls_status_string(st_), __LINE__);                            \
            return;                                                                                          \
        }                                                                                                    \
    } while (0)

static void run_test(const char *name, void (*fn)(void))
{
    if (g_only && !strstr(name, g_only))
        return;
    clock_t t0 = clock();
    g_case_fail = 0;
    printf("[ RUN  ] %s\n", name);
    fflush(stdout);
    fn();
    double s = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("[ %s ] %s (%.1f s cpu)\n", g_case_fail ? "FAIL" : " OK ", name, s);
    fflush(stdout);
    if (g_case_fail)
        g_fail++;
    else
        g_pass++;
}

/* ---- helpers ---- */

static uint64_t g_rng = 0x1234567890abcdefull;
static uint64_t rnd(void)
{
    g_rng += 0x9E3779B97F4A7C15ull;
    return fls_splitmix64_(g_rng);
}
static double rndu(void)
{
    return (double)(rnd() >> 11) * 0x1p-53;
}

static fls_context_t *g_cpu, *g_gpu;

typedef struct dev_buf {
    void *p;
    size_t bytes;
} dev_buf;

static void *to_dev(const void *h, size_t bytes)
{
    void *d = NULL;
    if (fls_cuda_malloc(&d, bytes) != FLS_OK)
        return NULL;
    if (fls_cuda_memcpy(d, h, bytes, 1) != FLS_OK) {
        fls_cuda_free(d);
        return NULL;
    }
    return d;
}

static uint16_t enc(float x, fls_dtype dt)
{
    return dt == FLS_DTYPE_BF16 ? fls_f32_to_bf16(x) : fls_f32_to_f16(x);
}

/* A (rows, ld) matrix of dtype with small integers in [-a, a] (exact in every
 * dtype, and every fp32 sum of products is exact, whatever the order). */
static void *make_int_matrix(int64_t rows, int64_t cols, int64_t ld, fls_dtype dt, int a)
{
    size_t es = fls_dtype_size(dt);
    char *m = calloc((size_t)(rows * ld), es);
    if (!m)
        return NULL;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            float x = (float)((int)(rnd() % (uint64_t)(2 * a + 1)) - a);
            if (dt == FLS_DTYPE_F32)
                ((float *)m)[i * ld + j] = x;
            else
                ((uint16_t *)m)[i * ld + j] = enc(x, dt);
        }
    return m;
}

static void *make_rand_matrix(int64_t rows, int64_t cols, int64_t ld, fls_dtype dt, float scale)
{
    size_t es = fls_dtype_size(dt);
    char *m = calloc((size_t)(rows * ld), es);
    if (!m)
        return NULL;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            float x = (float)((rndu() * 2.0 - 1.0) * scale);
            if (dt == FLS_DTYPE_F32)
                ((float *)m)[i * ld + j] = x;
            else
                ((uint16_t *)m)[i * ld + j] = enc(x, dt);
        }
    return m;
}

typedef struct gpu_run_cfg {
    fls_method method;
    fls_cuda_path path;
    int tile_b;
    int64_t chunk_v;
    int force_simt;
    const char *label;
    int no_skip;
} gpu_run_cfg;

/* Every configuration the dispatcher can choose, plus the baselines. */
static const gpu_run_cfg k_cfgs[] = {
    {FLS_METHOD_FUSED, FLS_CUDA_PATH_AUTO, 0, 0, 0, "auto", 0},
    {FLS_METHOD_FUSED, FLS_CUDA_PATH_WGMMA, 16, 0, 0, "wgmma n16", 0},
    {FLS_METHOD_FUSED, FLS_CUDA_PATH_WGMMA, 32, 0, 0, "wgmma n32", 0},
    {FLS_METHOD_FUSED, FLS_CUDA_PATH_WGMMA, 64, 0, 0, "wgmma n64", 0},
    {FLS_METHOD_FUSED, FLS_CUDA_PATH_WGMMA, 128, 0, 0, "wgmma n128", 0},
    {FLS_METHOD_FUSED, FLS_CUDA_PATH_WGMMA, 0, 0, 0, "wgmma no-skip", 1},
    {FLS_METHOD_FUSED, FLS_CUDA_PATH_CHUNKED, 0, 0, 0, "chunked", 0},
    {FLS_METHOD_FUSED, FLS_CUDA_PATH_CHUNKED, 0, 2048, 0, "chunked 2048", 0},
    {FLS_METHOD_FUSED, FLS_CUDA_PATH_CHUNKED, 0, 0, 1, "chunked simt", 0},
    {FLS_METHOD_FUSED, FLS_CUDA_PATH_CHUNKED, 0, 0, 0, "chunked no-skip", 1},
    {FLS_METHOD_UNFUSED_GUMBEL, FLS_CUDA_PATH_AUTO, 0, 0, 0, "unfused gumbel", 0},
};
#define N_CFGS        ((int)(sizeof k_cfgs / sizeof k_cfgs[0]))

/* The fls_cuda_run options of configuration k. */
static fls_cuda_opts cfg_opts(int k)
{
    fls_cuda_opts o;
    fls_cuda_opts_default(&o);
    o.path = k_cfgs[k].path;
    o.tile_b = k_cfgs[k].tile_b;
    o.chunk_v = k_cfgs[k].chunk_v;
    o.force_simt = k_cfgs[k].force_simt;
    o.no_skip = k_cfgs[k].no_skip;
    return o;
}

/* The noise scheme exact_case runs (test_min_first sets FLS_NOISE_MIN_FIRST). */
static fls_noise g_noise = FLS_NOISE_PER_TOKEN;

/* Configuration k of the fused flat method on W, H: B rows, V tokens, draws from draw 0. */
static fls_status run_cfg(int k, const fls_matrix *dW, const fls_matrix *dH, const fls_row_params *rows,
                          int64_t B, int64_t V, int64_t draws, const fls_outputs *out)
{
    fls_request req = {.rows = rows,
                       .batch = B,
                       .vocab = V,
                       .draws = draws,
                       .method = k_cfgs[k].method,
                       .first_draw = 0,
                       .K = 1,
                       .noise = g_noise};
    fls_cuda_opts o = cfg_opts(k);
    return fls_cuda_run(g_gpu, dW, dH, NULL, &req, out, &o);
}

/* Resolve params into a request the way the front end does (for fls_cuda_run). */
static fls_row_params *resolve_rows(const fls_params *p, int64_t B)
{
    fls_row_params *r = calloc((size_t)B, sizeof *r);
    for (int64_t b = 0; r && b < B; b++) {
        r[b].temperature = p->temperature ? p->temperature[b] : p->temperature_value;
        r[b].seed = p->row_seeds ? p->row_seeds[b] : fls_row_seed(p->seed, (uint64_t)b);
        r[b].offset = p->row_offsets ? p->row_offsets[b] : p->offset;
    }
    return r;
}

typedef struct case_spec {
    int64_t V, D, B, ldw, ldh, draws;
    fls_dtype wd, hd;
    int greedy_rows; /* every k-th row T = 0 (0 = none; -1: the extreme temperatures below) */
} case_spec;

/* Temperatures at the edges of the float range that the integer logits of
 * exact_case (|l| <= 144) survive: the lowest inside the key resolution
 * (|l / T| < 2^12), fl(1 / T) at and below the normal range's end (its
 * exact-division fallback), greedy. The overflowing ones are
 * test_temperature_overflow's, the ones beyond the key resolution
 * test_key_resolution's. */
static const float k_extreme_T[] = {0.04f, 0.05f, 0.5f, 0.0f, 3e37f, 1e30f, 0x1p126f, 0x1.8p126f, 2.0f};

/* GPU (every config) vs CPU on exactly computable logits: identical tokens. */
static void exact_case(const case_spec *c, int *mismatch_out)
{
    *mismatch_out = 0;
    g_rng = 77 + (uint64_t)c->V * 31 + (uint64_t)c->D * 7 + (uint64_t)c->B;
    void *W = make_int_matrix(c->V, c->D, c->ldw, c->wd, 3);
    void *H = make_int_matrix(c->B, c->D, c->ldh, c->hd, 2);
    const int64_t n = c->B * c->draws;
    float *temps = malloc(sizeof(float) * (size_t)c->B);
    uint64_t *seeds = malloc(sizeof(uint64_t) * (size_t)c->B),
             *offs = malloc(sizeof(uint64_t) * (size_t)c->B);
    int64_t *tok_cpu = malloc(sizeof(int64_t) * (size_t)n), *tok_gpu = malloc(sizeof(int64_t) * (size_t)n);
    float *lse_cpu = malloc(sizeof(float) * (size_t)c->B), *lse_gpu = malloc(sizeof(float) * (size_t)c->B);
    float *lp_cpu = malloc(sizeof(float) * (size_t)n), *lp_gpu = malloc(sizeof(float) * (size_t)n);
    void *dW = NULL, *dH = NULL, *dtok = NULL, *dlse = NULL, *dlp = NULL;
    if (!W || !H || !temps || !seeds || !offs || !tok_cpu || !tok_gpu || !lse_cpu || !lse_gpu || !lp_cpu ||
        !lp_gpu) {
        failf("out of host memory");
        goto done;
    }
    for (int64_t b = 0; b < c->B; b++) {
        if (c->greedy_rows < 0)
            temps[b] = k_extreme_T[b % (int64_t)(sizeof k_extreme_T / sizeof k_extreme_T[0])];
        else
            temps[b] = (c->greedy_rows && b % c->greedy_rows == 0) ? 0.0f : (float)(0.3 + 1.7 * rndu());
        seeds[b] = rnd();
        offs[b] = rnd() % 1000;
    }
    fls_params p;
    fls_params_default(&p);
    p.temperature = temps;
    p.row_seeds = seeds;
    p.row_offsets = offs;
    p.draws = c->draws;
    p.noise = g_noise;
    fls_matrix Wm = {W, c->wd, c->V, c->D, c->ldw}, Hm = {H, c->hd, c->B, c->D, c->ldh};
    fls_outputs oc = {tok_cpu, lse_cpu, lp_cpu};
    fls_status st = fls_sample_fused(g_cpu, &Wm, &Hm, &p, &oc);
    if (st != FLS_OK) {
        failf("CPU engine: %s", fls_status_string(st));
        goto done;
    }
    size_t es_w = fls_dtype_size(c->wd), es_h = fls_dtype_size(c->hd);
    dW = to_dev(W, (size_t)(c->V * c->ldw) * es_w);
    dH = to_dev(H, (size_t)(c->B * c->ldh) * es_h);
    fls_cuda_malloc(&dtok, sizeof(int64_t) * (size_t)n);
    fls_cuda_malloc(&dlse, sizeof(float) * (size_t)c->B);
    fls_cuda_malloc(&dlp, sizeof(float) * (size_t)n);
    if (!dW || !dH || !dtok || !dlse || !dlp) {
        failf("device allocation");
        goto done;
    }
    fls_matrix dWm = {dW, c->wd, c->V, c->D, c->ldw}, dHm = {dH, c->hd, c->B, c->D, c->ldh};
    fls_row_params *rows = resolve_rows(&p, c->B);
    for (int k = 0; k < N_CFGS; k++) {
        fls_outputs og = {(int64_t *)dtok, (float *)dlse, (float *)dlp};
        for (int64_t i = 0; i < n; i++)
            tok_gpu[i] = -7;
        fls_cuda_memcpy(dtok, tok_gpu, sizeof(int64_t) * (size_t)n, 1);
        st = k == 0 ? fls_sample_fused(g_gpu, &dWm, &dHm, &p, &og)
                    : run_cfg(k, &dWm, &dHm, rows, c->B, c->V, c->draws, &og);
        if (st != FLS_OK) {
            failf("V=%lld D=%lld B=%lld %s: %s", (long long)c->V, (long long)c->D, (long long)c->B,
                  k_cfgs[k].label, fls_status_string(st));
            break;
        }
        fls_cuda_memcpy(tok_gpu, dtok, sizeof(int64_t) * (size_t)n, 0);
        fls_cuda_memcpy(lse_gpu, dlse, sizeof(float) * (size_t)c->B, 0);
        fls_cuda_memcpy(lp_gpu, dlp, sizeof(float) * (size_t)n, 0);
        int64_t mism = 0, first = -1;
        for (int64_t i = 0; i < n; i++)
            if (tok_gpu[i] != tok_cpu[i]) {
                if (first < 0)
                    first = i;
                mism++;
            }
        double lse_err = 0, lp_err = 0;
        for (int64_t b = 0; b < c->B; b++) {
            double e = fabs((double)lse_gpu[b] - lse_cpu[b]) / fmax(1.0, fabs(lse_cpu[b]));
            lse_err = fmax(lse_err, e);
        }
        for (int64_t i = 0; i < n; i++) {
            double e = fabs((double)lp_gpu[i] - lp_cpu[i]) / fmax(1.0, fabs(lp_cpu[i]));
            lp_err = fmax(lp_err, e);
        }
        if (mism) {
            *mismatch_out += (int)mism;
            failf("V=%lld D=%lld ld=%lld/%lld B=%lld %s/%s %s: %lld of %lld tokens differ (first: %lld gpu "
                  "%lld cpu %lld)",
                  (long long)c->V, (long long)c->D, (long long)c->ldw, (long long)c->ldh, (long long)c->B,
                  fls_dtype_name(c->wd), fls_dtype_name(c->hd), k_cfgs[k].label, (long long)mism,
                  (long long)n, (long long)first, (long long)tok_gpu[first], (long long)tok_cpu[first]);
        }
        if (lse_err > 2e-5 || lp_err > 2e-5)
            failf("V=%lld B=%lld %s: logsumexp rel err %.3g, logprob err %.3g", (long long)c->V,
                  (long long)c->B, k_cfgs[k].label, lse_err, lp_err);
    }
    free(rows);
done:
    fls_cuda_free(dW);
    fls_cuda_free(dH);
    fls_cuda_free(dtok);
    fls_cuda_free(dlse);
    fls_cuda_free(dlp);
    free(W);
    free(H);
    free(temps);
    free(seeds);
    free(offs);
    free(tok_cpu);
    free(tok_gpu);
    free(lse_cpu);
    free(lse_gpu);
    free(lp_cpu);
    free(lp_gpu);
}

/* ---- tests ---- */

static void test_philox_curand(void)
{
    const int64_t n = 1 << 16;
    uint32_t *c = malloc(16 * n), *k = malloc(8 * n), *out = malloc(16 * n);
    CHECK(c && k && out, "host memory");
    for (int64_t i = 0; i < 4 * n; i++)
        c[i] = (uint32_t)rnd();
    for (int64_t i = 0; i < 2 * n; i++)
        k[i] = (uint32_t)rnd();
    c[0] = c[1] = c[2] = c[3] = k[0] = k[1] = 0;
    c[4] = c[5] = c[6] = c[7] = k[2] = k[3] = 0xffffffffu;
    fls_status st = fls_cuda_philox_blocks(c, k, n, out);
    int64_t bad = 0;
    for (int64_t i = 0; st == FLS_OK && i < n; i++) {
        fls_philox_block r = fls_philox4x32_10(c + 4 * i, k + 2 * i);
        bad += memcmp(r.r, out + 4 * i, 16) != 0;
    }
    free(c);
    free(k);
    free(out);
    CHECK(st == FLS_OK, "fls_cuda_philox_blocks: %s", fls_status_string(st));
    CHECK(bad == 0, "%lld of %lld cuRAND Philox blocks differ from fls_philox4x32_10", (long long)bad,
          (long long)n);
}

static void test_gumbel_bits(void)
{
    const int64_t n = 1 << 18;
    uint64_t *s = malloc(8 * n), *o = malloc(8 * n), *t = malloc(8 * n);
    uint32_t *d = malloc(4 * n);
    float *g = malloc(4 * n);
    CHECK(s && o && t && d && g, "host memory");
    for (int64_t i = 0; i < n; i++) {
        s[i] = rnd();
        o[i] = i % 3 ? rnd() % 4096 : rnd();
        d[i] = (uint32_t)(i % 5 ? rnd() % 8 : rnd());
        t[i] = rnd() % (((uint64_t)1 << 33) - 1);
    }
    fls_status st = fls_cuda_gumbel(s, o, d, t, n, g);
    int64_t bad = 0;
    for (int64_t i = 0; st == FLS_OK && i < n; i++) {
        float h = fls_gumbel(s[i], o[i], d[i], t[i]);
        bad += memcmp(&h, &g[i], 4) != 0;
    }
    free(s);
    free(o);
    free(t);
    free(d);
    free(g);
    CHECK(st == FLS_OK, "fls_cuda_gumbel: %s", fls_status_string(st));
    CHECK(bad == 0, "%lld of %lld device Gumbel values differ in bits from the host's", (long long)bad,
          (long long)n);
}

/* The device transform on edge words: both ends of each half, the u == 1
 * branch (1 - U rounds to 1), powers of two, and random words of few bits. */
static void test_gumbel_edge_bits(void)
{
    enum { N = 1 << 16 };
    uint64_t *k = malloc(8 * N);
    float *g = malloc(4 * N);
    CHECK(k && g, "host memory");
    int64_t n = 0;
    const uint64_t fixed[] = {0,
                              1,
                              2,
                              3,
                              0x7fffffffffffffffull,
                              0x8000000000000000ull,
                              0x8000000000000001ull,
                              0xfffffffffffffffeull,
                              0xffffffffffffffffull,
                              0xffffff0000000000ull,
                              0xffffff8000000000ull,
                              0xfffffffeffffffffull,
                              0x00000000ffffffffull,
                              0x0000000100000000ull,
                              0xbfffffffffffffffull,
                              0x4000000000000000ull};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        k[n++] = fixed[i];
    for (int b = 0; b < 64; b++) {
        k[n++] = (uint64_t)1 << b;
        k[n++] = ~((uint64_t)1 << b);
        k[n++] = ((uint64_t)1 << b) - 1;
        k[n++] = ~(((uint64_t)1 << b) - 1);
    }
    while (n < N) {
        uint64_t r = rnd();
        int mode = (int)(n % 4);
        k[n++] =
            mode == 0 ? r : (mode == 1 ? r >> (r % 64) : (mode == 2 ? ~(r >> (r % 64)) : r & rnd() & rnd()));
    }
    fls_status st = fls_cuda_gumbel_bits(k, N, g);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; st == FLS_OK && i < N; i++) {
        float h = fls_gumbel_from_bits(k[i]);
        if (memcmp(&h, &g[i], 4) != 0) {
            bad++;
            if (first < 0)
                first = i;
        }
    }
    uint64_t kf = first >= 0 ? k[first] : 0;
    free(k);
    free(g);
    CHECK(st == FLS_OK, "fls_cuda_gumbel_bits: %s", fls_status_string(st));
    CHECK(bad == 0, "%lld of %d edge words differ (first k = %016llx)", (long long)bad, N,
          (unsigned long long)kf);
}

/* exact_case on each case (the large ones skipped with --quick), one line
 * each; the number of mismatching tokens. */
static int exact_cases(const case_spec *cases, int nc)
{
    int total_mis = 0;
    for (int i = 0; i < nc; i++) {
        if (g_quick && cases[i].V * cases[i].B > 2000000)
            continue;
        int mis = 0;
        exact_case(&cases[i], &mis);
        total_mis += mis;
        printf("    %sV=%-7lld D=%-4lld B=%-5lld draws=%lld %s/%s: %d configs, %s\n",
               g_noise == FLS_NOISE_MIN_FIRST ? "min-first " : "", (long long)cases[i].V,
               (long long)cases[i].D, (long long)cases[i].B, (long long)cases[i].draws,
               fls_dtype_name(cases[i].wd), fls_dtype_name(cases[i].hd), N_CFGS,
               mis ? "MISMATCH" : "identical to the CPU engine");
    }
    return total_mis;
}

static void test_exact_tokens_shapes(void)
{
    /* V not a multiple of the tile, V = 1, odd D, strided rows, B up to 1024 */
    const case_spec cases[] = {
        {1, 16, 1, 16, 16, 3, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 0},
        {17, 24, 3, 24, 24, 4, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 2},
        {17, 13, 2, 13, 13, 2, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 0},   /* D % 8 != 0: fallback */
        {1000, 40, 9, 48, 56, 2, FLS_DTYPE_F16, FLS_DTYPE_F16, 3},   /* strided, aligned */
        {1000, 40, 9, 43, 41, 2, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 0}, /* strided, unaligned */
        {4099, 72, 33, 72, 72, 1, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 5},
        {50257, 72, 5, 72, 72, 2, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 0},
        {50257, 64, 130, 64, 64, 1, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 7},
        {2000, 32, 1024, 32, 32, 1, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 11},
        {3001, 40, 300, 40, 40, 4, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 6}, /* 3 wgmma batch tiles of 128 */
        {4099, 72, 3, 72, 72, 40, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 2},  /* > 32 draws: 2 wgmma passes */
        {3001, 24, 11, 24, 24, 2, FLS_DTYPE_BF16, FLS_DTYPE_BF16, -1}, /* extreme temperatures */
        {3001, 24, 6, 24, 24, 2, FLS_DTYPE_F32, FLS_DTYPE_F32, 0},
        {3001, 24, 6, 24, 24, 2, FLS_DTYPE_BF16, FLS_DTYPE_F32, 0},
        {151936, 128, 64, 128, 128, 1, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 9},
        {128256, 96, 17, 96, 96, 1, FLS_DTYPE_F16, FLS_DTYPE_F16, 0},
        {201088, 40, 2, 40, 40, 2, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 0},
        /* several K-blocks with a partial last one */
        {20003, 328, 8, 328, 328, 2, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 0},
        {5001, 584, 16, 584, 584, 1, FLS_DTYPE_F16, FLS_DTYPE_F16, 3},
    };
    const int total_mis = exact_cases(cases, (int)(sizeof cases / sizeof cases[0]));
    CHECK(total_mis == 0, "%d mismatching tokens on inputs without near-ties", total_mis);
}

/*
 * The min-first noise scheme: every configuration identical to the CPU
 * engine (whose span reference is the scheme's definition), on the shapes
 * that exercise the wgmma sampler's group blocks (tail tiles, V not a
 * multiple of 64, several batch tiles and passes of draws, greedy and
 * extreme-temperature rows) and the segment sampler's plain loop.
 */
static void test_min_first(void)
{
    const case_spec cases[] = {
        {1, 16, 1, 16, 16, 3, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 0},
        {17, 24, 3, 24, 24, 4, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 2},
        {1000, 40, 9, 48, 56, 2, FLS_DTYPE_F16, FLS_DTYPE_F16, 3},
        {4099, 72, 33, 72, 72, 1, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 5},
        {3001, 40, 300, 40, 40, 4, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 6},
        {4099, 72, 3, 72, 72, 40, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 2},
        {3001, 24, 11, 24, 24, 2, FLS_DTYPE_BF16, FLS_DTYPE_BF16, -1},
        {151936, 128, 64, 128, 128, 1, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 9},
        {50257, 64, 130, 64, 64, 1, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 7},
        {20003, 328, 8, 328, 328, 2, FLS_DTYPE_BF16, FLS_DTYPE_BF16, 0},
    };
    g_noise = FLS_NOISE_MIN_FIRST;
    const int total_mis = exact_cases(cases, (int)(sizeof cases / sizeof cases[0]));
    g_noise = FLS_NOISE_PER_TOKEN;
    CHECK(total_mis == 0, "%d mismatching tokens under the min-first scheme", total_mis);
}

/* The CPU engine's status on bf16 W (V x D) and H (B x D) with per-row
 * temperatures, seed and draws (at most 10 tokens); p gets the parameters. */
static fls_status cpu_fused_status(const void *W, const void *H, int64_t V, int64_t D, int64_t B,
                                   const float *temps, uint64_t seed, int64_t draws, fls_params *p)
{
    fls_params_default(p);
    p->temperature = temps;
    p->seed = seed;
    p->draws = draws;
    int64_t tok[10];
    fls_matrix Wm = {(void *)W, FLS_DTYPE_BF16, V, D, D}, Hm = {(void *)H, FLS_DTYPE_BF16, B, D, D};
    fls_outputs oc = {tok, NULL, NULL};
    return B * draws <= 10 ? fls_sample_fused(g_cpu, &Wm, &Hm, p, &oc) : FLS_ERR_INTERNAL;
}

/*
 * Bad values in the fused paths, each alone in its matrix: a NaN logit, a
 * +inf logit (FLS_ERR_NAN), one finite logit whose l / T overflows to +inf
 * or to -inf (FLS_ERR_TEMPERATURE, with a normal fl(1 / T), so the wgmma
 * sampler takes its division-free bound). The wgmma sampler detects these
 * among its candidates and the -inf overflow in a range check: a single
 * very negative token among zeros is the case a skip test would hide.
 * Every configuration must give the CPU engine's status and leave the
 * outputs as they were.
 */
static void test_fused_bad_values(void)
{
    const int64_t V = 3001, D = 24, B = 5, draws = 2, vbad = 1000;
    const char *names[4] = {"NaN logit", "+inf logit", "l / T -> +inf", "l / T -> -inf"};
    const fls_status want[4] = {FLS_ERR_NAN, FLS_ERR_NAN, FLS_ERR_TEMPERATURE, FLS_ERR_TEMPERATURE};
    int wrong = 0, touched = 0, runs = 0;
    for (int sc = 0; sc < 4; sc++) {
        g_rng = 777 + (uint64_t)sc;
        uint16_t *W = calloc((size_t)(V * D), 2), *H = calloc((size_t)(B * D), 2);
        CHECK(W && H, "host memory");
        /* NaN and +inf: small integers around the bad token; overflow: zeros
         * around one token of 3s (logit +-72 against 0 elsewhere) */
        for (int64_t i = 0; i < V * D; i++)
            W[i] = fls_f32_to_bf16(sc < 2 ? (float)((int)(rnd() % 7) - 3) : 0.0f);
        for (int64_t k = 0; k < D; k++)
            W[vbad * D + k] = fls_f32_to_bf16(sc < 2 ? 1.0f : 3.0f);
        if (sc == 0)
            W[vbad * D + 5] = fls_f32_to_bf16(NAN);
        if (sc == 1)
            W[vbad * D + 5] = fls_f32_to_bf16(INFINITY);
        for (int64_t i = 0; i < B * D; i++)
            H[i] = fls_f32_to_bf16(sc == 3 ? -1.0f : 1.0f);
        float temps[5] = {0.7f, 1.0f, 0.0f, 2.0f, 0.7f};
        if (sc >= 2)
            for (int b = 0; b < B; b++)
                temps[b] = b == 3 ? 1e-37f : 1.0f; /* 1 / T = 1e37 is normal */
        fls_params p;
        const fls_status sc_cpu = cpu_fused_status(W, H, V, D, B, temps, 5, draws, &p);
        CHECK(sc_cpu == want[sc], "%s: the CPU engine gave %s", names[sc], fls_status_string(sc_cpu));
        void *dW = to_dev(W, (size_t)(V * D) * 2), *dH = to_dev(H, (size_t)(B * D) * 2), *dtok = NULL;
        fls_cuda_malloc(&dtok, 10 * sizeof(int64_t));
        CHECK(dW && dH && dtok, "device memory");
        fls_matrix dWm = {dW, FLS_DTYPE_BF16, V, D, D}, dHm = {dH, FLS_DTYPE_BF16, B, D, D};
        fls_row_params *rows = resolve_rows(&p, B);
        CHECK(rows, "host memory");
        for (int k = 0; k < N_CFGS; k++) {
            int64_t guard[10], back[10];
            for (int i = 0; i < 10; i++)
                guard[i] = -3 - i;
            fls_cuda_memcpy(dtok, guard, sizeof guard, 1);
            fls_outputs og = {(int64_t *)dtok, NULL, NULL};
            const fls_status st = run_cfg(k, &dWm, &dHm, rows, B, V, draws, &og);
            fls_cuda_memcpy(back, dtok, sizeof back, 0);
            runs++;
            if (st != want[sc]) {
                wrong++;
                failf("%s, %s: %s, expected %s", names[sc], k_cfgs[k].label, fls_status_string(st),
                      fls_status_string(want[sc]));
            }
            if (memcmp(back, guard, sizeof back) != 0) {
                touched++;
                failf("%s, %s: outputs written despite the error", names[sc], k_cfgs[k].label);
            }
        }
        free(rows);
        fls_cuda_free(dW);
        fls_cuda_free(dH);
        fls_cuda_free(dtok);
        free(W);
        free(H);
    }
    printf(
        "    bad values (NaN, +inf, l / T overflow to +-inf): %d runs, %d wrong status, %d wrote outputs\n",
        runs, wrong, touched);
}

/* A temperature so small that a finite logit's l / T overflows: the CPU
 * engine's FLS_ERR_TEMPERATURE from every GPU configuration, the logits
 * path and the multinomial baseline, with the outputs left as they were. */
static void test_temperature_overflow(void)
{
    const int64_t V = 3001, D = 24, B = 5, draws = 2;
    const float temps[5] = {0.7f, 1.0f, 1e-40f, 0.0f, 2.0f};
    g_rng = 4242;
    void *W = make_int_matrix(V, D, D, FLS_DTYPE_BF16, 3), *H = make_int_matrix(B, D, D, FLS_DTYPE_BF16, 2);
    CHECK(W && H, "host memory");
    fls_params p;
    CHECK(cpu_fused_status(W, H, V, D, B, temps, 99, draws, &p) == FLS_ERR_TEMPERATURE,
          "CPU engine accepted the temperature");
    void *dW = to_dev(W, (size_t)(V * D) * 2), *dH = to_dev(H, (size_t)(B * D) * 2), *dtok = NULL, *dL = NULL;
    fls_cuda_malloc(&dtok, 10 * sizeof(int64_t));
    fls_cuda_malloc(&dL, sizeof(float) * (size_t)(B * V));
    CHECK(dW && dH && dtok && dL, "device memory");
    fls_matrix dWm = {dW, FLS_DTYPE_BF16, V, D, D}, dHm = {dH, FLS_DTYPE_BF16, B, D, D};
    fls_row_params *rows = resolve_rows(&p, B);
    int wrong = 0, touched = 0;
    for (int k = 0; k < N_CFGS + 2; k++) {
        int64_t guard[10];
        for (int i = 0; i < 10; i++)
            guard[i] = -3 - i;
        fls_cuda_memcpy(dtok, guard, sizeof guard, 1);
        fls_outputs og = {(int64_t *)dtok, NULL, NULL};
        fls_status st;
        const char *label;
        if (k < N_CFGS) {
            st = run_cfg(k, &dWm, &dHm, rows, B, V, draws, &og);
            label = k_cfgs[k].label;
        } else {
            /* the logits path and the multinomial baseline, on logits that all fit in float */
            float *L = malloc(sizeof(float) * (size_t)(B * V));
            CHECK(L, "host memory");
            for (int64_t i = 0; i < B * V; i++)
                L[i] = (float)((int64_t)(i * 7919 % 201) - 100);
            fls_cuda_memcpy(dL, L, sizeof(float) * (size_t)(B * V), 1);
            free(L);
            fls_matrix dLm = {dL, FLS_DTYPE_F32, B, V, V};
            fls_params pl = p;
            pl.method = k == N_CFGS ? FLS_METHOD_FUSED : FLS_METHOD_UNFUSED_MULTINOMIAL;
            st = fls_sample_logits(g_gpu, &dLm, &pl, &og);
            label = k == N_CFGS ? "logits" : "logits multinomial";
        }
        int64_t back[10];
        fls_cuda_memcpy(back, dtok, sizeof back, 0);
        if (st != FLS_ERR_TEMPERATURE) {
            wrong++;
            failf("%s: %s, expected the temperature error", label, fls_status_string(st));
        }
        if (memcmp(back, guard, sizeof back) != 0) {
            touched++;
            failf("%s: outputs written despite the error", label);
        }
    }
    printf("    l / T overflow (T = 1e-40): %d configurations, %d wrong status, %d wrote outputs\n",
           N_CFGS + 2, wrong, touched);
    free(rows);
    fls_cuda_free(dW);
    fls_cuda_free(dH);
    fls_cuda_free(dtok);
    fls_cuda_free(dL);
    free(W);
    free(H);
}

/*
 * The key resolution (variants/rule.h): a noisy row whose draw-0 winning
 * key (with a rule: a drawn token's tempered logit) reaches 2^12 in
 * magnitude is FLS_ERR_TEMPERATURE, nothing written; just inside, tokens as
 * the CPU engine's. Logits are exact: W = -180 + (v mod 3) in column 0 and
 * -180 elsewhere (bf16 integers), H = 0.5 (logits near -2160, inside), 1
 * (near -4320, a deep row) or -1 (near +4320), over every configuration,
 * the grouped method (wgmma g = 128, chunked g = 2), a rule (min-p), draws
 * without replacement and the logits path.
 */
static void test_key_resolution(void)
{
    const int64_t V = 3001, D = 24, B = 5, draws = 2;
    const char *names[3] = {"inside (-2160)", "a deep row (-4320)", "a high row (+4320)"};
    const float hrow[3] = {0.5f, 1.0f, -1.0f};
    const fls_status want[3] = {FLS_OK, FLS_ERR_TEMPERATURE, FLS_ERR_TEMPERATURE};
    uint16_t *W = malloc((size_t)(V * D) * 2), *H = malloc((size_t)(B * D) * 2);
    float *L = malloc(sizeof(float) * (size_t)(B * V));
    CHECK(W && H && L, "host memory");
    for (int64_t v = 0; v < V; v++)
        for (int64_t k = 0; k < D; k++)
            W[v * D + k] = fls_f32_to_bf16(k == 0 ? (float)(-180 + (int)(v % 3)) : -180.0f);
    void *dW = to_dev(W, (size_t)(V * D) * 2), *dH = NULL, *dtok = NULL, *dL = NULL;
    fls_cuda_malloc(&dH, (size_t)(B * D) * 2);
    fls_cuda_malloc(&dtok, 10 * sizeof(int64_t));
    fls_cuda_malloc(&dL, sizeof(float) * (size_t)(B * V));
    CHECK(dW && dH && dtok && dL, "device memory");
    const float temps[5] = {0.7f, 1.0f, 0.0f, 1.0f, 2.0f};
    int runs = 0, wrong = 0, touched = 0, differ = 0;
    for (int sc = 0; sc < 3; sc++) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t k = 0; k < D; k++)
                H[b * D + k] = fls_f32_to_bf16(b == 3 ? hrow[sc] : 0.5f);
        for (int64_t b = 0; b < B; b++)
            for (int64_t v = 0; v < V; v++) {
                double acc = 0.0;
                for (int64_t k = 0; k < D; k++)
                    acc += (double)fls_bf16_to_f32(W[v * D + k]) * (double)fls_bf16_to_f32(H[b * D + k]);
                L[b * V + v] = (float)acc;
            }
        fls_cuda_memcpy(dH, H, (size_t)(B * D) * 2, 1);
        fls_cuda_memcpy(dL, L, sizeof(float) * (size_t)(B * V), 1);
        fls_matrix Wm = {W, FLS_DTYPE_BF16, V, D, D}, Hm = {H, FLS_DTYPE_BF16, B, D, D};
        fls_matrix dWm = {dW, FLS_DTYPE_BF16, V, D, D}, dHm = {dH, FLS_DTYPE_BF16, B, D, D};
        fls_matrix dLm = {dL, FLS_DTYPE_F32, B, V, V};
        fls_params p;
        fls_params_default(&p);
        p.temperature = temps;
        p.seed = 31;
        p.draws = draws;
        fls_row_params *rows = resolve_rows(&p, B);
        CHECK(rows, "host memory");
        /* the public calls: grouped g = 128 and 2, min-p, without replacement (K = 2, one draw) */
        const int n_pub = 5;
        for (int k = 0; k < N_CFGS + n_pub; k++) {
            fls_params pc = p;
            const char *label = k < N_CFGS ? k_cfgs[k].label : "";
            if (k >= N_CFGS) {
                const int q = k - N_CFGS;
                pc.method = q < 2 ? FLS_METHOD_GROUPED : FLS_METHOD_FUSED;
                pc.group_size = q == 0 ? 128 : 2;
                pc.min_p = q == 2 ? 0.1f : 0.0f;
                if (q == 3) {
                    pc.without_replacement_k = 2;
                    pc.draws = 1;
                }
                label = q == 0   ? "grouped g=128"
                        : q == 1 ? "grouped g=2"
                        : q == 2 ? "min-p"
                        : q == 3 ? "K=2"
                                 : "logits";
            } else {
                pc.method = k_cfgs[k].method;
            }
            int64_t tcpu[10], guard[10], back[10];
            for (int i = 0; i < 10; i++)
                guard[i] = tcpu[i] = -3 - i;
            fls_outputs oc = {tcpu, NULL, NULL};
            const fls_status sc_cpu =
                k == N_CFGS + 4 ? fls_sample_logits(g_cpu, &(fls_matrix){L, FLS_DTYPE_F32, B, V, V}, &pc, &oc)
                                : fls_sample_fused(g_cpu, &Wm, &Hm, &pc, &oc);
            if (sc_cpu != want[sc]) {
                wrong++;
                failf("%s, %s: the CPU engine gave %s", names[sc], label, fls_status_string(sc_cpu));
            }
            fls_cuda_memcpy(dtok, guard, sizeof guard, 1);
            fls_outputs og = {(int64_t *)dtok, NULL, NULL};
            fls_status st;
            if (k < N_CFGS) {
                st = run_cfg(k, &dWm, &dHm, rows, B, V, draws, &og);
            } else if (k == N_CFGS + 4) {
                st = fls_sample_logits(g_gpu, &dLm, &pc, &og);
            } else {
                st = fls_sample_fused(g_gpu, &dWm, &dHm, &pc, &og);
            }
            fls_cuda_memcpy(back, dtok, sizeof back, 0);
            runs++;
            if (st != want[sc]) {
                wrong++;
                failf("%s, %s: %s, expected %s", names[sc], label, fls_status_string(st),
                      fls_status_string(want[sc]));
            }
            if (st != FLS_OK && memcmp(back, guard, sizeof back) != 0) {
                touched++;
                failf("%s, %s: outputs written despite the error", names[sc], label);
            }
            if (st == FLS_OK && sc_cpu == FLS_OK && memcmp(back, tcpu, sizeof back) != 0) {
                differ++;
                failf("%s, %s: tokens differ from the CPU engine's", names[sc], label);
            }
        }
        free(rows);
    }
    printf("    key resolution (|key| >= 2^12): %d runs, %d wrong status, %d wrote outputs, %d token "
           "mismatches\n",
           runs, wrong, touched, differ);
    fls_cuda_free(dW);
    fls_cuda_free(dH);
    fls_cuda_free(dtok);
    fls_cuda_free(dL);
    free(W);
    free(H);
    free(L);
}

/* Random bf16 at D = 4096, V = 151936: agreement rate with the CPU engine. */
static void test_agreement_random(void)
{
    const int64_t V = 151936, D = 4096, B = g_quick ? 8 : 32, draws = g_quick ? 4 : 32;
    g_rng = 4242;
    /* logits ~ N(0, ~1.2): W uniform in +-3.4/sqrt(D), H uniform in +-1 */
    void *W = make_rand_matrix(V, D, D, FLS_DTYPE_BF16, 3.4f / sqrtf((float)D));
    void *H = make_rand_matrix(B, D, D, FLS_DTYPE_BF16, 1.0f);
    int64_t n = B * draws;
    int64_t *tc = malloc(8 * (size_t)n), *tk = malloc(8 * (size_t)n), *tw = malloc(8 * (size_t)n);
    void *dW = W ? to_dev(W, (size_t)(V * D) * 2) : NULL, *dH = H ? to_dev(H, (size_t)(B * D) * 2) : NULL,
         *dt = NULL;
    fls_device_malloc(&dt, 8 * (size_t)n);
    if (!W || !H || !tc || !tk || !tw || !dW || !dH || !dt) {
        failf("memory");
        goto done;
    }
    fls_params p;
    fls_params_default(&p);
    p.temperature_value = 0.7f;
    p.seed = 99;
    p.draws = draws;
    {
        fls_matrix Wm = {W, FLS_DTYPE_BF16, V, D, D}, Hm = {H, FLS_DTYPE_BF16, B, D, D};
        fls_outputs oc = {tc, NULL, NULL};
        fls_status st = fls_sample_fused(g_cpu, &Wm, &Hm, &p, &oc);
        if (st != FLS_OK) {
            failf("cpu: %s", fls_status_string(st));
            goto done;
        }
        fls_matrix dWm = {dW, FLS_DTYPE_BF16, V, D, D}, dHm = {dH, FLS_DTYPE_BF16, B, D, D};
        fls_row_params *rows = resolve_rows(&p, B);
        const fls_cuda_path paths[2] = {FLS_CUDA_PATH_CHUNKED, FLS_CUDA_PATH_WGMMA};
        int64_t *dst[2] = {tk, tw};
        for (int k = 0; k < 2; k++) {
            fls_request req = {.rows = rows,
                               .batch = B,
                               .vocab = V,
                               .draws = draws,
                               .method = FLS_METHOD_FUSED,
                               .first_draw = 0,
                               .K = 1};
            fls_outputs og = {(int64_t *)dt, NULL, NULL};
            fls_cuda_opts o;
            fls_cuda_opts_default(&o);
            o.path = paths[k];
            st = fls_cuda_run(g_gpu, &dWm, &dHm, NULL, &req, &og, &o);
            if (st != FLS_OK) {
                failf("gpu: %s", fls_status_string(st));
                break;
            }
            fls_device_download(dst[k], dt, 8 * (size_t)n);
        }
        free(rows);
        int64_t agree_k = 0, agree_w = 0, agree_paths = 0;
        for (int64_t i = 0; i < n; i++) {
            agree_w += tw[i] == tc[i];
            agree_k += tk[i] == tc[i];
            agree_paths += tk[i] == tw[i];
        }
        printf("    AGREEMENT random bf16 D=%lld V=%lld T=0.7: chunked(cuBLAS) vs cpu %lld/%lld (%.4f%%), "
               "wgmma vs cpu %lld/%lld (%.4f%%), wgmma vs chunked %lld/%lld\n",
               (long long)D, (long long)V, (long long)agree_k, (long long)n, 100.0 * agree_k / n,
               (long long)agree_w, (long long)n, 100.0 * agree_w / n, (long long)agree_paths, (long long)n);
        if (agree_k * 1000 < n * 999 || agree_w * 1000 < n * 999)
            failf("agreement below 99.9%%");
    }
done:
    free(W);
    free(H);
    free(tc);
    free(tk);
    free(tw);
    fls_device_free(dW);
    fls_device_free(dH);
    fls_device_free(dt);
}

/* A CUDA context in async mode on stream (NULL: the default stream). */
static fls_status async_context(fls_context_t **ctx, void *stream)
{
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    cfg.engine = FLS_ENGINE_CUDA;
    cfg.stream = stream;
    cfg.async = 1;
    return fls_context_create(ctx, &cfg);
}

/* ---- the rule family on the CUDA engine ---- */

typedef struct rule_spec {
    char name[48];
    int64_t top_k, wr;
    float top_p, min_p;
    const char *filter; /* a registry rule without a field of its own in fls_params, or NULL */
    double fvalue;
    int per_row; /* per-row values (row b: the scalar's variations, some rows off) */
} rule_spec;

/* Combinations and limits; every rule of the registry alone comes first
 * (rules_from_registry), so a rule added to the registry is run by every
 * test below without a line here. */
static const rule_spec k_rule_combos[] = {
    {"all", 100, 0, 0.95f, 0.02f, "top-nsigma", 2.0, 0},
    {"all,epsilon", 100, 0, 0.95f, 0.02f, "epsilon", 1e-3, 0},
    {"wr=4", 0, 4, 1.0f, 0.0f, NULL, 0.0, 0},
    {"wr=4,top-k=20", 20, 4, 1.0f, 0.0f, NULL, 0.0, 0},
    {"top-k=1", 1, 0, 1.0f, 0.0f, NULL, 0.0, 0},
    {"top-k=2000", 2000, 0, 1.0f, 0.0f, NULL, 0.0, 0},
    {"per-row", 40, 3, 0.8f, 0.1f, NULL, 0.0, 1},
    /* top-p after top-k alone: the row's sum only where a row has fewer than k finite tokens */
    {"top-k=50,p=0.9", 50, 0, 0.9f, 0.0f, NULL, 0.0, 0},
};
#define N_RULE_COMBOS (sizeof k_rule_combos / sizeof k_rule_combos[0])
static rule_spec k_rules[2 * FLS_FILTER_COUNT + N_RULE_COMBOS];
static size_t N_RULES;

/* k_rules: each registry rule alone at its descriptor's example value, each
 * rule without a field of its own after a top-k 100 cut too (its support's
 * statistics then come from the top list), then the combinations. A test
 * build's extra rules (meson -Dprobe_rule=true) are in the registry too. */
static void rules_from_registry(void)
{
    N_RULES = 0;
    for (int id = 0; id < FLS_FILTER_COUNT; id++) {
        if (id == FLS_FILTER_MIN_P || id == FLS_FILTER_TOP_K || id == FLS_FILTER_TOP_P)
            continue;
        rule_spec *r = &k_rules[N_RULES++];
        memset(r, 0, sizeof *r);
        r->top_p = 1.0f;
        r->top_k = 100;
        r->filter = fls_filters[id].name;
        r->fvalue = fls_filters[id].example;
        snprintf(r->name, sizeof r->name, "top-k=100,%s", fls_filters[id].name);
    }
    for (int id = 0; id < FLS_FILTER_COUNT; id++) {
        rule_spec *r = &k_rules[N_RULES++];
        memset(r, 0, sizeof *r);
        r->top_p = 1.0f;
        const double ex = fls_filters[id].example;
        snprintf(r->name, sizeof r->name, "%s=%g", fls_filters[id].name, ex);
        if (id == FLS_FILTER_MIN_P)
            r->min_p = (float)ex;
        else if (id == FLS_FILTER_TOP_K)
            r->top_k = (int64_t)ex;
        else if (id == FLS_FILTER_TOP_P)
            r->top_p = (float)ex;
        else
            r->filter = fls_filters[id].name, r->fvalue = ex;
    }
    for (size_t i = 0; i < N_RULE_COMBOS; i++)
        k_rules[N_RULES++] = k_rule_combos[i];
}

/* A spec's registry values (its per-row arrays aside). */
static void rule_values(const rule_spec *r, double v[FLS_FILTER_COUNT])
{
    for (int id = 0; id < FLS_FILTER_COUNT; id++)
        v[id] = fls_filters[id].off;
    v[FLS_FILTER_MIN_P] = r->min_p;
    v[FLS_FILTER_TOP_K] = (double)r->top_k;
    v[FLS_FILTER_TOP_P] = r->top_p;
    if (r->filter)
        v[fls_filter_lookup(r->filter)] = r->fvalue;
}

/* per-row arrays for a rule_spec (freed by the caller) */
typedef struct rule_rows {
    int64_t *k, *wr;
    float *p, *mp, *T;
} rule_rows;

static void rule_params(const rule_spec *r, int64_t B, fls_params *p, rule_rows *rr, float T, uint64_t seed,
                        int64_t draws)
{
    fls_params_default(p);
    memset(rr, 0, sizeof *rr);
    p->temperature_value = T;
    p->seed = seed;
    p->draws = draws;
    p->top_k = r->top_k;
    p->top_p = r->top_p;
    p->min_p = r->min_p;
    p->without_replacement_k = r->wr;
    if (r->filter) {
        p->filter = r->filter;
        p->filter_value = r->fvalue;
    }
    if (!r->per_row)
        return;
    rr->k = malloc(8 * (size_t)B);
    rr->wr = malloc(8 * (size_t)B);
    rr->p = malloc(4 * (size_t)B);
    rr->mp = malloc(4 * (size_t)B);
    rr->T = malloc(4 * (size_t)B);
    for (int64_t b = 0; b < B; b++) {
        rr->k[b] = b % 3 == 0 ? 0 : r->top_k + b;
        rr->wr[b] = 1 + b % r->wr;
        rr->p[b] = b % 4 == 1 ? 1.0f : r->top_p + 0.01f * (float)(b % 5);
        rr->mp[b] = b % 5 == 2 ? 0.0f : r->min_p;
        rr->T[b] = b % 7 == 3 ? 0.0f : 0.6f + 0.1f * (float)(b % 6); /* greedy rows too */
    }
    p->row_top_k = rr->k;
    p->row_without_replacement_k = rr->wr;
    p->row_top_p = rr->p;
    p->row_min_p = rr->mp;
    p->temperature = rr->T;
}

static void rule_rows_free(rule_rows *rr)
{
    free(rr->k);
    free(rr->wr);
    free(rr->p);
    free(rr->mp);
    free(rr->T);
}

/* Row b's logits: flat N(0,1)-like, peaked, half masked, quantized (ties at
 * the k-th value and at the nucleus boundary), or a single finite token. */
static void rule_logits(float *L, int64_t B, int64_t V, int64_t ld)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t v = 0; v < V; v++) {
            const double u = rndu() + rndu() + rndu() - 1.5;
            float x;
            switch (b % 5) {
            case 0:
                x = (float)(2.0 * u);
                break;
            case 1:
                x = (float)(8.0 * u) + (v % 997 == 5 ? 12.0f : 0.0f);
                break;
            case 2:
                x = v % 2 ? -INFINITY : (float)(3.0 * u);
                break;
            case 3:
                x = (float)(int)(rndu() * 8.0);
                break;
            default:
                x = v == V / 3 ? 1.0f : -INFINITY;
                break;
            }
            L[b * ld + v] = x;
        }
}

/* A rule test's buffers: B x ld logits (host and device), two host copies
 * of tokens and logprobs (nmax each) and of B <= 16 logsumexps, and the
 * device outputs. */
typedef struct rule_bufs {
    int64_t B, V, ld;
    float *L;
    int64_t *t[2];
    float *lp[2], ls[2][16];
    void *dL, *dt, *dlp, *dls;
} rule_bufs;

static void rule_bufs_free(rule_bufs *r)
{
    free(r->L);
    for (int k = 0; k < 2; k++) {
        free(r->t[k]);
        free(r->lp[k]);
    }
    fls_cuda_free(r->dL);
    fls_cuda_free(r->dt);
    fls_cuda_free(r->dlp);
    fls_cuda_free(r->dls);
}

/* rule_logits(B, V, ld) in r->L and r->dL, the rest allocated; 0 on failure
 * (r then holds what was allocated: rule_bufs_free). fix: called on L
 * before the upload. */
static int rule_bufs_alloc(rule_bufs *r, int64_t B, int64_t V, int64_t ld, size_t nmax,
                           void (*fix)(rule_bufs *))
{
    memset(r, 0, sizeof *r);
    r->B = B;
    r->V = V;
    r->ld = ld;
    r->L = malloc(sizeof(float) * (size_t)(B * ld));
    for (int k = 0; k < 2; k++) {
        r->t[k] = malloc(8 * nmax);
        r->lp[k] = malloc(4 * nmax);
    }
    if (!r->L || !r->t[0] || !r->t[1] || !r->lp[0] || !r->lp[1])
        return 0;
    rule_logits(r->L, B, V, ld);
    if (fix)
        fix(r);
    r->dL = to_dev(r->L, sizeof(float) * (size_t)(B * ld));
    fls_cuda_malloc(&r->dt, 8 * nmax);
    fls_cuda_malloc(&r->dlp, 4 * nmax);
    fls_cuda_malloc(&r->dls, 4 * 16);
    return r->dL && r->dt && r->dlp && r->dls;
}

/* Every rule on the same fp32 logits: the CUDA engine's tokens equal the
 * CPU engine's (100%), logprobs and logsumexp to float rounding; rows the
 * statistics cannot decide and overflowed staircases (forced with
 * fls_cuda_opts.rule_stair_cap) give the same tokens. */
static void test_rules_logits(void)
{
    const int64_t Vs[3] = {151936, 1000, 1};
    g_rng = 8080;
    int failed = 0;
    for (int vi = 0; vi < 3 && !failed; vi++) {
        const int64_t V = Vs[vi], B = V == 1 ? 3 : 15, ld = V + 3, draws = V == 1 ? 2 : 4;
        rule_bufs rb;
        if (!rule_bufs_alloc(&rb, B, V, ld, (size_t)(B * draws * 4), NULL)) {
            rule_bufs_free(&rb);
            failf("memory");
            return;
        }
        float *L = rb.L, *lpc = rb.lp[0], *lpg = rb.lp[1], *lsc = rb.ls[0], *lsg = rb.ls[1];
        int64_t *tc = rb.t[0], *tg = rb.t[1];
        void *dL = rb.dL, *dt = rb.dt, *dlp = rb.dlp, *dls = rb.dls;
        /* force 0: the threshold-first path; 1: the staircase path, most staircases overflow (the
         * exact reference); 2: staircase states in global memory (the path of lists too large
         * for shared memory); 3: the staircase path in shared memory */
        static const char *force_name[4] = {"", " (staircase cap 2)", " (global-memory states)",
                                            " (staircases)"};
        for (int force = 0; force < 4 && !failed; force++) {
            fls_cuda_opts o;
            fls_cuda_opts_default(&o);
            o.rule_stair_cap = force == 1 ? 2 : 0;
            o.rule_path = force == 2 ? FLS_RULE_PATH_STAIR_GLOBAL : force == 3 ? FLS_RULE_PATH_STAIR : 0;
            fls_cuda_set_dev_opts(g_gpu, &o);
            for (size_t ri = 0; ri < N_RULES && !failed; ri++) {
                const rule_spec *r = &k_rules[ri];
                if (r->top_k > V || r->wr > V || ((force == 1 || force == 2) && ri % 3 != 0))
                    continue;
                fls_params p;
                rule_rows rr;
                rule_params(r, B, &p, &rr, 0.9f, 31 + ri, draws);
                const int64_t K = r->wr ? r->wr : 1, n = B * draws * K;
                fls_matrix Lm = {L, FLS_DTYPE_F32, B, V, ld}, dLm = {dL, FLS_DTYPE_F32, B, V, ld};
                fls_outputs oc = {tc, lsc, lpc}, og = {(int64_t *)dt, (float *)dls, (float *)dlp};
                fls_counters c0, c1;
                fls_counters_default(&c0);
                fls_counters_default(&c1);
                fls_context_counters(g_gpu, &c0);
                fls_status sc = fls_sample_logits(g_cpu, &Lm, &p, &oc);
                fls_status sg = fls_sample_logits(g_gpu, &dLm, &p, &og);
                fls_context_counters(g_gpu, &c1);
                rule_rows_free(&rr);
                if (sc != FLS_OK || sg != FLS_OK) {
                    failf("V=%lld %s: cpu %s, cuda %s", (long long)V, r->name, fls_status_string(sc),
                          fls_status_string(sg));
                    failed = 1;
                    break;
                }
                fls_cuda_memcpy(tg, dt, 8 * (size_t)n, 0);
                fls_cuda_memcpy(lpg, dlp, 4 * (size_t)n, 0);
                fls_cuda_memcpy(lsg, dls, 4 * (size_t)B, 0);
                int64_t same = 0;
                double dlp_max = 0.0, dls_max = 0.0;
                for (int64_t i = 0; i < n; i++) {
                    same += tc[i] == tg[i];
                    const double e = fabs((double)lpc[i] - (double)lpg[i]) / (1.0 + fabs((double)lpc[i]));
                    dlp_max = e > dlp_max ? e : dlp_max;
                }
                for (int64_t b = 0; b < B; b++) {
                    const double e = fabs((double)lsc[b] - (double)lsg[b]) / (1.0 + fabs((double)lsc[b]));
                    dls_max = e > dls_max ? e : dls_max;
                }
                printf(
                    "    RULES V=%-6lld %-14s%s tokens %lld/%lld identical, second pass %llu rows, max rel "
                    "diff logprob %.2g logsumexp %.2g\n",
                    (long long)V, r->name, force_name[force], (long long)same, (long long)n,
                    (unsigned long long)(c1.second_pass_rows - c0.second_pass_rows), dlp_max, dls_max);
                if (same != n || dlp_max > 1e-5 || dls_max > 1e-6) {
                    failf("V=%lld %s: the CUDA engine differs from the CPU engine", (long long)V, r->name);
                    failed = 1;
                }
            }
            fls_cuda_set_dev_opts(g_gpu, NULL);
        }
        rule_bufs_free(&rb);
    }
}

/* ---- boundary-sharp cases: tests/unit/test_boundary.c's, on the CUDA engine ---- */

#define FLS_BOUNDARY_CASES_ONLY
#include "tests/unit/test_boundary.c"

/* Every boundary case of every registry rule (its threshold exactly at, one
 * ulp below and one ulp above a logit, at T = 1, 1.3, 0.5, 2) on the CUDA
 * engine: from logits (the threshold-first and the staircase paths) and
 * fused (W f32 with H f32 and with H bf16, the one-hot e_0, so the logits are
 * W's column 0 exactly; W bf16 where every logit is exact in bf16), token for
 * token, logsumexp and logprobs against the CPU engine on the same logits
 * (itself checked against the brute force). Cases marked exact in the table
 * (a tie to the last bits of a double: top-p's Z / 2 tuned to the head mass
 * in the CPU engine's summation order, top-n-sigma's and epsilon's double
 * ulps, min-p's log p) are run too, but a difference there is counted and
 * printed, not failed: the CUDA engine sums in another order (docs/RULES.md,
 * Arithmetic) and its log need not round like the host's. */
static void test_rules_boundary(void)
{
    if (!bnd_table_matches_registry()) {
        failf("test_boundary.c's table is not the registry");
        return;
    }
    const int64_t draws = g_quick ? 32 : 128, D = 4;
    int64_t *tc = malloc((size_t)draws * 8), *tg = malloc((size_t)draws * 8);
    float *lpc = malloc((size_t)draws * 4), *lpg = malloc((size_t)draws * 4);
    void *dL = NULL, *dW = NULL, *dH = NULL, *dt = NULL, *dlp = NULL, *dls = NULL;
    if (!tc || !tg || !lpc || !lpg || fls_cuda_malloc(&dL, BND_VMAX * 4) != FLS_OK ||
        fls_cuda_malloc(&dW, (size_t)(BND_VMAX * D) * 4) != FLS_OK ||
        fls_cuda_malloc(&dH, (size_t)D * 4) != FLS_OK || fls_cuda_malloc(&dt, (size_t)draws * 8) != FLS_OK ||
        fls_cuda_malloc(&dlp, (size_t)draws * 4) != FLS_OK || fls_cuda_malloc(&dls, 4) != FLS_OK) {
        failf("memory");
        goto done;
    }
    static const char *path_name[5] = {"logits", "logits, staircases", "fused W f32 H f32",
                                       "fused W f32 H bf16", "fused W bf16 H bf16"};
    int64_t runs[5] = {0}, robust_fail = 0, exact_diff = 0, exact_runs = 0, cpu_bf_fail = 0;
    for (int id = 0; id < FLS_FILTER_PRODUCT_COUNT; id++) {
        int64_t rule_runs = 0, rule_fail = 0, rule_exact_diff = 0;
        for (int ti = 0; ti < BND_NTEMPS; ti++) {
            if (g_quick && ti >= 2)
                break;
            bnd_list BL = {0};
            bnd_cases(id, bnd_temps[ti], &BL);
            for (int ci = 0; ci < BL.n; ci++) {
                const bnd_case *c = &BL.c[ci];
                const int64_t V = c->V;
                const uint64_t seed = 4242 + (uint64_t)ci;
                uint8_t keep[BND_VMAX];
                bnd_brute(c, keep);
                fls_params p = bnd_params(c, draws, seed);
                float lsc = 0.0f, lsg = 0.0f;
                fls_matrix Lh = {c->l, FLS_DTYPE_F32, 1, V, V};
                fls_outputs oc = {tc, &lsc, lpc};
                fls_status sc = fls_sample_logits(g_cpu, &Lh, &p, &oc);
                if (sc != FLS_OK) {
                    failf("%s [T %g]: CPU engine: %s", c->what, (double)c->T, fls_status_string(sc));
                    rule_fail++;
                    continue;
                }
                for (int64_t d = 0; d < draws; d++)
                    if (tc[d] != bnd_token(c, keep, fls_row_seed(seed, 0), (uint32_t)d) && !c->exact)
                        cpu_bf_fail++;
                /* the inputs: logits, W (V, D) with column 0 the logits, H = e_0 */
                float Wf[BND_VMAX * 4], Hf[4] = {1.0f, 0.0f, 0.0f, 0.0f};
                uint16_t Wb[BND_VMAX * 4], Hb[4];
                int bf16_exact = 1;
                for (int64_t v = 0; v < V; v++) {
                    Wf[v * D] = c->l[v];
                    for (int64_t d = 1; d < D; d++)
                        Wf[v * D + d] = (float)((v * 7 + d * 3) % 11 - 5) / 8.0f;
                    for (int64_t d = 0; d < D; d++)
                        Wb[v * D + d] = fls_f32_to_bf16(Wf[v * D + d]);
                    bf16_exact &= fls_bf16_to_f32(Wb[v * D]) == c->l[v] || c->l[v] == -INFINITY;
                }
                for (int d = 0; d < 4; d++)
                    Hb[d] = fls_f32_to_bf16(Hf[d]);
                for (int path = 0; path < 5; path++) {
                    if (path == 4 && !bf16_exact)
                        continue;
                    fls_cuda_opts o;
                    fls_cuda_opts_default(&o);
                    o.rule_path = path == 1 ? FLS_RULE_PATH_STAIR : 0;
                    fls_cuda_set_dev_opts(g_gpu, &o);
                    fls_outputs og = {(int64_t *)dt, (float *)dls, (float *)dlp};
                    fls_status sg;
                    if (path < 2) {
                        fls_cuda_memcpy(dL, c->l, (size_t)V * 4, 1);
                        fls_matrix Ld = {dL, FLS_DTYPE_F32, 1, V, V};
                        sg = fls_sample_logits(g_gpu, &Ld, &p, &og);
                    } else {
                        const int wb = path == 4, hb = path >= 3;
                        fls_cuda_memcpy(dW, wb ? (const void *)Wb : (const void *)Wf,
                                        (size_t)(V * D) * (wb ? 2 : 4), 1);
                        fls_cuda_memcpy(dH, hb ? (const void *)Hb : (const void *)Hf,
                                        (size_t)D * (hb ? 2 : 4), 1);
                        fls_matrix Wd = {dW, wb ? FLS_DTYPE_BF16 : FLS_DTYPE_F32, V, D, D};
                        fls_matrix Hd = {dH, hb ? FLS_DTYPE_BF16 : FLS_DTYPE_F32, 1, D, D};
                        sg = fls_sample_fused(g_gpu, &Wd, &Hd, &p, &og);
                    }
                    fls_cuda_set_dev_opts(g_gpu, NULL);
                    runs[path]++;
                    rule_runs++;
                    exact_runs += c->exact;
                    int bad = sg != FLS_OK;
                    int64_t first = -1;
                    if (!bad) {
                        fls_cuda_memcpy(tg, dt, (size_t)draws * 8, 0);
                        fls_cuda_memcpy(lpg, dlp, (size_t)draws * 4, 0);
                        fls_cuda_memcpy(&lsg, dls, 4, 0);
                        for (int64_t d = 0; d < draws && first < 0; d++)
                            if (tg[d] != tc[d] ||
                                fabs((double)lpg[d] - (double)lpc[d]) > 1e-5 * (1.0 + fabs((double)lpc[d])))
                                first = d;
                        bad = first >= 0 ||
                              !(fabs((double)lsg - (double)lsc) <= 1e-6 * (1.0 + fabs((double)lsc)));
                    }
                    if (!bad)
                        continue;
                    if (c->exact) {
                        if (exact_diff++ < 10)
                            printf("    exact tie differs (not a failure): %s [T %g, %s]: cuda %s, draw %lld "
                                   "token "
                                   "%lld vs cpu %lld, logsumexp %.9g vs %.9g\n",
                                   c->what, (double)c->T, path_name[path], fls_status_string(sg),
                                   (long long)first, (long long)(first >= 0 ? tg[first] : -1),
                                   (long long)(first >= 0 ? tc[first] : -1), (double)lsg, (double)lsc);
                        rule_exact_diff++;
                        continue;
                    }
                    if (robust_fail++ < 10)
                        printf("    FAIL %s [T %g, %s]: cuda %s, draw %lld token %lld vs cpu %lld, logsumexp "
                               "%.9g vs "
                               "%.9g\n",
                               c->what, (double)c->T, path_name[path], fls_status_string(sg),
                               (long long)first, (long long)(first >= 0 ? tg[first] : -1),
                               (long long)(first >= 0 ? tc[first] : -1), (double)lsg, (double)lsc);
                    rule_fail++;
                }
            }
            free(BL.c);
        }
        printf("    BOUNDARY %-12s %lld runs on the CUDA engine, %lld differ from the CPU engine, %lld exact "
               "ties "
               "differ\n",
               fls_filters[id].name, (long long)rule_runs, (long long)rule_fail, (long long)rule_exact_diff);
    }
    printf("    BOUNDARY paths: logits %lld, staircases %lld, fused f32/f32 %lld, f32/bf16 %lld, bf16/bf16 "
           "%lld; "
           "exact-tie runs %lld (%lld differ)\n",
           (long long)runs[0], (long long)runs[1], (long long)runs[2], (long long)runs[3], (long long)runs[4],
           (long long)exact_runs, (long long)exact_diff);
    if (cpu_bf_fail)
        failf("the CPU engine differs from the brute force on %lld draws", (long long)cpu_bf_fail);
    else if (robust_fail)
        failf("%lld boundary runs: the CUDA engine differs from the CPU engine", (long long)robust_fail);
done:
    free(tc);
    free(tg);
    free(lpc);
    free(lpg);
    fls_cuda_free(dL);
    fls_cuda_free(dW);
    fls_cuda_free(dH);
    fls_cuda_free(dt);
    fls_cuda_free(dlp);
    fls_cuda_free(dls);
}

/* Bad rows and bad requests: an error, and nothing written. */
static void test_rules_errors(void)
{
    const int64_t B = 4, V = 4099, draws = 2;
    g_rng = 77;
    float *L = make_rand_matrix(B, V, V, FLS_DTYPE_F32, 3.0f);
    CHECK(L, "memory");
    void *dL = to_dev(L, sizeof(float) * (size_t)(B * V)), *dt = NULL;
    fls_cuda_malloc(&dt, 8 * (size_t)(B * draws));
    CHECK(dL && dt, "device memory");
    int64_t guard[8], back[8];
    for (int i = 0; i < 8; i++)
        guard[i] = -7;
    fls_matrix dLm = {dL, FLS_DTYPE_F32, B, V, V};
    fls_outputs og = {(int64_t *)dt, NULL, NULL};
    struct {
        const char *what;
        int64_t row, tok;
        float val, T;
        int64_t k;
        float p;
        int method, on_device;
        fls_status want;
    } cases[] = {
        {"NaN logit, top-k", 2, 77, NAN, 1.0f, 5, 1.0f, FLS_METHOD_FUSED, 0, FLS_ERR_NAN},
        {"+inf logit, top-p", 1, 4098, INFINITY, 1.0f, 0, 0.9f, FLS_METHOD_FUSED, 0, FLS_ERR_NAN},
        {"l/T overflows, top-k", 0, 3, 3e38f, 0.5f, 5, 1.0f, FLS_METHOD_FUSED, 0, FLS_ERR_TEMPERATURE},
        {"all masked row, top-p", 3, -1, -INFINITY, 1.0f, 0, 0.5f, FLS_METHOD_FUSED, 0, FLS_ERR_ALL_MASKED},
        {"top-k > V", -1, 0, 0.0f, 1.0f, V + 1, 1.0f, FLS_METHOD_FUSED, 0, FLS_ERR_PARAM},
        {"top-p = 0", -1, 0, 0.0f, 1.0f, 0, 0.0f, FLS_METHOD_FUSED, 0, FLS_ERR_PARAM},
        {"multinomial + top-k", -1, 0, 0.0f, 1.0f, 5, 1.0f, FLS_METHOD_UNFUSED_MULTINOMIAL, 0,
         FLS_ERR_UNSUPPORTED},
        {"params on the device + top-k", -1, 0, 0.0f, 1.0f, 5, 1.0f, FLS_METHOD_FUSED, 1,
         FLS_ERR_UNSUPPORTED},
    };
    fls_context_t *actx = NULL;
    CHECK_ST(async_context(&actx, NULL));
    float *dT = NULL;
    fls_cuda_malloc((void **)&dT, 4 * (size_t)B);
    float ones[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    fls_cuda_memcpy(dT, ones, sizeof ones, 1);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float *bad = NULL;
        if (cases[c].row >= 0) {
            bad = malloc(sizeof(float) * (size_t)V);
            CHECK(bad, "memory");
            memcpy(bad, L + cases[c].row * V, sizeof(float) * (size_t)V);
            for (int64_t v = 0; v < V; v++)
                if (cases[c].tok < 0 || v == cases[c].tok)
                    bad[v] = cases[c].val;
            fls_cuda_memcpy((float *)dL + cases[c].row * V, bad, sizeof(float) * (size_t)V, 1);
        }
        fls_cuda_memcpy(dt, guard, 8 * (size_t)(B * draws), 1);
        fls_params p;
        fls_params_default(&p);
        p.draws = draws;
        p.temperature_value = cases[c].T;
        p.top_k = cases[c].k;
        p.top_p = cases[c].p;
        p.method = (fls_method)cases[c].method;
        if (cases[c].on_device) {
            p.params_on_device = 1;
            p.temperature = dT;
        }
        /* synchronous, then queued (async mode: the error at fls_context_sync) */
        /* device params take a rule when queued (async mode): that call succeeds and writes */
        fls_status st[2], want[2] = {cases[c].want, cases[c].on_device ? FLS_OK : cases[c].want};
        int kept[2];
        for (int mode = 0; mode < 2; mode++) {
            fls_cuda_memcpy(dt, guard, 8 * (size_t)(B * draws), 1);
            st[mode] = fls_sample_logits(mode ? actx : g_gpu, &dLm, &p, &og);
            if (mode && st[mode] == FLS_OK)
                st[mode] = fls_context_sync(actx);
            fls_cuda_memcpy(back, dt, 8 * (size_t)(B * draws), 0);
            kept[mode] = 1;
            for (int64_t i = 0; i < B * draws; i++)
                kept[mode] &= back[i] == -7;
            printf("    RULE ERROR %-30s -> %s, outputs %s%s\n", cases[c].what, fls_status_string(st[mode]),
                   kept[mode] ? "untouched" : "WRITTEN", mode ? " (async)" : "");
        }
        if (bad) {
            fls_cuda_memcpy((float *)dL + cases[c].row * V, L + cases[c].row * V, sizeof(float) * (size_t)V,
                            1);
            free(bad);
        }
        for (int mode = 0; mode < 2; mode++)
            CHECK(st[mode] == want[mode] && kept[mode] == (want[mode] != FLS_OK),
                  "%s%s: %s (want %s), outputs %s", cases[c].what, mode ? " (async)" : "",
                  fls_status_string(st[mode]), fls_status_string(want[mode]),
                  kept[mode] ? "untouched" : "written");
    }
    fls_context_destroy(actx);
    fls_cuda_free(dT);
    fls_cuda_free(dL);
    fls_cuda_free(dt);
    free(L);
}

/* The quantized rows of rule_logits (massive ties, which the host decides
 * for any top list) become copies of the flat row 0, so that top-k rules
 * stay on the device (test_rules_async). */
static void flatten_quantized(rule_bufs *r)
{
    for (int64_t b = 3; b < r->B; b += 5)
        memcpy(r->L + b * r->ld, r->L, sizeof(float) * (size_t)r->V);
}

/* Async mode: every rule queued on an async context gives the synchronous
 * call's tokens, logprobs and logsumexp bit for bit once fls_context_sync
 * returns FLS_OK; a call with a row only the host can decide (a flat row's
 * nucleus beyond the device's list) reports FLS_ERR_UNSUPPORTED there and
 * writes nothing. */
static void test_rules_async(void)
{
    const int64_t V = 151936, B = 15, ld = V, draws = 2;
    g_rng = 9191;
    const size_t nmax = (size_t)(B * draws * 4);
    rule_bufs rb;
    if (!rule_bufs_alloc(&rb, B, V, ld, nmax, flatten_quantized)) {
        rule_bufs_free(&rb);
        failf("memory");
        return;
    }
    float *lps = rb.lp[0], *lpa = rb.lp[1], *lss = rb.ls[0], *lsa = rb.ls[1];
    int64_t *ts = rb.t[0], *ta = rb.t[1];
    void *dL = rb.dL, *dt = rb.dt, *dlp = rb.dlp, *dls = rb.dls;
    fls_context_t *actx = NULL;
    CHECK_ST(async_context(&actx, NULL));
    int64_t guard[64 * 4 * 4];
    float fguard[64 * 4 * 4];
    for (size_t i = 0; i < sizeof guard / sizeof guard[0]; i++) {
        guard[i] = -7;
        fguard[i] = -7.0f;
    }
    int failed = 0, n_ok = 0, n_host = 0;
    for (size_t ri = 0; ri < N_RULES && !failed; ri++) {
        const rule_spec *r = &k_rules[ri];
        fls_params p;
        rule_rows rr;
        rule_params(r, B, &p, &rr, 0.9f, 71 + ri, draws);
        const int64_t K = r->wr ? r->wr : 1, n = B * draws * K;
        fls_matrix dLm = {dL, FLS_DTYPE_F32, B, V, ld};
        fls_outputs og = {(int64_t *)dt, (float *)dls, (float *)dlp};
        fls_counters c0, c1;
        fls_counters_default(&c0);
        fls_counters_default(&c1);
        fls_context_counters(g_gpu, &c0);
        const fls_status ss = fls_sample_logits(g_gpu, &dLm, &p, &og);
        fls_context_counters(g_gpu, &c1);
        const int host = c1.second_pass_rows != c0.second_pass_rows;
        fls_cuda_memcpy(ts, dt, 8 * (size_t)n, 0);
        fls_cuda_memcpy(lps, dlp, 4 * (size_t)n, 0);
        fls_cuda_memcpy(lss, dls, 4 * (size_t)B, 0);
        /* guard-filled: an output the queued call leaves unwritten shows */
        fls_cuda_memcpy(dt, guard, 8 * (size_t)n, 1);
        fls_cuda_memcpy(dlp, fguard, 4 * (size_t)n, 1);
        fls_cuda_memcpy(dls, fguard, 4 * (size_t)B, 1);
        fls_status sa = fls_sample_logits(actx, &dLm, &p, &og);
        const fls_status sy = fls_context_sync(actx);
        sa = sa != FLS_OK ? sa : sy;
        rule_rows_free(&rr);
        fls_cuda_memcpy(ta, dt, 8 * (size_t)n, 0);
        fls_cuda_memcpy(lpa, dlp, 4 * (size_t)n, 0);
        fls_cuda_memcpy(lsa, dls, 4 * (size_t)B, 0);
        int untouched = 1;
        for (int64_t i = 0; i < n; i++)
            untouched &= ta[i] == -7;
        const int same = !memcmp(ts, ta, 8 * (size_t)n) && !memcmp(lps, lpa, 4 * (size_t)n) &&
                         !memcmp(lss, lsa, 4 * (size_t)B);
        printf("    RULES ASYNC %-14s sync %s (%s), async %s, outputs %s\n", r->name, fls_status_string(ss),
               host ? "rows on the host" : "all on the device", fls_status_string(sa),
               sa == FLS_OK ? (same ? "identical" : "DIFFERENT") : (untouched ? "untouched" : "WRITTEN"));
        if (ss != FLS_OK || (host ? !(sa == FLS_ERR_UNSUPPORTED && untouched) : !(sa == FLS_OK && same))) {
            failf("%s: async %s, outputs %s", r->name, fls_status_string(sa),
                  same ? "identical" : (untouched ? "untouched" : "different"));
            failed = 1;
        }
        n_ok += !host;
        n_host += host;
    }
    printf("    RULES ASYNC %d rules queued and identical, %d refused (rows for the host)\n", n_ok, n_host);
    CHECK(n_ok >= 6 && n_host >= 1, "the cases must cover both outcomes (%d, %d)", n_ok, n_host);
    fls_context_destroy(actx);
    rule_bufs_free(&rb);
}

/* Random bf16 at D = 4096, V = 151936, the fused call: agreement of each
 * rule's tokens with the CPU engine (the logits of cuBLAS and of the CPU
 * round differently; tokens differ only where that moves a decision). */
/* The matmul the fused rule calls on g_gpu took since counts c0 were read
 * (fls_cuda_rule_matmul_counts): 0 cuBLAS, 1 wgmma + its tables, 2 wgmma +
 * the statistics pass; -1 none, 3 more than one. */
/* Rule r's parameters for B rows at T = 0.7 (rr: its per-row arrays, freed
 * by the caller) and the CPU engine's fused tokens on the host's bf16 W
 * (V x D) and H (B x D) into tc. */
static fls_status rule_cpu_tokens(const rule_spec *r, int64_t B, uint64_t seed, int64_t draws, void *W,
                                  void *H, int64_t V, int64_t D, int64_t *tc, fls_params *p, rule_rows *rr)
{
    rule_params(r, B, p, rr, 0.7f, seed, draws);
    fls_matrix Wm = {W, FLS_DTYPE_BF16, V, D, D}, Hm = {H, FLS_DTYPE_BF16, B, D, D};
    fls_outputs oc = {tc, NULL, NULL};
    return fls_sample_fused(g_cpu, &Wm, &Hm, p, &oc);
}

/* The CUDA engine's fused tokens of p on the device's bf16 W and H into dt. */
static fls_status rule_gpu_tokens(const fls_params *p, int64_t B, void *dW, void *dH, int64_t V, int64_t D,
                                  void *dt)
{
    fls_matrix Wm = {dW, FLS_DTYPE_BF16, V, D, D}, Hm = {dH, FLS_DTYPE_BF16, B, D, D};
    fls_outputs og = {(int64_t *)dt, NULL, NULL};
    return fls_sample_fused(g_gpu, &Wm, &Hm, p, &og);
}

/* Rows of r have no filter (their support: every finite token). */
static int rule_no_filter(const rule_spec *r)
{
    double v[FLS_FILTER_COUNT];
    rule_values(r, v);
    return !fls_filter_row_active(v) && !r->per_row;
}

static int rule_matmul_taken(const uint64_t c0[3])
{
    uint64_t c1[3];
    fls_cuda_rule_matmul_counts(g_gpu, c1);
    int took = -1;
    for (int k = 0; k < 3; k++)
        if (c1[k] != c0[k])
            took = took < 0 && c1[k] == c0[k] + 1 ? k : 3;
    return took;
}

static void test_rules_agreement_fused(void)
{
    const int64_t V = 151936, D = 4096, B = g_quick ? 4 : 16, draws = 4;
    g_rng = 4343;
    void *W = make_rand_matrix(V, D, D, FLS_DTYPE_BF16, 3.4f / sqrtf((float)D));
    void *H = make_rand_matrix(B, D, D, FLS_DTYPE_BF16, 1.0f);
    const size_t nmax = (size_t)(B * draws * 4);
    int64_t *tc = malloc(8 * nmax), *tg = malloc(8 * nmax), *tc2 = malloc(8 * nmax);
    void *dW = W ? to_dev(W, (size_t)(V * D) * 2) : NULL, *dH = H ? to_dev(H, (size_t)(B * D) * 2) : NULL,
         *dt = NULL;
    fls_cuda_malloc(&dt, 8 * nmax);
    if (!W || !H || !tc || !tg || !tc2 || !dW || !dH || !dt) {
        failf("memory");
        goto done;
    }
    int tables = 0; /* calls that took the matmul's tables */
    for (size_t ri = 0; ri < N_RULES; ri++) {
        const rule_spec *r = &k_rules[ri];
        fls_params p;
        rule_rows rr;
        const int64_t n = B * draws * (r->wr ? r->wr : 1);
        fls_status sc = rule_cpu_tokens(r, B, 5 + ri, draws, W, H, V, D, tc, &p, &rr);
        uint64_t c0[3];
        fls_cuda_rule_matmul_counts(g_gpu, c0);
        const uint64_t k0 = fls_cuda_rule_matmul_keys(g_gpu);
        fls_status sg = rule_gpu_tokens(&p, B, dW, dH, V, D, dt);
        /* rows without filters: the matmul keeps the keys (many tiles a CTA here) */
        const uint64_t keys = fls_cuda_rule_matmul_keys(g_gpu) - k0;
        if (sg == FLS_OK && keys != (uint64_t)rule_no_filter(r))
            failf("%s: the matmul kept the keys in %llu calls, want %d", r->name, (unsigned long long)keys,
                  rule_no_filter(r));
        rule_rows_free(&rr);
        if (sc != FLS_OK || sg != FLS_OK) {
            failf("%s: cpu %s, cuda %s", r->name, fls_status_string(sc), fls_status_string(sg));
            break;
        }
        /* the default at this B: the wgmma matmul (its tables where only maxima are needed) */
        const int took = rule_matmul_taken(c0);
        if (took != 1 && took != 2)
            failf("%s: the default matmul was path %d, not the wgmma kernel", r->name, took);
        tables += took == 1;
        fls_cuda_memcpy(tg, dt, 8 * (size_t)n, 0);
        int64_t same = 0;
        for (int64_t i = 0; i < n; i++)
            same += tc[i] == tg[i];
        /* the other matmuls on the same inputs: the wgmma logits through the
         * statistics pass give the tables' tokens bit for bit (same logits);
         * cuBLAS rounds its sums in another order */
        int64_t same_b = 0;
        int stats_identical = 0, plain_identical = 0;
        /* m = 2: launched the other way (programmatic dependents or plain:
         * the default is plain only where the matmul keeps the keys) */
        static const char *const alt[] = {"wgmma_stats", "cublas", "wgmma"};
        static const int alt_mm[] = {FLS_RULE_MATMUL_WGMMA_STATS, FLS_RULE_MATMUL_CUBLAS,
                                     FLS_RULE_MATMUL_WGMMA};
        for (int m = 0; m < 3; m++) {
            fls_cuda_opts o;
            fls_cuda_opts_default(&o);
            o.rule_matmul = alt_mm[m];
            if (m == 2)
                o.rule_pdl = keys ? 1 : -1;
            fls_cuda_set_dev_opts(g_gpu, &o);
            rule_params(r, B, &p, &rr, 0.7f, 5 + ri, draws);
            fls_cuda_rule_matmul_counts(g_gpu, c0);
            const uint64_t pd0 = fls_cuda_rule_pdl(g_gpu), kd0 = fls_cuda_rule_matmul_keys(g_gpu);
            sg = rule_gpu_tokens(&p, B, dW, dH, V, D, dt);
            rule_rows_free(&rr);
            fls_cuda_set_dev_opts(g_gpu, NULL);
            /* the default: programmatic unless the call's matmul kept the keys */
            const int want_pdl = m == 2 ? keys != 0 : fls_cuda_rule_matmul_keys(g_gpu) == kd0;
            if (sg == FLS_OK && (fls_cuda_rule_pdl(g_gpu) != pd0) != want_pdl)
                failf("%s: programmatic launches %s (rule_pdl %s)", r->name, want_pdl ? "not taken" : "taken",
                      m == 2 ? (keys ? "1" : "-1") : "default");
            if (sg != FLS_OK) {
                failf("%s: cuda (%s) %s", r->name, alt[m], fls_status_string(sg));
                break;
            }
            const int want = m == 0 ? 2 : m == 1 ? 0 : took;
            if (rule_matmul_taken(c0) != want)
                failf("%s: rule_matmul %s took path %d", r->name, alt[m], rule_matmul_taken(c0));
            fls_cuda_memcpy(tc2, dt, 8 * (size_t)n, 0);
            if (m == 1) {
                for (int64_t i = 0; i < n; i++)
                    same_b += tc[i] == tc2[i];
                continue;
            }
            const int ident = memcmp(tc2, tg, 8 * (size_t)n) == 0;
            if (m == 2) {
                plain_identical = ident;
                continue;
            }
            stats_identical = m == 0 ? ident : stats_identical && ident;
        }
        printf("    RULE AGREEMENT fused bf16 D=%lld V=%lld T=0.7 %-14s %lld/%lld (%.3f%%); cuBLAS matmul "
               "%lld/%lld; statistics and select passes %s the tables%s; %s launches %s\n",
               (long long)D, (long long)V, r->name, (long long)same, (long long)n,
               100.0 * (double)same / (double)n, (long long)same_b, (long long)n,
               stats_identical ? "identical to" : "DIFFERS from", keys ? " and the matmul's keys" : "",
               keys ? "programmatic" : "plain", plain_identical ? "identical" : "DIFFER");
        if (same * 100 < n * 99 || same_b * 100 < n * 99)
            failf("%s: agreement below 99%%", r->name);
        if (!stats_identical)
            failf("%s: the statistics pass and the matmul's tables give different tokens", r->name);
        if (!plain_identical)
            failf("%s: launches the other way (rule_pdl) give different tokens", r->name);
    }
    if (tables < 1)
        failf("no rule call folded the matmul's tables (min-p and top-k need only maxima)");
done:
    free(W);
    free(H);
    free(tc);
    free(tc2);
    free(tg);
    fls_cuda_free(dW);
    fls_cuda_free(dH);
    fls_cuda_free(dt);
}

/* The fused rule call's matmuls (fls_cuda_opts.rule_matmul):
 * with integer inputs every matmul computes the same floats, so cuBLAS, the
 * wgmma kernel with its 64-token tables (the statistics pass folded into the
 * row kernel) and the wgmma kernel through the statistics pass all give the
 * CPU engine's tokens, for every rule, at B = 1, 5, 64 and 130 (two batch
 * tiles of 128; V = 3001: a tail tile and a partial group of 64). */
/* the matmuls a rule call may take; the fourth: the wgmma kernel with the
 * list kernel's draws and its own keys off (rule_list_draw = rule_keys = -1) */
/* Integer-valued W (V x D) and H (Bmax x D) on host and device, and token
 * buffers for Bmax rows of `draws` draws of up to 4 tokens: the rule
 * matmul tests' inputs (every path computes the same floats). */
typedef struct {
    void *W, *H, *dW, *dH, *dt;
    int64_t *tc, *tg;
    size_t nmax;
} int_rule_inputs;

static int int_rule_inputs_make(int_rule_inputs *f, int64_t V, int64_t D, int64_t Bmax, int64_t draws)
{
    f->W = make_int_matrix(V, D, D, FLS_DTYPE_BF16, 3);
    f->H = make_int_matrix(Bmax, D, D, FLS_DTYPE_BF16, 2);
    f->nmax = (size_t)(Bmax * draws * 4);
    f->tc = malloc(8 * f->nmax);
    f->tg = malloc(8 * f->nmax);
    f->dW = f->W ? to_dev(f->W, (size_t)(V * D) * 2) : NULL;
    f->dH = f->H ? to_dev(f->H, (size_t)(Bmax * D) * 2) : NULL;
    f->dt = NULL;
    fls_cuda_malloc(&f->dt, 8 * f->nmax);
    return f->W && f->H && f->tc && f->tg && f->dW && f->dH && f->dt;
}

static void int_rule_inputs_free(int_rule_inputs *f)
{
    free(f->W);
    free(f->H);
    free(f->tc);
    free(f->tg);
    fls_cuda_free(f->dW);
    fls_cuda_free(f->dH);
    fls_cuda_free(f->dt);
}

static const char *const k_matmuls[] = {"cublas", "wgmma", "wgmma_stats", "wgmma"};
static const int k_matmul_ids[] = {FLS_RULE_MATMUL_CUBLAS, FLS_RULE_MATMUL_WGMMA, FLS_RULE_MATMUL_WGMMA_STATS,
                                   FLS_RULE_MATMUL_WGMMA};

static void test_rules_matmul_paths(void)
{
    const int64_t V = 3001, D = 64, Bs[] = {1, 5, 13, 30, 64, 130}, draws = 3, Bmax = 130;
    g_rng = 9191;
    int_rule_inputs f;
    const int ok = int_rule_inputs_make(&f, V, D, Bmax, draws);
    int64_t calls = 0, bad = 0, tables = 0, ldraws = 0, mkeys = 0;
    if (!ok) {
        failf("memory");
        goto done;
    }
    for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++)
        for (size_t ri = 0; ri < N_RULES; ri++) {
            const int64_t B = Bs[bi];
            const rule_spec *r = &k_rules[ri];
            fls_params p;
            rule_rows rr;
            const int64_t n = B * draws * (r->wr ? r->wr : 1);
            fls_status sc = rule_cpu_tokens(r, B, 11 + ri, draws, f.W, f.H, V, D, f.tc, &p, &rr);
            double rv[FLS_FILTER_COUNT];
            rule_values(r, rv);
            /* needs nothing but maxima: always the tables */
            const int only_max = fls_filter_row_needs(rv) == 0 && !r->per_row;
            for (size_t m = 0; m < 4 && sc == FLS_OK; m++) {
                fls_cuda_opts o;
                fls_cuda_opts_default(&o);
                o.rule_matmul = k_matmul_ids[m];
                if (m == 3)
                    o.rule_list_draw = o.rule_keys = -1;
                fls_cuda_set_dev_opts(g_gpu, &o);
                for (size_t i = 0; i < f.nmax; i++)
                    f.tg[i] = -7; /* guard */
                fls_cuda_memcpy(f.dt, f.tg, 8 * f.nmax, 1);
                uint64_t c0[3];
                fls_cuda_rule_matmul_counts(g_gpu, c0);
                const uint64_t ld0 = fls_cuda_rule_list_draws(g_gpu), k0 = fls_cuda_rule_matmul_keys(g_gpu);
                fls_status sg = rule_gpu_tokens(&p, B, f.dW, f.dH, V, D, f.dt);
                fls_cuda_set_dev_opts(g_gpu, NULL);
                calls++;
                if (sg != FLS_OK) {
                    failf("B=%lld %s %s: cuda %s", (long long)B, r->name, k_matmuls[m],
                          fls_status_string(sg));
                    bad++;
                    continue;
                }
                /* the path asked for: cuBLAS; the wgmma kernel with its tables
                 * (always where only maxima are needed), or through the
                 * statistics pass where a sum or moments are needed; the
                 * statistics pass */
                const int took = rule_matmul_taken(c0);
                const int path_ok = m == 0   ? took == 0
                                    : m == 2 ? took == 2
                                             : took == 1 || (took == 2 && !only_max);
                if (!path_ok) {
                    failf("B=%lld %s %s: took matmul path %d", (long long)B, r->name, k_matmuls[m], took);
                    bad++;
                }
                tables += took == 1;
                /* the list kernel draws where a filter's value bounds every
                 * row's list (no logprobs asked here), unless turned off */
                const uint64_t ld = fls_cuda_rule_list_draws(g_gpu) - ld0;
                const uint64_t ld_want = m != 3 && fls_filter_row_bound(rv) >= 0.0 && !r->per_row;
                if (ld != ld_want) {
                    failf("B=%lld %s %s%s: list draws %llu, want %llu", (long long)B, r->name, k_matmuls[m],
                          m == 3 ? " (list draw off)" : "", (unsigned long long)ld,
                          (unsigned long long)ld_want);
                    bad++;
                }
                ldraws += ld != 0;
                /* the matmul keeps the keys of rows without filters where its
                 * lists fit the draws (3 draws: B <= 32), unless turned off */
                const uint64_t kk = fls_cuda_rule_matmul_keys(g_gpu) - k0;
                const uint64_t kk_want = m == 1 && rule_no_filter(r) && B <= 32;
                if (kk != kk_want) {
                    failf("B=%lld %s %s: matmul keys %llu, want %llu", (long long)B, r->name, k_matmuls[m],
                          (unsigned long long)kk, (unsigned long long)kk_want);
                    bad++;
                }
                mkeys += kk != 0;
                fls_cuda_memcpy(f.tg, f.dt, 8 * (size_t)n, 0);
                if (memcmp(f.tg, f.tc, 8 * (size_t)n) != 0) {
                    failf("B=%lld %s %s: tokens differ from the CPU engine's", (long long)B, r->name,
                          k_matmuls[m]);
                    bad++;
                }
            }
            rule_rows_free(&rr);
            if (sc != FLS_OK) {
                failf("B=%lld %s: cpu %s", (long long)B, r->name, fls_status_string(sc));
                bad++;
            }
        }
    printf("    RULE MATMULS integer inputs V=%lld D=%lld: %lld/%lld calls identical to the CPU engine "
           "on the path asked for (cublas, wgmma + tables, wgmma + statistics pass, wgmma with the list "
           "kernel's draws and the matmul's keys off; B = 1, 5, 13, 30, 64, 130; %lld with the tables, "
           "%lld drawn by the list kernel, %lld with the matmul's keys)\n",
           (long long)V, (long long)D, (long long)(calls - bad), (long long)calls, (long long)tables,
           (long long)ldraws, (long long)mkeys);
    if (mkeys == 0 || ldraws == 0)
        failf("a draw path was never taken (list %lld, matmul keys %lld)", (long long)ldraws,
              (long long)mkeys);
done:
    int_rule_inputs_free(&f);
}

/* The matmul's keys at the larger tiles: rows without filters at B = 40
 * and 64 (tile 64, where the matmul keeps the keys with 15 epilogue warps
 * by default) and B = 100 (tile 128), one draw, on integer inputs (every
 * path computes the same floats): the tokens are the CPU engine's with 15
 * and with 11 warps (fls_cuda_opts.logits_warps) and through the select
 * pass (rule_keys < 0). */
static void test_rules_matmul_keys_tiles(void)
{
    const int64_t V = 3001, D = 64, Bs[] = {40, 64, 100}, draws = 1, Bmax = 100;
    static const char *const warps[] = {NULL, "11", "15"};
    static const int warps_n[] = {0, 11, 15};
    g_rng = 9292;
    int_rule_inputs f;
    const int ok = int_rule_inputs_make(&f, V, D, Bmax, draws);
    int64_t calls = 0, bad = 0, keys = 0;
    if (!ok) {
        failf("memory");
        goto done;
    }
    for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++)
        for (size_t ri = 0; ri < N_RULES; ri++) {
            const rule_spec *r = &k_rules[ri];
            if (!rule_no_filter(r))
                continue;
            const int64_t B = Bs[bi], n = B * draws * (r->wr ? r->wr : 1);
            fls_params p;
            rule_rows rr;
            fls_status sc = rule_cpu_tokens(r, B, 21 + ri, draws, f.W, f.H, V, D, f.tc, &p, &rr);
            for (size_t m = 0; m < 4 && sc == FLS_OK; m++) {
                fls_cuda_opts o;
                fls_cuda_opts_default(&o);
                o.rule_matmul = FLS_RULE_MATMUL_WGMMA;
                o.logits_warps = m < 3 ? warps_n[m] : 0;
                o.rule_keys = m == 3 ? -1 : 0;
                fls_cuda_set_dev_opts(g_gpu, &o);
                for (size_t i = 0; i < f.nmax; i++)
                    f.tg[i] = -7; /* guard */
                fls_cuda_memcpy(f.dt, f.tg, 8 * f.nmax, 1);
                const uint64_t k0 = fls_cuda_rule_matmul_keys(g_gpu);
                fls_status sg = rule_gpu_tokens(&p, B, f.dW, f.dH, V, D, f.dt);
                fls_cuda_set_dev_opts(g_gpu, NULL);
                calls++;
                const char *what = m == 3 ? "select pass" : m == 0 ? "default warps" : warps[m];
                if (sg != FLS_OK) {
                    failf("B=%lld %s (%s): cuda %s", (long long)B, r->name, what, fls_status_string(sg));
                    bad++;
                    continue;
                }
                const uint64_t kk = fls_cuda_rule_matmul_keys(g_gpu) - k0;
                if (kk != (m < 3)) {
                    failf("B=%lld %s (%s): matmul keys %llu, want %d", (long long)B, r->name, what,
                          (unsigned long long)kk, m < 3);
                    bad++;
                }
                keys += kk != 0;
                fls_cuda_memcpy(f.tg, f.dt, 8 * (size_t)n, 0);
                if (memcmp(f.tg, f.tc, 8 * (size_t)n) != 0) {
                    failf("B=%lld %s (%s): tokens differ from the CPU engine's", (long long)B, r->name, what);
                    bad++;
                }
            }
            rule_rows_free(&rr);
            if (sc != FLS_OK) {
                failf("B=%lld %s: cpu %s", (long long)B, r->name, fls_status_string(sc));
                bad++;
            }
        }
    printf(
        "    RULE MATMUL KEYS integer inputs V=%lld D=%lld, B = 40, 64, 100, rows without filters: %lld/%lld "
        "calls identical to the CPU engine (%lld with the matmul's keys: default, 11 and 15 epilogue "
        "warps; the others through the select pass)\n",
        (long long)V, (long long)D, (long long)(calls - bad), (long long)calls, (long long)keys);
    if (keys == 0)
        failf("the matmul never kept the keys");
done:
    int_rule_inputs_free(&f);
}

/* first_draw: draws 9..39 of a run on every GPU configuration (and from
 * logits) are the CPU engine's draws 9..39 of one call of 40 (integer
 * logits: every path computes the same floats). */
static void test_first_draw(void)
{
    const int64_t V = 3001, D = 64, B = 5, all = 40, d0 = 9, n = all - d0;
    g_rng = 777;
    void *W = make_int_matrix(V, D, D, FLS_DTYPE_BF16, 3), *H = make_int_matrix(B, D, D, FLS_DTYPE_BF16, 2);
    int64_t *ref = malloc(8 * (size_t)(B * all)), *got = malloc(8 * (size_t)(B * n));
    float *L = malloc(4 * (size_t)(B * V));
    CHECK(W && H && ref && got && L, "host memory");
    fls_params p;
    fls_params_default(&p);
    p.seed = 31;
    p.temperature_value = 0.9f;
    p.draws = all;
    fls_matrix Wm = {W, FLS_DTYPE_BF16, V, D, D}, Hm = {H, FLS_DTYPE_BF16, B, D, D};
    fls_outputs oc = {ref, NULL, NULL};
    fls_status st = fls_sample_fused(g_cpu, &Wm, &Hm, &p, &oc);
    CHECK(st == FLS_OK, "cpu: %s", fls_status_string(st));
    for (int64_t b = 0; b < B; b++)
        for (int64_t v = 0; v < V; v++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < D; k++)
                acc +=
                    fls_bf16_to_f32(((uint16_t *)W)[v * D + k]) * fls_bf16_to_f32(((uint16_t *)H)[b * D + k]);
            L[b * V + v] = acc; /* small integers: exact in any order */
        }
    void *dW = to_dev(W, (size_t)(V * D) * 2), *dH = to_dev(H, (size_t)(B * D) * 2),
         *dL = to_dev(L, 4 * (size_t)(B * V));
    void *dt = NULL;
    fls_device_malloc(&dt, 8 * (size_t)(B * n));
    CHECK(dW && dH && dL && dt, "device memory");
    p.first_draw = d0;
    p.draws = n;
    fls_row_params *rows = resolve_rows(&p, B);
    fls_matrix dWm = {dW, FLS_DTYPE_BF16, V, D, D}, dHm = {dH, FLS_DTYPE_BF16, B, D, D};
    fls_matrix dLm = {dL, FLS_DTYPE_F32, B, V, V};
    int mism = 0;
    for (int k = 0; k <= N_CFGS; k++) {
        /* k == N_CFGS: from logits */
        fls_request req = {.rows = rows,
                           .batch = B,
                           .vocab = V,
                           .draws = n,
                           .method = k < N_CFGS ? k_cfgs[k].method : FLS_METHOD_FUSED,
                           .first_draw = (uint32_t)d0,
                           .K = 1};
        fls_outputs og = {(int64_t *)dt, NULL, NULL};
        fls_cuda_opts o = k < N_CFGS ? cfg_opts(k) : cfg_opts(0);
        st = k < N_CFGS ? fls_cuda_run(g_gpu, &dWm, &dHm, NULL, &req, &og, &o)
                        : fls_cuda_run(g_gpu, NULL, NULL, &dLm, &req, &og, &o);
        CHECK(st == FLS_OK, "%s: %s", k < N_CFGS ? k_cfgs[k].label : "from logits", fls_status_string(st));
        fls_device_download(got, dt, 8 * (size_t)(B * n));
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < n; j++)
                mism += got[b * n + j] != ref[b * all + d0 + j];
    }
    free(rows);
    CHECK(mism == 0, "%d tokens of draws %lld.. differ from the CPU engine's", mism, (long long)d0);
    free(W);
    free(H);
    free(L);
    free(ref);
    free(got);
    fls_device_free(dW);
    fls_device_free(dH);
    fls_device_free(dL);
    fls_device_free(dt);
}

#ifdef FLS_HAVE_NCCL
/* Tensor-parallel exchange over NCCL with a world of one rank (this
 * machine's one GPU): the state round-trips through ncclAllGather and
 * finalizes to the one-shot tokens; two CPU shards merged locally and the
 * NCCL-merged state agree. */
static void test_nccl_one_rank(void)
{
    const int64_t B = 4, V = 30011, draws = 3;
    g_rng = 909;
    float *L = malloc(sizeof(float) * (size_t)(B * V));
    CHECK(L, "host memory");
    for (int64_t i = 0; i < B * V; i++)
        L[i] = (float)((rndu() - 0.5) * 10.0);
    ncclComm_t comm;
    int dev = 0;
    CHECK(ncclCommInitAll(&comm, 1, &dev) == ncclSuccess, "ncclCommInitAll");
    for (int grouped = 0; grouped < 2; grouped++) {
        fls_params p;
        fls_params_default(&p);
        p.method = grouped ? FLS_METHOD_GROUPED : FLS_METHOD_FUSED;
        p.draws = draws;
        p.seed = 5;
        int64_t want[12], got[12];
        fls_matrix Lm = {L, FLS_DTYPE_F32, B, V, V};
        fls_outputs o = {want, NULL, NULL};
        CHECK_ST(fls_sample_logits(g_cpu, &Lm, &p, &o));
        fls_stream_t *s = NULL, *m = NULL;
        CHECK_ST(fls_stream_create(&s, g_cpu, B, V, &p));
        CHECK_ST(fls_stream_feed_logits(s, &Lm, 0));
        size_t sent = 0;
        CHECK_ST(fls_stream_allgather_nccl(s, g_cpu, comm, NULL, &m, &sent));
        o.tokens = got;
        CHECK_ST(fls_stream_finalize(m, &o));
        CHECK(memcmp(want, got, sizeof want) == 0, "NCCL-merged tokens differ (grouped %d)", grouped);
        printf("    NCCL world of 1 (%s): %zu bytes sent for %lld rows (%.1f per row; the logits: %lld per "
               "row)\n",
               grouped ? "grouped" : "flat", sent, (long long)B, (double)sent / (double)B,
               (long long)(4 * V));
        fls_stream_destroy(s);
        fls_stream_destroy(m);
    }
    ncclCommDestroy(comm);
    free(L);
}
#endif

/* The grouped method: tokens equal to the CPU engine's on integer logits
 * (every config: wgmma at g = 128, cuBLAS chunks and from logits at every
 * g), up to near-ties of group keys (L_k is a float-exp sum on the GPU, a
 * double one on the CPU: counted and reported), then the agreement rate on
 * random bf16 inputs at D = 4096, V = 151936. */
static void grouped_compare(const void *W, const void *H, int64_t V, int64_t D, int64_t B, int64_t draws,
                            fls_dtype dt, int64_t g, const char *what, int64_t *agree_out, int64_t *n_out)
{
    int64_t n = B * draws, agree_total = 0, total = 0;
    int64_t *tc = malloc(8 * (size_t)n), *tg = malloc(8 * (size_t)n);
    const size_t es = fls_dtype_size(dt);
    void *dW = to_dev(W, (size_t)(V * D) * es), *dH = to_dev(H, (size_t)(B * D) * es), *dt_ = NULL,
         *dL = NULL;
    float *Lh = malloc(4 * (size_t)(B * V));
    fls_device_malloc(&dt_, 8 * (size_t)n);
    CHECK(tc && tg && dW && dH && dt_ && Lh, "memory");
    fls_params p;
    fls_params_default(&p);
    p.method = FLS_METHOD_GROUPED;
    p.group_size = g;
    p.temperature_value = 0.7f;
    p.seed = 77;
    p.draws = draws;
    fls_matrix Wm = {W, dt, V, D, D}, Hm = {H, dt, B, D, D};
    fls_outputs oc = {tc, NULL, NULL};
    CHECK_ST(fls_sample_fused(g_cpu, &Wm, &Hm, &p, &oc));
    fls_row_params *rows = resolve_rows(&p, B);
    fls_matrix dWm = {dW, dt, V, D, D}, dHm = {dH, dt, B, D, D};
    const fls_cuda_path paths[3] = {FLS_CUDA_PATH_WGMMA, FLS_CUDA_PATH_CHUNKED, FLS_CUDA_PATH_AUTO};
    for (int k = 0; k < 4; k++) {
        if (k == 0 && g != 128)
            continue; /* the wgmma sampler's group is its tile */
        fls_request req = {.rows = rows,
                           .batch = B,
                           .vocab = V,
                           .draws = draws,
                           .method = FLS_METHOD_GROUPED,
                           .first_draw = 0,
                           .K = 1,
                           .group_size = g};
        fls_outputs og = {(int64_t *)dt_, NULL, NULL};
        fls_cuda_opts o;
        fls_cuda_opts_default(&o);
        fls_status st;
        if (k < 3) {
            o.path = paths[k];
            st = fls_cuda_run(g_gpu, &dWm, &dHm, NULL, &req, &og, &o);
        } else {
            /* from logits: the CPU engine's logits of the same inputs */
            if (!dL) {
                fls_params q = p;
                q.method = FLS_METHOD_FUSED;
                CHECK(fls_device_malloc(&dL, 4 * (size_t)(B * V)) == FLS_OK, "device memory");
                /* materialize with the CPU engine, exact for integer inputs */
                for (int64_t b = 0; b < B; b++)
                    for (int64_t v = 0; v < V; v++) {
                        float acc = 0.0f;
                        for (int64_t i = 0; i < D; i++) {
                            const float w = dt == FLS_DTYPE_F32 ? ((const float *)W)[v * D + i]
                                            : dt == FLS_DTYPE_BF16
                                                ? fls_bf16_to_f32(((const uint16_t *)W)[v * D + i])
                                                : fls_f16_to_f32(((const uint16_t *)W)[v * D + i]);
                            const float h = dt == FLS_DTYPE_F32 ? ((const float *)H)[b * D + i]
                                            : dt == FLS_DTYPE_BF16
                                                ? fls_bf16_to_f32(((const uint16_t *)H)[b * D + i])
                                                : fls_f16_to_f32(((const uint16_t *)H)[b * D + i]);
                            acc += w * h;
                        }
                        Lh[b * V + v] = acc;
                    }
                CHECK(fls_device_upload(dL, Lh, 4 * (size_t)(B * V)) == FLS_OK, "upload");
                (void)q;
            }
            fls_matrix dLm = {dL, FLS_DTYPE_F32, B, V, V};
            st = fls_cuda_run(g_gpu, NULL, NULL, &dLm, &req, &og, &o);
        }
        CHECK(st == FLS_OK, "%s g %lld config %d: %s", what, (long long)g, k, fls_status_string(st));
        fls_device_download(tg, dt_, 8 * (size_t)n);
        int64_t agree = 0;
        for (int64_t i = 0; i < n; i++)
            agree += tg[i] == tc[i];
        agree_total += agree;
        total += n;
    }
    free(rows);
    *agree_out = agree_total;
    *n_out = total;
    free(tc);
    free(tg);
    free(Lh);
    fls_device_free(dW);
    fls_device_free(dH);
    fls_device_free(dt_);
    fls_device_free(dL);
}

static void test_grouped(void)
{
    const struct {
        int64_t V, D, B, draws;
    } shapes[] = {{3001, 64, 5, 9}, {50257, 72, 33, 2}, {4099, 40, 130, 3}};
    const int64_t gs[] = {2, 32, 128, 1024};
    int64_t agree = 0, n = 0;
    for (int si = 0; si < 3; si++) {
        g_rng = 300 + (uint64_t)si;
        void *W = make_int_matrix(shapes[si].V, shapes[si].D, shapes[si].D, FLS_DTYPE_BF16, 3);
        void *H = make_int_matrix(shapes[si].B, shapes[si].D, shapes[si].D, FLS_DTYPE_BF16, 2);
        for (int gi = 0; gi < 4; gi++) {
            int64_t a = 0, m = 0;
            grouped_compare(W, H, shapes[si].V, shapes[si].D, shapes[si].B, shapes[si].draws, FLS_DTYPE_BF16,
                            gs[gi], "integer logits", &a, &m);
            agree += a;
            n += m;
        }
        free(W);
        free(H);
    }
    printf("    GROUPED integer logits, every config and g: %lld/%lld tokens equal to the CPU engine's\n",
           (long long)agree, (long long)n);
    CHECK(agree * 1000 >= n * 999, "grouped agreement below 99.9%%");
    /* random bf16 at the paper's shape (not in --quick: the sanitizer runs) */
    if (g_quick)
        return;
    const int64_t V = 151936, D = 4096, B = 32, draws = 8;
    g_rng = 4343;
    void *W = make_rand_matrix(V, D, D, FLS_DTYPE_BF16, 3.4f / sqrtf((float)D));
    void *H = make_rand_matrix(B, D, D, FLS_DTYPE_BF16, 1.0f);
    int64_t a = 0, m = 0;
    /* wgmma and chunked only (from logits needs the host reference: slow at this size) */
    {
        int64_t *tc = malloc(8 * (size_t)(B * draws)), *tg = malloc(8 * (size_t)(B * draws));
        void *dW = to_dev(W, (size_t)(V * D) * 2), *dH = to_dev(H, (size_t)(B * D) * 2), *dt_ = NULL;
        fls_device_malloc(&dt_, 8 * (size_t)(B * draws));
        CHECK(tc && tg && dW && dH && dt_, "memory");
        fls_params p;
        fls_params_default(&p);
        p.method = FLS_METHOD_GROUPED;
        p.temperature_value = 0.7f;
        p.seed = 5;
        p.draws = draws;
        fls_matrix Wm = {W, FLS_DTYPE_BF16, V, D, D}, Hm = {H, FLS_DTYPE_BF16, B, D, D};
        fls_outputs oc = {tc, NULL, NULL};
        CHECK_ST(fls_sample_fused(g_cpu, &Wm, &Hm, &p, &oc));
        fls_row_params *rows = resolve_rows(&p, B);
        fls_matrix dWm = {dW, FLS_DTYPE_BF16, V, D, D}, dHm = {dH, FLS_DTYPE_BF16, B, D, D};
        const fls_cuda_path paths[2] = {FLS_CUDA_PATH_WGMMA, FLS_CUDA_PATH_CHUNKED};
        int64_t ag[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            fls_request req = {.rows = rows,
                               .batch = B,
                               .vocab = V,
                               .draws = draws,
                               .method = FLS_METHOD_GROUPED,
                               .first_draw = 0,
                               .K = 1,
                               .group_size = 128};
            fls_outputs og = {(int64_t *)dt_, NULL, NULL};
            fls_cuda_opts o;
            fls_cuda_opts_default(&o);
            o.path = paths[k];
            CHECK_ST(fls_cuda_run(g_gpu, &dWm, &dHm, NULL, &req, &og, &o));
            fls_device_download(tg, dt_, 8 * (size_t)(B * draws));
            for (int64_t i = 0; i < B * draws; i++)
                ag[k] += tg[i] == tc[i];
        }
        a = ag[0] + ag[1];
        m = 2 * B * draws;
        printf("    AGREEMENT grouped (g 128) random bf16 D=%lld V=%lld T=0.7: wgmma vs cpu %lld/%lld, "
               "chunked vs cpu "
               "%lld/%lld\n",
               (long long)D, (long long)V, (long long)ag[0], (long long)(B * draws), (long long)ag[1],
               (long long)(B * draws));
        free(rows);
        free(tc);
        free(tg);
        fls_device_free(dW);
        fls_device_free(dH);
        fls_device_free(dt_);
    }
    CHECK(a * 100 >= m * 99, "grouped agreement on random bf16 below 99%%");
    free(W);
    free(H);
}

/* Serving mode: an async context on its own stream with the rows' params
 * in device memory; a call captured in a CUDA graph and replayed with new
 * offsets gives, at every replay, the tokens of a synchronous call with
 * those offsets; a bad temperature written into the device array makes the
 * replay's status FLS_ERR_TEMPERATURE (fls_context_sync) and writes nothing. */
static void async_graph_case(int rule)
{
    const int64_t V = 50257, D = 64, B = 40;
    g_rng = 818;
    void *W = make_rand_matrix(V, D, D, FLS_DTYPE_BF16, 0.5f),
         *H = make_rand_matrix(B, D, D, FLS_DTYPE_BF16, 1.0f);
    CHECK(W && H, "host memory");
    void *dW = to_dev(W, (size_t)(V * D) * 2), *dH = to_dev(H, (size_t)(B * D) * 2), *dtok = NULL, *dT = NULL,
         *dS = NULL, *dO = NULL;
    float T[40];
    uint64_t seeds[40], offs[40];
    for (int b = 0; b < B; b++) {
        T[b] = b % 5 == 0 ? 0.0f : 0.5f + 0.05f * (float)b;
        seeds[b] = 1000 + (uint64_t)b;
        offs[b] = 0;
    }
    fls_device_malloc(&dtok, 8 * (size_t)B);
    dT = to_dev(T, sizeof T);
    dS = to_dev(seeds, sizeof seeds);
    dO = to_dev(offs, sizeof offs);
    CHECK(dW && dH && dtok && dT && dS && dO, "device memory");
    void *stream = NULL;
    CHECK(fls_kat_stream_create(&stream) == 0, "stream");
    fls_context_t *actx = NULL;
    CHECK_ST(async_context(&actx, stream));
    fls_matrix Wm = {dW, FLS_DTYPE_BF16, V, D, D}, Hm = {dH, FLS_DTYPE_BF16, B, D, D};
    fls_params pd;
    fls_params_default(&pd);
    pd.params_on_device = 1;
    pd.temperature = dT;
    pd.row_seeds = dS;
    pd.row_offsets = dO;
    if (rule == 1) { /* the list kernel draws; the commit kernel commits */
        pd.top_k = 50;
        pd.top_p = 0.9f;
    } else if (rule == 2) { /* the select pass, the final kernel, then the commit kernel */
        pd.min_p = 0.05f;
    }
    fls_outputs od = {(int64_t *)dtok, NULL, NULL};
    int64_t got[40], want[40];
    int mism = 0;
    /* warm-up (eager, async), then capture */
    CHECK_ST(fls_sample_fused(actx, &Wm, &Hm, &pd, &od));
    CHECK_ST(fls_context_sync(actx));
    CHECK(fls_kat_capture_begin(stream) == 0, "begin capture");
    fls_status cst = fls_sample_fused(actx, &Wm, &Hm, &pd, &od);
    /* a stream's feeds copy synchronously: refused during a capture, which survives */
    fls_params ps;
    fls_params_default(&ps);
    fls_stream_t *gst = NULL;
    fls_status cst2 = fls_stream_create(&gst, actx, B, V, &ps);
    fls_status fst = gst ? fls_stream_feed_fused(gst, &Wm, &Hm, 0) : cst2;
    fls_stream_destroy(gst);
    void *exec = NULL;
    const int cend = fls_kat_capture_end(stream, &exec);
    CHECK(cst == FLS_OK && cend == 0, "capture: %s", fls_status_string(cst));
    CHECK(cst2 == FLS_OK && fst == FLS_ERR_UNSUPPORTED, "a stream feed during a capture: %s / %s",
          fls_status_string(cst2), fls_status_string(fst));
    for (uint64_t step = 0; step < 5; step++) {
        for (int b = 0; b < B; b++)
            offs[b] = step * 7 + (uint64_t)b % 3;
        CHECK(fls_device_upload(dO, offs, sizeof offs) == FLS_OK, "upload offsets");
        CHECK(fls_kat_graph_launch(exec, stream) == 0, "replay");
        CHECK(fls_kat_stream_sync(stream) == 0, "sync");
        CHECK_ST(fls_context_sync(actx));
        fls_device_download(got, dtok, sizeof got);
        /* the synchronous reference with host params */
        fls_params ph;
        fls_params_default(&ph);
        ph.temperature = T;
        ph.row_seeds = seeds;
        ph.row_offsets = offs;
        ph.top_k = pd.top_k;
        ph.top_p = pd.top_p;
        ph.min_p = pd.min_p;
        fls_outputs oh = {(int64_t *)dtok, NULL, NULL};
        CHECK_ST(fls_sample_fused(g_gpu, &Wm, &Hm, &ph, &oh));
        fls_device_download(want, dtok, sizeof want);
        for (int b = 0; b < B; b++)
            mism += got[b] != want[b];
    }
    CHECK(mism == 0, "%d tokens of graph replays differ from synchronous calls", mism);
    /* a bad temperature: the replay's status, nothing written */
    int64_t guard[40];
    for (int b = 0; b < B; b++)
        guard[b] = -777;
    CHECK(fls_device_upload(dtok, guard, sizeof guard) == FLS_OK, "guard");
    T[3] = -1.0f;
    CHECK(fls_device_upload(dT, T, sizeof T) == FLS_OK, "upload T");
    CHECK(fls_kat_graph_launch(exec, stream) == 0, "replay");
    fls_status sst = fls_context_sync(actx);
    CHECK(sst == FLS_ERR_TEMPERATURE, "a negative device temperature gave %s", fls_status_string(sst));
    fls_device_download(got, dtok, sizeof got);
    CHECK(memcmp(got, guard, sizeof got) == 0, "outputs written despite the error");
    CHECK_ST(fls_context_sync(actx)); /* the sticky status was cleared */
    /* capturing with host params is refused */
    CHECK(fls_kat_capture_begin(stream) == 0, "begin capture");
    fls_params ph;
    fls_params_default(&ph);
    cst = fls_sample_fused(actx, &Wm, &Hm, &ph, &od);
    void *exec2 = NULL;
    (void)fls_kat_capture_end(stream, &exec2);
    CHECK(cst == FLS_ERR_UNSUPPORTED, "capture with host params gave %s", fls_status_string(cst));
    if (exec2)
        fls_kat_graph_destroy(exec2);
    exec2 = NULL;
    if (rule) {
        /* a rule with per-row values: a replay could not see them */
        int64_t rk[40];
        for (int b = 0; b < B; b++)
            rk[b] = 10 + b;
        fls_params pr = pd;
        pr.row_top_k = rk;
        CHECK(fls_kat_capture_begin(stream) == 0, "begin capture");
        cst = fls_sample_fused(actx, &Wm, &Hm, &pr, &od);
        (void)fls_kat_capture_end(stream, &exec2);
        CHECK(cst == FLS_ERR_UNSUPPORTED, "capture with per-row rule values gave %s", fls_status_string(cst));
        if (exec2)
            fls_kat_graph_destroy(exec2);
        /* device params with a rule on a synchronous context */
        cst = fls_sample_fused(g_gpu, &Wm, &Hm, &pd, &od);
        CHECK(cst == FLS_ERR_UNSUPPORTED, "device params and a rule, synchronous, gave %s",
              fls_status_string(cst));
    }
    printf("    ASYNC graph replays%s: 5 x %lld tokens identical to synchronous calls; error status through "
           "the graph\n",
           rule == 1   ? " (top-k 50 + top-p 0.9)"
           : rule == 2 ? " (min-p 0.05)"
                       : "",
           (long long)B);
    fls_kat_graph_destroy(exec);
    fls_context_destroy(actx);
    fls_kat_stream_destroy(stream);
    fls_device_free(dW);
    fls_device_free(dH);
    fls_device_free(dtok);
    fls_device_free(dT);
    fls_device_free(dS);
    fls_device_free(dO);
    free(W);
    free(H);
}

/* The plain sampler, then a rule (top-k 50 + top-p 0.9, then min-p 0.05,
 * one value for every row), each captured and replayed. */
static void test_async_graph(void)
{
    async_graph_case(0);
    async_graph_case(1);
    async_graph_case(2);
}

/* ---- masks, logit bias and penalties ---- */

/* A call's mask, bias and penalty arrays (host), and their device copies. */
typedef struct mods_in {
    int64_t B, V, S, K, ld;
    int32_t *mask;
    uint8_t *mrows;
    int64_t *bids, *sids;
    float *bvals, *pen; /* pen: 3 B (repetition, presence, frequency) */
    int32_t *scnt;
    void *d[7];
} mods_in;

static void mods_free(mods_in *m)
{
    free(m->mask);
    free(m->mrows);
    free(m->bids);
    free(m->sids);
    free(m->bvals);
    free(m->pen);
    free(m->scnt);
    for (int i = 0; i < 7; i++)
        fls_device_free(m->d[i]);
    memset(m, 0, sizeof *m);
}

/* Distinct ids of one row: n of them in [0, V), from a small range where
 * overlap is wanted (the bias and seen lists share ids), -1 padding. */
static void mods_ids(int64_t *ids, int64_t n, int64_t V, int64_t span)
{
    if (span < 2 * n)
        span = 2 * n; /* n distinct ids need room: a span of n or less never ends */
    for (int64_t i = 0; i < n; i++) {
        int64_t id;
        int again;
        do {
            id = (int64_t)(rnd() % (uint64_t)(span < V ? span : V));
            again = 0;
            for (int64_t j = 0; j < i; j++)
                again |= ids[j] == id;
        } while (again);
        ids[i] = id;
    }
    for (int64_t i = 0; i < n; i++)
        if (rnd() % 9 == 0)
            ids[i] = -1;
}

/* Random masks (row 1 unmasked through mrows; row 2 allows one token),
 * bias values that lift tail tokens to the top, seen counts 0 .. 3 and
 * per-row penalties; device copies for params_on_device. */
static int mods_make(mods_in *m, int64_t B, int64_t V, int64_t S, int64_t K)
{
    memset(m, 0, sizeof *m);
    m->B = B;
    m->V = V;
    m->S = S;
    m->K = K;
    m->ld = (V + 31) / 32 + 3;
    m->mask = calloc((size_t)(B * m->ld), 4);
    m->mrows = malloc((size_t)B);
    m->bids = malloc(8 * (size_t)(B * (K ? K : 1)));
    m->bvals = malloc(4 * (size_t)(B * (K ? K : 1)));
    m->sids = malloc(8 * (size_t)(B * (S ? S : 1)));
    m->scnt = malloc(4 * (size_t)(B * (S ? S : 1)));
    m->pen = malloc(4 * (size_t)(3 * B));
    if (!m->mask || !m->mrows || !m->bids || !m->bvals || !m->sids || !m->scnt || !m->pen)
        return -1;
    const float bias_vals[] = {-2.5f, 0.75f, 3.0f, 40.0f, -30.0f, 0.1f};
    const float reps[] = {1.0f, 1.3f, 0.7f, 2.0f};
    for (int64_t b = 0; b < B; b++) {
        for (int64_t v = 0; v < V; v++)
            if (b == 2 ? v == V / 2 : rnd() % 10 < 7)
                m->mask[b * m->ld + v / 32] |= (int32_t)(1u << (v % 32));
        for (int64_t w = (V + 31) / 32; w < m->ld; w++)
            m->mask[b * m->ld + w] = -1; /* words past V are not read */
        if (V % 32)
            m->mask[b * m->ld + V / 32] |= (int32_t)(~0u << (V % 32)); /* nor bits past V */
        m->mrows[b] = b != 1;
        mods_ids(m->sids + b * S, S, V, 64 + (int64_t)(rnd() % 2) * V);
        mods_ids(m->bids + b * K, K, V, 64 + (int64_t)(rnd() % 2) * V);
        for (int64_t i = 0; i < S; i++)
            m->scnt[b * S + i] = (int32_t)(rnd() % 4);
        for (int64_t i = 0; i < K; i++)
            m->bvals[b * K + i] = bias_vals[rnd() % 6];
        m->pen[b] = reps[b % 4];
        m->pen[B + b] = (float)(rnd() % 3) * 0.5f;
        m->pen[2 * B + b] = (float)(rnd() % 3) * 0.25f - 0.25f;
    }
    return 0;
}

static int mods_upload(mods_in *m)
{
    const int64_t B = m->B;
    m->d[0] = to_dev(m->mask, 4 * (size_t)(B * m->ld));
    m->d[1] = to_dev(m->mrows, (size_t)B);
    m->d[2] = to_dev(m->bids, 8 * (size_t)(B * (m->K ? m->K : 1)));
    m->d[3] = to_dev(m->bvals, 4 * (size_t)(B * (m->K ? m->K : 1)));
    m->d[4] = to_dev(m->sids, 8 * (size_t)(B * (m->S ? m->S : 1)));
    m->d[5] = to_dev(m->scnt, 4 * (size_t)(B * (m->S ? m->S : 1)));
    m->d[6] = to_dev(m->pen, 4 * (size_t)(3 * B));
    for (int i = 0; i < 7; i++)
        if (!m->d[i])
            return -1;
    return 0;
}

/* params p gets the arrays (host, or the device copies): which = bit 0 the
 * mask, 1 the bias, 2 the seen lists and per-row penalties, 3 scalar
 * penalties instead. */
static void mods_set(fls_params *p, const mods_in *m, int which, int dev)
{
    const int64_t B = m->B;
    if (which & 1) {
        p->allowed_bitmask = dev ? m->d[0] : m->mask;
        p->bitmask_ld = m->ld;
        p->bitmask_rows = dev ? m->d[1] : m->mrows;
    }
    if (which & 2) {
        p->logit_bias_ids = dev ? m->d[2] : m->bids;
        p->logit_bias_values = dev ? m->d[3] : m->bvals;
        p->logit_bias_k = m->K;
    }
    if (which & 12) {
        p->seen_ids = dev ? m->d[4] : m->sids;
        p->seen_counts = dev ? m->d[5] : m->scnt;
        p->seen_k = m->S;
    }
    if (which & 4) {
        p->row_repetition_penalty = dev ? (float *)m->d[6] : m->pen;
        p->row_presence_penalty = dev ? (float *)m->d[6] + B : m->pen + B;
        p->row_frequency_penalty = dev ? (float *)m->d[6] + 2 * B : m->pen + 2 * B;
    } else if (which & 8) {
        p->repetition_penalty = 1.25f;
        p->presence_penalty = 0.5f;
        p->frequency_penalty = 0.25f;
    }
}

typedef struct mods_run {
    const char *name;
    int logits; /* fls_sample_logits on the exact integer logits */
    fls_method method;
    fls_cuda_path path;
    int64_t top_k, wr;
    float top_p, min_p;
    fls_noise noise;
    int which, dev; /* mods_set */
} mods_run;

/* The CPU engine against the CUDA engine on exactly computable logits
 * (integer W and H, so both engines' logits are the same floats and every
 * change is the same fp32 operation): identical tokens, log-sum-exp and
 * log-probabilities to 2e-5, for each run. */
static void mods_case(int64_t V, int64_t D, int64_t B, int64_t S, int64_t K, int64_t draws,
                      const mods_run *runs, int nr)
{
    g_rng = 4242 + (uint64_t)V + (uint64_t)S;
    void *W = make_int_matrix(V, D, D, FLS_DTYPE_BF16, 3), *H = make_int_matrix(B, D, D, FLS_DTYPE_BF16, 2);
    const int64_t kmax = 4, n = B * draws * kmax;
    float *L = malloc(4 * (size_t)(B * V)), *T = malloc(4 * (size_t)B);
    int64_t *tc = malloc(8 * (size_t)n), *tg = malloc(8 * (size_t)n);
    float *lc = malloc(4 * (size_t)B), *lg = malloc(4 * (size_t)B), *pc = malloc(4 * (size_t)n),
          *pg = malloc(4 * (size_t)n);
    mods_in m;
    CHECK(W && H && L && T && tc && tg && lc && lg && pc && pg && mods_make(&m, B, V, S, K) == 0 &&
              mods_upload(&m) == 0,
          "memory");
    for (int64_t b = 0; b < B; b++) {
        T[b] = b == 3 ? 0.0f : (float)(0.3 + 1.7 * rndu());
        for (int64_t v = 0; v < V; v++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < D; k++)
                acc +=
                    fls_bf16_to_f32(((uint16_t *)W)[v * D + k]) * fls_bf16_to_f32(((uint16_t *)H)[b * D + k]);
            L[b * V + v] = acc;
        }
    }
    void *dW = to_dev(W, 2 * (size_t)(V * D)), *dH = to_dev(H, 2 * (size_t)(B * D)),
         *dL = to_dev(L, 4 * (size_t)(B * V));
    void *dT = to_dev(T, 4 * (size_t)B), *dtok = NULL, *dlse = NULL, *dlp = NULL;
    fls_cuda_malloc(&dtok, 8 * (size_t)n);
    fls_cuda_malloc(&dlse, 4 * (size_t)B);
    fls_cuda_malloc(&dlp, 4 * (size_t)n);
    CHECK(dW && dH && dL && dT && dtok && dlse && dlp, "device memory");
    const fls_matrix Wm = {W, FLS_DTYPE_BF16, V, D, D}, Hm = {H, FLS_DTYPE_BF16, B, D, D},
                     Lm = {L, FLS_DTYPE_F32, B, V, V}, dWm = {dW, FLS_DTYPE_BF16, V, D, D},
                     dHm = {dH, FLS_DTYPE_BF16, B, D, D}, dLm = {dL, FLS_DTYPE_F32, B, V, V};
    int bad = 0;
    for (int r = 0; r < nr; r++) {
        const mods_run *u = &runs[r];
        printf("      V=%lld: %s\n", (long long)V, u->name); /* progress: a hang shows where */
        fls_params p;
        fls_params_default(&p);
        p.temperature = T;
        p.seed = 99 + (uint64_t)r;
        p.draws = draws;
        p.method = u->method;
        p.top_k = u->top_k;
        p.top_p = u->top_p;
        p.min_p = u->min_p;
        p.without_replacement_k = u->wr;
        p.noise = u->noise;
        mods_set(&p, &m, u->which, 0);
        const int64_t nt = B * draws * (u->wr ? u->wr : 1);
        fls_outputs oc = {tc, lc, pc};
        fls_status sc =
            u->logits ? fls_sample_logits(g_cpu, &Lm, &p, &oc) : fls_sample_fused(g_cpu, &Wm, &Hm, &p, &oc);
        fls_params q = p;
        if (u->dev) {
            q.params_on_device = 1;
            q.temperature = dT;
            q.row_seeds = NULL;
            mods_set(&q, &m, u->which, 1);
        }
        fls_cuda_opts o;
        fls_cuda_opts_default(&o);
        o.path = u->path;
        fls_cuda_set_dev_opts(g_gpu, &o);
        for (int64_t i = 0; i < nt; i++)
            tg[i] = -7;
        fls_cuda_memcpy(dtok, tg, 8 * (size_t)nt, 1);
        fls_outputs og = {(int64_t *)dtok, (float *)dlse, (float *)dlp};
        fls_status sg = u->logits ? fls_sample_logits(g_gpu, &dLm, &q, &og)
                                  : fls_sample_fused(g_gpu, &dWm, &dHm, &q, &og);
        fls_cuda_opts_default(&o);
        fls_cuda_set_dev_opts(g_gpu, &o);
        if (sc != FLS_OK || sg != FLS_OK) {
            failf("V=%lld S=%lld %s: CPU %s, CUDA %s", (long long)V, (long long)S, u->name,
                  fls_status_string(sc), fls_status_string(sg));
            bad++;
            continue;
        }
        fls_cuda_memcpy(tg, dtok, 8 * (size_t)nt, 0);
        fls_cuda_memcpy(lg, dlse, 4 * (size_t)B, 0);
        fls_cuda_memcpy(pg, dlp, 4 * (size_t)nt, 0);
        int64_t mis = 0, first = -1;
        double err = 0.0;
        for (int64_t i = 0; i < nt; i++) {
            if (tg[i] != tc[i] && first < 0)
                first = i;
            mis += tg[i] != tc[i];
            err = fmax(err, fabs((double)pg[i] - pc[i]) / fmax(1.0, fabs(pc[i])));
        }
        for (int64_t b = 0; b < B; b++)
            err = fmax(err, fabs((double)lg[b] - lc[b]) / fmax(1.0, fabs(lc[b])));
        /* with the mask on, row 2 allows one token: every draw is that token */
        for (int64_t i = 0; i < draws && !u->wr && (u->which & 1); i++)
            mis += tc[2 * draws + i] != V / 2;
        if (mis || err > 2e-5) {
            failf("V=%lld S=%lld K=%lld %s: %lld of %lld tokens differ (first %lld: CUDA %lld, CPU %lld), "
                  "log-prob / log-sum-exp error %.3g",
                  (long long)V, (long long)S, (long long)K, u->name, (long long)mis, (long long)nt,
                  (long long)first, first >= 0 ? (long long)tg[first] : 0LL,
                  first >= 0 ? (long long)tc[first] : 0LL, err);
            bad++;
        }
    }
    printf("    V=%-6lld B=%lld S=%lld K=%lld draws=%lld: %d runs, %s\n", (long long)V, (long long)B,
           (long long)S, (long long)K, (long long)draws, nr,
           bad ? "MISMATCH" : "identical to the CPU engine");
    mods_free(&m);
    fls_cuda_free(dW);
    fls_cuda_free(dH);
    fls_cuda_free(dL);
    fls_cuda_free(dT);
    fls_cuda_free(dtok);
    fls_cuda_free(dlse);
    fls_cuda_free(dlp);
    free(W);
    free(H);
    free(L);
    free(T);
    free(tc);
    free(tg);
    free(lc);
    free(lg);
    free(pc);
    free(pg);
}

static const mods_run k_mods_runs[] = {
    {"fused, all", 0, FLS_METHOD_FUSED, FLS_CUDA_PATH_AUTO, 0, 0, 1.0f, 0.0f, FLS_NOISE_PER_TOKEN, 7, 0},
    {"fused wgmma asked, mask", 0, FLS_METHOD_FUSED, FLS_CUDA_PATH_WGMMA, 0, 0, 1.0f, 0.0f,
     FLS_NOISE_PER_TOKEN, 1, 0},
    {"fused chunked, bias", 0, FLS_METHOD_FUSED, FLS_CUDA_PATH_CHUNKED, 0, 0, 1.0f, 0.0f, FLS_NOISE_PER_TOKEN,
     2, 0},
    {"fused wgmma, all", 0, FLS_METHOD_FUSED, FLS_CUDA_PATH_WGMMA, 0, 0, 1.0f, 0.0f, FLS_NOISE_PER_TOKEN, 7,
     0},
    {"fused chunked, all", 0, FLS_METHOD_FUSED, FLS_CUDA_PATH_CHUNKED, 0, 0, 1.0f, 0.0f, FLS_NOISE_PER_TOKEN,
     7, 0},
    {"fused wgmma min-first, all", 0, FLS_METHOD_FUSED, FLS_CUDA_PATH_WGMMA, 0, 0, 1.0f, 0.0f,
     FLS_NOISE_MIN_FIRST, 7, 0},
    {"grouped wgmma, all", 0, FLS_METHOD_GROUPED, FLS_CUDA_PATH_WGMMA, 0, 0, 1.0f, 0.0f, FLS_NOISE_PER_TOKEN,
     7, 0},
    {"grouped chunked, all", 0, FLS_METHOD_GROUPED, FLS_CUDA_PATH_CHUNKED, 0, 0, 1.0f, 0.0f,
     FLS_NOISE_PER_TOKEN, 7, 0},
    {"fused wgmma, device arrays", 0, FLS_METHOD_FUSED, FLS_CUDA_PATH_WGMMA, 0, 0, 1.0f, 0.0f,
     FLS_NOISE_PER_TOKEN, 7, 1},
    {"grouped wgmma, device arrays", 0, FLS_METHOD_GROUPED, FLS_CUDA_PATH_WGMMA, 0, 0, 1.0f, 0.0f,
     FLS_NOISE_PER_TOKEN, 7, 1},
    {"fused, scalar penalties", 0, FLS_METHOD_FUSED, FLS_CUDA_PATH_AUTO, 0, 0, 1.0f, 0.0f,
     FLS_NOISE_PER_TOKEN, 9, 0},
    {"unfused gumbel, all", 0, FLS_METHOD_UNFUSED_GUMBEL, FLS_CUDA_PATH_AUTO, 0, 0, 1.0f, 0.0f,
     FLS_NOISE_PER_TOKEN, 7, 0},
    {"logits, all", 1, FLS_METHOD_FUSED, FLS_CUDA_PATH_AUTO, 0, 0, 1.0f, 0.0f, FLS_NOISE_PER_TOKEN, 7, 0},
    {"fused min-first, all", 0, FLS_METHOD_FUSED, FLS_CUDA_PATH_AUTO, 0, 0, 1.0f, 0.0f, FLS_NOISE_MIN_FIRST,
     7, 0},
    {"fused top-k 20, all", 0, FLS_METHOD_FUSED, FLS_CUDA_PATH_AUTO, 20, 0, 1.0f, 0.0f, FLS_NOISE_PER_TOKEN,
     7, 0},
    {"fused min-p 0.1 + top-p 0.9, all", 0, FLS_METHOD_FUSED, FLS_CUDA_PATH_AUTO, 0, 0, 0.9f, 0.1f,
     FLS_NOISE_PER_TOKEN, 7, 0},
    {"logits top-k 50 + top-p 0.8, all", 1, FLS_METHOD_FUSED, FLS_CUDA_PATH_AUTO, 50, 0, 0.8f, 0.0f,
     FLS_NOISE_PER_TOKEN, 7, 0},
    {"fused without replacement K=4 + top-k 30, all", 0, FLS_METHOD_FUSED, FLS_CUDA_PATH_AUTO, 30, 4, 1.0f,
     0.0f, FLS_NOISE_PER_TOKEN, 7, 0},
    {"fused, device arrays", 0, FLS_METHOD_FUSED, FLS_CUDA_PATH_AUTO, 0, 0, 1.0f, 0.0f, FLS_NOISE_PER_TOKEN,
     7, 1},
    {"logits, device arrays", 1, FLS_METHOD_FUSED, FLS_CUDA_PATH_AUTO, 0, 0, 1.0f, 0.0f, FLS_NOISE_PER_TOKEN,
     7, 1},
    {"unfused gumbel, device arrays", 0, FLS_METHOD_UNFUSED_GUMBEL, FLS_CUDA_PATH_AUTO, 0, 0, 1.0f, 0.0f,
     FLS_NOISE_PER_TOKEN, 7, 1},
};

/* Device arrays with a bad value: FLS_ERR_PARAM from the call's status, the
 * outputs untouched; an all-masked row: FLS_ERR_ALL_MASKED. */
static void mods_errors(void)
{
    const int64_t V = 3001, D = 24, B = 6, S = 20, K = 8;
    g_rng = 31337;
    void *W = make_int_matrix(V, D, D, FLS_DTYPE_BF16, 3), *H = make_int_matrix(B, D, D, FLS_DTYPE_BF16, 2);
    mods_in m;
    CHECK(W && H && mods_make(&m, B, V, S, K) == 0 && mods_upload(&m) == 0, "memory");
    void *dW = to_dev(W, 2 * (size_t)(V * D)), *dH = to_dev(H, 2 * (size_t)(B * D)), *dtok = NULL;
    fls_cuda_malloc(&dtok, 8 * (size_t)B);
    CHECK(dW && dH && dtok, "device memory");
    const fls_matrix dWm = {dW, FLS_DTYPE_BF16, V, D, D}, dHm = {dH, FLS_DTYPE_BF16, B, D, D};
    const char *names[7] = {"bias id = V", "seen id = -2",         "seen id twice", "negative count",
                            "NaN bias",    "repetition 0 (row 4)", "all masked row"};
    int wrong = 0;
    for (int c = 0; c < 7; c++) {
        mods_in e;
        CHECK(mods_make(&e, B, V, S, K) == 0, "memory");
        memcpy(e.mask, m.mask, 4 * (size_t)(B * m.ld));
        if (c == 0)
            e.bids[3 * K + 1] = V;
        else if (c == 1)
            e.sids[5 * S + 2] = -2;
        else if (c == 2) {
            e.sids[4 * S + 0] = 17;
            e.sids[4 * S + 7] = 17;
        } else if (c == 3)
            e.scnt[0] = -1;
        else if (c == 4)
            e.bvals[2 * K + 5] = NAN, e.bids[2 * K + 5] = 9;
        else if (c == 5)
            e.pen[4] = 0.0f;
        else
            memset(e.mask + 0 * e.ld, 0, 4 * (size_t)e.ld);
        CHECK(mods_upload(&e) == 0, "device memory");
        const fls_status want = c == 6 ? FLS_ERR_ALL_MASKED : FLS_ERR_PARAM;
        for (int dev = 0; dev < 2; dev++) {
            fls_params p;
            fls_params_default(&p);
            p.params_on_device = dev;
            mods_set(&p, &e, 7, dev);
            int64_t guard[6] = {-777, -777, -777, -777, -777, -777}, got[6];
            fls_cuda_memcpy(dtok, guard, sizeof guard, 1);
            fls_outputs o = {(int64_t *)dtok, NULL, NULL};
            const fls_status st = fls_sample_fused(g_gpu, &dWm, &dHm, &p, &o);
            fls_cuda_memcpy(got, dtok, sizeof got, 0);
            if (st != want || memcmp(got, guard, sizeof got) != 0) {
                failf("%s (%s arrays): %s, outputs %s", names[c], dev ? "device" : "host",
                      fls_status_string(st), memcmp(got, guard, sizeof got) ? "written" : "untouched");
                wrong++;
            }
        }
        mods_free(&e);
    }
    printf("    7 bad inputs x host / device arrays: %s\n", wrong ? "WRONG" : "the error, nothing written");
    mods_free(&m);
    fls_cuda_free(dW);
    fls_cuda_free(dH);
    fls_cuda_free(dtok);
    free(W);
    free(H);
}

/* A decode step with device arrays captured in a CUDA graph (plain, then
 * top-k 50) and replayed with changed seen counts, bias and mask: tokens
 * identical to synchronous calls with host arrays. */
static void mods_graph(int rule)
{
    const int64_t V = 20011, D = 40, B = 8, S = 30, K = 6;
    g_rng = 8080 + (uint64_t)rule;
    void *W = make_int_matrix(V, D, D, FLS_DTYPE_BF16, 3), *H = make_int_matrix(B, D, D, FLS_DTYPE_BF16, 2);
    mods_in m;
    CHECK(W && H && mods_make(&m, B, V, S, K) == 0 && mods_upload(&m) == 0, "memory");
    void *dW = to_dev(W, 2 * (size_t)(V * D)), *dH = to_dev(H, 2 * (size_t)(B * D)), *dtok = NULL;
    fls_cuda_malloc(&dtok, 8 * (size_t)B);
    CHECK(dW && dH && dtok, "device memory");
    const fls_matrix dWm = {dW, FLS_DTYPE_BF16, V, D, D}, dHm = {dH, FLS_DTYPE_BF16, B, D, D};
    void *stream = NULL;
    CHECK(fls_kat_stream_create(&stream) == 0, "stream");
    fls_context_t *actx = NULL;
    CHECK_ST(async_context(&actx, stream));
    fls_params pd;
    fls_params_default(&pd);
    pd.params_on_device = 1;
    pd.top_k = rule ? 50 : 0;
    mods_set(&pd, &m, 7, 1);
    fls_outputs od = {(int64_t *)dtok, NULL, NULL};
    CHECK_ST(fls_sample_fused(actx, &dWm, &dHm, &pd, &od));
    CHECK_ST(fls_context_sync(actx));
    CHECK(fls_kat_capture_begin(stream) == 0, "begin capture");
    const fls_status cst = fls_sample_fused(actx, &dWm, &dHm, &pd, &od);
    void *exec = NULL;
    const int cend = fls_kat_capture_end(stream, &exec);
    CHECK(cst == FLS_OK && cend == 0, "capture: %s", fls_status_string(cst));
    int mis = 0;
    for (int step = 0; step < 5; step++) {
        for (int64_t i = 0; i < B * S; i++)
            m.scnt[i] = (m.scnt[i] + step) % 5;
        for (int64_t i = 0; i < B * K; i++)
            m.bvals[i] = (float)step - m.bvals[i];
        for (int64_t i = 0; i < B * m.ld; i += 3)
            m.mask[i] ^= (int32_t)(0x5555u << step);
        m.mask[2 * m.ld + (V / 2) / 32] |= (int32_t)(1u << ((V / 2) % 32)); /* row 2 keeps a token */
        CHECK(fls_device_upload(m.d[0], m.mask, 4 * (size_t)(B * m.ld)) == FLS_OK &&
                  fls_device_upload(m.d[3], m.bvals, 4 * (size_t)(B * K)) == FLS_OK &&
                  fls_device_upload(m.d[5], m.scnt, 4 * (size_t)(B * S)) == FLS_OK,
              "upload");
        CHECK(fls_kat_graph_launch(exec, stream) == 0, "replay");
        CHECK(fls_kat_stream_sync(stream) == 0, "sync");
        CHECK_ST(fls_context_sync(actx));
        int64_t got[8], want[8];
        fls_device_download(got, dtok, sizeof got);
        fls_params ph;
        fls_params_default(&ph);
        ph.top_k = pd.top_k;
        mods_set(&ph, &m, 7, 0);
        CHECK_ST(fls_sample_fused(g_gpu, &dWm, &dHm, &ph, &od));
        fls_device_download(want, dtok, sizeof want);
        for (int b = 0; b < B; b++)
            mis += got[b] != want[b];
    }
    /* a bad device value through the graph: the status, nothing written */
    int64_t guard[8] = {-5, -5, -5, -5, -5, -5, -5, -5}, got[8];
    CHECK(fls_device_upload(dtok, guard, sizeof guard) == FLS_OK, "guard");
    m.sids[3] = V + 5;
    CHECK(fls_device_upload(m.d[4], m.sids, 8 * (size_t)(B * S)) == FLS_OK, "upload");
    CHECK(fls_kat_graph_launch(exec, stream) == 0, "replay");
    const fls_status sst = fls_context_sync(actx);
    fls_device_download(got, dtok, sizeof got);
    CHECK(mis == 0, "%d tokens of graph replays differ from synchronous calls", mis);
    CHECK(sst == FLS_ERR_PARAM && memcmp(got, guard, sizeof got) == 0,
          "a seen id out of range through the graph: %s, outputs %s", fls_status_string(sst),
          memcmp(got, guard, sizeof got) ? "written" : "untouched");
    printf("    graph replays%s with changed mask, bias and counts: 5 x %lld tokens identical to synchronous "
           "calls; a bad device id is FLS_ERR_PARAM through the graph\n",
           rule ? " (top-k 50)" : "", (long long)B);
    fls_kat_graph_destroy(exec);
    fls_context_destroy(actx);
    fls_kat_stream_destroy(stream);
    mods_free(&m);
    fls_cuda_free(dW);
    fls_cuda_free(dH);
    fls_cuda_free(dtok);
    free(W);
    free(H);
}

static void test_mods(void)
{
    const int nr = (int)(sizeof k_mods_runs / sizeof k_mods_runs[0]);
    mods_case(3001, 24, 9, 40, 12, 3, k_mods_runs, nr);
    mods_errors();
    mods_graph(0);
    mods_graph(1);
    mods_case(50257, 40, 5, 300, 50, 2, k_mods_runs, nr);
    /* two batch tiles of 128 rows: several rows a sampling warp, each with its own cursor */
    mods_case(20011, 40, 130, 64, 8, 1, k_mods_runs, nr);
    if (!g_quick)
        mods_case(151936, 24, 3, 6000, 100, 1, k_mods_runs, nr); /* a sort of 8192 keys */
}

/* From-logits: the same floats give the same tokens; masks; NaN; all masked. */
static void test_logits_path(void)
{
    const int64_t B = 7, V = 50257, ld = 50260, draws = 3;
    g_rng = 555;
    float *L = malloc(sizeof(float) * (size_t)(B * ld));
    int64_t *tc = malloc(8 * B * draws), *tg = malloc(8 * B * draws);
    CHECK(L && tc && tg, "memory");
    for (int64_t i = 0; i < B * ld; i++)
        L[i] = (float)(rndu() * 8.0 - 4.0);
    for (int64_t v = 0; v < V; v += 3)
        L[2 * ld + v] = -INFINITY; /* masked tokens in row 2 */
    for (int64_t v = 0; v < V; v++)
        if (v != 4097)
            L[5 * ld + v] = -INFINITY; /* row 5: one finite token */
    fls_params p;
    fls_params_default(&p);
    p.seed = 7;
    p.draws = draws;
    fls_matrix Lm = {L, FLS_DTYPE_F32, B, V, ld};
    fls_outputs oc = {tc, NULL, NULL};
    CHECK_ST(fls_sample_logits(g_cpu, &Lm, &p, &oc));
    void *dL = to_dev(L, sizeof(float) * (size_t)(B * ld)), *dt = NULL;
    fls_cuda_malloc(&dt, 8 * B * draws);
    CHECK(dL && dt, "device memory");
    fls_matrix dLm = {dL, FLS_DTYPE_F32, B, V, ld};
    fls_outputs og = {(int64_t *)dt, NULL, NULL};
    fls_status st = fls_sample_logits(g_gpu, &dLm, &p, &og);
    if (st == FLS_OK)
        fls_cuda_memcpy(tg, dt, 8 * B * draws, 0);
    int mism = 0, masked_hit = 0;
    for (int64_t i = 0; i < B * draws; i++)
        mism += tg[i] != tc[i];
    for (int64_t d = 0; d < draws; d++) {
        masked_hit += tg[2 * draws + d] % 3 == 0;
        masked_hit += tg[5 * draws + d] != 4097;
    }
    /* NaN: FLS_ERR_NAN and the guard stays */
    int64_t guard[21];
    for (int i = 0; i < 21; i++)
        guard[i] = -5;
    fls_cuda_memcpy(dt, guard, sizeof guard, 1);
    float nanv = NAN, ninf = -INFINITY;
    fls_cuda_memcpy((float *)dL + 3 * ld + 123, &nanv, 4, 1);
    fls_status st_nan = fls_sample_logits(g_gpu, &dLm, &p, &og);
    int64_t back[21];
    fls_cuda_memcpy(back, dt, sizeof back, 0);
    int untouched_nan = memcmp(back, guard, sizeof back) == 0;
    /* +inf is the same error (the CPU engine's rule, docs/NOISE.md) */
    float pinf = INFINITY;
    fls_cuda_memcpy((float *)dL + 3 * ld + 123, &pinf, 4, 1);
    fls_status st_inf = fls_sample_logits(g_gpu, &dLm, &p, &og);
    fls_cuda_memcpy(back, dt, sizeof back, 0);
    untouched_nan &= memcmp(back, guard, sizeof back) == 0;
    /* all -inf row */
    fls_cuda_memcpy((float *)dL + 3 * ld + 123, &L[3 * ld + 123], 4, 1);
    for (int64_t v = 0; v < V; v++)
        L[4 * ld + v] = -INFINITY;
    fls_cuda_memcpy((float *)dL + 4 * ld, L + 4 * ld, 4 * V, 1);
    (void)ninf;
    fls_status st_mask = fls_sample_logits(g_gpu, &dLm, &p, &og);
    fls_cuda_memcpy(back, dt, sizeof back, 0);
    int untouched_mask = memcmp(back, guard, sizeof back) == 0;
    /* multinomial on the GPU from logits: must run and never pick a masked token */
    fls_params pm = p;
    pm.method = FLS_METHOD_UNFUSED_MULTINOMIAL;
    fls_status st_mn = fls_sample_logits(g_gpu, &dLm, &pm, &og); /* row 4 is all masked: error */
    fls_cuda_free(dL);
    fls_cuda_free(dt);
    free(L);
    free(tc);
    free(tg);
    CHECK(st == FLS_OK, "gpu from logits: %s", fls_status_string(st));
    CHECK(mism == 0, "%d tokens differ between the CPU and GPU from-logits samplers", mism);
    CHECK(masked_hit == 0, "a masked token was sampled");
    CHECK(st_nan == FLS_ERR_NAN, "NaN logit gave %s", fls_status_string(st_nan));
    CHECK(st_inf == FLS_ERR_NAN, "+inf logit gave %s", fls_status_string(st_inf));
    CHECK(untouched_nan, "outputs written despite FLS_ERR_NAN (NaN or +inf)");
    CHECK(st_mask == FLS_ERR_ALL_MASKED, "all -inf row gave %s", fls_status_string(st_mask));
    CHECK(untouched_mask, "outputs written despite FLS_ERR_ALL_MASKED");
    CHECK(st_mn == FLS_ERR_ALL_MASKED, "multinomial, all -inf row gave %s", fls_status_string(st_mn));
}

/* ---- skipping (common.cuh, fls_draw_skip) changes no token ----
 * From-logits sampling with the bound-based skipping on and forced off
 * (fls_cuda_opts.no_skip), against the CPU engine: tokens identical, and
 * logsumexp / logprobs identical in bits between the two GPU runs. B >= 16
 * gives 1024-token segments, where skipping is active. Adversarial inputs:
 * exact ties, near-ties one ulp apart, quantized logits at tiny T (the noise
 * decides among tied maxima), T up to 100 (noise dominates: most tokens are
 * candidates, the queue path runs full), masked tokens and fully masked
 * segments, one finite token per row, a huge spread. */
enum { SK_RANDOM, SK_EQUAL, SK_QUANT, SK_NEARTIE, SK_MASKED, SK_SPREAD, SK_TOPHEAVY, SK_COUNT };
static const char *sk_names[SK_COUNT] = {"random",     "all equal",   "quantized", "near-ties",
                                         "masked 95%", "spread +-30", "top-heavy"};

static float sk_logit(int kind, int64_t b, int64_t v, int64_t V)
{
    switch (kind) {
    case SK_RANDOM:
        return (float)(rndu() * 8.0 - 4.0);
    case SK_EQUAL:
        return b % 2 ? 0.0f : 2.5f;
    case SK_QUANT:
        return (float)((int)(rnd() % 7) - 3);
    case SK_NEARTIE: {
        uint64_t r = rnd() % 4;
        return r == 0 ? 1.0f : (r == 1 ? nextafterf(1.0f, 2.0f) : (r == 2 ? nextafterf(1.0f, 0.0f) : 0.5f));
    }
    case SK_MASKED:
        if (b % 4 == 1) /* one finite token, in the last segment */
            return v == V - 1 ? 0.25f : -INFINITY;
        if (b % 4 == 2 && v < 30000) /* whole segments masked */
            return -INFINITY;
        return rnd() % 20 == 0 ? (float)(rndu() * 6.0 - 3.0) : -INFINITY;
    case SK_SPREAD:
        return (v * 7919 + b * 31) % 5003 == 0 ? 30.0f : -30.0f;
    default: /* many tokens just below the maximum: thr stays low relative to them */
        return (float)(5.0 - 0.01 * (double)(rnd() % 64));
    }
}

static void test_skip_identity(void)
{
    const int64_t Bs[2] = {32, 3};
    const float temps[8] = {0.0f, 1e-2f, 0.05f, 0.7f, 1.0f, 3.0f, 100.0f, 0.7f};
    int64_t bad_tok = 0, bad_cpu = 0, bad_bits = 0, runs = 0;
    for (int kind = 0; kind < SK_COUNT; kind++) {
        for (int bi = 0; bi < 2; bi++) {
            const int64_t B = Bs[bi], V = kind == SK_RANDOM ? 151936 + 13 : 50257, ld = V + 3, draws = 3;
            const int64_t n = B * draws;
            g_rng = 9000 + (uint64_t)kind * 17 + (uint64_t)bi;
            float *L = malloc(sizeof(float) * (size_t)(B * ld));
            float *T = malloc(sizeof(float) * (size_t)B);
            uint64_t *seeds = malloc(8 * (size_t)B), *offs = malloc(8 * (size_t)B);
            int64_t *tc = malloc(8 * (size_t)n), *t1 = malloc(8 * (size_t)n), *t0 = malloc(8 * (size_t)n);
            float *lse1 = malloc(4 * (size_t)B), *lse0 = malloc(4 * (size_t)B);
            float *lp1 = malloc(4 * (size_t)n), *lp0 = malloc(4 * (size_t)n);
            CHECK(L && T && seeds && offs && tc && t1 && t0 && lse1 && lse0 && lp1 && lp0, "host memory");
            for (int64_t b = 0; b < B; b++) {
                for (int64_t v = 0; v < ld; v++)
                    L[b * ld + v] = v < V ? sk_logit(kind, b, v, V) : NAN; /* padding: NaN */
                T[b] = temps[(b + kind) % 8];
                seeds[b] = rnd();
                offs[b] = rnd() % 100000;
            }
            fls_params p;
            fls_params_default(&p);
            p.temperature = T;
            p.row_seeds = seeds;
            p.row_offsets = offs;
            p.draws = draws;
            fls_matrix Lm = {L, FLS_DTYPE_F32, B, V, ld};
            fls_outputs oc = {tc, NULL, NULL};
            fls_status st = fls_sample_logits(g_cpu, &Lm, &p, &oc);
            void *dL = to_dev(L, sizeof(float) * (size_t)(B * ld)), *dt = NULL, *dlse = NULL, *dlp = NULL;
            fls_cuda_malloc(&dt, 8 * (size_t)n);
            fls_cuda_malloc(&dlse, 4 * (size_t)B);
            fls_cuda_malloc(&dlp, 4 * (size_t)n);
            fls_row_params *rows = resolve_rows(&p, B);
            fls_status sg[2] = {FLS_ERR_INTERNAL, FLS_ERR_INTERNAL};
            if (st == FLS_OK && dL && dt && dlse && dlp && rows) {
                fls_matrix dLm = {dL, FLS_DTYPE_F32, B, V, ld};
                fls_request req = {.rows = rows,
                                   .batch = B,
                                   .vocab = V,
                                   .draws = draws,
                                   .method = FLS_METHOD_FUSED,
                                   .first_draw = 0,
                                   .K = 1};
                fls_outputs og = {(int64_t *)dt, (float *)dlse, (float *)dlp};
                for (int ns = 0; ns < 2; ns++) {
                    fls_cuda_opts o;
                    fls_cuda_opts_default(&o);
                    o.no_skip = ns;
                    sg[ns] = fls_cuda_run(g_gpu, NULL, NULL, &dLm, &req, &og, &o);
                    if (sg[ns] != FLS_OK)
                        break;
                    fls_cuda_memcpy(ns ? t0 : t1, dt, 8 * (size_t)n, 0);
                    fls_cuda_memcpy(ns ? lse0 : lse1, dlse, 4 * (size_t)B, 0);
                    fls_cuda_memcpy(ns ? lp0 : lp1, dlp, 4 * (size_t)n, 0);
                }
            }
            int64_t bt = 0, bc = 0, bb = 0;
            if (st == FLS_OK && sg[0] == FLS_OK && sg[1] == FLS_OK) {
                for (int64_t i = 0; i < n; i++) {
                    bt += t1[i] != t0[i];
                    bc += t1[i] != tc[i];
                    bb += memcmp(&lp1[i], &lp0[i], 4) != 0;
                }
                for (int64_t b = 0; b < B; b++)
                    bb += memcmp(&lse1[b], &lse0[b], 4) != 0;
            }
            printf("    SKIP %-12s B=%-3lld V=%-6lld: skip vs no-skip %lld token / %lld lse+logprob bit "
                   "differences, vs CPU %lld (%s / %s / %s)\n",
                   sk_names[kind], (long long)B, (long long)V, (long long)bt, (long long)bb, (long long)bc,
                   fls_status_string(st), fls_status_string(sg[0]), fls_status_string(sg[1]));
            if (st != FLS_OK || sg[0] != FLS_OK || sg[1] != FLS_OK)
                failf("%s B=%lld: cpu %s, gpu skip %s, gpu no-skip %s", sk_names[kind], (long long)B,
                      fls_status_string(st), fls_status_string(sg[0]), fls_status_string(sg[1]));
            bad_tok += bt;
            bad_cpu += bc;
            bad_bits += bb;
            runs++;
            free(rows);
            fls_cuda_free(dL);
            fls_cuda_free(dt);
            fls_cuda_free(dlse);
            fls_cuda_free(dlp);
            free(L);
            free(T);
            free(seeds);
            free(offs);
            free(tc);
            free(t1);
            free(t0);
            free(lse1);
            free(lse0);
            free(lp1);
            free(lp0);
        }
    }
    CHECK(bad_tok == 0, "%lld tokens differ between skipping on and off", (long long)bad_tok);
    CHECK(bad_bits == 0, "%lld logsumexp/logprob values differ in bits between skipping on and off",
          (long long)bad_bits);
    CHECK(bad_cpu == 0, "%lld tokens differ from the CPU engine", (long long)bad_cpu);
}

/* ---- the streaming API on the CUDA engine ---- */

/* Feeds chunks [cut[i], cut[i + 1]) of the logits (device dL or host hL, row
 * stride ld) in the order of perm, from chunk `from` to `to` (exclusive). */
static fls_status stream_feed_range(fls_stream_t *s, const float *L, fls_dtype dt, int64_t B, int64_t ld,
                                    const int64_t *cut, const int *perm, int from, int to)
{
    for (int i = from; i < to; i++) {
        const int c = perm[i];
        fls_matrix m = {L + cut[c], dt, B, cut[c + 1] - cut[c], ld};
        fls_status st = fls_stream_feed_logits(s, &m, cut[c]);
        if (st != FLS_OK)
            return st;
    }
    return FLS_OK;
}

/* Chunk boundaries of V: sizes taken cyclically from `sizes` (0-terminated). */
static int make_cuts(int64_t V, const int64_t *sizes, int64_t *cut, int cap)
{
    int n = 0;
    cut[0] = 0;
    for (int64_t v = 0, i = 0; v < V && n < cap - 1; i++) {
        if (!sizes[i])
            i = 0;
        int64_t c = sizes[i] < V - v ? sizes[i] : V - v;
        v += c;
        cut[++n] = v;
    }
    return n;
}

static void test_stream_cuda(void)
{
    const int64_t B = 5, V = 50021, ld = 50024, draws = 3;
    const float T[5] = {0.7f, 1.0f, 0.0f, 1.3f, 0.5f};
    g_rng = 4242;
    float *L = malloc(sizeof(float) * (size_t)(B * ld));
    CHECK(L, "memory");
    for (int64_t i = 0; i < B * ld; i++)
        L[i] = (float)(rndu() * 8.0 - 4.0);
    for (int64_t v = 0; v < V; v += 5)
        L[1 * ld + v] = -INFINITY; /* masked tokens */
    for (int64_t v = 1024; v < 1536; v++)
        L[3 * ld + v] = -INFINITY; /* masked whole groups of 64 and 128 */
    L[4 * ld + 777] = 40.0f;       /* a peaked row */
    float *dL = to_dev(L, sizeof(float) * (size_t)(B * ld));
    CHECK(dL, "device memory");
    const int64_t nd = B * draws;
    int64_t *t1 = malloc(8 * (size_t)nd), *t2 = malloc(8 * (size_t)nd), *tc = malloc(8 * (size_t)nd);
    float lse1[5], lse2[5], *lp1 = malloc(4 * (size_t)nd), *lp2 = malloc(4 * (size_t)nd);
    void *dt = NULL, *dlse = NULL, *dlp = NULL;
    fls_device_malloc(&dt, 8 * (size_t)nd);
    fls_device_malloc(&dlse, 4 * (size_t)B);
    fls_device_malloc(&dlp, 4 * (size_t)nd);
    CHECK(t1 && t2 && tc && lp1 && lp2 && dt && dlse && dlp, "memory");
    static const int64_t sz_aligned[] = {4096, 0}, sz_odd[] = {1000, 777, 3, 1, 4099, 0},
                         sz_one[] = {1 << 30, 0}, sz_groups[] = {128, 256, 8192, 0};
    const int64_t *sizes[4] = {sz_aligned, sz_odd, sz_one, sz_groups};
    const char *sname[4] = {"4096", "1000/777/3/1/4099", "one chunk", "128/256/8192"};
    int64_t *cut = malloc(sizeof(int64_t) * 70000);
    int *perm = malloc(sizeof(int) * 70000);
    CHECK(cut && perm, "memory");
    const int64_t gs[3] = {0, 64, 128};
    for (int gi = 0; gi < 3; gi++) {
        fls_params p;
        fls_params_default(&p);
        p.temperature = T;
        p.seed = 99 + (uint64_t)gi;
        p.draws = draws;
        if (gs[gi]) {
            p.method = FLS_METHOD_GROUPED;
            p.group_size = gs[gi];
        }
        fls_matrix dLm = {dL, FLS_DTYPE_F32, B, V, ld};
        fls_outputs od = {dt, dlse, dlp};
        CHECK_ST(fls_sample_logits(g_gpu, &dLm, &p, &od));
        fls_device_download(t1, dt, 8 * (size_t)nd);
        fls_device_download(lse1, dlse, 4 * (size_t)B);
        fls_device_download(lp1, dlp, 4 * (size_t)nd);
        for (int si = 0; si < 4; si++)
            for (int order = 0; order < 2; order++) {
                const int nc = make_cuts(V, sizes[si], cut, 70000);
                for (int i = 0; i < nc; i++) /* in order, or every other chunk backwards first */
                    perm[i] = i;
                if (order == 1) {
                    int k = 0;
                    for (int i = nc - 1; i >= 0; i -= 2)
                        perm[k++] = i;
                    for (int i = nc % 2 ? 1 : 0; i < nc; i += 2)
                        perm[k++] = i;
                }
                fls_stream_t *sg = NULL, *sc = NULL;
                CHECK_ST(fls_stream_create(&sg, g_gpu, B, V, &p));
                CHECK_ST(stream_feed_range(sg, dL, FLS_DTYPE_F32, B, ld, cut, perm, 0, nc));
                CHECK_ST(fls_stream_finalize(sg, &od));
                fls_device_download(t2, dt, 8 * (size_t)nd);
                fls_device_download(lse2, dlse, 4 * (size_t)B);
                fls_device_download(lp2, dlp, 4 * (size_t)nd);
                /* the CPU engine's stream over the same floats */
                CHECK_ST(fls_stream_create(&sc, g_cpu, B, V, &p));
                CHECK_ST(stream_feed_range(sc, L, FLS_DTYPE_F32, B, ld, cut, perm, 0, nc));
                fls_outputs oc = {tc, NULL, NULL};
                CHECK_ST(fls_stream_finalize(sc, &oc));
                int64_t same = 0, same_cpu = 0;
                double dl = 0.0;
                for (int64_t i = 0; i < nd; i++) {
                    same += t1[i] == t2[i];
                    same_cpu += tc[i] == t2[i];
                    dl = fmax(dl, fabs((double)lp1[i] - lp2[i]) / (1.0 + fabs((double)lp1[i])));
                }
                for (int64_t b = 0; b < B; b++)
                    dl = fmax(dl, fabs((double)lse1[b] - lse2[b]) / (1.0 + fabs((double)lse1[b])));
                printf("    %s, chunks %s (%d, %s): tokens as the one-shot call %lld/%lld, as the CPU "
                       "stream %lld/%lld; logsumexp/logprobs max rel diff %.2g\n",
                       gs[gi] ? (gs[gi] == 64 ? "grouped g=64" : "grouped g=128") : "flat", sname[si], nc,
                       order ? "odd chunks first, backwards" : "in order", (long long)same, (long long)nd,
                       (long long)same_cpu, (long long)nd, dl);
                fls_stream_destroy(sg);
                fls_stream_destroy(sc);
                CHECK(same == nd && same_cpu == nd, "stream tokens differ");
                CHECK(dl < 1e-5, "logsumexp / logprobs differ by %g", dl);
            }
        /* a state serialized on the GPU after half the chunks, continued on the CPU */
        const int nc = make_cuts(V, sz_odd, cut, 70000);
        for (int i = 0; i < nc; i++)
            perm[i] = i;
        fls_stream_t *sg = NULL, *sc = NULL;
        CHECK_ST(fls_stream_create(&sg, g_gpu, B, V, &p));
        CHECK_ST(stream_feed_range(sg, dL, FLS_DTYPE_F32, B, ld, cut, perm, 0, nc / 2));
        size_t bytes = 0;
        CHECK_ST(fls_stream_serialize(sg, NULL, &bytes));
        void *buf = malloc(bytes);
        CHECK(buf, "memory");
        CHECK_ST(fls_stream_serialize(sg, buf, &bytes));
        CHECK_ST(fls_stream_deserialize(&sc, g_cpu, buf, bytes));
        free(buf);
        CHECK_ST(stream_feed_range(sc, L, FLS_DTYPE_F32, B, ld, cut, perm, nc / 2, nc));
        fls_outputs oc = {tc, NULL, NULL};
        CHECK_ST(fls_stream_finalize(sc, &oc));
        int64_t same = 0;
        for (int64_t i = 0; i < nd; i++)
            same += tc[i] == t1[i];
        printf("    %s: serialized on the GPU after %d of %d chunks (%zu bytes), finished on the CPU: "
               "%lld/%lld tokens as the one-shot call\n",
               gs[gi] ? "grouped" : "flat", nc / 2, nc, bytes, (long long)same, (long long)nd);
        CHECK(same == nd, "GPU -> CPU continuation differs");
        /* errors change nothing: a host pointer, fp16 logits, a token fed
         * twice, a NaN in the device's part of a chunk and at its first token */
        int c = nc / 2;
        while (c < nc - 1 && cut[c + 1] - cut[c] != 4099)
            c++;
        const int64_t c0 = cut[c], cn = cut[c + 1] - cut[c];
        int64_t fed0 = 0, fed1 = 0;
        CHECK_ST(fls_stream_progress(sg, &fed0, NULL, NULL, NULL));
        fls_matrix hm = {L + c0, FLS_DTYPE_F32, B, cn, ld};
        const fls_status e1 = fls_stream_feed_logits(sg, &hm, c0);
        fls_matrix fm = {dL + c0, FLS_DTYPE_F16, B, cn, ld};
        const fls_status e2 = fls_stream_feed_logits(sg, &fm, c0);
        fls_matrix tw = {dL, FLS_DTYPE_F32, B, cut[1], ld};
        const fls_status e3 = fls_stream_feed_logits(sg, &tw, 0);
        const float nanv = NAN;
        fls_status e4[2];
        for (int k = 0; k < 2; k++) {
            const int64_t at = 2 * ld + c0 + (k ? 0 : cn / 2);
            fls_device_upload(dL + at, &nanv, sizeof nanv);
            fls_matrix nm = {dL + c0, FLS_DTYPE_F32, B, cn, ld};
            e4[k] = fls_stream_feed_logits(sg, &nm, c0);
            fls_device_upload(dL + at, &L[at], sizeof nanv);
        }
        CHECK_ST(fls_stream_progress(sg, &fed1, NULL, NULL, NULL));
        fls_stream_destroy(sc);
        printf("    errors: host pointer %s, fp16 %s, fed twice %s, NaN in the middle %s, at token %lld %s; "
               "tokens "
               "fed %lld -> %lld\n",
               fls_status_string(e1), fls_status_string(e2), fls_status_string(e3), fls_status_string(e4[0]),
               (long long)c0, fls_status_string(e4[1]), (long long)fed0, (long long)fed1);
        CHECK(e1 == FLS_ERR_POINTER && e2 == FLS_ERR_DTYPE && e3 == FLS_ERR_PARAM && e4[0] == FLS_ERR_NAN &&
                  e4[1] == FLS_ERR_NAN && fed0 == fed1,
              "bad feeds");
        CHECK_ST(stream_feed_range(sg, dL, FLS_DTYPE_F32, B, ld, cut, perm, nc / 2, nc));
        CHECK_ST(fls_stream_finalize(sg, &od));
        fls_device_download(t2, dt, 8 * (size_t)nd);
        fls_stream_destroy(sg);
        CHECK(memcmp(t1, t2, 8 * (size_t)nd) == 0, "tokens after the refused feeds differ");
    }
    /* params on the device are refused */
    {
        fls_params p;
        fls_params_default(&p);
        p.params_on_device = 1;
        fls_stream_t *sg = NULL;
        fls_status e = fls_stream_create(&sg, g_gpu, B, V, &p);
        CHECK(e == FLS_ERR_UNSUPPORTED && sg == NULL, "params_on_device: %s", fls_status_string(e));
    }
    free(L);
    free(t1);
    free(t2);
    free(tc);
    free(lp1);
    free(lp2);
    free(cut);
    free(perm);
    fls_device_free(dL);
    fls_device_free(dt);
    fls_device_free(dlse);
    fls_device_free(dlp);
}

/* Fused feeds on the CUDA engine (cuBLAS per chunk) against the one-shot
 * fused call, bf16 at D = 4096, V = 151936 (8 rows: logits of standard
 * deviation about 1.1), and early finalization with norm bounds on peaked
 * rows (rows 0..3: token 13 + b has a logit of about 200): the skipped
 * chunks and the same tokens. */
static void test_stream_cuda_fused(void)
{
    const int64_t V = 151936, D = 4096, B = 8, C = 4096, BP = 4;
    g_rng = 8080;
    uint16_t *W = make_rand_matrix(V, D, D, FLS_DTYPE_BF16, 3.4f / sqrtf((float)D));
    uint16_t *H = make_rand_matrix(B, D, D, FLS_DTYPE_BF16, 1.0f);
    CHECK(W && H, "memory");
    float hn[8], up[8];
    for (int64_t b = 0; b < B; b++) {
        double q = 0.0;
        for (int64_t i = 0; i < D; i++) {
            const double h = fls_bf16_to_f32(H[b * D + i]);
            q += h * h;
        }
        hn[b] = (float)(sqrt(q) * (1.0 + 1e-6));
        if (b < BP) /* the peaked rows' leaders: w = h 200 / ||h||^2 */
            for (int64_t i = 0; i < D; i++)
                W[(13 + b) * D + i] = enc((float)(fls_bf16_to_f32(H[b * D + i]) * 200.0 / q), FLS_DTYPE_BF16);
    }
    void *dW = to_dev(W, 2 * (size_t)(V * D)), *dH = to_dev(H, 2 * (size_t)(B * D)), *dt = NULL;
    int64_t *t1 = malloc(8 * B), *t2 = malloc(8 * B);
    float *cn = malloc(sizeof(float) * (size_t)((V + C - 1) / C));
    fls_device_malloc(&dt, 8 * B);
    CHECK(dW && dH && dt && t1 && t2 && cn, "memory");
    fls_matrix hW = {W, FLS_DTYPE_BF16, V, D, D};
    CHECK_ST(fls_chunk_max_norms(&hW, C, cn));
    int64_t agree_total = 0, total = 0;
    for (int m = 0; m < 2; m++)
        for (int early = 0; early < 2; early++) {
            const int64_t Bc = early ? BP : B;
            fls_params p;
            fls_params_default(&p);
            p.temperature_value = 0.8f;
            p.seed = 5 + (uint64_t)m;
            if (m) {
                p.method = FLS_METHOD_GROUPED;
                p.group_size = 128;
            }
            fls_matrix Wm = {dW, FLS_DTYPE_BF16, V, D, D}, Hm = {dH, FLS_DTYPE_BF16, Bc, D, D};
            fls_outputs od = {dt, NULL, NULL};
            CHECK_ST(fls_sample_fused(g_gpu, &Wm, &Hm, &p, &od));
            fls_device_download(t1, dt, 8 * (size_t)Bc);
            fls_stream_t *s = NULL;
            CHECK_ST(fls_stream_create(&s, g_gpu, Bc, V, &p));
            for (int64_t v0 = 0; v0 < V; v0 += C) {
                const int64_t n = V - v0 < C ? V - v0 : C;
                if (early && v0 > 0) {
                    for (int64_t b = 0; b < Bc; b++)
                        up[b] = fls_logit_bound(cn[v0 / C], hn[b], D);
                    int skipped = 0;
                    CHECK_ST(fls_stream_skip(s, v0, n, up, &skipped));
                    if (skipped)
                        continue;
                }
                fls_matrix Wc = {(const uint16_t *)dW + v0 * D, FLS_DTYPE_BF16, n, D, D};
                CHECK_ST(fls_stream_feed_fused(s, &Wc, &Hm, v0));
            }
            CHECK_ST(fls_stream_finalize(s, &od));
            int64_t cf = 0, cs = 0;
            CHECK_ST(fls_stream_progress(s, NULL, NULL, &cf, &cs));
            fls_stream_destroy(s);
            fls_device_download(t2, dt, 8 * (size_t)Bc);
            int64_t same = 0;
            for (int64_t b = 0; b < Bc; b++)
                same += t1[b] == t2[b];
            agree_total += same;
            total += Bc;
            printf(
                "    %s, %lld rows%s, fused feeds of %lld vocabulary rows: %lld/%lld tokens as the one-shot "
                "fused call; %lld chunks fed, %lld skipped\n",
                m ? "grouped g=128" : "flat", (long long)Bc, early ? " (peaked), norm-bound skipping" : "",
                (long long)C, (long long)same, (long long)Bc, (long long)cf, (long long)cs);
            if (early)
                CHECK(cs > 0, "no chunk skipped on peaked rows");
        }
    printf("    agreement with the one-shot fused call (its logits may round differently): %lld/%lld\n",
           (long long)agree_total, (long long)total);
    CHECK(agree_total * 100 >= total * 99, "fused streams agree on fewer than 99%% of the tokens");
    free(W);
    free(H);
    free(t1);
    free(t2);
    free(cn);
    fls_device_free(dW);
    fls_device_free(dH);
    fls_device_free(dt);
}

static void test_errors(void)
{
    int64_t host_tok[4];
    uint16_t host_w[64] = {0}, host_h[16] = {0};
    fls_matrix W = {host_w, FLS_DTYPE_BF16, 4, 16, 16}, H = {host_h, FLS_DTYPE_BF16, 1, 16, 16};
    fls_params p;
    fls_params_default(&p);
    fls_outputs o = {host_tok, NULL, NULL};
    fls_status st = fls_sample_fused(g_gpu, &W, &H, &p, &o);
    CHECK(st == FLS_ERR_POINTER, "host pointers gave %s, want FLS_ERR_POINTER", fls_status_string(st));
    void *big = NULL;
    st = fls_cuda_malloc(&big, (size_t)1 << 50);
    CHECK(st == FLS_ERR_OUT_OF_MEMORY && big == NULL, "1 PiB allocation gave %s", fls_status_string(st));
    /* device W, host tokens */
    void *dW = to_dev(host_w, sizeof host_w), *dH = to_dev(host_h, sizeof host_h);
    CHECK(dW && dH, "device memory");
    fls_matrix dWm = {dW, FLS_DTYPE_BF16, 4, 16, 16}, dHm = {dH, FLS_DTYPE_BF16, 1, 16, 16};
    st = fls_sample_fused(g_gpu, &dWm, &dHm, &p, &o);
    fls_cuda_free(dW);
    fls_cuda_free(dH);
    CHECK(st == FLS_ERR_POINTER, "host output pointer gave %s", fls_status_string(st));
    /* contexts: create and destroy repeatedly (leaks show under compute-sanitizer --leak-check) */
    for (int i = 0; i < 3; i++) {
        fls_context_config cfg;
        fls_context_config_default(&cfg);
        cfg.engine = FLS_ENGINE_CUDA;
        fls_context_t *c = NULL;
        CHECK_ST(fls_context_create(&c, &cfg));
        fls_context_destroy(c);
    }
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    cfg.engine = FLS_ENGINE_CUDA;
    cfg.device = 4096;
    fls_context_t *c = NULL;
    st = fls_context_create(&c, &cfg);
    CHECK(st == FLS_ERR_NO_DEVICE && c == NULL, "device 4096 gave %s", fls_status_string(st));
}

/* ---- goodness of fit without GSL: Pearson chi-square, p from Q(k/2, x/2) ---- */

static double gammq(double a, double x)
{
    if (x <= 0)
        return 1.0;
    double gln = lgamma(a);
    if (x < a + 1.0) {
        double ap = a, sum = 1.0 / a, del = sum;
        for (int n = 0; n < 100000; n++) {
            ap += 1;
            del *= x / ap;
            sum += del;
            if (fabs(del) < fabs(sum) * 1e-15)
                break;
        }
        return 1.0 - sum * exp(-x + a * log(x) - gln);
    }
    double b = x + 1.0 - a, c = 1.0 / 1e-300, d = 1.0 / b, h = d;
    for (int i = 1; i < 100000; i++) {
        double an = -i * (i - a);
        b += 2.0;
        d = an * d + b;
        if (fabs(d) < 1e-300)
            d = 1e-300;
        c = b + an / c;
        if (fabs(c) < 1e-300)
            c = 1e-300;
        d = 1.0 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1.0) < 1e-15)
            break;
    }
    return exp(-x + a * log(x) - gln) * h;
}

/* chi-square p-value of counts against probabilities; bins formed in token
 * order until each has >= 100 expected; the remainder is merged into the last
 * bin (never dropped). */
static double chisq_p(const int64_t *count, const double *prob, int64_t V, int64_t N, int *dof_out)
{
    double *bo = malloc(sizeof(double) * (size_t)V), *be = malloc(sizeof(double) * (size_t)V);
    int bins = 0;
    double e = 0, o = 0;
    for (int64_t v = 0; v < V; v++) {
        e += prob[v] * (double)N;
        o += (double)count[v];
        if (e >= 100.0) {
            bo[bins] = o;
            be[bins] = e;
            bins++;
            e = o = 0;
        }
    }
    if (bins == 0) {
        bo[0] = o;
        be[0] = e;
        bins = 1;
    } else {
        bo[bins - 1] += o;
        be[bins - 1] += e;
    }
    double chi2 = 0;
    for (int i = 0; i < bins; i++)
        chi2 += (bo[i] - be[i]) * (bo[i] - be[i]) / be[i];
    free(bo);
    free(be);
    *dof_out = bins - 1;
    return bins > 1 ? gammq(0.5 * (bins - 1), 0.5 * chi2) : 1.0;
}

/* The goodness-of-fit cases of test_goodness_of_fit (the Bonferroni
 * divisor; the test checks that it ran exactly this many). */
#define GOF_CASES 17
static int g_gof_runs;

#ifdef FLS_HAVE_AUDIT
/* One family for the whole run (docs/STATS.md): the stats audit on the CUDA
 * engine and this suite's goodness-of-fit cases (fls_audit_tokens: global
 * test, tails, pairs of draws, ties) share the budget 1e-4. */
static fls_stats_family g_family;
static fls_audit_options g_audit;
static fls_tokens_options g_gof;

static void family_setup(void)
{
    fls_audit_options_default(&g_audit);
    g_audit.engine = FLS_ENGINE_CUDA;
    g_audit.full = getenv("FLS_AUDIT_FULL") != NULL; /* quick by default: the full audit takes minutes */
    g_audit.progress = 0;
    fls_tokens_options_default(&g_gof);
    fls_stats_family_init(&g_family, FLS_STATS_BUDGET);
    fls_audit_family_add(&g_audit, &g_family);
    fls_stats_family_add(&g_family, "gpu goodness-of-fit", GOF_CASES * fls_tokens_test_count(&g_gof));
    g_gof.alpha = g_family.alpha;
    g_audit.family = &g_family;
    fls_stats_family_print(stdout, "    ", &g_family);
}
#endif

static void gof_case(const char *name, const float *logits, int64_t V, float T, int64_t N, fls_method method,
                     fls_cuda_path path, int fused)
{
    /* exact probabilities in double */
    double *prob = calloc((size_t)V, sizeof(double));
    int64_t *count = calloc((size_t)V, sizeof(int64_t));
    int64_t *tok = malloc(8 * (size_t)N);
    void *dt = NULL, *dL = NULL, *dW = NULL, *dH = NULL;
    double mx = -INFINITY, z = 0;
    for (int64_t v = 0; v < V; v++)
        mx = fmax(mx, (double)logits[v] / T);
    for (int64_t v = 0; v < V; v++)
        z += exp((double)logits[v] / T - mx);
    for (int64_t v = 0; v < V; v++)
        prob[v] = exp((double)logits[v] / T - mx) / z;
    fls_cuda_malloc(&dt, 8 * (size_t)N);
    fls_params p;
    fls_params_default(&p);
    p.temperature_value = T;
    p.seed = 20261129;
    p.draws = N;
    p.method = method;
    fls_outputs o = {(int64_t *)dt, NULL, NULL};
    fls_status st;
    if (!fused) {
        dL = to_dev(logits, 4 * (size_t)V);
        fls_matrix L = {dL, FLS_DTYPE_F32, 1, V, V};
        st = fls_sample_logits(g_gpu, &L, &p, &o);
    } else {
        /* W = diag-like: row v = (logit_v, 0, ..., 0) in f32 via the D = 8 identity trick:
         * W[v] = (l_v, 0...), H = (1, 0, ...): exact logits. bf16 cannot hold them, so f32
         * (chunked) or bf16-rounded logits for the tensor-core path. */
        int64_t D = 8;
        uint16_t *Wb = calloc((size_t)(V * D), 2);
        uint16_t Hb[8] = {fls_f32_to_bf16(1.0f), 0, 0, 0, 0, 0, 0, 0};
        for (int64_t v = 0; v < V; v++)
            Wb[v * D] = fls_f32_to_bf16(logits[v]);
        /* the exact probabilities of the rounded logits */
        mx = -INFINITY;
        z = 0;
        for (int64_t v = 0; v < V; v++)
            mx = fmax(mx, (double)fls_bf16_to_f32(Wb[v * D]) / T);
        for (int64_t v = 0; v < V; v++)
            z += exp((double)fls_bf16_to_f32(Wb[v * D]) / T - mx);
        for (int64_t v = 0; v < V; v++)
            prob[v] = exp((double)fls_bf16_to_f32(Wb[v * D]) / T - mx) / z;
        dW = to_dev(Wb, (size_t)(V * D) * 2);
        dH = to_dev(Hb, sizeof Hb);
        free(Wb);
        fls_matrix W = {dW, FLS_DTYPE_BF16, V, D, D}, H = {dH, FLS_DTYPE_BF16, 1, D, D};
        fls_row_params *rows = resolve_rows(&p, 1);
        fls_request req = {.rows = rows,
                           .batch = 1,
                           .vocab = V,
                           .draws = N,
                           .method = method,
                           .first_draw = 0,
                           .K = 1,
                           .group_size = FLS_GROUP_SIZE_DEFAULT};
        fls_cuda_opts op;
        fls_cuda_opts_default(&op);
        op.path = path;
        st = fls_cuda_run(g_gpu, &W, &H, NULL, &req, &o, &op);
        free(rows);
    }
    int dof = 0;
    double pv = -1;
    int64_t masked_hits = 0;
    int audit_bad = 0;
    if (st == FLS_OK) {
        fls_cuda_memcpy(tok, dt, 8 * (size_t)N, 0);
        for (int64_t i = 0; i < N; i++) {
            if (tok[i] < 0 || tok[i] >= V) {
                st = FLS_ERR_INTERNAL;
                break;
            }
            count[tok[i]]++;
        }
        for (int64_t v = 0; v < V; v++)
            masked_hits += prob[v] == 0.0 && count[v] > 0;
        pv = chisq_p(count, prob, V, N, &dof);
    }
#ifdef FLS_HAVE_AUDIT
    if (st == FLS_OK) {
        /* the logits the engine saw (bf16-rounded on the fused path) */
        float *ref = malloc(4 * (size_t)V);
        for (int64_t v = 0; ref && v < V; v++)
            ref[v] = fused ? fls_bf16_to_f32(fls_f32_to_bf16(logits[v])) : logits[v];
        fls_audit_row rows[16];
        size_t nr = 0;
        g_gof.name = name;
        const fls_status as =
            ref ? fls_audit_tokens(ref, 1, V, V, NULL, T, tok, N, &g_gof, rows, &nr) : FLS_ERR_OUT_OF_MEMORY;
        if (as != FLS_OK) {
            printf("    GOF %s: fls_audit_tokens: %s\n", name, fls_status_string(as));
            audit_bad++;
        }
        for (size_t k = 0; as == FLS_OK && k < nr; k++) {
            printf("    ");
            fls_audit_print_row(stdout, &rows[k]);
            audit_bad += fls_audit_row_verdict(&rows[k]) == FLS_AUDIT_FAIL; /* untested: not a failure */
        }
        free(ref);
    }
#endif
    printf("    GOF %-28s V=%-6lld N=%-8lld dof=%-4d p=%.4g\n", name, (long long)V, (long long)N, dof, pv);
    fls_cuda_free(dt);
    fls_cuda_free(dL);
    fls_cuda_free(dW);
    fls_cuda_free(dH);
    free(prob);
    free(count);
    free(tok);
    CHECK(st == FLS_OK, "%s: %s", name, fls_status_string(st));
    CHECK(masked_hits == 0, "%s: a zero-probability token was sampled", name);
    g_gof_runs++;
#ifdef FLS_HAVE_AUDIT
    (void)pv;
    CHECK(audit_bad == 0, "%s: %d goodness-of-fit rows failed at the family's alpha %.3g", name, audit_bad,
          g_gof.alpha);
#else
    /* without GSL: Pearson chi-square, family-wise 1e-4 over the GOF_CASES cases (Bonferroni) */
    CHECK(pv >= 1e-4 / GOF_CASES, "%s: chi-square p = %.3g", name, pv);
#endif
}

static void test_goodness_of_fit(void)
{
    g_gof_runs = 0;
#ifdef FLS_HAVE_AUDIT
    /* the draws the token audit's global test needs at the family's alpha */
    int64_t N = fls_tokens_draws_needed(1, g_gof.alpha);
    if (N < (g_quick ? 200000 : 1000000))
        N = g_quick ? 200000 : 1000000;
#else
    const int64_t N = g_quick ? 200000 : 1000000;
#endif
    const int64_t V = 3000;
    float *zipf = malloc(4 * V), *heavy = malloc(4 * V), *masked = malloc(4 * V);
    CHECK(zipf && heavy && masked, "memory");
    for (int64_t v = 0; v < V; v++) {
        zipf[v] = (float)(-1.1 * log((double)(v + 1)));
        /* heavy tail far below the head: the head holds ~90%, the tail sits 6-12 nats down */
        heavy[v] = v < 3 ? 4.0f : (float)(-2.0 - 6.0 * (double)(v % 17) / 16.0);
        masked[v] = (v % 4 == 1) ? -INFINITY : (float)(0.5 * sin((double)v));
    }
    gof_case("zipf logits T=1", zipf, V, 1.0f, N, FLS_METHOD_FUSED, FLS_CUDA_PATH_AUTO, 0);
    gof_case("heavy-tail logits T=0.7", heavy, V, 0.7f, N, FLS_METHOD_FUSED, FLS_CUDA_PATH_AUTO, 0);
    gof_case("masked logits T=1.3", masked, V, 1.3f, N, FLS_METHOD_FUSED, FLS_CUDA_PATH_AUTO, 0);
    gof_case("zipf multinomial", zipf, V, 1.0f, N, FLS_METHOD_UNFUSED_MULTINOMIAL, FLS_CUDA_PATH_AUTO, 0);
    gof_case("heavy-tail multinomial", heavy, V, 0.7f, N, FLS_METHOD_UNFUSED_MULTINOMIAL, FLS_CUDA_PATH_AUTO,
             0);
    gof_case("masked multinomial", masked, V, 1.3f, N, FLS_METHOD_UNFUSED_MULTINOMIAL, FLS_CUDA_PATH_AUTO, 0);
    gof_case("heavy-tail fused chunked", heavy, V, 0.7f, N, FLS_METHOD_FUSED, FLS_CUDA_PATH_CHUNKED, 1);
    gof_case("masked fused chunked", masked, V, 1.3f, N, FLS_METHOD_FUSED, FLS_CUDA_PATH_CHUNKED, 1);
    gof_case("zipf fused wgmma", zipf, V, 1.0f, N, FLS_METHOD_FUSED, FLS_CUDA_PATH_WGMMA, 1);
    gof_case("heavy-tail fused wgmma", heavy, V, 0.7f, N, FLS_METHOD_FUSED, FLS_CUDA_PATH_WGMMA, 1);
    gof_case("masked fused wgmma", masked, V, 1.3f, N, FLS_METHOD_FUSED, FLS_CUDA_PATH_WGMMA, 1);
    gof_case("zipf fused chunked", zipf, V, 1.0f, N, FLS_METHOD_FUSED, FLS_CUDA_PATH_CHUNKED, 1);
    gof_case("heavy-tail unfused gumbel", heavy, V, 0.7f, N, FLS_METHOD_UNFUSED_GUMBEL, FLS_CUDA_PATH_AUTO,
             1);
    gof_case("zipf grouped logits", zipf, V, 1.0f, N, FLS_METHOD_GROUPED, FLS_CUDA_PATH_AUTO, 0);
    gof_case("heavy-tail grouped wgmma", heavy, V, 0.7f, N, FLS_METHOD_GROUPED, FLS_CUDA_PATH_WGMMA, 1);
    gof_case("masked grouped chunked", masked, V, 1.3f, N, FLS_METHOD_GROUPED, FLS_CUDA_PATH_CHUNKED, 1);
    gof_case("masked fused multinomial", masked, V, 1.3f, N, FLS_METHOD_UNFUSED_MULTINOMIAL,
             FLS_CUDA_PATH_AUTO, 1);
    CHECK(g_gof_runs == GOF_CASES, "%d goodness-of-fit cases ran, the Bonferroni divisor assumes %d",
          g_gof_runs, GOF_CASES);
    free(zipf);
    free(heavy);
    free(masked);
}

#ifdef FLS_HAVE_AUDIT
static void test_audit(void)
{
    fls_audit_row *rows = NULL;
    size_t n = 0;
    fls_status st = fls_audit_run(&g_audit, &rows, &n);
    CHECK(st == FLS_OK, "fls_audit_run: %s", fls_status_string(st));
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        printf("    AUDIT %-30s V=%-7lld N=%-9lld chi2=%-10.2f dof=%-4d p=%-9.3g alpha=%.3g %s\n",
               rows[i].test, (long long)rows[i].V, (long long)rows[i].draws, rows[i].chi2, rows[i].dof,
               rows[i].p, rows[i].alpha, fls_audit_verdict_name(fls_audit_row_verdict(&rows[i])));
        bad += fls_audit_row_verdict(&rows[i]) == FLS_AUDIT_FAIL; /* a row not tested is not a failure */
    }
    free(rows);
    CHECK(bad == 0, "%d audit rows failed", bad);
}
#endif

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            g_quick = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            g_only = argv[++i];
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    rules_from_registry();
#ifdef FLS_HAVE_AUDIT
    family_setup();
#endif
    if (!fls_cuda_available()) {
        printf("SKIP: no usable CUDA device (sm_90 or newer) on this machine; the gpu suite needs one\n");
        return SKIP_CODE;
    }
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    fls_status st = fls_context_create(&g_cpu, &cfg);
    if (st != FLS_OK) {
        printf("FAIL: CPU context: %s\n", fls_status_string(st));
        return 1;
    }
    cfg.engine = FLS_ENGINE_CUDA;
    st = fls_context_create(&g_gpu, &cfg);
    if (st != FLS_OK) {
        printf("FAIL: CUDA context: %s\n", fls_status_string(st));
        return 1;
    }
    run_test("philox_curand_matches_c", test_philox_curand);
    run_test("gumbel_bits_match_host", test_gumbel_bits);
    run_test("gumbel_edge_bits_match_host", test_gumbel_edge_bits);
    run_test("errors_and_pointers", test_errors);
    run_test("logits_path_masks_nan", test_logits_path);
    run_test("skip_identity_adversarial", test_skip_identity);
    run_test("exact_tokens_all_configs_awkward_shapes", test_exact_tokens_shapes);
    run_test("min_first_all_configs_identical_to_cpu", test_min_first);
    run_test("first_draw_all_configs", test_first_draw);
    run_test("grouped_vs_cpu", test_grouped);
    run_test("async_graph_capture", test_async_graph);
    run_test("masks_bias_penalties_identical_to_cpu", test_mods);
    run_test("stream_cuda_chunkings_serialize_errors", test_stream_cuda);
    run_test("stream_cuda_fused_early_finalize", test_stream_cuda_fused);
#ifdef FLS_HAVE_NCCL
    run_test("nccl_one_rank", test_nccl_one_rank);
#else
    printf("SKIP nccl_one_rank: built without NCCL (libflashsample_nccl)\n");
#endif
    run_test("temperature_overflow_is_an_error", test_temperature_overflow);
    run_test("fused_bad_values_are_errors", test_fused_bad_values);
    run_test("key_resolution_refused_or_identical", test_key_resolution);
    run_test("agreement_random_bf16_4096x151936", test_agreement_random);
    run_test("rules_logits_identical_to_cpu", test_rules_logits);
    run_test("rules_boundary", test_rules_boundary);
    run_test("rules_errors_write_nothing", test_rules_errors);
    run_test("rules_async_identical_or_refused", test_rules_async);
    run_test("rules_agreement_fused_bf16_4096x151936", test_rules_agreement_fused);
    run_test("rules_matmul_paths_identical_to_cpu", test_rules_matmul_paths);
    run_test("rules_matmul_keys_tiles_identical_to_cpu", test_rules_matmul_keys_tiles);
    run_test("goodness_of_fit_gpu", test_goodness_of_fit);
#ifdef FLS_HAVE_AUDIT
    run_test("stats_audit_cuda_engine", test_audit);
#endif
    fls_context_destroy(g_gpu);
    fls_context_destroy(g_cpu);
    printf("gpu suite: %d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
#endif
