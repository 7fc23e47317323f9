/*
 * top_nsigma.h — top-n-sigma (Tang et al., "Top-nσ: Not All Logits Are You
 * Need", 2024): keep the tokens whose tempered logit is within n standard
 * deviations of the maximum, x_v >= m - n sigma, sigma the (population)
 * standard deviation of the row's finite tempered logits. The kept set does
 * not depend on T (m and sigma scale alike). n > 0; 0 = off.
 *
 */
#ifndef FLS_VARIANT_TOP_NSIGMA_H
#define FLS_VARIANT_TOP_NSIGMA_H

#include "variants/filters.h"

#define FLS_TOP_NSIGMA_NAME    "top-nsigma"
#define FLS_TOP_NSIGMA_RANGE   "finite, >= 0, 0 = off"
#define FLS_TOP_NSIGMA_OFF     0.0
#define FLS_TOP_NSIGMA_NEEDS   FLS_NEED_MOMENTS
#define FLS_TOP_NSIGMA_LIST    FLS_LIST_NONE
#define FLS_TOP_NSIGMA_INTEGER 0
#define FLS_TOP_NSIGMA_EXAMPLE 1.0

FLS_HD FLS_BOOL fls_top_nsigma_off(double n)
{
    return n == 0.0;
}

FLS_HD FLS_BOOL fls_top_nsigma_valid(double n)
{
    return n >= 0.0 && n < INFINITY;
}

/* Needs the row's moments (FLS_NEED_MOMENTS); always decides. */
FLS_HD int fls_top_nsigma_cut(const fls_filter_stats *st, double n, float c_prev, float *c)
{
    const double var = st->mom_n > 0.0 ? st->mom_m2 / st->mom_n : 0.0;
    const double sigma = sqrt(var > 0.0 ? var : 0.0);
    *c = fls_cut_max(c_prev, fls_cut_from_threshold(st->m - n * sigma));
    return FLS_CUT_OK;
}

#endif /* FLS_VARIANT_TOP_NSIGMA_H */
