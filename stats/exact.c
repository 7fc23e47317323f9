/*
 * exact.c — exact binomial tests, their power, and the exact test of a sum of
 * independent binomials.
 *
 * The two-sided binomial p-value is the doubled smaller tail,
 *     p(k) = min(1, 2 min(P(X <= k), P(X >= k))),
 * whose size is at most alpha at every alpha: the test rejects only where one
 * tail is below alpha/2. Tails are incomplete beta functions in double
 * (P(X <= k) = I_{1-m}(n - k, k + 1)), so n is not limited to 32 bits.
 *
 * Power. The rejection region of the level-alpha test is {k <= k_lo} u
 * {k >= k_hi} (k_lo the largest k with P0(X <= k) < alpha/2, k_hi the smallest
 * with P0(X >= k) < alpha/2, found by bisection); the power under m1 is
 * P1(X <= k_lo) + P1(X >= k_hi), exactly.
 */
#include "stats/fls_stats.h"

#include <gsl/gsl_cdf.h>
#include <math.h>
#include <stdlib.h>

/* P(X <= k), X ~ Bin(n, m), 0 < m < 1. */
static double binom_P(int64_t k, int64_t n, double m)
{
    if (k < 0)
        return 0.0;
    if (k >= n)
        return 1.0;
    return gsl_cdf_beta_Q(m, (double)k + 1.0, (double)(n - k));
}

/* P(X >= k). */
static double binom_Qge(int64_t k, int64_t n, double m)
{
    if (k <= 0)
        return 1.0;
    if (k > n)
        return 0.0;
    return gsl_cdf_beta_P(m, (double)k, (double)(n - k) + 1.0);
}

double fls_stats_binom_test(int64_t k, int64_t n, double m)
{
    if (n <= 0)
        return 1.0;
    if (k < 0 || k > n)
        return 0.0;
    if (!(m > 0.0))
        return k == 0 ? 1.0 : 0.0;
    if (!(m < 1.0))
        return k == n ? 1.0 : 0.0;
    double lo = binom_P(k, n, m), hi = binom_Qge(k, n, m);
    double p = 2.0 * (lo < hi ? lo : hi);
    return p > 1.0 ? 1.0 : p;
}

/* The rejection region {k <= lo} u {k >= hi} of the level-alpha test. */
typedef struct region {
    int64_t lo; /* -1: no lower part */
    int64_t hi; /* n + 1: no upper part */
} region;

static region binom_region(int64_t n, double m, double alpha)
{
    region r = {-1, n + 1};
    if (!(m > 0.0)) { /* only k = 0 is possible: reject every k >= 1 */
        r.hi = 1;
        return r;
    }
    if (!(m < 1.0)) {
        r.lo = n - 1;
        return r;
    }
    const double half = alpha / 2.0;
    if (binom_P(0, n, m) < half) { /* largest k with P(X <= k) < alpha/2 */
        int64_t a = 0, b = n;      /* P(a) < half, P(b) = 1 >= half */
        while (b - a > 1) {
            int64_t c = a + (b - a) / 2;
            if (binom_P(c, n, m) < half)
                a = c;
            else
                b = c;
        }
        r.lo = a;
    }
    if (binom_Qge(n, n, m) < half) { /* smallest k with P(X >= k) < alpha/2 */
        int64_t a = 0, b = n;        /* Q(a) = 1 >= half, Q(b) < half */
        while (b - a > 1) {
            int64_t c = a + (b - a) / 2;
            if (binom_Qge(c, n, m) < half)
                b = c;
            else
                a = c;
        }
        r.hi = b;
    }
    return r;
}

static double region_power(region r, int64_t n, double m1)
{
    if (!(m1 > 0.0))
        return r.lo >= 0 ? 1.0 : (r.hi <= 0 ? 1.0 : 0.0);
    if (!(m1 < 1.0))
        return r.hi <= n ? 1.0 : (r.lo >= n ? 1.0 : 0.0);
    double p = (r.lo >= 0 ? binom_P(r.lo, n, m1) : 0.0) + (r.hi <= n ? binom_Qge(r.hi, n, m1) : 0.0);
    return p > 1.0 ? 1.0 : p;
}

