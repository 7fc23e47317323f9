/*
 * test_machinery.c — tests of the statistics machinery itself (stats/).
 *
 * Deterministic checks pin down the pieces (reference probabilities, binning,
 * chi-square, noncentral power, sample sizes). The chance checks then test the
 * tests with an independent sampler (gsl_ran_discrete, no Gumbel, no Philox):
 * exact samples must be accepted at the nominal rate, and distributions off by
 * a total variation of 0.01 must be rejected at the sample size the power
 * helper prescribes. Each chance check may fail by bad luck with probability
 * <= alpha (the suite family's per-test level); they are counted in the family
 * (SUITE_SELFTEST_CHECKS), and every seed is fixed and printed.
 */
#include <criterion/criterion.h>
#include <gsl/gsl_cdf.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats/fls_audit.h"
#include "stats/fls_cases.h"
#include "stats/fls_stats.h"
#include "stats/fls_tokens.h"
#include "tests/stats/suite_family.h"

/* ---- helpers ---- */

static double *zipf_probs(int64_t V)
{
    double *l = malloc((size_t)V * sizeof(double)), *p = malloc((size_t)V * sizeof(double));
    for (int64_t v = 0; v < V; v++) /* rank = (7 v mod V) + 1: the head is not at index 0 */
        l[(7 * v) % V] = -1.1 * log((double)v + 1.0);
    cr_assert_eq(fls_stats_probs_temperature(l, V, 1.0, p), FLS_OK);
    free(l);
    return p;
}

