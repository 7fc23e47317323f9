/*
 * test_mutations.c — planted mutations of the rule family and of
 * the grouped and streaming samplers, in CI: tokens from each
 * deliberately wrong sampler of mutants.c must be flagged by the token audit
 * (fls_audit_tokens, with the rule's parameters) at the stated N, and tokens
 * from exact samplers — our engine (the rule family, the grouped method,
 * shards merged through the streaming API) and the alias sampler on the
 * audit's own reference pmf — must pass it.
 *
 * The stated N of a mutation is the smallest N per row at which the test that
 * sees it has power >= 1 - alpha against the mutant's own distribution
 * (computed: the chance that no sample lands on an impossible token or tuple,
 * the exact binomial power on the boundary class, the noncentral chi-square
 * on the cells of the global or pairs test), so a miss counts in the suite's
 * family like a false failure. docs/AUDIT.md has the table (N for power 0.999
 * at one audit's own alpha, measured by mutation_table.c).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats/fls_stats.h"
#include "stats/fls_tokens.h"
#include "variants/grouped.h"
#include "tests/stats/mutants.h"
#include "tests/stats/suite_family.h"

#define MAX_ROWS 12

static void options_for(const mut_input *in, mut_scenario s, double alpha, fls_tokens_options *o)
{
    fls_tokens_options_default(o);
    o->alpha = alpha;
    o->name = mut_scenario_name[s];
    o->rule = in->has_rule ? &in->rule : NULL;
}

/* Audits tokens of sampler f on scenario s at N draws per row. */
static size_t audit(mut_scenario s, mut_sampler f, const char *who, int64_t N, uint64_t seed,
                    fls_audit_row *rows)
{
    mut_input in;
    mut_make(s, &in);
    int64_t *tok = malloc((size_t)(in.B * N * mut_stride(&in)) * sizeof(int64_t));
    cr_assert(tok);
    cr_assert_eq(f(&in, N, seed, tok), FLS_OK, "%s", who);
    fls_tokens_options o;
    options_for(&in, s, suite_alpha(), &o);
    size_t n = 0;
    cr_assert((size_t)fls_tokens_test_count(&o) <= MAX_ROWS);
    cr_assert_eq(fls_audit_tokens(in.logits, in.B, in.V, in.V, in.temps, 1.0f, tok, N, &o, rows, &n), FLS_OK);
    printf("%s on %s: B %lld, V %lld, N %lld per row, seed %llu\n", who, mut_scenario_name[s],
           (long long)in.B, (long long)in.V, (long long)N, (unsigned long long)seed);
    for (size_t k = 0; k < n; k++)
        fls_audit_print_row(stdout, &rows[k]);
    fflush(stdout);
    free(tok);
    mut_free(&in);
    return n;
}

static void mutant_case(mut_scenario s, mut_sampler f, const char *who, int64_t N, const char *test)
{
    fls_audit_row rows[MAX_ROWS];
    size_t n = audit(s, f, who, N, 777 + (uint64_t)s, rows);
    const fls_audit_row *r = fls_audit_row_named(rows, n, test);
    cr_assert(r, "no row %s", test);
    cr_expect(!r->pass, "%s at N %lld per row was not flagged by %s (p %g, alpha %g)", who, (long long)N,
              r->test, r->p, r->alpha);
}

/* ---- the stated N (mutants.c computes them) ---- */

static double A(void)
{
    return suite_alpha();
}

static int64_t stated_n_impossible(mut_scenario s, mut_probs_fn mutant)
{
    double m = 0.0;
    const int64_t N = mut_n_impossible(s, mutant, A(), 1.0 - A(), &m);
    cr_assert(N > 0);
    printf("%s: the mutant puts %.4g of row 0's mass outside the support; missed with probability <= alpha "
           "at N %lld per row\n",
           mut_scenario_name[s], m, (long long)N);
    return N;
}

