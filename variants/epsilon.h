/*
 * epsilon.h — epsilon sampling (Hewitt, Manning and Liang, "Truncation
 * Sampling as Language Model Desmoothing", 2022): with p = softmax(x) over
 * every finite token of the row (x = l / T), keep the tokens with
 * p_v >= eps, and the row's maximum always (so the support is never empty):
 *     x_v - m - log Z >= ln eps,  Z = sum_u exp(x_u - m),
 * or x_v = m. eps in [0, 1]; 0 = off.
 *
 * The worked example of docs/RULES.md ("how to add a rule"): this header,
 * one line in variants/registry.h, its exact pmf in stats/rules.c and its
 * docs are all it took. It reads the row's sum (FLS_NEED_SUM), so both
 * engines gather it for every row that uses it.
 */
#ifndef FLS_VARIANT_EPSILON_H
#define FLS_VARIANT_EPSILON_H

#include "variants/filters.h"

#define FLS_EPSILON_NAME    "epsilon"
#define FLS_EPSILON_RANGE   "in [0, 1], 0 = off"
#define FLS_EPSILON_OFF     0.0
#define FLS_EPSILON_NEEDS   FLS_NEED_SUM
#define FLS_EPSILON_LIST    FLS_LIST_NONE
#define FLS_EPSILON_INTEGER 0
#define FLS_EPSILON_EXAMPLE 0.002

FLS_HD FLS_BOOL fls_epsilon_off(double eps)
{
    return eps == 0.0;
}

FLS_HD FLS_BOOL fls_epsilon_valid(double eps)
{
    return eps >= 0.0 && eps <= 1.0; /* false for NaN */
}

/* Always decides: the threshold is m + log Z + ln eps, capped at m. */
FLS_HD int fls_epsilon_cut(const fls_filter_stats *st, double eps, float c_prev, float *c)
{
    const double Z = fls_lse_term(st->lse_s, st->lse_m, st->m); /* >= 1: the maximum's own term */
    float t = fls_cut_from_offset(st->m, log(Z) + log(eps));
    const float m = (float)st->m; /* m is a float tempered logit */
    t = t < m ? t : m;
    *c = fls_cut_max(c_prev, t);
    return FLS_CUT_OK;
}

#endif /* FLS_VARIANT_EPSILON_H */
