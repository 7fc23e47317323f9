/*
 * test_identity.c — the noise contract through the public API (CPU engine):
 * the same tokens for the same seeds whatever the tile size, thread count,
 * SIMD path, batch position, method (fused, unfused Gumbel, from logits) or
 * input dtype; the tokens of the reference Gumbel-max written from
 * docs/NOISE.md; logsumexp and logprobs against a double reference.
 */
#include "tests/unit/common.h"
#include "lib/base/fls_noise.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int64_t TILES[] = {2, 4, 6, 64, 1000, -1 /* = V */};
static const int THREADS[] = {1, 2, 3};
static const fls_dtype DTYPES[] = {FLS_DTYPE_F32, FLS_DTYPE_F16, FLS_DTYPE_BF16};

/* The SIMD paths this processor has (PORTABLE always). */
static int simd_paths(fls_simd *paths)
{
    const fls_simd all[] = {FLS_SIMD_PORTABLE, FLS_SIMD_AVX2, FLS_SIMD_AVX512};
    int n = 0;
    for (int i = 0; i < 3; i++)
        if (fls_cpu_simd_supported(all[i]))
            paths[n++] = all[i];
        else
            cr_log_info("SIMD path %s not supported here: not tested", fls_simd_name(all[i]));
    return n;
}

static void expect_tokens_equal(const tout *a, const tout *b, const char *what)
{
    for (int64_t i = 0; i < a->B * a->draws; i++)
        cr_assert_eq(a->tokens[i], b->tokens[i], "%s: row %lld draw %lld: token %lld != %lld", what,
                     (long long)(i / a->draws), (long long)(i % a->draws), (long long)b->tokens[i],
                     (long long)a->tokens[i]);
}

/* Tolerance for a float result computed through double: a few float ulps. */
static double tol(double scale)
{
    return 4e-7 * (fabs(scale) > 1.0 ? fabs(scale) : 1.0);
}

/* logsumexp and logprobs of o against the double reference for logits l. */
static void expect_stats(const tout *o, const float *l, int64_t V, const float *T, const char *what)
{
    for (int64_t b = 0; b < o->B; b++) {
        double lse = ref_logsumexp(l + b * V, V, T[b]);
        cr_assert(fabs((double)o->logsumexp[b] - lse) <= tol(lse) * 4,
                  "%s: row %lld: logsumexp %.9g, reference %.9g", what, (long long)b, (double)o->logsumexp[b],
                  lse);
        for (int64_t d = 0; d < o->draws; d++) {
            int64_t tok = o->tokens[b * o->draws + d];
            cr_assert(tok >= 0 && tok < V);
            double lp = T[b] == 0.0f ? 0.0 : (double)l[b * V + tok] / (double)T[b] - lse;
            double got = o->logprobs[b * o->draws + d];
            double scale = fabs(lse) + fabs((double)l[b * V + tok] / (T[b] == 0.0f ? 1.0 : (double)T[b]));
            cr_assert(fabs(got - lp) <= tol(scale) * 4,
                      "%s: row %lld draw %lld: logprob %.9g, reference %.9g", what, (long long)b,
                      (long long)d, got, lp);
            if (T[b] == 0.0f)
                cr_assert_eq(got, 0.0, "%s: greedy logprob must be 0", what);
        }
    }
}

static void run_fused(fls_context_t *ctx, const fls_matrix *W, const fls_matrix *H, const fls_params *p,
                      tout *o)
{
    tout_guard(o);
    fls_status st = fls_sample_fused(ctx, W, H, p, &o->out);
    cr_assert_eq(st, FLS_OK, "fls_sample_fused: %s", fls_status_string(st));
    cr_assert(tout_written(o, W->rows), "outputs not fully written");
}

static void run_logits(fls_context_t *ctx, const fls_matrix *L, const fls_params *p, tout *o)
{
    tout_guard(o);
    fls_status st = fls_sample_logits(ctx, L, p, &o->out);
    cr_assert_eq(st, FLS_OK, "fls_sample_logits: %s", fls_status_string(st));
    cr_assert(tout_written(o, L->cols), "outputs not fully written");
}

