/*
 * binning.c — equal-mass bins for the goodness-of-fit tests.
 *
 * Why bins at all: the chi-square approximation of Pearson's statistic needs
 * every expected count large, and a vocabulary of 2^18 tokens with N = 3e5
 * samples has most tokens expecting far less than one sample. How large: at
 * the levels a run uses (alpha ~ 1e-8 .. 1e-4) a bin expecting 100 makes the
 * real false-failure rate of a two-bin chi-square 2.4-2.7x alpha and of a
 * three-bin one 1.6-2x alpha (exact enumeration); at 1000 expected the
 * three-bin excess is <= 15%, which FLS_STATS_CHI2_KAPPA absorbs. So a test of
 * three or more bins has every bin expecting >= FLS_STATS_MIN_EXPECTED = 1000,
 * and two bins are tested exactly (binomial), whatever their counts. Why equal
 * mass: with at most max_bins bins the degrees of freedom are bounded (dof <=
 * max_bins - 1), and bins of equal mass are where the chi-square approximation
 * is best. Why sorted by probability: tokens of similar probability share a
 * bin, so the far tail (thousands of tokens each expecting 1e-3 samples) is one
 * or a few bins and is tested as a whole — merged, never dropped (the tail
 * tests of tail.c look at it on its own).
 */
#include "stats/fls_stats.h"

#include <math.h>
#include <stdlib.h>

typedef struct cell_p {
    double p;
    int64_t i;
} cell_p;

static int by_prob_desc(const void *a, const void *b)
{
    const cell_p *x = a, *y = b;
    if (x->p != y->p)
        return x->p > y->p ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

void fls_bins_free(fls_bins *bins)
{
    if (!bins)
        return;
    free(bins->bin_of);
    free(bins->mass);
    bins->bin_of = NULL;
    bins->mass = NULL;
    bins->n_bins = 0;
}

fls_status fls_bins_build(fls_bins *bins, const double *p, int64_t cells, int64_t n, int max_bins)
{
    if (!bins || !p)
        return FLS_ERR_NULL;
    if (cells < 1 || n < 1 || max_bins < 1 || cells > INT64_MAX / 2)
        return FLS_ERR_SIZE;
    bins->cells = cells;
    bins->n = n;
    bins->n_bins = 0;
    bins->impossible_mass = 0.0;
    bins->bin_of = malloc((size_t)cells * sizeof(int32_t));
    bins->mass = malloc((size_t)(max_bins + 1) * sizeof(double));
    cell_p *order = malloc((size_t)cells * sizeof(cell_p));
    if (!bins->bin_of || !bins->mass || !order) {
        free(order);
        fls_bins_free(bins);
        return FLS_ERR_OUT_OF_MEMORY;
    }
    int64_t npos = 0;
    double total = 0.0;
    for (int64_t i = 0; i < cells; i++) {
        if (!(p[i] >= 0.0) || !isfinite(p[i])) {
            free(order);
            fls_bins_free(bins);
            return FLS_ERR_PARAM;
        }
        bins->bin_of[i] = -1;
        if (p[i] > 0.0) {
            order[npos].p = p[i];
            order[npos].i = i;
            npos++;
            total += p[i];
        }
    }
    if (npos == 0) {
        free(order);
        fls_bins_free(bins);
        return FLS_ERR_ALL_MASKED;
    }
    qsort(order, (size_t)npos, sizeof(cell_p), by_prob_desc);

    /* Target mass per bin, relative to the total (p need not sum to exactly 1). */
    const double min_mass = FLS_STATS_MIN_EXPECTED / (double)n;
    double target = 1.0 / (double)max_bins;
    if (target < min_mass)
        target = min_mass;
    /* relative slack so that k tokens of mass exactly 1/k make k bins despite rounding in the sums */
    target *= total * (1.0 - 1e-12);
    const double min_abs = min_mass * total;

    int nb = 0;
    double acc = 0.0;
    int64_t start = 0; /* first cell of the open group in `order` */
    for (int64_t k = 0; k < npos; k++) {
        acc += order[k].p;
        if (acc >= target && nb < max_bins) {
            for (int64_t j = start; j <= k; j++)
                bins->bin_of[order[j].i] = nb;
            bins->mass[nb++] = acc;
            acc = 0.0;
            start = k + 1;
        }
    }
    if (start < npos) { /* the leftover group: the lightest tokens */
        int own = nb == 0 || (acc >= min_abs && nb < max_bins);
        int b = own ? nb : nb - 1;
        for (int64_t j = start; j < npos; j++)
            bins->bin_of[order[j].i] = b;
        if (own)
            bins->mass[nb++] = acc;
        else
            bins->mass[b] += acc;
    }
    /* One bin and two or more tokens: two bins for the exact binomial test, the
     * most likely tokens up to half the mass (at least one) and the rest. */
    if (nb == 1 && npos >= 2) {
        double head = 0.0, rest = 0.0; /* each summed on its own: a 1e-12 rest is not total - head */
        int64_t k = 0;
        while (k < npos - 1 && (k == 0 || head < 0.5 * total)) {
            head += order[k].p;
            bins->bin_of[order[k].i] = 0;
            k++;
        }
        for (int64_t j = k; j < npos; j++) {
            rest += order[j].p;
            bins->bin_of[order[j].i] = 1;
        }
        bins->mass[0] = head;
        bins->mass[1] = rest;
        nb = 2;
    }
    for (int b = 0; b < nb; b++)
        bins->mass[b] /= total;
    bins->n_bins = nb;
    free(order);
    return FLS_OK;
}
