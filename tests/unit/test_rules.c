/*
 * test_rules.c — the rule family (min-p, top-k, top-p, top-n-sigma, without
 * replacement) against a brute-force reference written here from the
 * definitions of docs/RULES.md (sort, filter by the formulas, Gumbel-max
 * with the contract's noise), token for token, on every path: the one-pass
 * fused and from-logits engines (several tilings and thread counts), the
 * unfused Gumbel method, and the multinomial baseline's support. Logits are
 * multiples of 1/4, so exact ties at the k-th value and at the nucleus
 * boundary occur all the time. Also: the exact second pass is taken (and
 * counted) where the one-pass statistics cannot decide, and gives the same
 * tokens; logsumexp and logprobs are over the final support; positions past
 * the support are -1; T = 0 stays greedy.
 */
#include "tests/unit/common.h"
#include "lib/base/fls_noise.h"
#include "lib/front/internal.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct rule_case {
    float T;
    float min_p, top_p;
    int64_t top_k, K; /* K: 0 = one token per draw */
    double nsigma;    /* 0 = off */
} rule_case;

/* ---- the brute force ---- */

typedef struct bf_tok {
    double x;
    int64_t v;
} bf_tok;

static int bf_rank(const void *a, const void *b)
{
    const bf_tok *p = a, *q = b;
    if (p->x != q->x)
        return p->x > q->x ? -1 : 1;
    return p->v < q->v ? -1 : (p->v > q->v);
}

/* keep[v] = 1 for the final support; returns its log-sum-exp (T = 0: max) */
static double bf_support(const float *l, int64_t V, const rule_case *rc, uint8_t *keep)
{
    float *x = malloc((size_t)V * sizeof(float));
    bf_tok *s = malloc((size_t)V * sizeof(bf_tok));
    cr_assert(x && s);
    int64_t n = 0;
    double m = -INFINITY, sum = 0.0, sq = 0.0;
    for (int64_t v = 0; v < V; v++) {
        x[v] = rc->T == 0.0f ? l[v] : l[v] / rc->T;
        keep[v] = 0;
        if (x[v] > -INFINITY) {
            s[n].x = x[v];
            s[n].v = v;
            n++;
            m = x[v] > m ? x[v] : m;
            sum += x[v];
        }
    }
    qsort(s, (size_t)n, sizeof *s, bf_rank);
    const double mean = sum / (double)n;
    for (int64_t i = 0; i < n; i++)
        sq += (s[i].x - mean) * (s[i].x - mean);
    const double sigma = sqrt(sq / (double)n);
    /* S1: min-p */
    int64_t n1 = 0;
    uint8_t *in = calloc((size_t)n, 1);
    for (int64_t i = 0; i < n; i++)
        if (rc->min_p == 0.0f || s[i].x - m >= log((double)rc->min_p))
            in[i] = 1, n1++;
    /* S2: top-k, by counting */
    if (rc->top_k > 0)
        for (int64_t i = 0; i < n; i++) {
            if (!in[i])
                continue;
            int64_t greater = 0;
            for (int64_t u = 0; u < n; u++)
                greater += in[u] && s[u].x > s[i].x;
            if (greater >= rc->top_k)
                in[i] = 2; /* out, after the pass (counts use S1) */
        }
    for (int64_t i = 0; i < n; i++)
        in[i] = in[i] == 1;
    /* S3: top-p over S2 */
    if (rc->top_p < 1.0f) {
        double Z = 0.0;
        for (int64_t i = 0; i < n; i++)
            if (in[i])
                Z += exp(s[i].x - m);
        uint8_t *out = calloc((size_t)n, 1);
        for (int64_t i = 0; i < n; i++) {
            if (!in[i])
                continue;
            double A = 0.0;
            for (int64_t u = 0; u < n; u++)
                if (in[u] && s[u].x > s[i].x)
                    A += exp(s[u].x - m);
            out[i] = !(A < (double)rc->top_p * Z);
        }
        for (int64_t i = 0; i < n; i++)
            in[i] = in[i] && !out[i];
        free(out);
    }
    /* top-n-sigma: within m - n sigma */
    if (rc->nsigma > 0.0)
        for (int64_t i = 0; i < n; i++)
            in[i] = in[i] && s[i].x >= m - rc->nsigma * sigma;
    double Z = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (in[i]) {
            keep[s[i].v] = 1;
            Z += exp(s[i].x - m);
        }
    (void)n1;
    free(in);
    free(x);
    free(s);
    return rc->T == 0.0f ? m : m + log(Z);
}