/* A head of 3 tokens and 2^18 - 3 tokens 15..19 nats below: tail mass ~1.1e-2. */
static double *heavy_probs(int64_t V, int big)
{
    double *l = malloc((size_t)V * sizeof(double)), *p = malloc((size_t)V * sizeof(double));
    const double w = big ? 4.0 : 0.5;
    for (int64_t v = 0; v < V; v++)
        l[v] = -15.0 - w * (double)((v * 2654435761u) % 1000) / 1000.0;
    l[V / 7] = 0.0;
    if (big) {
        l[V / 3] = -0.7;
        l[V - 2] = -1.4;
    }
    cr_assert_eq(fls_stats_probs_temperature(l, V, 1.0, p), FLS_OK);
    free(l);
    return p;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Chi-square p-value of n reference samples from q tested against p. */
static fls_gof test_once(fls_refsampler *s, const fls_bins *bins, int64_t n, int64_t *counts)
{
    memset(counts, 0, (size_t)bins->cells * sizeof(int64_t));
    fls_refsampler_counts(s, n, counts);
    fls_gof g;
    fls_gof_init(&g);
    cr_assert_eq(fls_gof_add_counts(&g, bins, counts, 0), FLS_OK);
    return g;
}

/* The uncalibrated p-value of a result: the chi-square tail itself where the
 * test is a chi-square alone (the reported p is KAPPA times it), else p. */
static double raw_p(const fls_gof *g)
{
    return g->n_exact == 0 && g->dof > 0 && g->impossible == 0 ? gsl_cdf_chisq_Q(g->chi2_part, (double)g->dof)
                                                               : g->p;
}

/* Rejections at `level` (the reported, calibrated p-value below level) of M
 * replicates of n samples from q, tested against p; pvalues gets raw_p. */
static int64_t rejections(const double *p, const double *q, int64_t V, int64_t n, int M, double level,
                          uint64_t seed, double *pvalues, int *dof)
{
    fls_bins bins;
    cr_assert_eq(fls_bins_build(&bins, p, V, n, FLS_STATS_MAX_BINS), FLS_OK);
    fls_refsampler *s;
    cr_assert_eq(fls_refsampler_create(&s, q, V, seed), FLS_OK);
    int64_t *counts = malloc((size_t)V * sizeof(int64_t)), rej = 0;
    for (int m = 0; m < M; m++) {
        fls_gof g = test_once(s, &bins, n, counts);
        if (pvalues)
            pvalues[m] = raw_p(&g);
        rej += !fls_gof_pass(&g, level);
        if (dof)
            *dof = g.dof + g.n_exact;
    }
    free(counts);
    fls_refsampler_destroy(s);
    fls_bins_free(&bins);
    return rej;
}

/* ---- the chance checks, counted in the family ---- */

enum {
    CHK_SIZE_ZIPF_05,    /* exact samples rejected at level 0.05 at the nominal rate (0.05 / KAPPA) */
    CHK_SIZE_ZIPF_001,   /* ... and the raw chi-square p below 0.001 at rate 0.001 */
    CHK_PVALUES_UNIFORM, /* their raw p-values are uniform (chi-square on 20 bins) */
    CHK_SIZE_HEAVY,      /* heavy tail, two bins: the exact binomial's exact size at 0.01 */
    CHK_SIZE_PAIRS,      /* pair table p (x) p: nominal rate at 0.05 / KAPPA */
    CHK_SIZE_ALPHA,      /* rejections at the family's alpha itself: no more than chance allows */
    CHK_SIZE_TAIL,       /* tail tests of exact samples: the exact binomial's exact size at 0.01 */
    CHK_POWER_TAIL,      /* a designed tail deficit caught with probability >= 0.999 */
    CHK_POWER_WORST,     /* TV 0.01, the Cauchy-Schwarz worst case (|q - p| proportional to p) */
    CHK_POWER_HEAD_TAIL, /* TV 0.01 moved from the top token onto the low-probability half */
    CHK_POWER_ONE_TOKEN, /* TV 0.01 moved onto the single least likely token */
    CHK_POWER_TAIL_DROP, /* a tail of mass 0.011 dropped (truncation) */
    CHK_POWER_TEMP,      /* wrong temperature, TV 0.01 */
    CHK_POWER_PAIRS,     /* dependent pairs, TV 0.01 from p (x) p */
    N_CHECKS
};

Test(machinery, chance_checks_are_counted_in_the_family)
{
    cr_assert_eq(N_CHECKS, SUITE_SELFTEST_CHECKS);
    fls_stats_family f;
    suite_family(&f);
    cr_assert_eq(f.n_parts, 4);
    cr_assert_eq(f.parts[1].tests, N_CHECKS);
    cr_assert_eq(f.size, f.parts[0].tests + f.parts[1].tests + f.parts[2].tests + f.parts[3].tests);
    cr_assert_float_eq(f.alpha * f.size, FLS_STATS_BUDGET, 1e-15);
    cr_assert_float_eq(suite_alpha(), f.alpha, 0.0);
    fls_stats_family_print(stdout, "", &f);
}

Test(machinery, family_arithmetic)
{
    fls_stats_family f;
    fls_stats_family_init(&f, 0.0);
    cr_assert_eq(f.budget, FLS_STATS_BUDGET);
    cr_assert_eq(f.size, 0);
    cr_assert_eq(fls_stats_family_add(&f, "a", 3), FLS_OK);
    cr_assert_eq(fls_stats_family_add(&f, "b", 7), FLS_OK);
    cr_assert_eq(f.size, 10);
    cr_assert_float_eq(f.alpha, 1e-5, 1e-20);
    cr_assert_eq(fls_stats_family_add(&f, "c", -1), FLS_ERR_PARAM);
    for (int i = 2; i < FLS_STATS_FAMILY_MAX_PARTS; i++)
        cr_assert_eq(fls_stats_family_add(&f, "x", 0), FLS_OK);
    cr_assert_eq(fls_stats_family_add(&f, "one too many", 1), FLS_ERR_PARAM);
    cr_assert_eq(f.size, 10);
}

/* Two-sided check of a rejection count r ~ Binomial(M, level) at the family alpha. */
static void check_rate(int chk, const char *what, int64_t r, int M, double level, double alpha)
{
    double lo = gsl_cdf_binomial_P((unsigned)r, level, (unsigned)M);                     /* P(X <= r) */
    double hi = r > 0 ? gsl_cdf_binomial_Q((unsigned)(r - 1), level, (unsigned)M) : 1.0; /* P(X >= r) */
    printf("check %d %s: %lld of %d rejected at level %g (expected %.1f); P(X <= r) %.3g, P(X >= r) %.3g\n",
           chk, what, (long long)r, M, level, M * level, lo, hi);
    cr_expect(lo >= alpha / 2 && hi >= alpha / 2, "check %d (%s): rejection count %lld of %d at level %g",
              chk, what, (long long)r, M, level);
}

/* Misses m of M at the family alpha must be consistent with a miss rate of
 * at most 1 - power. */
static void check_power(int chk, const char *what, int64_t misses, int M, double power, double alpha)
{
    double tail = misses > 0 ? gsl_cdf_binomial_Q((unsigned)(misses - 1), 1.0 - power, (unsigned)M) : 1.0;
    printf("check %d %s: %lld of %d NOT rejected (power %.5f needed, %.5f seen); P(X >= misses) %.3g\n", chk,
           what, (long long)misses, M, power, 1.0 - (double)misses / M, tail);
    cr_expect(tail >= alpha, "check %d (%s): %lld misses of %d", chk, what, (long long)misses, M);
}

Test(machinery, size_exact_samples_accepted_at_the_nominal_rate, .timeout = 600)
{
    const double alpha = suite_alpha(), kappa = FLS_STATS_CHI2_KAPPA;
    const int64_t V = 4096, n = 40000;
    const int M = 2000;
    double *p = zipf_probs(V), *pv = malloc((size_t)M * sizeof(double));
    int dof = 0;
    const uint64_t seed = 1001;
    printf("size checks: zipf V %lld, n %lld, %d replicates, seed %llu\n", (long long)V, (long long)n, M,
           (unsigned long long)seed);
    /* a chi-square rejects at level L when KAPPA Q < L: at rate L / KAPPA if Q is uniform */
    int64_t r05 = rejections(p, p, V, n, M, 0.05, seed, pv, &dof);
    printf("zipf: dof %d\n", dof);
    cr_assert(dof >= FLS_STATS_MAX_BINS / 2);
    check_rate(CHK_SIZE_ZIPF_05, "zipf size", r05, M, 0.05 / kappa, alpha);
    int64_t r001 = 0, ralpha = 0;
    for (int m = 0; m < M; m++) {
        r001 += pv[m] < 0.001;
        ralpha += kappa * pv[m] < alpha;
    }
    check_rate(CHK_SIZE_ZIPF_001, "zipf size (raw)", r001, M, 0.001, alpha);

    /* uniformity of the raw p-values: Pearson on 20 equiprobable cells of [0, 1]
     * (each expecting 100: for equiprobable cells the chi-square is accurate
     * far below these levels, unlike cells of unequal mass) */
    {
        int64_t c[20] = {0};
        for (int m = 0; m < M; m++)
            c[pv[m] >= 1.0 ? 19 : (int)(pv[m] * 20)]++;
        double chi2 = 0.0, e = M / 20.0;
        for (int k = 0; k < 20; k++)
            chi2 += (c[k] - e) * (c[k] - e) / e;
        double pu = gsl_cdf_chisq_Q(chi2, 19.0);
        printf("check %d p-values uniform: chi2 %.2f dof 19 p %.4g\n", CHK_PVALUES_UNIFORM, chi2, pu);
        cr_expect(pu >= alpha, "check %d: p-values not uniform (p %g)", CHK_PVALUES_UNIFORM, pu);
    }

    /* heavy tail, two bins (a tail bin expecting ~150): the exact binomial test,
     * whose size at 0.01 is computed exactly (it is below 0.01: discreteness) */
    {
        const int64_t Vh = 4096, nh = 150000;
        const int Mh = 1000;
        double *ph = heavy_probs(Vh, 0);
        fls_bins b;
        cr_assert_eq(fls_bins_build(&b, ph, Vh, nh, FLS_STATS_MAX_BINS), FLS_OK);
        cr_assert_eq(b.n_bins, 2);
        const double size = fls_stats_binom_power(nh, b.mass[1], b.mass[1], 0.01);
        fls_bins_free(&b);
        int64_t r = rejections(ph, ph, Vh, nh, Mh, 0.01, 1002, pv, &dof);
        for (int m = 0; m < Mh; m++)
            ralpha += pv[m] < alpha;
        printf("heavy: dof %d, seed 1002, exact size at 0.01: %.5f\n", dof, size);
        cr_assert(size <= 0.01 && size > 0.005);
        check_rate(CHK_SIZE_HEAVY, "heavy size", r, Mh, size, alpha);
        free(ph);
    }

    /* pair table of V = 8 */
    {
        double l[8] = {0.3, -0.2, 1.1, 0.0, -1.0, 0.5, -0.4, 0.8}, p1[8], pq[64];
        cr_assert_eq(fls_stats_probs_temperature(l, 8, 1.0, p1), FLS_OK);
        fls_stats_product(p1, 8, p1, 8, pq);
        int64_t r = rejections(pq, pq, 64, n, M, 0.05, 1003, pv, &dof);
        for (int m = 0; m < M; m++)
            ralpha += kappa * pv[m] < alpha;
        printf("pairs: dof %d, seed 1003\n", dof);
        check_rate(CHK_SIZE_PAIRS, "pairs size", r, M, 0.05 / kappa, alpha);
    }

    /* all 5000 replicates above at the family alpha */
    {
        const int total = 2 * M + 1000;
        double up = ralpha > 0 ? gsl_cdf_binomial_Q((unsigned)(ralpha - 1), alpha, (unsigned)total) : 1.0;
        printf("check %d: %lld of %d exact replicates rejected at alpha %.3g; P(X >= r) %.3g\n",
               CHK_SIZE_ALPHA, (long long)ralpha, total, alpha, up);
        cr_expect(up >= alpha, "check %d: too many rejections at alpha", CHK_SIZE_ALPHA);
    }
    free(p);
    free(pv);
}

/* Power: M replicates of the prescribed N from a perturbed q, tested against p. */
static void power_case(int chk, const char *what, const double *p, const double *q, int64_t V, uint64_t seed)
{
    const double alpha = suite_alpha();
    const int M = 500;
    /* the audit's rule: N for the dof the bins really have */
    int64_t N = 0;
    int dof = 0;
    cr_assert_eq(fls_stats_design_size(p, 1, V, alpha, &N, &dof), FLS_OK);
    cr_assert(dof >= 1);
    printf("check %d %s: V %lld, TV %.5f, dof %d, N %lld, %d replicates, seed %llu\n", chk, what,
           (long long)V, fls_stats_tv(p, q, V), dof, (long long)N, M, (unsigned long long)seed);
    cr_assert(fabs(fls_stats_tv(p, q, V) - FLS_STATS_TV) < 1e-3, "perturbation is not at TV 0.01");
    int64_t misses = M - rejections(p, q, V, N, M, alpha, seed, NULL, NULL);
    check_power(chk, what, misses, M, FLS_STATS_POWER, alpha);
}

Test(machinery, power_worst_case_perturbation, .timeout = 600)
{
    const int64_t V = 4096;
    double *p = zipf_probs(V), *q = malloc((size_t)V * sizeof(double));
    /* Bins of the first half of the (binned) mass lose 0.01 proportionally, the
     * rest gain it: sum (q - p)^2 / p = 1e-4 (1/a + 1/(1-a)) with a ~ 1/2, the
     * equality case of the Cauchy-Schwarz bound, so the power is the designed
     * 0.999 and no more. */
    int64_t N0 = fls_stats_sample_size(FLS_STATS_MAX_BINS - 1, suite_alpha(), FLS_STATS_TV, FLS_STATS_POWER);
    fls_bins b;
    cr_assert_eq(fls_bins_build(&b, p, V, N0, FLS_STATS_MAX_BINS), FLS_OK);
    double acc = 0.0;
    int split = 0;
    while (split < b.n_bins && acc + b.mass[split] <= 0.5 + 1e-9)
        acc += b.mass[split++];
    uint8_t *from = calloc((size_t)V, 1), *to = calloc((size_t)V, 1);
    for (int64_t v = 0; v < V; v++) {
        from[v] = b.bin_of[v] < split;
        to[v] = !from[v];
    }
    printf("worst case: first %d of %d bins hold %.4f of the mass\n", split, b.n_bins, acc);
    fls_bins_free(&b);
    cr_assert_eq(fls_stats_perturb(p, V, from, to, FLS_STATS_TV, q), FLS_OK);
    power_case(CHK_POWER_WORST, "worst case", p, q, V, 2001);
    free(from);
    free(to);
    free(p);
    free(q);
}

Test(machinery, power_head_to_tail, .timeout = 600)
{
    const int64_t V = 4096;
    double *p = zipf_probs(V), *q = malloc((size_t)V * sizeof(double));
    uint8_t *from = calloc((size_t)V, 1), *to = calloc((size_t)V, 1);
    int64_t top = 0;
    for (int64_t v = 0; v < V; v++)
        top = p[v] > p[top] ? v : top;
    from[top] = 1;
    double *sorted = malloc((size_t)V * sizeof(double)); /* the low-probability half: p below the median */
    memcpy(sorted, p, (size_t)V * sizeof(double));
    qsort(sorted, (size_t)V, sizeof(double), cmp_double);
    const double pmed = sorted[V / 2];
    free(sorted);
    for (int64_t v = 0; v < V; v++)
        to[v] = p[v] < pmed;
    cr_assert_eq(fls_stats_perturb(p, V, from, to, FLS_STATS_TV, q), FLS_OK);
    power_case(CHK_POWER_HEAD_TAIL, "head to tail", p, q, V, 2002);
    memset(to, 0, (size_t)V);
    int64_t least = 0;
    for (int64_t v = 0; v < V; v++)
        least = p[v] < p[least] ? v : least;
    to[least] = 1;
    cr_assert_eq(fls_stats_perturb(p, V, from, to, FLS_STATS_TV, q), FLS_OK);
    power_case(CHK_POWER_ONE_TOKEN, "onto one tail token", p, q, V, 2003);
    free(from);
    free(to);
    free(p);
    free(q);
}

Test(machinery, power_tail_dropped, .timeout = 600)
{
    const int64_t V = 262144;
    double *p = heavy_probs(V, 1), *q = malloc((size_t)V * sizeof(double));
    double tail = 0.0;
    for (int64_t v = 0; v < V; v++)
        tail += p[v] < 1e-6 ? p[v] : 0.0;
    for (int64_t v = 0; v < V; v++)
        q[v] = p[v] < 1e-6 ? 0.0 : p[v] / (1.0 - tail);
    printf("heavy tail mass %.5f\n", tail);
    cr_assert(tail >= FLS_STATS_TV && tail < 0.02);
    /* TV = tail mass (> 0.01): scale the perturbation to exactly 0.01 by mixing */
    double t = FLS_STATS_TV / tail;
    for (int64_t v = 0; v < V; v++)
        q[v] = (1.0 - t) * p[v] + t * q[v];
    power_case(CHK_POWER_TAIL_DROP, "tail dropped", p, q, V, 2004);
    free(p);
    free(q);
}

Test(machinery, power_wrong_temperature, .timeout = 600)
{
    const int64_t V = 1024;
    double *l = malloc((size_t)V * sizeof(double)), *p = malloc((size_t)V * sizeof(double)),
           *q = malloc((size_t)V * sizeof(double));
    for (int64_t v = 0; v < V; v++)
        l[v] = 2.0 * sin(0.37 * (double)v * (double)v); /* spread, deterministic */
    cr_assert_eq(fls_stats_probs_temperature(l, V, 1.0, p), FLS_OK);
    double lo = 1.0, hi = 1.5; /* T' with TV(p_1, p_T') = 0.01 */
    for (int it = 0; it < 100; it++) {
        double mid = 0.5 * (lo + hi);
        fls_stats_probs_temperature(l, V, mid, q);
        if (fls_stats_tv(p, q, V) < FLS_STATS_TV)
            lo = mid;
        else
            hi = mid;
    }
    fls_stats_probs_temperature(l, V, hi, q);
    printf("temperature %.6f instead of 1\n", hi);
    power_case(CHK_POWER_TEMP, "wrong temperature", p, q, V, 2005);
    free(l);
    free(p);
    free(q);
}

Test(machinery, power_dependent_pairs, .timeout = 600)
{
    double l[8] = {0.3, -0.2, 1.1, 0.0, -1.0, 0.5, -0.4, 0.8}, p1[8], pq[64], joint[64];
    cr_assert_eq(fls_stats_probs_temperature(l, 8, 1.0, p1), FLS_OK);
    fls_stats_product(p1, 8, p1, 8, pq);
    /* with probability e the second token copies the first:
     * TV(joint, p (x) p) = e (1 - sum p^2) */
    double s2 = 0.0;
    for (int i = 0; i < 8; i++)
        s2 += p1[i] * p1[i];
    double e = FLS_STATS_TV / (1.0 - s2);
    for (int x = 0; x < 8; x++)
        for (int y = 0; y < 8; y++)
            joint[x * 8 + y] = (1.0 - e) * pq[x * 8 + y] + (x == y ? e * p1[x] : 0.0);
    power_case(CHK_POWER_PAIRS, "dependent pairs", pq, joint, 64, 2006);
}

/* ---- deterministic checks ---- */

Test(reference, softmax_values)
{
    double l[4] = {0.0, log(2.0), log(3.0), -INFINITY}, p[4];
    cr_assert_eq(fls_stats_probs_temperature(l, 4, 1.0, p), FLS_OK);
    cr_assert_float_eq(p[0], 1.0 / 6, 1e-15);
    cr_assert_float_eq(p[1], 2.0 / 6, 1e-15);
    cr_assert_float_eq(p[2], 3.0 / 6, 1e-15);
    cr_assert_eq(p[3], 0.0);
    /* T = 0.5 squares the odds */
    cr_assert_eq(fls_stats_probs_temperature(l, 4, 0.5, p), FLS_OK);
    cr_assert_float_eq(p[0], 1.0 / 14, 1e-15);
    cr_assert_float_eq(p[2], 9.0 / 14, 1e-15);
    /* stable far from 0: the same odds 1000 nats up or 1e5 nats down */
    double hi[3] = {1000.0, 1000.0 + log(2.0), -1e5}, q[3];
    cr_assert_eq(fls_stats_probs_temperature(hi, 3, 1.0, q), FLS_OK);
    cr_assert_float_eq(q[0], 1.0 / 3, 1e-13);
    cr_assert_eq(q[2], 0.0); /* e^-101000 underflows: such a token is never sampled either */
    float f[3] = {-3.0e38f, 3.0e38f, 3.0e38f};
    double r[3];
    cr_assert_eq(fls_stats_probs_temperature_f32(f, 3, 1e-30, r), FLS_OK);
    cr_assert_float_eq(r[1], 0.5, 1e-15);
}

Test(reference, greedy_and_errors)
{
    double l[5] = {1.0, 3.0, -INFINITY, 3.0, 2.0}, p[5];
    cr_assert_eq(fls_stats_probs_temperature(l, 5, 0.0, p), FLS_OK);
    for (int v = 0; v < 5; v++)
        cr_assert_eq(p[v], v == 1 ? 1.0 : 0.0); /* the lowest-index maximum */
    double m[2] = {-INFINITY, -INFINITY}, n[2] = {0.0, NAN}, i[2] = {0.0, INFINITY};
    cr_assert_eq(fls_stats_probs_temperature(m, 2, 1.0, p), FLS_ERR_ALL_MASKED);
    cr_assert_eq(fls_stats_probs_temperature(n, 2, 1.0, p), FLS_ERR_NAN);
    cr_assert_eq(fls_stats_probs_temperature(i, 2, 1.0, p), FLS_ERR_NAN);
    cr_assert_eq(fls_stats_probs_temperature(l, 5, -1.0, p), FLS_ERR_TEMPERATURE);
    cr_assert_eq(fls_stats_probs_temperature(l, 5, NAN, p), FLS_ERR_TEMPERATURE);
    cr_assert_eq(fls_stats_probs_temperature(l, 0, 1.0, p), FLS_ERR_SIZE);
    cr_assert_eq(fls_stats_probs_temperature(NULL, 5, 1.0, p), FLS_ERR_NULL);
}

Test(reference, fused_logits_decode_every_dtype)
{
    /* W (3, 2): bf16 1.0, -2.0 / f16 subnormal and max / f32 */
    uint16_t wb[6] = {0x3F80, 0xC000, 0x0000, 0x3F00, 0x4040, 0x8000};
    uint16_t wh[6] = {0x3C00, 0x0001, 0x7BFF, 0x0000, 0xBC00, 0x3800};
    float wf[6] = {0.25f, 1.0f, -1.0f, 2.0f, 0.0f, 3.0f};
    float h[2] = {2.0f, 0.5f};
    fls_matrix H = {h, FLS_DTYPE_F32, 1, 2, 2};
    double l[3];
    fls_matrix Wb = {wb, FLS_DTYPE_BF16, 3, 2, 2};
    cr_assert_eq(fls_stats_logits_fused(&Wb, &H, 0, l), FLS_OK);
    cr_assert_eq(l[0], 2.0 - 1.0);
    cr_assert_eq(l[1], 0.25);
    cr_assert_eq(l[2], 6.0);
    fls_matrix Wh = {wh, FLS_DTYPE_F16, 3, 2, 2};
    cr_assert_eq(fls_stats_logits_fused(&Wh, &H, 0, l), FLS_OK);
    cr_assert_eq(l[0], 2.0 + 0.5 * ldexp(1.0, -24));
    cr_assert_eq(l[1], 2.0 * 65504.0);
    cr_assert_eq(l[2], -2.0 + 0.25);
    fls_matrix Wf = {wf, FLS_DTYPE_F32, 3, 2, 2};
    cr_assert_eq(fls_stats_logits_fused(&Wf, &H, 0, l), FLS_OK);
    cr_assert_eq(l[0], 1.0);
    cr_assert_eq(l[1], -1.0);
    cr_assert_eq(l[2], 1.5);
    /* the decoders agree with the library's converters */
    for (uint32_t x = 0; x < 65536; x += 7) {
        if ((x & 0x7c00) == 0x7c00)
            continue;
        uint16_t u = (uint16_t)x;
        fls_matrix m = {&u, FLS_DTYPE_F16, 1, 1, 1};
        cr_assert_eq(fls_stats_matrix_get(&m, 0, 0), (double)fls_f16_to_f32(u), "f16 0x%04x", x);
        m.dtype = FLS_DTYPE_BF16;
        if ((x & 0x7f80) != 0x7f80)
            cr_assert_eq(fls_stats_matrix_get(&m, 0, 0), (double)fls_bf16_to_f32(u), "bf16 0x%04x", x);
    }
}

Test(binning, invariants)
{
    const int64_t V = 4096;
    double *shapes[3] = {zipf_probs(V), heavy_probs(V, 0), malloc((size_t)V * sizeof(double))};
    int64_t open = 0;
    for (int64_t v = 0; v < V; v++) /* masked: every third token impossible */
        open += v % 3 != 1;
    for (int64_t v = 0; v < V; v++)
        shapes[2][v] = v % 3 == 1 ? 0.0 : 1.0 / (double)open;
    int64_t ns[4] = {150, 5000, 280000, 10000000};
    for (int s = 0; s < 3; s++)
        for (int k = 0; k < 4; k++) {
            fls_bins b;
            cr_assert_eq(fls_bins_build(&b, shapes[s], V, ns[k], FLS_STATS_MAX_BINS), FLS_OK);
            cr_assert(b.n_bins >= 1 && b.n_bins <= FLS_STATS_MAX_BINS);
            double sum = 0.0, *m = calloc((size_t)b.n_bins, sizeof(double));
            for (int64_t v = 0; v < V; v++) {
                if (shapes[s][v] == 0.0) {
                    cr_assert_eq(b.bin_of[v], -1);
                    continue;
                }
                cr_assert(b.bin_of[v] >= 0 && b.bin_of[v] < b.n_bins, "token %lld dropped", (long long)v);
                m[b.bin_of[v]] += shapes[s][v];
            }
            for (int i = 0; i < b.n_bins; i++) {
                sum += b.mass[i];
                cr_assert_float_eq(m[i], b.mass[i], 1e-12);
                if (b.n_bins > 2) /* the chi-square's domain; two bins are tested exactly */
                    cr_assert(b.mass[i] * (double)ns[k] >= FLS_STATS_MIN_EXPECTED * (1 - 1e-12),
                              "shape %d n %lld bin %d expects %g", s, (long long)ns[k], i,
                              b.mass[i] * (double)ns[k]);
            }
            cr_assert_float_eq(sum, 1.0, 1e-12);
            if (ns[k] >= FLS_STATS_MIN_EXPECTED * FLS_STATS_MAX_BINS && s == 0)
                cr_assert(b.n_bins >= FLS_STATS_MAX_BINS / 2, "zipf: %d bins", b.n_bins); /* fine enough */
            if (s == 1 && ns[k] >= 280000) {
                /* heavy: the ~1e-3 tail is a bin of its own, not merged into the head (two bins: exact) */
                cr_assert_eq(b.n_bins, 2);
                cr_assert(b.mass[1] > 5e-4 && b.mass[1] < 2e-3);
            }
            free(m);
            fls_bins_free(&b);
        }
    for (int s = 0; s < 3; s++)
        free(shapes[s]);
    double one[3] = {0.0, 1.0, 0.0};
    fls_bins b;
    cr_assert_eq(fls_bins_build(&b, one, 3, 1000, 32), FLS_OK);
    cr_assert_eq(b.n_bins, 1);
    fls_bins_free(&b);
    double none[2] = {0.0, 0.0};
    cr_assert_eq(fls_bins_build(&b, none, 2, 1000, 32), FLS_ERR_ALL_MASKED);
}

Test(chisq, values_and_impossible_samples)
{
    /* two bins: the exact binomial test */
    double p[2] = {0.5, 0.5};
    fls_bins b;
    cr_assert_eq(fls_bins_build(&b, p, 2, 100000, 32), FLS_OK);
    cr_assert_eq(b.n_bins, 2);
    int64_t c[2] = {60, 40};
    fls_gof g;
    fls_gof_init(&g);
    cr_assert_eq(fls_gof_add_counts(&g, &b, c, 0), FLS_OK);
    cr_assert_float_eq(g.chi2, 4.0, 1e-12);
    cr_assert_eq(g.dof, 0);
    cr_assert_eq(g.n_exact, 1);
    const double p1 = 2.0 * gsl_cdf_binomial_P(40, 0.5, 100);
    cr_assert_float_eq(g.p, p1, 1e-12);
    /* a second group: a second binomial, Bonferroni over the two */
    cr_assert_eq(fls_gof_add_counts(&g, &b, c, 0), FLS_OK);
    cr_assert_float_eq(g.chi2, 8.0, 1e-12);
    cr_assert_eq(g.n_exact, 2);
    cr_assert_float_eq(g.p, 2.0 * p1, 1e-12);
    cr_assert(fls_gof_pass(&g, 0.01));
    /* out of range fails outright */
    cr_assert_eq(fls_gof_add_counts(&g, &b, c, 1), FLS_OK);
    cr_assert_eq(g.p, 0.0);
    cr_assert(!fls_gof_pass(&g, 1e-300));
    fls_bins_free(&b);
    /* four equal bins: Pearson, p = KAPPA Q(chi2, 3) */
    double p4[4] = {0.25, 0.25, 0.25, 0.25};
    cr_assert_eq(fls_bins_build(&b, p4, 4, 100000, 32), FLS_OK);
    cr_assert_eq(b.n_bins, 4);
    int64_t c4[4] = {25100, 24800, 25000, 25100};
    fls_gof_init(&g);
    cr_assert_eq(fls_gof_add_counts(&g, &b, c4, 0), FLS_OK);
    cr_assert_float_eq(g.chi2, 2.4, 1e-9);
    cr_assert_eq(g.dof, 3);
    cr_assert_float_eq(g.p, fmin(1.0, FLS_STATS_CHI2_KAPPA * gsl_cdf_chisq_Q(2.4, 3.0)), 1e-12);
    /* and a two-bin group beside it: two components */
    cr_assert_eq(fls_bins_build(&b, p, 2, 100000, 32), FLS_OK);
    cr_assert_eq(fls_gof_add_counts(&g, &b, c, 0), FLS_OK);
    cr_assert_eq(fls_gof_components(&g), 2);
    cr_assert_float_eq(g.p, fmin(1.0, 2.0 * fmin(FLS_STATS_CHI2_KAPPA * gsl_cdf_chisq_Q(2.4, 3.0), p1)),
                       1e-12);
    fls_bins_free(&b);
    /* one sample on a masked token fails, however good the rest */
    double q[3] = {0.5, 0.0, 0.5};
    cr_assert_eq(fls_bins_build(&b, q, 3, 100000, 32), FLS_OK);
    int64_t s[5] = {0, 2, 0, 1, 2};
    fls_gof_init(&g);
    cr_assert_eq(fls_gof_add_samples(&g, &b, s, 5), FLS_OK);
    cr_assert_eq(g.impossible, 1);
    cr_assert(!fls_gof_pass(&g, 1e-300));
    fls_bins_free(&b);
}

/* dof = 1: P(chi'^2_1(lambda) > x) = Phi(sqrt(lambda) - sqrt(x)) + Phi(-sqrt(lambda) - sqrt(x)). */
Test(power, noncentral_tail_matches_closed_form)
{
    double xs[4] = {0.5, 3.84, 10.0, 25.0}, ls[5] = {0.0, 0.3, 5.0, 40.0, 150.0};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++) {
            double x = xs[i], l = ls[j];
            double want = gsl_cdf_ugaussian_P(sqrt(l) - sqrt(x)) + gsl_cdf_ugaussian_P(-sqrt(l) - sqrt(x));
            cr_assert_float_eq(fls_stats_ncx2_Q(x, 1.0, l), want, 1e-12, "x %g lambda %g", x, l);
        }
    /* dof = 2, lambda = 0: exp(-x/2) */
    cr_assert_float_eq(fls_stats_ncx2_Q(3.0, 2.0, 0.0), exp(-1.5), 1e-14);
    /* monotone in lambda, decreasing in dof */
    cr_assert(fls_stats_power(31, 1e-6, 100.0) > fls_stats_power(31, 1e-6, 90.0));
    cr_assert(fls_stats_power(31, 1e-6, 100.0) < fls_stats_power(15, 1e-6, 100.0));
}

