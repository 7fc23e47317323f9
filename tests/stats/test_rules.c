/*
 * test_rules.c — the exact pmf of the rule family and of Plackett-Luce
 * (stats/rules.c), deterministic checks (no chance event, nothing in the
 * family):
 *   - hand-worked rows: each filter, ties at the k-th value and at the
 *     nucleus boundary kept, the registry order (top-p renormalizes within
 *     top-k's support), T = 0, masks, errors;
 *   - a brute force written from the set definitions of docs/RULES.md
 *     (O(V^2), no sorting) against the sort-based reference on 3000 random
 *     rows with many ties and random parameters;
 *   - epsilon (p over the whole row, the maximum always kept) against its
 *     definition: a class at the threshold, ties at the max, eps = 0 and 1,
 *     its centering, random grids; the library's parameters into a rule;
 *   - ordered tuples against the closed form, the conditional transform's
 *     intervals tiling [0, 1).
 */
#include <criterion/criterion.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stats/fls_stats.h"

/* The filters by registry id (the tests name the rules they test). */
#define MIN_P  value[FLS_FILTER_MIN_P]
#define TOP_K  value[FLS_FILTER_TOP_K]
#define TOP_P  value[FLS_FILTER_TOP_P]
#define NSIGMA value[FLS_FILTER_TOP_NSIGMA]
#define EPS    value[FLS_FILTER_EPSILON]

static fls_stats_rule rule(double min_p, int64_t k, double top_p, double nsigma)
{
    fls_stats_rule r;
    fls_stats_rule_off(&r);
    r.MIN_P = min_p;
    r.TOP_K = (double)k;
    r.TOP_P = top_p;
    r.NSIGMA = nsigma;
    return r;
}

static fls_stats_rule eps_rule(double eps)
{
    fls_stats_rule r;
    fls_stats_rule_off(&r);
    r.EPS = eps;
    return r;
}

static int64_t support_of(const double *l, int64_t V, double T, fls_stats_rule r, uint8_t *keep)
{
    fls_stats_support s;
    cr_assert_eq(fls_stats_rule_support(l, V, T, &r, keep, &s), FLS_OK);
    return s.size;
}

