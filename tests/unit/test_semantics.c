/*
 * test_semantics.c — what a token means: greedy is the exact argmax (lowest
 * index on ties), masked (-inf) tokens are never drawn, NaN and all-masked
 * rows are errors that write nothing, per-row temperatures, the multinomial
 * baseline's tokens are valid, and awkward shapes match the reference.
 *
 * Fused inputs with chosen logits use D = 1 and H = 1: the logit of token v
 * is then W[v] exactly (fma(w, 1, 0) = w, the other lanes add zeros), so
 * ties and -inf masks can be placed in the fused path too.
 */
#include "tests/unit/common.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const fls_method METHODS[] = {FLS_METHOD_FUSED, FLS_METHOD_UNFUSED_GUMBEL,
                                     FLS_METHOD_UNFUSED_MULTINOMIAL};
static const char *const METHOD_NAMES[] = {"fused", "unfused-gumbel", "unfused-multinomial"};

/* Samples logits l (B, V) through the fused path (D = 1 trick, W in dtype
 * wd) when fused is set, else through fls_sample_logits (L in dtype wd). */
static fls_status sample_chosen(fls_context_t *ctx, int fused, fls_dtype wd, const float *l, int64_t B,
                                int64_t V, const fls_params *p, tout *o)
{
    fls_status st;
    tout_guard(o);
    if (fused) {
        /* a separate (V, 1) W per row is not possible in one call: sample
         * row by row, each with its own seed, and stage into o */
        float one = 1.0f;
        tmat Hm = tmat_make(FLS_DTYPE_F32, 1, 1, 1, &one);
        tout r = tout_make(1, o->draws, o->logsumexp != NULL);
        st = FLS_OK;
        for (int64_t b = 0; b < B && st == FLS_OK; b++) {
            tmat Wm = tmat_make(wd, V, 1, 1, l + b * V);
            fls_params pb = *p;
            float T = p->temperature ? p->temperature[b] : p->temperature_value;
            uint64_t seed = p->row_seeds ? p->row_seeds[b] : fls_row_seed(p->seed, (uint64_t)b);
            uint64_t off = p->row_offsets ? p->row_offsets[b] : p->offset;
            pb.temperature = NULL;
            pb.temperature_value = T;
            pb.row_seeds = &seed;
            pb.row_offsets = &off;
            tout_guard(&r);
            st = fls_sample_fused(ctx, &Wm.m, &Hm.m, &pb, &r.out);
            if (st == FLS_OK) {
                memcpy(o->tokens + b * o->draws, r.tokens, (size_t)o->draws * sizeof(int64_t));
                if (o->logsumexp) {
                    o->logsumexp[b] = r.logsumexp[0];
                    memcpy(o->logprobs + b * o->draws, r.logprobs, (size_t)o->draws * sizeof(float));
                }
            } else {
                cr_assert(tout_untouched(&r), "fused row %lld: outputs written on error %s", (long long)b,
                          fls_status_string(st));
            }
            tmat_free(&Wm);
        }
        tout_free(&r);
        tmat_free(&Hm);
    } else {
        tmat Lm = tmat_make(wd, B, V, V + 1, l);
        st = fls_sample_logits(ctx, &Lm.m, p, &o->out);
        tmat_free(&Lm);
    }
    return st;
}

/* ---- greedy ---- */

Test(semantics, greedy_exact_argmax_lowest_index_on_ties)
{
    const int64_t V = 1001;
    float *l = malloc((size_t)V * sizeof *l);
    uint64_t s = 1;
    for (int64_t v = 0; v < V; v++)
        l[v] = (float)trng_int(&s, -1000, 1000) / 64.0f; /* < 20: no value reaches the ties below */
    /* ties at the maximum, spread over tiles and threads */
    l[999] = 30.0f, l[500] = 30.0f, l[37] = 30.0f, l[38] = 30.0f;
    /* a value just below the maximum, earlier in the vocabulary */
    l[3] = nextafterf(30.0f, 0.0f);
    const int64_t tiles[] = {2, 6, 64, 0};
    for (size_t ti = 0; ti < 4; ti++)
        for (int threads = 1; threads <= 3; threads += 2) {
            fls_context_t *ctx = ctx_make(threads, FLS_SIMD_AUTO, tiles[ti]);
            for (int fused = 0; fused < 2; fused++)
                for (int m = 0; m < 3; m++) {
                    fls_params p;
                    fls_params_default(&p);
                    p.method = METHODS[m];
                    p.temperature_value = 0.0f;
                    p.draws = 3;
                    p.seed = (uint64_t)ti;
                    tout o = tout_make(1, 3, 1);
                    fls_status st = sample_chosen(ctx, fused, FLS_DTYPE_F32, l, 1, V, &p, &o);
                    cr_assert_eq(st, FLS_OK, "%s", fls_status_string(st));
                    for (int d = 0; d < 3; d++)
                        cr_assert_eq(o.tokens[d], 37,
                                     "%s %s tile %lld threads %d: greedy token %lld, want 37",
                                     fused ? "fused" : "logits", METHOD_NAMES[m], (long long)tiles[ti],
                                     threads, (long long)o.tokens[d]);
                    cr_assert_eq(o.logsumexp[0], 30.0f, "greedy logsumexp is max l");
                    cr_assert_eq(o.logprobs[0], 0.0f);
                    tout_free(&o);
                }
            fls_context_destroy(ctx);
        }
    free(l);
}

