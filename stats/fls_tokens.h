/*
 * fls_tokens.h — the audit of external tokens: tokens drawn by any sampler
 * (a serving engine, torch.multinomial, a kernel of one's own, or our own
 * engines) from given logits at given temperatures, tested against the exact
 * categorical softmax(l / T) with the machinery of fls_stats.h.
 *
 * Part of the statistics core: it knows no case list and no engine. The CLI
 * (`flashsample audit --logits L.npy --tokens T.npy`), the GPU suite's own
 * goodness-of-fit checks and the defect gallery of tests/stats call it.
 *
 * The tests (one row each, in this order; docs/AUDIT.md has the detail):
 *   <name>/gof          global goodness of fit: every sample's randomized
 *                       probability integral transform u = F(v-) + U p_v in its
 *                       row's exact CDF (tokens sorted by decreasing
 *                       probability) is uniform under the null; all rows pool
 *                       into K <= 32 equal-mass bins of u (each expecting >=
 *                       1000), a multinomial with known cell probabilities 1/K:
 *                       Pearson chi-square (K >= 3) or exact binomial (K = 2).
 *                       A sample on a zero-probability token (masked, or not
 *                       the argmax at T = 0) or out of [0, V) fails it outright.
 *   <name>/tail10 .. /tail25  the count of samples more than t nats below
 *                       their row's head against the exact tail mass: exact
 *                       test of a sum of binomials (fls_stats_binsum_test);
 *   <name>/pairs-draws  independence of draws 2k and 2k + 1 of each row: the
 *                       pairs (u, u') of their transforms on a K' x K' grid of
 *                       equal cells (K' <= 8), Pearson chi-square;
 *   <name>/pairs-rows   (if asked) the same for rows 2i and 2i + 1, draw by
 *                       draw: for rows the caller knows were sampled
 *                       independently (different requests, seeds);
 *   <name>/ties         tokens with bit-identical logits (at T > 0) must be
 *                       chosen equally often: the count of samples on the
 *                       lower half (by index) of each tie class of size s
 *                       against Bin(n_c, floor(s/2) / s), summed over classes,
 *                       exact (a tie broken toward the lower index shows).
 * With a rule (o->rule) the reference of every test is the rule's pmf
 * (fls_stats_probs_rule: softmax over the final support; a sample outside
 * the support fails outright), and:
 *   <name>/boundary     (a truncating rule) the samples on the boundary class
 *                       (the tokens at the support's cutoff value: the k-th
 *                       value, the last class of the nucleus, ...) against its
 *                       exact mass, summed over rows, exact; samples on the
 *                       class just outside it fail outright. An exclusive
 *                       boundary or a tie dropped at the cutoff is a deficit
 *                       of the boundary class, seen here long before the
 *                       global test can see its small TV;
 *   <name>/pl-cond      (without replacement, K >= 2) positions 2..K: each
 *                       position's randomized transform in the distribution of
 *                       the tokens not yet drawn (the Rosenblatt transform of
 *                       Plackett-Luce: independent uniforms under the null),
 *                       pooled into equal cells; a repeated token, a -1 while
 *                       the support is not exhausted, or a token after it is,
 *                       fails outright;
 *   <name>/pl-tuples    (without replacement, K >= 2, (V + 1)^K <= 2^16) the
 *                       whole ordered tuple's transform in its row's exact
 *                       tuple distribution (fls_stats_pl_tuples), pooled into
 *                       equal cells.
 * The global, tail, pairs and tie tests then look at position 1 (the first
 * token of each draw), whose distribution is the rule's pmf.
 * A row that could not test anything with the inputs given (one draw per row:
 * no pairs; no tie class sampled; no row whose rule cut a token; nothing
 * beyond the first position; tuples too many to enumerate; a tail where no
 * deficit or excess can show) is marked untested (fls_audit_row.untested,
 * pass = 0, p = NaN): not a pass, and not a failure.
 * Each row states what its test can see at the size it ran: TV caught with
 * probability 0.999 on its bins (gof, pairs), the deficit and excess of the
 * tail mass caught so (tails), the smallest bin mass.
 */
#ifndef FLS_TOKENS_H
#define FLS_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "flashsample.h"
#include "stats/fls_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fls_tokens_options {
    /* Per-test level. <= 0: this audit is a run of its own, alpha = budget /
     * fls_tokens_test_count(o). Set it to the family's alpha when the audit is
     * part of a larger run (the GPU suite, a test suite), after adding
     * fls_tokens_test_count(o) tests per call to that family. */
    double alpha;
    double budget;    /* the own family's budget when alpha <= 0 (default FLS_STATS_BUDGET) */
    int tails;        /* run the tail tests (default 1) */
    int pairs_draws;  /* run the independence test of draws (default 1) */
    int pairs_rows;   /* run the independence test of rows 2i, 2i + 1 (default 0) */
    int ties;         /* run the tie test (default 1) */
    uint64_t seed;    /* randomization of the transforms (default 20260301; logged in the rows' notes) */
    const char *name; /* prefix of the test names (default "tokens"), at most 40 characters used */
    /* ---- the rule family (docs/RULES.md) ---- */
    /* The rule the tokens were drawn under, in the library's own struct (fill
     * it with fls_params_default, then set the rule's fields; the command line
     * passes the fls_params its rule flags filled). Read: min_p, top_k,
     * top_p, filter (any rule of variants/registry.h beyond the three
     * built-ins, by name: fls_stats_rule_from_params) with filter_value,
     * the per-row arrays row_min_p, row_top_k, row_top_p,
     * row_filter_value (B entries), and without_replacement_k with
     * row_without_replacement_k. Nothing else (temperatures are the call's
     * arguments). NULL (default): no rule, the reference is softmax(l / T).
     * With without_replacement_k = K >= 1 the tokens are (B, N, K), positions
     * beyond the support (or beyond a row's K_b) -1, as the library writes
     * them. */
    const fls_params *rule;
    /* Run the boundary test when the rule truncates (default 1). */
    int boundary;
} fls_tokens_options;

