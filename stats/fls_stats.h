/*
 * fls_stats.h — the exactness machinery of flashsample (GSL, double precision).
 *
 * One protocol for every statistical test (docs/STATS.md gives the whole of it):
 *   1. exact reference probabilities in double (one function per sampling rule:
 *      fls_stats_probs_temperature, fls_stats_probs_rule for the rule family
 *      (every filter of variants/registry.h), fls_stats_pl_tuples for ordered
 *      tuples without replacement);
 *   2. equal-mass bins; the tail is merged into bins, never dropped;
 *      zero-probability tokens form an "impossible" set, and one sample there
 *      fails the test outright;
 *   3. an exact binomial test where there are two bins (whatever their expected
 *      counts), Pearson chi-square where there are three or more, each bin then
 *      expecting >= 1000, its p-value multiplied by a calibration factor
 *      (FLS_STATS_CHI2_KAPPA) that bounds the approximation's excess size at
 *      the levels used; an exact binomial (or sum-of-binomials) test of the
 *      mass more than t nats below the row's head, t = 10, 15, 20, 25;
 *   4. a per-test level alpha from a family-wise false-failure budget of 1e-4 per
 *      run (Bonferroni over the family the run declares and logs);
 *   5. sample sizes such that a total-variation error of 0.01 on the binned
 *      distribution is caught with probability >= 0.999 at that alpha, and a
 *      statement of what each test can and cannot see at the size it ran;
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
#include "variants/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- The protocol's constants ---- */
#define FLS_STATS_BUDGET       1e-4   /* family-wise false-failure probability of one run */
#define FLS_STATS_TV           0.01   /* total-variation error (binned) every test must catch ... */
#define FLS_STATS_POWER        0.999  /* ... with at least this probability */
#define FLS_STATS_MIN_EXPECTED 1000.0 /* smallest expected count of a bin of a chi-square test */
#define FLS_STATS_MAX_BINS     32     /* bins per distribution, so dof <= 31 (see fls_bins_build) */
/* Pearson's chi-square p-values are multiplied by this before they are compared
 * with alpha. With every bin expecting >= FLS_STATS_MIN_EXPECTED, the real
 * size of the uncorrected test at alpha in [1e-8, 1e-4] is at most ~1.15 alpha
 * (exact enumeration of the worst layout, one small bin beside large ones;
 * tests/stats/test_machinery.c checks it at the alpha the suite uses). */
#define FLS_STATS_CHI2_KAPPA 1.25
/* The tail thresholds (nats below the row's most likely token). */
#define FLS_STATS_N_TAILS 4
extern const double fls_stats_tail_t[FLS_STATS_N_TAILS]; /* 10, 15, 20, 25 */

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

/* What a serving engine adds to one row's logits (docs/RULES.md, "Masks,
 * bias and penalties"), in the layout of fls_params for one row: mask (NULL =
 * none; bit v % 32 of word v / 32 set = token v allowed), bias_k (id, value)
 * pairs and seen_k (id, count) pairs (id -1 = padding; counts NULL = all 0),
 * and the row's penalties r (1 = off), presence, frequency. */
typedef struct fls_stats_mods {
    const int32_t *mask;
    const int64_t *bias_ids;
    const float *bias_values;
    int64_t bias_k;
    const int64_t *seen_ids;
    const int32_t *seen_counts;
    int64_t seen_k;
    float repetition, presence, frequency;
} fls_stats_mods;

/* Applies m to a row of V raw logits in place, written from the documented
 * formula (independent of lib/front/api.c): each listed token's logit is
 * taken as the fp32 value (float)l[v] and changed by the documented fp32
 * operations (penalties, then bias; each one rounding, no FMA), then
 * disallowed tokens become -inf. Logits from a float row pass unchanged
 * through the double; the fused path's double logits are rounded to the
 * engine's fp32 precision only where a list touches them. */
void fls_stats_mods_apply(const fls_stats_mods *m, double *l, int64_t V);

/* Exact value of one element of a matrix, as double (independent of lib/base/half.c). */
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

/* ---- 1b. The rule family (docs/RULES.md), exact in double ---- */