/* Reference tokens of logits l (B, V) under params p (seed or row_seeds). */
static void expect_reference(const tout *o, const float *l, int64_t V, const fls_params *p, const char *what)
{
    for (int64_t b = 0; b < o->B; b++) {
        float T = p->temperature ? p->temperature[b] : p->temperature_value;
        uint64_t seed = p->row_seeds ? p->row_seeds[b] : fls_row_seed(p->seed, (uint64_t)b);
        uint64_t off = p->row_offsets ? p->row_offsets[b] : p->offset;
        for (int64_t d = 0; d < o->draws; d++) {
            int64_t want = ref_token(l + b * V, V, T, seed, off, (uint32_t)d);
            cr_assert_eq(o->tokens[b * o->draws + d], want,
                         "%s: row %lld draw %lld (T %g): token %lld, reference Gumbel-max %lld", what,
                         (long long)b, (long long)d, (double)T, (long long)o->tokens[b * o->draws + d],
                         (long long)want);
        }
    }
}

/* Tiles x threads x SIMD x W dtype on random (not exact) inputs: every
 * configuration gives the reference tokens of the canonical logits (so all
 * configurations agree bit for bit), and at T = 0 its logsumexp is the
 * winning logit itself, which must be the canonical float exactly: that
 * catches an accumulation order that differs by one rounding, which tokens
 * alone would almost never show. Two batch sizes: B <= 16 and B > 16 take
 * different dot-product kernels. */
static void sweep_configs(int64_t V, int64_t D, int64_t B, int64_t draws)
{
    fls_simd simd[3];
    int nsimd = simd_paths(simd);
    float *w = random_floats(V * D, 11 + (uint64_t)B), *h = random_floats(B * D, 12 + (uint64_t)B);
    tmat Hm = tmat_make(FLS_DTYPE_F32, B, D, D, h);
    fls_params p, g;
    fls_params_default(&p);
    p.seed = 0xC0FFEE;
    p.offset = 41;
    p.draws = draws;
    p.temperature_value = 0.8f;
    fls_params_default(&g);
    g.temperature_value = 0.0f;
    for (size_t di = 0; di < sizeof DTYPES / sizeof DTYPES[0]; di++) {
        tmat Wm = tmat_make_rounded(DTYPES[di], V, D, D + (int64_t)di, w);
        float *cl = canonical_logits(&Wm, &Hm);
        tout o = tout_make(B, draws, 1), og = tout_make(B, 1, 1);
        for (int si = 0; si < nsimd; si++)
            for (size_t ti = 0; ti < sizeof TILES / sizeof TILES[0]; ti++)
                for (size_t th = 0; th < sizeof THREADS / sizeof THREADS[0]; th++) {
                    int64_t tile = TILES[ti] < 0 ? V : TILES[ti];
                    fls_context_t *ctx = ctx_make(THREADS[th], simd[si], tile);
                    cr_assert_eq(fls_context_simd(ctx), simd[si]);
                    cr_assert_eq(fls_context_threads(ctx), THREADS[th]);
                    char what[128];
                    snprintf(what, sizeof what, "W %s, B %lld, simd %s, tile %lld, threads %d",
                             fls_dtype_name(DTYPES[di]), (long long)B, fls_simd_name(simd[si]),
                             (long long)tile, THREADS[th]);
                    run_fused(ctx, &Wm.m, &Hm.m, &p, &o);
                    expect_reference(&o, cl, V, &p, what);
                    run_fused(ctx, &Wm.m, &Hm.m, &g, &og);
                    for (int64_t b = 0; b < B; b++) {
                        int64_t t = ref_token(cl + b * V, V, 0.0f, 0, 0, 0);
                        cr_assert_eq(og.tokens[b], t,
                                     "%s: greedy row %lld: token %lld, canonical argmax %lld", what,
                                     (long long)b, (long long)og.tokens[b], (long long)t);
                        cr_assert_eq(f2u(og.logsumexp[b]), f2u(cl[b * V + t]),
                                     "%s: greedy row %lld: max logit %a, canonical %a (accumulation order?)",
                                     what, (long long)b, (double)og.logsumexp[b], (double)cl[b * V + t]);
                    }
                    fls_context_destroy(ctx);
                }
        tout_free(&o);
        tout_free(&og);
        tmat_free(&Wm);
        free(cl);
    }
    tmat_free(&Hm);
    free(w);
    free(h);
}

