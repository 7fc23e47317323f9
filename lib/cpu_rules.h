/*
 * cpu_rules.h — the rules as the CPU tile engine sees them (lib/cpu_rules.c):
 * a table of functions over the rule headers of variants/. The engine's
 * tile loop, thread merge and finalize are generic over this table.
 */
#ifndef FLS_CPU_RULES_H
#define FLS_CPU_RULES_H

#include "internal.h"
#include "rule.h"

/* What a rule needs to know about the request. */
typedef struct cpu_rule_ctx {
    const fls_request *req;
    int64_t K;         /* tokens per draw in the output */
    int32_t stair_cap; /* the staircase's capacity (family rule) */
    int64_t top_cap;   /* the top list's capacity (0: no filter needs it) */
    int want_lse;      /* logsumexp or logprobs asked for */
} cpu_rule_ctx;

/* A tile's partial statistics of one row's finite tempered logits, merged
 * across tiles in tile order (so their bits never depend on threads):
 * the log-sum-exp partial and, when a filter needs them, the moments. */
typedef struct cpu_part {
    fls_lse lse;
    double n, mean, m2;
} cpu_part;

void cpu_part_span(cpu_part *p, const float *x, int64_t n, int moments);
void cpu_part_merge(cpu_part *a, const cpu_part *b);
cpu_part cpu_part_empty(void);

typedef void (*cpu_gumbel_fn)(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t v0, int64_t n,
                              float *g);

/* finalize's answer for a row the kept statistics cannot decide */
#define CPU_RULE_SECOND_PASS 1

typedef void (*cpu_gumbel_fn)(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t v0, int64_t n,
                              float *g);

typedef struct cpu_rule {
    size_t cand_size; /* per (row, draw) */
    size_t row_size;  /* per row, draw-independent (0: none) */
    int needs_part;   /* the per-tile partials are needed even without logsumexp outputs */
    void (*cand_init)(const cpu_rule_ctx *rc, void *c);
    void (*row_init)(const cpu_rule_ctx *rc, void *r);
    /* a tile of row statistics (tempered logits x of tokens v0..) */
    void (*row_push)(void *r, const float *x, int64_t v0, int64_t n);
    /* a tile into one (row, draw) state: noise g (NULL for T = 0); scratch: n floats */
    void (*push_span)(void *c, const float *x, const float *g, float T, int64_t v0, int64_t n,
                      float *scratch);
    void (*cand_merge)(void *a, const void *b);
    void (*row_merge)(void *a, const void *b);
    /* Row b from its merged statistics and its draws' states (cands + d *
     * cand_size): tok[d * K + j] and lp[d * K + j] for every draw d and
     * position j, *lse; FLS_OK, FLS_ERR_ALL_MASKED or CPU_RULE_SECOND_PASS. */
    int (*finalize)(const cpu_rule_ctx *rc, int64_t b, void *row, const cpu_part *part, const char *cands,
                    int64_t *tok, float *lp, double *lse);
    /* Optional: a rule that draws its own noise (the grouped method) takes
     * a whole tile of row b for draws [d0, d1) here instead of push_span;
     * cands is the row's first draw's state. scratch: 2 n floats. */
    void (*push_tile)(const cpu_rule_ctx *rc, char *cands, int64_t d0, int64_t d1, const float *x, int64_t v0,
                      int64_t n, const fls_row_params *rp, cpu_gumbel_fn gumbel, float *scratch);
} cpu_rule;

/* The temperature rule (no filter, one token per draw). */
extern const cpu_rule cpu_rule_temperature;
/* The rule family: filters of variants/registry.h and sampling without
 * replacement, on K-staircases (variants/stair.h). */
extern const cpu_rule cpu_rule_family;
/* The grouped method (variants/grouped.h). */
extern const cpu_rule cpu_rule_grouped;

/* The rule for a request and its context. */
const cpu_rule *cpu_rule_for(const fls_request *req, int want_lse, cpu_rule_ctx *rc);

/* The exact rule on one materialized row (the second pass, and the unfused
 * Gumbel method): x holds the V tempered logits of row b; part the row's
 * merged partial (computed from x when NULL). Sorts the finite tokens,
 * applies the filters with statistics that hold every token, and takes the
 * K best keys of the support with the contract's noise. Writes as
 * finalize; FLS_OK, FLS_ERR_ALL_MASKED or FLS_ERR_OUT_OF_MEMORY. */
int cpu_rule_reference_row(const cpu_rule_ctx *rc, int64_t b, const float *x, const cpu_part *part,
                           cpu_gumbel_fn gumbel, int64_t *tok, float *lp, double *lse);

/* The second pass of a row the family's finalize left undecided: the
 * cutoff and log-sum-exp from the full statistics of x (as
 * cpu_rule_reference_row), then the draws from the first pass's staircases
 * (cands: the row's draw states; the same tokens as the reference, with no
 * noise drawn again); the full reference when a staircase overflowed or
 * cands is NULL. */
int cpu_rule_second_pass_row(const cpu_rule_ctx *rc, int64_t b, const float *x, const cpu_part *part,
                             const char *cands, cpu_gumbel_fn gumbel, int64_t *tok, float *lp, double *lse);

/* The support cutoff *c and the support's log-sum-exp *lse (the max for a
 * greedy row) of row b from its full tempered logits x and merged partial
 * (computed from x when NULL), and the row's max *m (m may be NULL): the
 * second pass's decision, shared by the engines. FLS_OK,
 * FLS_ERR_ALL_MASKED or FLS_ERR_OUT_OF_MEMORY. */
int cpu_rule_reference_cut_lse(const cpu_rule_ctx *rc, int64_t b, const float *x, const cpu_part *part,
                               float *c, double *lse, double *m);

/* The support cutoff of row b from its full tempered logits (the
 * multinomial baseline's filters): *c, or FLS_ERR_ALL_MASKED / OUT_OF_MEMORY. */
int cpu_rule_reference_cut(const cpu_rule_ctx *rc, int64_t b, const float *x, float *c);

#endif /* FLS_CPU_RULES_H */
