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
