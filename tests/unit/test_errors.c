/*
 * test_errors.c — the error contract (docs/CONTRACTS.md) through the public API: every bad
 * input gets its status and changes nothing (outputs are guard-filled before
 * each call and must still hold the guard after it); defaults, names and
 * status strings.
 */
#include "tests/unit/common.h"

#include <criterion/criterion.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A valid request; each test breaks one thing in a copy. */
typedef struct fixture {
    fls_context_t *ctx;
    tmat W, H, L;
    fls_params p;
    tout o;
    float *w, *h, *l;
} fixture;

enum { FV = 40, FD = 6, FB = 3 };

static fixture fx;

static void fx_setup(void)
{
    fx.ctx = ctx_make(2, FLS_SIMD_AUTO, 8);
    fx.w = exact_w(FV, FD, 1);
    fx.h = exact_h(FB, FD, 2);
    fx.l = exact_logits(fx.w, fx.h, FV, FB, FD);
    fx.W = tmat_make(FLS_DTYPE_F32, FV, FD, FD, fx.w);
    fx.H = tmat_make(FLS_DTYPE_F32, FB, FD, FD, fx.h);
    fx.L = tmat_make(FLS_DTYPE_F32, FB, FV, FV, fx.l);
    fls_params_default(&fx.p);
    fx.p.draws = 2;
    fx.o = tout_make(FB, 2, 1);
}

static void fx_teardown(void)
{
    fls_context_destroy(fx.ctx);
    tmat_free(&fx.W);
    tmat_free(&fx.H);
    tmat_free(&fx.L);
    tout_free(&fx.o);
    free(fx.w);
    free(fx.h);
    free(fx.l);
}

TestSuite(errors, .init = fx_setup, .fini = fx_teardown);

/* Calls both entry points (fused with W, H; from-logits with L) where the
 * broken argument applies, and checks status and untouched outputs. */
static void expect_fused(const fls_matrix *W, const fls_matrix *H, const fls_params *p,
                         const fls_outputs *out, fls_status want, const char *what)
{
    tout_guard(&fx.o);
    fls_status st = fls_sample_fused(fx.ctx, W, H, p, out);
    cr_assert_eq(st, want, "fused, %s: got %d (%s), want %d (%s)", what, st, fls_status_string(st), want,
                 fls_status_string(want));
    cr_assert(tout_untouched(&fx.o), "fused, %s: outputs written on error", what);
}

static void expect_logits(const fls_matrix *L, const fls_params *p, const fls_outputs *out, fls_status want,
                          const char *what)
{
    tout_guard(&fx.o);
    fls_status st = fls_sample_logits(fx.ctx, L, p, out);
    cr_assert_eq(st, want, "logits, %s: got %d (%s), want %d (%s)", what, st, fls_status_string(st), want,
                 fls_status_string(want));
    cr_assert(tout_untouched(&fx.o), "logits, %s: outputs written on error", what);
}

/* A request breaking only params: both entry points. */
static void expect_params(const fls_params *p, fls_status want, const char *what)
{
    expect_fused(&fx.W.m, &fx.H.m, p, &fx.o.out, want, what);
    expect_logits(&fx.L.m, p, &fx.o.out, want, what);
}

/* A valid request: FLS_OK on both paths. */
static void expect_params_ok(const fls_params *p, const char *what)
{
    tout_guard(&fx.o);
    fls_status st = fls_sample_fused(fx.ctx, &fx.W.m, &fx.H.m, p, &fx.o.out);
    cr_assert_eq(st, FLS_OK, "fused, %s: got %s", what, fls_status_string(st));
    st = fls_sample_logits(fx.ctx, &fx.L.m, p, &fx.o.out);
    cr_assert_eq(st, FLS_OK, "logits, %s: got %s", what, fls_status_string(st));
}

