/*
 * test_cases.c — the audit's goodness-of-fit cases on the CPU engine, one
 * Criterion test each (the CUDA engine runs the same list in tests/gpu).
 * Each prints its row (test, engine, V, draws, chi2, dof, p, alpha, pass) and
 * its seeds; progress of long cases goes to stderr.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fls_audit.h"
#include "fls_cases.h"
#include "fls_stats.h"
#include "suite_family.h"

#define MAX_CASES 64

ParameterizedTestParameters(cases, cpu)
{
    static size_t idx[MAX_CASES];
    size_t n = fls_audit_case_count();
    if (n > MAX_CASES)
        n = MAX_CASES;
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    return cr_make_param_array(size_t, idx, n);
}

/* The largest case (V = 262144) takes ~4 minutes on two idle cores. */
ParameterizedTest(size_t *i, cases, cpu, .timeout = 1500)
{
    fls_audit_options o;
    suite_audit_options(&o);
    o.progress = 1;
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    fls_context_t *ctx = NULL;
    cr_assert_eq(fls_context_create(&ctx, &cfg), FLS_OK);
    fls_audit_row row;
    fls_status st = fls_audit_run_case(ctx, &o, suite_alpha(), *i, &row);
    fls_context_destroy(ctx);
    cr_assert_eq(st, FLS_OK, "case %zu (%s): %s", *i, fls_audit_case_get(*i)->name, fls_status_string(st));
    fls_audit_print_row(stdout, &row);
    fflush(stdout);
    /* a test that cannot fail is a defect: every sampling case needs dof >= 1 */
    const fls_audit_case *c = fls_audit_case_get(*i);
    int sampling = 0;
    for (int g = 0; g < c->groups; g++)
        sampling |= c->temps[g] != 0.0f;
    if (c->V > 1 && sampling)
        cr_expect(row.dof >= 1, "%s: the chi-square has no degrees of freedom", row.test);
    cr_expect(row.pass, "%s: chi2 %g dof %d p %g < alpha %g (base seed %llu)", row.test, row.chi2, row.dof,
              row.p, row.alpha, (unsigned long long)o.seed);
}

Test(cases, list_is_consistent)
{
    fls_stats_family f;
    suite_family(&f);
    fls_stats_family_print(stdout, "", &f);
    /* the suite's audit part is every test of every case */
    int tests = 0;
    for (size_t k = 0; k < fls_audit_case_count(); k++)
        tests += fls_audit_case_tests(k);
    cr_assert_eq(f.parts[0].tests, tests);
    cr_assert_eq(f.size, tests + SUITE_SELFTEST_CHECKS);
    cr_assert_float_eq(f.alpha * f.size, FLS_STATS_BUDGET, 1e-15);
    cr_assert(fls_audit_case_count() <= MAX_CASES);
    size_t quick = fls_audit_mode_count(0);
    cr_assert(quick >= 1 && quick < fls_audit_case_count());
    for (size_t k = 0; k < quick; k++)
        cr_assert(fls_audit_case_get(fls_audit_case_index(0, k))->quick);
    /* V from 1 to 2^18 */
    int64_t vmin = INT64_MAX, vmax = 0;
    for (size_t k = 0; k < fls_audit_case_count(); k++) {
        const fls_audit_case *c = fls_audit_case_get(k);
        vmin = c->V < vmin ? c->V : vmin;
        vmax = c->V > vmax ? c->V : vmax;
    }
    cr_assert_eq(vmin, 1);
    cr_assert_eq(vmax, 262144);
}

/* fls_audit_run itself (quick, CPU): rows in order, every one passing. It runs
 * at the suite's alpha, so its draws (same seeds, same sizes) are exactly
 * those of the per-case tests above: it adds no member to the family. */