Test(power, sample_size_is_the_smallest)
{
    const double a = suite_alpha();
    int64_t prev = 0;
    int dofs[5] = {1, 3, 7, 15, 31};
    for (int i = 0; i < 5; i++) {
        int64_t N = fls_stats_sample_size(dofs[i], a, 0.01, 0.999);
        double pw = fls_stats_power(dofs[i], a, 4.0 * (double)N * 1e-4);
        double pw1 = fls_stats_power(dofs[i], a, 4.0 * (double)(N - 1) * 1e-4);
        printf("dof %d: N %lld (power %.9f, at N - 1 %.9f)\n", dofs[i], (long long)N, pw, pw1);
        cr_assert(pw >= 0.999 && pw1 < 0.999);
        cr_assert(N > prev);
        prev = N;
    }
    /* dof 1 by hand: sqrt(lambda) = z(alpha/2) + z(0.001) */
    double z = gsl_cdf_ugaussian_Qinv(a / 2) + gsl_cdf_ugaussian_Qinv(0.001);
    int64_t N1 = fls_stats_sample_size(1, a, 0.01, 0.999);
    cr_assert(fabs((double)N1 - z * z / 4e-4) < 0.01 * N1, "N %lld vs %g", (long long)N1, z * z / 4e-4);
    cr_assert_eq(fls_stats_sample_size_pointmass(0.01, 0.999), 688);
    cr_assert(pow(0.99, 688) <= 0.001 && pow(0.99, 687) > 0.001);
}