Test(identity, tiles_threads_simd_small_batch, .timeout = 120)
{
    sweep_configs(1001, 37, 5, 2);
}

Test(identity, tiles_threads_simd_large_batch, .timeout = 120)
{
    sweep_configs(257, 19, 20, 1);
}

/* The same configurations on exact inputs also equal the reference sampler,
 * and f32, f16 and bf16 W (the same values) give the same tokens. */
Test(identity, reference_all_configs_and_dtypes, .timeout = 120)
{
    const int64_t V = 515, D = 21, B = 4, draws = 3;
    fls_simd simd[3];
    int nsimd = simd_paths(simd);
    float *w = exact_w(V, D, 1), *h = exact_h(B, D, 2), *l = exact_logits(w, h, V, B, D);
    float T[] = {1.0f, 0.5f, 2.0f, 0.7f};
    fls_params p;
    fls_params_default(&p);
    p.seed = 77;
    p.draws = draws;
    p.temperature = T;
    tout o = tout_make(B, draws, 1);
    for (size_t wd = 0; wd < 3; wd++)
        for (size_t hd = 0; hd < 3; hd++) {
            tmat Wm = tmat_make(DTYPES[wd], V, D, D + (int64_t)wd, w);
            tmat Hm = tmat_make(DTYPES[hd], B, D, D + 2 * (int64_t)hd, h);
            for (int si = 0; si < nsimd; si++)
                for (size_t ti = 0; ti < sizeof TILES / sizeof TILES[0]; ti += 2) {
                    int64_t tile = TILES[ti] < 0 ? V : TILES[ti];
                    fls_context_t *ctx = ctx_make(1 + (int)(ti % 3), simd[si], tile);
                    run_fused(ctx, &Wm.m, &Hm.m, &p, &o);
                    char what[128];
                    snprintf(what, sizeof what, "fused W %s H %s simd %s tile %lld",
                             fls_dtype_name(DTYPES[wd]), fls_dtype_name(DTYPES[hd]), fls_simd_name(simd[si]),
                             (long long)tile);
                    expect_reference(&o, l, V, &p, what);
                    expect_stats(&o, l, V, T, what);
                    fls_context_destroy(ctx);
                }
            tmat_free(&Wm);
            tmat_free(&Hm);
        }
    tout_free(&o);
    free(w);
    free(h);
    free(l);
}

/* Fused, unfused Gumbel (materialized logits) and from-logits (f32, f16 and
 * bf16 L, strided) give the same tokens on exact logits, equal to the
 * reference; their logsumexp/logprobs agree with the double reference. */
