/*
 * rule_ref.h — the rule family's exact reference on one materialized row,
 * host code shared by both engines: the CPU engine's second pass and
 * unfused Gumbel method, and the CUDA engine's rows that its one-pass
 * statistics leave undecided. Written once, so the engines decide such rows
 * with the same code and give the same tokens.
 */
#ifndef FLS_RULE_REF_H
#define FLS_RULE_REF_H

#include "lib/front/internal.h"
#include "variants/rule.h"

/* A request's plan for the rule family (fls_ref_plan). */
typedef struct fls_ref_ctx {
    const fls_request *req;
    int64_t K;         /* tokens per draw in the output */
    int32_t stair_cap; /* the staircase's capacity (the family's draws) */
    int64_t top_cap;   /* the top list's capacity (0: no filter needs it) */
    int want_lse;      /* logsumexp or logprobs asked for */
} fls_ref_ctx;

/* A span's partial statistics of one row's finite tempered logits, merged
 * in a fixed order (so their bits never depend on threads): the
 * log-sum-exp partial and, when a filter needs them, the moments. */
typedef struct fls_row_part {
    fls_lse lse;
    double n, mean, m2;
} fls_row_part;

fls_row_part fls_row_part_empty(void);
void fls_row_part_span(fls_row_part *p, const float *x, int64_t n, int moments);
void fls_row_part_merge(fls_row_part *a, const fls_row_part *b);

/* g[i] = the contract's Gumbel noise of token v0 + i (docs/NOISE.md), i < n:
 * the portable noise span, which every SIMD path matches bit for bit. */
typedef void (*fls_gumbel_span_fn)(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t v0, int64_t n,
                                   float *g);
void fls_ref_gumbel_span(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t v0, int64_t n, float *g);
/* The same under FLS_NOISE_MIN_FIRST (fls_gumbel_mf). */
void fls_ref_gumbel_span_mf(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t v0, int64_t n, float *g);

/* The plan of a request: the top list's capacity its rows' descriptors ask
 * for (every list a value sizes up to 65536, at least 1024), the staircase's
 * capacity. */
void fls_ref_plan(const fls_request *req, int want_lse, fls_ref_ctx *rc);

/* The exact rule on one materialized row: x holds the V tempered logits of
 * row b; part the row's merged partial (computed from x when NULL). Sorts
 * the finite tokens, applies the filters with statistics that hold every
 * token, and takes the K best keys of the support with the contract's
 * noise: tok[d * K + j], lp[d * K + j] for every draw d and position j, and
 * *lse. FLS_OK, FLS_ERR_ALL_MASKED or FLS_ERR_OUT_OF_MEMORY. */
int fls_ref_row(const fls_ref_ctx *rc, int64_t b, const float *x, const fls_row_part *part,
                fls_gumbel_span_fn gumbel, int64_t *tok, float *lp, double *lse);

/* The support cutoff *c and the support's log-sum-exp *lse (the max for a
 * greedy row) of row b from its full tempered logits x and merged partial
 * (computed from x when NULL), and the row's max *m (m may be NULL): the
 * second pass's decision. FLS_OK, FLS_ERR_ALL_MASKED or
 * FLS_ERR_OUT_OF_MEMORY. */
int fls_ref_cut_lse(const fls_ref_ctx *rc, int64_t b, const float *x, const fls_row_part *part, float *c,
                    double *lse, double *m);

/* The support cutoff of row b from its full tempered logits (the
 * multinomial baseline's filters): *c, or FLS_ERR_ALL_MASKED / OUT_OF_MEMORY. */
int fls_ref_cut(const fls_ref_ctx *rc, int64_t b, const float *x, float *c);

#endif /* FLS_RULE_REF_H */
