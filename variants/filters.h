/*
 * filters.h — the truncation filters of the rule family, as cutoffs on the
 * rank order. C, C++, CUDA; no engine code.
 *
 * Per row, with tempered logits x_v = l_v / T over the finite tokens and
 * m = max_v x_v (docs/RULES.md is the normative text), in vLLM's order:
 *   min-p p:  S1 = { v : x_v - m >= ln p }
 *   top-k k:  S2 = { v in S1 : #{u in S1 : x_u > x_v} < k }  (ties at the k-th value kept)
 *   top-p p:  S3 = { v in S2 : mass of the tokens of S2 more probable than v < p }
 *             (q = softmax of x over S2; ties at the boundary kept)
 *   then any filter of variants/registry.h (e.g. top-n-sigma), within S3.
 * Every support is an upper set of the rank order: { v : x_v >= c }. A
 * filter is a function from what the engine gathered about the row
 * (fls_filter_stats) and the support so far ({x >= c_prev}) to its cutoff
 * c >= c_prev, or FLS_CUT_UNDECIDED when those statistics cannot decide it
 * (the engine then runs an exact second pass over the row's logits, with
 * statistics that hold every token, and calls the same function again).
 * So the semantics of each filter are written once, here.
 *
 * Arithmetic: every decision is made in double from the float tempered
 * logits (x_v - m, log p, cumulative masses); a cutoff is returned as the
 * smallest float x that passes the test, so "x >= c" is the filter exactly.
 */
#ifndef FLS_VARIANT_FILTERS_H
#define FLS_VARIANT_FILTERS_H

#include "variants/rule.h"
#include "variants/topc.h"

/* What a filter may look at. m, lse_m/lse_s and the moments cover every
 * finite token of the row; top holds the row's largest tempered logits in
 * rank order, every token with x > dropped (dropped = -inf: all of them). */
typedef struct fls_filter_stats {
    double m;                 /* the largest tempered logit (-inf: none finite) */
    double lse_m, lse_s;      /* log-sum-exp partial: lse = lse_m + log(lse_s) */
    double mom_n, mom_mean;   /* count and mean of the finite tempered logits */
    double mom_m2;            /* their sum of squared deviations */
    const fls_top_entry *top; /* rank order */
    int64_t ntop;
    float dropped;
    const double *w; /* NULL, or w[i] = exp((double)top[i].x - m) computed ahead (by many threads) */
    /* NULL, or (with w) pw[i] = w[0] + ... + w[i - 1] added in list order
     * from 0.0, for i <= ntop: the very sums the loops below form one by
     * one, computed ahead, so a cutoff is found by bisection (the same
     * decision, bit for bit) */
    const double *pw;
} fls_filter_stats;

/* exp(x_i - m) of the list's entry i: the same value either way. */
FLS_HD double fls_top_w(const fls_filter_stats *st, int64_t i)
{
    return st->w ? st->w[i] : exp((double)st->top[i].x - st->m);
}

/* The number of the list's entries with x >= c: a prefix, as the list is in
 * rank order (x non-increasing), found by bisection (the loops below then
 * run without a test of x per entry, so their loads can run ahead). */
