/*
 * test_min_first.c — the min-first noise scheme (FLS_NOISE_MIN_FIRST,
 * lib/base/fls_noise.h, docs/NOISE.md "The min-first scheme"): the span
 * reference against the per-token function bit for bit, the group bound M,
 * the range, the frozen values (tests/kat_min_first.txt), the law (every
 * token's noise a standard Gumbel, independent inside a group: Gumbel-max
 * over a group's tokens gives the softmax), and the API around it (the
 * refusals, both paths and both flat methods give the same tokens).
 */
#include "tests/unit/common.h"

#include "lib/ref/rule_ref.h"

#include <criterion/criterion.h>
#include <gsl/gsl_cdf.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FLS_KAT_MF_PATH
#define FLS_KAT_MF_PATH "tests/kat_min_first.txt"
#endif

/* The statistical tests below run on fixed seeds, so each gives the same
 * p-value in every run; they are designed at this family-wise level: a
 * correct scheme fails one of them for at most this fraction of seeds. */
#define MF_ALPHA_FAMILY 1e-6
#define MF_N_STAT_TESTS 10 /* check_gumbel and check_argmax calls below */
#define MF_ALPHA        (MF_ALPHA_FAMILY / MF_N_STAT_TESTS)

/* The range of a min-first noise: the largest is M at the smallest
 * exponential (2^-65, so Emin = 2^-71: 71 log 2 = 49.213 < FLS_MF_GUMBEL_MAX);
 * the smallest is -log(Emin + E) with both exponentials at their largest
 * (E = 65 log 2 = 45.054, Emin = E / 64): -log(45.758) = -3.8234. */
#define MF_NOISE_MIN -3.824f

static uint64_t mix(uint64_t *s)
{
    return trng_next(s);
}

/* A fixed seed per test, from its name (FNV-1a). */
static uint64_t name_seed(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *name; name++)
        h = (h ^ (uint8_t)*name) * 0x100000001b3ull;
    return h;
}

/* ---- the span and the per-token function ---- */

/* fls_ref_gumbel_span_mf (one group block per group) is fls_gumbel_mf (one
 * group block per token) token by token, bit for bit, for any start and
 * length: unaligned, inside one group, across several, near 2^32. */
Test(min_first, span_equals_per_token)
{
    uint64_t s = 0x6d696e6669727374ull;
    float g[700];
    const int reps = 400 >> sweep_scale_shift();
    for (int r = 0; r < reps; r++) {
        const uint64_t seed = mix(&s), offset = r % 3 ? mix(&s) : (uint64_t)r;
        const uint32_t draw = r % 2 ? (uint32_t)mix(&s) : (uint32_t)(r % 5);
        int64_t n = trng_int(&s, 1, 700);
        uint64_t v0;
        switch (r % 4) {
        case 0: /* inside the first groups, any alignment */
            v0 = (uint64_t)trng_int(&s, 0, 200);
            break;
        case 1: /* starting one before a group boundary */
            v0 = 64 * (uint64_t)trng_int(&s, 1, 1 << 20) - 1;
            break;
        case 2: /* ending at the last token below 2^32 */
            v0 = ((uint64_t)1 << 32) - (uint64_t)n;
            break;
        default:
            v0 = (uint64_t)trng_int(&s, 0, ((int64_t)1 << 32) - 701);
        }
        if (r % 7 == 0)
            n = trng_int(&s, 1, 63); /* short spans: often inside one group */
        fls_ref_gumbel_span_mf(seed, offset, draw, v0, n, g);
        for (int64_t i = 0; i < n; i++) {
            const float t = fls_gumbel_mf(seed, offset, draw, v0 + (uint64_t)i);
            cr_assert_eq(f2u(g[i]), f2u(t),
                         "seed %016llx offset %016llx draw %u: token %llu (span v0 %llu, n %lld, i %lld): "
                         "span %a, per token %a",
                         (unsigned long long)seed, (unsigned long long)offset, draw,
                         (unsigned long long)(v0 + (uint64_t)i), (unsigned long long)v0, (long long)n,
                         (long long)i, (double)g[i], (double)t);
        }
    }
}

/* ---- the group bound, the minimum's token, the range ---- */

