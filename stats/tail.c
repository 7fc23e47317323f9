/*
 * tail.c — the deep-tail test: the number of samples more than t nats below
 * the row's head (its most likely token) against the exact mass there.
 *
 * Why a test of its own: the global test's bins hold >= 1/32 of the mass (or
 * >= 1000 expected samples), so a tail of mass 1e-4 is a small part of one bin
 * and a 10% deficit there moves that bin by 1e-5: invisible. The defects that
 * live in the tail are exactly those: uniforms of 24 bits cap the Gumbel noise
 * at -log(-log(1 - 2^-24)) = 16.6, so tokens more than ~17 nats below the head
 * lose most of their mass and those beyond ~19.5 can never win; truncated
 * candidate lists drop tails outright. Counting the samples that land in the
 * tail, against the tail's exact mass, sees them directly: the count is
 * binomial (a sum of binomials over groups with their own reference), and the
 * test is exact (exact.c).
 *
 * What it resolves. A deficit of relative size r in a tail of mass m is caught
 * with probability 0.999 at level alpha when n m is large enough: about
 * ((z_{alpha/2} + z_{0.001} sqrt(1 - r)) / r)^2 expected tail samples (~6500
 * for r = 10% at alpha ~ 1e-7). Each such sample costs the sampler ~e^t / (its
 * tail tokens' share) token evaluations, so deep thresholds are expensive: at
 * t = 20 one tail sample costs ~5e8 evaluations. Every test reports what it
 * resolves (deficit and excess caught with probability 0.999) at the size it
 * ran; a tail expecting fewer than ~16 samples can show no deficit at all
 * (only an excess).
 */
#include "stats/fls_stats.h"

#include <gsl/gsl_cdf.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const double fls_stats_tail_t[FLS_STATS_N_TAILS] = {10.0, 15.0, 20.0, 25.0};

double fls_stats_tail_set(const double *p, int64_t V, double t, uint8_t *in_tail)
{
    double pmax = 0.0;
    for (int64_t v = 0; v < V; v++)
        pmax = p[v] > pmax ? p[v] : pmax;
    if (!(pmax > 0.0)) {
        if (in_tail)
            memset(in_tail, 0, (size_t)V);
        return 0.0;
    }
    /* p_v < p_max e^-t, compared in logs so that no threshold underflows */
    const double lcut = log(pmax) - t;
    double m = 0.0, comp = 0.0;
    for (int64_t v = 0; v < V; v++) {
        int in = p[v] > 0.0 && log(p[v]) < lcut;
        if (in_tail)
            in_tail[v] = (uint8_t)in;
        if (in) { /* Kahan: many tiny terms */
            double y = p[v] - comp, s = m + y;
            comp = (s - m) - y;
            m = s;
        }
    }
    return m;
}

double fls_stats_tail_mass(const double *p, int64_t V, double t)
{
    return fls_stats_tail_set(p, V, t, NULL);
}

double fls_stats_tail_deficit_caught(double m, int64_t n, double alpha, double power)
{
    if (n <= 0 || !(m > 0.0) || !(m < 1.0))
        return INFINITY;
    if (fls_stats_binom_power(n, m, 0.0, alpha) < power)
        return INFINITY;
    double a = 0.0, b = 1.0;
    for (int it = 0; it < 50; it++) {
        double c = 0.5 * (a + b);
        if (fls_stats_binom_power(n, m, m * (1.0 - c), alpha) >= power)
            b = c;
        else
            a = c;
    }
    return b;
}

double fls_stats_tail_excess_caught(double m, int64_t n, double alpha, double power)
{
    if (n <= 0 || !(m > 0.0) || !(m < 1.0))
        return INFINITY;
    const double rmax = (1.0 - m) / m;
    if (fls_stats_binom_power(n, m, 1.0, alpha) < power)
        return INFINITY;
    double a = 0.0, b = rmax;
    for (int it = 0; it < 80 && b - a > 1e-9 * (1.0 + a); it++) {
        double c = 0.5 * (a + b);
        if (fls_stats_binom_power(n, m, m * (1.0 + c), alpha) >= power)
            b = c;
        else
            a = c;
    }
    return b;
}

