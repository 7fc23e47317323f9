/*
 * mutation_table.c — the mutation table of docs/AUDIT.md (not a test: minutes;
 * run by hand): for each planted mutation of mutants.c, the N per row at which
 * the test that sees it has power 0.999 at the level of one audit run of its
 * own (alpha = 1e-4 / the audit's tests), and the rate at which R independent
 * replicates were flagged at that N and at N / 4; then the false-failure rate
 * of the exact samplers (any test failing) at the N the CI runs them at.
 *
 *   build/tests/stats/mutation_table [--reps R] [--exact-reps R]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats/fls_stats.h"
#include "stats/fls_tokens.h"
#include "tests/stats/mutants.h"

static double own_alpha(const mut_input *in, fls_tokens_options *o, mut_scenario s)
{
    fls_tokens_options_default(o);
    o->name = mut_scenario_name[s];
    o->rule = in->has_rule ? &in->rule : NULL;
    return FLS_STATS_BUDGET / fls_tokens_test_count(o);
}

/* Audits one replicate; returns whether `test` failed (any test if NULL). */
static int flagged(mut_scenario s, mut_sampler f, int64_t N, uint64_t seed, const char *test)
{
    mut_input in;
    mut_make(s, &in);
    fls_tokens_options o;
    own_alpha(&in, &o, s);
    int64_t *tok = malloc((size_t)(in.B * N * mut_stride(&in)) * sizeof(int64_t));
    fls_audit_row rows[16];
    size_t n = 0;
    int hit = -1;
    if (tok && f(&in, N, seed, tok) == FLS_OK &&
        fls_audit_tokens(in.logits, in.B, in.V, in.V, in.temps, 1.0f, tok, N, &o, rows, &n) == FLS_OK) {
        hit = fls_audit_rows_flagged(rows, n, test);
    }
    free(tok);
    mut_free(&in);
    return hit;
}

typedef enum kind { K_IMPOSSIBLE, K_REPEATS, K_BOUNDARY, K_CELLS, K_REUSED, K_MERGE } kind;

typedef struct entry {
    const char *what;
    mut_scenario s;
    mut_sampler f;
    kind k;
    mut_probs_fn q;
    const char *test;
} entry;

static const entry k_entries[] = {
    {"top-k keeps k + 1", MUT_TOPK, mut_topk_plus1, K_IMPOSSIBLE, mut_probs_topk_plus1, "gof"},
    {"top-k drops the tie at the k-th value", MUT_TOPK_TIE, mut_topk_drops_ties, K_BOUNDARY,
     mut_probs_topk_drops_ties, "boundary"},
    {"top-p exclusive boundary", MUT_TOPP, mut_topp_exclusive, K_BOUNDARY, mut_probs_topp_exclusive,
     "boundary"},
    {"min-p against each tile's maximum", MUT_MINP, mut_minp_tile_max, K_IMPOSSIBLE, mut_probs_minp_tile_max,
     "gof"},
    {"PL positions 2..K with replacement (V 8)", MUT_WR_SMALL, mut_pl_with_replacement, K_REPEATS, NULL,
     "pl-tuples"},
    {"PL positions 2..K with replacement (V 1024)", MUT_WR_LARGE, mut_pl_with_replacement, K_REPEATS, NULL,
     "pl-cond"},
    {"one group Gumbel reused across draws", MUT_GROUPS, mut_group_noise_reused, K_REUSED, NULL,
     "pairs-draws"},
    {"within-group sample from the next group", MUT_GROUPS, mut_group_wrong_group, K_CELLS,
     mut_probs_group_wrong_group, "gof"},
    {"L_k online in fp32 (g = 2^19)", MUT_GROUP_DEEP, mut_group_lse_fp32, K_CELLS, mut_probs_group_lse_fp32,
     "gof"},
    {"merge keeps the first state on ties", MUT_MERGE_TIES, mut_merge_first_on_ties, K_MERGE, NULL, "gof"},
};

