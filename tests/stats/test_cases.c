/*
 * test_cases.c — the audit's cases on the CPU engine (the CUDA engine runs the
 * same list in tests/gpu). The quick cases run once, through fls_audit_run
 * itself (audit/quick_run); every other case of the full CPU run is one
 * Criterion test. All run at the suite family's alpha (suite_family.h), so
 * each case is tested exactly once per suite run. Each prints its rows (test,
 * engine, V, draws, chi2, dof, p, alpha, pass, what it sees) and its seeds;
 * progress of long cases goes to stderr.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats/fls_audit.h"
#include "stats/fls_cases.h"
#include "stats/fls_stats.h"
#include "stats/fls_tokens.h"
#include "tests/stats/suite_family.h"

#define MAX_CASES 128
#define MAX_ROWS  (2 + FLS_STATS_N_TAILS)

/* Checks every row of one case. */
static void check_rows(const fls_audit_case *c, const fls_audit_row *rows, int n, double alpha)
{
    int sampling = 0;
    for (int g = 0; g < c->groups; g++)
        sampling |= c->temps[g] != 0.0f;
    for (int r = 0; r < n; r++) {
        const fls_audit_row *row = &rows[r];
        cr_expect_eq(row->status, FLS_OK, "%s: %s", row->test, row->note);
        cr_expect_eq(row->alpha, alpha);
        cr_expect(row->draws > 0);
        if (r == 0 && c->V > 1 && sampling && row->bins >= 2) { /* (a rule may leave a point mass) */
            /* a test that cannot fail is a defect: every sampling case has a test with dof >= 1 */
            cr_expect(row->dof >= 1, "%s: no degrees of freedom", row->test);
            /* and it sees TV 0.01 with power 0.999, as designed */
            cr_expect(row->tv_caught <= FLS_STATS_TV * (1 + 1e-6), "%s: sees only TV %g", row->test,
                      row->tv_caught);
        }
        if (r == 1 && c->tail_deficit > 0.0) { /* tail15: resolves the designed deficit */
            cr_expect(row->deficit_caught <= c->tail_deficit * (1 + 1e-6),
                      "%s: resolves a deficit of %g only", row->test, row->deficit_caught);
            cr_expect(!row->untested, "%s: a designed tail is tested", row->test);
        }
        /* the goodness of fit always tests (a sample outside the support fails it) */
        if (r == 0)
            cr_expect(!row->untested, "%s: the goodness of fit is never untested", row->test);
        /* a row not tested is not a pass: pass 0, p NaN, a tail where nothing can show */
        if (row->untested) {
            cr_expect(!row->pass && isnan(row->p) && !strcmp(row->kind, "tail"), "%s", row->test);
            cr_expect(isinf(row->deficit_caught) && isinf(row->excess_caught), "%s", row->test);
            cr_expect_eq(fls_audit_row_verdict(row), FLS_AUDIT_UNTESTED, "%s", row->test);
            continue;
        }
        cr_expect(row->pass, "%s: p %g < alpha %g", row->test, row->p, row->alpha);
    }
}

ParameterizedTestParameters(cases, cpu)
{
    static size_t idx[MAX_CASES];
    size_t n = 0;
    for (size_t i = 0; i < fls_audit_case_count() && n < MAX_CASES; i++)
        if (fls_audit_case_in_run(i, FLS_AUDIT_FULL_CI, FLS_ENGINE_CPU) &&
            !fls_audit_case_in_run(i, 0, FLS_ENGINE_CPU))
            idx[n++] = i;
    return cr_make_param_array(size_t, idx, n);
}

ParameterizedTest(size_t *i, cases, cpu, .timeout = 900)
{
    fls_audit_options o;
    suite_audit_options(&o);
    o.progress = 1;
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    fls_context_t *ctx = NULL;
    cr_assert_eq(fls_context_create(&ctx, &cfg), FLS_OK);
    fls_audit_row rows[MAX_ROWS];
    const int n = fls_audit_case_tests(*i);
    cr_assert(n >= 1 && n <= MAX_ROWS);
    const double alpha = suite_alpha();
    fls_status st = fls_audit_run_case(ctx, &o, alpha, *i, rows);
    fls_context_destroy(ctx);
    (void)fls_audit_mark_untested(rows, (size_t)n); /* as fls_audit_run does */
    for (int r = 0; r < n; r++)
        fls_audit_print_row(stdout, &rows[r]);
    fflush(stdout);
    cr_assert_eq(st, FLS_OK, "case %zu (%s): %s", *i, fls_audit_case_get(*i)->name, fls_status_string(st));
    check_rows(fls_audit_case_get(*i), rows, n, alpha);
}