Test(identity, fused_unfused_logits_agree)
{
    const int64_t V = 777, D = 13, B = 6, draws = 4;
    float *w = exact_w(V, D, 3), *h = exact_h(B, D, 4), *l = exact_logits(w, h, V, B, D);
    tmat Wm = tmat_make(FLS_DTYPE_BF16, V, D, D, w), Hm = tmat_make(FLS_DTYPE_F32, B, D, D, h);
    float T[] = {1.0f, 0.25f, 4.0f, 0.0f, 1.5f, 0.9f};
    uint64_t seeds[] = {1, 2, 3, 0xFFFFFFFFFFFFFFFFull, 1ull << 32, 5};
    uint64_t offs[] = {0, 1, 2, 3, 1ull << 40, 7};
    fls_params p;
    fls_params_default(&p);
    p.temperature = T;
    p.row_seeds = seeds;
    p.row_offsets = offs;
    p.draws = draws;
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 64);
    tout ref = tout_make(B, draws, 1), o = tout_make(B, draws, 1);
    run_fused(ctx, &Wm.m, &Hm.m, &p, &ref);
    expect_reference(&ref, l, V, &p, "fused");
    expect_stats(&ref, l, V, T, "fused");

    p.method = FLS_METHOD_UNFUSED_GUMBEL;
    run_fused(ctx, &Wm.m, &Hm.m, &p, &o);
    expect_tokens_equal(&ref, &o, "fused vs unfused Gumbel");
    expect_stats(&o, l, V, T, "unfused Gumbel");

    for (int m = 0; m < 2; m++) {
        p.method = m ? FLS_METHOD_UNFUSED_GUMBEL : FLS_METHOD_FUSED;
        tmat Lm = tmat_make(FLS_DTYPE_F32, B, V, V + 3, l);
        run_logits(ctx, &Lm.m, &p, &o);
        expect_tokens_equal(&ref, &o, m ? "from-logits (unfused Gumbel)" : "from-logits");
        expect_stats(&o, l, V, T, "from-logits");
        tmat_free(&Lm);
        /* f16 and bf16 L hold these logits rounded: the reference and the
         * f32 path on the rounded values */
        for (size_t di = 1; di < 3; di++) {
            float *lr = round_to_dtype(l, B * V, DTYPES[di]);
            tmat Lh = tmat_make(DTYPES[di], B, V, V + (int64_t)di, lr),
                 Lf = tmat_make(FLS_DTYPE_F32, B, V, V, lr);
            tout of = tout_make(B, draws, 1);
            run_logits(ctx, &Lh.m, &p, &o);
            run_logits(ctx, &Lf.m, &p, &of);
            char what[96];
            snprintf(what, sizeof what, "from-logits L %s (method %d)", fls_dtype_name(DTYPES[di]), m);
            expect_tokens_equal(&of, &o, what);
            expect_reference(&o, lr, V, &p, what);
            expect_stats(&o, lr, V, T, what);
            tout_free(&of);
            tmat_free(&Lh);
            tmat_free(&Lf);
            free(lr);
        }
    }
    fls_context_destroy(ctx);
    tout_free(&ref);
    tout_free(&o);
    tmat_free(&Wm);
    tmat_free(&Hm);
    free(w);
    free(h);
    free(l);
}

/* Fused and unfused Gumbel compute their logits with the same kernels, so
 * they agree on random (inexact) inputs too. */
Test(identity, fused_unfused_agree_random_inputs)
{
    const int64_t V = 999, D = 45;
    for (int64_t B = 3; B <= 19; B += 16) {
        float *w = random_floats(V * D, 5), *h = random_floats(B * D, 6);
        tmat Wm = tmat_make_rounded(FLS_DTYPE_F16, V, D, D, w), Hm = tmat_make(FLS_DTYPE_F32, B, D, D, h);
        fls_params p;
        fls_params_default(&p);
        p.seed = 9;
        p.draws = 2;
        fls_context_t *ctx = ctx_make(3, FLS_SIMD_AUTO, 0);
        tout a = tout_make(B, 2, 1), b = tout_make(B, 2, 1);
        run_fused(ctx, &Wm.m, &Hm.m, &p, &a);
        p.method = FLS_METHOD_UNFUSED_GUMBEL;
        run_fused(ctx, &Wm.m, &Hm.m, &p, &b);
        expect_tokens_equal(&a, &b, B > 16 ? "fused vs unfused Gumbel, B > 16" : "fused vs unfused Gumbel");
        fls_context_destroy(ctx);
        tout_free(&a);
        tout_free(&b);
        tmat_free(&Wm);
        tmat_free(&Hm);
        free(w);
        free(h);
    }
}

/* A row with its own seed, offset and temperature gives the same token at
 * index 0, 7 or 23 of a batch and alone (B = 1, B = 8 and B = 24 use
 * different kernels), on random inputs: the reference token of its
 * canonical logits. */