/* Greedy on all-equal logits and on -inf-masked ones: the lowest unmasked index. */
Test(semantics, greedy_flat_and_masked)
{
    const int64_t V = 130;
    float l[130];
    fls_context_t *ctx = ctx_make(3, FLS_SIMD_AUTO, 4);
    for (int v = 0; v < V; v++)
        l[v] = v < 67 ? -INFINITY : -2.5f;
    for (int fused = 0; fused < 2; fused++)
        for (int m = 0; m < 3; m++) {
            fls_params p;
            fls_params_default(&p);
            p.method = METHODS[m];
            p.temperature_value = 0.0f;
            tout o = tout_make(1, 1, 1);
            cr_assert_eq(sample_chosen(ctx, fused, FLS_DTYPE_BF16, l, 1, V, &p, &o), FLS_OK);
            cr_assert_eq(o.tokens[0], 67, "%s: token %lld", METHOD_NAMES[m], (long long)o.tokens[0]);
            tout_free(&o);
        }
    fls_context_destroy(ctx);
}

/* ---- masking ---- */

/* Half the tokens masked, the masked ones carrying the largest logits they
 * would have had; many seeds and draws: no masked token is ever returned. */
Test(semantics, masked_never_drawn)
{
    const int64_t V = 300, B = 16, draws = 16;
    float *l = malloc((size_t)(B * V) * sizeof *l);
    uint64_t s = 2;
    for (int64_t i = 0; i < B * V; i++)
        l[i] = trng_int(&s, 0, 1) ? -INFINITY : (float)trng_int(&s, -64, 64) / 16.0f;
    for (int64_t b = 0; b < B; b++)
        l[b * V + V - 1] = -INFINITY; /* the last token too (a partial tile) */
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 6);
    for (int fused = 0; fused < 2; fused++)
        for (int m = 0; m < 3; m++)
            for (int ti = 0; ti < 3; ti++) {
                const float temps[] = {1.0f, 8.0f, 0.01f};
                fls_params p;
                fls_params_default(&p);
                p.method = METHODS[m];
                p.temperature_value = temps[ti];
                p.draws = draws;
                p.seed = 100 + (uint64_t)ti;
                tout o = tout_make(B, draws, 1);
                cr_assert_eq(sample_chosen(ctx, fused, FLS_DTYPE_F16, l, B, V, &p, &o), FLS_OK);
                for (int64_t b = 0; b < B; b++)
                    for (int64_t d = 0; d < draws; d++) {
                        int64_t t = o.tokens[b * draws + d];
                        cr_assert(t >= 0 && t < V);
                        cr_assert(l[b * V + t] != -INFINITY, "%s %s T %g: row %lld drew masked token %lld",
                                  fused ? "fused" : "logits", METHOD_NAMES[m], (double)temps[ti],
                                  (long long)b, (long long)t);
                    }
                tout_free(&o);
            }
    fls_context_destroy(ctx);
    free(l);
}