/* The list: tiers, the quick list covers every mechanism, row counts add up. */
Test(cases, list_is_consistent)
{
    fls_stats_family f;
    suite_family(&f);
    fls_stats_family_print(stdout, "", &f);
    cr_assert(fls_audit_case_count() <= MAX_CASES);
    /* the suite's audit part is every test of every case of a full CPU run but the heavy ones (tiers 4, 5) */
    int tests = 0;
    for (size_t k = 0; k < fls_audit_case_count(); k++)
        if (fls_audit_case_in_run(k, 1, FLS_ENGINE_CPU) && fls_audit_case_get(k)->tier != 4 &&
            fls_audit_case_get(k)->tier != 5)
            tests += fls_audit_case_tests(k);
    cr_assert_eq(f.parts[0].tests, tests);
    cr_assert_eq(tests, fls_audit_run_tests(FLS_AUDIT_FULL_CI, FLS_ENGINE_CPU));
    cr_assert_eq(f.size, tests + SUITE_SELFTEST_CHECKS + SUITE_GALLERY_EXACT_TESTS + SUITE_GALLERY_DEFECTS +
                             SUITE_MUTATION_EXACT_TESTS + SUITE_MUTATION_DEFECTS);
    cr_assert_float_eq(f.alpha * f.size, FLS_STATS_BUDGET, 1e-15);
    /* quick is a sub-list of full on each engine; CUDA's full run has every case */
    for (int e = 0; e < 2; e++) {
        const fls_engine eng = e ? FLS_ENGINE_CUDA : FLS_ENGINE_CPU;
        size_t q = fls_audit_run_count(0, eng);
        cr_assert(q >= 1 && q < fls_audit_run_count(1, eng));
        for (size_t k = 0; k < q; k++) {
            size_t i = fls_audit_run_index(0, eng, k);
            const int tier = fls_audit_case_get(i)->tier;
            cr_assert(tier == 0 || (e && (tier == 3 || tier == 5)));
            cr_assert(fls_audit_case_in_run(i, 1, eng));
        }
        cr_assert_eq(fls_audit_run_index(0, eng, q), (size_t)-1);
    }
    /* CUDA's full run has every case the CUDA engine runs (the rule family and without replacement
     * too, since 0.3), the heavy CPU cases only the CPU's full run (tier 5: and every CUDA run) */
    size_t on_cuda = 0;
    for (size_t k = 0; k < fls_audit_case_count(); k++) {
        const fls_audit_case *c = fls_audit_case_get(k);
        on_cuda += !fls_audit_case_cpu_only(c) && c->tier != 4;
        cr_expect(c->tier < 4 || fls_audit_case_in_run(k, 1, FLS_ENGINE_CPU), "%s", c->name);
        cr_expect(!fls_audit_case_in_run(k, FLS_AUDIT_FULL_CI, FLS_ENGINE_CPU) || c->tier < 4, "%s", c->name);
        cr_expect(c->tier != 5 || fls_audit_case_in_run(k, 0, FLS_ENGINE_CUDA), "%s", c->name);
    }
    cr_assert_eq(fls_audit_run_count(1, FLS_ENGINE_CUDA), on_cuda);
    /* every mechanism in the quick list: temperatures other than 0 and 1 on
     * both paths, T = 0, deep tails (24-bit uniforms) on the logits path and
     * the multinomial baseline (and, on the CUDA engine, the fused path),
     * offsets, draws, seeds, masks, V = 1, 2, 17 */
    int t07 = 0, t25 = 0, t03 = 0, t0 = 0, fused_t = 0, deep_logits = 0, deep_fused = 0, deep_multi = 0;
    int offs = 0, draws = 0, seeds = 0, masked = 0, v1 = 0, v2 = 0, v17 = 0;
    const size_t quick = fls_audit_run_count(0, FLS_ENGINE_CUDA);
    for (size_t k = 0; k < quick; k++) {
        const fls_audit_case *c = fls_audit_case_get(fls_audit_run_index(0, FLS_ENGINE_CUDA, k));
        if (c->tier == 3 || c->tier == 5) { /* CUDA's quick list only */
            deep_fused |= c->shape == FLS_SHAPE_DEEP && c->fused && c->method == FLS_METHOD_FUSED;
            continue;
        }
        for (int g = 0; g < c->groups; g++) {
            t07 |= c->temps[g] == 0.7f;
            t25 |= c->temps[g] == 2.5f;
            t03 |= c->temps[g] == 0.3f;
            t0 |= c->temps[g] == 0.0f;
            fused_t |= c->fused && c->temps[g] != 0.0f && c->temps[g] != 1.0f;
        }
        if (c->shape == FLS_SHAPE_DEEP && c->tail && c->tail_deficit > 0.0) {
            deep_logits |= !c->fused;
            deep_multi |= c->method == FLS_METHOD_UNFUSED_MULTINOMIAL;
        }
        offs |= c->kind == FLS_CASE_PAIRS_OFFSET;
        draws |= c->kind == FLS_CASE_PAIRS_DRAW;
        seeds |= c->kind == FLS_CASE_PAIRS_SEED;
        masked |= c->shape == FLS_SHAPE_MASKED;
        v1 |= c->V == 1;
        v2 |= c->V == 2;
        v17 |= c->V == 17;
    }
    cr_expect(t07 && t25 && t03 && t0 && fused_t, "quick list: temperatures");
    cr_expect(deep_logits && deep_fused && deep_multi, "quick list: deep tails");
    cr_expect(offs && draws && seeds, "quick list: offsets, draws, seeds");
    cr_expect(masked && v1 && v2 && v17, "quick list: masks, V = 1, 2, 17");
    /* V from 1 to 2^18 over the whole list; a 10% tail deficit somewhere (CUDA) */
    int64_t vmin = INT64_MAX, vmax = 0;
    double finest = 1.0;
    for (size_t k = 0; k < fls_audit_case_count(); k++) {
        const fls_audit_case *c = fls_audit_case_get(k);
        vmin = c->V < vmin ? c->V : vmin;
        vmax = c->V > vmax ? c->V : vmax;
        if (c->tail_deficit > 0.0 && c->tail_deficit < finest)
            finest = c->tail_deficit;
        cr_expect(c->tier >= 0 && c->tier <= 5);
        cr_expect(!(c->tail_deficit > 0.0) || (c->tail && c->groups == 1), "%s", c->name);
        const int cond = c->ext && c->ext->wr_k >= 2 && !fls_audit_case_tuples(c);
        cr_expect_eq(fls_audit_case_tests(k), 1 + (c->tail ? FLS_STATS_N_TAILS : 0) + cond, "%s", c->name);
    }
    cr_expect_eq(vmin, 1);
    cr_expect_eq(vmax, 262144);
    cr_expect(finest <= 0.1);
}