Test(errors, fixture_is_valid)
{
    tout_guard(&fx.o);
    cr_assert_eq(fls_sample_fused(fx.ctx, &fx.W.m, &fx.H.m, &fx.p, &fx.o.out), FLS_OK);
    cr_assert(tout_written(&fx.o, FV));
    tout_guard(&fx.o);
    cr_assert_eq(fls_sample_logits(fx.ctx, &fx.L.m, &fx.p, &fx.o.out), FLS_OK);
    cr_assert(tout_written(&fx.o, FV));
    /* tokens alone (no optional outputs) */
    tout t = tout_make(FB, 2, 0);
    cr_assert_eq(fls_sample_fused(fx.ctx, &fx.W.m, &fx.H.m, &fx.p, &t.out), FLS_OK);
    cr_assert(tout_written(&t, FV));
    tout_free(&t);
}

/* Inputs are read-only: a successful call leaves W, H and L as they were. */
Test(errors, inputs_unchanged)
{
    size_t nw = FV * FD * 4, nh = FB * FD * 4, nl = FB * FV * 4;
    void *w = malloc(nw), *h = malloc(nh), *l = malloc(nl);
    memcpy(w, fx.W.mem, nw), memcpy(h, fx.H.mem, nh), memcpy(l, fx.L.mem, nl);
    for (int m = 0; m < 3; m++) {
        fx.p.method = (fls_method)m;
        cr_assert_eq(fls_sample_fused(fx.ctx, &fx.W.m, &fx.H.m, &fx.p, &fx.o.out), FLS_OK);
        cr_assert_eq(fls_sample_logits(fx.ctx, &fx.L.m, &fx.p, &fx.o.out), FLS_OK);
    }
    cr_assert(memcmp(w, fx.W.mem, nw) == 0 && memcmp(h, fx.H.mem, nh) == 0 && memcmp(l, fx.L.mem, nl) == 0);
    free(w), free(h), free(l);
}

/* ---- NULL ---- */

Test(errors, null_pointers)
{
    fls_matrix W = fx.W.m, H = fx.H.m, L = fx.L.m;
    tout_guard(&fx.o);
    cr_assert_eq(fls_sample_fused(NULL, &W, &H, &fx.p, &fx.o.out), FLS_ERR_NULL);
    cr_assert_eq(fls_sample_logits(NULL, &L, &fx.p, &fx.o.out), FLS_ERR_NULL);
    cr_assert(tout_untouched(&fx.o));
    expect_fused(NULL, &H, &fx.p, &fx.o.out, FLS_ERR_NULL, "W NULL");
    expect_fused(&W, NULL, &fx.p, &fx.o.out, FLS_ERR_NULL, "H NULL");
    expect_fused(&W, &H, NULL, &fx.o.out, FLS_ERR_NULL, "params NULL");
    expect_fused(&W, &H, &fx.p, NULL, FLS_ERR_NULL, "outputs NULL");
    expect_logits(NULL, &fx.p, &fx.o.out, FLS_ERR_NULL, "L NULL");
    expect_logits(&L, NULL, &fx.o.out, FLS_ERR_NULL, "params NULL");
    expect_logits(&L, &fx.p, NULL, FLS_ERR_NULL, "outputs NULL");
    W.data = NULL;
    expect_fused(&W, &H, &fx.p, &fx.o.out, FLS_ERR_NULL, "W.data NULL");
    W = fx.W.m, H.data = NULL;
    expect_fused(&W, &H, &fx.p, &fx.o.out, FLS_ERR_NULL, "H.data NULL");
    L.data = NULL;
    expect_logits(&L, &fx.p, &fx.o.out, FLS_ERR_NULL, "L.data NULL");
    /* tokens are required even when the optional outputs are given */
    fls_outputs out = fx.o.out;
    out.tokens = NULL;
    expect_fused(&fx.W.m, &fx.H.m, &fx.p, &out, FLS_ERR_NULL, "tokens NULL");
    expect_logits(&fx.L.m, &fx.p, &out, FLS_ERR_NULL, "tokens NULL");

    fls_context_config cfg;
    fls_context_config_default(&cfg);
    cr_assert_eq(fls_context_create(NULL, &cfg), FLS_ERR_NULL);
}

/* ---- alignment ---- */