/* The K best keys over the support (lowest index on ties), best first. */
static void bf_tokens(const float *l, int64_t V, const uint8_t *keep, float T, uint64_t seed, uint64_t off,
                      uint32_t draw, int64_t K, int64_t *tok)
{
    for (int64_t j = 0; j < K; j++) {
        int64_t bv = -1;
        float bk = -INFINITY;
        for (int64_t v = 0; v < V; v++) {
            if (!keep[v])
                continue;
            int taken = 0;
            for (int64_t i = 0; i < j; i++)
                taken |= tok[i] == v;
            if (taken)
                continue;
            const float x = T == 0.0f ? l[v] : l[v] / T;
            const float key = T == 0.0f ? x : x + fls_gumbel(seed, off, draw, (uint64_t)v);
            if (bv < 0 || key > bk) {
                bk = key;
                bv = v;
            }
        }
        tok[j] = bv;
    }
}

/* ---- the library ---- */

static fls_params case_params(const rule_case *rc, int64_t draws, uint64_t seed)
{
    fls_params p;
    fls_params_default(&p);
    p.temperature_value = rc->T;
    p.min_p = rc->min_p;
    p.top_p = rc->top_p;
    p.top_k = rc->top_k;
    p.without_replacement_k = rc->K;
    if (rc->nsigma > 0.0) {
        p.filter = "top-nsigma";
        p.filter_value = rc->nsigma;
    }
    p.draws = draws;
    p.seed = seed;
    return p;
}

/* logits: multiples of 1/4 in [-12, 3], a tenth masked, one finite at least */
static float *quarter_logits(int64_t B, int64_t V, uint64_t *rng)
{
    float *l = malloc((size_t)(B * V) * sizeof(float));
    cr_assert_not_null(l);
    const int64_t spread = trng_int(rng, 4, 60);
    for (int64_t i = 0; i < B * V; i++)
        l[i] = trng_int(rng, 0, 9) == 0 ? -INFINITY : (float)(3 - trng_int(rng, 0, spread)) / 4.0f;
    for (int64_t b = 0; b < B; b++)
        l[b * V + trng_int(rng, 0, V - 1)] = 1.0f;
    return l;
}

static const rule_case k_cases[] = {
    {1.0f, 0.0f, 1.0f, 5, 0, 0.0},   {0.7f, 0.0f, 0.9f, 0, 0, 0.0},    {1.3f, 0.1f, 1.0f, 0, 0, 0.0},
    {1.0f, 0.05f, 0.8f, 20, 0, 0.0}, {0.5f, 0.0f, 0.5f, 3, 0, 0.0},    {1.0f, 0.0f, 1.0f, 1, 0, 0.0},
    {1.0f, 0.0f, 1.0f, 0, 3, 0.0},   {0.8f, 0.0f, 0.95f, 10, 4, 0.0},  {1.0f, 0.2f, 1.0f, 0, 5, 0.0},
    {1.0f, 0.0f, 1.0f, 0, 0, 1.0},   {2.0f, 0.0f, 0.7f, 0, 2, 2.5},    {0.0f, 0.0f, 0.6f, 4, 0, 0.0},
    {0.0f, 0.0f, 1.0f, 3, 3, 0.0},   {1.0f, 1.0f, 1.0f, 0, 2, 0.0},    {1.0f, 0.0f, 0.01f, 0, 0, 0.0},
    {1.0f, 0.0f, 0.999f, 0, 0, 0.0}, {1.0f, 0.0f, 1.0f, 2000, 0, 0.0}, {1.5f, 0.02f, 0.97f, 500, 2, 0.0},
};
#define N_CASES ((int)(sizeof k_cases / sizeof k_cases[0]))

/* Every case on one batch of logits: from logits and fused (D = 1: the
 * logit of token v is W[v] exactly), token for token against the brute
 * force. */