static int64_t stated_n_repeats(mut_scenario s)
{
    double d = 0.0;
    const int64_t N = mut_n_repeats(s, A(), 1.0 - A(), &d);
    cr_assert(N > 0);
    printf("%s: a repeated token in %.4g of the mutant's tuples; missed with probability <= alpha at N %lld "
           "per row\n",
           mut_scenario_name[s], d, (long long)N);
    return N;
}

static int64_t stated_n_boundary(mut_scenario s, mut_probs_fn mutant)
{
    double m = 0.0, m1 = 0.0;
    const int64_t N = mut_n_boundary(s, mutant, A(), 1.0 - A(), &m, &m1);
    cr_assert(N > 0);
    printf("%s: the boundary class holds %.4g of the mass, %.4g under the mutant; caught with power >= 1 - "
           "alpha at N %lld per row\n",
           mut_scenario_name[s], m, m1, (long long)N);
    return N;
}

static int64_t stated_n_cells(mut_scenario s, mut_probs_fn mutant)
{
    double tv = 0.0;
    const int64_t N = mut_n_cells(s, mutant, A(), 1.0 - A(), &tv);
    cr_assert(N > 0);
    printf("%s: TV %.4g per row; the global test catches it with power >= 1 - alpha at N %lld per row\n",
           mut_scenario_name[s], tv, (long long)N);
    return N;
}

static int64_t stated_n_reused(uint64_t seed)
{
    int64_t groups[16];
    const int64_t N = mut_n_reused(seed, A(), 1.0 - A(), groups);
    cr_assert(N > 0);
    printf("groups: with seed %llu the rows draw groups", (unsigned long long)seed);
    for (int b = 0; b < 8; b++)
        printf(" %lld", (long long)groups[b]);
    printf(" every time; pairs of draws caught with power >= 1 - alpha at N %lld per row\n", (long long)N);
    return N;
}

/* ---- the family part of this file ---- */

typedef struct exact_run {
    mut_scenario s;
    mut_sampler f;
    const char *who;
} exact_run;

static const exact_run k_exact[] = {
    {MUT_TOPK, mut_ours, "ours"},           {MUT_TOPK, mut_alias, "alias"},
    {MUT_TOPK_TIE, mut_ours, "ours"},       {MUT_TOPK_TIE, mut_alias, "alias"},
    {MUT_TOPP, mut_ours, "ours"},           {MUT_TOPP, mut_alias, "alias"},
    {MUT_MINP, mut_ours, "ours"},           {MUT_MINP, mut_alias, "alias"},
    {MUT_WR_SMALL, mut_ours, "ours"},       {MUT_WR_SMALL, mut_alias, "alias"},
    {MUT_WR_LARGE, mut_ours, "ours"},       {MUT_WR_LARGE, mut_alias, "alias"},
    {MUT_GROUPS, mut_ours, "ours grouped"}, {MUT_GROUPS, mut_ours_shards, "ours grouped, shards"},
    {MUT_GROUPS, mut_alias, "alias"},       {MUT_GROUP_DEEP, mut_alias, "alias"},
    {MUT_MERGE_TIES, mut_ours, "ours"},     {MUT_MERGE_TIES, mut_ours_shards, "ours, shards"},
};
#define N_EXACT (sizeof k_exact / sizeof k_exact[0])

static int exact_tests(void)
{
    int n = 0;
    for (size_t i = 0; i < N_EXACT; i++) {
        mut_input in;
        mut_make(k_exact[i].s, &in);
        fls_tokens_options o;
        options_for(&in, k_exact[i].s, 0.0, &o);
        n += fls_tokens_test_count(&o);
        mut_free(&in);
    }
    return n;
}

Test(mutations, counted_in_the_family)
{
    fls_stats_family f;
    suite_family(&f);
    fls_stats_family_print(stdout, "", &f);
    cr_assert_eq(exact_tests(), SUITE_MUTATION_EXACT_TESTS);
    cr_assert_eq(f.parts[3].tests, SUITE_MUTATION_EXACT_TESTS + SUITE_MUTATION_DEFECTS);
}

/* ---- exact samplers: must pass (chance failures counted in the family) ---- */