void fls_tokens_options_default(fls_tokens_options *o);

/* Chance-failing tests (rows) one call runs with these options: 7 by default
 * (gof, 4 tails, pairs-draws, ties), + pairs-rows, + boundary when the rule
 * truncates (any filter or per-row filter array given), + pl-cond and
 * pl-tuples without replacement with K >= 2. */
int fls_tokens_test_count(const fls_tokens_options *o);

/* The audit. logits: B rows of V floats, row stride ld >= V (host memory);
 * -inf masks a token. Temperatures: temperature[b] if the array is given,
 * else temperature_value for every row (T = 0: greedy, a point mass on the
 * lowest-index maximum). tokens: B rows of N int64 (row-major, the layout of
 * flashsample's outputs and of `sample --out`). rows: room for
 * fls_tokens_test_count(o) rows; *n_rows is set to that count. Errors:
 * FLS_ERR_NULL, FLS_ERR_SIZE (B, V or N < 1, ld < V), FLS_ERR_TEMPERATURE,
 * FLS_ERR_NAN (a NaN or +inf logit), FLS_ERR_ALL_MASKED, FLS_ERR_OUT_OF_MEMORY;
 * on error no row is meaningful. A test that fails is a row with pass = 0,
 * not an error. */
fls_status fls_audit_tokens(const float *logits, int64_t B, int64_t V, int64_t ld, const float *temperature,
                            float temperature_value, const int64_t *tokens, int64_t N,
                            const fls_tokens_options *o, fls_audit_row *rows, size_t *n_rows);

/* The row of the test named `test` — the part of a row's name after its last
 * '/' ("gof", "tail15", "pairs-draws", ...) — or NULL. */
const fls_audit_row *fls_audit_row_named(const fls_audit_row *rows, size_t n, const char *test);
/* Whether a test failed: any row (test NULL) or a row named `test`. A row
 * not tested (untested) is not a failure: it is never flagged. */
int fls_audit_rows_flagged(const fls_audit_row *rows, size_t n, const char *test);

/* ---- Verdicts: a row passes, fails, or tested nothing ---- */

typedef enum fls_audit_verdict {
    FLS_AUDIT_PASS = 0,    /* tested, and passed */
    FLS_AUDIT_FAIL = 1,    /* tested, and failed; or an error row (status != FLS_OK) */
    FLS_AUDIT_UNTESTED = 2 /* the test could not test anything with these inputs */
} fls_audit_verdict;

/* A row's verdict: FAIL for an error row, UNTESTED for a row with untested
 * set, else PASS or FAIL by its pass field. */
fls_audit_verdict fls_audit_row_verdict(const fls_audit_row *row);
/* "pass", "fail", "untested" (the JSON's verdict values). */
const char *fls_audit_verdict_name(fls_audit_verdict v);
/* Marks a row as not tested: untested = 1, pass = 0, p = NaN, the note says
 * why ("not tested: " is not prepended; the printed row adds it). */
void fls_audit_row_untested(fls_audit_row *row, const char *why);
/* The rule for tail rows (and the one place it is written): a tail row that
 * passed (no sample failed it outright, p >= alpha) while neither a deficit
 * nor an excess of the tail mass of any size could be caught with probability
 * FLS_STATS_POWER (deficit_caught and excess_caught both infinite: no tail
 * mass, or too few draws for even m -> 0 or m -> 1 to show) tested nothing;
 * it is marked untested. A tail that can see only an excess stays tested
 * (it is a one-sided test). Returns whether the row was marked. Error rows
 * and rows of another kind are left alone. */
int fls_audit_tail_untested(fls_audit_row *row);

/* Rows by verdict. */
typedef struct fls_audit_tally {
    size_t tests, passed, failed, untested;
} fls_audit_tally;
void fls_audit_tally_rows(const fls_audit_row *rows, size_t n, fls_audit_tally *t);
/* The run's verdict: FAIL if any row failed (a tested test or an error row),
 * else UNTESTED if no row tested anything (n = 0 included): an audit that
 * tested nothing is not a success; else PASS (the rows not tested are said
 * beside it, never counted as passes). */
fls_audit_verdict fls_audit_tally_verdict(const fls_audit_tally *t);
/* "12 tests: 9 passed, 1 failed, 2 not tested" into buf (cap bytes). */
void fls_audit_tally_format(const fls_audit_tally *t, char *buf, size_t cap);
/* The equal-cells test of counts on K cells (impossible: samples that fail
 * outright), Pearson (K >= 3) or exact binomial (K = 2), into row's chi2, dof,
 * p, pass, bins, min_mass and tv_caught (the TV it catches with probability
 * FLS_STATS_POWER). */
fls_status fls_audit_equal_cells(const int64_t *counts, int K, int64_t impossible, double alpha,
                                 fls_audit_row *row);

/* Draws per row (N) a sampler must provide so that the global test catches TV
 * FLS_STATS_TV with probability FLS_STATS_POWER at level alpha (B rows pooled,
 * 32 bins). */
int64_t fls_tokens_draws_needed(int64_t B, double alpha);

#ifdef __cplusplus
}
#endif

#endif /* FLS_TOKENS_H */
