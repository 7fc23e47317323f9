/*
 * probe_rule.h — a test-only rule that reads every statistic a descriptor
 * can ask for, compiled into the library only in a build configured with
 * -Dprobe_rule=true (never in the product): the registry appends it
 * (FLS_FILTERS_EXTRA), so the gpu suite's registry loop runs it on every
 * path of both engines and compares the CUDA engine's tokens with the CPU
 * engine's. An engine that failed to gather a statistic the descriptor asks
 * for would cut differently.
 *
 * probe v in [0, 1] (0 = off): with m the row's max, sigma the standard
 * deviation of every finite tempered logit (FLS_NEED_MOMENTS), Z the row's
 * sum of exp(x - m) (FLS_NEED_SUM), S the sum over the support so far
 * (FLS_NEED_SUPPORT_SUM: Z where no filter cut before it, else the top list's,
 * FLS_NEED_TOP), keep x >= m - v (1 + sigma + log Z + log S), and the max's
 * class always.
 *
 * Included twice: by variants/registry.h for the rule (C, C++, CUDA), and by
 * stats/rules.c with FLS_PROBE_EXACT defined for its exact pmf in double on
 * the sorted row.
 */
#ifndef FLS_PROBE_EXACT

#ifndef FLS_TESTS_PROBE_RULE_H
#define FLS_TESTS_PROBE_RULE_H

#include "variants/filters.h"

#define FLS_PROBE_NAME    "probe"
#define FLS_PROBE_RANGE   "in [0, 1], 0 = off (test-only)"
#define FLS_PROBE_OFF     0.0
#define FLS_PROBE_NEEDS   (FLS_NEED_TOP | FLS_NEED_MOMENTS | FLS_NEED_SUM | FLS_NEED_SUPPORT_SUM)
#define FLS_PROBE_LIST    FLS_LIST_OPEN
#define FLS_PROBE_INTEGER 0
#define FLS_PROBE_EXAMPLE 0.5

#define FLS_FILTERS_EXTRA(X) X(PROBE, probe)

FLS_HD FLS_BOOL fls_probe_off(double v)
{
    return v == 0.0;
}

FLS_HD FLS_BOOL fls_probe_valid(double v)
{
    return v >= 0.0 && v <= 1.0;
}

FLS_HD int fls_probe_cut(const fls_filter_stats *st, double v, float c_prev, float *c)
{
    const double var = st->mom_n > 0.0 ? st->mom_m2 / st->mom_n : 0.0;
    const double sigma = sqrt(var > 0.0 ? var : 0.0);
    const double Z = fls_lse_term(st->lse_s, st->lse_m, st->m);
    double S = Z;
    if (c_prev > -INFINITY) {
        if (!(c_prev > st->dropped))
            return FLS_CUT_UNDECIDED; /* the support runs past the list */
        S = fls_top_sum(st, fls_top_count_ge(st, c_prev));
    }
    float t = fls_cut_from_threshold(st->m - v * (1.0 + sigma + log(Z) + log(S)));
    const float m = (float)st->m;
    t = t < m ? t : m;
    *c = fls_cut_max(c_prev, t);
    return FLS_CUT_OK;
}

#endif /* FLS_TESTS_PROBE_RULE_H */

#else /* FLS_PROBE_EXACT: stats/rules.c's exact pmf, with its xi, neumaier and rel */

static int exact_probe_valid(double v, int64_t V)
{
    (void)V;
    return v >= 0.0 && v <= 1.0;
}

static int64_t exact_probe_prefix(const xi *s, int64_t n, double m, int64_t L, double v, double *margin)
{
    double mean = 0.0, cm = 0.0, m2 = 0.0, c2 = 0.0, Z = 0.0, cz = 0.0, S = 0.0, cs = 0.0;
    for (int64_t i = 0; i < n; i++)
        neumaier(&mean, &cm, s[i].x);
    mean = (mean + cm) / (double)n;
    for (int64_t i = 0; i < n; i++) {
        neumaier(&m2, &c2, (s[i].x - mean) * (s[i].x - mean));
        neumaier(&Z, &cz, exp(s[i].x - m));
        if (i < L)
            neumaier(&S, &cs, exp(s[i].x - m));
    }
    const double sigma = sqrt((m2 + c2) / (double)n), thr = m - v * (1.0 + sigma + log(Z + cz) + log(S + cs));
    int64_t k = 0;
    while (k < L && (s[k].x >= thr || s[k].x == m))
        k++;
    if (k > 0 && s[k - 1].x != m)
        *margin = fmin(*margin, rel(s[k - 1].x - thr, fabs(s[k - 1].x) + fabs(thr)));
    if (k < L)
        *margin = fmin(*margin, rel(s[k].x - thr, fabs(s[k].x) + fabs(thr)));
    return k;
}

static double exact_probe_center(const xi *s, int64_t n, double m, int64_t L, double v)
{
    (void)s, (void)n, (void)m, (void)L;
    return v;
}

#endif /* FLS_PROBE_EXACT */