/* ---- exact tests, calibration, tails ---- */

/* log C(n, k) m^k (1 - m)^(n - k) */
static double lbinom(int64_t k, int64_t n, double m)
{
    return lgamma((double)n + 1) - lgamma((double)k + 1) - lgamma((double)(n - k) + 1) + (double)k * log(m) +
           (double)(n - k) * log1p(-m);
}

Test(exact, binomial_test_and_power_by_enumeration)
{
    const int64_t ns[3] = {1, 37, 500};
    const double ms[4] = {0.5, 0.03, 0.9, 1e-3};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 4; b++) {
            const int64_t n = ns[a];
            const double m = ms[b];
            double size = 0.0;
            for (int64_t k = 0; k <= n; k++) {
                double lo = 0.0, hi = 0.0;
                for (int64_t j = 0; j <= n; j++) {
                    double pj = exp(lbinom(j, n, m));
                    lo += j <= k ? pj : 0.0;
                    hi += j >= k ? pj : 0.0;
                }
                double want = fmin(1.0, 2.0 * fmin(lo, hi));
                double got = fls_stats_binom_test(k, n, m);
                cr_assert(fabs(got - want) <= 1e-9 * want + 1e-300, "n %lld m %g k %lld: %g vs %g",
                          (long long)n, m, (long long)k, got, want);
                if (got < 0.01)
                    size += exp(lbinom(k, n, m));
            }
            /* the power under the null is the exact size, at most the level */
            cr_assert_float_eq(fls_stats_binom_power(n, m, m, 0.01), size, 1e-9);
            cr_assert(size <= 0.01);
        }
    cr_assert_eq(fls_stats_binom_test(0, 10, 0.0), 1.0);
    cr_assert_eq(fls_stats_binom_test(1, 10, 0.0), 0.0);
    cr_assert_eq(fls_stats_binom_test(10, 10, 1.0), 1.0);
    cr_assert_eq(fls_stats_binom_test(11, 10, 0.5), 0.0);
    /* large n: doubled normal tail as a sanity bound */
    double p = fls_stats_binom_test(1000000 + 5000, 2000000, 0.5);
    cr_assert(p > 0.5 * erfc(5000 / sqrt(500000.0) / sqrt(2.0)) &&
              p < 2 * erfc(5000 / sqrt(500000.0) / sqrt(2.0)));
}