/* The N the exact samplers run at: the scenario's largest stated N, at least 20000. */
static int64_t exact_n(mut_scenario s)
{
    int64_t N = 20000;
    switch (s) {
    case MUT_GROUP_DEEP: { /* the mutation's stated N (computed once) */
        static int64_t deep_n = 0;
        if (!deep_n)
            deep_n = stated_n_cells(s, mut_probs_group_lse_fp32);
        N = deep_n;
        break;
    }
    case MUT_MERGE_TIES:
        N = 64;
        break;
    default:
        break;
    }
    return N;
}

static void exact_scenario(mut_scenario s)
{
    const int64_t N = exact_n(s);
    for (size_t i = 0; i < N_EXACT; i++) {
        if (k_exact[i].s != s)
            continue;
        fls_audit_row rows[MAX_ROWS];
        size_t n = audit(s, k_exact[i].f, k_exact[i].who, N, 4242 + (uint64_t)s, rows);
        for (size_t r = 0; r < n; r++)
            /* a row that tested nothing (no tied logits, no tail mass) is not a pass, nor a failure */
            cr_expect(rows[r].pass || rows[r].untested, "%s on %s: %s failed (p %g, alpha %g): %s",
                      k_exact[i].who, mut_scenario_name[s], rows[r].test, rows[r].p, rows[r].alpha,
                      rows[r].note);
    }
}

Test(mutations, exact_samplers_pass_rules, .timeout = 600)
{
    exact_scenario(MUT_TOPK);
    exact_scenario(MUT_TOPK_TIE);
    exact_scenario(MUT_TOPP);
    exact_scenario(MUT_MINP);
}

Test(mutations, exact_samplers_pass_without_replacement, .timeout = 600)
{
    exact_scenario(MUT_WR_SMALL);
    exact_scenario(MUT_WR_LARGE);
}

Test(mutations, exact_samplers_pass_grouped_and_shards, .timeout = 600)
{
    exact_scenario(MUT_GROUPS);
    exact_scenario(MUT_GROUP_DEEP);
    exact_scenario(MUT_MERGE_TIES);
}

/* ---- the rule mutations ---- */

Test(mutations, topk_keeps_k_plus_1, .timeout = 300)
{
    mutant_case(MUT_TOPK, mut_topk_plus1, "top-k keeping k + 1 tokens",
                stated_n_impossible(MUT_TOPK, mut_probs_topk_plus1), "gof");
}

Test(mutations, topk_drops_the_tie_at_the_kth_value, .timeout = 300)
{
    mutant_case(MUT_TOPK_TIE, mut_topk_drops_ties, "top-k dropping the ties at the k-th value",
                stated_n_boundary(MUT_TOPK_TIE, mut_probs_topk_drops_ties), "boundary");
}

Test(mutations, topp_exclusive_boundary, .timeout = 300)
{
    mutant_case(MUT_TOPP, mut_topp_exclusive, "top-p with an exclusive boundary",
                stated_n_boundary(MUT_TOPP, mut_probs_topp_exclusive), "boundary");
}

Test(mutations, minp_against_the_tile_maximum, .timeout = 300)
{
    mutant_case(MUT_MINP, mut_minp_tile_max, "min-p relative to each tile's maximum",
                stated_n_impossible(MUT_MINP, mut_probs_minp_tile_max), "gof");
}

Test(mutations, plackett_luce_with_replacement_small_v, .timeout = 300)
{
    mutant_case(MUT_WR_SMALL, mut_pl_with_replacement, "positions 2..K drawn with replacement",
                stated_n_repeats(MUT_WR_SMALL), "pl-tuples");
}

Test(mutations, plackett_luce_with_replacement_large_v, .timeout = 300)
{
    mutant_case(MUT_WR_LARGE, mut_pl_with_replacement, "positions 2..K drawn with replacement",
                stated_n_repeats(MUT_WR_LARGE), "pl-cond");
}

/* ---- the grouped and merge mutations ---- */

