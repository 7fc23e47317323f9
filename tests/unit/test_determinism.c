/*
 * Bits that must not depend on the thread count or on the run: logsumexp and
 * logprobs (merged in tile order), and the error status of a batch with
 * several bad rows (reported in a fixed priority: NaN, temperature, masked).
 */
#include "flashsample.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static fls_context_t *ctx_threads(int threads, int64_t tile_v)
{
    fls_context_config c;
    fls_context_config_default(&c);
    c.threads = threads;
    c.tile_v = tile_v;
    fls_context_t *ctx = NULL;
    cr_assert_eq(fls_context_create(&ctx, &c), FLS_OK);
    return ctx;
}

Test(determinism, logsumexp_and_logprobs_do_not_depend_on_threads)
{
    /* one dominant logit per row: logprob = scaled - lse cancels, exposing the
     * last bits of the double accumulation order */
    const int64_t B = 4, V = 200000, draws = 3;
    float *L = malloc((size_t)(B * V) * sizeof(float));
    cr_assert_not_null(L);
    for (int64_t i = 0; i < B * V; i++)
        L[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
    for (int64_t b = 0; b < B; b++)
        L[b * V + 7 + b] = 40.0f;
    fls_matrix M = {L, FLS_DTYPE_F32, B, V, V};
    fls_params p;
    fls_params_default(&p);
    p.draws = draws;
    p.seed = 99;
    int64_t tok0[12], tok[12];
    float lse0[4], lp0[12], lse[4], lp[12];
    for (int64_t tile = 0; tile <= 64; tile += 64) { /* the default tile and 64 */
        for (int threads = 1; threads <= 5; threads++)
            for (int rep = 0; rep < 2; rep++) {
                fls_context_t *ctx = ctx_threads(threads, tile);
                fls_outputs o = {threads == 1 && rep == 0 ? tok0 : tok, threads == 1 && rep == 0 ? lse0 : lse,
                                 threads == 1 && rep == 0 ? lp0 : lp};
                cr_assert_eq(fls_sample_logits(ctx, &M, &p, &o), FLS_OK);
                fls_context_destroy(ctx);
                if (threads == 1 && rep == 0)
                    continue;
                cr_expect_eq(memcmp(tok, tok0, sizeof tok), 0, "tokens, tile %lld threads %d",
                             (long long)tile, threads);
                cr_expect_eq(memcmp(lse, lse0, sizeof lse), 0, "logsumexp bits, tile %lld threads %d",
                             (long long)tile, threads);
                cr_expect_eq(memcmp(lp, lp0, sizeof lp), 0, "logprob bits, tile %lld threads %d",
                             (long long)tile, threads);
            }
    }
    free(L);
}

Test(determinism, error_status_does_not_depend_on_threads)
{
    /* row 0 all -inf (masked), row 1 holds a NaN: every method, every thread
     * count reports the NaN */
    const int64_t B = 2, V = 300;
    float L[2 * 300];
    for (int64_t v = 0; v < V; v++) {
        L[v] = -INFINITY;
        L[V + v] = (float)v / 100.0f;
    }
    L[V + 250] = NAN;
    fls_matrix M = {L, FLS_DTYPE_F32, B, V, V};
    for (int method = FLS_METHOD_FUSED; method <= FLS_METHOD_UNFUSED_MULTINOMIAL; method++)
        for (int threads = 1; threads <= 3; threads++) {
            fls_context_t *ctx = ctx_threads(threads, 2);
            fls_params p;
            fls_params_default(&p);
            p.method = (fls_method)method;
            int64_t tok[2] = {-77, -77};
            fls_outputs o = {tok, NULL, NULL};
            cr_expect_eq(fls_sample_logits(ctx, &M, &p, &o), FLS_ERR_NAN, "method %d threads %d", method,
                         threads);
            cr_expect(tok[0] == -77 && tok[1] == -77, "outputs written on error");
            fls_context_destroy(ctx);
        }
}

/* A run of draws split into calls of consecutive draw ranges (first_draw)
 * gives the tokens of one call, on the fused and the from-logits paths and
 * the unfused baselines. */
Test(determinism, first_draw_splits_a_run)
{
    const int64_t B = 3, V = 5000, D = 16, draws = 7;
    float *W = malloc((size_t)(V * D) * sizeof(float)), *H = malloc((size_t)(B * D) * sizeof(float));
    float *L = malloc((size_t)(B * V) * sizeof(float));
    cr_assert(W && H && L);
    for (int64_t i = 0; i < V * D; i++)
        W[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    for (int64_t i = 0; i < B * D; i++)
        H[i] = (float)((i * 40503u) % 101) / 50.0f - 1.0f;
    for (int64_t i = 0; i < B * V; i++)
        L[i] = (float)((i * 2246822519u) % 3001) / 1000.0f;
    fls_matrix Wm = {W, FLS_DTYPE_F32, V, D, D}, Hm = {H, FLS_DTYPE_F32, B, D, D},
               Lm = {L, FLS_DTYPE_F32, B, V, V};
    fls_context_t *ctx = ctx_threads(2, 0);
    const fls_method methods[3] = {FLS_METHOD_FUSED, FLS_METHOD_UNFUSED_GUMBEL,
                                   FLS_METHOD_UNFUSED_MULTINOMIAL};
    for (int mi = 0; mi < 3; mi++)
        for (int fused = 0; fused < 2; fused++) {
            fls_params p;
            fls_params_default(&p);
            p.method = methods[mi];
            p.seed = 5;
            p.temperature_value = 0.8f;
            p.draws = draws;
            int64_t all[3 * 7], part[3 * 7];
            fls_outputs o = {all, NULL, NULL};
            cr_assert_eq(fused ? fls_sample_fused(ctx, &Wm, &Hm, &p, &o)
                               : fls_sample_logits(ctx, &Lm, &p, &o),
                         FLS_OK);
            for (int64_t d0 = 0; d0 < draws;) {
                const int64_t n = d0 == 0 ? 3 : draws - d0; /* draws 0-2, then 3-6 */
                p.first_draw = d0;
                p.draws = n;
                o.tokens = part;
                cr_assert_eq(fused ? fls_sample_fused(ctx, &Wm, &Hm, &p, &o)
                                   : fls_sample_logits(ctx, &Lm, &p, &o),
                             FLS_OK);
                for (int64_t b = 0; b < B; b++)
                    for (int64_t j = 0; j < n; j++)
                        cr_assert_eq(part[b * n + j], all[b * draws + d0 + j],
                                     "method %d fused %d row %lld draw %lld", mi, fused, (long long)b,
                                     (long long)(d0 + j));
                d0 += n;
            }
        }
    fls_context_destroy(ctx);
    free(W);
    free(H);
    free(L);
}
