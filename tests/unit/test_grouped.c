/*
 * test_grouped.c — the grouped method (Group-Gumbel-Max) against a brute
 * force written here from its definition (docs/GROUPED.md): every group's
 * log-mass in long double, the group by L_k + G'_k, the token by the flat
 * contract's noise inside it. Token for token on the fused and from-logits
 * paths, every tiling and thread count, group sizes 2..1024, V not a
 * multiple of g, masked tokens and fully masked groups, greedy rows,
 * several draws; logsumexp and logprobs; bad group sizes are errors.
 */
#include "tests/unit/common.h"
#include "lib/base/fls_noise.h"
#include "variants/grouped.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t bf_grouped(const float *l, int64_t V, float T, int64_t g, uint64_t seed, uint64_t off,
                          uint32_t d)
{
    const uint64_t gk = fls_group_key(seed);
    int64_t best_k = -1;
    double best = -INFINITY;
    for (int64_t k = 0; k * g < V; k++) {
        const int64_t n = V - k * g < g ? V - k * g : g;
        long double m = -INFINITY, s = 0;
        for (int64_t i = 0; i < n; i++) {
            const float x = T == 0.0f ? l[k * g + i] : l[k * g + i] / T;
            m = x > m ? x : m;
        }
        if (m == -INFINITY)
            continue;
        for (int64_t i = 0; i < n; i++)
            s += expl((long double)(T == 0.0f ? l[k * g + i] : l[k * g + i] / T) - m);
        const double L = T == 0.0f ? (double)m : (double)(m + logl(s));
        const double key = T == 0.0f ? L : L + (double)fls_group_gumbel(gk, off, d, (uint64_t)k);
        if (key > best) {
            best = key;
            best_k = k;
        }
    }
    if (best_k < 0)
        return -1;
    const int64_t n = V - best_k * g < g ? V - best_k * g : g;
    int64_t tok = -1;
    float bk = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        const int64_t v = best_k * g + i;
        const float x = T == 0.0f ? l[v] : l[v] / T;
        const float key = T == 0.0f ? x : x + fls_gumbel(seed, off, d, (uint64_t)v);
        if (key > bk) {
            bk = key;
            tok = v;
        }
    }
    return tok;
}

static void check(const float *l, int64_t B, int64_t V, int64_t g, const float *temps, fls_context_t *ctx,
                  int fused)
{
    const int64_t draws = 3;
    int64_t tok[64 * 3];
    float lse[64], lp[64 * 3];
    fls_params p;
    fls_params_default(&p);
    p.method = FLS_METHOD_GROUPED;
    p.group_size = g;
    p.draws = draws;
    p.seed = 31;
    p.offset = 4;
    p.temperature = temps;
    fls_outputs o = {tok, lse, lp};
    if (fused) {
        for (int64_t b = 0; b < B; b++) {
            float one = 1.0f;
            fls_matrix W = {l + b * V, FLS_DTYPE_F32, V, 1, 1}, H = {&one, FLS_DTYPE_F32, 1, 1, 1};
            uint64_t seed = fls_row_seed(31, (uint64_t)b);
            fls_params pb = p;
            pb.temperature = NULL;
            pb.temperature_value = temps[b];
            pb.row_seeds = &seed;
            fls_outputs ob = {tok + b * draws, lse + b, lp + b * draws};
            cr_assert_eq(fls_sample_fused(ctx, &W, &H, &pb, &ob), FLS_OK);
        }
    } else {
        fls_matrix L = {l, FLS_DTYPE_F32, B, V, V};
        cr_assert_eq(fls_sample_logits(ctx, &L, &p, &o), FLS_OK);
    }
    for (int64_t b = 0; b < B; b++) {
        long double m = -INFINITY, s = 0;
        for (int64_t v = 0; v < V; v++) {
            const float x = temps[b] == 0.0f ? l[b * V + v] : l[b * V + v] / temps[b];
            m = x > m ? x : m;
        }
        for (int64_t v = 0; v < V; v++)
            s += expl((long double)(temps[b] == 0.0f ? l[b * V + v] : l[b * V + v] / temps[b]) - m);
        const double want_lse = temps[b] == 0.0f ? (double)m : (double)(m + logl(s));
        cr_assert(fabs(lse[b] - want_lse) < 1e-5 * (1 + fabs(want_lse)), "lse row %lld", (long long)b);
        for (int64_t d = 0; d < draws; d++) {
            const int64_t want =
                bf_grouped(l + b * V, V, temps[b], g, fls_row_seed(31, (uint64_t)b), 4, (uint32_t)d);
            cr_assert_eq(tok[b * draws + d], want,
                         "g %lld V %lld row %lld draw %lld T %g (fused %d): %lld, want %lld", (long long)g,
                         (long long)V, (long long)b, (long long)d, (double)temps[b], fused,
                         (long long)tok[b * draws + d], (long long)want);
            const float x = temps[b] == 0.0f ? l[b * V + want] : l[b * V + want] / temps[b];
            cr_assert(fabs(lp[b * draws + d] - (temps[b] == 0.0f ? 0.0 : x - want_lse)) < 1e-4, "logprob");
        }
    }
}