Test(rules, each_filter_by_hand)
{
    /* x = 3, 2, 2, 2, 1, 0, -inf, -5 */
    const double l[8] = {3, 2, 2, 2, 1, 0, -INFINITY, -5};
    uint8_t keep[8];
    fls_stats_support s;
    /* top-k 2: the 2nd value is 2, tied three times: 4 tokens kept */
    fls_stats_rule r = rule(0, 2, 1, 0);
    cr_assert_eq(fls_stats_rule_support(l, 8, 1.0, &r, keep, &s), FLS_OK);
    cr_expect_eq(s.size, 4);
    cr_expect_eq(s.cut, 2.0);
    cr_expect_eq(s.n_at_cut, 3);
    cr_expect_eq(s.outside, 1.0);
    cr_expect_eq(s.n_outside, 1);
    cr_expect_eq(s.by, 2);
    cr_expect(keep[0] && keep[1] && keep[2] && keep[3] && !keep[4] && !keep[6] && !keep[7]);
    /* top-k 1 and top-k 4: the class of 2 ends at 4 */
    cr_expect_eq(support_of(l, 8, 1.0, rule(0, 1, 1, 0), keep), 1);
    cr_expect_eq(support_of(l, 8, 1.0, rule(0, 4, 1, 0), keep), 4);
    cr_expect_eq(support_of(l, 8, 1.0, rule(0, 5, 1, 0), keep), 5);
    cr_expect_eq(support_of(l, 8, 1.0, rule(0, 8, 1, 0), keep), 7); /* k > finite tokens: all finite */
    /* min-p: x - 3 >= ln p. p = e^-1 keeps x >= 2 (4 tokens, inclusive) */
    cr_expect_eq(support_of(l, 8, 1.0, rule(exp(-1.0) * (1 - 1e-12), 0, 1, 0), keep), 4);
    cr_expect_eq(support_of(l, 8, 1.0, rule(exp(-1.0) * (1 + 1e-12), 0, 1, 0), keep), 1);
    cr_expect_eq(support_of(l, 8, 1.0, rule(1.0, 0, 1, 0), keep), 1); /* the max only */
    /* top-p: masses e^3 : e^2 (x3) : e : 1 : e^-5. The head {3} has mass
     * e^3 / Z; the class of 2 starts below p for any p > that: all 3 kept */
    double Z = exp(3) + 3 * exp(2) + exp(1) + 1 + exp(-5);
    double head = exp(3) / Z;
    cr_expect_eq(support_of(l, 8, 1.0, rule(0, 0, head * (1 - 1e-9), 0), keep), 1);
    cr_expect_eq(support_of(l, 8, 1.0, rule(0, 0, head * (1 + 1e-9), 0), keep), 4);
    /* exactly at the boundary: A = head mass, A < p fails at p = head (the smallest head reaching p) */
    double p2 = (exp(3) + 3 * exp(2)) / Z;
    cr_expect_eq(support_of(l, 8, 1.0, rule(0, 0, p2 * (1 + 1e-9), 0), keep), 5);
    cr_expect_eq(support_of(l, 8, 1.0, rule(0, 0, p2 * (1 - 1e-9), 0), keep), 4);
    /* top-p after top-k renormalizes within top-k's support: with k = 2 the
     * support {3, 2, 2, 2} has head mass e^3 / (e^3 + 3 e^2) = 0.4011 */
    double h2 = exp(3) / (exp(3) + 3 * exp(2));
    cr_expect_eq(support_of(l, 8, 1.0, rule(0, 2, h2 * 1.001, 0), keep), 4);
    cr_expect_eq(support_of(l, 8, 1.0, rule(0, 2, h2 * 0.999, 0), keep), 1);
    /* top-n-sigma: sigma over the 7 finite values */
    const double xs[7] = {3, 2, 2, 2, 1, 0, -5};
    double mean = 0, m2 = 0;
    for (int i = 0; i < 7; i++)
        mean += xs[i] / 7;
    for (int i = 0; i < 7; i++)
        m2 += (xs[i] - mean) * (xs[i] - mean);
    const double sigma = sqrt(m2 / 7);
    cr_expect_eq(support_of(l, 8, 1.0, rule(0, 0, 1, 1.0 / sigma * 1.0001), keep),
                 4); /* m - n sigma = 2 - eps */
    cr_expect_eq(support_of(l, 8, 1.0, rule(0, 0, 1, 1.0 / sigma * 0.9999), keep), 1);
    /* the kept set of top-n-sigma does not depend on T */
    cr_expect_eq(support_of(l, 8, 0.37, rule(0, 0, 1, 1.0 / sigma * 1.0001), keep), 4);
    /* pmf: softmax over the support; T = 0 a point mass on the lowest-index max */
    double p[8];
    fls_stats_rule r2 = rule(0, 2, 1, 0);
    cr_assert_eq(fls_stats_probs_rule(l, 8, 1.0, &r2, p, NULL), FLS_OK);
    double Z4 = exp(3) + 3 * exp(2);
    cr_expect_float_eq(p[0], exp(3) / Z4, 1e-15);
    cr_expect_float_eq(p[2], exp(2) / Z4, 1e-15);
    cr_expect_eq(p[4], 0.0);
    cr_expect_eq(p[6], 0.0);
    const double tie[4] = {1, 5, 5, 0};
    cr_assert_eq(fls_stats_probs_rule(tie, 4, 0.0, &r2, p, NULL), FLS_OK);
    cr_expect(p[1] == 1.0 && p[2] == 0.0);
    /* without a rule: the temperature reference itself */
    double q[8];
    cr_assert_eq(fls_stats_probs_rule(l, 8, 0.7, NULL, p, NULL), FLS_OK);
    cr_assert_eq(fls_stats_probs_temperature(l, 8, 0.7, q), FLS_OK);
    for (int v = 0; v < 8; v++)
        cr_expect_float_eq(p[v], q[v], 1e-15);
    /* errors */
    fls_stats_rule bad = rule(0, 9, 1, 0);
    cr_expect_eq(fls_stats_probs_rule(l, 8, 1.0, &bad, p, NULL), FLS_ERR_PARAM);
    bad = rule(1.5, 0, 1, 0);
    cr_expect_eq(fls_stats_probs_rule(l, 8, 1.0, &bad, p, NULL), FLS_ERR_PARAM);
    bad = rule(0, 0, 0.0, 0);
    cr_expect_eq(fls_stats_probs_rule(l, 8, 1.0, &bad, p, NULL), FLS_ERR_PARAM);
    bad = rule(0, 0, 1, NAN);
    cr_expect_eq(fls_stats_probs_rule(l, 8, 1.0, &bad, p, NULL), FLS_ERR_PARAM);
    bad = rule(0, -1, 1, 0);
    cr_expect_eq(fls_stats_probs_rule(l, 8, 1.0, &bad, p, NULL), FLS_ERR_PARAM);
    const double none[2] = {-INFINITY, -INFINITY};
    cr_expect_eq(fls_stats_probs_rule(none, 2, 1.0, &r2, p, NULL), FLS_ERR_ALL_MASKED);
    fls_stats_rule k1 = rule(0, 3, 1, 0);
    cr_expect_eq(fls_stats_probs_rule(none, 2, 1.0, &k1, p, NULL), FLS_ERR_PARAM); /* k > V */
    cr_expect_eq(fls_stats_probs_rule(l, 8, -1.0, &r2, p, NULL), FLS_ERR_TEMPERATURE);
}