static void check_batch(const float *l, int64_t B, int64_t V, fls_context_t *ctx, int fused,
                        fls_method method)
{
    const int64_t draws = 3;
    uint8_t *keep = malloc((size_t)V);
    cr_assert_not_null(keep);
    for (int c = 0; c < N_CASES; c++) {
        const rule_case *rc = &k_cases[c];
        if (rc->top_k > V || rc->K > V)
            continue;
        const int64_t K = rc->K > 0 ? rc->K : 1;
        fls_params p = case_params(rc, draws, 1000 + (uint64_t)c);
        int64_t *tok = malloc((size_t)(B * draws * K) * sizeof(int64_t));
        float *lse = malloc((size_t)B * sizeof(float)), *lp = malloc((size_t)(B * draws * K) * sizeof(float));
        cr_assert(tok && lse && lp);
        fls_outputs o = {tok, lse, lp};
        fls_status st;
        p.method = method;
        if (fused) {
            /* one row at a time (W is the row), with that row's seed */
            for (int64_t b = 0; b < B; b++) {
                float one = 1.0f;
                fls_matrix W = {l + b * V, FLS_DTYPE_F32, V, 1, 1}, H = {&one, FLS_DTYPE_F32, 1, 1, 1};
                uint64_t seed = fls_row_seed(p.seed, (uint64_t)b);
                fls_params pb = p;
                pb.row_seeds = &seed;
                fls_outputs ob = {tok + b * draws * K, lse + b, lp + b * draws * K};
                st = fls_sample_fused(ctx, &W, &H, &pb, &ob);
                cr_assert_eq(st, FLS_OK, "case %d fused row %lld: %s", c, (long long)b,
                             fls_status_string(st));
            }
        } else {
            fls_matrix L = {l, FLS_DTYPE_F32, B, V, V};
            st = fls_sample_logits(ctx, &L, &p, &o);
            cr_assert_eq(st, FLS_OK, "case %d: %s", c, fls_status_string(st));
        }
        for (int64_t b = 0; b < B; b++) {
            const double want_lse = bf_support(l + b * V, V, rc, keep);
            int64_t nsup = 0;
            for (int64_t v = 0; v < V; v++)
                nsup += keep[v];
            cr_assert(fabs((double)lse[b] - want_lse) <= 1e-5 * (1.0 + fabs(want_lse)),
                      "case %d row %lld: logsumexp %.9g, want %.9g", c, (long long)b, (double)lse[b],
                      want_lse);
            for (int64_t d = 0; d < draws; d++) {
                int64_t want[64];
                const int64_t *got = tok + (b * draws + d) * K;
                if (method == FLS_METHOD_UNFUSED_MULTINOMIAL) {
                    cr_assert(got[0] >= 0 && got[0] < V && keep[got[0]],
                              "case %d: multinomial token %lld outside the support", c, (long long)got[0]);
                    continue;
                }
                bf_tokens(l + b * V, V, keep, rc->T, fls_row_seed(p.seed, (uint64_t)b), 0, (uint32_t)d, K,
                          want);
                double lp_sum = 0.0;
                for (int64_t j = 0; j < K; j++) {
                    cr_assert_eq(got[j], want[j],
                                 "case %d (T %g min-p %g top-k %lld top-p %g K %lld nsigma %g) "
                                 "row %lld draw %lld pos %lld: %lld, want %lld (support %lld)",
                                 c, (double)rc->T, (double)rc->min_p, (long long)rc->top_k, (double)rc->top_p,
                                 (long long)rc->K, rc->nsigma, (long long)b, (long long)d, (long long)j,
                                 (long long)got[j], (long long)want[j], (long long)nsup);
                    if (got[j] >= 0)
                        lp_sum += lp[(b * draws + d) * K + j];
                    else
                        cr_assert_eq(lp[(b * draws + d) * K + j], 0.0f);
                }
                if (rc->T != 0.0f && rc->K <= 1) {
                    const double x = (double)(l[b * V + got[0]] / rc->T);
                    cr_assert(fabs((double)lp[(b * draws + d) * K] - (x - want_lse)) < 1e-4,
                              "case %d: logprob of a single draw");
                }
                if (rc->T != 0.0f && rc->K > 1 && nsup <= rc->K) /* the last support token: probability 1 */
                    cr_assert(fabs((double)lp[(b * draws + d) * K + nsup - 1]) < 1e-4,
                              "case %d: the last token of the support has log-prob %g", c,
                              (double)lp[(b * draws + d) * K + nsup - 1]);
                (void)lp_sum;
            }
        }
        free(tok);
        free(lse);
        free(lp);
    }
    free(keep);
}

