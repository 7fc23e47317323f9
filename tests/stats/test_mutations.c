/*
 * test_mutations.c — planted mutations of the rule family (issue 13) and of
 * the grouped and streaming samplers (issue 14), in CI: tokens from each
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

#include "fls_stats.h"
#include "fls_tokens.h"
#include "grouped.h"
#include "mutants.h"
#include "suite_family.h"

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

static const fls_audit_row *row_named(const fls_audit_row *rows, size_t n, const char *suffix)
{
    for (size_t k = 0; k < n; k++) {
        const char *slash = strrchr(rows[k].test, '/');
        if (slash && !strcmp(slash + 1, suffix))
            return &rows[k];
    }
    return NULL;
}

static void mutant_case(mut_scenario s, mut_sampler f, const char *who, int64_t N, const char *test)
{
    fls_audit_row rows[MAX_ROWS];
    size_t n = audit(s, f, who, N, 777 + (uint64_t)s, rows);
    const fls_audit_row *r = row_named(rows, n, test);
    cr_assert(r, "no row %s", test);
    cr_expect(!r->pass, "%s at N %lld per row was not flagged by %s (p %g, alpha %g)", who, (long long)N,
              r->test, r->p, r->alpha);
}

/* ---- the stated N ---- */

/* Impossible mass: the mutant puts q_imp[b] of row b's mass where the
 * reference has none; missed only if no sample of any row lands there. */
static int64_t stated_n_impossible(mut_scenario s, mut_probs_fn mutant)
{
    mut_input in;
    mut_make(s, &in);
    double *p = malloc((size_t)(in.B * in.V) * sizeof(double)),
           *q = malloc((size_t)(in.B * in.V) * sizeof(double));
    cr_assert_eq(mut_probs_exact(&in, p), FLS_OK);
    cr_assert_eq(mutant(&in, q), FLS_OK);
    double log_hit = 0.0, m0 = 0.0;
    for (int64_t b = 0; b < in.B; b++) {
        double m = 0.0;
        for (int64_t v = 0; v < in.V; v++)
            m += p[b * in.V + v] == 0.0 ? q[b * in.V + v] : 0.0;
        log_hit += log1p(-m);
        m0 = b == 0 ? m : m0;
    }
    const int64_t N = (int64_t)ceil(log(suite_alpha()) / log_hit);
    printf("%s: the mutant puts %.4g of row 0's mass outside the support; missed with probability <= alpha "
           "at N %lld per row\n",
           mut_scenario_name[s], m0, (long long)N);
    free(p);
    free(q);
    mut_free(&in);
    return N;
}

/* Without replacement, K = 3 positions drawn with replacement: a repeat has
 * probability 1 - sum over distinct triples = 3 sum p^2 - 2 sum p^3. */
static int64_t stated_n_repeats(mut_scenario s)
{
    mut_input in;
    mut_make(s, &in);
    cr_assert_eq(mut_stride(&in), 3);
    double *p = malloc((size_t)(in.B * in.V) * sizeof(double));
    cr_assert_eq(mut_probs_exact(&in, p), FLS_OK);
    double log_miss = 0.0, d0 = 0.0;
    for (int64_t b = 0; b < in.B; b++) {
        double s2 = 0.0, s3 = 0.0;
        for (int64_t v = 0; v < in.V; v++) {
            const double x = p[b * in.V + v];
            s2 += x * x;
            s3 += x * x * x;
        }
        const double dup = 3.0 * s2 - 2.0 * s3;
        log_miss += log1p(-dup);
        d0 = b == 0 ? dup : d0;
    }
    const int64_t N = (int64_t)ceil(log(suite_alpha()) / log_miss);
    printf("%s: a repeated token in %.4g of the mutant's tuples; missed with probability <= alpha at N %lld "
           "per row\n",
           mut_scenario_name[s], d0, (long long)N);
    free(p);
    mut_free(&in);
    return N;
}

typedef struct bnd_ctx {
    double m, m1, alpha;
    int64_t B;
} bnd_ctx;

static double bnd_power(const void *c, int64_t N)
{
    const bnd_ctx *x = c;
    return fls_stats_binom_power(N * x->B, x->m, x->m1, x->alpha);
}

/* The boundary test (identical rows: the sum of the rows' counts is one
 * binomial): the reference's mass on the class at the cutoff against the
 * mutant's. */
