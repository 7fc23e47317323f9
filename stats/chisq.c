/*
 * chisq.c — Pearson's chi-square on binned counts.
 */
#include "fls_stats.h"

#include <gsl/gsl_cdf.h>
#include <math.h>
#include <stdlib.h>

void fls_gof_init(fls_gof *g)
{
    g->chi2 = 0.0;
    g->dof = 0;
    g->p = 1.0;
    g->n = 0;
    g->impossible = 0;
}

static void gof_update_p(fls_gof *g)
{
    if (g->impossible > 0)
        g->p = 0.0;
    else if (g->dof > 0)
        g->p = gsl_cdf_chisq_Q(g->chi2, (double)g->dof);
    else
        g->p = 1.0;
}

fls_status fls_gof_add_counts(fls_gof *g, const fls_bins *bins, const int64_t *counts, int64_t out_of_range)
{
    if (!g || !bins || !counts || !bins->bin_of)
        return FLS_ERR_NULL;
    int64_t *obs = calloc((size_t)bins->n_bins, sizeof(int64_t));
    if (!obs)
        return FLS_ERR_OUT_OF_MEMORY;
    int64_t n = out_of_range, impossible = out_of_range;
    for (int64_t i = 0; i < bins->cells; i++) {
        if (counts[i] == 0)
            continue;
        n += counts[i];
        if (bins->bin_of[i] < 0)
            impossible += counts[i];
        else
            obs[bins->bin_of[i]] += counts[i];
    }
    /* Expected counts use the samples actually drawn in this group. */
    double chi2 = 0.0;
    for (int b = 0; b < bins->n_bins; b++) {
        double e = (double)n * bins->mass[b];
        double d = (double)obs[b] - e;
        chi2 += d * d / e;
    }
    free(obs);
    g->chi2 += chi2;
    g->dof += bins->n_bins - 1;
    g->n += n;
    g->impossible += impossible;
    gof_update_p(g);
    return FLS_OK;
}

fls_status fls_gof_add_samples(fls_gof *g, const fls_bins *bins, const int64_t *samples, int64_t n)
{
    if (!g || !bins || (!samples && n > 0))
        return FLS_ERR_NULL;
    int64_t *counts = calloc((size_t)bins->cells, sizeof(int64_t));
    if (!counts)
        return FLS_ERR_OUT_OF_MEMORY;
    int64_t oor = 0;
    for (int64_t k = 0; k < n; k++) {
        if (samples[k] < 0 || samples[k] >= bins->cells)
            oor++;
        else
            counts[samples[k]]++;
    }
    fls_status st = fls_gof_add_counts(g, bins, counts, oor);
    free(counts);
    return st;
}

int fls_gof_pass(const fls_gof *g, double alpha)
{
    return g->impossible == 0 && g->p >= alpha;
}