Test(exact, sum_of_binomials_by_enumeration)
{
    const int64_t n[3] = {40, 25, 60};
    const double m[3] = {0.1, 0.3, 0.02};
    /* brute-force pmf of the sum */
    double pmf[126] = {0};
    for (int64_t a = 0; a <= n[0]; a++)
        for (int64_t b = 0; b <= n[1]; b++)
            for (int64_t c = 0; c <= n[2]; c++)
                pmf[a + b + c] += exp(lbinom(a, n[0], m[0]) + lbinom(b, n[1], m[1]) + lbinom(c, n[2], m[2]));
    for (int64_t k = 0; k <= 125; k += 3) {
        double lo = 0.0, hi = 0.0;
        for (int64_t j = 0; j <= 125; j++) {
            lo += j <= k ? pmf[j] : 0.0;
            hi += j >= k ? pmf[j] : 0.0;
        }
        double want = fmin(1.0, 2.0 * fmin(lo, hi));
        int64_t kg[3] = {k / 3, k / 3, k - 2 * (k / 3)};
        int bonf = 1;
        double got = fls_stats_binsum_test(3, n, m, kg, &bonf);
        /* the convolution drops < 1e-30 of mass per group: p-values agree to that */
        cr_assert(fabs(got - want) <= 1e-9 * want + 1e-29, "k %lld: %g vs %g", (long long)k, got, want);
        cr_assert_eq(bonf, 0);
    }
    /* many groups with one tail mass: the sum is one binomial (checks the trimmed convolution) */
    {
        enum { G = 300 };
        int64_t ng[G], kk[G];
        double mg[G];
        for (int g = 0; g < G; g++) {
            ng[g] = 50;
            mg[g] = 0.2;
            kk[g] = 0;
        }
        const int64_t ks[5] = {2700, 2900, 3000, 3150, 3400};
        for (int i = 0; i < 5; i++) {
            kk[0] = ks[i];
            int bonf = 1;
            double got = fls_stats_binsum_test(G, ng, mg, kk, &bonf),
                   want = fls_stats_binom_test(ks[i], 15000, 0.2);
            cr_assert(fabs(got - want) <= 1e-9 * want + 1e-29, "k %lld: %g vs %g", (long long)ks[i], got,
                      want);
            cr_assert_eq(bonf, 0);
        }
    }
    /* one group is the binomial test; m = 0 groups add nothing; m = 1 groups add n */
    int64_t n2[3] = {100, 7, 9}, k2[3] = {13, 0, 9};
    double m2[3] = {0.1, 0.0, 1.0};
    cr_assert_float_eq(fls_stats_binsum_test(3, n2, m2, k2, NULL), fls_stats_binom_test(13, 100, 0.1), 1e-15);
    k2[1] = 1;
    cr_assert_eq(fls_stats_binsum_test(2, n2, m2, k2, NULL), fls_stats_binom_test(14, 100, 0.1));
}