static int64_t stated_n_boundary(mut_scenario s, mut_probs_fn mutant)
{
    mut_input in;
    mut_make(s, &in);
    double *p = malloc((size_t)in.V * sizeof(double)), *q = malloc((size_t)(in.B * in.V) * sizeof(double)),
           *l = malloc((size_t)in.V * sizeof(double));
    for (int64_t v = 0; v < in.V; v++)
        l[v] = in.logits[v];
    fls_stats_rule r;
    fls_stats_rule_off(&r);
    r.top_k = in.rule.top_k;
    r.top_p = in.rule.top_p;
    r.min_p = in.rule.min_p;
    fls_stats_support sup;
    cr_assert_eq(fls_stats_probs_rule(l, in.V, (double)in.temps[0], &r, p, &sup), FLS_OK);
    cr_assert_eq(mutant(&in, q), FLS_OK);
    bnd_ctx c = {0.0, 0.0, suite_alpha(), in.B};
    for (int64_t v = 0; v < in.V; v++)
        if (l[v] / (double)in.temps[0] == sup.cut) {
            c.m += p[v];
            c.m1 += q[v];
        }
    const int64_t N = mut_smallest_n(bnd_power, &c, 1.0 - suite_alpha(), 1);
    printf(
        "%s: the boundary class (%lld token(s)) holds %.4g of the mass, %.4g under the mutant; caught with "
        "power >= 1 - alpha at N %lld per row\n",
        mut_scenario_name[s], (long long)sup.n_at_cut, c.m, c.m1, (long long)N);
    free(p);
    free(q);
    free(l);
    mut_free(&in);
    return N;
}

typedef struct cells_ctx {
    const double *p, *q;
    int64_t B, V;
    double alpha;
    double Q[FLS_STATS_MAX_BINS + 1][FLS_STATS_MAX_BINS]; /* the cells per K, computed once */
    int have[FLS_STATS_MAX_BINS + 1];
} cells_ctx;

static double cells_power(const void *c, int64_t N)
{
    cells_ctx *x = (cells_ctx *)c;
    const int K = mut_gof_K(x->B * N);
    if (K < 3)
        return 0.0;
    if (!x->have[K]) {
        mut_gof_cells(x->p, x->q, x->B, x->V, K, x->Q[K]);
        x->have[K] = 1;
    }
    return mut_cells_power(x->Q[K], K, x->B * N, x->alpha);
}

static int64_t stated_n_cells(mut_scenario s, mut_probs_fn mutant)
{
    mut_input in;
    mut_make(s, &in);
    double *p = malloc((size_t)(in.B * in.V) * sizeof(double)),
           *q = malloc((size_t)(in.B * in.V) * sizeof(double));
    cr_assert_eq(mut_probs_exact(&in, p), FLS_OK);
    cr_assert_eq(mutant(&in, q), FLS_OK);
    double tv = 0.0;
    for (int64_t b = 0; b < in.B; b++)
        tv += fls_stats_tv(p + b * in.V, q + b * in.V, in.V) / (double)in.B;
    cells_ctx *c = calloc(1, sizeof *c);
    cr_assert(c);
    *c = (cells_ctx){.p = p, .q = q, .B = in.B, .V = in.V, .alpha = suite_alpha()};
    const int64_t N = mut_smallest_n(cells_power, c, 1.0 - suite_alpha(), 3000);
    free(c);
    printf("%s: TV %.4g per row; the global test catches it with power >= 1 - alpha at N %lld per row\n",
           mut_scenario_name[s], tv, (long long)N);
    free(p);
    free(q);
    mut_free(&in);
    return N;
}

typedef struct pairs_ctx {
    const double *p;
    const int64_t *groups;
    int64_t B, V, g;
    double alpha;
} pairs_ctx;

static double pairs_power(const void *c, int64_t N)
{
    const pairs_ctx *x = c;
    const int64_t pairs = x->B * (N / 2);
    const int K = mut_pair_side(pairs);
    double Q[64];
    mut_pair_cells_groups(x->p, x->V, x->g, x->groups, x->B, K, Q);
    return mut_cells_power(Q, K * K, pairs, x->alpha);
}

/* One Gumbel per group reused across draws: given the seed, row b draws group
 * groups[b] every time; pairs of its draws come from that group's conditional. */
static int64_t stated_n_reused(uint64_t seed)
{
    mut_input in;
    mut_make(MUT_GROUPS, &in);
    double *p = malloc((size_t)(in.B * in.V) * sizeof(double));
    int64_t groups[16];
    cr_assert(in.B <= 16);
    cr_assert_eq(mut_probs_exact(&in, p), FLS_OK); /* identical rows: row 0's is used */
    mut_group_noise_reused_groups(&in, seed, groups);
    pairs_ctx c = {p, groups, in.B, in.V, in.group_size, suite_alpha()};
    const int64_t N = mut_smallest_n(pairs_power, &c, 1.0 - suite_alpha(), 2);
    printf("groups: rows draw groups");
    for (int64_t b = 0; b < in.B; b++)
        printf(" %lld", (long long)groups[b]);
    printf(" every time (seed %llu); pairs of draws caught with power >= 1 - alpha at N %lld per row\n",
           (unsigned long long)seed, (long long)N);
    free(p);
    mut_free(&in);
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
            cr_expect(rows[r].pass, "%s on %s: %s failed (p %g, alpha %g): %s", k_exact[i].who,
                      mut_scenario_name[s], rows[r].test, rows[r].p, rows[r].alpha, rows[r].note);
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
    mut_input in;
    mut_make(MUT_MERGE_TIES, &in);
    const int64_t N = (int64_t)ceil(-log2(suite_alpha()) / (double)in.B);
    mut_free(&in);
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