Test(min_first, group_bound_and_range)
{
    uint64_t s = 0x626f756e64ull;
    float g[64];
    const int reps = 20000 >> sweep_scale_shift();
    for (int r = 0; r < reps; r++) {
        const uint64_t seed = mix(&s), offset = mix(&s) >> (r % 64);
        const uint32_t draw = (uint32_t)mix(&s);
        const uint64_t grp = mix(&s) % ((uint64_t)1 << 26);
        const fls_mf_group mg = fls_mf_group_of(seed, offset, draw, grp);
        cr_assert(mg.idx < FLS_MF_GROUP);
        cr_assert(isfinite(mg.emin) && mg.emin > 0.0f && isfinite(mg.m));
        cr_assert_eq(f2u(mg.m), f2u(-fls_logf_(mg.emin)));
        fls_ref_gumbel_span_mf(seed, offset, draw, FLS_MF_GROUP * grp, FLS_MF_GROUP, g);
        for (uint32_t i = 0; i < FLS_MF_GROUP; i++) {
            cr_assert(isfinite(g[i]) && g[i] <= mg.m && g[i] <= FLS_MF_GUMBEL_MAX && g[i] >= MF_NOISE_MIN,
                      "seed %016llx group %llu token %u: %a (M %a)", (unsigned long long)seed,
                      (unsigned long long)grp, i, (double)g[i], (double)mg.m);
            if (i == mg.idx)
                cr_assert_eq(f2u(g[i]), f2u(mg.m), "the minimum's token gets exactly M");
        }
    }
    /* the extremes, from the extreme bits: the smallest exponential (all ones)
     * as the group's minimum gives the largest noise; the largest (zero bits)
     * as both the minimum and a token's own gives the smallest */
    const float e_small = fls_exponential_from_bits(~0ull), e_large = fls_exponential_from_bits(0);
    cr_assert_eq(e_small, 0x1p-65f);
    fls_mf_group lo = {e_small * 0x1p-6f, -fls_logf_(e_small * 0x1p-6f), 0};
    cr_assert(lo.m > 49.2f && lo.m <= FLS_MF_GUMBEL_MAX, "largest noise %a", (double)lo.m);
    cr_assert_eq(f2u(fls_mf_noise(&lo, 0, 0)), f2u(lo.m));
    fls_mf_group hi = {e_large * 0x1p-6f, -fls_logf_(e_large * 0x1p-6f), 0};
    const float smallest = fls_mf_noise(&hi, 1, 0);
    cr_assert(isfinite(smallest) && smallest >= MF_NOISE_MIN && smallest < -3.82f, "smallest noise %a (%.6f)",
              (double)smallest, (double)smallest);
    /* a token whose exponential is far below Emin ties M (clamped), never above */
    cr_assert_eq(f2u(fls_mf_noise(&hi, 1, ~0ull)), f2u(hi.m));
}

/* ---- the frozen values ---- */

typedef struct mf_kat {
    const char *file;
    int minima;
} mf_kat;

/* One "mf seed offset draw token bits" record against fls_gumbel_mf and the span. */
static void check_mf(const uint64_t *f, int n, int line, void *arg)
{
    mf_kat *k = arg;
    (void)n;
    cr_assert(f[2] <= UINT32_MAX && f[3] < ((uint64_t)1 << 32) && f[4] <= UINT32_MAX, "%s:%d", k->file, line);
    const float g = fls_gumbel_mf(f[0], f[1], (uint32_t)f[2], f[3]);
    cr_expect_eq(f2u(g), (uint32_t)f[4], "%s:%d: token %llx: G %08x (%.9g), expected %08x (%.9g)", k->file,
                 line, (unsigned long long)f[3], f2u(g), (double)g, (uint32_t)f[4],
                 (double)u2f((uint32_t)f[4]));
    float gs;
    fls_ref_gumbel_span_mf(f[0], f[1], (uint32_t)f[2], f[3], 1, &gs);
    cr_expect_eq(f2u(gs), (uint32_t)f[4], "%s:%d: the span differs", k->file, line);
    const fls_mf_group mg = fls_mf_group_of(f[0], f[1], (uint32_t)f[2], f[3] / FLS_MF_GROUP);
    k->minima += (uint32_t)(f[3] % FLS_MF_GROUP) == mg.idx;
}

/* Every record of tests/kat_min_first.txt (FLS_KAT_MF_PATH overrides it):
 * only "mf" records (hexadecimal; '#' starts a comment). */