Test(mutations, group_gumbel_reused_across_draws, .timeout = 300)
{
    mutant_case(MUT_GROUPS, mut_group_noise_reused, "one group Gumbel per group reused across draws",
                stated_n_reused(777 + MUT_GROUPS), "pairs-draws");
}

Test(mutations, within_group_sample_from_the_wrong_group, .timeout = 300)
{
    mutant_case(MUT_GROUPS, mut_group_wrong_group, "the token of the next group",
                stated_n_cells(MUT_GROUPS, mut_probs_group_wrong_group), "gof");
}

Test(mutations, group_log_mass_in_fp32_absorbs_a_deep_tail, .timeout = 300)
{
    mutant_case(MUT_GROUP_DEEP, mut_group_lse_fp32, "L_k summed online in fp32",
                stated_n_cells(MUT_GROUP_DEEP, mut_probs_group_lse_fp32), "gof");
}

Test(mutations, merge_keeps_the_first_state_on_ties, .timeout = 300)
{
    /* T = 0, the maximum tied in two shards: the first state to arrive wins
     * half the time; missed only if the lower index arrives first in every draw */
    const int64_t N = mut_n_merge(A(), 1.0 - A());
    printf("merge-ties: the wrong index with probability 1/2 per draw; missed with probability <= alpha at N "
           "%lld per row\n",
           (long long)N);
    mutant_case(MUT_MERGE_TIES, mut_merge_first_on_ties, "merge keeping the first state on ties", N, "gof");
}

/* ---- the unit-level check of L_k (deterministic) ---- */

/* At the group sizes of the method's range (g <= 1024) an fp32 log-mass can
 * lose at most (g - 1) 2^-24 <= 6.1e-5 of a group's mass, a TV of <= 3e-5:
 * ~1e10 draws to see. So the check is on the function itself: the library's
 * fls_group_lse (variants/grouped.h, double) keeps a deep tail inside a group
 * to 1e-12, where the fp32 mutant loses all of it. */
Test(mutations, group_log_mass_keeps_a_deep_tail_unit_level)
{
    const int64_t g = 1024;
    float x[1024];
    for (int64_t i = 0; i < g; i++)
        x[i] = i == 0 ? 0.0f : -(16.7f + 8.0f * (float)i / (float)g); /* 16.7-24.7 nats below the head */
    long double s = 0.0L;
    for (int64_t i = 0; i < g; i++)
        s += expl((long double)x[i]);
    const double exact = (double)logl(s), tail = (double)(s - 1.0L);
    const double ours = fls_group_lse(x, g, 0), f32 = (double)mut_group_lse_f32(x, g);
    printf(
        "g 1024, head + 1023 members 16.7-24.7 nats below: tail mass %.4g; L exact %.6g, fls_group_lse %.6g "
        "(error %.3g), fp32 online %.6g (error %.3g)\n",
        tail, exact, ours, ours - exact, f32, f32 - exact);
    cr_expect(fabs(ours - exact) < 1e-12 * fmax(1.0, tail * 1e3), "fls_group_lse: error %g", ours - exact);
    cr_expect(fabs(f32 - exact) > 0.5 * tail, "the fp32 mutant kept the tail: error %g of %g", f32 - exact,
              tail);
}

/* ---- the token audit's rule API (deterministic: statuses, rows, impossible samples) ---- */