Test(identity, batch_position)
{
    const int64_t V = 613, D = 29, BMAX = 24;
    float *w = random_floats(V * D, 21), *h = random_floats(BMAX * D, 22);
    tmat Wm = tmat_make_rounded(FLS_DTYPE_BF16, V, D, D, w);
    const float *hr = h; /* the row under test: row 0 of h */
    const uint64_t seed_r = 0xABCDEF0123456789ull, off_r = 12345;
    const float T_r = 0.6f;
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 32);
    /* the row's reference tokens, from its canonical logits */
    tmat Hr = tmat_make(FLS_DTYPE_F32, 1, D, D, hr);
    float *cl = canonical_logits(&Wm, &Hr);
    int64_t want[3];
    for (int d = 0; d < 3; d++)
        want[d] = ref_token(cl, V, T_r, seed_r, off_r, (uint32_t)d);
    tmat_free(&Hr);
    free(cl);
    const int64_t sizes[] = {1, 8, 24};
    for (size_t si = 0; si < 3; si++) {
        int64_t B = sizes[si];
        int64_t positions[] = {0, B - 1, B / 2};
        for (int pi = 0; pi < 3; pi++) {
            int64_t pos = positions[pi];
            float *hb = malloc((size_t)(B * D) * sizeof *hb);
            uint64_t *seeds = malloc((size_t)B * sizeof *seeds), *offs = malloc((size_t)B * sizeof *offs);
            float *T = malloc((size_t)B * sizeof *T);
            for (int64_t b = 0, other = 1; b < B; b++) {
                if (b == pos) {
                    memcpy(hb + b * D, hr, (size_t)D * sizeof *hb);
                    seeds[b] = seed_r, offs[b] = off_r, T[b] = T_r;
                } else {
                    memcpy(hb + b * D, h + other * D, (size_t)D * sizeof *hb);
                    seeds[b] = 1000 + (uint64_t)other, offs[b] = (uint64_t)other, T[b] = 1.0f;
                    other++;
                }
            }
            tmat Hm = tmat_make(FLS_DTYPE_F32, B, D, D, hb);
            fls_params p;
            fls_params_default(&p);
            p.row_seeds = seeds;
            p.row_offsets = offs;
            p.temperature = T;
            p.draws = 3;
            tout o = tout_make(B, 3, 0);
            run_fused(ctx, &Wm.m, &Hm.m, &p, &o);
            for (int d = 0; d < 3; d++) {
                int64_t got = o.tokens[pos * 3 + d];
                cr_assert_eq(got, want[d], "B %lld position %lld draw %d: token %lld, reference %lld",
                             (long long)B, (long long)pos, d, (long long)got, (long long)want[d]);
            }
            tout_free(&o);
            tmat_free(&Hm);
            free(hb);
            free(seeds);
            free(offs);
            free(T);
        }
    }
    fls_context_destroy(ctx);
    tmat_free(&Wm);
    free(w);
    free(h);
}

/* Without row_seeds, row b uses fls_row_seed(seed, b): passing those seeds
 * explicitly changes nothing. */
Test(identity, derived_row_seeds)
{
    const int64_t V = 300, D = 8, B = 9;
    float *w = exact_w(V, D, 31), *h = exact_h(B, D, 32), *l = exact_logits(w, h, V, B, D);
    tmat Wm = tmat_make(FLS_DTYPE_F32, V, D, D, w), Hm = tmat_make(FLS_DTYPE_F32, B, D, D, h);
    fls_context_t *ctx = ctx_make(1, FLS_SIMD_AUTO, 0);
    fls_params p;
    fls_params_default(&p);
    p.seed = 0x5EED;
    p.offset = 3;
    tout a = tout_make(B, 1, 0), b = tout_make(B, 1, 0);
    run_fused(ctx, &Wm.m, &Hm.m, &p, &a);
    expect_reference(&a, l, V, &p, "derived row seeds");
    uint64_t seeds[9];
    for (int64_t i = 0; i < B; i++)
        seeds[i] = fls_row_seed(p.seed, (uint64_t)i);
    p.row_seeds = seeds;
    p.seed = 1; /* ignored when row_seeds is given */
    run_fused(ctx, &Wm.m, &Hm.m, &p, &b);
    expect_tokens_equal(&a, &b, "explicit fls_row_seed seeds");
    fls_context_destroy(ctx);
    tout_free(&a);
    tout_free(&b);
    tmat_free(&Wm);
    tmat_free(&Hm);
    free(w);
    free(h);
    free(l);
}