/* The definitions of docs/RULES.md as sets, O(V^2), no sorting. */
static void brute_support(const double *l, int64_t V, double T, fls_stats_rule r, uint8_t *keep)
{
    double x[64];
    int64_t n = 0;
    double m = -INFINITY, mean = 0;
    for (int64_t v = 0; v < V; v++) {
        x[v] = l[v] == -INFINITY ? -INFINITY : (T > 0 ? l[v] / T : l[v]);
        if (x[v] > -INFINITY) {
            m = x[v] > m ? x[v] : m;
            n++;
            mean += x[v];
        }
    }
    mean /= (double)n;
    double var = 0;
    for (int64_t v = 0; v < V; v++)
        if (x[v] > -INFINITY)
            var += (x[v] - mean) * (x[v] - mean) / (double)n;
    uint8_t s1[64], s2[64], s3[64];
    for (int64_t v = 0; v < V; v++)
        s1[v] = x[v] > -INFINITY && (r.MIN_P == 0 || x[v] - m >= log(r.MIN_P));
    for (int64_t v = 0; v < V; v++) {
        int64_t above = 0;
        for (int64_t u = 0; u < V; u++)
            above += s1[u] && x[u] > x[v];
        s2[v] = s1[v] && (r.TOP_K == 0 || above < r.TOP_K);
    }
    double Z = 0;
    for (int64_t u = 0; u < V; u++)
        Z += s2[u] ? exp(x[u] - m) : 0.0;
    for (int64_t v = 0; v < V; v++) {
        double A = 0;
        for (int64_t u = 0; u < V; u++)
            A += s2[u] && x[u] > x[v] ? exp(x[u] - m) : 0.0;
        s3[v] = s2[v] && (r.TOP_P == 1.0 || A / Z < r.TOP_P);
    }
    for (int64_t v = 0; v < V; v++)
        keep[v] = s3[v] && (r.NSIGMA == 0 || x[v] >= m - r.NSIGMA * sqrt(var));
    /* epsilon, last: p over every finite token of the row, the maximum always kept */
    double Zall = 0;
    for (int64_t u = 0; u < V; u++)
        Zall += x[u] > -INFINITY ? exp(x[u] - m) : 0.0;
    for (int64_t v = 0; v < V; v++)
        keep[v] = keep[v] && (r.EPS == 0 || x[v] == m || exp(x[v] - m) / Zall >= r.EPS);
}