/* The rule family, without replacement, the grouped method and streaming:
 * what the list covers (issues 13 and 14). */
Test(cases, rules_grouped_and_streams_are_covered)
{
    /* per registry filter (then without replacement): [path 0 logits, 1 fused] in the CI run */
    enum { NF = FLS_FILTER_COUNT + 1 };
    int filt[NF][2] = {{0}}, quick_rule = 0, quick_wr = 0, quick_grouped = 0, quick_stream = 0,
        quick_shards = 0;
    int tuples = 0, cond = 0, mixed = 0, tie_k = 0, tie_p = 0, masked_rule = 0, heavy_rule = 0, v1_rule = 0;
    int64_t vmax_rule = 0, gmin = INT64_MAX, gmax = 0;
    int g_not_multiple = 0, g_heavy = 0, g_deep = 0, g_masked = 0, g_fused = 0, stream_grouped = 0,
        stream_flat = 0, shards_grouped = 0, shards_flat = 0, stream_fused = 0;
    for (size_t k = 0; k < fls_audit_case_count(); k++) {
        const fls_audit_case *c = fls_audit_case_get(k);
        const fls_case_ext *x = c->ext;
        if (!x)
            continue;
        const int quick = fls_audit_case_in_run(k, 0, FLS_ENGINE_CPU);
        int any = 0, beyond = 0; /* beyond: filters other than the built-ins (fls_params has one slot) */
        for (int id = FLS_FILTER_TOP_P + 1; id < FLS_FILTER_COUNT; id++) {
            int used = 0;
            for (int g = 0; g < c->groups; g++) {
                const fls_stats_rule r = fls_audit_case_rule(c, g);
                used |= r.value[id] != fls_filters[id].off;
            }
            beyond += used;
        }
        cr_expect(beyond <= 1, "%s: at most one filter beyond min-p, top-k and top-p", c->name);
        for (int g = 0; g < c->groups; g++) {
            const fls_stats_rule r = fls_audit_case_rule(c, g);
            int on[NF];
            for (int id = 0; id < FLS_FILTER_COUNT; id++)
                on[id] = r.value[id] != fls_filters[id].off;
            on[FLS_FILTER_COUNT] = x->wr_k > 0;
            int n_on = 0;
            for (int f = 0; f < NF; f++) {
                if (fls_audit_case_in_run(k, FLS_AUDIT_FULL_CI, FLS_ENGINE_CPU))
                    filt[f][c->fused] |= on[f];
                n_on += on[f] && f < FLS_FILTER_COUNT;
                any |= on[f];
            }
            mixed |= n_on >= 3;
            cr_expect(x->wr_rows[g] <= x->wr_k, "%s", c->name);
        }
        if (any) {
            vmax_rule = c->V > vmax_rule ? c->V : vmax_rule;
            quick_rule |= quick && x->wr_k == 0;
            quick_wr |= quick && x->wr_k > 0;
            tuples |= fls_audit_case_tuples(c);
            cond |= x->wr_k >= 2 && !fls_audit_case_tuples(c);
            tie_k |= c->shape == FLS_SHAPE_TIE_K;
            tie_p |= c->shape == FLS_SHAPE_TIE_P;
            masked_rule |= c->shape == FLS_SHAPE_MASKED;
            heavy_rule |= c->shape == FLS_SHAPE_HEAVY && c->tail;
            v1_rule |= c->V == 1;
            cr_expect(!fls_audit_case_cpu_only(c), "%s", c->name);
        }
        if (c->method == FLS_METHOD_GROUPED) {
            gmin = x->group_size < gmin ? x->group_size : gmin;
            gmax = x->group_size > gmax ? x->group_size : gmax;
            g_not_multiple |= c->V % x->group_size != 0;
            g_heavy |= c->shape == FLS_SHAPE_HEAVY;
            g_deep |= c->shape == FLS_SHAPE_GROUP_DEEP && c->tail;
            g_masked |= c->shape == FLS_SHAPE_MASKED_GROUPS;
            g_fused |= c->fused;
            quick_grouped |= quick;
        }
        stream_grouped |= x->io == FLS_IO_STREAM && c->method == FLS_METHOD_GROUPED;
        stream_flat |= x->io == FLS_IO_STREAM && c->method == FLS_METHOD_FUSED;
        shards_grouped |= x->io == FLS_IO_SHARDS && c->method == FLS_METHOD_GROUPED;
        shards_flat |= x->io == FLS_IO_SHARDS && c->method == FLS_METHOD_FUSED;
        stream_fused |= x->io != FLS_IO_CALL && c->fused;
        quick_stream |= quick && x->io == FLS_IO_STREAM;
        quick_shards |= quick && x->io == FLS_IO_SHARDS;
    }
    /* every filter of the registry on the logits path; those of 0.3 (and without replacement) on both */
    for (int f = 0; f < NF; f++) {
        cr_expect(filt[f][0], "%s: the logits path in the CI run",
                  f < FLS_FILTER_COUNT ? fls_filters[f].name : "without replacement");
        if (f != FLS_FILTER_EPSILON)
            cr_expect(filt[f][1], "%s: the fused path in the CI run",
                      f < FLS_FILTER_COUNT ? fls_filters[f].name : "without replacement");
    }
    cr_expect(quick_rule && quick_wr && quick_grouped && quick_stream && quick_shards, "quick list");
    cr_expect(tuples && cond && mixed && tie_k && tie_p && masked_rule && heavy_rule && v1_rule);
    cr_expect_eq(vmax_rule, 262144);
    cr_expect(gmin <= 32 && gmax >= 1024 && g_not_multiple && g_heavy && g_deep && g_masked && g_fused);
    cr_expect(stream_grouped && stream_flat && shards_grouped && shards_flat && stream_fused);
}

