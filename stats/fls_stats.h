/*
 * fls_stats.h — the exactness machinery of flashsample (GSL, double precision).
 *
 * One protocol for every statistical test (docs/STATS.md gives the whole of it):
 *   1. exact reference probabilities in double (one function per sampling rule:
 *      fls_stats_probs_temperature here; top-k, min-p, ... add theirs beside it);
 *   2. equal-mass bins with >= 100 expected counts each; the tail is merged into
 *      bins, never dropped; zero-probability tokens form an "impossible" set, and
 *      one sample there fails the test outright;
 *   3. Pearson chi-square, p-value from gsl_cdf_chisq_Q;
 *   4. a per-test level alpha from a family-wise false-failure budget of 1e-4 per
 *      run (Bonferroni over the family the run declares and logs);
 *   5. sample sizes such that a total-variation error of 0.01 on the binned
 *      distribution is caught with probability >= 0.999 at that alpha;
 *   6. fixed, logged seeds.
 * An independent reference sampler (gsl_ran_discrete) tests the tests: exact
 * samples must pass at the controlled rate, perturbed ones must fail.
 */
#ifndef FLS_STATS_H
#define FLS_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "flashsample.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- The protocol's constants ---- */
#define FLS_STATS_BUDGET       1e-4  /* family-wise false-failure probability of one full run */
#define FLS_STATS_TV           0.01  /* total-variation error (binned) every test must catch ... */
#define FLS_STATS_POWER        0.999 /* ... with at least this probability */
#define FLS_STATS_MIN_EXPECTED 100.0 /* smallest expected count of a bin */
#define FLS_STATS_MAX_BINS     32    /* bins per distribution, so dof <= 31 (see fls_bins_build) */

/* The family of one run. A run (the stats suite, one `flashsample audit`, the
 * GPU suite) declares every chance-failing test it will run, part by part
 * (e.g. "audit full on cpu: 24 tests", "machinery self-tests: 12"), before it
 * runs any; every test of the run then uses alpha = budget / size (Bonferroni).
 * The family is printed with its parts, so the logged family is the real one,
 * and adding a test to a run visibly lowers that run's alpha (and only that
 * run's). Holm would give the same guarantee with more power, but a row's
 * verdict would then depend on the other rows' p-values; each test here must
 * stand alone. */
#define FLS_STATS_FAMILY_MAX_PARTS 16

typedef struct fls_stats_family_part {
    char name[96];
    int tests;
} fls_stats_family_part;

typedef struct fls_stats_family {
    double budget; /* family-wise false-failure probability of the run (FLS_STATS_BUDGET) */
    int n_parts;
    fls_stats_family_part parts[FLS_STATS_FAMILY_MAX_PARTS];
    int size;     /* tests in the family: the sum over the parts */
    double alpha; /* budget / size (budget while size is 0) */
} fls_stats_family;

/* An empty family with this budget (<= 0: FLS_STATS_BUDGET). */
void fls_stats_family_init(fls_stats_family *family, double budget);
/* Adds a part of `tests` tests; size and alpha follow. FLS_ERR_PARAM if
 * tests < 0 or the family already has FLS_STATS_FAMILY_MAX_PARTS parts. */
fls_status fls_stats_family_add(fls_stats_family *family, const char *name, int tests);
/* The family, its parts, budget and alpha in one line, prefixed. */
void fls_stats_family_print(FILE *f, const char *prefix, const fls_stats_family *family);
/* Bonferroni level for a family of size tests. */
double fls_stats_bonferroni(double budget, int size);

/* ---- 1. Exact reference probabilities (double) ---- */

/* Temperature rule: p = softmax(l / T) in double, by log-sum-exp (subtract the
 * max, sum with compensation). -inf logits are masked (p = 0). T = 0 is greedy:
 * a point mass on the lowest-index maximum. Errors: FLS_ERR_NULL, FLS_ERR_SIZE
 * (V < 1), FLS_ERR_TEMPERATURE (T < 0, NaN, inf), FLS_ERR_NAN (NaN or +inf
 * logit), FLS_ERR_ALL_MASKED. */
fls_status fls_stats_probs_temperature(const double *logits, int64_t V, double T, double *p);
fls_status fls_stats_probs_temperature_f32(const float *logits, int64_t V, double T, double *p);

/* Logits of row `row` of H against every row of W, accumulated in double from
 * the exact values of the inputs (any dtype): the reference for the fused path.
 * The engine accumulates in fp32; the difference (~1e-6 relative) is far below
 * what any test here can see. logits has W->rows entries. */
fls_status fls_stats_logits_fused(const fls_matrix *W, const fls_matrix *H, int64_t row, double *logits);

/* Exact value of one element of a matrix, as double (independent of lib/half.c). */
double fls_stats_matrix_get(const fls_matrix *M, int64_t i, int64_t j);

/* Product distribution pq[x * Vq + y] = p[x] q[y] (for independence tests). */
void fls_stats_product(const double *p, int64_t Vp, const double *q, int64_t Vq, double *pq);

/* Moves total mass tv from the tokens with from[v] != 0 to those with
 * to[v] != 0, proportionally to p inside each set (uniformly inside `to` if it
 * has no mass). q is a distribution with TV(p, q) = tv exactly when the sets are
 * disjoint. FLS_ERR_PARAM if `from` holds less than tv or a set is empty. */
fls_status fls_stats_perturb(const double *p, int64_t V, const uint8_t *from, const uint8_t *to, double tv,
                             double *q);

/* Total variation distance 1/2 sum |p - q|. */
double fls_stats_tv(const double *p, const double *q, int64_t V);