Test(errors, misaligned_inputs)
{
    /* a buffer big enough for any shifted view of the fixture */
    unsigned char *raw = aligned_alloc(64, 64 * 1024);
    memset(raw, 0, 64 * 1024);
    const struct {
        fls_dtype dtype;
        int shift;
    } cases[] = {
        {FLS_DTYPE_F32, 1}, {FLS_DTYPE_F32, 2}, {FLS_DTYPE_F32, 3}, {FLS_DTYPE_F16, 1}, {FLS_DTYPE_BF16, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "%s data + %d bytes", fls_dtype_name(cases[i].dtype), cases[i].shift);
        fls_matrix W = fx.W.m, H = fx.H.m, L = fx.L.m;
        W.dtype = H.dtype = L.dtype = cases[i].dtype;
        W.data = H.data = L.data = raw + cases[i].shift;
        expect_fused(&W, &fx.H.m, &fx.p, &fx.o.out, FLS_ERR_ALIGN, what);
        if (cases[i].dtype == FLS_DTYPE_F32)
            expect_fused(&fx.W.m, &H, &fx.p, &fx.o.out, FLS_ERR_ALIGN, what);
        expect_logits(&L, &fx.p, &fx.o.out, FLS_ERR_ALIGN, what);
    }
    free(raw);
}

