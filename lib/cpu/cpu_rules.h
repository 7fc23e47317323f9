/*
 * cpu_rules.h — the rules as the CPU tile engine sees them (lib/cpu/cpu_rules.c):
 * a table of functions over the rule headers of variants/. The engine's
 * tile loop, thread merge and finalize are generic over this table; the
 * rows it cannot decide in one pass go to the shared reference
 * (rule_ref.h).
 */
#ifndef FLS_CPU_RULES_H
#define FLS_CPU_RULES_H

#include "lib/front/internal.h"
#include "variants/rule.h"
#include "lib/ref/rule_ref.h"

/* finalize's answer for a row the kept statistics cannot decide */
#define CPU_RULE_SECOND_PASS 1

typedef struct cpu_rule {
    size_t cand_size; /* per (row, draw) */
    size_t row_size;  /* per row, draw-independent (0: none) */
    int needs_part;   /* the per-tile partials are needed even without logsumexp outputs */
    /* The state of a (row, draw) is an fls_cand holding the best key so far
     * and push_span keeps only the argmax of x + g: the engine may then give
     * -inf noise to tokens whose key provably stays below that key
     * (cpu_kernels.h, gumbel_skip) */
    int argmax_only;
    void (*cand_init)(const fls_ref_ctx *rc, void *c);
    void (*row_init)(const fls_ref_ctx *rc, void *r);
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
    int (*finalize)(const fls_ref_ctx *rc, int64_t b, void *row, const fls_row_part *part, const char *cands,
                    int64_t *tok, float *lp, double *lse);
    /* Optional: a rule that draws its own noise (the grouped method) takes
     * a whole tile of row b for draws [d0, d1) here instead of push_span;
     * cands is the row's first draw's state. scratch: 2 n floats. */
    void (*push_tile)(const fls_ref_ctx *rc, char *cands, int64_t d0, int64_t d1, const float *x, int64_t v0,
                      int64_t n, const fls_row_params *rp, fls_gumbel_span_fn gumbel, float *scratch);
} cpu_rule;

/* The temperature rule (no filter, one token per draw). */
extern const cpu_rule cpu_rule_temperature;
/* The rule family: filters of variants/registry.h and sampling without
 * replacement, on K-staircases (variants/stair.h). */
extern const cpu_rule cpu_rule_family;
/* The grouped method (variants/grouped.h). */
extern const cpu_rule cpu_rule_grouped;

/* The rule for a request and its context. */
const cpu_rule *cpu_rule_for(const fls_request *req, int want_lse, fls_ref_ctx *rc);

/* The second pass of a row the family's finalize left undecided: the
 * cutoff and log-sum-exp from the full statistics of x (as
 * fls_ref_row), then the draws from the first pass's staircases
 * (cands: the row's draw states; the same tokens as the reference, with no
 * noise drawn again); the full reference when a staircase overflowed or
 * cands is NULL. */
int cpu_rule_second_pass_row(const fls_ref_ctx *rc, int64_t b, const float *x, const fls_row_part *part,
                             const char *cands, fls_gumbel_span_fn gumbel, int64_t *tok, float *lp,
                             double *lse);

#endif /* FLS_CPU_RULES_H */