/* Draw d of a multi-draw call is the single-draw token of draw index d; the
 * row offset selects a different, reproducible stream. */
Test(identity, draws_and_offsets)
{
    const int64_t V = 101, D = 5, B = 2, draws = 40;
    float *w = exact_w(V, D, 41), *h = exact_h(B, D, 42), *l = exact_logits(w, h, V, B, D);
    tmat Lm = tmat_make(FLS_DTYPE_F32, B, V, V, l);
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 8);
    fls_params p;
    fls_params_default(&p);
    p.seed = 5;
    p.draws = draws;
    p.temperature_value = 2.0f; /* flat enough that draws differ */
    tout o = tout_make(B, draws, 1);
    for (uint64_t off = 0; off < 3; off++) {
        p.offset = off * 1000003;
        run_logits(ctx, &Lm.m, &p, &o);
        expect_reference(&o, l, V, &p, "multi-draw from logits");
        int distinct = 0;
        for (int64_t d = 1; d < draws; d++)
            distinct += o.tokens[d] != o.tokens[0];
        cr_assert(distinct > 0, "40 draws at T = 2 over 101 tokens all gave token %lld",
                  (long long)o.tokens[0]);
    }
    fls_context_destroy(ctx);
    tout_free(&o);
    tmat_free(&Lm);
    free(w);
    free(h);
    free(l);
}

/* D above the portable kernel's 4096-column conversion block. */
Test(identity, wide_rows, .timeout = 60)
{
    const int64_t V = 33, D = 4099, B = 3;
    fls_simd simd[3];
    int nsimd = simd_paths(simd);
    float *w = exact_w(V, D, 51), *h = exact_h(B, D, 52), *l = exact_logits(w, h, V, B, D);
    tmat Wm = tmat_make(FLS_DTYPE_F16, V, D, D + 1, w), Hm = tmat_make(FLS_DTYPE_BF16, B, D, D, h);
    fls_params p;
    fls_params_default(&p);
    p.seed = 8;
    p.temperature_value = 4.0f;
    tout o = tout_make(B, 1, 1);
    float T[] = {4.0f, 4.0f, 4.0f};
    for (int si = 0; si < nsimd; si++) {
        fls_context_t *ctx = ctx_make(2, simd[si], 6);
        run_fused(ctx, &Wm.m, &Hm.m, &p, &o);
        expect_reference(&o, l, V, &p, fls_simd_name(simd[si]));
        expect_stats(&o, l, V, T, fls_simd_name(simd[si]));
        fls_context_destroy(ctx);
    }
    tout_free(&o);
    tmat_free(&Wm);
    tmat_free(&Hm);
    free(w);
    free(h);
    free(l);
}

/* The AMX path (FLS_SIMD_AMX: bf16 W summed in the tile unit's order) on
 * random inputs: its tokens do not depend on the tile size, the thread count
 * or the batch position (a row alone gives the row's tokens), and they are
 * the canonical logits' reference tokens except at near-ties: where they
 * differ, the two tokens' keys under the canonical logits are within what
 * the two sums' rounding (2 (D + 32) 2^-24 sum |w h| each, tools/simd_check)
 * can move them, and at most 1 % of the draws differ. */