/* One token left: always it, however unlikely its logit and whatever T. */
Test(semantics, single_unmasked_token)
{
    const int64_t V = 97;
    float l[97];
    const int64_t where[] = {0, 50, 96};
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 8);
    for (int wi = 0; wi < 3; wi++) {
        for (int v = 0; v < V; v++)
            l[v] = -INFINITY;
        /* far below zero, yet inside the key resolution at T = 1e-3
         * (|l / T| < 2^12; key_resolution_refused tests beyond) */
        l[where[wi]] = -4.0f;
        for (int fused = 0; fused < 2; fused++)
            for (int m = 0; m < 3; m++) {
                const float temps[] = {0.0f, 1.0f, 1e-3f};
                for (int ti = 0; ti < 3; ti++) {
                    fls_params p;
                    fls_params_default(&p);
                    p.method = METHODS[m];
                    p.temperature_value = temps[ti];
                    p.draws = 5;
                    tout o = tout_make(1, 5, 1);
                    fls_status st = sample_chosen(ctx, fused, FLS_DTYPE_F32, l, 1, V, &p, &o);
                    cr_assert_eq(st, FLS_OK, "%s T %g: %s", METHOD_NAMES[m], (double)temps[ti],
                                 fls_status_string(st));
                    for (int d = 0; d < 5; d++) {
                        cr_assert_eq(o.tokens[d], where[wi], "%s %s T %g: token %lld, want %lld",
                                     fused ? "fused" : "logits", METHOD_NAMES[m], (double)temps[ti],
                                     (long long)o.tokens[d], (long long)where[wi]);
                        cr_assert(fabsf(o.logprobs[d]) <= 1e-6f,
                                  "a certain token has log-probability 0, got %g", (double)o.logprobs[d]);
                    }
                    tout_free(&o);
                }
            }
    }
    fls_context_destroy(ctx);
}

/* A row whose every logit is -inf: FLS_ERR_ALL_MASKED, nothing written
 * (also for the other rows). */
Test(semantics, all_masked_row_is_error)
{
    const int64_t V = 70, B = 3;
    float l[3 * 70];
    for (int i = 0; i < B * V; i++)
        l[i] = (float)(i % 7) - 3.0f;
    for (int v = 0; v < V; v++)
        l[1 * V + v] = -INFINITY;
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 16);
    for (int m = 0; m < 3; m++)
        for (int greedy = 0; greedy < 2; greedy++) {
            fls_params p;
            fls_params_default(&p);
            p.method = METHODS[m];
            p.temperature_value = greedy ? 0.0f : 1.0f;
            p.draws = 2;
            tout o = tout_make(B, 2, 1);
            fls_status st = sample_chosen(ctx, 0, FLS_DTYPE_F32, l, B, V, &p, &o);
            cr_assert_eq(st, FLS_ERR_ALL_MASKED, "%s greedy %d: got %s", METHOD_NAMES[m], greedy,
                         fls_status_string(st));
            cr_assert(tout_untouched(&o), "%s: outputs written on FLS_ERR_ALL_MASKED", METHOD_NAMES[m]);
            /* fused path (D = 1, W = -inf) */
            st = sample_chosen(ctx, 1, FLS_DTYPE_F32, l + V, 1, V, &p, &o);
            cr_assert_eq(st, FLS_ERR_ALL_MASKED, "fused %s greedy %d: got %s", METHOD_NAMES[m], greedy,
                         fls_status_string(st));
            tout_free(&o);
        }
    fls_context_destroy(ctx);
}

/* ---- NaN ---- */

static void expect_nan_error(fls_context_t *ctx, const fls_matrix *W, const fls_matrix *H,
                             const fls_matrix *L, const char *what)
{
    for (int m = 0; m < 3; m++)
        for (int greedy = 0; greedy < 2; greedy++) {
            fls_params p;
            fls_params_default(&p);
            p.method = METHODS[m];
            p.temperature_value = greedy ? 0.0f : 0.5f;
            int64_t B = L ? L->rows : H->rows;
            tout o = tout_make(B, 2, 1);
            p.draws = 2;
            fls_status st =
                L ? fls_sample_logits(ctx, L, &p, &o.out) : fls_sample_fused(ctx, W, H, &p, &o.out);
            cr_assert_eq(st, FLS_ERR_NAN, "%s, %s, greedy %d: got %s", what, METHOD_NAMES[m], greedy,
                         fls_status_string(st));
            cr_assert(tout_untouched(&o), "%s, %s: outputs written on FLS_ERR_NAN", what, METHOD_NAMES[m]);
            tout_free(&o);
        }
}