Test(min_first, known_answers)
{
    mf_kat k = {kat_path(FLS_KAT_MF_PATH, "FLS_KAT_MF_PATH"), 0};
    const int count = kat_each(FLS_KAT_MF_PATH, "FLS_KAT_MF_PATH", "mf", 5, 1, check_mf, &k);
    cr_assert(count >= 32, "%s: %d records", k.file, count);
    cr_assert(k.minima >= 4, "%s: the minimum's token in %d records", k.file, k.minima);
}

/* ---- the law ---- */

/* Pearson chi-square of counts against expected counts (cells with
 * expectation >= 5 everywhere by construction); its p-value. */
static double chisq_p(const int64_t *obs, const double *expect, int cells, double *chi2)
{
    double c = 0.0;
    for (int k = 0; k < cells; k++) {
        const double d = (double)obs[k] - expect[k];
        c += d * d / expect[k];
    }
    *chi2 = c;
    return gsl_cdf_chisq_Q(c, (double)(cells - 1));
}

#define GUMBEL_BINS 64

/* The standard Gumbel CDF's equal-mass bin of x: exp(-exp(-x)) in [k/K, (k+1)/K). */
static int gumbel_bin(double x, double shift)
{
    const double u = exp(-exp(-(x - shift)));
    const int k = (int)(u * GUMBEL_BINS);
    return k < 0 ? 0 : k >= GUMBEL_BINS ? GUMBEL_BINS - 1 : k;
}

typedef float (*mf_draw_fn)(uint64_t *s, int64_t i);

/* The marginal of n draws against the Gumbel of location `shift` (64
 * equal-mass bins). */
static void check_gumbel(const char *what, mf_draw_fn fn, int64_t n, double shift)
{
    int64_t obs[GUMBEL_BINS] = {0};
    double expect[GUMBEL_BINS];
    uint64_t s = name_seed(what);
    for (int64_t i = 0; i < n; i++)
        obs[gumbel_bin((double)fn(&s, i), shift)]++;
    for (int k = 0; k < GUMBEL_BINS; k++)
        expect[k] = (double)n / GUMBEL_BINS;
    double chi2;
    const double p = chisq_p(obs, expect, GUMBEL_BINS, &chi2);
    printf("min-first %s: n %lld, chi2 %.2f on %d dof, p %.4g (alpha %.3g)\n", what, (long long)n, chi2,
           GUMBEL_BINS - 1, p, MF_ALPHA);
    cr_expect(p >= MF_ALPHA, "%s is not standard Gumbel: chi2 %.2f on %d dof, p %.3g", what, chi2,
              GUMBEL_BINS - 1, p);
}

static float token0_over_seeds(uint64_t *s, int64_t i)
{
    (void)i;
    return fls_gumbel_mf(mix(s), 0, 0, 0);
}

static float token357_over_offsets(uint64_t *s, int64_t i)
{
    (void)s;
    return fls_gumbel_mf(0x0123456789abcdefull, (uint64_t)i * 0x9E3779B97F4A7C15ull, 3, 357);
}

static float token_last_over_draws(uint64_t *s, int64_t i)
{
    (void)s;
    return fls_gumbel_mf(42, 7, (uint32_t)i, ((uint64_t)1 << 32) - 1);
}

static float group_max_over_seeds(uint64_t *s, int64_t i)
{
    return fls_mf_group_of(mix(s), (uint64_t)i, 0, 12345).m;
}

/* Every token's noise is a standard Gumbel (whether or not it holds its
 * group's minimum), over seeds, offsets and draws; the group's largest, M, is
 * the maximum of 64 of them: a Gumbel at log 64. */
Test(min_first, marginals_are_gumbel)
{
    const int64_t n = 200000 >> sweep_scale_shift();
    check_gumbel("token 0 over seeds", token0_over_seeds, n, 0.0);
    check_gumbel("token 357 over offsets", token357_over_offsets, n, 0.0);
    check_gumbel("token 2^32 - 1 over draws", token_last_over_draws, n, 0.0);
    /* a million for M: its location log 64 resolved to ~0.01 (the scale 2^-6 of Emin against 1/63) */
    check_gumbel("M over seeds", group_max_over_seeds, 5 * n, log(64.0));
}

