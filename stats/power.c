/*
 * power.c — power of the chi-square test and the sample sizes it dictates.
 *
 * Derivation. Let p be the reference distribution over k bins and q the
 * distribution the sampler really has, with total variation
 * TV = 1/2 sum_i |q_i - p_i|. By Cauchy-Schwarz,
 *     (sum_i |q_i - p_i|)^2 = (sum_i (|q_i - p_i| / sqrt(p_i)) sqrt(p_i))^2
 *                          <= sum_i (q_i - p_i)^2 / p_i * sum_i p_i,
 * so  delta^2 := sum_i (q_i - p_i)^2 / p_i >= (2 TV)^2. (Equality holds when
 * |q_i - p_i| is proportional to p_i: mass moved proportionally from bins
 * holding half the mass to the other half — the self-tests use exactly that
 * worst case.) Under q, Pearson's X^2 from N samples is asymptotically
 * noncentral chi-square with k - 1 degrees of freedom and noncentrality
 * lambda = N delta^2 >= 4 N TV^2 (Cochran 1952; Mitra 1958; the approximation
 * is good when every bin expects >= 100 samples, which the binning enforces).
 * The power P(X^2 > c_alpha), c_alpha = gsl_cdf_chisq_Qinv(alpha, k - 1),
 * increases with lambda, so power(4 N TV^2) is a lower bound for every
 * alternative at that TV. It also decreases with k, so it is computed at the
 * dof of the bins the test really uses (fls_stats_design_size). The
 * noncentral tail is the Poisson mixture
 *     P(chi'^2_nu(lambda) > x) = sum_j e^{-lambda/2} (lambda/2)^j / j! Q_{nu + 2j}(x),
 * with Q the central tail (gsl_cdf_chisq_Q) and weights gsl_ran_poisson_pdf.
 * The smallest N with power >= 0.999 is then found by bisection over N.
 */
#include "fls_stats.h"

#include <gsl/gsl_cdf.h>
#include <gsl/gsl_randist.h>
#include <math.h>

double fls_stats_ncx2_Q(double x, double dof, double lambda)
{
    if (lambda <= 0.0)
        return gsl_cdf_chisq_Q(x, dof);
    const double mu = lambda / 2.0;
    /* Terms beyond mu + 12 sqrt(mu) + 40 carry Poisson mass < 1e-15, and each
     * central tail is <= 1, so truncation costs < 1e-15. Start at the mode and
     * walk both ways so no weight underflows before it matters. */
    const unsigned jmode = (unsigned)mu;
    const unsigned jmax = (unsigned)(mu + 12.0 * sqrt(mu) + 40.0);
    double s = 0.0;
    for (unsigned j = jmode + 1; j-- > 0;) {
        double w = gsl_ran_poisson_pdf(j, mu);
        s += w * gsl_cdf_chisq_Q(x, dof + 2.0 * j);
        if (w < 1e-18 && j < jmode)
            break;
    }
    for (unsigned j = jmode + 1; j <= jmax; j++) {
        double w = gsl_ran_poisson_pdf(j, mu);
        s += w * gsl_cdf_chisq_Q(x, dof + 2.0 * j);
        if (w < 1e-18)
            break;
    }
    return s > 1.0 ? 1.0 : s;
}

double fls_stats_power(int dof, double alpha, double lambda)
{
    if (dof < 1)
        return 0.0;
    double c = gsl_cdf_chisq_Qinv(alpha, (double)dof);
    return fls_stats_ncx2_Q(c, (double)dof, lambda);
}

int64_t fls_stats_sample_size(int dof, double alpha, double tv, double power)
{
    if (dof < 1 || !(alpha > 0.0 && alpha < 1.0) || !(tv > 0.0 && tv <= 1.0) || !(power > 0.0 && power < 1.0))
        return -1;
    const double c = gsl_cdf_chisq_Qinv(alpha, (double)dof);
    const double per_sample = 4.0 * tv * tv; /* lambda per sample, the Cauchy-Schwarz bound */
    int64_t lo = 0, hi = 1;
    while (fls_stats_ncx2_Q(c, (double)dof, per_sample * (double)hi) < power) {
        lo = hi;
        hi *= 2;
        if (hi > ((int64_t)1 << 40))
            return -1;
    }
    while (hi - lo > 1) { /* power(lo) < target <= power(hi) */
        int64_t mid = lo + (hi - lo) / 2;
        if (fls_stats_ncx2_Q(c, (double)dof, per_sample * (double)mid) >= power)
            hi = mid;
        else
            lo = mid;
    }
    return hi;
}

int64_t fls_stats_sample_size_pointmass(double tv, double power)
{
    if (!(tv > 0.0 && tv < 1.0) || !(power > 0.0 && power < 1.0))
        return -1;
    /* P(no sample off the argmax in N draws) = (1 - tv)^N <= 1 - power. */
    return (int64_t)ceil(log1p(-power) / log1p(-tv));
}

/* The sample size of a test. The bins of each group depend on N (a bin must
 * expect >= 100 samples) and N on their dof (summed over groups; any one group
 * may carry the whole error). Start from the largest N any case can need
 * (G (K - 1) dof) and step N <- sample_size(dof(bins at N)) while that keeps
 * dof >= 1; the dof can only fall as N falls, so this stops within a few steps
 * at an N whose bins have dof d with N >= sample_size(d): power >= 0.999
 * against TV 0.01 for the bins actually used (the final bins are built for
 * this N; more samples only raise every expected count). A reference whose
 * mass is all in one bin (a point mass: T = 0, V = 1) is tested by its
 * impossible set alone: N = 688 makes a 1% leak visible with probability 0.999. */
static fls_status bins_dof(const double *ref, int64_t G, int64_t V, int64_t n, int *dof)
{
    *dof = 0;
    for (int64_t g = 0; g < G; g++) {
        fls_bins b;
        fls_status st = fls_bins_build(&b, ref + g * V, V, n, FLS_STATS_MAX_BINS);
        if (st != FLS_OK)
            return st;
        *dof += b.n_bins - 1;
        fls_bins_free(&b);
    }
    return FLS_OK;
}

fls_status fls_stats_design_size(const double *ref, int64_t G, int64_t V, double alpha, int64_t *N, int *dof)
{
    int64_t n =
        fls_stats_sample_size((int)G * (FLS_STATS_MAX_BINS - 1), alpha, FLS_STATS_TV, FLS_STATS_POWER);
    int d = 0;
    fls_status st = bins_dof(ref, G, V, n, &d);
    if (st != FLS_OK)
        return st;
    while (d > 0) {
        int64_t n2 = fls_stats_sample_size(d, alpha, FLS_STATS_TV, FLS_STATS_POWER);
        int d2 = 0;
        if (n2 >= n || (st = bins_dof(ref, G, V, n2, &d2)) != FLS_OK || d2 == 0)
            break;
        n = n2;
        d = d2;
    }
    if (st != FLS_OK)
        return st;
    *dof = d;
    *N = d > 0 ? n : fls_stats_sample_size_pointmass(FLS_STATS_TV, FLS_STATS_POWER);
    return FLS_OK;
}