Test(semantics, nan_anywhere_is_error)
{
    const int64_t V = 200, D = 9, B = 4;
    float *w = exact_w(V, D, 61), *h = exact_h(B, D, 62), *l = exact_logits(w, h, V, B, D);
    fls_context_t *ctx = ctx_make(3, FLS_SIMD_AUTO, 16);
    const int64_t spots[][2] = {{0, 0}, {3, 199}, {2, 101}};
    for (int i = 0; i < 3; i++) {
        tmat Lm = tmat_make(FLS_DTYPE_F32, B, V, V, l);
        tmat_set(&Lm, spots[i][0], spots[i][1], NAN);
        expect_nan_error(ctx, NULL, NULL, &Lm.m, "NaN logit");
        tmat_free(&Lm);
        tmat Lh = tmat_make(FLS_DTYPE_BF16, B, V, V + 2, l);
        tmat_set(&Lh, spots[i][0], spots[i][1], NAN);
        expect_nan_error(ctx, NULL, NULL, &Lh.m, "NaN bf16 logit");
        tmat_free(&Lh);
    }
    /* NaN in W (any row: every logit of that row is NaN) or in H */
    tmat Wm = tmat_make(FLS_DTYPE_F16, V, D, D, w), Hm = tmat_make(FLS_DTYPE_F32, B, D, D, h);
    tmat_set(&Wm, V - 1, D - 1, NAN);
    expect_nan_error(ctx, &Wm.m, &Hm.m, NULL, "NaN in the last W row");
    tmat_set(&Wm, V - 1, D - 1, 0.25f);
    tmat_set(&Hm, 2, 4, NAN);
    expect_nan_error(ctx, &Wm.m, &Hm.m, NULL, "NaN in H");
    /* inf * 0 = NaN: a computed NaN logit (column 4 of H is zero in every
     * row, so no logit is +-inf) */
    for (int64_t b = 0; b < B; b++)
        tmat_set(&Hm, b, 4, 0.0f);
    tmat_set(&Wm, 100, 4, INFINITY);
    expect_nan_error(ctx, &Wm.m, &Hm.m, NULL, "W = inf times H = 0");
    tmat_free(&Wm);
    tmat_free(&Hm);
    fls_context_destroy(ctx);
    free(w);
    free(h);
    free(l);
}

/* +inf logits are rejected with the NaN status (lib/front/api.c's status string:
 * "NaN or +inf in an input or a computed logit"). */
Test(semantics, plus_inf_logit_is_error)
{
    const int64_t V = 40;
    float l[40];
    for (int v = 0; v < V; v++)
        l[v] = (float)v / 8.0f;
    l[17] = INFINITY;
    fls_context_t *ctx = ctx_make(1, FLS_SIMD_AUTO, 0);
    tmat Lm = tmat_make(FLS_DTYPE_F32, 1, V, V, l);
    expect_nan_error(ctx, NULL, NULL, &Lm.m, "+inf logit");
    tmat_free(&Lm);
    fls_context_destroy(ctx);
}

/* NaN in the padding of a strided matrix (between cols and ld) is not
 * input: every tmat has NaN there, so this only checks it explicitly once. */
Test(semantics, nan_in_stride_padding_is_ignored)
{
    const int64_t V = 50, D = 3, B = 2;
    float *w = exact_w(V, D, 71), *h = exact_h(B, D, 72), *l = exact_logits(w, h, V, B, D);
    tmat Wm = tmat_make(FLS_DTYPE_F32, V, D, D + 5, w), Hm = tmat_make(FLS_DTYPE_F16, B, D, D + 1, h);
    tmat Lm = tmat_make(FLS_DTYPE_F32, B, V, V + 7, l);
    cr_assert(isnan(tmat_get(&Wm, 0, D)) && isnan(tmat_get(&Lm, 1, V + 6)));
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 0);
    fls_params p;
    fls_params_default(&p);
    tout o = tout_make(B, 1, 1);
    cr_assert_eq(fls_sample_fused(ctx, &Wm.m, &Hm.m, &p, &o.out), FLS_OK);
    cr_assert(tout_written(&o, V));
    tout_guard(&o);
    cr_assert_eq(fls_sample_logits(ctx, &Lm.m, &p, &o.out), FLS_OK);
    cr_assert(tout_written(&o, V));
    fls_context_destroy(ctx);
    tmat_free(&Wm);
    tmat_free(&Hm);
    tmat_free(&Lm);
    free(w);
    free(h);
    free(l);
}

/* ---- temperatures ---- */

/* Per-row temperatures: each row equals the reference at its own T, and the
 * same row sampled alone with temperature_value. */