int64_t fls_stats_tail_sample_size(double m, double r, double alpha, double power)
{
    if (!(m > 0.0 && m < 1.0) || !(r > 0.0 && r <= 1.0))
        return -1;
    int64_t lo = 0, hi = 1;
    while (fls_stats_binom_power(hi, m, m * (1.0 - r), alpha) < power) {
        lo = hi;
        hi *= 2;
        if (hi > ((int64_t)1 << 42))
            return -1;
    }
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (fls_stats_binom_power(mid, m, m * (1.0 - r), alpha) >= power)
            hi = mid;
        else
            lo = mid;
    }
    return hi;
}

/* Normal approximation of the resolution of the sum over groups: the smallest
 * r with r mu >= z_a s0 + z_b s1(r) (deficit; excess with the signs turned). */
static double sum_resolution(const int64_t *n, const double *m, int64_t G, double alpha, double power,
                             int excess)
{
    double mu = 0.0, s0 = 0.0;
    for (int64_t g = 0; g < G; g++) {
        mu += (double)n[g] * m[g];
        s0 += (double)n[g] * m[g] * (1.0 - m[g]);
    }
    if (!(mu > 0.0))
        return INFINITY;
    const double za = gsl_cdf_ugaussian_Qinv(alpha / 2.0), zb = gsl_cdf_ugaussian_Qinv(1.0 - power);
    double r = 0.5;
    for (int it = 0; it < 100; it++) {
        double s1 = 0.0;
        for (int64_t g = 0; g < G; g++) {
            double q = m[g] * (excess ? 1.0 + r : 1.0 - r);
            q = q > 1.0 ? 1.0 : q < 0.0 ? 0.0 : q;
            s1 += (double)n[g] * q * (1.0 - q);
        }
        double rn = (za * sqrt(s0) + zb * sqrt(s1)) / mu;
        if (fabs(rn - r) < 1e-9)
            break;
        r = rn;
    }
    return !excess && r > 1.0 ? INFINITY : r;
}

void fls_stats_tail_resolution(const int64_t *n, const double *m, int64_t G, double alpha, double power,
                               double *deficit, double *excess)
{
    int64_t active = 0, last = -1;
    for (int64_t g = 0; g < G; g++)
        if (m[g] > 0.0 && n[g] > 0) {
            active++;
            last = g;
        }
    if (active == 1) {
        *deficit = fls_stats_tail_deficit_caught(m[last], n[last], alpha, power);
        *excess = fls_stats_tail_excess_caught(m[last], n[last], alpha, power);
    } else if (active > 1) {
        *deficit = sum_resolution(n, m, G, alpha, power, 0);
        *excess = sum_resolution(n, m, G, alpha, power, 1);
    } else {
        *deficit = *excess = INFINITY;
    }
}

fls_status fls_stats_tail_test(const double *ref, const int64_t *counts, const int64_t *n, int64_t G,
                               int64_t V, double t, double alpha, fls_tail_result *r)
{
    if (!ref || !counts || !n || !r)
        return FLS_ERR_NULL;
    if (G < 1 || V < 1 || G > 1000000000)
        return FLS_ERR_SIZE;
    memset(r, 0, sizeof *r);
    r->t = t;
    uint8_t *in = malloc((size_t)V);
    double *m = malloc((size_t)G * sizeof(double));
    int64_t *k = calloc((size_t)G, sizeof(int64_t));
    if (!in || !m || !k) {
        free(in);
        free(m);
        free(k);
        return FLS_ERR_OUT_OF_MEMORY;
    }
    int64_t ntot = 0;
    for (int64_t g = 0; g < G; g++) {
        m[g] = fls_stats_tail_set(ref + g * V, V, t, in);
        for (int64_t v = 0; v < V; v++)
            if (in[v])
                k[g] += counts[g * V + v];
        r->expected += (double)n[g] * m[g];
        r->observed += k[g];
        ntot += n[g];
    }
    r->n = ntot;
    r->mass = ntot > 0 ? r->expected / (double)ntot : 0.0;
    r->p = fls_stats_binsum_test((int)G, n, m, k, &r->bonferroni);
    fls_stats_tail_resolution(n, m, G, alpha, FLS_STATS_POWER, &r->deficit, &r->excess);
    free(in);
    free(m);
    free(k);
    return isnan(r->p) ? FLS_ERR_OUT_OF_MEMORY : FLS_OK;
}