Test(tail, masses_sets_and_resolution)
{
    /* head 0, tokens at 5, 12, 18, 23, 40 nats below */
    double l[6] = {0.0, -5.0, -12.0, -18.0, -23.0, -40.0}, p[6];
    cr_assert_eq(fls_stats_probs_temperature(l, 6, 1.0, p), FLS_OK);
    uint8_t in[6];
    cr_assert_float_eq(fls_stats_tail_set(p, 6, 10.0, in), p[2] + p[3] + p[4] + p[5], 1e-25);
    cr_assert(!in[0] && !in[1] && in[2] && in[3] && in[4] && in[5]);
    cr_assert_float_eq(fls_stats_tail_mass(p, 6, 15.0), p[3] + p[4] + p[5], 1e-25);
    cr_assert_float_eq(fls_stats_tail_mass(p, 6, 25.0), p[5], 1e-30);
    /* T = 2: depths halve */
    cr_assert_eq(fls_stats_probs_temperature(l, 6, 2.0, p), FLS_OK);
    cr_assert_float_eq(fls_stats_tail_mass(p, 6, 10.0), p[4] + p[5], 1e-25);
    /* resolution: a tail expecting ~6400 samples resolves ~10% at alpha 1e-7 */
    const double m = 1e-4, a = 1e-7;
    int64_t n = fls_stats_tail_sample_size(m, 0.1, a, FLS_STATS_POWER);
    printf("tail: m %g, deficit 10%% at alpha %g needs n %lld (expected %.0f)\n", m, a, (long long)n, n * m);
    cr_assert(n * m > 5000 && n * m < 8000);
    cr_assert(fls_stats_binom_power(n, m, 0.9 * m, a) >= FLS_STATS_POWER);
    cr_assert(fls_stats_binom_power(n - n / 50, m, 0.9 * m, a) < FLS_STATS_POWER);
    cr_assert(fabs(fls_stats_tail_deficit_caught(m, n, a, FLS_STATS_POWER) - 0.1) < 2e-3);
    /* too few expected samples: no deficit can be seen, only an excess */
    cr_assert(isinf(fls_stats_tail_deficit_caught(m, 100000, a, FLS_STATS_POWER)));
    cr_assert(isfinite(fls_stats_tail_excess_caught(m, 100000, a, FLS_STATS_POWER)));
}

/* The design: at its N the test catches TV 0.01 (as computed), and a much
 * smaller N does not. Two-bin references are designed by the exact binomial. */
Test(power, design_sees_tv_001)
{
    const double a = suite_alpha();
    double *pz = zipf_probs(4096), *ph = heavy_probs(4096, 0);
    fls_gof_design d;
    cr_assert_eq(fls_stats_design(pz, 1, 4096, a, &d), FLS_OK);
    printf("zipf design: N %lld, %d bins, dof %d, exact %d, tv %.5f\n", (long long)d.N, d.bins, d.dof,
           d.n_exact, d.tv);
    cr_assert(d.tv <= FLS_STATS_TV && d.dof >= 16);
    fls_gof_design d2;
    cr_assert_eq(fls_stats_design_at(pz, 1, 4096, a, d.N / 2, &d2), FLS_OK);
    cr_assert(d2.tv > FLS_STATS_TV);
    cr_assert_eq(fls_stats_design(ph, 1, 4096, a, &d), FLS_OK);
    printf("heavy design: N %lld, %d bins, dof %d, exact %d, smallest mass %.3g, tv %.5f\n", (long long)d.N,
           d.bins, d.dof, d.n_exact, d.min_mass, d.tv);
    cr_assert(d.tv <= FLS_STATS_TV && d.n_exact == 1 && d.bins == 2);
    /* the exact binomial design is what it claims */
    int64_t n = fls_stats_binom_sample_size(0.7, a, 0.01, FLS_STATS_POWER);
    cr_assert(fls_stats_binom_power(n, 0.3, 0.31, a) >= FLS_STATS_POWER);
    cr_assert(fls_stats_binom_power(n, 0.3, 0.29, a) >= FLS_STATS_POWER);
    cr_assert(fls_stats_binom_tv_caught(0.7, n / 2, a, FLS_STATS_POWER) > 0.01);
    free(pz);
    free(ph);
}