Test(rules, brute_force_from_logits, .timeout = 120)
{
    uint64_t rng = 77;
    const int64_t Vs[] = {1, 2, 17, 200, 1500, 3001};
    /* under valgrind (50x slower) the two largest V run on one configuration */
    const int slow = sweep_scale_shift() > 0;
    for (int i = 0; i < 6; i++) {
        for (int cfg = 0; cfg < 3; cfg++) {
            if (slow && Vs[i] > 200 && cfg != 1)
                continue;
            /* default tiles and all threads; 16-token tiles on 3 threads; 1 thread */
            fls_context_t *ctx =
                ctx_make(cfg == 2 ? 1 : (cfg == 1 ? 3 : 0), FLS_SIMD_AUTO, cfg == 1 ? 16 : 0);
            float *l = quarter_logits(3, Vs[i], &rng);
            check_batch(l, 3, Vs[i], ctx, 0, FLS_METHOD_FUSED);
            free(l);
            fls_context_destroy(ctx);
        }
    }
}

Test(rules, brute_force_fused, .timeout = 120)
{
    uint64_t rng = 78;
    const int64_t Vs[] = {1, 33, 700, 2049};
    for (int i = 0; i < 4; i++) {
        fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, i % 2 ? 64 : 0);
        float *l = quarter_logits(2, Vs[i], &rng);
        check_batch(l, 2, Vs[i], ctx, 1, FLS_METHOD_FUSED);
        free(l);
        fls_context_destroy(ctx);
    }
}

Test(rules, brute_force_unfused_methods, .timeout = 120)
{
    uint64_t rng = 79;
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 0);
    float *l = quarter_logits(3, 1200, &rng);
    check_batch(l, 3, 1200, ctx, 0, FLS_METHOD_UNFUSED_GUMBEL);
    check_batch(l, 3, 1200, ctx, 1, FLS_METHOD_UNFUSED_GUMBEL);
    free(l);
    fls_context_destroy(ctx);
}

/* The multinomial baseline's tokens lie in the rule's support (its
 * distribution is the audit's business); without replacement it does not
 * do: FLS_ERR_UNSUPPORTED. */
Test(rules, multinomial_support)
{
    uint64_t rng = 80;
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 0);
    float *l = quarter_logits(3, 900, &rng);
    const rule_case rcs[] = {{1.0f, 0.0f, 0.9f, 0, 0, 0.0}, {1.0f, 0.1f, 1.0f, 7, 0, 0.0}};
    uint8_t keep[900];
    for (int c = 0; c < 2; c++) {
        fls_params p = case_params(&rcs[c], 50, 9);
        p.method = FLS_METHOD_UNFUSED_MULTINOMIAL;
        int64_t tok[150];
        fls_outputs o = {tok, NULL, NULL};
        fls_matrix L = {l, FLS_DTYPE_F32, 3, 900, 900};
        cr_assert_eq(fls_sample_logits(ctx, &L, &p, &o), FLS_OK);
        for (int64_t b = 0; b < 3; b++) {
            bf_support(l + b * 900, 900, &rcs[c], keep);
            for (int d = 0; d < 50; d++)
                cr_assert(keep[tok[b * 50 + d]], "multinomial token outside the support");
        }
        p.without_replacement_k = 2;
        cr_assert_eq(fls_sample_logits(ctx, &L, &p, &o), FLS_ERR_UNSUPPORTED);
    }
    free(l);
    fls_context_destroy(ctx);
}

/* A nucleus larger than the kept list and min-p's log-sum-exp over a large
 * support take the exact second pass, counted; a peaked row does not. The
 * tokens are the brute force's either way (brute_force_* cover them). */
