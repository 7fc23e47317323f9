/*
 * defects.c — the samplers of defects.h.
 *
 * The 24-bit Gumbel sampler, simulated exactly. The literal sampler draws
 * k_v uniform on [0, 2^24) for every token, G_v = -logf(-logf(k_v 2^-24))
 * (float32; k = 0 gives -inf) and returns argmax_v (l_v / T + G_v) in float,
 * lowest index on ties. G is non-decreasing in k and at most G(2^24 - 1) =
 * 16.64. The simulation evaluates the tokens within SHALLOW nats of the head
 * exactly as the literal loop does, which gives a best key K. A deeper token v
 * can reach K only if k_v >= c_v, for a c_v computed from the exact inverse of
 * G with a margin (so c_v is at most the true threshold): P(k_v >= c_v) = pi_v.
 * Thinning: each deep token is proposed with probability pi_max (the largest
 * pi_v, a binomial count of distinct tokens chosen uniformly) and kept with
 * probability pi_v / pi_max, so it is kept independently with probability
 * pi_v; a kept token gets k_v uniform on [c_v, 2^24) and its key is computed
 * exactly; the argmax over all evaluated tokens is the literal sampler's
 * token. So the tokens have exactly the literal loop's distribution (the
 * detection-table driver also runs the literal loop on the same logits), at
 * a cost of a few operations per draw instead of V.
 */
#include "tests/stats/defects.h"
#include "stats/fls_stats.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---- */

static fls_status row_probs(const gallery_input *in, int64_t b, double *p)
{
    return fls_stats_probs_temperature_f32(in->logits + b * in->V, in->V, (double)in->temps[b], p);
}

/* Exact sampling of (B, N) tokens from q (B x V) with the alias reference sampler. */
static fls_status alias_rows(const double *q, int64_t B, int64_t V, int64_t N, uint64_t seed, int64_t *tokens)
{
    for (int64_t b = 0; b < B; b++) {
        fls_refsampler *s;
        fls_status st = fls_refsampler_create(&s, q + b * V, V, seed * 1000003u + (uint64_t)b);
        if (st != FLS_OK)
            return st;
        for (int64_t n = 0; n < N; n++)
            tokens[b * N + n] = fls_refsampler_draw(s);
        fls_refsampler_destroy(s);
    }
    return FLS_OK;
}

typedef fls_status (*probs_fn)(const float *l, int64_t V, double T, double *q);

static fls_status sample_from(probs_fn f, double arg, const gallery_input *in, int64_t N, uint64_t seed,
                              int64_t *tokens)
{
    double *q = malloc((size_t)(in->B * in->V) * sizeof(double));
    if (!q)
        return FLS_ERR_OUT_OF_MEMORY;
    fls_status st = FLS_OK;
    for (int64_t b = 0; b < in->B && st == FLS_OK; b++) {
        if (f == (probs_fn)NULL)
            st = defect_probs_cut(in->logits + b * in->V, in->V, (double)in->temps[b], arg, q + b * in->V);
        else
            st = f(in->logits + b * in->V, in->V, (double)in->temps[b], q + b * in->V);
    }
    if (st == FLS_OK)
        st = alias_rows(q, in->B, in->V, N, seed, tokens);
    free(q);
    return st;
}

static fls_status exact_probs(const float *l, int64_t V, double T, double *q)
{
    return fls_stats_probs_temperature_f32(l, V, T, q);
}

/* ---- exact samplers ---- */

static fls_status engine_call(const gallery_input *in, int64_t N, const uint64_t *seeds,
                              const uint64_t *offsets, int64_t *tokens)
{
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    fls_context_t *ctx = NULL;
    fls_status st = fls_context_create(&ctx, &cfg);
    if (st != FLS_OK)
        return st;
    fls_matrix L = {in->logits, FLS_DTYPE_F32, in->B, in->V, in->V};
    fls_params p;
    fls_params_default(&p);
    p.temperature = in->temps;
    p.row_seeds = seeds;
    p.row_offsets = offsets;
    p.draws = N;
    fls_outputs out = {tokens, NULL, NULL};
    st = fls_sample_logits(ctx, &L, &p, &out);
    fls_context_destroy(ctx);
    return st;
}