/* Exact size of the calibrated three-bin chi-square (reject when KAPPA Q < alpha)
 * by enumeration, for layouts with the smallest bin at the minimum expected
 * count: the approximation's worst case (one or two small bins beside a large
 * one). Checked at the suite's alpha, the level actually used. */
static double exact_size3(int64_t N, const double *pm, double alpha)
{
    const double c = gsl_cdf_chisq_Qinv(alpha / FLS_STATS_CHI2_KAPPA, 2.0);
    const double e0 = N * pm[0], e1 = N * pm[1], e2 = N * pm[2];
    double size = 0.0;
    const double s2 = sqrt(e2);
    for (int64_t x2 = (int64_t)fmax(0, e2 - 14 * s2); x2 <= (int64_t)(e2 + 16 * s2 + 20); x2++) {
        double w2 = exp(lbinom(x2, N, pm[2]));
        if (w2 < 1e-40)
            continue;
        const int64_t M = N - x2;
        const double q = pm[0] / (pm[0] + pm[1]), mu = M * q, sd = sqrt(M * q * (1 - q));
        double acc = 0.0;
        for (int64_t x0 = (int64_t)fmax(0, mu - 14 * sd); x0 <= (int64_t)fmin(M, mu + 14 * sd + 20); x0++) {
            const int64_t x1 = M - x0;
            double X = (x0 - e0) * (x0 - e0) / e0 + (x1 - e1) * (x1 - e1) / e1 + (x2 - e2) * (x2 - e2) / e2;
            if (X > c)
                acc += exp(lbinom(x0, M, q));
        }
        size += w2 * acc;
    }
    return size;
}

Test(exact, chi_square_calibration_at_the_alpha_used, .timeout = 300)
{
    const double a = suite_alpha();
    const int64_t N = 40000; /* smallest bin at the minimum: 1000 expected */
    const double x = FLS_STATS_MIN_EXPECTED / (double)N;
    const double layouts[3][3] = {{0.5, 0.5 - x, x}, {1 - 3 * x, 2 * x, x}, {1 - 2 * x, x, x}};
    for (int i = 0; i < 3; i++) {
        double s = exact_size3(N, layouts[i], a);
        printf("3 bins (%.4f, %.4f, %.4f), N %lld: exact size of the calibrated test %.4g = %.3f alpha "
               "(uncalibrated ~%.3f alpha)\n",
               layouts[i][0], layouts[i][1], layouts[i][2], (long long)N, s, s / a,
               s / a * FLS_STATS_CHI2_KAPPA);
        cr_expect(s <= a, "layout %d: size %g > alpha %g", i, s, a);
    }
    /* and the bins the machinery builds never have a three-bin layout below the minimum */
    double p3[3] = {0.5, 0.5 - 0.02, 0.02};
    fls_bins b;
    cr_assert_eq(fls_bins_build(&b, p3, 3, 40000, FLS_STATS_MAX_BINS), FLS_OK); /* 800 expected: merged */
    cr_assert_eq(b.n_bins, 2);
    fls_bins_free(&b);
    cr_assert_eq(fls_bins_build(&b, p3, 3, 60000, FLS_STATS_MAX_BINS), FLS_OK); /* 1200: its own bin */
    cr_assert_eq(b.n_bins, 3);
    fls_bins_free(&b);
}

/* A deep-tail reference: head, 12% at 10.5-14.5 nats, the rest 16.5-30 nats. */
static double *deep_probs(int64_t V)
{
    double *l = malloc((size_t)V * sizeof(double)), *p = malloc((size_t)V * sizeof(double));
    for (int64_t v = 0; v < V; v++) {
        double u = (double)((v * 2654435761u) % 1000) / 1000.0;
        l[v] = v % 8 == 0 ? -(10.5 + 4.0 * u) : v % 4 == 1 ? -(18.5 + 11.5 * u) : -(16.5 + 2.0 * u);
    }
    l[V / 5] = 0.0;
    cr_assert_eq(fls_stats_probs_temperature(l, V, 1.0, p), FLS_OK);
    free(l);
    return p;
}

/* Tail tests of exact samples: the count of rejections at level 0.01 matches the
 * exact size of the exact test (t = 10, n such that ~300 tail samples). */
Test(tail, size_of_the_tail_test, .timeout = 300)
{
    const double alpha = suite_alpha();
    const int64_t V = 4096;
    double *p = deep_probs(V);
    const double m = fls_stats_tail_mass(p, V, 10.0);
    const int64_t n = (int64_t)(300.0 / m);
    const int M = 1000;
    fls_refsampler *s;
    cr_assert_eq(fls_refsampler_create(&s, p, V, 3001), FLS_OK);
    int64_t *counts = malloc((size_t)V * sizeof(int64_t)), rej = 0;
    for (int r = 0; r < M; r++) {
        memset(counts, 0, (size_t)V * sizeof(int64_t));
        fls_refsampler_counts(s, n, counts);
        fls_tail_result tr;
        cr_assert_eq(fls_stats_tail_test(p, counts, &n, 1, V, 10.0, alpha, &tr), FLS_OK);
        rej += tr.p < 0.01;
    }
    const double size = fls_stats_binom_power(n, m, m, 0.01);
    printf("tail t 10: m %.4g, n %lld, seed 3001, exact size at 0.01: %.5f\n", m, (long long)n, size);
    check_rate(CHK_SIZE_TAIL, "tail size", rej, M, size, alpha);
    fls_refsampler_destroy(s);
    free(counts);
    free(p);
}

/* The designed deficit is caught: the tail beyond 10 nats loses half its mass
 * (the rest renormalized so the tail fraction is exactly half), at the n the
 * design prescribes for r = 0.5 at the suite's alpha (the test is the same
 * exact binomial at every threshold; t = 10 keeps n small). */
Test(tail, power_of_the_tail_test, .timeout = 300)
{
    const double alpha = suite_alpha(), r = 0.5;
    const int64_t V = 4096;
    const int M = 500;
    double *p = deep_probs(V), *q = malloc((size_t)V * sizeof(double));
    uint8_t *in = malloc((size_t)V);
    const double m = fls_stats_tail_set(p, V, 10.0, in);
    for (int64_t v = 0; v < V; v++)
        q[v] = in[v] ? p[v] * (1.0 - r) : p[v] * (1.0 - m * (1.0 - r)) / (1.0 - m);
    const int64_t n = fls_stats_tail_sample_size(m, r, alpha, FLS_STATS_POWER);
    printf("check %d tail deficit %.0f%%: m %.4g, n %lld (expected %.0f), seed 3002\n", CHK_POWER_TAIL,
           100 * r, m, (long long)n, n * m);
    fls_refsampler *s;
    cr_assert_eq(fls_refsampler_create(&s, q, V, 3002), FLS_OK);
    int64_t *counts = malloc((size_t)V * sizeof(int64_t)), misses = 0;
    for (int k = 0; k < M; k++) {
        memset(counts, 0, (size_t)V * sizeof(int64_t));
        fls_refsampler_counts(s, n, counts);
        fls_tail_result tr;
        cr_assert_eq(fls_stats_tail_test(p, counts, &n, 1, V, 10.0, alpha, &tr), FLS_OK);
        misses += tr.p >= alpha;
    }
    check_power(CHK_POWER_TAIL, "tail deficit", misses, M, FLS_STATS_POWER, alpha);
    fls_refsampler_destroy(s);
    free(counts);
    free(in);
    free(p);
    free(q);
}