Test(rules, second_pass_is_counted)
{
    const int64_t V = 5000;
    float *flat = malloc((size_t)V * sizeof(float)), *peak = malloc((size_t)V * sizeof(float));
    cr_assert(flat && peak);
    for (int64_t v = 0; v < V; v++) {
        flat[v] = (float)(v % 7) / 64.0f;
        peak[v] = v == 11 ? 20.0f : -(float)(v % 13);
    }
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 0);
    struct {
        const float *l;
        float top_p, min_p;
        int want_lse;
        int second;
    } k[] = {{flat, 0.9f, 0.0f, 0, 1},
             {peak, 0.9f, 0.0f, 1, 0},
             {flat, 1.0f, 0.5f, 1, 1},
             {flat, 1.0f, 0.5f, 0, 0}};
    for (int i = 0; i < 4; i++) {
        fls_counters c0, c1;
        fls_counters_default(&c0);
        fls_counters_default(&c1);
        cr_assert_eq(fls_context_counters(ctx, &c0), FLS_OK);
        fls_params p;
        fls_params_default(&p);
        p.top_p = k[i].top_p;
        p.min_p = k[i].min_p;
        int64_t tok;
        float lse, lp;
        fls_outputs o = {&tok, k[i].want_lse ? &lse : NULL, k[i].want_lse ? &lp : NULL};
        fls_matrix L = {k[i].l, FLS_DTYPE_F32, 1, V, V};
        cr_assert_eq(fls_sample_logits(ctx, &L, &p, &o), FLS_OK);
        cr_assert_eq(fls_context_counters(ctx, &c1), FLS_OK);
        cr_assert_eq(c1.calls, c0.calls + 1);
        cr_assert_eq(c1.second_pass_rows - c0.second_pass_rows, (uint64_t)k[i].second, "case %d", i);
    }
    free(flat);
    free(peak);
    fls_context_destroy(ctx);
}

/* The fused pass keeps its logits for the second pass (the pass then reads
 * them instead of W again) and takes the draws from its staircases: the
 * same tokens, logprobs and logsumexp as recomputing the logits
 * (fls_cpu_opts.no_keep), rows undecided and decided in one call, several
 * draws, without replacement. */
Test(rules, second_pass_kept_logits_equal_recomputed)
{
    uint64_t rng = 81;
    const int64_t B = 3, V = 20011, D = 24, draws = 4, K = 2;
    float *W = malloc((size_t)(V * D) * sizeof(float)), *H = malloc((size_t)(B * D) * sizeof(float));
    cr_assert(W && H);
    for (int64_t i = 0; i < V * D; i++)
        W[i] = (float)trng_int(&rng, -4, 4) / 8.0f;
    for (int64_t i = 0; i < B * D; i++)
        H[i] = (float)trng_int(&rng, -2, 2) / 4.0f;
    for (int64_t i = 0; i < D; i++)
        W[17 * D + i] = 4.0f * H[D + i]; /* row 1 peaked: decided in one pass */
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 0);
    fls_matrix Wm = {W, FLS_DTYPE_F32, V, D, D}, Hm = {H, FLS_DTYPE_F32, B, D, D};
    fls_params p;
    fls_params_default(&p);
    p.temperature_value = 0.8f;
    p.seed = 5;
    p.draws = draws;
    p.top_p = 0.9f;
    p.without_replacement_k = K;
    int64_t tok[2][3 * 4 * 2];
    float lp[2][3 * 4 * 2], lse[2][3];
    uint64_t second[2];
    for (int r = 0; r < 2; r++) {
        fls_cpu_opts dev = {0};
        dev.no_keep = r; /* r = 1: the second pass recomputes the logits */
        fls_cpu_set_dev_opts(ctx, &dev);
        fls_counters c0, c1;
        fls_counters_default(&c0);
        fls_counters_default(&c1);
        cr_assert_eq(fls_context_counters(ctx, &c0), FLS_OK);
        fls_outputs o = {tok[r], lse[r], lp[r]};
        cr_assert_eq(fls_sample_fused(ctx, &Wm, &Hm, &p, &o), FLS_OK);
        cr_assert_eq(fls_context_counters(ctx, &c1), FLS_OK);
        second[r] = c1.second_pass_rows - c0.second_pass_rows;
        fls_cpu_set_dev_opts(ctx, NULL);
    }
    cr_assert(second[0] >= 1 && second[0] < (uint64_t)B, "rows decided by the second pass: %llu",
              (unsigned long long)second[0]);
    cr_assert_eq(second[0], second[1]);
    cr_assert(memcmp(tok[0], tok[1], sizeof tok[0]) == 0, "tokens differ");
    cr_assert(memcmp(lp[0], lp[1], sizeof lp[0]) == 0, "logprobs differ");
    cr_assert(memcmp(lse[0], lse[1], sizeof lse[0]) == 0, "logsumexp differs");
    free(W);
    free(H);
    fls_context_destroy(ctx);
}

