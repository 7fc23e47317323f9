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
 * is good when every bin expects >= 1000 samples, which the binning enforces
 * for three or more bins; two bins are tested exactly, see exact.c).
 * The power P(X^2 > c_alpha), c_alpha = gsl_cdf_chisq_Qinv(alpha, k - 1),
 * increases with lambda, so power(4 N TV^2) is a lower bound for every
 * alternative at that TV. It also decreases with k, so it is computed at the
 * dof of the bins the test really uses (fls_stats_design_size). The
 * noncentral tail is the Poisson mixture
 *     P(chi'^2_nu(lambda) > x) = sum_j e^{-lambda/2} (lambda/2)^j / j! Q_{nu + 2j}(x),
 * with Q the central tail (gsl_cdf_chisq_Q) and weights gsl_ran_poisson_pdf.
 * The smallest N with power >= 0.999 is then found by bisection over N.
 */
#include "stats/fls_stats.h"

#include <gsl/gsl_cdf.h>
#include <gsl/gsl_randist.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

double fls_stats_tv_caught(int dof, double alpha, int64_t n, double power)
{
    if (dof < 1 || n < 1)
        return INFINITY;
    const double c = gsl_cdf_chisq_Qinv(alpha, (double)dof);
    double lo = 0.0, hi = 1.0; /* noncentrality lambda* with power(lambda*) = power */
    while (fls_stats_ncx2_Q(c, (double)dof, hi) < power) {
        lo = hi;
        hi *= 2.0;
        if (hi > 1e12)
            return INFINITY;
    }
    for (int it = 0; it < 100 && hi - lo > 1e-9 * hi; it++) {
        double mid = 0.5 * (lo + hi);
        if (fls_stats_ncx2_Q(c, (double)dof, mid) >= power)
            hi = mid;
        else
            lo = mid;
    }
    return sqrt(hi / (4.0 * (double)n));
}

/* The design of a test. The bins of each group depend on N (three or more
 * bins must each expect >= FLS_STATS_MIN_EXPECTED), and what N must be
 * depends on the bins: the chi-square component (groups with >= 3 bins, their
 * dof summed) at level alpha / (c KAPPA) and each two-bin group's exact
 * binomial test at level alpha / c, c the number of components (gof's
 * Bonferroni combination). Any one group may carry the whole error, so the
 * test catches TV tv in one group when every component does: the chi-square
 * by the Cauchy-Schwarz bound at its dof, each binomial exactly on its two
 * masses. Starting from the bins of a very large N, N steps down to what the
 * bins at N require while the bins at the new N still require no more; every
 * accepted N satisfies tv_caught(N) <= tv at its own bins. A reference whose
 * mass is all on one token in every group (a point mass: T = 0, V = 1) is
 * tested by its impossible set alone: N = 688 makes a 1% leak visible with
 * probability 0.999. */
typedef struct layout {
    int dof, n_exact, bins;
    double min_mass;
    double *two; /* the smaller mass of each two-bin group */
} layout;

static fls_status layout_at(const double *ref, int64_t G, int64_t V, int64_t n, layout *L)
{
    L->dof = L->n_exact = L->bins = 0;
    L->min_mass = 1.0;
    for (int64_t g = 0; g < G; g++) {
        fls_bins b;
        fls_status st = fls_bins_build(&b, ref + g * V, V, n, FLS_STATS_MAX_BINS);
        if (st != FLS_OK)
            return st;
        L->bins += b.n_bins;
        for (int i = 0; i < b.n_bins; i++)
            L->min_mass = b.mass[i] < L->min_mass ? b.mass[i] : L->min_mass;
        if (b.n_bins == 2)
            L->two[L->n_exact++] = b.mass[1];
        else if (b.n_bins > 2)
            L->dof += b.n_bins - 1;
        fls_bins_free(&b);
    }
    return FLS_OK;
}

static int layout_components(const layout *L)
{
    int c = (L->dof > 0) + L->n_exact;
    return c > 0 ? c : 1;
}

/* TV caught with probability FLS_STATS_POWER by the test at this layout and n. */
static double layout_tv(const layout *L, int64_t n, double alpha)
{
    const double ac = alpha / (double)layout_components(L);
    double tv = 0.0;
    if (L->dof > 0)
        tv = fls_stats_tv_caught(L->dof, ac / FLS_STATS_CHI2_KAPPA, n, FLS_STATS_POWER);
    for (int i = 0; i < L->n_exact; i++) {
        double t = fls_stats_binom_tv_caught(1.0 - L->two[i], n, ac, FLS_STATS_POWER);
        tv = t > tv ? t : tv;
    }
    return tv;
}

/* N this layout needs for TV FLS_STATS_TV. */
static int64_t layout_needs(const layout *L, double alpha)
{
    const double ac = alpha / (double)layout_components(L);
    int64_t N = 0;
    if (L->dof > 0)
        N = fls_stats_sample_size(L->dof, ac / FLS_STATS_CHI2_KAPPA, FLS_STATS_TV, FLS_STATS_POWER);
    for (int i = 0; i < L->n_exact; i++) {
        int64_t n = fls_stats_binom_sample_size(1.0 - L->two[i], ac, FLS_STATS_TV, FLS_STATS_POWER);
        N = n > N ? n : N;
    }
    return N;
}

fls_status fls_stats_design_at(const double *ref, int64_t G, int64_t V, double alpha, int64_t N,
                               fls_gof_design *d)
{
    if (!ref || !d)
        return FLS_ERR_NULL;
    if (G < 1 || V < 1 || N < 1)
        return FLS_ERR_SIZE;
    layout L;
    L.two = malloc((size_t)G * sizeof(double));
    if (!L.two)
        return FLS_ERR_OUT_OF_MEMORY;
    fls_status st = layout_at(ref, G, V, N, &L);
    if (st == FLS_OK) {
        d->N = N;
        d->dof = L.dof;
        d->n_exact = L.n_exact;
        d->bins = L.bins;
        d->min_mass = L.min_mass;
        d->tv = L.dof + L.n_exact > 0 ? layout_tv(&L, N, alpha) : 1.0 - pow(1.0 - FLS_STATS_POWER, 1.0 / N);
    }
    free(L.two);
    return st;
}

fls_status fls_stats_design(const double *ref, int64_t G, int64_t V, double alpha, fls_gof_design *d)
{
    if (!ref || !d)
        return FLS_ERR_NULL;
    if (G < 1 || V < 1)
        return FLS_ERR_SIZE;
    layout L;
    L.two = malloc((size_t)G * sizeof(double));
    if (!L.two)
        return FLS_ERR_OUT_OF_MEMORY;
    int64_t N = (int64_t)1 << 34;
    fls_status st = layout_at(ref, G, V, N, &L);
    if (st == FLS_OK && L.dof + L.n_exact == 0) {
        N = fls_stats_sample_size_pointmass(FLS_STATS_TV, FLS_STATS_POWER);
    } else if (st == FLS_OK) {
        N = layout_needs(&L, alpha); /* the finest layout's need: an upper start */
        /* up while the bins at N need more (rarely: a coarser layout can need more) */
        for (int it = 0; it < 40 && st == FLS_OK; it++) {
            if ((st = layout_at(ref, G, V, N, &L)) != FLS_OK)
                break;
            int64_t need = layout_needs(&L, alpha);
            if (need <= N)
                break;
            N = need;
        }
        /* down while the bins at the smaller N still need no more */
        for (int it = 0; it < 40 && st == FLS_OK; it++) {
            int64_t n2 = layout_needs(&L, alpha);
            if (n2 >= N || n2 < 1)
                break;
            layout L2;
            L2.two = malloc((size_t)G * sizeof(double));
            if (!L2.two) {
                st = FLS_ERR_OUT_OF_MEMORY;
                break;
            }
            st = layout_at(ref, G, V, n2, &L2);
            int ok = st == FLS_OK && L2.dof + L2.n_exact > 0 && layout_needs(&L2, alpha) <= n2;
            free(L2.two);
            if (!ok)
                break;
            N = n2;
            st = layout_at(ref, G, V, N, &L);
        }
    }
    free(L.two);
    if (st != FLS_OK)
        return st;
    return fls_stats_design_at(ref, G, V, alpha, N, d);
}

fls_status fls_stats_design_size(const double *ref, int64_t G, int64_t V, double alpha, int64_t *N, int *dof)
{
    fls_gof_design d;
    fls_status st = fls_stats_design(ref, G, V, alpha, &d);
    if (st != FLS_OK)
        return st;
    *N = d.N;
    *dof = d.dof + d.n_exact;
    return FLS_OK;
}

/* ---- power against a known alternative ---- */

static double overlap(double a0, double a1, double b0, double b1)
{
    const double lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0.0;
}

fls_status fls_stats_gof_cells(const double *p, const double *q, int64_t B, int64_t V, int K, double *Q)
{
    if (!p || !q || !Q)
        return FLS_ERR_NULL;
    if (B < 1 || V < 1 || K < 1)
        return FLS_ERR_SIZE;
    double *start = malloc((size_t)V * sizeof(double));
    if (!start)
        return FLS_ERR_OUT_OF_MEMORY;
    memset(Q, 0, (size_t)K * sizeof(double));
    fls_status st = FLS_OK;
    for (int64_t b = 0; b < B && st == FLS_OK; b++) {
        const double *pb = p + b * V, *qb = q + b * V;
        if ((st = fls_stats_cdf_start(pb, V, start)) != FLS_OK)
            break;
        for (int64_t v = 0; v < V; v++) {
            if (!(pb[v] > 0.0) || !(qb[v] > 0.0))
                continue;
            const int j0 = (int)(start[v] * K), j1 = (int)((start[v] + pb[v]) * K);
            for (int j = j0; j <= j1 && j < K; j++)
                Q[j] += qb[v] * overlap(start[v], start[v] + pb[v], (double)j / K, (double)(j + 1) / K) /
                        pb[v] / (double)B;
        }
    }
    free(start);
    return st;
}

double fls_stats_cells_power(const double *Q, int K, int64_t n, double alpha)
{
    double lambda = 0.0;
    for (int j = 0; j < K; j++)
        lambda += (Q[j] - 1.0 / K) * (Q[j] - 1.0 / K) * K;
    return fls_stats_power(K - 1, alpha / FLS_STATS_CHI2_KAPPA, lambda * (double)n);
}

int fls_stats_equal_cells_for(int64_t n)
{
    const int64_t K = n / (int64_t)FLS_STATS_MIN_EXPECTED;
    return K > FLS_STATS_MAX_BINS ? FLS_STATS_MAX_BINS : K < 2 ? 2 : (int)K;
}

int fls_stats_pair_side(int64_t pairs)
{
    const int k = (int)floor(sqrt((double)pairs / FLS_STATS_MIN_EXPECTED));
    return k > 8 ? 8 : k < 2 ? 2 : k;
}

double fls_stats_cell_alt_power(const void *alt, int64_t N)
{
    const fls_stats_cell_alt *a = alt;
    return fls_stats_binom_power(N * a->B, a->m0, a->m1, a->alpha);
}

int64_t fls_stats_smallest_n(double (*power)(const void *ctx, int64_t N), const void *ctx, double target,
                             int64_t lo)
{
    int64_t hi = lo > 1 ? lo : 1;
    while (power(ctx, hi) < target) {
        lo = hi;
        hi *= 2;
        if (hi > ((int64_t)1 << 36))
            return -1;
    }
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (power(ctx, mid) >= target)
            hi = mid;
        else
            lo = mid;
    }
    return hi;
}