/* The min-first noise scheme (FLS_NOISE_MIN_FIRST): its cases, and only
 * they, are named "mf-"; they take the flat methods without rules in one-shot
 * calls; each is its per-token twin's (the name without "mf-") but for the
 * noise, and runs on the CUDA engine in every run its twin does (on the CPU,
 * whose min-first noise is the scalar reference, the costly ones are left to
 * full runs outside the CI suite: tier 5). What the list covers: the CPU's
 * quick list and CI run (both paths, both flat methods, a T = 0 row, V below
 * 64 and not a multiple of 64, a deep tail, offsets, draws, seeds), the deep
 * tail on both paths in CUDA's quick run and in the CPU's full run, a deep
 * tail inside one 64-token group. */
Test(cases, min_first_is_covered)
{
    int n = 0, cpu_quick = 0, ci_fused = 0, ci_unfused = 0, ci_t0 = 0, ci_partial = 0, ci_small = 0,
        ci_deep = 0;
    int pairs[4] = {0}, cuda_quick_deep[2] = {0}, cpu_full_deep[2] = {0}, group_deep = 0;
    for (size_t k = 0; k < fls_audit_case_count(); k++) {
        const fls_audit_case *c = fls_audit_case_get(k);
        const fls_case_ext *x = c->ext;
        cr_expect(!x || x->noise == FLS_NOISE_PER_TOKEN || x->noise == FLS_NOISE_MIN_FIRST, "%s", c->name);
        const int mf = x && x->noise == FLS_NOISE_MIN_FIRST;
        cr_expect_eq(mf, strncmp(c->name, "mf-", 3) == 0, "%s", c->name);
        if (!mf)
            continue;
        n++;
        cr_expect(c->method == FLS_METHOD_FUSED || c->method == FLS_METHOD_UNFUSED_GUMBEL, "%s", c->name);
        cr_expect(!fls_audit_case_has_rule(c) && x->wr_k == 0 && x->group_size == 0 && x->io == FLS_IO_CALL,
                  "%s", c->name);
        cr_expect(!fls_audit_case_cpu_only(c), "%s", c->name);
        for (size_t i = 0; i < fls_audit_case_count(); i++) {
            const fls_audit_case *t = fls_audit_case_get(i);
            if (strcmp(t->name, c->name + 3) != 0)
                continue;
            cr_expect(t->ext == NULL && t->kind == c->kind && t->fused == c->fused &&
                          t->method == c->method && t->shape == c->shape && t->scale == c->scale &&
                          t->V == c->V && t->groups == c->groups && t->rows_per_group == c->rows_per_group &&
                          t->w_dtype == c->w_dtype && t->D == c->D && t->tail == c->tail &&
                          t->tail_deficit == c->tail_deficit &&
                          !memcmp(t->temps, c->temps, (size_t)c->groups * sizeof c->temps[0]),
                      "%s is not %s but for the noise", c->name, t->name);
            for (int full = 0; full < 2; full++)
                cr_expect(!fls_audit_case_in_run(i, full, FLS_ENGINE_CUDA) ||
                              fls_audit_case_in_run(k, full, FLS_ENGINE_CUDA),
                          "%s: not in a CUDA run (full %d) that has %s", c->name, full, t->name);
            cr_expect(!fls_audit_case_in_run(i, 1, FLS_ENGINE_CPU) ||
                          fls_audit_case_in_run(k, 1, FLS_ENGINE_CPU),
                      "%s: not in the CPU's full run", c->name);
        }
        cpu_quick |= fls_audit_case_in_run(k, 0, FLS_ENGINE_CPU);
        const int deep = c->shape == FLS_SHAPE_DEEP && c->tail && c->tail_deficit > 0.0;
        if (fls_audit_case_in_run(k, FLS_AUDIT_FULL_CI, FLS_ENGINE_CPU)) {
            ci_fused |= c->fused && c->method == FLS_METHOD_FUSED;
            ci_unfused |= c->method == FLS_METHOD_UNFUSED_GUMBEL;
            for (int g = 0; g < c->groups; g++)
                ci_t0 |= c->groups > 1 && c->temps[g] == 0.0f;
            ci_partial |= c->V > 64 && c->V % 64 != 0;
            ci_small |= c->V < 64;
            ci_deep |= deep;
            pairs[c->kind] = 1;
        }
        if (deep) {
            cuda_quick_deep[c->fused] |= fls_audit_case_in_run(k, 0, FLS_ENGINE_CUDA);
            cpu_full_deep[c->fused] |= fls_audit_case_in_run(k, 1, FLS_ENGINE_CPU);
        }
        group_deep |= c->shape == FLS_SHAPE_GROUP_DEEP && c->tail && c->tail_deficit > 0.0;
    }
    cr_expect(n >= 20, "%d min-first cases", n);
    cr_expect(cpu_quick && ci_fused && ci_unfused && ci_t0 && ci_partial && ci_small && ci_deep,
              "the CPU's quick list and CI run");
    cr_expect(pairs[FLS_CASE_GOF] && pairs[FLS_CASE_PAIRS_OFFSET] && pairs[FLS_CASE_PAIRS_DRAW] &&
                  pairs[FLS_CASE_PAIRS_SEED],
              "offsets, draws, seeds");
    cr_expect(cuda_quick_deep[0] && cuda_quick_deep[1] && cpu_full_deep[0] && cpu_full_deep[1] && group_deep,
              "the deep tails");
}