Test(semantics, per_row_temperatures)
{
    const int64_t V = 257, D = 11, B = 6;
    float *w = exact_w(V, D, 81), *h = exact_h(B, D, 82), *l = exact_logits(w, h, V, B, D);
    tmat Wm = tmat_make(FLS_DTYPE_BF16, V, D, D, w), Hm = tmat_make(FLS_DTYPE_F32, B, D, D, h);
    float T[] = {0.0f, 0.5f, 1.0f, 3.0f, 0.7f, 1e-3f};
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 10);
    fls_params p;
    fls_params_default(&p);
    p.seed = 4242;
    p.temperature = T;
    p.draws = 4;
    tout o = tout_make(B, 4, 1);
    cr_assert_eq(fls_sample_fused(ctx, &Wm.m, &Hm.m, &p, &o.out), FLS_OK);
    for (int64_t b = 0; b < B; b++) {
        for (int d = 0; d < 4; d++) {
            int64_t want = ref_token(l + b * V, V, T[b], fls_row_seed(p.seed, (uint64_t)b), 0, (uint32_t)d);
            cr_assert_eq(o.tokens[b * 4 + d], want, "row %lld T %g draw %d: %lld, reference %lld",
                         (long long)b, (double)T[b], d, (long long)o.tokens[b * 4 + d], (long long)want);
        }
        /* the same row alone, with temperature_value and its row seed */
        tmat H1 = tmat_make(FLS_DTYPE_F32, 1, D, D, h + b * D);
        fls_params q = p;
        uint64_t seed = fls_row_seed(p.seed, (uint64_t)b);
        q.temperature = NULL;
        q.temperature_value = T[b];
        q.row_seeds = &seed;
        tout o1 = tout_make(1, 4, 1);
        cr_assert_eq(fls_sample_fused(ctx, &Wm.m, &H1.m, &q, &o1.out), FLS_OK);
        for (int d = 0; d < 4; d++)
            cr_assert_eq(o1.tokens[d], o.tokens[b * 4 + d]);
        /* logsumexp is a float sum whose order may follow the threads: equal to rounding */
        cr_assert(fabsf(o1.logsumexp[0] - o.logsumexp[b]) <= 1e-6f * fmaxf(1.0f, fabsf(o.logsumexp[b])),
                  "row %lld: logsumexp alone %a vs in batch %a", (long long)b, (double)o1.logsumexp[0],
                  (double)o.logsumexp[b]);
        tout_free(&o1);
        tmat_free(&H1);
    }
    /* -0.0 is a temperature of zero: greedy */
    float Tz[6];
    for (int b = 0; b < 6; b++)
        Tz[b] = -0.0f;
    p.temperature = Tz;
    tout_guard(&o);
    cr_assert_eq(fls_sample_fused(ctx, &Wm.m, &Hm.m, &p, &o.out), FLS_OK,
                 "T = -0.0 must be accepted (greedy)");
    for (int64_t b = 0; b < B; b++)
        cr_assert_eq(o.tokens[b * 4], ref_token(l + b * V, V, 0.0f, 0, 0, 0));
    fls_context_destroy(ctx);
    tout_free(&o);
    tmat_free(&Wm);
    tmat_free(&Hm);
    free(w);
    free(h);
    free(l);
}

/* A temperature so small that l / T overflows to inf cannot be sampled
 * exactly: FLS_ERR_TEMPERATURE, nothing written. */
Test(semantics, tempered_overflow_is_error)
{
    float l[4] = {1e38f, 0.0f, -1.0f, 2e37f};
    fls_context_t *ctx = ctx_make(1, FLS_SIMD_AUTO, 0);
    for (int m = 0; m < 3; m++) {
        fls_params p;
        fls_params_default(&p);
        p.method = METHODS[m];
        p.temperature_value = 1e-3f;
        tout o = tout_make(1, 1, 1);
        fls_status st = sample_chosen(ctx, 0, FLS_DTYPE_F32, l, 1, 4, &p, &o);
        cr_assert_eq(st, FLS_ERR_TEMPERATURE, "%s: got %s", METHOD_NAMES[m], fls_status_string(st));
        cr_assert(tout_untouched(&o));
        tout_free(&o);
    }
    fls_context_destroy(ctx);
}

/* ---- the multinomial baseline ---- */

/* Valid tokens, reproducible, never masked (masking tested above); a
 * dominant token (logit 50 nats above the rest) is always drawn; logprobs
 * and logsumexp against the double reference. Its distribution is tested in
 * the stats suite. */