fls_status sampler_ours(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    uint64_t *seeds = malloc((size_t)in->B * sizeof(uint64_t)),
             *offs = calloc((size_t)in->B, sizeof(uint64_t));
    if (!seeds || !offs) {
        free(seeds);
        free(offs);
        return FLS_ERR_OUT_OF_MEMORY;
    }
    for (int64_t b = 0; b < in->B; b++)
        seeds[b] = fls_row_seed(seed, (uint64_t)b);
    fls_status st = engine_call(in, N, seeds, offs, tokens);
    free(seeds);
    free(offs);
    return st;
}

fls_status sampler_alias(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    return sample_from(exact_probs, 0.0, in, N, seed, tokens);
}

fls_status sampler_gsl_discrete(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    double *p = malloc((size_t)in->V * sizeof(double));
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    fls_status st = p && r ? FLS_OK : FLS_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < in->B && st == FLS_OK; b++) {
        if ((st = row_probs(in, b, p)) != FLS_OK)
            break;
        gsl_ran_discrete_t *t = gsl_ran_discrete_preproc((size_t)in->V, p);
        if (!t) {
            st = FLS_ERR_OUT_OF_MEMORY;
            break;
        }
        gsl_rng_set(r, (unsigned long)(seed * 1000003u + (uint64_t)b));
        for (int64_t n = 0; n < N; n++)
            tokens[b * N + n] = (int64_t)gsl_ran_discrete(r, t);
        gsl_ran_discrete_free(t);
    }
    free(p);
    if (r)
        gsl_rng_free(r);
    return st;
}

/* ---- 24-bit Gumbel noise ---- */

#define U24     16777216.0 /* 2^24 */
#define SHALLOW 8.0        /* nats below the head evaluated literally */

static float g24(uint32_t k)
{
    float u = (float)k * (1.0f / 16777216.0f);
    return -logf(-logf(u)); /* k = 0: -log(+inf) = -inf */
}

fls_status sampler_gumbel24_literal(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    if (!r)
        return FLS_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < in->B; b++) {
        const float *l = in->logits + b * in->V;
        const float T = in->temps[b];
        gsl_rng_set(r, (unsigned long)(seed * 1000003u + (uint64_t)b));
        for (int64_t n = 0; n < N; n++) {
            float best = -INFINITY;
            int64_t arg = -1;
            for (int64_t v = 0; v < in->V; v++) {
                if (l[v] == -INFINITY)
                    continue;
                float key = l[v] / T + g24((uint32_t)(gsl_rng_get(r) >> 8));
                if (arg < 0 || key > best) {
                    best = key;
                    arg = v;
                }
            }
            tokens[b * N + n] = arg;
        }
    }
    gsl_rng_free(r);
    return FLS_OK;
}

typedef struct deep_tok {
    int64_t v;
    float x; /* l / T */
} deep_tok;