int main(int argc, char **argv)
{
    int reps = 200, exact_reps = 200;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--exact-reps"))
            exact_reps = atoi(argv[++i]);
    }
    printf("| mutation | scenario | test that sees it | alpha (own audit) | N per row for power 0.999 | "
           "flagged at N "
           "(%d runs) | flagged at N/4 |\n|---|---|---|---|---|---|---|\n",
           reps);
    for (size_t e = 0; e < sizeof k_entries / sizeof k_entries[0]; e++) {
        const entry *x = &k_entries[e];
        mut_input in;
        mut_make(x->s, &in);
        fls_tokens_options o;
        const double alpha = own_alpha(&in, &o, x->s);
        mut_free(&in);
        double w = 0.0, w2 = 0.0;
        int64_t groups[16], N = -1;
        switch (x->k) {
        case K_IMPOSSIBLE:
            N = mut_n_impossible(x->s, x->q, alpha, 0.999, &w);
            break;
        case K_REPEATS:
            N = mut_n_repeats(x->s, alpha, 0.999, &w);
            break;
        case K_BOUNDARY:
            N = mut_n_boundary(x->s, x->q, alpha, 0.999, &w, &w2);
            break;
        case K_CELLS:
            N = mut_n_cells(x->s, x->q, alpha, 0.999, &w);
            break;
        case K_REUSED:
            N = mut_n_reused(31337, alpha, 0.999, groups); /* at one seed's groups */
            break;
        case K_MERGE:
            N = mut_n_merge(alpha, 0.999);
            break;
        }
        int hit = 0, hit4 = 0;
        const int64_t N4 = N / 4 > 1 ? N / 4 : 1;
        const int rr = x->s == MUT_GROUP_DEEP && reps > 40 ? 40 : reps; /* V = 2^20: ~1 s per audit */
        for (int r = 0; r < rr; r++) {
            hit += flagged(x->s, x->f, N, 1000003u * (uint64_t)(r + 1) + e, x->test) == 1;
            hit4 += flagged(x->s, x->f, N4, 7000003u * (uint64_t)(r + 1) + e, x->test) == 1;
        }
        printf("| %s | %s | %s | %.3g | %lld (%s %.4g%s%.4g) | %.3f (%d) | %.3f |\n", x->what,
               mut_scenario_name[x->s], x->test, alpha, (long long)N,
               x->k == K_IMPOSSIBLE ? "mass outside"
               : x->k == K_REPEATS  ? "repeats"
               : x->k == K_BOUNDARY ? "class mass"
               : x->k == K_CELLS    ? "TV"
                                    : "",
               w, x->k == K_BOUNDARY ? " -> " : "", x->k == K_BOUNDARY ? w2 : 0.0, (double)hit / rr, rr,
               (double)hit4 / rr);
        fflush(stdout);
    }
    printf("\n| exact sampler | scenario | N per row | audits with any failing test |\n|---|---|---|---|\n");
    const struct {
        mut_scenario s;
        mut_sampler f;
        const char *who;
        int64_t N;
    } ex[] = {
        {MUT_TOPK, mut_alias, "alias", 20000},
        {MUT_TOPK, mut_ours, "ours", 20000},
        {MUT_TOPK_TIE, mut_alias, "alias", 20000},
        {MUT_TOPK_TIE, mut_ours, "ours", 20000},
        {MUT_TOPP, mut_alias, "alias", 20000},
        {MUT_TOPP, mut_ours, "ours", 20000},
        {MUT_MINP, mut_alias, "alias", 20000},
        {MUT_MINP, mut_ours, "ours", 20000},
        {MUT_WR_SMALL, mut_alias, "alias", 20000},
        {MUT_WR_SMALL, mut_ours, "ours", 20000},
        {MUT_WR_LARGE, mut_alias, "alias", 20000},
        {MUT_WR_LARGE, mut_ours, "ours", 20000},
        {MUT_GROUPS, mut_alias, "alias", 20000},
        {MUT_GROUPS, mut_ours, "ours (grouped)", 20000},
        {MUT_GROUPS, mut_ours_shards, "ours (grouped, shards)", 20000},
        {MUT_MERGE_TIES, mut_ours_shards, "ours (shards)", 64},
    };
    for (size_t e = 0; e < sizeof ex / sizeof ex[0]; e++) {
        int bad = 0;
        for (int r = 0; r < exact_reps; r++)
            bad += flagged(ex[e].s, ex[e].f, ex[e].N, 99991u * (uint64_t)(r + 1) + e, NULL) != 0;
        printf("| %s | %s | %lld | %d of %d |\n", ex[e].who, mut_scenario_name[ex[e].s], (long long)ex[e].N,
               bad, exact_reps);
        fflush(stdout);
    }
    return 0;
}