/* Filters cannot change a greedy row's token; outputs are guard-checked:
 * without replacement fills (B, draws, K) and nothing past it. */
Test(rules, greedy_and_shape)
{
    uint64_t rng = 81;
    enum { B = 2, V = 300, draws = 2, K = 4 };
    float *l = quarter_logits(B, V, &rng);
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 0);
    fls_params p;
    fls_params_default(&p);
    p.temperature_value = 0.0f;
    p.top_p = 0.3f;
    p.min_p = 0.5f;
    p.top_k = 2;
    p.draws = draws;
    int64_t tok[B * draws];
    fls_matrix L = {l, FLS_DTYPE_F32, B, V, V};
    fls_outputs o = {tok, NULL, NULL};
    cr_assert_eq(fls_sample_logits(ctx, &L, &p, &o), FLS_OK);
    for (int64_t b = 0; b < B; b++) {
        int64_t am = 0;
        for (int64_t v = 1; v < V; v++)
            am = l[b * V + v] > l[b * V + am] ? v : am;
        cr_assert(tok[b * draws] == am && tok[b * draws + 1] == am, "greedy row %lld", (long long)b);
    }
    int64_t big[B * draws * K + 3];
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        big[i] = -777;
    fls_params_default(&p);
    p.without_replacement_k = K;
    p.draws = draws;
    p.top_k = 2; /* 2 (or a few tied) tokens for 4 positions */
    o.tokens = big;
    cr_assert_eq(fls_sample_logits(ctx, &L, &p, &o), FLS_OK);
    for (int64_t i = 0; i < B * draws; i++) {
        cr_assert(big[i * K] >= 0 && big[i * K + 1] >= 0 && big[i * K] != big[i * K + 1]);
        for (int64_t j = 2; j < K; j++)
            cr_assert(big[i * K + j] == -1 || big[i * K + j] >= 0);
    }
    for (int i = 0; i < 3; i++)
        cr_assert_eq(big[B * draws * K + i], -777, "written past (B, draws, K)");
    free(l);
    fls_context_destroy(ctx);
}

/* Per-row parameters: each row sampled alone with its own scalars gives the
 * same tokens as the batch with arrays. */
Test(rules, per_row_parameters)
{
    uint64_t rng = 82;
    const int64_t B = 4, V = 500, draws = 2, K = 3;
    float *l = quarter_logits(B, V, &rng);
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 0);
    int64_t ks[4] = {0, 1, 7, 40}, wk[4] = {1, 2, 3, 3};
    float ps[4] = {1.0f, 0.5f, 0.9f, 0.99f}, mps[4] = {0.0f, 0.3f, 0.01f, 0.0f};
    double ns[4] = {0.0, 1.0, 0.0, 3.0};
    fls_params p;
    fls_params_default(&p);
    p.draws = draws;
    p.seed = 4;
    p.without_replacement_k = K;
    p.row_top_k = ks;
    p.row_top_p = ps;
    p.row_min_p = mps;
    p.row_without_replacement_k = wk;
    p.filter = "top-nsigma";
    p.row_filter_value = ns;
    int64_t all[4 * 2 * 3], one[2 * 3];
    fls_matrix L = {l, FLS_DTYPE_F32, B, V, V};
    fls_outputs o = {all, NULL, NULL};
    cr_assert_eq(fls_sample_logits(ctx, &L, &p, &o), FLS_OK);
    for (int64_t b = 0; b < B; b++) {
        fls_params q;
        fls_params_default(&q);
        q.draws = draws;
        uint64_t seed = fls_row_seed(4, (uint64_t)b);
        q.row_seeds = &seed;
        q.without_replacement_k = K;
        q.top_k = ks[b];
        q.top_p = ps[b];
        q.min_p = mps[b];
        q.filter = "top-nsigma";
        q.filter_value = ns[b];
        int64_t kb = wk[b];
        q.row_without_replacement_k = &kb;
        fls_matrix Lb = {l + b * V, FLS_DTYPE_F32, 1, V, V};
        fls_outputs ob = {one, NULL, NULL};
        cr_assert_eq(fls_sample_logits(ctx, &Lb, &q, &ob), FLS_OK);
        cr_assert_eq(memcmp(one, all + b * draws * K, sizeof one), 0, "row %lld", (long long)b);
        for (int64_t d = 0; d < draws; d++)
            for (int64_t j = wk[b]; j < K; j++)
                cr_assert_eq(all[(b * draws + d) * K + j], -1, "past the row's own K");
    }
    free(l);
    fls_context_destroy(ctx);
}