Test(grouped, brute_force, .timeout = 120)
{
    uint64_t rng = 5;
    const int64_t gs[] = {2, 32, 128, 1024};
    const int64_t Vs[] = {1, 3, 1000, 5001};
    const float temps[4] = {1.0f, 0.7f, 0.0f, 2.5f};
    for (int gi = 0; gi < 4; gi++)
        for (int vi = 0; vi < 4; vi++) {
            const int64_t B = 4, V = Vs[vi];
            float *l = malloc((size_t)(B * V) * sizeof(float));
            for (int64_t i = 0; i < B * V; i++)
                l[i] = trng_int(&rng, 0, 7) == 0 ? -INFINITY : (trng_float(&rng) - 0.5f) * 6.0f;
            /* a fully masked group, a finite token per row */
            for (int64_t v = 0; v < V && v < gs[gi]; v++)
                l[1 * V + v] = -INFINITY;
            for (int64_t b = 0; b < B; b++)
                l[b * V + V - 1] = 0.5f;
            for (int cfg = 0; cfg < 3; cfg++) {
                fls_context_t *ctx = ctx_make(cfg == 0 ? 1 : 2, FLS_SIMD_AUTO, cfg == 2 ? 48 : 0);
                check(l, B, V, gs[gi], temps, ctx, 0);
                if (V <= 1000)
                    check(l, B, V, gs[gi], temps, ctx, 1);
                fls_context_destroy(ctx);
            }
            free(l);
        }
}

/* A group whose head is 25 nats above its other members: L_k in double
 * keeps their mass (the brute force uses long double; fp32 would lose it). */
Test(grouped, heavy_tail_inside_a_group)
{
    enum { V = 256 };
    float l[V];
    for (int v = 0; v < V; v++)
        l[v] = v == 3 ? 25.0f : 0.0f;
    const float t[1] = {1.0f};
    fls_context_t *ctx = ctx_make(1, FLS_SIMD_AUTO, 0);
    check(l, 1, V, 128, t, ctx, 0);
    fls_context_destroy(ctx);
}

Test(grouped, bad_group_size)
{
    float l[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    int64_t tok = 42;
    fls_context_t *ctx = ctx_make(1, FLS_SIMD_AUTO, 0);
    const int64_t bad[] = {-2, 1, 3, 100, (int64_t)1 << 21};
    for (int i = 0; i < 5; i++) {
        fls_params p;
        fls_params_default(&p);
        p.method = FLS_METHOD_GROUPED;
        p.group_size = bad[i];
        fls_matrix L = {l, FLS_DTYPE_F32, 1, 8, 8};
        fls_outputs o = {&tok, NULL, NULL};
        cr_assert_eq(fls_sample_logits(ctx, &L, &p, &o), FLS_ERR_PARAM, "group size %lld", (long long)bad[i]);
        cr_assert_eq(tok, 42);
    }
    fls_params p;
    fls_params_default(&p);
    p.method = FLS_METHOD_GROUPED;
    p.top_k = 3;
    fls_matrix L = {l, FLS_DTYPE_F32, 1, 8, 8};
    fls_outputs o = {&tok, NULL, NULL};
    cr_assert_eq(fls_sample_logits(ctx, &L, &p, &o), FLS_ERR_UNSUPPORTED, "filters with the grouped method");
    fls_context_destroy(ctx);
}

/* The group log-mass itself (variants/grouped.h): a head 20 nats above 1023
 * members, whose total mass (1023 e^-20 = 2.1e-6 of the head's) fp32 would
 * absorb; double keeps it to 1e-15. A fp32 sum fails this test. */
Test(grouped, group_lse_keeps_a_deep_tail)
{
    float x[1024];
    for (int i = 0; i < 1024; i++)
        x[i] = i == 0 ? 20.0f : 0.0f;
    const long double want = 20.0L + log1pl(1023.0L * expl(-20.0L));
    const double got = fls_group_lse(x, 1024, 0);
    cr_assert(fabsl((long double)got - want) < 1e-13L, "L = %.17g, want %.17Lg", got, want);
    cr_assert(got > 20.0 + 2e-6, "the tail's mass is in L");
    cr_assert_eq(fls_group_lse(x, 1024, 1), 20.0, "greedy: the max");
}