Test(semantics, multinomial_valid_tokens)
{
    const int64_t V = 1000, D = 7, B = 5, draws = 8;
    float *w = exact_w(V, D, 91), *h = exact_h(B, D, 92), *l = exact_logits(w, h, V, B, D);
    tmat Wm = tmat_make(FLS_DTYPE_F32, V, D, D, w), Hm = tmat_make(FLS_DTYPE_F32, B, D, D, h);
    fls_context_t *ctx = ctx_make(3, FLS_SIMD_AUTO, 0);
    fls_params p;
    fls_params_default(&p);
    p.method = FLS_METHOD_UNFUSED_MULTINOMIAL;
    p.draws = draws;
    p.seed = 17;
    tout a = tout_make(B, draws, 1), b = tout_make(B, draws, 1);
    cr_assert_eq(fls_sample_fused(ctx, &Wm.m, &Hm.m, &p, &a.out), FLS_OK);
    cr_assert(tout_written(&a, V));
    cr_assert_eq(fls_sample_fused(ctx, &Wm.m, &Hm.m, &p, &b.out), FLS_OK);
    for (int64_t i = 0; i < B * draws; i++)
        cr_assert_eq(a.tokens[i], b.tokens[i], "multinomial not reproducible");
    for (int64_t r = 0; r < B; r++) {
        double lse = ref_logsumexp(l + r * V, V, 1.0f);
        cr_assert(fabs(a.logsumexp[r] - lse) <= 1e-5 * fmax(1.0, fabs(lse)));
        for (int64_t d = 0; d < draws; d++) {
            int64_t t = a.tokens[r * draws + d];
            cr_assert(fabs(a.logprobs[r * draws + d] - ((double)l[r * V + t] - lse)) <=
                      1e-5 * fmax(1.0, fabs(lse)));
        }
    }
    /* from logits, same method: the same tokens (same uniforms, same softmax) */
    tmat Lm = tmat_make(FLS_DTYPE_F32, B, V, V, l);
    tout_guard(&b);
    cr_assert_eq(fls_sample_logits(ctx, &Lm.m, &p, &b.out), FLS_OK);
    for (int64_t i = 0; i < B * draws; i++)
        cr_assert_eq(a.tokens[i], b.tokens[i], "multinomial fused vs from-logits");
    tmat_free(&Lm);

    /* a dominant token */
    float dom[64];
    for (int v = 0; v < 64; v++)
        dom[v] = v == 41 ? 50.0f : 0.0f;
    tout c = tout_make(1, 32, 0);
    p.draws = 32;
    cr_assert_eq(sample_chosen(ctx, 0, FLS_DTYPE_F32, dom, 1, 64, &p, &c), FLS_OK);
    for (int d = 0; d < 32; d++)
        cr_assert_eq(c.tokens[d], 41);
    tout_free(&c);

    fls_context_destroy(ctx);
    tout_free(&a);
    tout_free(&b);
    tmat_free(&Wm);
    tmat_free(&Hm);
    free(w);
    free(h);
    free(l);
}

/* ---- awkward shapes ---- */