Test(rules, sorted_reference_equals_the_set_definitions)
{
    gsl_rng *g = gsl_rng_alloc(gsl_rng_mt19937), *ge = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(g, 99);
    gsl_rng_set(ge, 7);
    int64_t mismatches = 0, checked = 0, near = 0;
    for (int it = 0; it < 3000; it++) {
        const int64_t V = 1 + (int64_t)gsl_rng_uniform_int(g, 40);
        double l[64];
        int finite = 0;
        for (int64_t v = 0; v < V; v++) {
            /* a few values, so ties are everywhere; some masked */
            l[v] = gsl_rng_uniform(g) < 0.1 ? -INFINITY : (double)gsl_rng_uniform_int(g, 9) * 0.75 - 3.0;
            finite += l[v] > -INFINITY;
        }
        if (!finite)
            l[0] = 1.0;
        fls_stats_rule r = rule(0, 0, 1, 0);
        if (gsl_rng_uniform(g) < 0.5)
            r.MIN_P = gsl_rng_uniform_pos(g) * 0.5;
        if (gsl_rng_uniform(g) < 0.5)
            r.TOP_K = 1 + (int64_t)gsl_rng_uniform_int(g, (unsigned long)V);
        if (gsl_rng_uniform(g) < 0.5)
            r.TOP_P = 0.05 + 0.95 * gsl_rng_uniform(g);
        if (gsl_rng_uniform(g) < 0.3)
            r.NSIGMA = 3.0 * gsl_rng_uniform(g);
        if (gsl_rng_uniform(ge) < 0.3) /* its own stream: the other filters' draws as before */
            r.EPS = gsl_rng_uniform(ge) < 0.1 ? 1.0 : 0.3 * gsl_rng_uniform(ge);
        const double T = gsl_rng_uniform(g) < 0.2 ? 0.0 : 0.25 + 2.0 * gsl_rng_uniform(g);
        uint8_t a[64], b[64];
        fls_stats_support s;
        cr_assert_eq(fls_stats_rule_support(l, V, T, &r, a, &s), FLS_OK);
        brute_support(l, V, T, r, b);
        if (s.margin < 1e-9) { /* a decision at its threshold to the last bits: both sides may round */
            near++;
            continue;
        }
        checked++;
        int64_t size = 0;
        for (int64_t v = 0; v < V; v++) {
            mismatches += a[v] != b[v];
            size += a[v];
        }
        cr_expect_eq(size, s.size);
    }
    gsl_rng_free(g);
    gsl_rng_free(ge);
    printf("set definitions vs the sorted reference: %lld rows checked (%lld at a threshold skipped), %lld "
           "mismatching tokens\n",
           (long long)checked, (long long)near, (long long)mismatches);
    cr_expect_eq(mismatches, 0);
    cr_expect(checked > 2500);
}

/* Epsilon from its definition alone: p_v = exp(x_v - m) / Z over every finite
 * token of the row (a plain sum, no log), keep p_v >= eps or x_v = m. */
static int64_t brute_epsilon(const double *l, int64_t V, double T, double eps, uint8_t *keep)
{
    double m = -INFINITY, Z = 0;
    for (int64_t v = 0; v < V; v++)
        if (l[v] > -INFINITY)
            m = fmax(m, T > 0 ? l[v] / T : l[v]);
    for (int64_t v = 0; v < V; v++)
        Z += l[v] > -INFINITY ? exp((T > 0 ? l[v] / T : l[v]) - m) : 0.0;
    int64_t n = 0;
    for (int64_t v = 0; v < V; v++) {
        const double x = l[v] == -INFINITY ? -INFINITY : (T > 0 ? l[v] / T : l[v]);
        keep[v] = x > -INFINITY && (eps == 0 || x == m || exp(x - m) / Z >= eps);
        n += keep[v];
    }
    return n;
}