/* Masks, bias and penalties (fls_case_mods): the cases that carry them,
 * named "mods-", run in one-shot calls of the flat methods with the
 * per-token noise, on both engines in every CUDA run (tiers 0, 3, 5). What
 * the list covers: in the CPU's quick list a mask cutting the head (with a
 * T = 0 group, a row left unmasked, a padded bitmask_ld), a bias lifting a
 * deep-tail token to the top, penalties on tied tokens with several counts
 * through the per-row arrays, on negative, zero and positive logits; in the
 * CI run a mask under a rule, without replacement, the fused path and the
 * multinomial baseline; in the full list the unfused Gumbel baseline. */
Test(cases, mods_are_covered)
{
    int quick_head = 0, quick_t0 = 0, quick_rows = 0, quick_ld = 0, quick_bias = 0, quick_pen = 0;
    int ci_rule = 0, ci_wr = 0, ci_fused = 0, ci_multi = 0, full_gumbel = 0, n = 0;
    for (size_t k = 0; k < fls_audit_case_count(); k++) {
        const fls_audit_case *c = fls_audit_case_get(k);
        const fls_case_mods *m = c->ext ? c->ext->mods : NULL;
        cr_expect_eq(m != NULL, strncmp(c->name, "mods-", 5) == 0, "%s", c->name);
        if (!m)
            continue;
        n++;
        cr_expect(c->kind == FLS_CASE_GOF && c->method != FLS_METHOD_GROUPED && c->ext->io == FLS_IO_CALL &&
                      c->ext->noise == FLS_NOISE_PER_TOKEN,
                  "%s: the paths that take masks, bias and penalties", c->name);
        cr_expect(c->tier == 0 || c->tier == 3 || c->tier == 5, "%s: in every CUDA run", c->name);
        cr_expect(!fls_audit_case_cpu_only(c), "%s", c->name);
        cr_expect(m->bias_k <= 8 && m->seen_k <= 8, "%s", c->name);
        int masked = 0, all_masked = 1, pen_differ = 0;
        for (int g = 0; g < c->groups; g++) {
            masked |= m->mask[g] != 0;
            all_masked &= m->mask[g] != 0;
            pen_differ |= m->repetition[g] != m->repetition[0] || m->presence[g] != m->presence[0] ||
                          m->frequency[g] != m->frequency[0];
        }
        if (fls_audit_case_in_run(k, 0, FLS_ENGINE_CPU)) {
            quick_head |= masked && m->head_cut > 0;
            for (int g = 0; g < c->groups; g++)
                quick_t0 |= m->mask[g] && c->temps[g] == 0.0f;
            quick_rows |= masked && !all_masked;
            quick_ld |= masked && m->ld_pad > 0;
            quick_bias |= m->bias_k > 0 && c->shape == FLS_SHAPE_DEEP;
            quick_pen |= m->seen_k > 0 && pen_differ && c->shape == FLS_SHAPE_CLASSES;
        }
        if (fls_audit_case_in_run(k, FLS_AUDIT_FULL_CI, FLS_ENGINE_CPU)) {
            ci_rule |= masked && fls_audit_case_has_rule(c);
            ci_wr |= masked && c->ext->wr_k > 0;
            ci_fused |= c->fused && c->method == FLS_METHOD_FUSED && masked && m->bias_k && m->seen_k;
            ci_multi |= c->method == FLS_METHOD_UNFUSED_MULTINOMIAL;
        }
        full_gumbel |= c->method == FLS_METHOD_UNFUSED_GUMBEL && fls_audit_case_in_run(k, 1, FLS_ENGINE_CPU);
    }
    cr_expect(n >= 8, "%d mods cases", n);
    cr_expect(quick_head && quick_t0 && quick_rows && quick_ld && quick_bias && quick_pen, "the quick list");
    cr_expect(ci_rule && ci_wr && ci_fused && ci_multi && full_gumbel, "the CI run and the full list");
}