/* Gumbel-max over tokens tok[0..k) of one row with logits l: the argmax of
 * fl(l + G) over n (seed, offset) pairs, against the softmax (chi-square on
 * the k cells). The tokens' noises must be independent standard Gumbels for
 * the softmax to come out, so this tests the joint law inside a group (and
 * across a group boundary). */
static void check_argmax(const char *what, const uint64_t *tok, const float *l, int k, int64_t n)
{
    int64_t obs[64] = {0};
    double expect[64], z = 0.0;
    uint64_t s = name_seed(what);
    cr_assert(k >= 2 && k <= 64);
    for (int j = 0; j < k; j++)
        z += exp((double)l[j]);
    for (int j = 0; j < k; j++)
        expect[j] = (double)n * exp((double)l[j]) / z;
    for (int64_t i = 0; i < n; i++) {
        const uint64_t seed = mix(&s), offset = (uint64_t)i;
        int best = 0;
        float best_key = -INFINITY;
        for (int j = 0; j < k; j++) {
            const float key = l[j] + fls_gumbel_mf(seed, offset, 0, tok[j]);
            if (key > best_key) {
                best = j;
                best_key = key;
            }
        }
        obs[best]++;
    }
    double chi2;
    const double p = chisq_p(obs, expect, k, &chi2);
    printf("min-first argmax %s: n %lld, chi2 %.2f on %d dof, p %.4g (alpha %.3g)\n", what, (long long)n,
           chi2, k - 1, p, MF_ALPHA);
    cr_expect(p >= MF_ALPHA, "argmax %s is not the softmax: chi2 %.2f on %d dof, p %.3g", what, chi2, k - 1,
              p);
}

Test(min_first, argmax_is_softmax)
{
    const int64_t n = 200000 >> sweep_scale_shift();
    const float log3 = (float)log(3.0);
    /* two tokens of one group, logits (0, log 3): 1/4 : 3/4 */
    const uint64_t pair_a[2] = {0, 1}, pair_b[2] = {64 * 777 + 5, 64 * 777 + 40}, pair_c[2] = {63, 64};
    const float l2[2] = {0.0f, log3};
    check_argmax("(0, log 3) tokens 0, 1", pair_a, l2, 2, n);
    check_argmax("(0, log 3) tokens 5, 40 of group 777", pair_b, l2, 2, n);
    check_argmax("(0, log 3) tokens 63, 64 (two groups)", pair_c, l2, 2, n);
    /* a whole group of equal logits: uniform over the 64 positions */
    uint64_t grp[64];
    float flat[64], ranked[64];
    for (int j = 0; j < 64; j++) {
        grp[j] = 64 * 31 + (uint64_t)j;
        flat[j] = 0.0f;
        ranked[j] = (float)log((double)(j + 1));
    }
    check_argmax("64 equal logits of group 31", grp, flat, 64, 64 * 4000 >> sweep_scale_shift());
    /* and logits log(1 .. 64): p_j = (j + 1) / 2080, the minimum's token anywhere */
    check_argmax("logits log(1..64) of group 31", grp, ranked, 64, 400000 >> sweep_scale_shift());
    /* eight tokens spread over one group, logits log(1 .. 8) */
    uint64_t eight[8];
    for (int j = 0; j < 8; j++)
        eight[j] = 64 * 5 + 9 * (uint64_t)j;
    check_argmax("logits log(1..8) of tokens 320, 329, .., 383", eight, ranked, 8, n);
}

/* ---- the API ---- */

static void mf_params(fls_params *p)
{
    fls_params_default(p);
    p->noise = FLS_NOISE_MIN_FIRST;
    p->seed = 99;
}

/* A refused call: its status, and fls_params_explain naming "noise". */
static void expect_refused(fls_context_t *ctx, const fls_matrix *L, const fls_params *p, fls_status want,
                           const char *what)
{
    int64_t tok[64];
    fls_outputs out = {tok, NULL, NULL};
    cr_assert(L->rows * p->draws * (p->without_replacement_k ? p->without_replacement_k : 1) <= 64);
    fls_status st = fls_sample_logits(ctx, L, p, &out);
    cr_expect_eq(st, want, "%s: %s, expected %s", what, fls_status_string(st), fls_status_string(want));
    char msg[256];
    st = fls_params_explain(p, L->rows, L->cols, msg, sizeof msg);
    cr_expect_eq(st, want, "%s: fls_params_explain %s", what, fls_status_string(st));
    cr_expect(strstr(msg, "noise") != NULL, "%s: the explanation names no noise: '%s'", what, msg);
}