Test(rules, epsilon_exact_support)
{
    /* a grid: the max tied twice, a class of three at 1, then 0, -1, a mask */
    const double l[8] = {2, 1, 2, 1, 0, 1, -INFINITY, -1};
    const double Z = 2 + 3 * exp(-1) + exp(-2) + exp(-3), p1 = exp(-1) / Z, p0 = exp(-2) / Z;
    uint8_t keep[8], want[8];
    fls_stats_support s;
    /* a token (a class) at the threshold: inclusive, whatever the rounding side */
    fls_stats_rule r = eps_rule(p1 * (1 - 1e-12));
    cr_assert_eq(fls_stats_rule_support(l, 8, 1.0, &r, keep, &s), FLS_OK);
    cr_expect_eq(s.size, 5);
    cr_expect_eq(s.cut, 1.0);
    cr_expect_eq(s.n_at_cut, 3);
    cr_expect_eq(s.outside, 0.0);
    cr_expect_eq(s.by, FLS_FILTER_EPSILON + 1);
    cr_expect(s.margin < 1e-10, "a decision at its threshold: margin %g", s.margin);
    cr_expect_eq(brute_epsilon(l, 8, 1.0, r.EPS, want), 5);
    cr_expect(!memcmp(keep, want, 8));
    r = eps_rule(p1 * (1 + 1e-12)); /* just above: the class of 1 goes, the tied maximum stays */
    cr_assert_eq(fls_stats_rule_support(l, 8, 1.0, &r, keep, &s), FLS_OK);
    cr_expect_eq(s.size, 2);
    cr_expect(keep[0] && keep[2] && !keep[1] && !keep[3]);
    cr_expect_eq(s.n_at_cut, 2);
    r = eps_rule(0.5 * (p1 + p0)); /* between two classes: the same five */
    cr_assert_eq(fls_stats_rule_support(l, 8, 1.0, &r, keep, &s), FLS_OK);
    cr_expect_eq(s.size, 5);
    cr_expect(s.margin > 1e-3);
    /* eps = 1 keeps the maximum's class only (its p < 1), at any T */
    r = eps_rule(1.0);
    cr_expect_eq(support_of(l, 8, 1.0, r, keep), 2);
    cr_expect(keep[0] && keep[2]);
    cr_expect_eq(support_of(l, 8, 0.3, r, keep), 2);
    const double one[3] = {-INFINITY, 4, -INFINITY}; /* a single token: p = 1 */
    cr_expect_eq(support_of(one, 3, 1.0, r, keep), 1);
    /* eps = 0 is off: every finite token, no cut */
    r = eps_rule(0.0);
    cr_expect(!fls_stats_rule_active(&r));
    cr_assert_eq(fls_stats_rule_support(l, 8, 1.0, &r, keep, &s), FLS_OK);
    cr_expect_eq(s.size, 7);
    cr_expect_eq(s.by, 0);
    cr_expect_eq(brute_epsilon(l, 8, 1.0, 0.0, want), 7);
    /* last in the chain, but p over the whole row: after top-k 3 (the five at 2 and 1) an eps just
     * above p1 drops the class of 1 (renormalized over the five it would stay) */
    r = rule(0, 3, 1, 0);
    r.EPS = p1 * (1 + 1e-9);
    cr_assert_eq(fls_stats_rule_support(l, 8, 1.0, &r, keep, &s), FLS_OK);
    cr_expect_eq(s.size, 2);
    cr_expect_eq(s.by, FLS_FILTER_EPSILON + 1);
    r.EPS = p1 * (1 - 1e-9);
    cr_assert_eq(fls_stats_rule_support(l, 8, 1.0, &r, keep, &s), FLS_OK);
    cr_expect_eq(s.size, 5);
    cr_expect_eq(s.by, FLS_FILTER_TOP_K + 1); /* top-k cut there; epsilon nothing more */
    /* the pmf: softmax over the kept tokens */
    double p[8];
    r = eps_rule(p1 * (1 - 1e-12));
    cr_assert_eq(fls_stats_probs_rule(l, 8, 1.0, &r, p, NULL), FLS_OK);
    const double Z5 = 2 + 3 * exp(-1);
    cr_expect_float_eq(p[0], 1 / Z5, 1e-15);
    cr_expect_float_eq(p[1], exp(-1) / Z5, 1e-15);
    cr_expect(p[4] == 0 && p[6] == 0 && p[7] == 0);
    /* centering: ln eps to the middle of its gap, the same support */
    fls_stats_rule c;
    r = eps_rule(p1 * (1 - 1e-12));
    cr_assert_eq(fls_stats_rule_center(l, 8, 1.0, &r, &c), FLS_OK);
    cr_expect(c.EPS > p0 && c.EPS < p1, "centered eps %g in (%g, %g)", c.EPS, p0, p1);
    cr_expect_float_eq(log(c.EPS), 0.5 * (log(p0) + log(p1)), 1e-12);
    cr_expect_eq(support_of(l, 8, 1.0, c, keep), 5);
    r = eps_rule(1.0); /* no gap to move in: the value stays */
    cr_assert_eq(fls_stats_rule_center(l, 8, 1.0, &r, &c), FLS_OK);
    cr_expect_eq(c.EPS, 1.0);
    /* its range */
    double bad[4] = {-0.1, 1.5, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        r = eps_rule(bad[i]);
        cr_expect_eq(fls_stats_rule_check(&r, 8), FLS_ERR_PARAM);
    }
    /* random grids (ties everywhere, masks, T) against the brute force */
    gsl_rng *g = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(g, 2022);
    int64_t checked = 0, mismatches = 0;
    for (int it = 0; it < 2000; it++) {
        const int64_t V = 1 + (int64_t)gsl_rng_uniform_int(g, 40);
        double x[64];
        int finite = 0;
        for (int64_t v = 0; v < V; v++) {
            x[v] = gsl_rng_uniform(g) < 0.1 ? -INFINITY : (double)gsl_rng_uniform_int(g, 9) * 0.75 - 3.0;
            finite += x[v] > -INFINITY;
        }
        if (!finite)
            x[0] = 1.0;
        const double T = gsl_rng_uniform(g) < 0.2 ? 0.0 : 0.25 + 2.0 * gsl_rng_uniform(g);
        const double u = gsl_rng_uniform(g), eps = u < 0.1 ? 1.0 : u < 0.15 ? 0.0 : 0.5 * gsl_rng_uniform(g);
        r = eps_rule(eps);
        cr_assert_eq(fls_stats_rule_support(x, V, T, &r, keep, &s), FLS_OK);
        if (s.margin < 1e-9)
            continue;
        checked++;
        uint8_t b[64];
        brute_epsilon(x, V, T, eps, b);
        for (int64_t v = 0; v < V; v++)
            mismatches += keep[v] != b[v];
    }
    gsl_rng_free(g);
    cr_expect_eq(mismatches, 0);
    cr_expect(checked > 1800);
}

