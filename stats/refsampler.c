/*
 * refsampler.c — an independent reference sampler to test the tests: Walker's
 * alias method (Vose's construction) in double on gsl_rng_mt19937. It shares
 * no code with the engines (no Gumbel, no Philox), so the machinery can be
 * checked on samples whose distribution is known exactly.
 *
 * Why not gsl_ran_discrete: it draws one 32-bit uniform u and takes both the
 * column (u K) and the accept test (u < F) from it, so every token's
 * probability is a multiple of ~2^-32: tokens more than ~22 nats below the
 * head (p < 2^-32) come out with mass 0 or ~2^-32, a large relative error
 * that the tail tests at t = 25 can see. Here the column is an exact uniform
 * integer (gsl_rng_uniform_int) and the accept test uses an independent 53-bit
 * uniform, so a token's probability is exact to ~2^-53 / K.
 */
#include "stats/fls_stats.h"

#include <gsl/gsl_rng.h>
#include <stdlib.h>

struct fls_refsampler {
    gsl_rng *rng;
    int64_t K;
    double *prob; /* K entries: accept probability of column j */
    int64_t *alias;
};

fls_status fls_refsampler_create(fls_refsampler **s, const double *p, int64_t V, uint64_t seed)
{
    if (!s || !p)
        return FLS_ERR_NULL;
    if (V < 1 || V > (int64_t)0xffffffffu)
        return FLS_ERR_SIZE;
    double total = 0.0;
    for (int64_t v = 0; v < V; v++) {
        if (!(p[v] >= 0.0))
            return FLS_ERR_PARAM;
        total += p[v];
    }
    if (!(total > 0.0))
        return FLS_ERR_ALL_MASKED;
    fls_refsampler *r = calloc(1, sizeof *r);
    int64_t *small = malloc((size_t)V * sizeof(int64_t)), *large = malloc((size_t)V * sizeof(int64_t));
    double *q = malloc((size_t)V * sizeof(double));
    if (r) {
        r->rng = gsl_rng_alloc(gsl_rng_mt19937);
        r->prob = malloc((size_t)V * sizeof(double));
        r->alias = malloc((size_t)V * sizeof(int64_t));
    }
    if (!r || !r->rng || !r->prob || !r->alias || !small || !large || !q) {
        free(small);
        free(large);
        free(q);
        fls_refsampler_destroy(r);
        return FLS_ERR_OUT_OF_MEMORY;
    }
    r->K = V;
    /* Vose: q_v = V p_v / total; columns below 1 take their rest from one above 1 */
    int64_t ns = 0, nl = 0;
    for (int64_t v = 0; v < V; v++) {
        q[v] = (double)V * (p[v] / total);
        if (q[v] < 1.0)
            small[ns++] = v;
        else
            large[nl++] = v;
    }
    while (ns > 0 && nl > 0) {
        int64_t a = small[--ns], g = large[nl - 1];
        r->prob[a] = q[a]; /* a small column keeps its own probability exactly */
        r->alias[a] = g;
        q[g] = (q[g] + q[a]) - 1.0;
        if (q[g] < 1.0) {
            nl--;
            small[ns++] = g;
        }
    }
    while (nl > 0) { /* what is left is 1 up to rounding */
        int64_t g = large[--nl];
        r->prob[g] = 1.0;
        r->alias[g] = g;
    }
    while (ns > 0) {
        int64_t a = small[--ns];
        r->prob[a] = 1.0;
        r->alias[a] = a;
    }
    free(small);
    free(large);
    free(q);
    fls_refsampler_reseed(r, seed);
    *s = r;
    return FLS_OK;
}

void fls_refsampler_destroy(fls_refsampler *s)
{
    if (!s)
        return;
    if (s->rng)
        gsl_rng_free(s->rng);
    free(s->prob);
    free(s->alias);
    free(s);
}

void fls_refsampler_reseed(fls_refsampler *s, uint64_t seed)
{
    /* mt19937 takes an unsigned long; fold the high half in so 64-bit seeds differ. */
    gsl_rng_set(s->rng, (unsigned long)(seed ^ (seed >> 32)));
}

/* A uniform in [0, 1) with 53 random bits (two 32-bit outputs of mt19937). */
static double uniform53(gsl_rng *r)
{
    uint64_t a = gsl_rng_get(r) >> 5, b = gsl_rng_get(r) >> 6; /* 27 + 26 bits */
    return ((double)a * 67108864.0 + (double)b) * (1.0 / 9007199254740992.0);
}

int64_t fls_refsampler_draw(fls_refsampler *s)
{
    int64_t j = (int64_t)gsl_rng_uniform_int(s->rng, (unsigned long)s->K);
    return uniform53(s->rng) < s->prob[j] ? j : s->alias[j];
}

void fls_refsampler_counts(fls_refsampler *s, int64_t n, int64_t *counts)
{
    for (int64_t k = 0; k < n; k++)
        counts[fls_refsampler_draw(s)]++;
}
