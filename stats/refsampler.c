/*
 * refsampler.c — an independent reference sampler to test the tests:
 * gsl_ran_discrete (Walker's alias method) on gsl_rng_mt19937. It shares no
 * code with the engines (no Gumbel, no Philox), so the chi-square machinery can
 * be checked on samples whose distribution is known exactly.
 */
#include "fls_stats.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <stdlib.h>

struct fls_refsampler {
    gsl_rng *rng;
    gsl_ran_discrete_t *table;
};

fls_status fls_refsampler_create(fls_refsampler **s, const double *p, int64_t V, uint64_t seed)
{
    if (!s || !p)
        return FLS_ERR_NULL;
    if (V < 1)
        return FLS_ERR_SIZE;
    fls_refsampler *r = calloc(1, sizeof *r);
    if (!r)
        return FLS_ERR_OUT_OF_MEMORY;
    r->rng = gsl_rng_alloc(gsl_rng_mt19937);
    r->table = r->rng ? gsl_ran_discrete_preproc((size_t)V, p) : NULL;
    if (!r->table) {
        fls_refsampler_destroy(r);
        return FLS_ERR_OUT_OF_MEMORY;
    }
    fls_refsampler_reseed(r, seed);
    *s = r;
    return FLS_OK;
}

void fls_refsampler_destroy(fls_refsampler *s)
{
    if (!s)
        return;
    if (s->table)
        gsl_ran_discrete_free(s->table);
    if (s->rng)
        gsl_rng_free(s->rng);
    free(s);
}

void fls_refsampler_reseed(fls_refsampler *s, uint64_t seed)
{
    /* mt19937 takes an unsigned long; fold the high half in so 64-bit seeds differ. */
    gsl_rng_set(s->rng, (unsigned long)(seed ^ (seed >> 32)));
}

void fls_refsampler_counts(fls_refsampler *s, int64_t n, int64_t *counts)
{
    for (int64_t k = 0; k < n; k++)
        counts[gsl_ran_discrete(s->rng, s->table)]++;
}