/* ---- rows that test nothing are not tested, never passes (deterministic) ---- */

/* The token audit's rows that cannot test anything with their inputs: pass 0,
 * p NaN, untested 1, neither counted as a pass nor flagged as a failure. */
Test(verdicts, rows_that_test_nothing_are_not_tested)
{
    /* 2 rows, V = 8, distinct logits 0..-3.5 (no ties, nothing 10 nats below), one draw per row */
    float l[2 * 8];
    for (int b = 0; b < 2; b++)
        for (int v = 0; v < 8; v++)
            l[b * 8 + v] = -0.5f * (float)v;
    int64_t t[2] = {0, 1};
    fls_tokens_options o;
    fls_tokens_options_default(&o);
    o.pairs_rows = 1;
    fls_audit_row rows[16];
    size_t n = 0;
    cr_assert_eq(fls_audit_tokens(l, 2, 8, 8, NULL, 1.0f, t, 1, &o, rows, &n), FLS_OK);
    cr_assert_eq(n, 8);
    const char *none[6] = {"tail10", "tail15", "tail20", "tail25", "pairs-draws", "ties"};
    for (int k = 0; k < 6; k++) {
        const fls_audit_row *r = fls_audit_row_named(rows, n, none[k]);
        cr_assert(r, "%s", none[k]);
        cr_expect(r->untested && !r->pass && isnan(r->p), "%s: untested %d pass %d p %g", r->test,
                  r->untested, r->pass, r->p);
        cr_expect_eq(fls_audit_row_verdict(r), FLS_AUDIT_UNTESTED, "%s", r->test);
        cr_expect(r->note[0], "%s says why", r->test);
        fls_audit_print_row(stdout, r);
    }
    /* the goodness of fit always tests (the support); pairs-rows has a pair of rows */
    cr_expect(!rows[0].untested && rows[0].pass);
    const fls_audit_row *pr = fls_audit_row_named(rows, n, "pairs-rows");
    cr_expect(pr && !pr->untested && pr->pass);
    cr_expect(!fls_audit_rows_flagged(rows, n, NULL), "a row not tested is not a failure");
    fls_audit_tally tally;
    fls_audit_tally_rows(rows, n, &tally);
    cr_expect(tally.tests == 8 && tally.passed == 2 && tally.failed == 0 && tally.untested == 6);
    cr_expect_eq(fls_audit_tally_verdict(&tally), FLS_AUDIT_PASS);
    char line[128];
    fls_audit_tally_format(&tally, line, sizeof line);
    cr_expect_str_eq(line, "8 tests: 2 passed, 0 failed, 6 not tested");

    /* a token outside the support still fails the tested rows (and is flagged) */
    t[1] = 9;
    cr_assert_eq(fls_audit_tokens(l, 2, 8, 8, NULL, 1.0f, t, 1, &o, rows, &n), FLS_OK);
    cr_expect(!rows[0].pass && !rows[0].untested && fls_audit_rows_flagged(rows, n, "gof"));
    cr_expect(!fls_audit_rows_flagged(rows, n, "pairs-draws"), "not tested, not flagged");
    fls_audit_tally_rows(rows, n, &tally);
    cr_expect_eq(fls_audit_tally_verdict(&tally), FLS_AUDIT_FAIL);

    /* one row: no pairs of rows; two draws: pairs-draws is tested */
    int64_t t2[2] = {0, 1};
    cr_assert_eq(fls_audit_tokens(l, 1, 8, 8, NULL, 1.0f, t2, 2, &o, rows, &n), FLS_OK);
    cr_expect(fls_audit_row_named(rows, n, "pairs-rows")->untested);
    cr_expect(!fls_audit_row_named(rows, n, "pairs-draws")->untested);

    /* a rule that cuts nothing: boundary not tested; without replacement with a support of 1:
     * pl-cond not tested; V = 300, K = 2: (V + 1)^K > 65536, pl-tuples not enumerated */
    fls_params rule;
    fls_params_default(&rule);
    rule.top_k = 8;
    o.rule = &rule;
    o.pairs_rows = 0;
    cr_assert_eq(fls_audit_tokens(l, 1, 8, 8, NULL, 1.0f, t2, 2, &o, rows, &n), FLS_OK);
    cr_expect(fls_audit_row_named(rows, n, "boundary")->untested);
    rule.top_k = 1;
    rule.without_replacement_k = 2;
    int64_t w[4] = {0, -1, 0, -1};
    cr_assert_eq(fls_audit_tokens(l, 1, 8, 8, NULL, 1.0f, w, 2, &o, rows, &n), FLS_OK);
    cr_expect(fls_audit_row_named(rows, n, "pl-cond")->untested);
    cr_expect(!fls_audit_row_named(rows, n, "pl-tuples")->untested && rows[0].pass);
    float *big = malloc(300 * sizeof *big);
    for (int v = 0; v < 300; v++)
        big[v] = -0.01f * (float)v;
    rule.top_k = 0;
    int64_t wb[4] = {0, 1, 2, 3};
    cr_assert_eq(fls_audit_tokens(big, 1, 300, 300, NULL, 1.0f, wb, 2, &o, rows, &n), FLS_OK);
    cr_expect(fls_audit_row_named(rows, n, "pl-tuples")->untested);
    cr_expect(!fls_audit_row_named(rows, n, "pl-cond")->untested);
    free(big);

    /* a tail with mass: tested, and one where only an excess can show stays tested */
    fls_audit_row tail;
    memset(&tail, 0, sizeof tail);
    snprintf(tail.kind, sizeof tail.kind, "tail");
    tail.pass = 1;
    tail.p = 0.5;
    tail.tail_mass = 1e-6;
    tail.deficit_caught = INFINITY;
    tail.excess_caught = 3.0;
    cr_expect(!fls_audit_tail_untested(&tail) && tail.pass && !tail.untested);
    tail.excess_caught = INFINITY;
    tail.pass = 0; /* it failed (a sample outside the support): a failure, not "not tested" */
    cr_expect(!fls_audit_tail_untested(&tail) && !tail.untested);
    tail.pass = 1;
    cr_expect(fls_audit_tail_untested(&tail) && tail.untested && !tail.pass && isnan(tail.p));
    cr_expect_eq(fls_audit_mark_untested(&tail, 1), 0, "already marked");

    /* nothing tested at all: the run's verdict is not a pass */
    fls_audit_tally_rows(&tail, 1, &tally);
    cr_expect(tally.untested == 1 && tally.passed == 0);
    cr_expect_eq(fls_audit_tally_verdict(&tally), FLS_AUDIT_UNTESTED);
    fls_audit_tally_rows(NULL, 0, &tally);
    cr_expect_eq(fls_audit_tally_verdict(&tally), FLS_AUDIT_UNTESTED, "no rows: nothing tested");
    /* an error row is a failure, whatever untested says */
    fls_audit_row_error(&tail, FLS_ERR_INTERNAL, "x");
    cr_expect_eq(fls_audit_row_verdict(&tail), FLS_AUDIT_FAIL);
    cr_expect_str_eq(fls_audit_verdict_name(FLS_AUDIT_UNTESTED), "untested");
    cr_expect_str_eq(fls_audit_verdict_name(FLS_AUDIT_PASS), "pass");
    cr_expect_str_eq(fls_audit_verdict_name(FLS_AUDIT_FAIL), "fail");
}