/* The mods cases can fail: run against a reference that leaves out the
 * bias, the mask or the penalties (fls_audit_options.omit_mods, a mutation
 * of the reference only: the engine still gets them), each of these cases
 * must fail its goodness of fit. The changes move TV >= 0.05 (the bias
 * moves ~70 % of the mass, the mask a head of five tokens and every T = 0
 * sample onto the impossible set, the penalties several nats of tied
 * tokens), far beyond the 0.01 the design catches with power 0.999: a pass
 * by chance has probability far below 1e-20, so these checks are not part
 * of the family (no false failure is possible; a miss is a defect). */
Test(cases, mods_mutations_fail, .timeout = 300)
{
    const struct {
        const char *name;
        unsigned omit;
    } mut[] = {{"mods-bias-deep", FLS_AUDIT_OMIT_BIAS},
               {"mods-mask-head", FLS_AUDIT_OMIT_MASK},
               {"mods-penalty-ties", FLS_AUDIT_OMIT_PENALTIES},
               {"mods-mask-wr-tuples", FLS_AUDIT_OMIT_MASK}};
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    fls_context_t *ctx = NULL;
    cr_assert_eq(fls_context_create(&ctx, &cfg), FLS_OK);
    for (size_t m = 0; m < sizeof mut / sizeof mut[0]; m++) {
        size_t i = 0;
        while (i < fls_audit_case_count() && strcmp(fls_audit_case_get(i)->name, mut[m].name) != 0)
            i++;
        cr_assert(i < fls_audit_case_count(), "%s is not in the list", mut[m].name);
        fls_audit_options o;
        suite_audit_options(&o);
        o.progress = 1;
        o.omit_mods = mut[m].omit;
        fls_audit_row rows[MAX_ROWS];
        const int nr = fls_audit_case_tests(i);
        cr_assert(nr >= 1 && nr <= MAX_ROWS);
        cr_assert_eq(fls_audit_run_case(ctx, &o, suite_alpha(), i, rows), FLS_OK, "%s", mut[m].name);
        printf("%s against a reference without part %u (a mutation, must fail):\n", mut[m].name, mut[m].omit);
        fls_audit_print_row(stdout, &rows[0]);
        fflush(stdout);
        cr_expect_eq(rows[0].status, FLS_OK, "%s", mut[m].name);
        cr_expect(!rows[0].untested && !rows[0].pass && rows[0].p < suite_alpha(),
                  "%s passed against a reference without part %u", mut[m].name, mut[m].omit);
    }
    fls_context_destroy(ctx);
}