Test(audit, quick_run, .timeout = 300)
{
    fls_stats_family f;
    suite_family(&f);
    fls_audit_options o;
    fls_audit_options_default(&o);
    o.family = &f;
    fls_audit_row *rows = NULL;
    size_t n = 0;
    cr_assert_eq(fls_audit_run(&o, &rows, &n), FLS_OK);
    cr_assert_eq(n, fls_audit_mode_count(0));
    fls_audit_print_header(stdout);
    for (size_t k = 0; k < n; k++) {
        fls_audit_print_row(stdout, &rows[k]);
        cr_expect_str_eq(rows[k].test, fls_audit_case_get(fls_audit_case_index(0, k))->name);
        cr_expect_str_eq(rows[k].engine, "cpu");
        cr_expect_eq(rows[k].alpha, f.alpha);
        cr_expect(rows[k].pass, "%s failed", rows[k].test);
    }
    free(rows);
    fls_audit_options bad = o;
    bad.engine = (fls_engine)7;
    cr_assert_eq(fls_audit_run(&bad, &rows, &n), FLS_ERR_PARAM);
    cr_assert_eq(fls_audit_run(NULL, &rows, &n), FLS_ERR_NULL);
    /* a family that does not hold the audit's tests is refused */
    fls_stats_family small;
    fls_stats_family_init(&small, FLS_STATS_BUDGET);
    fls_stats_family_add(&small, "too few", 1);
    bad = o;
    bad.family = &small;
    cr_assert_eq(fls_audit_run(&bad, &rows, &n), FLS_ERR_PARAM);
}

/* Negative control through the engine: samples drawn at a temperature whose
 * distribution is TV 0.03 from the T = 1 reference must fail the T = 1 test.
 * At the designed N the noncentrality is >= 4 N 0.03^2 ~ 9x the one the
 * design needs, so a pass here would mean the path from the API to the
 * p-value cannot fail (the chance of a miss is far below 1e-20). */
Test(audit, engine_negative_control, .timeout = 300)
{
    const int64_t V = 1024, B = 4;
    double *l = malloc((size_t)V * sizeof(double)), *p = malloc((size_t)V * sizeof(double)),
           *q = malloc((size_t)V * sizeof(double));
    float *L = malloc((size_t)(B * V) * sizeof(float));
    for (int64_t v = 0; v < V; v++) {
        l[v] = (double)(float)(2.0 * sin(0.37 * (double)v * (double)v));
        for (int64_t b = 0; b < B; b++)
            L[b * V + v] = (float)l[v];
    }
    cr_assert_eq(fls_stats_probs_temperature(l, V, 1.0, p), FLS_OK);
    double lo = 1.0, hi = 2.0;
    for (int it = 0; it < 60; it++) {
        double mid = 0.5 * (lo + hi);
        fls_stats_probs_temperature(l, V, (double)(float)mid, q);
        if (fls_stats_tv(p, q, V) < 0.03)
            lo = mid;
        else
            hi = mid;
    }
    const float T = (float)hi;
    int64_t N = 0;
    int dof = 0;
    cr_assert_eq(fls_stats_design_size(p, 1, V, suite_alpha(), &N, &dof), FLS_OK);
    const int64_t draws = (N + B - 1) / B;
    int64_t *tok = malloc((size_t)(B * draws) * sizeof(int64_t));
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    fls_context_t *ctx = NULL;
    cr_assert_eq(fls_context_create(&ctx, &cfg), FLS_OK);
    fls_matrix M = {L, FLS_DTYPE_F32, B, V, V};
    fls_params prm;
    fls_params_default(&prm);
    prm.temperature_value = T;
    prm.seed = 777;
    prm.draws = draws;
    fls_outputs out = {tok, NULL, NULL};
    cr_assert_eq(fls_sample_logits(ctx, &M, &prm, &out), FLS_OK);
    fls_context_destroy(ctx);
    fls_bins bins;
    cr_assert_eq(fls_bins_build(&bins, p, V, N, FLS_STATS_MAX_BINS), FLS_OK);
    fls_gof g;
    fls_gof_init(&g);
    cr_assert_eq(fls_gof_add_samples(&g, &bins, tok, B * draws), FLS_OK);
    printf("negative control: samples at T %.6f (TV 0.03 from T = 1), seed 777, N %lld: chi2 %.1f dof %d p "
           "%.3g\n",
           (double)T, (long long)(B * draws), g.chi2, g.dof, g.p);
    cr_expect(!fls_gof_pass(&g, suite_alpha()), "the T = 1 test accepted samples drawn at T = %g", (double)T);
    fls_bins_free(&bins);
    free(l);
    free(p);
    free(q);
    free(L);
    free(tok);
}