/* A rule of the family: the value of every truncation filter of the registry
 * (variants/registry.h), value[id] for the filter FLS_FILTER_<ID>, applied in
 * the registry's order (min-p, top-k, top-p, top-n-sigma, epsilon, ...); a
 * filter is off where its value is its descriptor's off value
 * (fls_filters[id].off). The exact pmf of each (stats/rules.c) is written from
 * its definition on the sorted row, independently of the engines' variants/
 * code; the audit loops over the registry and names no rule. */
typedef struct fls_stats_rule {
    double value[FLS_FILTER_COUNT]; /* by registry id; a count (top-k) is an integral double */
} fls_stats_rule;

/* Every filter off (value[id] = fls_filters[id].off). */
void fls_stats_rule_off(fls_stats_rule *r);
/* Whether any filter is on (a value other than its off value). */
int fls_stats_rule_active(const fls_stats_rule *r);
/* FLS_OK or FLS_ERR_PARAM: a value outside its filter's range (stats/rules.c's
 * own check of each definition's domain: NaN, a count not an integer, ...) or
 * a count above V (top-k <= V). */
fls_status fls_stats_rule_check(const fls_stats_rule *r, int64_t V);
/* Row b's rule from the library's parameters: the three built-ins from their
 * own fields (min_p, top_k, top_p, or row_min_p[b], row_top_k[b],
 * row_top_p[b]), the registry rule named by `filter` (fls_filter_lookup) from
 * filter_value or row_filter_value[b], the others off. p NULL: every filter
 * off. FLS_ERR_PARAM for a `filter` the registry does not know or that names a
 * built-in (the library refuses both), or row_filter_value without `filter`.
 * The values are not checked (fls_stats_rule_check). */
fls_status fls_stats_rule_from_params(const fls_params *p, int64_t b, fls_stats_rule *r);
/* "min-p 0.05, top-k 50" (the filters that are on, by their registry names)
 * or "none", into out (cap bytes). */
void fls_stats_rule_describe(const fls_stats_rule *r, char *out, size_t cap);

/* What the support of a row is, and how close its decisions came to their
 * thresholds. The support is always an upper set of the rank order (larger x
 * first): { v : x_v >= cut }, ties at the cutoff kept. */
typedef struct fls_stats_support {
    int64_t finite;    /* tokens with a finite logit */
    int64_t size;      /* tokens kept */
    double cut;        /* the smallest kept tempered logit */
    int64_t n_at_cut;  /* tokens at it (the boundary class, all kept) */
    double outside;    /* the largest finite tempered logit not kept (-inf: none) */
    int64_t n_outside; /* tokens at it (the class just outside) */
    /* The filter that set the final cutoff: its registry id + 1 (so 1 min-p,
     * 2 top-k, 3 top-p, 4 top-n-sigma, 5 epsilon, FLS_FILTER_<ID> + 1 in
     * general), 0 when no filter cut a token. */
    int by;
    /* The smallest distance of a decision from its threshold, relative (min-p,
     * epsilon, top-n-sigma: |x - threshold| / max(1, |x|); top-p: |A - p Z| / Z,
     * the cumulative mass against the target; top-k: the gap between the k-th
     * value and the next distinct one, relative). The engines decide on float
     * tempered logits, this reference on double ones: supports agree whenever
     * margin >> 1e-7 (INFINITY: no decision). */
    double margin;
} fls_stats_support;

/* The final support of a row of V logits at temperature T (T = 0: the logits
 * as given) under rule r: keep[v] = 1 for the tokens that survive every filter
 * (keep may be NULL). Errors as fls_stats_probs_temperature, and FLS_ERR_PARAM
 * (fls_stats_rule_check), FLS_ERR_OUT_OF_MEMORY. */
fls_status fls_stats_rule_support(const double *logits, int64_t V, double T, const fls_stats_rule *r,
                                  uint8_t *keep, fls_stats_support *info);
/* The same support with its parameters moved to the middle of their decision
 * gaps, filter by filter in registry order (each filter's own centering in
 * stats/rules.c): min-p to exp of the midpoint between the last kept and the
 * first dropped x - m, top-p to the midpoint of the masses A / Z of the last
 * kept and the first dropped class (within the support of the filters before
 * it, centered), top-n-sigma likewise between the two x, epsilon to exp of
 * the midpoint of x - m - log Z; a filter with no gap (top-k) keeps its value.
 * The audit's cases use it so that a boundary cannot move between the
 * engines' float and the reference's double arithmetic. min-p and top-p are
 * returned as float values (the library's fields are float). */