double fls_stats_binom_power(int64_t n, double m0, double m1, double alpha)
{
    if (n <= 0)
        return 0.0;
    return region_power(binom_region(n, m0, alpha), n, m1);
}

/* Smallest d in (0, dmax] with power(m + sign d) >= power (monotone in d);
 * INFINITY if even dmax is not caught. */
static double smallest_caught(region r, int64_t n, double m, double sign, double dmax, double power)
{
    if (!(dmax > 0.0) || region_power(r, n, m + sign * dmax) < power)
        return INFINITY;
    double a = 0.0, b = dmax;
    for (int it = 0; it < 60 && b - a > 1e-12 * dmax; it++) {
        double c = 0.5 * (a + b);
        if (region_power(r, n, m + sign * c) >= power)
            b = c;
        else
            a = c;
    }
    return b;
}

double fls_stats_binom_tv_caught(double a, int64_t n, double alpha, double power)
{
    const double m = 1.0 - a; /* the test counts bin 1 */
    if (n <= 0 || !(m > 0.0 && m < 1.0))
        return INFINITY;
    region r = binom_region(n, m, alpha);
    double up = smallest_caught(r, n, m, 1.0, 1.0 - m, power);
    double down = smallest_caught(r, n, m, -1.0, m, power);
    if (!isfinite(up) && !isfinite(down))
        return INFINITY;
    /* every alternative at TV >= d is caught when each direction that exists at d is */
    if (!isfinite(up))
        up = 1.0 - m; /* beyond this TV only the downward direction exists */
    if (!isfinite(down))
        down = m;
    double d = up > down ? up : down;
    return d;
}

int64_t fls_stats_binom_sample_size(double a, double alpha, double tv, double power)
{
    if (!(tv > 0.0) || !(alpha > 0.0 && alpha < 1.0) || !(power > 0.0 && power < 1.0))
        return -1;
    int64_t lo = 0, hi = 1;
    while (!(fls_stats_binom_tv_caught(a, hi, alpha, power) <= tv)) {
        lo = hi;
        hi *= 2;
        if (hi > ((int64_t)1 << 40))
            return -1;
    }
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (fls_stats_binom_tv_caught(a, mid, alpha, power) <= tv)
            hi = mid;
        else
            lo = mid;
    }
    return hi;
}

/* ---- a sum of independent binomials ---- */

/* log of the Bin(n, m) pmf at k. */
static double binom_logpmf(int64_t k, int64_t n, double m)
{
    return lgamma((double)n + 1.0) - lgamma((double)k + 1.0) - lgamma((double)(n - k) + 1.0) +
           (double)k * log(m) + (double)(n - k) * log1p(-m);
}

/* Bernstein: P(|X - mu| >= x) <= 2 exp(-x^2 / (2 (s2 + x/3))) <= 2e-30 for this x. */
static void window(int64_t n, double m, int64_t *lo, int64_t *hi)
{
    const double b = 69.1; /* log(1e30) */
    double mu = (double)n * m, s2 = mu * (1.0 - m);
    double x = b / 3.0 + sqrt(b * b / 9.0 + 2.0 * b * s2) + 1.0;
    double l = floor(mu - x), h = ceil(mu + x);
    *lo = l < 0.0 ? 0 : (int64_t)l;
    *hi = h > (double)n ? n : (int64_t)h;
}