/* ---- top-p with the prefix sums computed ahead (the GPU list kernel) ---- */

#include "variants/filters.h"

static uint64_t tp_next(uint64_t *s)
{
    *s += 0x9E3779B97F4A7C15ull;
    return fls_splitmix64_(*s);
}

/* fls_top_p_cut with pw (bisection) and without (the loop) on lists with
 * many ties (multiples of 1/4), every c_prev among the list's values and
 * -inf, p from tiny to 1 and at the exact partial masses: the same cut and
 * the same verdict, case by case. */
Test(rules, top_p_prefix_sums_same_cut)
{
    enum { N = 96 };
    fls_top_entry e[N];
    double w[N], pw[N + 1];
    uint64_t s = 4242;
    int64_t cases = 0, bisected = 0;
    for (int rep = 0; rep < 300; rep++) {
        const int n = 1 + (int)(tp_next(&s) % N);
        float x = 8.0f;
        for (int i = 0; i < n; i++) {
            if (i > 0 && tp_next(&s) % 3 != 0)
                x -= 0.25f * (float)(1 + tp_next(&s) % 4); /* else a tie with the previous */
            e[i].x = x;
            e[i].pad_ = 0;
            e[i].v = i;
        }
        fls_filter_stats st;
        memset(&st, 0, sizeof st);
        st.m = e[0].x;
        st.lse_m = st.m;
        st.top = e;
        st.ntop = n;
        st.dropped = rep % 2 ? -INFINITY : e[n - 1].x - 0.25f;
        pw[0] = 0.0;
        for (int i = 0; i < n; i++) {
            w[i] = exp((double)e[i].x - st.m);
            pw[i + 1] = pw[i] + w[i];
        }
        st.lse_s = pw[n];
        st.w = w;
        for (int ci = -1; ci < n; ci += 1 + (int)(tp_next(&s) % 5)) {
            const float c_prev = ci < 0 ? -INFINITY : e[ci].x;
            for (int pi = 0; pi < 12; pi++) {
                double p = pi < 8 ? (double)(pi + 1) / 8.0 : (double)(tp_next(&s) >> 11) * 0x1p-53;
                if (pi == 11 && n > 1) /* exactly a partial mass over the whole list */
                    p = pw[1 + tp_next(&s) % (uint64_t)(n - 1)] / pw[n];
                if (!(p > 0.0))
                    p = 0x1p-40;
                float c0 = NAN, c1 = NAN;
                st.pw = NULL;
                const int r0 = fls_top_p_cut(&st, p, c_prev, &c0);
                st.pw = pw;
                const int r1 = fls_top_p_cut(&st, p, c_prev, &c1);
                cr_assert_eq(r0, r1, "rep %d c_prev %g p %.17g: verdict %d vs %d", rep, c_prev, p, r0, r1);
                if (r0 == FLS_CUT_OK)
                    cr_assert(c0 == c1 || (isnan(c0) && isnan(c1)), "rep %d c_prev %g p %.17g: cut %g vs %g",
                              rep, c_prev, p, c0, c1);
                cases++;
                bisected += r0 == FLS_CUT_OK && c_prev > -INFINITY;
            }
        }
    }
    cr_assert_gt(bisected, 1000, "only %lld decided cases", (long long)bisected);
    cr_log_info("top-p with prefix sums: %lld cases identical (%lld decided from the list)", (long long)cases,
                (long long)bisected);
}