fls_status fls_stats_rule_center(const double *logits, int64_t V, double T, const fls_stats_rule *r,
                                 fls_stats_rule *out);
/* The rule's pmf: softmax of l / T over the final support (0 elsewhere); T = 0:
 * a point mass on the lowest-index maximum (no filter drops it). */
fls_status fls_stats_probs_rule(const double *logits, int64_t V, double T, const fls_stats_rule *r, double *p,
                                fls_stats_support *info);
fls_status fls_stats_probs_rule_f32(const float *logits, int64_t V, double T, const fls_stats_rule *r,
                                    double *p, fls_stats_support *info);

/* Sampling without replacement (Plackett-Luce, Gumbel-top-k): the exact
 * probability of every ordered K-tuple drawn from p without replacement,
 * positions beyond the support's size, or beyond a row's k_row <= K (<= 0:
 * K), being -1. Cells: (V + 1)^K, the tuple
 * (t_0, ..., t_{K-1}) at sum_j d_j (V + 1)^(K-1-j) with d_j = t_j, or V for
 * -1. P = prod_j p_{t_j} / (1 - sum_{i<j} p_{t_i}) (the remaining mass summed
 * directly, not as a difference). FLS_ERR_SIZE unless 1 <= K and (V + 1)^K <=
 * 2^20. */
fls_status fls_stats_pl_tuples(const double *p, int64_t V, int K, int k_row, double *out);
int64_t fls_stats_pl_cells(int64_t V, int K); /* (V + 1)^K, or -1 beyond 2^20 */
int64_t fls_stats_pl_cell(const int64_t *tuple, int64_t V,
                          int K); /* a tuple's cell; -1 if a token is out of range */

/* The conditional (Rosenblatt) transform of one ordered tuple: position 0's
 * randomized probability integral transform u_0 = F(t_0 -) + U_0 p_{t_0} in the
 * CDF of p (tokens by decreasing probability, start[] from
 * fls_stats_cdf_start), position j's in the distribution of the tokens not yet
 * drawn, renormalized. Under Plackett-Luce sampling the u_j of the positions
 * with support left are independent Uniform(0, 1): u[j] is set for them,
 * u[j] = -1 for positions past the support (which must be -1). Returns the
 * number of transforms set, or -1 if the tuple is impossible (a token out of
 * range or of probability 0, a repeat, -1 while the support is not
 * exhausted, a token after it is, or past k_row positions). U: K uniforms. */
int fls_stats_pl_transform(const double *p, const double *start, int64_t V, int64_t support,
                           const int64_t *tuple, int K, int k_row, const double *U, double *u);
/* start[v] = the mass of the tokens before v in decreasing-probability order
 * (ties by index), for V tokens. */
fls_status fls_stats_cdf_start(const double *p, int64_t V, double *start);

/* ---- 2. Equal-mass binning ---- */

/* Tokens sorted by decreasing probability (ties by index) fill bins greedily
 * up to a target mass m = max(1/max_bins, FLS_STATS_MIN_EXPECTED/n): a token
 * with p >= m is a bin alone, the others are grouped until the group holds
 * >= m. A last group below m is its own bin if it expects >=
 * FLS_STATS_MIN_EXPECTED samples, else it joins the previous bin. So with
 * three or more bins every bin expects >= FLS_STATS_MIN_EXPECTED (the
 * chi-square's domain). Where that leaves a single bin and at least two
 * tokens have p > 0, there are two bins instead: the most likely tokens up to
 * half the mass (at least one token), and the rest, whatever their expected
 * counts (the exact binomial test's domain). No token with p > 0 is dropped,
 * there are at most max_bins bins, and tokens with p == 0 get bin -1. */
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

/* ---- 3. Goodness of fit: exact binomial on two bins, chi-square on more ---- */

/* Exact two-sided binomial test of k successes in n trials with success
 * probability m: p = min(1, 2 min(P(X <= k), P(X >= k))) (its size is at most
 * alpha at every alpha). m = 0 or 1: p = 1 if k is the only possible value,
 * else 0. */
double fls_stats_binom_test(int64_t k, int64_t n, double m);
/* Probability that the level-alpha test above rejects when the truth is m1. */
double fls_stats_binom_power(int64_t n, double m0, double m1, double alpha);