/* The library's parameters into the reference's rule: the built-ins from their
 * fields, any other registry rule by name. */
Test(rules, rule_from_params)
{
    fls_params p;
    fls_params_default(&p);
    fls_stats_rule r;
    cr_assert_eq(fls_stats_rule_from_params(&p, 0, &r), FLS_OK);
    cr_expect(!fls_stats_rule_active(&r));
    p.top_k = 5;
    p.filter = "epsilon";
    p.filter_value = 2e-3;
    cr_assert_eq(fls_stats_rule_from_params(&p, 0, &r), FLS_OK);
    cr_expect_eq(r.TOP_K, 5.0);
    cr_expect_eq(r.EPS, 2e-3);
    cr_expect_eq(r.NSIGMA, 0.0);
    cr_expect_eq(r.TOP_P, 1.0);
    const double rows[2] = {0.5, 1.25};
    p.filter = "top-nsigma";
    p.row_filter_value = rows;
    cr_assert_eq(fls_stats_rule_from_params(&p, 1, &r), FLS_OK);
    cr_expect(r.NSIGMA == 1.25 && r.EPS == 0.0);
    p.filter = "top-k"; /* a built-in has its field */
    cr_expect_eq(fls_stats_rule_from_params(&p, 0, &r), FLS_ERR_PARAM);
    p.filter = "eta";
    cr_expect_eq(fls_stats_rule_from_params(&p, 0, &r), FLS_ERR_PARAM);
    p.filter = NULL; /* values without a name */
    cr_expect_eq(fls_stats_rule_from_params(&p, 0, &r), FLS_ERR_PARAM);
    char d[128];
    r = eps_rule(0.002);
    r.TOP_K = 50;
    fls_stats_rule_describe(&r, d, sizeof d);
    cr_expect_str_eq(d, "top-k 50, epsilon 0.002");
    fls_stats_rule_off(&r);
    fls_stats_rule_describe(&r, d, sizeof d);
    cr_expect_str_eq(d, "none");
}