Test(min_first, refusals)
{
    const int64_t B = 2, V = 100;
    float *l = random_floats(B * V, 5);
    tmat L = tmat_make(FLS_DTYPE_F32, B, V, V, l);
    fls_context_t *ctx = ctx_make(1, FLS_SIMD_AUTO, 0);
    fls_params p;
    /* the grouped method and the multinomial baseline have noise of their own */
    mf_params(&p);
    p.method = FLS_METHOD_GROUPED;
    expect_refused(ctx, &L.m, &p, FLS_ERR_UNSUPPORTED, "GROUPED");
    p.method = FLS_METHOD_UNFUSED_MULTINOMIAL;
    expect_refused(ctx, &L.m, &p, FLS_ERR_UNSUPPORTED, "UNFUSED_MULTINOMIAL");
    /* no rule */
    mf_params(&p);
    p.top_k = 5;
    expect_refused(ctx, &L.m, &p, FLS_ERR_UNSUPPORTED, "top_k");
    mf_params(&p);
    p.top_p = 0.9f;
    expect_refused(ctx, &L.m, &p, FLS_ERR_UNSUPPORTED, "top_p");
    mf_params(&p);
    p.min_p = 0.1f;
    expect_refused(ctx, &L.m, &p, FLS_ERR_UNSUPPORTED, "min_p");
    mf_params(&p);
    p.filter = "top-nsigma";
    p.filter_value = 1.0;
    expect_refused(ctx, &L.m, &p, FLS_ERR_UNSUPPORTED, "filter");
    mf_params(&p);
    p.without_replacement_k = 2;
    expect_refused(ctx, &L.m, &p, FLS_ERR_UNSUPPORTED, "without_replacement_k");
    /* no fls_noise */
    mf_params(&p);
    p.noise = (fls_noise)7;
    expect_refused(ctx, &L.m, &p, FLS_ERR_PARAM, "noise = 7");
    p.noise = (fls_noise)-1;
    expect_refused(ctx, &L.m, &p, FLS_ERR_PARAM, "noise = -1");
    /* V <= 2^32 (explained without a matrix that large) */
    mf_params(&p);
    char msg[256];
    cr_expect_eq(fls_params_explain(&p, 1, ((int64_t)1 << 32) + 1, msg, sizeof msg), FLS_ERR_SIZE);
    cr_expect(strstr(msg, "noise") != NULL, "'%s'", msg);
    cr_expect_eq(fls_params_explain(&p, 1, (int64_t)1 << 32, msg, sizeof msg), FLS_OK, "'%s'", msg);
    /* the flat methods take it */
    p.method = FLS_METHOD_UNFUSED_GUMBEL;
    cr_expect_eq(fls_params_explain(&p, B, V, msg, sizeof msg), FLS_OK, "'%s'", msg);
    /* not in streams */
    mf_params(&p);
    fls_stream_t *stream = NULL;
    cr_expect_eq(fls_stream_create(&stream, ctx, B, V, &p), FLS_ERR_UNSUPPORTED);
    cr_expect_null(stream);
    p.noise = FLS_NOISE_PER_TOKEN;
    cr_assert_eq(fls_stream_create(&stream, ctx, B, V, &p), FLS_OK);
    fls_stream_destroy(stream);
    /* the default is the per-token scheme */
    fls_params_default(&p);
    cr_expect_eq(p.noise, FLS_NOISE_PER_TOKEN);
    fls_context_destroy(ctx);
    tmat_free(&L);
    free(l);
}

/* Reference tokens under the min-first scheme: argmax fl(l / T + G_mf)
 * (lowest index on equal keys; T = 0: the argmax of l). */
static int64_t ref_token_mf(const float *l, int64_t V, float T, uint64_t seed, uint64_t offset, uint32_t draw)
{
    int64_t best = -1;
    float best_key = -INFINITY;
    for (int64_t v = 0; v < V; v++) {
        if (l[v] == -INFINITY)
            continue;
        const float key = T == 0.0f ? l[v] : l[v] / T + fls_gumbel_mf(seed, offset, draw, (uint64_t)v);
        if (best < 0 || key > best_key) {
            best = v;
            best_key = key;
        }
    }
    return best;
}