/* ---- 2. Equal-mass binning ---- */

/* Tokens sorted by decreasing probability (ties by index) fill bins greedily
 * up to a target mass m = max(1/max_bins, 100/n): a token with p >= m is a bin
 * alone, the others are grouped until the group holds >= m. A last group below
 * m is its own bin if it expects >= 100 samples, else it joins the previous bin;
 * so every bin expects >= 100 samples (when n >= 100; with fewer samples, or
 * all the mass on one token, there is one bin), no token with p > 0 is dropped,
 * and there are at most max_bins bins. Tokens with p == 0 get bin -1. */
typedef struct fls_bins {
    int64_t cells; /* tokens (or cells of a pair table) */
    int n_bins;
    int32_t *bin_of;        /* cells entries: bin index, or -1 for an impossible cell */
    double *mass;           /* n_bins entries: reference probability of each bin */
    double impossible_mass; /* always 0; kept for symmetry in logs */
    int64_t n;              /* the sample count the bins were made for */
} fls_bins;

fls_status fls_bins_build(fls_bins *bins, const double *p, int64_t cells, int64_t n, int max_bins);
void fls_bins_free(fls_bins *bins);

/* ---- 3. Pearson chi-square ---- */

/* A goodness-of-fit result. Several independent groups (rows with their own
 * reference) combine by adding chi2 and dof: a sum of independent chi-square
 * variables is chi-square with the summed degrees of freedom. */
typedef struct fls_gof {
    double chi2;
    int dof;
    double p;           /* gsl_cdf_chisq_Q(chi2, dof); 1 when dof = 0; 0 if impossible > 0 */
    int64_t n;          /* samples tested */
    int64_t impossible; /* samples on zero-probability or out-of-range cells: each one fails */
} fls_gof;

void fls_gof_init(fls_gof *g);
/* Adds one group: counts has bins->cells entries (samples per cell), out_of_range
 * counts samples outside [0, cells). */
fls_status fls_gof_add_counts(fls_gof *g, const fls_bins *bins, const int64_t *counts, int64_t out_of_range);
/* Adds one group from raw samples (cell indices). */
fls_status fls_gof_add_samples(fls_gof *g, const fls_bins *bins, const int64_t *samples, int64_t n);
/* Pass at level alpha: no impossible sample and p >= alpha. */
int fls_gof_pass(const fls_gof *g, double alpha);

/* ---- 4. Power and sample size ---- */

/* Upper tail P(X > x) of the noncentral chi-square with dof degrees of freedom
 * and noncentrality lambda, as the Poisson(lambda/2) mixture of central tails
 * gsl_cdf_chisq_Q(x, dof + 2j). Truncation error < 1e-15. */
double fls_stats_ncx2_Q(double x, double dof, double lambda);
/* Power of the level-alpha chi-square test with dof degrees of freedom against
 * an alternative of noncentrality lambda. */
double fls_stats_power(int dof, double alpha, double lambda);
/* Smallest N such that every alternative at total variation >= tv (on the
 * binned distribution, at most dof + 1 bins) is rejected with probability
 * >= power at level alpha (derivation in stats/power.c). */
int64_t fls_stats_sample_size(int dof, double alpha, double tv, double power);
/* The sample size of one test of G groups (ref holds G distributions of V
 * cells each; any one group may carry the whole error): the smallest N on the
 * way down from the largest possible N such that the bins built for N
 * (fls_bins_build with FLS_STATS_MAX_BINS) have dof d >= 1 and
 * N >= fls_stats_sample_size(d, alpha, TV, power); *dof = d. Build the final
 * bins for this N. When every group's mass fits one bin (a point mass), *dof = 0
 * and N = fls_stats_sample_size_pointmass (the impossible set is the test). */
fls_status fls_stats_design_size(const double *ref, int64_t G, int64_t V, double alpha, int64_t *N, int *dof);
/* Same for a point-mass reference (T = 0): any sample off the argmax fails, so
 * N = ceil(log(1 - power) / log(1 - tv)). */
int64_t fls_stats_sample_size_pointmass(double tv, double power);

/* ---- 5. Independent reference sampler (gsl_ran_discrete, Walker alias) ---- */

typedef struct fls_refsampler fls_refsampler;
/* p need not be normalized; seed feeds gsl_rng_mt19937. */
fls_status fls_refsampler_create(fls_refsampler **s, const double *p, int64_t V, uint64_t seed);
void fls_refsampler_destroy(fls_refsampler *s);
void fls_refsampler_reseed(fls_refsampler *s, uint64_t seed);
/* Adds n samples to counts (V entries). */
void fls_refsampler_counts(fls_refsampler *s, int64_t n, int64_t *counts);

/* ---- Reporting: one row per test ---- */

/* The result of one test (a goodness-of-fit case of the audit, or one test of
 * an audit of external tokens). */
typedef struct fls_audit_row {
    char test[64];  /* e.g. "zipf-fused" */
    char engine[8]; /* "cpu", "cuda", or "ext" for external tokens */
    int64_t V;
    int64_t draws; /* total samples drawn */
    double chi2;
    int dof;
    double p;     /* the test's p-value */
    double alpha; /* per-test level of the run's family */
    int pass;     /* p >= alpha, and no sample on a zero-probability token */
} fls_audit_row;

/* One line per row: test, engine, V, draws, chi2, dof, p, alpha, pass. */
void fls_audit_print_header(FILE *f);
void fls_audit_print_row(FILE *f, const fls_audit_row *row);

#ifdef __cplusplus
}
#endif

#endif /* FLS_STATS_H */