fls_status sampler_gumbel24(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    const int64_t V = in->V;
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    deep_tok *shallow = malloc((size_t)V * sizeof(deep_tok)), *deep = malloc((size_t)V * sizeof(deep_tok));
    if (!r || !shallow || !deep) {
        if (r)
            gsl_rng_free(r);
        free(shallow);
        free(deep);
        return FLS_ERR_OUT_OF_MEMORY;
    }
    const float gmax = g24((uint32_t)U24 - 1u);
    for (int64_t b = 0; b < in->B; b++) {
        const float *l = in->logits + b * V;
        const float T = in->temps[b];
        float xmax = -INFINITY;
        for (int64_t v = 0; v < V; v++)
            if (l[v] != -INFINITY && l[v] / T > xmax)
                xmax = l[v] / T;
        int64_t ns = 0, nd = 0;
        float dmax = -INFINITY; /* the shallowest deep token */
        for (int64_t v = 0; v < V; v++) {
            if (l[v] == -INFINITY)
                continue;
            const float x = l[v] / T;
            if ((double)x >= (double)xmax - SHALLOW)
                shallow[ns++] = (deep_tok){v, x};
            else {
                deep[nd++] = (deep_tok){v, x};
                dmax = x > dmax ? x : dmax;
            }
        }
        gsl_rng_set(r, (unsigned long)(seed * 1000003u + (uint64_t)b));
        for (int64_t n = 0; n < N; n++) {
            float best = -INFINITY;
            int64_t arg = -1;
            for (int64_t i = 0; i < ns; i++) {
                float key = shallow[i].x + g24((uint32_t)(gsl_rng_get(r) >> 8));
                if (arg < 0 || key > best || (key == best && shallow[i].v < arg)) {
                    best = key;
                    arg = shallow[i].v;
                }
            }
            if (nd > 0 && dmax + gmax >= best) {
                /* c(x) = smallest k whose G can bring x to best, less a margin:
                 * G(k) >= g  <=>  k >= 2^24 exp(-exp(-g)) */
#define CUT(x) (fmax(0.0, floor(U24 * exp(-exp(-((double)best - (double)(x)-1e-3)))) - 2.0))
                const double pimax = (U24 - CUT(dmax)) / U24;
                unsigned int cnt = gsl_ran_binomial(r, pimax, (unsigned int)nd);
                /* cnt distinct deep tokens, uniformly: partial Fisher-Yates on an index list */
                for (unsigned int c = 0; c < cnt; c++) {
                    int64_t j = c + (int64_t)gsl_rng_uniform_int(r, (unsigned long)(nd - c));
                    deep_tok t = deep[j];
                    deep[j] = deep[c];
                    deep[c] = t;
                }
                float best0 = best;
                for (unsigned int c = 0; c < cnt; c++) {
                    const deep_tok t = deep[c];
                    const double cv = floor(U24 * exp(-exp(-((double)best0 - (double)t.x - 1e-3)))) - 2.0;
                    const double cut = cv > 0.0 ? cv : 0.0;
                    const double pi = (U24 - cut) / U24;
                    if (gsl_rng_uniform(r) * pimax >= pi)
                        continue; /* thinned */
                    uint32_t k = (uint32_t)cut + (uint32_t)gsl_rng_uniform_int(r, (unsigned long)(U24 - cut));
                    float key = t.x + g24(k);
                    if (key > best || (key == best && t.v < arg)) {
                        best = key;
                        arg = t.v;
                    }
                }
#undef CUT
            }
            tokens[b * N + n] = arg;
        }
    }
    gsl_rng_free(r);
    free(shallow);
    free(deep);
    return FLS_OK;
}

/* ---- logits and temperature defects ---- */

fls_status defect_probs_fp16(const float *l, int64_t V, double T, double *q)
{
    float *h = malloc((size_t)V * sizeof(float));
    if (!h)
        return FLS_ERR_OUT_OF_MEMORY;
    for (int64_t v = 0; v < V; v++)
        h[v] = l[v] == -INFINITY ? l[v] : fls_f16_to_f32(fls_f32_to_f16(l[v]));
    fls_status st = fls_stats_probs_temperature_f32(h, V, T, q);
    free(h);
    return st;
}

fls_status defect_probs_temp_times(const float *l, int64_t V, double T, double *q)
{
    /* softmax(l * T) = softmax(l / (1 / T)) */
    return fls_stats_probs_temperature_f32(l, V, T > 0.0 ? 1.0 / T : 0.0, q);
}

static fls_status probs_temp_twice(const float *l, int64_t V, double T, double *q)
{
    return fls_stats_probs_temperature_f32(l, V, T * T, q);
}