Test(semantics, awkward_shapes, .timeout = 60)
{
    /* V, D, B */
    const int64_t shapes[][3] = {{1, 1, 1},   {1, 7, 3},    {2, 1, 1},   {3, 5, 20},  {17, 16, 17},
                                 {65, 33, 2}, {1001, 7, 1}, {129, 1, 4}, {64, 15, 16}};
    const int64_t tiles[] = {0, 2, 64};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t V = shapes[si][0], D = shapes[si][1], B = shapes[si][2];
        float *w = exact_w(V, D, 100 + si), *h = exact_h(B, D, 200 + si), *l = exact_logits(w, h, V, B, D);
        for (int pad = 0; pad < 2; pad++) {
            fls_dtype wd = pad ? FLS_DTYPE_BF16 : FLS_DTYPE_F32, hd = pad ? FLS_DTYPE_F16 : FLS_DTYPE_F32;
            tmat Wm = tmat_make(wd, V, D, D + 3 * pad, w), Hm = tmat_make(hd, B, D, D + 1 * pad, h);
            float *lr = round_to_dtype(l, B * V, wd); /* what L holds in dtype wd */
            tmat Lm = tmat_make(wd, B, V, V + 5 * pad, lr);
            for (size_t ti = 0; ti < 3; ti++) {
                fls_context_t *ctx = ctx_make(1 + (int)ti, FLS_SIMD_AUTO, tiles[ti]);
                fls_params p;
                fls_params_default(&p);
                p.seed = 3000 + si;
                p.draws = 2;
                tout o = tout_make(B, 2, 1);
                for (int path = 0; path < 2; path++) {
                    tout_guard(&o);
                    fls_status st = path ? fls_sample_logits(ctx, &Lm.m, &p, &o.out)
                                         : fls_sample_fused(ctx, &Wm.m, &Hm.m, &p, &o.out);
                    cr_assert_eq(st, FLS_OK, "V %lld D %lld B %lld pad %d tile %lld %s: %s", (long long)V,
                                 (long long)D, (long long)B, pad, (long long)tiles[ti],
                                 path ? "logits" : "fused", fls_status_string(st));
                    cr_assert(tout_written(&o, V));
                    const float *lp = path ? lr : l;
                    for (int64_t b = 0; b < B; b++) {
                        double lse = ref_logsumexp(lp + b * V, V, 1.0f);
                        cr_assert(fabs(o.logsumexp[b] - lse) <= 2e-6 * fmax(1.0, fabs(lse)),
                                  "V %lld D %lld B %lld: logsumexp %.9g vs %.9g", (long long)V, (long long)D,
                                  (long long)B, (double)o.logsumexp[b], lse);
                        for (int d = 0; d < 2; d++) {
                            int64_t want = ref_token(lp + b * V, V, 1.0f, fls_row_seed(p.seed, (uint64_t)b),
                                                     0, (uint32_t)d);
                            cr_assert_eq(o.tokens[b * 2 + d], want,
                                         "V %lld D %lld B %lld pad %d tile %lld %s row %lld draw %d: %lld, "
                                         "reference %lld",
                                         (long long)V, (long long)D, (long long)B, pad, (long long)tiles[ti],
                                         path ? "logits" : "fused", (long long)b, d,
                                         (long long)o.tokens[b * 2 + d], (long long)want);
                        }
                        if (V == 1)
                            cr_assert(fabsf(o.logprobs[b * 2]) <= 1e-6f);
                    }
                }
                tout_free(&o);
                fls_context_destroy(ctx);
            }
            tmat_free(&Wm);
            tmat_free(&Hm);
            tmat_free(&Lm);
            free(lr);
        }
        free(w);
        free(h);
        free(l);
    }
}

/* ---- the key resolution (variants/rule.h, docs/NOISE.md "Exactness") ----
 * A noisy row whose deciding key reaches 2^12 in magnitude is refused with
 * FLS_ERR_TEMPERATURE and nothing written, on every path: its fp32 keys
 * would break ties by rounding instead of by the noise. Just inside the
 * bound, at T = 0 (no noise) and for the multinomial (no keys) it samples. */
static fls_status resolution_call(fls_context_t *ctx, int fused, const float *l, int64_t V, float T,
                                  fls_method method, int64_t K, float min_p)
{
    fls_params p;
    fls_params_default(&p);
    p.method = method;
    p.temperature_value = T;
    p.seed = 77;
    p.without_replacement_k = K;
    p.min_p = min_p;
    if (method == FLS_METHOD_GROUPED)
        p.group_size = 2;
    /* two draws, or one draw of K positions ((B, draws, K) outputs) */
    p.draws = K > 1 ? 1 : 2;
    tout o = tout_make(1, K > 1 ? K : 2, 1);
    const fls_status st = sample_chosen(ctx, fused, FLS_DTYPE_F32, l, 1, V, &p, &o);
    if (st != FLS_OK)
        cr_assert(tout_untouched(&o), "outputs written on %s", fls_status_string(st));
    tout_free(&o);
    return st;
}