FLS_HD int64_t fls_top_count_ge(const fls_filter_stats *st, float c)
{
    int64_t lo = 0, hi = st->ntop; /* [0, lo) pass, [hi, ntop) fail */
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (st->top[mid].x >= c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The sum of the first n entries' weights, in list order. */
FLS_HD double fls_top_sum(const fls_filter_stats *st, int64_t n)
{
    if (st->pw)
        return st->pw[n];
    double Z = 0.0;
    if (st->w) {
        for (int64_t i = 0; i < n; i++)
            Z += st->w[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            Z += exp((double)st->top[i].x - st->m);
    }
    return Z;
}

/* What a filter needs the engine to gather beyond the row's maximum m (a
 * descriptor's needs, variants/registry.h). The engines gather exactly what
 * the rows' descriptors ask for, so a cut may read only these fields. */
#define FLS_NEED_TOP     1u /* the top list (top, ntop, dropped; w and pw where given) */
#define FLS_NEED_MOMENTS 2u /* count, mean, M2 (mom_n, mom_mean, mom_m2) */
#define FLS_NEED_SUM     4u /* the row's sum of exp(x - m) over every finite token (lse_m, lse_s) */
#define FLS_NEED_SUPPORT_SUM                                                                                 \
    8u /* the sum over the support so far: lse_s where no earlier filter                                     \
          cut (c_prev = -inf), else the top list's (fls_top_sum) */

/* How much of the top list a cut reads (a descriptor's list). */
#define FLS_LIST_NONE     0 /* none */
#define FLS_LIST_BY_VALUE 1 /* the first `value` entries, and its support lies within them */
#define FLS_LIST_OPEN                                                                                        \
    2 /* as far as its support goes, which no value bounds: a row whose                                      \
         support runs past the list is decided by the second pass */

#define FLS_CUT_OK        0
#define FLS_CUT_UNDECIDED 1

/* The smallest float c with (double)c - m >= L (a monotone test in c). */
FLS_HD float fls_cut_from_offset(double m, double L)
{
    float c = (float)(m + L);
    if (!((double)c - m >= L)) {
        while (!((double)c - m >= L))
            c = nextafterf(c, INFINITY);
    } else {
        while ((double)nextafterf(c, -INFINITY) - m >= L && nextafterf(c, -INFINITY) > -INFINITY)
            c = nextafterf(c, -INFINITY);
    }
    return c;
}

/* The smallest float c with (double)c >= t. */
FLS_HD float fls_cut_from_threshold(double t)
{
    float c = (float)t;
    if ((double)c < t)
        c = nextafterf(c, INFINITY);
    while ((double)nextafterf(c, -INFINITY) >= t && nextafterf(c, -INFINITY) > -INFINITY)
        c = nextafterf(c, -INFINITY);
    return c;
}

FLS_HD float fls_cut_max(float a, float b)
{
    return a > b ? a : b;
}

/* ---- min-p: keep x - m >= ln p (p in (0, 1]; 0 = off) ---- */

#define FLS_MIN_P_NAME    "min-p"
#define FLS_MIN_P_RANGE   "in [0, 1], 0 = off"
#define FLS_MIN_P_OFF     0.0
#define FLS_MIN_P_NEEDS   0u
#define FLS_MIN_P_LIST    FLS_LIST_NONE
#define FLS_MIN_P_INTEGER 0
#define FLS_MIN_P_EXAMPLE 0.05

FLS_HD FLS_BOOL fls_min_p_off(double p)
{
    return p == 0.0;
}

FLS_HD FLS_BOOL fls_min_p_valid(double p)
{
    return p >= 0.0 && p <= 1.0; /* false for NaN */
}

FLS_HD int fls_min_p_cut(const fls_filter_stats *st, double p, float c_prev, float *c)
{
    *c = fls_cut_max(c_prev, fls_cut_from_offset(st->m, log(p)));
    return FLS_CUT_OK;
}

/* ---- top-k: the k highest ranked (ties at the k-th value kept; 0 = off) ---- */

#define FLS_TOP_K_NAME    "top-k"
#define FLS_TOP_K_RANGE   "an integer >= 0, 0 = off"
#define FLS_TOP_K_OFF     0.0
#define FLS_TOP_K_NEEDS   FLS_NEED_TOP
#define FLS_TOP_K_LIST    FLS_LIST_BY_VALUE
#define FLS_TOP_K_INTEGER 1
#define FLS_TOP_K_EXAMPLE 50.0

FLS_HD FLS_BOOL fls_top_k_off(double k)
{
    return k == 0.0;
}

FLS_HD FLS_BOOL fls_top_k_valid(double k)
{
    return k >= 0.0 && k == floor(k);
}

FLS_HD int fls_top_k_cut(const fls_filter_stats *st, double kd, float c_prev, float *c)
{
    const int64_t k = (int64_t)kd;
    if (k > st->ntop) {
        if (st->dropped > -INFINITY)
            return FLS_CUT_UNDECIDED; /* the k-th value lies beyond the list */
        *c = c_prev;                  /* fewer than k finite tokens: all kept */
        return FLS_CUT_OK;
    }
    /* the list holds the top ntop of the rank order (ties at its end share
     * the value dropped), so its k-th entry has the k-th value */
    *c = fls_cut_max(c_prev, st->top[k - 1].x);
    return FLS_CUT_OK;
}

/* ---- top-p: the smallest head of mass >= p, ties at the boundary kept (1 = off) ---- */

#define FLS_TOP_P_NAME    "top-p"
#define FLS_TOP_P_RANGE   "in (0, 1], 1 = off"
#define FLS_TOP_P_OFF     1.0
#define FLS_TOP_P_NEEDS   (FLS_NEED_TOP | FLS_NEED_SUPPORT_SUM)
#define FLS_TOP_P_LIST    FLS_LIST_OPEN
#define FLS_TOP_P_INTEGER 0
#define FLS_TOP_P_EXAMPLE 0.9

FLS_HD FLS_BOOL fls_top_p_off(double p)
{
    return p == 1.0;
}

FLS_HD FLS_BOOL fls_top_p_valid(double p)
{
    return p > 0.0 && p <= 1.0;
}

FLS_HD int fls_top_p_cut(const fls_filter_stats *st, double p, float c_prev, float *c)
{
    /* Z: the support's sum of exp(x - m); n: the list's entries in it */
    const int64_t n = fls_top_count_ge(st, c_prev);
    double Z = 0.0;
    if (c_prev == -INFINITY) {
        Z = fls_lse_term(st->lse_s, st->lse_m, st->m);
    } else {
        if (!(c_prev > st->dropped))
            return FLS_CUT_UNDECIDED;
        Z = fls_top_sum(st, n);
    }
    const double target = p * Z;
    const fls_top_entry *t = st->top;
    if (st->pw) {
        /* the loop below stops at the first group whose head mass
         * A = pw[start] is not below the target; pw is non-decreasing, so
         * that group is the first one starting at or after the first index
         * j with !(pw[j] < target) */
        int64_t lo = 0, hi = n;
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (st->pw[mid] < target)
                lo = mid + 1;
            else
                hi = mid;
        }
        while (lo > 0 && lo < n && t[lo].x == t[lo - 1].x)
            lo++; /* to the start of the next group of ties */
        if (lo < n) {
            *c = lo == 0 ? c_prev : t[lo - 1].x;
            return FLS_CUT_OK;
        }
    } else {
        double A = 0.0; /* the mass of the tokens strictly more probable than the group */
        float last = c_prev;
        int64_t i = 0;
        while (i < n) {
            const float xg = t[i].x;
            if (!(A < target)) {
                *c = last; /* this group and everything after it is out */
                return FLS_CUT_OK;
            }
            last = xg;
            do { /* the group of ties at xg (all >= c_prev: within the n) */
                A += fls_top_w(st, i);
                i++;
            } while (i < n && t[i].x == xg);
        }
    }
    if (st->dropped > -INFINITY && !(c_prev > st->dropped))
        return FLS_CUT_UNDECIDED; /* the head goes on beyond the list */
    *c = c_prev;
    return FLS_CUT_OK;
}

/* ---- the log-sum-exp of the final support {x >= c} ---- */

/* lse over {x >= c} into *lse; FLS_CUT_UNDECIDED when the support is not
 * all in the list (and is not the whole row). greedy: the max. */
FLS_HD int fls_support_lse(const fls_filter_stats *st, float c, int greedy, double *lse)
{
    if (greedy || st->m == -INFINITY) {
        *lse = st->m;
        return FLS_CUT_OK;
    }
    if (c == -INFINITY) {
        *lse = fls_lse_value(st->lse_m, st->lse_s, 0);
        return FLS_CUT_OK;
    }
    if (!(c > st->dropped))
        return FLS_CUT_UNDECIDED;
    const double Z = fls_top_sum(st, fls_top_count_ge(st, c));
    *lse = st->m + log(Z);
    return FLS_CUT_OK;
}

#endif /* FLS_VARIANT_FILTERS_H */