fls_status defect_probs_cut(const float *l, int64_t V, double T, double t0, double *q)
{
    fls_status st = fls_stats_probs_temperature_f32(l, V, T, q);
    if (st != FLS_OK)
        return st;
    uint8_t *in = malloc((size_t)V);
    if (!in)
        return FLS_ERR_OUT_OF_MEMORY;
    const double m = fls_stats_tail_set(q, V, t0, in);
    for (int64_t v = 0; v < V; v++)
        q[v] = in[v] ? 0.0 : q[v] / (1.0 - m);
    free(in);
    return FLS_OK;
}

fls_status sampler_fp16_logits(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    return sample_from(defect_probs_fp16, 0.0, in, N, seed, tokens);
}

fls_status sampler_temp_times(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    return sample_from(defect_probs_temp_times, 0.0, in, N, seed, tokens);
}

fls_status sampler_temp_twice(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    return sample_from(probs_temp_twice, 0.0, in, N, seed, tokens);
}

fls_status sampler_cut15(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    return sample_from(NULL, 15.0, in, N, seed, tokens);
}

fls_status sampler_cut18(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    return sample_from(NULL, 18.0, in, N, seed, tokens);
}

/* ---- independence defects (through our engine) ---- */

fls_status sampler_reuse_noise(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    /* one draw per row, the same (seed, offset, draw) for every later "draw" */
    int64_t *one = malloc((size_t)in->B * sizeof(int64_t));
    uint64_t *seeds = malloc((size_t)in->B * sizeof(uint64_t)),
             *offs = calloc((size_t)in->B, sizeof(uint64_t));
    fls_status st = one && seeds && offs ? FLS_OK : FLS_ERR_OUT_OF_MEMORY;
    if (st == FLS_OK) {
        for (int64_t b = 0; b < in->B; b++)
            seeds[b] = fls_row_seed(seed, (uint64_t)b);
        st = engine_call(in, 1, seeds, offs, one);
    }
    if (st == FLS_OK)
        for (int64_t b = 0; b < in->B; b++)
            for (int64_t n = 0; n < N; n++)
                tokens[b * N + n] = one[b];
    free(one);
    free(seeds);
    free(offs);
    return st;
}

fls_status sampler_seed_ignores_row(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    uint64_t *seeds = malloc((size_t)in->B * sizeof(uint64_t)),
             *offs = calloc((size_t)in->B, sizeof(uint64_t));
    if (!seeds || !offs) {
        free(seeds);
        free(offs);
        return FLS_ERR_OUT_OF_MEMORY;
    }
    for (int64_t b = 0; b < in->B; b++)
        seeds[b] = seed; /* the request's seed, not derived per row */
    fls_status st = engine_call(in, N, seeds, offs, tokens);
    free(seeds);
    free(offs);
    return st;
}

/* ---- keys in bf16: ties, broken toward the lowest index ---- */

static float to_bf16(float x)
{
    return fls_bf16_to_f32(fls_f32_to_bf16(x));
}

fls_status sampler_bf16_keys(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    if (!r)
        return FLS_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < in->B; b++) {
        const float *l = in->logits + b * in->V;
        const double T = (double)in->temps[b];
        gsl_rng_set(r, (unsigned long)(seed * 1000003u + (uint64_t)b));
        for (int64_t n = 0; n < N; n++) {
            float best = -INFINITY;
            int64_t arg = -1;
            for (int64_t v = 0; v < in->V; v++) {
                if (l[v] == -INFINITY)
                    continue;
                double u = (gsl_rng_uniform_pos(r) + gsl_rng_uniform(r) * 2.3283064365386963e-10);
                float key = to_bf16((float)((double)l[v] / T - log(-log(u))));
                if (arg < 0 || key > best) {
                    best = key;
                    arg = v;
                }
            }
            tokens[b * N + n] = arg;
        }
    }
    gsl_rng_free(r);
    return FLS_OK;
}
