/*
 * mutants.h — planted mutations of the rule family and of the grouped /
 * streaming samplers (issues 13 and 14): small, deliberately wrong samplers
 * whose tokens the token audit (fls_audit_tokens) must flag at a stated N,
 * and the exact samplers that must pass it. Used by test_mutations.c (CI)
 * and mutation_table.c (the detection table of docs/AUDIT.md).
 *
 * Each mutant is the correct mechanism with one planted error, written here
 * (not in the library): a rule mutant samples exactly from its wrong support
 * (Walker's alias, 53-bit accept), the grouped mutants simulate the grouped
 * method with their error (wrong noise reuse, wrong group, an fp32 log-mass),
 * the merge mutant merges per-shard Gumbel-max states in a random arrival
 * order, keeping the first state on ties.
 */
#ifndef FLS_MUTANTS_H
#define FLS_MUTANTS_H

#include <stdint.h>

#include "flashsample.h"
#include "stats/fls_stats.h"

typedef enum mut_scenario {
    MUT_TOPK = 0,   /* B = 2 identical rows, V = 256, N(0, 1.5), top-k 10, no tie at the k-th value */
    MUT_TOPK_TIE,   /* the same with ranks 10, 11, 12 bit-identical (top-k 10 keeps 12 tokens) */
    MUT_TOPP,       /* B = 2 identical rows, V = 256, N(0, 1.5), top-p 0.8 (centered in its gap) */
    MUT_MINP,       /* B = 2 identical rows, V = 1024, N(0, 1.5), T = 0.7, min-p 0.05 */
    MUT_WR_SMALL,   /* B = 2 identical rows, V = 8, N(0, 1), without replacement K = 3 (tuples) */
    MUT_WR_LARGE,   /* B = 2 identical rows, V = 1024, N(0, 1.5), top-k 64, without replacement K = 3 */
    MUT_GROUPS,     /* B = 8 identical rows, V = 256, g = 32: group k's logits N(0, 0.3) - 0.45 k */
    MUT_GROUP_DEEP, /* B = 1, V = 2^20, g = 2^19: each group a head at 0 first, group 0's other members
                       16.64-16.66 nats below (an fp32 sum after the head absorbs them), group 1's at 30 */
    MUT_MERGE_TIES, /* B = 4 rows, V = 64, T = 0, the maximum tied in two of the 4 shards of 16 */
    MUT_N_SCENARIOS
} mut_scenario;

extern const char *const mut_scenario_name[MUT_N_SCENARIOS];

typedef struct mut_input {
    float *logits; /* (B, V) */
    float *temps;  /* B */
    int64_t B, V;
    fls_params rule;    /* the rule fields, for the audit and our engine (fls_params_default otherwise) */
    int has_rule;       /* 0: the audit's reference is softmax(l / T) */
    int64_t group_size; /* grouped scenarios (0: none) */
    int64_t shards;     /* MUT_MERGE_TIES */
} mut_input;

/* Builds a scenario (deterministic: hashes, no RNG state); mut_free releases it. */
void mut_make(mut_scenario s, mut_input *in);
void mut_free(mut_input *in);
/* int64 per draw in tokens: K without replacement, else 1. */
int64_t mut_stride(const mut_input *in);

typedef fls_status (*mut_sampler)(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens);

/* Exact: our engine (fls_sample_logits with the scenario's rule; the grouped
 * method with its group size; row seeds fls_row_seed(seed, b)). */
fls_status mut_ours(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens);
/* Exact: the audit's own reference pmf (fls_stats_probs_rule), sampled with
 * Walker's alias (53-bit accept); without replacement, positions drawn one
 * after another with repeats rejected (sequential Plackett-Luce). */
fls_status mut_alias(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens);
/* Exact: our streaming API, each row's shards fed to states of their own and
 * merged in a random order through serialized bytes (T = 0 with ties: the
 * lowest index must win whatever the order). */
fls_status mut_ours_shards(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens);

/* The rule mutations (each samples exactly from its wrong support). */
fls_status mut_topk_plus1(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens);
fls_status mut_topk_drops_ties(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens);
fls_status mut_topp_exclusive(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens);
fls_status mut_minp_tile_max(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens);
fls_status mut_pl_with_replacement(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens);

/* The grouped and merge mutations. */
fls_status mut_group_noise_reused(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens);
fls_status mut_group_wrong_group(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens);
fls_status mut_group_lse_fp32(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens);
fls_status mut_merge_first_on_ties(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens);

/* The exact distributions (B x V) the rule and grouped mutants sample from,
 * for the stated N: the reference's and each mutant's. */
typedef fls_status (*mut_probs_fn)(const mut_input *in, double *q);
fls_status mut_probs_exact(const mut_input *in, double *q);
fls_status mut_probs_topk_plus1(const mut_input *in, double *q);
fls_status mut_probs_topk_drops_ties(const mut_input *in, double *q);
fls_status mut_probs_topp_exclusive(const mut_input *in, double *q);
fls_status mut_probs_minp_tile_max(const mut_input *in, double *q);
fls_status mut_probs_group_wrong_group(const mut_input *in, double *q);
fls_status mut_probs_group_lse_fp32(const mut_input *in, double *q);
/* The group each row of mut_group_noise_reused draws every time with this
 * seed (its one set of group Gumbels): groups[b]. */
void mut_group_noise_reused_groups(const mut_input *in, uint64_t seed, int64_t *groups);

/* A group's log-mass: online in fp32 (the mutation) — the running sum after
 * the head absorbs members more than ~16.6 nats below it. */
float mut_group_lse_f32(const float *x, int64_t n);

/* ---- the stated N: power of the token audit against a mutant ---- */

/* The global test's cells and power, the audit's cell counts and the
 * smallest-N search: fls_stats_gof_cells, fls_stats_cells_power,
 * fls_stats_equal_cells_for, fls_stats_pair_side, fls_stats_smallest_n. */
/* The pair cells (K x K) when both draws of a pair come from the conditional
 * of group groups[b] (row b), averaged over rows. */
void mut_pair_cells_groups(const double *p, int64_t V, int64_t g, const int64_t *groups, int64_t B, int K,
                           double *Q);

/* The stated N per row of each kind of check: the smallest N at which the
 * test that sees the mutant has power >= `power` at level alpha against the
 * mutant's own distribution. *what gets the key quantity (the mass outside
 * the support, the repeat probability, the boundary class mass under the
 * mutant, the TV per row, ...), what2 a second one (may be NULL). */
int64_t mut_n_impossible(mut_scenario s, mut_probs_fn mutant, double alpha, double power, double *what);
int64_t mut_n_repeats(mut_scenario s, double alpha, double power, double *what);
int64_t mut_n_boundary(mut_scenario s, mut_probs_fn mutant, double alpha, double power, double *what,
                       double *what2);
int64_t mut_n_cells(mut_scenario s, mut_probs_fn mutant, double alpha, double power, double *what);
int64_t mut_n_reused(uint64_t seed, double alpha, double power, int64_t *groups);
int64_t mut_n_merge(double alpha, double power);

#endif