/* A goodness-of-fit result over one or more groups (rows with their own
 * reference). Groups with three or more bins add their Pearson chi2 and dof (a
 * sum of independent chi-squares is chi-square with the summed dof); a group
 * with two bins is an exact binomial test of its own. The p-value combines the
 * c components (the chi-square, if any, and each binomial) by Bonferroni:
 * p = min(1, c min(KAPPA p_chi2, p_binom...)). */
typedef struct fls_gof {
    double chi2;        /* Pearson statistic over every group (also the two-bin ones, for the record) */
    int dof;            /* degrees of freedom of the chi-square component */
    double chi2_part;   /* Pearson statistic of the chi-square component */
    int n_exact;        /* two-bin groups, each an exact binomial test */
    double p_exact_min; /* smallest p-value among them (1 if none) */
    int bins;           /* bins over every group */
    double min_mass;    /* smallest bin mass over every group */
    double p;           /* combined p-value; 0 if impossible > 0 */
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
/* Components of the Bonferroni combination (>= 1). */
int fls_gof_components(const fls_gof *g);

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
/* The power of the global equal-cells test (the randomized probability
 * integral transform u of each token in the CDF of p, fls_stats_cdf_start,
 * binned into K equal cells) against samples drawn from q instead of p:
 * Q_j = mean over the B rows of sum_v q_bv |I_bv n cell_j| / p_bv, with I_bv
 * the token's interval of u (p, q: B x V). */
fls_status fls_stats_gof_cells(const double *p, const double *q, int64_t B, int64_t V, int K, double *Q);
/* Power of the level-alpha equal-cells chi-square (at alpha / KAPPA, as the
 * audit runs it; K >= 3) from n samples of cell probabilities Q. */
double fls_stats_cells_power(const double *Q, int K, int64_t n, double alpha);
/* The token audit's cells (fls_audit_tokens): K equal cells for a global test
 * of n samples (n / FLS_STATS_MIN_EXPECTED, within [2, FLS_STATS_MAX_BINS]),
 * and the side of the K x K grid of a pairs test of `pairs` pairs (within
 * [2, 8]). */
int fls_stats_equal_cells_for(int64_t n);
int fls_stats_pair_side(int64_t pairs);
/* One cell's exact binomial test as a power model for fls_stats_smallest_n:
 * the cell has mass m0 under the reference and m1 under the alternative, a
 * call draws B tokens; the power of the level-alpha test after N calls is
 * fls_stats_binom_power(N B, m0, m1, alpha). */
typedef struct fls_stats_cell_alt {
    double m0, m1, alpha;
    int64_t B;
} fls_stats_cell_alt;
double fls_stats_cell_alt_power(const void *alt, int64_t N);
/* Smallest N >= 1 with power(ctx, N) >= target (power nondecreasing in N):
 * doubling from lo, then bisection; -1 beyond 2^36. */
int64_t fls_stats_smallest_n(double (*power)(const void *ctx, int64_t N), const void *ctx, double target,
                             int64_t lo);
/* Smallest total variation caught with probability >= power by the level-alpha
 * chi-square with dof degrees of freedom from n samples (Cauchy-Schwarz bound:
 * sqrt(lambda* / 4n) with power(dof, alpha, lambda*) = power). */
double fls_stats_tv_caught(int dof, double alpha, int64_t n, double power);
/* Two bins of masses (a, 1 - a), exact binomial test at level alpha from n
 * samples: the smallest TV (|q - a| over the feasible directions) caught with
 * probability >= power; INFINITY if none is. */
double fls_stats_binom_tv_caught(double a, int64_t n, double alpha, double power);
/* Smallest n for which the exact binomial test at alpha catches TV tv on bins
 * (a, 1 - a) with probability >= power in every feasible direction. */
int64_t fls_stats_binom_sample_size(double a, double alpha, double tv, double power);
/* Same for a point-mass reference (T = 0): any sample off the argmax fails, so
 * N = ceil(log(1 - power) / log(1 - tv)). */
int64_t fls_stats_sample_size_pointmass(double tv, double power);

/* The design of one goodness-of-fit test of G groups (ref holds G distributions
 * of V cells each; any one group may carry the whole error), at the bins
 * fls_bins_build makes for N samples per group. */
typedef struct fls_gof_design {
    int64_t N;       /* samples per group */
    int dof;         /* chi-square dof (groups with >= 3 bins) */
    int n_exact;     /* groups with two bins (exact binomial tests) */
    int bins;        /* bins over all groups */
    double min_mass; /* smallest bin mass */
    double tv;       /* smallest TV in one group caught with probability FLS_STATS_POWER at N */
} fls_gof_design;

/* What a test of these groups with N samples each sees at alpha (N given). */
fls_status fls_stats_design_at(const double *ref, int64_t G, int64_t V, double alpha, int64_t N,
                               fls_gof_design *d);
/* The smallest N found on the way down from a large N such that the test at
 * the bins for N catches TV FLS_STATS_TV in any one group with probability >=
 * FLS_STATS_POWER (d->tv <= FLS_STATS_TV). When every group's mass is on one
 * token (a point mass), the impossible set is the test and N =
 * fls_stats_sample_size_pointmass. Build the final bins for d->N. */
fls_status fls_stats_design(const double *ref, int64_t G, int64_t V, double alpha, fls_gof_design *d);
/* fls_stats_design's N and its degrees of freedom (dof + n_exact). */
fls_status fls_stats_design_size(const double *ref, int64_t G, int64_t V, double alpha, int64_t *N, int *dof);

/* ---- 5. The deep tail ---- */

/* Tokens more than t nats below the row's head: 0 < p_v < p_max e^-t. Their
 * mass (exact, double). */
double fls_stats_tail_mass(const double *p, int64_t V, double t);
/* Marks them in in_tail (V entries, 0/1); returns their mass. */
double fls_stats_tail_set(const double *p, int64_t V, double t, uint8_t *in_tail);

/* Exact two-sided test of the total k = sum k[g] of counts k[g] ~ Bin(n[g],
 * m[g]), independent (groups with their own tail mass): the doubled smaller
 * tail of the distribution of the sum, by convolution of the groups' pmfs
 * truncated where Bernstein's bound leaves < 1e-30 each; one group is the
 * binomial test. When the convolution would cost more than ~2e9 steps (very
 * many distinct rows) the p-value is the Bonferroni combination of the groups'
 * own exact tests (still exact, less powerful) and *bonferroni is set. NaN if
 * memory ran out. */
double fls_stats_binsum_test(int G, const int64_t *n, const double *m, const int64_t *k, int *bonferroni);

typedef struct fls_tail_result {
    double t;         /* threshold (nats) */
    double mass;      /* expected fraction of the samples in the tail: sum n_g m_g / sum n_g */
    double expected;  /* sum n_g m_g */
    int64_t observed; /* samples in the tail */
    int64_t n;        /* samples tested */
    double p;         /* exact two-sided p-value */
    double deficit;   /* smallest relative deficit of the tail mass caught with probability FLS_STATS_POWER */
    double excess;    /* smallest relative excess caught so (both INFINITY if none) */
    int bonferroni;   /* p combined per group (see fls_stats_binsum_test) */
} fls_tail_result;

/* The tail test at threshold t over G groups: ref (G x V) their references,
 * counts (G x V) their samples per token, n[g] their sample counts (in range).
 * Resolution (deficit, excess) is exact for one group, and from the normal
 * approximation of the sum for several. */
fls_status fls_stats_tail_test(const double *ref, const int64_t *counts, const int64_t *n, int64_t G,
                               int64_t V, double t, double alpha, fls_tail_result *r);
/* What a tail test of groups (n[g] samples, tail mass m[g]) resolves: the
 * smallest relative deficit and excess of every group's tail mass caught with
 * probability power at alpha (INFINITY: none). Exact for one group with a
 * tail, the normal approximation of the sum for several. */
void fls_stats_tail_resolution(const int64_t *n, const double *m, int64_t G, double alpha, double power,
                               double *deficit, double *excess);
/* Smallest relative deficit (m -> m (1 - r)) the exact binomial test at alpha
 * catches with probability >= power from n samples of tail mass m; INFINITY
 * if even r = 1 is not. */
double fls_stats_tail_deficit_caught(double m, int64_t n, double alpha, double power);
/* Smallest relative excess (m -> m (1 + r)), INFINITY if none up to m (1 + r) = 1. */
double fls_stats_tail_excess_caught(double m, int64_t n, double alpha, double power);
/* Smallest n with which the test catches a relative deficit r of tail mass m. */
int64_t fls_stats_tail_sample_size(double m, double r, double alpha, double power);

/* ---- 6. Independent reference sampler (Walker's alias on mt19937, 53-bit accept) ---- */

typedef struct fls_refsampler fls_refsampler;
/* p need not be normalized; seed feeds gsl_rng_mt19937. Every token's
 * probability is exact to ~2^-53 / V (unlike gsl_ran_discrete, whose 32-bit
 * uniform quantizes probabilities to ~2^-32: see refsampler.c). */
fls_status fls_refsampler_create(fls_refsampler **s, const double *p, int64_t V, uint64_t seed);
void fls_refsampler_destroy(fls_refsampler *s);
void fls_refsampler_reseed(fls_refsampler *s, uint64_t seed);
/* One sample. */
int64_t fls_refsampler_draw(fls_refsampler *s);
/* Adds n samples to counts (V entries). */
void fls_refsampler_counts(fls_refsampler *s, int64_t n, int64_t *counts);

/* ---- Reporting: one row per test ---- */

/* The result of one test (a test of a case of the audit, or one test of an
 * audit of external tokens). */
typedef struct fls_audit_row {
    char test[64];  /* e.g. "zipf-fused", "deep-logits/tail15" */
    char engine[8]; /* "cpu", "cuda", or "ext" for external tokens */
    int64_t V;
    int64_t draws; /* total samples drawn */
    double chi2;   /* Pearson statistic (tail rows: (observed - expected)^2 / variance) */
    int dof;
    double p;     /* the test's p-value (NaN on an error row and on a row not tested) */
    double alpha; /* per-test level of the run's family */
    /* p >= alpha and no sample on a zero-probability token; 0 on an error row
     * and on a row not tested (untested): pass = 0 is a failure only when
     * untested = 0 (fls_audit_row_verdict, fls_tokens.h) */
    int pass;
    /* Added in this version (zero-initialized rows stay valid): */
    fls_status status;     /* FLS_OK, or why the test could not run (then pass = 0) */
    char kind[12];         /* "gof", "tail", "pairs", "ties", "error" */
    int bins;              /* gof/pairs: bins (all groups) */
    double min_mass;       /* gof/pairs: smallest bin mass: finer structure is invisible */
    double tv_caught;      /* gof/pairs: smallest TV (in one group's bins) caught with probability 0.999 */
    double tail_t;         /* tail: threshold in nats below the head */
    double tail_mass;      /* tail: expected fraction of samples more than tail_t nats below the head */
    double expected;       /* tail, ties: expected count */
    double observed;       /* tail, ties: observed count */
    double deficit_caught; /* tail: smallest relative deficit caught with probability 0.999 (inf: none) */
    double excess_caught;  /* tail: smallest relative excess caught so (inf: none) */
    char note[112];        /* what the test cannot see, or the error; not tested: why */
    /* 1: the test could not test anything with these inputs (no pair of draws
     * or rows, no tie class sampled, no row whose rule cut a token, no position
     * drawn beyond the first, tuples too many to enumerate, a tail in which
     * neither a deficit nor an excess of any size could be detected with
     * probability FLS_STATS_POWER, and no sample that fails it outright). Then
     * pass = 0 and p = NaN, and the row is neither a pass nor a failure: "not
     * tested" never counts as a pass (docs/AUDIT.md, "Rows not tested"). */
    int untested;
} fls_audit_row;

/* One line per row: test, engine, V, draws, chi2, dof, p, alpha, the verdict
 * (pass, FAIL, or untested: the row tested nothing), and what the test sees
 * (gof: bins, smallest bin mass, TV caught; tail: mass, expected and observed
 * counts, deficit caught; error rows: the error; rows not tested: why). */
void fls_audit_print_header(FILE *f);
void fls_audit_print_row(FILE *f, const fls_audit_row *row);
/* Fills a row as an error: status st, pass 0, p and chi2 NaN, note. */
void fls_audit_row_error(fls_audit_row *row, fls_status st, const char *what);

#ifdef __cplusplus
}
#endif

#endif /* FLS_STATS_H */