/* Both paths (fused, logits) and both flat methods (FUSED, UNFUSED_GUMBEL),
 * any tile size and thread count, give the reference min-first tokens of the
 * same (exact) logits; they differ from the per-token scheme's for some
 * seeds. V = 5 (one group, most of it past V), 64, 1000 (not a multiple of
 * 64); T a power of two or 0 (fl(l / T) is then the engine's key). */
Test(min_first, tokens_fused_logits_and_reference)
{
    const int64_t B = 4, D = 24, draws = 6;
    const int64_t Vs[] = {5, 64, 1000};
    const int64_t tiles[] = {0, 48, 100};
    float T[4] = {1.0f, 0.5f, 0.0f, 2.0f};
    uint64_t seeds[4] = {1, 0xfedcba9876543210ull, 77, 1ull << 63}, offs[4] = {0, 3, 1ull << 40, 9};
    int64_t differ = 0, total = 0;
    for (size_t iv = 0; iv < sizeof Vs / sizeof Vs[0]; iv++) {
        const int64_t V = Vs[iv];
        float *w = exact_w(V, D, 31 + (uint64_t)V), *h = exact_h(B, D, 32 + (uint64_t)V);
        float *l = exact_logits(w, h, V, B, D);
        tmat W = tmat_make(FLS_DTYPE_F32, V, D, D, w), H = tmat_make(FLS_DTYPE_F32, B, D, D, h),
             L = tmat_make(FLS_DTYPE_F32, B, V, V, l);
        tout o = tout_make(B, draws, 0), pt = tout_make(B, draws, 0);
        for (size_t it = 0; it < sizeof tiles / sizeof tiles[0]; it++) {
            fls_context_t *ctx = ctx_make(it == 1 ? 1 : 2, FLS_SIMD_AUTO, tiles[it]);
            fls_params p;
            fls_params_default(&p);
            p.noise = FLS_NOISE_MIN_FIRST;
            p.draws = draws;
            p.temperature = T;
            p.row_seeds = seeds;
            p.row_offsets = offs;
            for (int path = 0; path < 3; path++) { /* fused, logits, unfused Gumbel */
                p.method = path == 2 ? FLS_METHOD_UNFUSED_GUMBEL : FLS_METHOD_FUSED;
                tout_guard(&o);
                const fls_status st = path == 1 ? fls_sample_logits(ctx, &L.m, &p, &o.out)
                                                : fls_sample_fused(ctx, &W.m, &H.m, &p, &o.out);
                cr_assert_eq(st, FLS_OK, "V %lld path %d: %s", (long long)V, path, fls_status_string(st));
                for (int64_t b = 0; b < B; b++)
                    for (int64_t d = 0; d < draws; d++) {
                        const int64_t want = ref_token_mf(l + b * V, V, T[b], seeds[b], offs[b], (uint32_t)d);
                        cr_assert_eq(
                            o.tokens[b * draws + d], want,
                            "V %lld tile %lld path %d row %lld draw %lld: token %lld, reference %lld",
                            (long long)V, (long long)tiles[it], path, (long long)b, (long long)d,
                            (long long)o.tokens[b * draws + d], (long long)want);
                    }
            }
            if (it == 0) { /* the per-token scheme on the same call */
                p.noise = FLS_NOISE_PER_TOKEN;
                p.method = FLS_METHOD_FUSED;
                tout_guard(&pt);
                cr_assert_eq(fls_sample_logits(ctx, &L.m, &p, &pt.out), FLS_OK);
                for (int64_t i = 0; i < B * draws; i++) {
                    if (T[i / draws] == 0.0f) /* greedy: no noise, the same token */
                        cr_expect_eq(pt.tokens[i], o.tokens[i]);
                    else {
                        differ += pt.tokens[i] != o.tokens[i];
                        total++;
                    }
                }
            }
            fls_context_destroy(ctx);
        }
        tout_free(&o);
        tout_free(&pt);
        tmat_free(&W);
        tmat_free(&H);
        tmat_free(&L);
        free(w);
        free(h);
        free(l);
    }
    printf("min-first vs per-token: %lld of %lld sampled tokens differ\n", (long long)differ,
           (long long)total);
    cr_expect(differ > 0, "the min-first scheme gave the per-token tokens for every seed");
}