Test(semantics, key_resolution_refused)
{
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 2);
    const fls_method flat[] = {FLS_METHOD_FUSED, FLS_METHOD_UNFUSED_GUMBEL, FLS_METHOD_GROUPED};
    /* ties of (10, 10) at T = 1e-3 and of (-4100, -4100) at T = 1: refused */
    const float hi[4] = {10.0f, 10.0f, 3.0f, -5.0f}, lo[4] = {-4100.0f, -4100.0f, -4200.0f, -INFINITY};
    const float in_hi[4] = {4000.0f, 4000.0f, 3990.0f, 0.0f},
                in_lo[4] = {-4000.0f, -4000.0f, -4010.0f, -INFINITY};
    for (int fused = 0; fused < 2; fused++)
        for (size_t m = 0; m < sizeof flat / sizeof flat[0]; m++) {
            const char *what = fused ? "fused" : "logits";
            cr_assert_eq(resolution_call(ctx, fused, hi, 4, 1e-3f, flat[m], 0, 0.0f), FLS_ERR_TEMPERATURE,
                         "%s method %d: x = 10^4", what, (int)flat[m]);
            cr_assert_eq(resolution_call(ctx, fused, lo, 4, 1.0f, flat[m], 0, 0.0f), FLS_ERR_TEMPERATURE,
                         "%s method %d: x = -4100", what, (int)flat[m]);
            cr_assert_eq(resolution_call(ctx, fused, in_hi, 4, 1.0f, flat[m], 0, 0.0f), FLS_OK,
                         "%s method %d: x = 4000", what, (int)flat[m]);
            cr_assert_eq(resolution_call(ctx, fused, in_lo, 4, 1.0f, flat[m], 0, 0.0f), FLS_OK,
                         "%s method %d: x = -4000", what, (int)flat[m]);
            cr_assert_eq(resolution_call(ctx, fused, hi, 4, 0.0f, flat[m], 0, 0.0f), FLS_OK,
                         "%s method %d: greedy", what, (int)flat[m]);
        }
    /* no keys: the multinomial baseline samples */
    cr_assert_eq(resolution_call(ctx, 0, hi, 4, 1e-3f, FLS_METHOD_UNFUSED_MULTINOMIAL, 0, 0.0f), FLS_OK);
    /* a rule: every drawn token's tempered logit counts */
    cr_assert_eq(resolution_call(ctx, 0, hi, 4, 1e-3f, FLS_METHOD_FUSED, 0, 0.5f), FLS_ERR_TEMPERATURE);
    cr_assert_eq(resolution_call(ctx, 1, hi, 4, 1e-3f, FLS_METHOD_FUSED, 0, 0.5f), FLS_ERR_TEMPERATURE);
    cr_assert_eq(resolution_call(ctx, 0, in_hi, 4, 1.0f, FLS_METHOD_FUSED, 0, 0.5f), FLS_OK);
    /* without replacement: (10, 10, -50, -50) at T = 0.01 is x = (1000, 1000,
     * -5000, -5000): two positions are decided within the bound, the third
     * and fourth among keys near -5000 */
    const float wr[4] = {10.0f, 10.0f, -50.0f, -50.0f};
    for (int fused = 0; fused < 2; fused++) {
        cr_assert_eq(resolution_call(ctx, fused, wr, 4, 0.01f, FLS_METHOD_FUSED, 2, 0.0f), FLS_OK);
        cr_assert_eq(resolution_call(ctx, fused, wr, 4, 0.01f, FLS_METHOD_FUSED, 4, 0.0f),
                     FLS_ERR_TEMPERATURE);
    }
    fls_context_destroy(ctx);
}

/* The online sampler finalizes with the same check. */
Test(semantics, key_resolution_refused_online)
{
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 0);
    const float hi[4] = {10.0f, 10.0f, 3.0f, -5.0f};
    const float Ts[2] = {1e-3f, 1e-2f};
    const fls_status want[2] = {FLS_ERR_TEMPERATURE, FLS_OK};
    for (int g = 0; g < 2; g++)
        for (int t = 0; t < 2; t++) {
            fls_params p;
            fls_params_default(&p);
            p.temperature_value = Ts[t];
            if (g) {
                p.method = FLS_METHOD_GROUPED;
                p.group_size = 2;
            }
            fls_stream_t *s = NULL;
            cr_assert_eq(fls_stream_create(&s, ctx, 1, 4, &p), FLS_OK);
            tmat Lm = tmat_make(FLS_DTYPE_F32, 1, 4, 4, hi);
            cr_assert_eq(fls_stream_feed_logits(s, &Lm.m, 0), FLS_OK);
            tout o = tout_make(1, 1, 1);
            tout_guard(&o);
            const fls_status st = fls_stream_finalize(s, &o.out);
            cr_assert_eq(st, want[t], "grouped %d, T = %g: got %s", g, (double)Ts[t], fls_status_string(st));
            if (st != FLS_OK)
                cr_assert(tout_untouched(&o));
            tout_free(&o);
            tmat_free(&Lm);
            fls_stream_destroy(s);
        }
    fls_context_destroy(ctx);
}