/* Misaligned outputs: the raw bytes around them must stay as they were. */
Test(errors, misaligned_outputs)
{
    enum { N = 1024 };
    unsigned char *raw = aligned_alloc(64, N);
    const struct {
        int which; /* 0 tokens, 1 logsumexp, 2 logprobs */
        int shift;
    } cases[] = {{0, 1}, {0, 4}, {0, 6}, {1, 2}, {1, 1}, {2, 3}, {2, 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memset(raw, 0xA5, N);
        fls_outputs out = fx.o.out;
        void *p = raw + 64 + cases[i].shift;
        if (cases[i].which == 0)
            out.tokens = p;
        else if (cases[i].which == 1)
            out.logsumexp = p;
        else
            out.logprobs = p;
        char what[64];
        snprintf(what, sizeof what, "%s + %d bytes",
                 cases[i].which == 0 ? "tokens" : (cases[i].which == 1 ? "logsumexp" : "logprobs"),
                 cases[i].shift);
        expect_fused(&fx.W.m, &fx.H.m, &fx.p, &out, FLS_ERR_ALIGN, what);
        expect_logits(&fx.L.m, &fx.p, &out, FLS_ERR_ALIGN, what);
        for (int b = 0; b < N; b++)
            cr_assert_eq(raw[b], 0xA5, "%s: byte %d written", what, b);
    }
    free(raw);
}

/* Misaligned parameter arrays (temperature, row_seeds, row_offsets) are bad
 * pointers too (docs/CONTRACTS.md: "a pointer misaligned for its dtype"); reading them would
 * be undefined behaviour. */
Test(errors, misaligned_param_arrays)
{
    unsigned char *raw = aligned_alloc(64, 256);
    memset(raw, 0, 256);
    fls_params p = fx.p;
    p.temperature = (const float *)(raw + 2);
    expect_params(&p, FLS_ERR_ALIGN, "temperature + 2 bytes");
    p = fx.p;
    p.row_seeds = (const uint64_t *)(raw + 4);
    expect_params(&p, FLS_ERR_ALIGN, "row_seeds + 4 bytes");
    p = fx.p;
    p.row_offsets = (const uint64_t *)(raw + 1);
    expect_params(&p, FLS_ERR_ALIGN, "row_offsets + 1 byte");
    free(raw);
}

/* ---- sizes and shapes ---- */

Test(errors, zero_and_negative_sizes)
{
    const int64_t bad[] = {0, -1, INT64_MIN};
    for (int i = 0; i < 3; i++) {
        fls_matrix W = fx.W.m, H = fx.H.m, L = fx.L.m;
        W.rows = bad[i];
        expect_fused(&W, &fx.H.m, &fx.p, &fx.o.out, FLS_ERR_SIZE, "V <= 0");
        H.rows = bad[i];
        expect_fused(&fx.W.m, &H, &fx.p, &fx.o.out, FLS_ERR_SIZE, "B <= 0");
        W = fx.W.m, H = fx.H.m;
        W.cols = H.cols = bad[i];
        expect_fused(&W, &H, &fx.p, &fx.o.out, FLS_ERR_SIZE, "D <= 0");
        L.rows = bad[i];
        expect_logits(&L, &fx.p, &fx.o.out, FLS_ERR_SIZE, "L rows <= 0");
        L = fx.L.m;
        L.cols = bad[i];
        expect_logits(&L, &fx.p, &fx.o.out, FLS_ERR_SIZE, "L cols <= 0");
    }
}

/* Sizes whose byte extent overflows, and V >= 2^33: rejected before any
 * memory is touched (the buffers behind these views are tiny). */
Test(errors, overflowing_sizes)
{
    fls_matrix W = fx.W.m, H = fx.H.m, L = fx.L.m;
    W.rows = (int64_t)1 << 40, W.cols = H.cols = (int64_t)1 << 30, W.ld = H.ld = (int64_t)1 << 30;
    expect_fused(&W, &H, &fx.p, &fx.o.out, FLS_ERR_SIZE, "V * ld overflows");
    W = fx.W.m;
    W.rows = INT64_MAX;
    expect_fused(&W, &fx.H.m, &fx.p, &fx.o.out, FLS_ERR_SIZE, "V = INT64_MAX");
    W = fx.W.m;
    W.ld = INT64_MAX;
    expect_fused(&W, &fx.H.m, &fx.p, &fx.o.out, FLS_ERR_SIZE, "ld = INT64_MAX");
    H = fx.H.m;
    H.rows = INT64_MAX / 2;
    expect_fused(&fx.W.m, &H, &fx.p, &fx.o.out, FLS_ERR_SIZE, "B huge");
    /* V = 2^33: the noise counter holds token indices < 2^33 */
    W = fx.W.m, H = fx.H.m;
    W.rows = (int64_t)1 << 33, W.cols = W.ld = H.cols = H.ld = 1;
    expect_fused(&W, &H, &fx.p, &fx.o.out, FLS_ERR_SIZE, "V = 2^33");
    L.rows = 1, L.cols = L.ld = (int64_t)1 << 33;
    expect_logits(&L, &fx.p, &fx.o.out, FLS_ERR_SIZE, "V = 2^33 (logits)");
    L = fx.L.m;
    L.cols = L.ld = INT64_MAX;
    expect_logits(&L, &fx.p, &fx.o.out, FLS_ERR_SIZE, "L cols = INT64_MAX");
}

Test(errors, shape_mismatch)
{
    fls_matrix W = fx.W.m, H = fx.H.m, L = fx.L.m;
    H.cols = FD - 1;
    expect_fused(&fx.W.m, &H, &fx.p, &fx.o.out, FLS_ERR_SHAPE, "W.cols != H.cols");
    W.ld = FD - 1;
    expect_fused(&W, &fx.H.m, &fx.p, &fx.o.out, FLS_ERR_SHAPE, "W.ld < cols");
    W.ld = -FD;
    expect_fused(&W, &fx.H.m, &fx.p, &fx.o.out, FLS_ERR_SHAPE, "W.ld negative");
    H = fx.H.m;
    H.ld = 0;
    expect_fused(&fx.W.m, &H, &fx.p, &fx.o.out, FLS_ERR_SHAPE, "H.ld = 0");
    L.ld = FV - 1;
    expect_logits(&L, &fx.p, &fx.o.out, FLS_ERR_SHAPE, "L.ld < cols");
}

Test(errors, bad_dtype)
{
    const int bad[] = {3, -1, 100};
    for (int i = 0; i < 3; i++) {
        fls_matrix W = fx.W.m, H = fx.H.m, L = fx.L.m;
        W.dtype = (fls_dtype)bad[i];
        expect_fused(&W, &fx.H.m, &fx.p, &fx.o.out, FLS_ERR_DTYPE, "W dtype");
        H.dtype = (fls_dtype)bad[i];
        expect_fused(&fx.W.m, &H, &fx.p, &fx.o.out, FLS_ERR_DTYPE, "H dtype");
        L.dtype = (fls_dtype)bad[i];
        expect_logits(&L, &fx.p, &fx.o.out, FLS_ERR_DTYPE, "L dtype");
        cr_assert_eq(fls_dtype_size((fls_dtype)bad[i]), 0);
    }
}

/* ---- parameters ---- */

Test(errors, bad_temperature)
{
    const float bad[] = {-1.0f, -1e-30f, -INFINITY, INFINITY, NAN, -NAN};
    for (int i = 0; i < 6; i++) {
        fls_params p = fx.p;
        p.temperature_value = bad[i];
        char what[64];
        snprintf(what, sizeof what, "temperature_value %g", (double)bad[i]);
        expect_params(&p, FLS_ERR_TEMPERATURE, what);
        /* one bad row in a per-row array */
        float T[FB] = {1.0f, 0.5f, 2.0f};
        T[FB - 1] = bad[i];
        p = fx.p;
        p.temperature = T;
        snprintf(what, sizeof what, "temperature[%d] = %g", FB - 1, (double)bad[i]);
        expect_params(&p, FLS_ERR_TEMPERATURE, what);
    }
    /* the array, when given, replaces temperature_value entirely */
    float T[FB] = {1.0f, 0.0f, 2.0f};
    fls_params p = fx.p;
    p.temperature = T;
    p.temperature_value = NAN;
    tout_guard(&fx.o);
    cr_assert_eq(fls_sample_logits(fx.ctx, &fx.L.m, &p, &fx.o.out), FLS_OK);
}

/* Reserved fields: a valid non-default value is FLS_ERR_UNSUPPORTED (never a
 * silent default); a value out of its range is FLS_ERR_PARAM. */
/* The rule family's parameters: valid values sample, out-of-range ones
 * are FLS_ERR_PARAM with nothing written (docs/RULES.md). */
Test(errors, rule_params)
{
    fls_params p = fx.p;
    p.top_k = 5;
    expect_params_ok(&p, "top_k = 5");
    p = fx.p, p.top_p = 0.9f;
    expect_params_ok(&p, "top_p = 0.9");
    p = fx.p, p.min_p = 0.1f;
    expect_params_ok(&p, "min_p = 0.1");
    p = fx.p, p.top_k = FV;
    expect_params_ok(&p, "top_k = V");

    p = fx.p, p.top_k = FV + 1;
    expect_params(&p, FLS_ERR_PARAM, "top_k > V");
    p = fx.p, p.top_k = -1;
    expect_params(&p, FLS_ERR_PARAM, "top_k < 0");
    p = fx.p, p.top_p = 1.5f;
    expect_params(&p, FLS_ERR_PARAM, "top_p > 1");
    p = fx.p, p.top_p = 0.0f;
    expect_params(&p, FLS_ERR_PARAM, "top_p = 0");
    p = fx.p, p.top_p = -0.1f;
    expect_params(&p, FLS_ERR_PARAM, "top_p < 0");
    p = fx.p, p.top_p = NAN;
    expect_params(&p, FLS_ERR_PARAM, "top_p NaN");
    p = fx.p, p.min_p = 2.0f;
    expect_params(&p, FLS_ERR_PARAM, "min_p > 1");
    p = fx.p, p.min_p = -0.5f;
    expect_params(&p, FLS_ERR_PARAM, "min_p < 0");
    p = fx.p, p.min_p = NAN;
    expect_params(&p, FLS_ERR_PARAM, "min_p NaN");
    p = fx.p, p.without_replacement_k = FV + 1;
    expect_params(&p, FLS_ERR_PARAM, "without_replacement_k > V");
    p = fx.p, p.without_replacement_k = -3;
    expect_params(&p, FLS_ERR_PARAM, "without_replacement_k < 0");
    p = fx.p, p.filter = "no-such-rule";
    expect_params(&p, FLS_ERR_PARAM, "an unknown filter");
    p = fx.p, p.filter = "top-p", p.filter_value = 0.5;
    expect_params(&p, FLS_ERR_PARAM, "a built-in named as filter");
    p = fx.p, p.filter = "top-nsigma", p.filter_value = -1.0;
    expect_params(&p, FLS_ERR_PARAM, "top-nsigma < 0");
    p = fx.p, p.filter = "top-nsigma", p.filter_value = NAN;
    expect_params(&p, FLS_ERR_PARAM, "top-nsigma NaN");
    /* per-row arrays: one bad row is enough */
    int64_t ks[FB];
    float ps[FB];
    int64_t wk[FB];
    for (int i = 0; i < FB; i++)
        ks[i] = 2, ps[i] = 0.5f, wk[i] = 1;
    ks[FB - 1] = -2;
    p = fx.p, p.row_top_k = ks;
    expect_params(&p, FLS_ERR_PARAM, "row_top_k with a negative row");
    ps[0] = 1.01f;
    p = fx.p, p.row_top_p = ps;
    expect_params(&p, FLS_ERR_PARAM, "row_top_p with a row above 1");
    p = fx.p, p.row_without_replacement_k = wk;
    expect_params(&p, FLS_ERR_PARAM, "row_without_replacement_k without without_replacement_k");
    p = fx.p, p.without_replacement_k = 2, wk[1] = 3, p.row_without_replacement_k = wk;
    expect_params(&p, FLS_ERR_PARAM, "a row's K above without_replacement_k");
}

/* draws: 1 <= draws < 2^32; out of range is a size error. */
Test(errors, bad_draws)
{
    const int64_t bad[] = {0, -1, (int64_t)1 << 32, INT64_MAX};
    for (int i = 0; i < 4; i++) {
        fls_params p = fx.p;
        p.draws = bad[i];
        char what[64];
        snprintf(what, sizeof what, "draws = %lld", (long long)bad[i]);
        expect_params(&p, FLS_ERR_SIZE, what);
    }
}

static void expect_create(const fls_context_config *cfg, fls_status want, const char *what);

/* first_draw: 0 <= first_draw, first_draw + draws < 2^32. */
Test(errors, bad_first_draw)
{
    const int64_t first[] = {-1, ((int64_t)1 << 32) - 1, INT64_MAX};
    for (int i = 0; i < 3; i++) {
        fls_params p = fx.p;
        p.first_draw = first[i];
        char what[64];
        snprintf(what, sizeof what, "first_draw = %lld", (long long)first[i]);
        expect_params(&p, FLS_ERR_SIZE, what);
    }
    fls_params p = fx.p;
    p.first_draw = (int64_t)UINT32_MAX - p.draws; /* the last draw indices: fine */
    cr_assert_eq(fls_sample_fused(fx.ctx, &fx.W.m, &fx.H.m, &p, &fx.o.out), FLS_OK);
    cr_assert_eq(fls_sample_logits(fx.ctx, &fx.L.m, &p, &fx.o.out), FLS_OK);
}

/* struct_size: a size this library does not know is a parameter error,
 * a smaller known one (an older caller) gets the later fields' defaults. */
Test(errors, struct_size)
{
    fls_params p = fx.p;
    p.struct_size = 0;
    expect_params(&p, FLS_ERR_PARAM, "struct_size 0 (params not from fls_params_default)");
    p = fx.p, p.struct_size = sizeof p + 8;
    expect_params(&p, FLS_ERR_PARAM, "struct_size from a newer header");
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    cfg.struct_size = 3;
    expect_create(&cfg, FLS_ERR_PARAM, "config struct_size 3");
    cfg.struct_size = sizeof cfg + 16;
    expect_create(&cfg, FLS_ERR_PARAM, "config struct_size from a newer header");
    fls_context_config_default(&cfg);
    fls_context_t *ctx = NULL;
    cr_assert_eq(fls_context_create(&ctx, &cfg), FLS_OK);
    fls_context_destroy(ctx);
}

Test(errors, bad_method)
{
    const int bad[] = {4, -1, 1000};
    for (int i = 0; i < 3; i++) {
        fls_params p = fx.p;
        p.method = (fls_method)bad[i];
        expect_params(&p, FLS_ERR_PARAM, "method out of range");
    }
}

/* ---- contexts ---- */

static void expect_create(const fls_context_config *cfg, fls_status want, const char *what)
{
    fls_context_t *sentinel = (fls_context_t *)(uintptr_t)0x5A5A5A50;
    fls_context_t *ctx = sentinel;
    fls_status st = fls_context_create(&ctx, cfg);
    cr_assert_eq(st, want, "%s: got %s, want %s", what, fls_status_string(st), fls_status_string(want));
    cr_assert_eq(ctx, sentinel, "%s: *ctx written on error", what);
}

Test(errors, bad_context_config)
{
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    cfg.engine = (fls_engine)7;
    expect_create(&cfg, FLS_ERR_PARAM, "engine 7");
    fls_context_config_default(&cfg);
    cfg.threads = -1;
    expect_create(&cfg, FLS_ERR_PARAM, "threads -1");
    fls_context_config_default(&cfg);
    cfg.tile_v = -5;
    expect_create(&cfg, FLS_ERR_PARAM, "tile_v -5");
    fls_context_config_default(&cfg);
    cfg.simd = (fls_simd)9;
    expect_create(&cfg, FLS_ERR_PARAM, "simd 9");
    const fls_simd paths[] = {FLS_SIMD_AVX2, FLS_SIMD_AVX512};
    for (int i = 0; i < 2; i++)
        if (!fls_cpu_simd_supported(paths[i])) {
            fls_context_config_default(&cfg);
            cfg.simd = paths[i];
            expect_create(&cfg, FLS_ERR_UNSUPPORTED, fls_simd_name(paths[i]));
        }
}

Test(errors, cuda_engine_without_gpu)
{
    if (fls_cuda_available())
        cr_skip_test("a CUDA device is present: the CPU-only behaviour is not testable here");
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    cfg.engine = FLS_ENGINE_CUDA;
    expect_create(&cfg, FLS_ERR_NO_DEVICE, "CUDA engine in a CPU-only build");
}

/* ---- defaults, names, strings ---- */

Test(errors, defaults)
{
    fls_params p;
    memset(&p, 0xff, sizeof p);
    fls_params_default(&p);
    cr_assert_eq(p.method, FLS_METHOD_FUSED);
    cr_assert_null(p.temperature);
    cr_assert_eq(p.temperature_value, 1.0f);
    cr_assert_null(p.row_seeds);
    cr_assert_eq(p.seed, 0);
    cr_assert_null(p.row_offsets);
    cr_assert_eq(p.offset, 0);
    cr_assert_eq(p.draws, 1);
    cr_assert_eq(p.top_k, 0);
    cr_assert_eq(p.top_p, 1.0f);
    cr_assert_eq(p.min_p, 0.0f);
    cr_assert_eq(p.without_replacement_k, 0);

    fls_context_config c;
    memset(&c, 0xff, sizeof c);
    fls_context_config_default(&c);
    cr_assert_eq(c.engine, FLS_ENGINE_CPU);
    cr_assert_eq(c.threads, 0);
    cr_assert_eq(c.simd, FLS_SIMD_AUTO);
    cr_assert_eq(c.tile_v, 0);
    cr_assert_null(c.stream);
    cr_assert_eq(c.workspace_bytes, 0);

    fls_context_t *ctx = NULL;
    cr_assert_eq(fls_context_create(&ctx, &c), FLS_OK);
    cr_assert_eq(fls_context_engine(ctx), FLS_ENGINE_CPU);
    cr_assert_geq(fls_context_threads(ctx), 1, "threads = 0 resolves to the online cores");
    fls_simd s = fls_context_simd(ctx);
    cr_assert(s != FLS_SIMD_AUTO && fls_cpu_simd_supported(s), "AUTO resolves to a supported path");
    cr_assert_eq(s, fls_cpu_best_simd());
    fls_context_destroy(ctx);
    fls_context_destroy(NULL);
}

Test(errors, names)
{
    cr_assert_eq(fls_dtype_size(FLS_DTYPE_F32), 4);
    cr_assert_eq(fls_dtype_size(FLS_DTYPE_F16), 2);
    cr_assert_eq(fls_dtype_size(FLS_DTYPE_BF16), 2);
    const char *dn[] = {fls_dtype_name(FLS_DTYPE_F32), fls_dtype_name(FLS_DTYPE_F16),
                        fls_dtype_name(FLS_DTYPE_BF16), fls_dtype_name((fls_dtype)9)};
    const char *sn[] = {fls_simd_name(FLS_SIMD_AUTO), fls_simd_name(FLS_SIMD_PORTABLE),
                        fls_simd_name(FLS_SIMD_AVX2), fls_simd_name(FLS_SIMD_AVX512),
                        fls_simd_name((fls_simd)9)};
    for (int i = 0; i < 4; i++) {
        cr_assert(dn[i] && *dn[i]);
        for (int j = 0; j < i; j++)
            cr_assert(strcmp(dn[i], dn[j]) != 0);
    }
    for (int i = 0; i < 5; i++) {
        cr_assert(sn[i] && *sn[i]);
        for (int j = 0; j < i; j++)
            cr_assert(strcmp(sn[i], sn[j]) != 0);
    }
}

Test(errors, status_strings)
{
    const char *seen[18];
    for (int c = 0; c >= -17; c--) {
        const char *s = fls_status_string((fls_status)c);
        cr_assert(s && *s, "status %d has no string", c);
        for (int j = 0; j < -c; j++)
            cr_assert(strcmp(s, seen[j]) != 0, "status %d and %d share the string '%s'", c, -j, s);
        seen[-c] = s;
    }
    const int unknown[] = {1, -18, -1000, INT_MIN, INT_MAX};
    for (int i = 0; i < 5; i++) {
        const char *s = fls_status_string((fls_status)unknown[i]);
        cr_assert(s && *s, "unknown status %d has no string", unknown[i]);
    }
    cr_assert_eq(FLS_ERR_INTERNAL, -17, "a new status code needs its string tested here");
}

/* fls_params_explain names the field, the row and the range of what a
 * sampling call refuses, with the status the call gives, and says nothing
 * ("" and FLS_OK) for params the calls accept. */
Test(errors, params_explain_names_field_row_and_range)
{
    char msg[256];
    fls_params p;
    fls_params_default(&p);
    cr_assert_eq(fls_params_explain(&p, 3, 40, msg, sizeof msg), FLS_OK);
    cr_assert_str_eq(msg, "");
    float tp[3] = {0.9f, 1.5f, 0.9f};
    double fv[3] = {0.1, 0.2, -1.0};
    float T[3] = {1.0f, 1.0f, -2.0f};
    const struct {
        const char *what;
        fls_status st;
        const char *words[3];
    } k[] = {
        {"top_k", FLS_ERR_PARAM, {"top_k = 41", "V = 40", NULL}},
        {"row_top_p", FLS_ERR_PARAM, {"top_p = 1.5", "(row 1)", "(0, 1]"}},
        {"min_p", FLS_ERR_PARAM, {"min_p = -0.5", "[0, 1]", NULL}},
        {"filter", FLS_ERR_PARAM, {"\"nope\"", "registry", NULL}},
        {"built-in as filter", FLS_ERR_PARAM, {"\"top-k\"", "own field", NULL}},
        {"row_filter_value", FLS_ERR_PARAM, {"filter_value = -1", "(row 2)", "\"top-nsigma\""}},
        {"group_size", FLS_ERR_PARAM, {"group_size = 3", "power of two", NULL}},
        {"draws", FLS_ERR_SIZE, {"draws = 0", NULL, NULL}},
        {"temperature", FLS_ERR_TEMPERATURE, {"temperature = -2", "(row 2)", NULL}},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        fls_params_default(&p);
        switch (i) {
        case 0:
            p.top_k = 41;
            break;
        case 1:
            p.row_top_p = tp;
            break;
        case 2:
            p.min_p = -0.5f;
            break;
        case 3:
            p.filter = "nope";
            break;
        case 4:
            p.filter = "top-k", p.filter_value = 5;
            break;
        case 5:
            p.filter = "top-nsigma", p.row_filter_value = fv;
            break;
        case 6:
            p.group_size = 3;
            break;
        case 7:
            p.draws = 0;
            break;
        default:
            p.temperature = T;
            break;
        }
        cr_expect_eq(fls_params_explain(&p, 3, 40, msg, sizeof msg), k[i].st, "%s: %s", k[i].what, msg);
        for (int w = 0; w < 3 && k[i].words[w]; w++)
            cr_expect(strstr(msg, k[i].words[w]) != NULL, "%s: '%s' lacks '%s'", k[i].what, msg,
                      k[i].words[w]);
    }
    cr_assert_eq(fls_params_explain(NULL, 3, 40, msg, sizeof msg), FLS_ERR_NULL);
    cr_assert_eq(fls_params_explain(&p, 0, 40, NULL, 0),
                 FLS_ERR_SIZE); /* no message buffer: the status alone */
}
