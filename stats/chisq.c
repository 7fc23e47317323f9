/*
 * chisq.c — the goodness-of-fit test on binned counts: Pearson's chi-square
 * over the groups with three or more bins (every bin expecting >= 1000), an
 * exact binomial test for each group with two bins, combined by Bonferroni.
 */
#include "stats/fls_stats.h"

#include <gsl/gsl_cdf.h>
#include <math.h>
#include <stdlib.h>

void fls_gof_init(fls_gof *g)
{
    g->chi2 = 0.0;
    g->dof = 0;
    g->chi2_part = 0.0;
    g->n_exact = 0;
    g->p_exact_min = 1.0;
    g->bins = 0;
    g->min_mass = 1.0;
    g->p = 1.0;
    g->n = 0;
    g->impossible = 0;
}

int fls_gof_components(const fls_gof *g)
{
    int c = (g->dof > 0) + g->n_exact;
    return c > 0 ? c : 1;
}

static void gof_update_p(fls_gof *g)
{
    if (g->impossible > 0) {
        g->p = 0.0;
        return;
    }
    double p = 1.0;
    if (g->dof > 0) {
        p = FLS_STATS_CHI2_KAPPA * gsl_cdf_chisq_Q(g->chi2_part, (double)g->dof);
        p = p > 1.0 ? 1.0 : p;
    }
    if (g->n_exact > 0 && g->p_exact_min < p)
        p = g->p_exact_min;
    p *= (double)fls_gof_components(g);
    g->p = p > 1.0 ? 1.0 : p;
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
    /* Expected counts use the samples actually drawn in this group (in range). */
    const int64_t n_in = n - impossible;
    double chi2 = 0.0;
    for (int b = 0; b < bins->n_bins; b++) {
        double e = (double)n_in * bins->mass[b];
        double d = (double)obs[b] - e;
        chi2 += e > 0.0 ? d * d / e : 0.0;
        if (bins->mass[b] < g->min_mass)
            g->min_mass = bins->mass[b];
    }
    g->chi2 += chi2;
    g->bins += bins->n_bins;
    if (bins->n_bins == 2) {
        double pe = n_in > 0 ? fls_stats_binom_test(obs[1], n_in, bins->mass[1]) : 1.0;
        g->n_exact++;
        if (pe < g->p_exact_min)
            g->p_exact_min = pe;
    } else if (bins->n_bins > 2) {
        g->chi2_part += chi2;
        g->dof += bins->n_bins - 1;
    }
    free(obs);
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