Test(tokens, rule_parameters_rows_and_impossible_samples)
{
    /* row 0: x = 3 2 2 2 1 0; top-k 2 keeps {0, 1, 2, 3} (the tie at the 2nd value) */
    float l[2 * 6] = {3, 2, 2, 2, 1, 0, 0, 1, 2, 3, 4, 5};
    fls_params rule;
    fls_params_default(&rule);
    rule.top_k = 2;
    fls_tokens_options o;
    fls_tokens_options_default(&o);
    o.rule = &rule;
    fls_audit_row rows[MAX_ROWS];
    size_t n = 0;
    cr_assert_eq(fls_tokens_test_count(&o), 8);
    int64_t t[2 * 4] = {0, 1, 2, 3, 5, 4, 5, 4};
    cr_assert_eq(fls_audit_tokens(l, 2, 6, 6, NULL, 1.0f, t, 4, &o, rows, &n), FLS_OK);
    cr_assert_eq(n, 8);
    cr_expect_str_eq(rows[7].test, "tokens/boundary");
    cr_expect(rows[0].pass && rows[7].pass, "samples inside the support");
    /* row 0: 3 samples on its boundary class {1, 2, 3}; row 1 (top-2 = {5, 4}): 2 on {4} */
    cr_expect_float_eq(rows[7].observed, 5.0, 1e-12);
    t[3] = 4; /* row 0, token 4: outside the support (the class just outside the cutoff) */
    cr_assert_eq(fls_audit_tokens(l, 2, 6, 6, NULL, 1.0f, t, 4, &o, rows, &n), FLS_OK);
    cr_expect(!rows[0].pass && !rows[7].pass, "a sample just outside the cutoff fails both");
    /* without replacement, K = 2: (B, N, K) */
    rule.without_replacement_k = 2;
    cr_assert_eq(fls_tokens_test_count(&o), 10);
    int64_t w[2 * 2 * 2] = {0, 1, 2, 0, 5, 4, 4, 5};
    cr_assert_eq(fls_audit_tokens(l, 2, 6, 6, NULL, 1.0f, w, 2, &o, rows, &n), FLS_OK);
    cr_assert_eq(n, 10);
    cr_expect_str_eq(rows[8].test, "tokens/pl-cond");
    cr_expect_str_eq(rows[9].test, "tokens/pl-tuples");
    for (size_t k = 0; k < n; k++)
        cr_expect(rows[k].pass || rows[k].untested, "%s", rows[k].test);
    w[1] = 0; /* a repeat */
    cr_assert_eq(fls_audit_tokens(l, 2, 6, 6, NULL, 1.0f, w, 2, &o, rows, &n), FLS_OK);
    cr_expect(!rows[8].pass && !rows[9].pass, "a repeated token fails pl-cond and pl-tuples");
    w[1] = -1; /* -1 while the support has tokens left */
    cr_assert_eq(fls_audit_tokens(l, 2, 6, 6, NULL, 1.0f, w, 2, &o, rows, &n), FLS_OK);
    cr_expect(!rows[8].pass);
    /* per-row K_b: row 0 draws one position, its second must be -1 */
    const int64_t kb[2] = {1, 2};
    rule.row_without_replacement_k = kb;
    int64_t w1[2 * 2 * 2] = {0, -1, 2, -1, 5, 4, 4, 5};
    cr_assert_eq(fls_audit_tokens(l, 2, 6, 6, NULL, 1.0f, w1, 2, &o, rows, &n), FLS_OK);
    cr_expect(rows[8].pass && rows[9].pass);
    /* errors: a value out of range, an unknown registry rule */
    rule.row_without_replacement_k = NULL;
    rule.without_replacement_k = 0;
    rule.top_k = 7;
    cr_expect_eq(fls_audit_tokens(l, 2, 6, 6, NULL, 1.0f, t, 4, &o, rows, &n), FLS_ERR_PARAM);
    rule.top_k = 0;
    rule.top_p = 0.0f;
    cr_expect_eq(fls_audit_tokens(l, 2, 6, 6, NULL, 1.0f, t, 4, &o, rows, &n), FLS_ERR_PARAM);
    rule.top_p = 1.0f;
    rule.filter = "eta";
    cr_expect_eq(fls_audit_tokens(l, 2, 6, 6, NULL, 1.0f, t, 4, &o, rows, &n), FLS_ERR_PARAM);
    rule.filter = "top-nsigma";
    rule.filter_value = 0.5;
    cr_assert_eq(fls_tokens_test_count(&o), 8);
    cr_expect_eq(fls_audit_tokens(l, 2, 6, 6, NULL, 1.0f, t, 4, &o, rows, &n), FLS_OK);
}