double fls_stats_binsum_test(int G, const int64_t *n, const double *m, const int64_t *kg, int *bonferroni)
{
    if (bonferroni)
        *bonferroni = 0;
    int64_t k = 0;
    for (int g = 0; g < G; g++)
        k += kg[g];
    int64_t fixed = 0; /* groups with m = 1 always contribute n */
    int active = 0, last = -1;
    double cost = 0.0, mu = 0.0, s2 = 0.0, wmax = 0.0;
    for (int g = 0; g < G; g++) {
        if (n[g] <= 0 || !(m[g] > 0.0))
            continue;
        if (!(m[g] < 1.0)) {
            fixed += n[g];
            continue;
        }
        int64_t lo, hi;
        window(n[g], m[g], &lo, &hi);
        const double w = (double)(hi - lo + 1);
        mu += (double)n[g] * m[g];
        s2 += (double)n[g] * m[g] * (1.0 - m[g]);
        /* the running sum is trimmed to its own Bernstein window after each step */
        const double b = 69.1, x = b / 3.0 + sqrt(b * b / 9.0 + 2.0 * b * s2) + 1.0;
        const double acc = 2.0 * x + 3.0 + w; /* the trimmed running sum (<= 2x + 3) convolved with w */
        cost += acc * w;
        wmax = acc + w > wmax ? acc + w : wmax;
        active++;
        last = g;
    }
    k -= fixed;
    if (active == 0)
        return k == 0 ? 1.0 : 0.0;
    if (k < 0)
        return 0.0;
    if (active == 1)
        return fls_stats_binom_test(k, n[last], m[last]);
    if (cost > 2e9) { /* Bonferroni over the groups' own exact tests is still exact */
        if (bonferroni)
            *bonferroni = 1;
        double pmin = 1.0;
        int tests = 0;
        for (int g = 0; g < G; g++) {
            if (n[g] <= 0)
                continue;
            double pg = fls_stats_binom_test(kg[g], n[g], m[g]);
            pmin = pg < pmin ? pg : pmin;
            tests++;
        }
        double p = pmin * (double)(tests > 0 ? tests : 1);
        return p > 1.0 ? 1.0 : p;
    }
    /* convolution over the windows; acc covers [alo, alo + alen), trimmed after
     * each group to the running sum's window (mass < 1e-30 dropped per step) */
    const size_t cap = (size_t)wmax + 64;
    double *acc = malloc(cap * sizeof(double)), *tmp = malloc(cap * sizeof(double));
    double *pm = NULL;
    if (!acc || !tmp) {
        free(acc);
        free(tmp);
        return NAN;
    }
    int64_t alo = 0, alen = 1;
    acc[0] = 1.0;
    double rmu = 0.0, rs2 = 0.0;
    for (int g = 0; g < G; g++) {
        if (n[g] <= 0 || !(m[g] > 0.0) || !(m[g] < 1.0))
            continue;
        int64_t lo, hi;
        window(n[g], m[g], &lo, &hi);
        const int64_t w = hi - lo + 1;
        double *q = realloc(pm, (size_t)w * sizeof(double));
        if (!q) {
            free(pm);
            free(acc);
            free(tmp);
            return NAN;
        }
        pm = q;
        for (int64_t j = 0; j < w; j++)
            pm[j] = exp(binom_logpmf(lo + j, n[g], m[g]));
        const int64_t tlen = alen + w - 1;
        if ((size_t)tlen > cap) { /* cannot happen (cap bounds every step); never write past it */
            free(pm);
            free(acc);
            free(tmp);
            return NAN;
        }
        for (int64_t i = 0; i < tlen; i++)
            tmp[i] = 0.0;
        for (int64_t i = 0; i < alen; i++) {
            const double a = acc[i];
            if (a == 0.0)
                continue;
            for (int64_t j = 0; j < w; j++)
                tmp[i + j] += a * pm[j];
        }
        int64_t tlo = alo + lo;
        /* trim to [rmu - x, rmu + x] of the running sum (Bernstein, as window()) */
        rmu += (double)n[g] * m[g];
        rs2 += (double)n[g] * m[g] * (1.0 - m[g]);
        const double b = 69.1, x = b / 3.0 + sqrt(b * b / 9.0 + 2.0 * b * rs2) + 1.0;
        int64_t keep_lo = (int64_t)floor(rmu - x), keep_hi = (int64_t)ceil(rmu + x);
        keep_lo = keep_lo < tlo ? tlo : keep_lo;
        keep_hi = keep_hi > tlo + tlen - 1 ? tlo + tlen - 1 : keep_hi;
        alen = keep_hi - keep_lo + 1;
        for (int64_t i = 0; i < alen; i++)
            acc[i] = tmp[keep_lo - tlo + i];
        alo = keep_lo;
    }
    double lo_tail = 0.0, hi_tail = 0.0;
    for (int64_t i = 0; i < alen; i++) {
        const int64_t s = alo + i;
        if (s <= k)
            lo_tail += acc[i];
        if (s >= k)
            hi_tail += acc[i];
    }
    free(pm);
    free(acc);
    free(tmp);
    (void)mu;
    double p = 2.0 * (lo_tail < hi_tail ? lo_tail : hi_tail);
    return p > 1.0 ? 1.0 : p;
}