/* fls_audit_run itself: the quick run at the suite's alpha (its cases' only
 * run in the suite): rows in order, every one passing. */
Test(audit, quick_run, .timeout = 900)
{
    fls_stats_family f;
    suite_family(&f);
    fls_audit_options o;
    fls_audit_options_default(&o);
    o.family = &f;
    o.progress = 1;
    fls_audit_row *rows = NULL;
    size_t n = 0;
    cr_assert_eq(fls_audit_run(&o, &rows, &n), FLS_OK);
    cr_assert_eq(n, (size_t)fls_audit_run_tests(0, FLS_ENGINE_CPU));
    fls_audit_print_header(stdout);
    size_t r = 0;
    for (size_t k = 0; k < fls_audit_run_count(0, FLS_ENGINE_CPU); k++) {
        size_t i = fls_audit_run_index(0, FLS_ENGINE_CPU, k);
        const int m = fls_audit_case_tests(i);
        for (int j = 0; j < m; j++) {
            fls_audit_print_row(stdout, &rows[r + (size_t)j]);
            cr_expect(!strncmp(rows[r + (size_t)j].test, fls_audit_case_get(i)->name,
                               strlen(fls_audit_case_get(i)->name)));
            cr_expect_str_eq(rows[r + (size_t)j].engine, "cpu");
        }
        check_rows(fls_audit_case_get(i), &rows[r], m, f.alpha);
        r += (size_t)m;
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

/* One case that cannot sample (fault injection: fls_audit_options.fault_case) does not stop
 * the run: its rows are error rows, every other case is reported. No sampling
 * outcome is asserted here (only statuses): nothing in the family. */
Test(audit, a_failing_case_is_an_error_row, .timeout = 300)
{
    fls_audit_options o;
    fls_audit_options_default(&o);
    o.fault_case = "coin-logits";
    fls_audit_row *rows = NULL;
    size_t n = 0;
    /* a sub-run: the three cheapest cases, through fls_audit_run_case as fls_audit_run does */
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    fls_context_t *ctx = NULL;
    cr_assert_eq(fls_context_create(&ctx, &cfg), FLS_OK);
    fls_audit_row r3[3 * MAX_ROWS];
    size_t at = 0;
    const char *names[3] = {"v1-logits", "coin-logits", "v17-logits"};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < fls_audit_case_count(); i++)
            if (!strcmp(fls_audit_case_get(i)->name, names[k])) {
                fls_status st = fls_audit_run_case(ctx, &o, 1e-6, i, &r3[at]);
                cr_expect_eq(st, k == 1 ? FLS_ERR_INTERNAL : FLS_OK, "%s", names[k]);
                at += (size_t)fls_audit_case_tests(i);
            }
    fls_context_destroy(ctx);
    cr_assert_eq(at, 3);
    for (size_t k = 0; k < at; k++)
        fls_audit_print_row(stdout, &r3[k]);
    cr_expect(r3[0].status == FLS_OK && r3[2].status == FLS_OK);
    cr_expect_eq(r3[1].status, FLS_ERR_INTERNAL);
    cr_expect(!r3[1].pass && isnan(r3[1].p) && !strcmp(r3[1].kind, "error"));
    cr_expect(strstr(r3[1].note, "sampling failed"), "%s", r3[1].note);
    /* and through fls_audit_run, every case failing ("*"): still FLS_OK, every row present */
    o.fault_case = "*";
    cr_assert_eq(fls_audit_run(&o, &rows, &n), FLS_OK);
    cr_expect_eq(n, (size_t)fls_audit_run_tests(0, FLS_ENGINE_CPU));
    for (size_t k = 0; k < n; k++) {
        cr_expect(rows[k].status != FLS_OK && !rows[k].pass, "%s", rows[k].test);
        cr_expect(rows[k].test[0] != 0);
    }
    free(rows);
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
    cr_assert_eq(fls_bins_build(&bins, p, V, B * draws, FLS_STATS_MAX_BINS), FLS_OK);
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
