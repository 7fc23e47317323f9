/*
 * grouped.h — Group-Gumbel-Max (the FlashSampling paper's Appendix D,
 * Algorithm I.2): the grouped method's state and merge. C, C++, CUDA.
 *
 * The vocabulary is cut into fixed groups of g consecutive token indices
 * (g a power of two; group k = tokens [k g, (k + 1) g)), never by tiles,
 * threads or engine. Per row and draw:
 *   L_k  = log sum_{v in k} exp(x_v)          (double; T = 0: max_{v in k} x_v)
 *   k*   = argmax_k L_k + G'_k                 (G' the group noise, docs/NOISE.md;
 *                                              T = 0: no noise; lowest k on ties)
 *   v*   = argmax_{v in k*} x_v + G_v          (the token noise of the flat contract)
 * P(v* = v) = softmax(L)_k softmax(x over k)_v = softmax(x)_v: exact in
 * distribution. The token noise is drawn only for groups whose key beats
 * the best group key seen so far (their within-group sample might be the
 * answer), so the noise work is O(groups + a few groups' tokens) per row.
 * L_k in double keeps a member 25 nats below its group's head at its
 * exact mass (2^-53 relative rounding, not fp32's 2^-24 absorption).
 */
#ifndef FLS_VARIANT_GROUPED_H
#define FLS_VARIANT_GROUPED_H

#include "variants/rule.h"

/* The best group of one (row, draw) so far. */
typedef struct fls_gbest {
    double gkey;   /* L_k + G'_k */
    int64_t group; /* -1: none */
    int64_t tok;   /* the within-group sample of that group */
    float x;       /* its tempered logit */
    uint32_t pad_;
} fls_gbest;

FLS_HD fls_gbest fls_gbest_empty(void)
{
    fls_gbest g;
    g.gkey = -INFINITY;
    g.group = -1;
    g.tok = -1;
    g.x = -INFINITY;
    g.pad_ = 0;
    return g;
}

/* Whether group k with key gk beats the state (larger key, lower group on
 * ties; a -inf key, an all-masked group, never enters). */
FLS_HD FLS_BOOL fls_gbest_beats(double gk, int64_t k, const fls_gbest *b)
{
    return gk > -INFINITY && (b->group < 0 || gk > b->gkey || (gk == b->gkey && k < b->group));
}

FLS_HD void fls_gbest_merge(fls_gbest *a, const fls_gbest *b)
{
    if (b->group >= 0 && fls_gbest_beats(b->gkey, b->group, a))
        *a = *b;
}

/* A group's log-mass from its tempered logits (double; greedy: the max). */
FLS_HD double fls_group_lse(const float *x, int64_t n, int greedy)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    if (greedy || m == -INFINITY)
        return m;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += exp((double)x[i] - (double)m);
    return (double)m + log(s);
}

#endif /* FLS_VARIANT_GROUPED_H */
