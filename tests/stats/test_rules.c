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
 *   - ordered tuples against the closed form, the conditional transform's
 *     intervals tiling [0, 1).
 */
#include <criterion/criterion.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fls_stats.h"

static fls_stats_rule rule(double min_p, int64_t k, double top_p, double nsigma)
{
    fls_stats_rule r = {min_p, k, top_p, nsigma};
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
        s1[v] = x[v] > -INFINITY && (r.min_p == 0 || x[v] - m >= log(r.min_p));
    for (int64_t v = 0; v < V; v++) {
        int64_t above = 0;
        for (int64_t u = 0; u < V; u++)
            above += s1[u] && x[u] > x[v];
        s2[v] = s1[v] && (r.top_k == 0 || above < r.top_k);
    }
    double Z = 0;
    for (int64_t u = 0; u < V; u++)
        Z += s2[u] ? exp(x[u] - m) : 0.0;
    for (int64_t v = 0; v < V; v++) {
        double A = 0;
        for (int64_t u = 0; u < V; u++)
            A += s2[u] && x[u] > x[v] ? exp(x[u] - m) : 0.0;
        s3[v] = s2[v] && (r.top_p == 1.0 || A / Z < r.top_p);
    }
    for (int64_t v = 0; v < V; v++)
        keep[v] = s3[v] && (r.nsigma == 0 || x[v] >= m - r.nsigma * sqrt(var));
}

Test(rules, sorted_reference_equals_the_set_definitions)
{
    gsl_rng *g = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(g, 99);
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
            r.min_p = gsl_rng_uniform_pos(g) * 0.5;
        if (gsl_rng_uniform(g) < 0.5)
            r.top_k = 1 + (int64_t)gsl_rng_uniform_int(g, (unsigned long)V);
        if (gsl_rng_uniform(g) < 0.5)
            r.top_p = 0.05 + 0.95 * gsl_rng_uniform(g);
        if (gsl_rng_uniform(g) < 0.3)
            r.nsigma = 3.0 * gsl_rng_uniform(g);
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
    printf("set definitions vs the sorted reference: %lld rows checked (%lld at a threshold skipped), %lld "
           "mismatching tokens\n",
           (long long)checked, (long long)near, (long long)mismatches);
    cr_expect_eq(mismatches, 0);
    cr_expect(checked > 2500);
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