Test(identity, amx_path, .timeout = 120)
{
    if (!fls_cpu_simd_supported(FLS_SIMD_AMX))
        cr_skip_test("AMX path not tested: the processor (or the kernel) lacks AMX-TILE/AMX-BF16");
    const int64_t V = 3001, D = 200, B = 37, draws = 4;
    float *w = random_floats(V * D, 71), *h = random_floats(B * D, 72);
    tmat Wm = tmat_make_rounded(FLS_DTYPE_BF16, V, D, D + 5, w);
    tmat Hm = tmat_make(FLS_DTYPE_F32, B, D, D, h);
    float *cl = canonical_logits(&Wm, &Hm);
    fls_params p;
    fls_params_default(&p);
    p.seed = 0xA11CE;
    p.offset = 7;
    p.draws = draws;
    p.temperature_value =
        0.05f; /* low: keys far apart relative to the noise, so near-ties are rare and real */
    tout first = tout_make(B, draws, 0), o = tout_make(B, draws, 0);
    const int64_t tiles[] = {2, 64, 1000, V};
    const int threads[] = {1, 3};
    for (size_t ti = 0; ti < 4; ti++)
        for (size_t th = 0; th < 2; th++) {
            fls_context_t *ctx = ctx_make(threads[th], FLS_SIMD_AMX, tiles[ti]);
            cr_assert_eq(fls_context_simd(ctx), FLS_SIMD_AMX);
            run_fused(ctx, &Wm.m, &Hm.m, &p, ti || th ? &o : &first);
            if (ti || th)
                expect_tokens_equal(&first, &o, "amx: tile/threads");
            fls_context_destroy(ctx);
        }
    /* each row alone, with its own seed */
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AMX, 0);
    for (int64_t b = 0; b < B; b += 9) {
        tmat Hr = tmat_make(FLS_DTYPE_F32, 1, D, D, h + b * D);
        fls_params q = p;
        const uint64_t rs = fls_row_seed(p.seed, (uint64_t)b);
        q.row_seeds = &rs;
        tout one = tout_make(1, draws, 0);
        run_fused(ctx, &Wm.m, &Hr.m, &q, &one);
        for (int64_t d = 0; d < draws; d++)
            cr_assert_eq(one.tokens[d], first.tokens[b * draws + d], "amx: row %lld alone, draw %lld",
                         (long long)b, (long long)d);
        tout_free(&one);
        tmat_free(&Hr);
    }
    fls_context_destroy(ctx);
    /* against the canonical logits' tokens */
    int64_t differ = 0;
    for (int64_t b = 0; b < B; b++) {
        double amax = 0.0; /* the largest sum |w h| of the row */
        for (int64_t i = 0; i < V; i++) {
            double a = 0.0;
            for (int64_t d = 0; d < D; d++)
                a += fabs((double)tmat_get(&Wm, i, d) * (double)h[b * D + d]);
            amax = a > amax ? a : amax;
        }
        const uint64_t seed = fls_row_seed(p.seed, (uint64_t)b);
        for (int64_t d = 0; d < draws; d++) {
            const int64_t want = ref_token(cl + b * V, V, p.temperature_value, seed, p.offset, (uint32_t)d),
                          got = first.tokens[b * draws + d];
            if (got == want)
                continue;
            differ++;
            const double kw = (double)cl[b * V + want] / p.temperature_value +
                              (double)fls_gumbel(seed, p.offset, (uint32_t)d, (uint64_t)want),
                         kg = (double)cl[b * V + got] / p.temperature_value +
                              (double)fls_gumbel(seed, p.offset, (uint32_t)d, (uint64_t)got);
            const double gap =
                4.0 * (double)(D + 32) * 0x1p-24 * amax / p.temperature_value + 8.0 * 0x1p-24 * fabs(kw);
            cr_assert(kw - kg <= gap,
                      "amx: row %lld draw %lld: token %lld, canonical %lld: keys %.9g and %.9g, "
                      "farther apart than the sums' rounding (%.3g)",
                      (long long)b, (long long)d, (long long)got, (long long)want, kg, kw, gap);
        }
    }
    cr_log_info("amx: %lld of %lld draws differ from the canonical logits' tokens (near-ties)",
                (long long)differ, (long long)(B * draws));
    cr_assert(differ * 100 <= B * draws, "amx: %lld of %lld draws differ", (long long)differ,
              (long long)(B * draws));
    tout_free(&first);
    tout_free(&o);
    free(cl);
    tmat_free(&Wm);
    tmat_free(&Hm);
    free(w);
    free(h);
}