Test(rules, plackett_luce_tuples)
{
    const double p[5] = {0.4, 0.3, 0.2, 0.1, 0.0};
    const int64_t V = 5;
    double t[6 * 6 * 6];
    cr_assert_eq(fls_stats_pl_cells(V, 3), 216);
    cr_assert_eq(fls_stats_pl_tuples(p, V, 3, 0, t), FLS_OK);
    double sum = 0;
    for (int c = 0; c < 216; c++)
        sum += t[c];
    cr_expect_float_eq(sum, 1.0, 1e-14);
    int64_t tup[3] = {1, 0, 3};
    cr_expect_float_eq(t[fls_stats_pl_cell(tup, V, 3)], 0.3 * 0.4 / 0.7 * 0.1 / 0.3, 1e-15);
    int64_t rep[3] = {1, 1, 3}, zero[3] = {4, 0, 1};
    cr_expect_eq(t[fls_stats_pl_cell(rep, V, 3)], 0.0);
    cr_expect_eq(t[fls_stats_pl_cell(zero, V, 3)], 0.0);
    /* a support of 2 tokens with K = 3: the third position is -1 */
    const double q[3] = {0.75, 0.0, 0.25};
    double t2[4 * 4 * 4];
    cr_assert_eq(fls_stats_pl_tuples(q, 3, 3, 3, t2), FLS_OK);
    int64_t a[3] = {0, 2, -1}, b[3] = {2, 0, -1};
    cr_expect_float_eq(t2[fls_stats_pl_cell(a, 3, 3)], 0.75, 1e-15);
    cr_expect_float_eq(t2[fls_stats_pl_cell(b, 3, 3)], 0.25, 1e-15);
    /* a row drawing K_b = 1 of K = 3 positions: (t, -1, -1) with t's probability */
    cr_assert_eq(fls_stats_pl_tuples(p, V, 3, 1, t), FLS_OK);
    int64_t one[3] = {2, -1, -1};
    cr_expect_float_eq(t[fls_stats_pl_cell(one, V, 3)], 0.2, 1e-15);
    cr_expect_eq(fls_stats_pl_cells(300, 3), -1);
    cr_expect_eq(fls_stats_pl_tuples(p, 300, 3, 0, t), FLS_ERR_SIZE);
    /* the conditional transform: for a fixed first token, the intervals of the
     * second position tile [0, 1) */
    double start[5];
    cr_assert_eq(fls_stats_cdf_start(p, V, start), FLS_OK);
    for (int64_t t0 = 0; t0 < 4; t0++) {
        double lo[5], hi[5], w = 0;
        int n = 0;
        for (int64_t t1 = 0; t1 < 4; t1++) {
            if (t1 == t0)
                continue;
            int64_t tu[2] = {t0, t1};
            double U0[2] = {0.0, 0.0}, U1[2] = {0.0, 1.0}, u0[2], u1[2];
            cr_assert_eq(fls_stats_pl_transform(p, start, V, 4, tu, 2, 2, U0, u0), 2);
            cr_assert_eq(fls_stats_pl_transform(p, start, V, 4, tu, 2, 2, U1, u1), 2);
            lo[n] = u0[1];
            hi[n] = u1[1];
            w += hi[n] - lo[n];
            n++;
        }
        cr_expect_float_eq(w, 1.0, 1e-12);
        for (int i = 0; i < n; i++) {
            int starts_at_0 = fabs(lo[i]) < 1e-12, joined = 0;
            for (int j = 0; j < n; j++)
                joined |= fabs(hi[j] - lo[i]) < 1e-12;
            cr_expect(starts_at_0 || joined, "t0 %lld: interval %d does not join", (long long)t0, i);
        }
        int64_t dup[2] = {t0, t0}, miss[2] = {t0, -1};
        double U[2] = {0.5, 0.5}, uu[2];
        cr_expect_eq(fls_stats_pl_transform(p, start, V, 4, dup, 2, 2, U, uu), -1);
        cr_expect_eq(fls_stats_pl_transform(p, start, V, 4, miss, 2, 2, U, uu), -1);
        cr_expect_eq(fls_stats_pl_transform(p, start, V, 4, miss, 2, 1, U, uu), 1); /* K_b = 1 */
    }
    /* past the support: -1 required */
    int64_t ok[3] = {0, 2, -1}, bad[3] = {0, 2, 1};
    double sq[3], U[3] = {0.5, 0.5, 0.5}, uu[3];
    cr_assert_eq(fls_stats_cdf_start(q, 3, sq), FLS_OK);
    cr_expect_eq(fls_stats_pl_transform(q, sq, 3, 2, ok, 3, 3, U, uu), 2);
    cr_expect_eq(fls_stats_pl_transform(q, sq, 3, 2, bad, 3, 3, U, uu), -1);
}
