/*
 * rules.c — the exact pmf of every rule of the family (docs/RULES.md) and of
 * sampling without replacement (Plackett-Luce), in double.
 *
 * Written from the definitions on the sorted row, not from the engines'
 * variants/ code (which decides with cutoffs from one-pass statistics): sort
 * the finite tempered logits x_v = l_v / T (T = 0: l as given) by decreasing
 * x, lowest index first on ties; every filter keeps a prefix of that order
 * that ends at a class boundary (ties kept), in the registry order
 * (variants/registry.h):
 *   min-p p      the prefix with x - m >= ln p                 (m = the row's max)
 *   top-k k      the prefix up to the end of the k-th value's class
 *   top-p p      the classes whose mass of strictly larger tokens (A, in the
 *                kept prefix) is < p Z (Z the prefix's mass): the smallest head
 *                of mass >= p, ties at the boundary kept
 *   top-n-sigma  the prefix with x >= m - n sigma (sigma: the population standard
 *                deviation of the row's finite tempered logits, all of them)
 *   epsilon      the prefix with x - m - log Z >= ln eps (Z: the mass of every
 *                finite token of the row, not the prefix's), and the row's
 *                maximum class always
 * then softmax over the prefix. Masses are sums of exp(x - m) with Neumaier
 * compensation. The engines decide on float tempered logits, this reference on
 * double ones: the two supports can differ only where a decision is within a
 * few float ulps of its threshold, which is what fls_stats_support.margin
 * reports (the case list keeps every margin >= 1e-5).
 *
 * Each filter is a row of the table `exact` below, made from the registry's
 * list FLS_FILTERS: exact_<rule>_valid (its parameter's domain),
 * exact_<rule>_prefix (its kept prefix) and exact_<rule>_center (its value
 * moved to the middle of its decision gap). A rule added to the registry
 * without these three functions here does not compile; nothing else in
 * stats/ names a rule.
 */
#include "stats/fls_stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct xi {
    double x;
    int64_t i;
} xi;

static int by_x_desc(const void *a, const void *b)
{
    const xi *p = a, *q = b;
    if (p->x != q->x)
        return p->x > q->x ? -1 : 1;
    return p->i < q->i ? -1 : (p->i > q->i);
}

static void neumaier(double *s, double *c, double x)
{
    double t = *s + x;
    if (fabs(*s) >= fabs(x))
        *c += (*s - t) + x;
    else
        *c += (x - t) + *s;
    *s = t;
}

static double rel(double d, double scale)
{
    return fabs(d) / (scale > 1.0 ? scale : 1.0);
}

/* The float nearest to x, moved inside (lo, hi) if rounding left it (x itself is inside). */
static double float_inside(double x, double lo, double hi)
{
    float f = (float)x;
    if ((double)f <= lo)
        f = nextafterf(f, INFINITY);
    if ((double)f >= hi)
        f = nextafterf(f, -INFINITY);
    return (double)f;
}

/* ---- the filters, one row of the table each ----
 *
 * valid(value, V): whether value is in the filter's domain (V: the row's
 * tokens, for a count).
 * prefix(s, n, m, L, value, margin): the sorted row s[0..n) (x descending, its
 * max m = s[0].x), the support so far s[0..L) (the filters before it), an
 * active value: returns the length L' <= L of the prefix this filter keeps
 * within it, and lowers *margin to the relative distance of its decisions from
 * their thresholds (fls_stats_support.margin).
 * center(s, n, m, L, value): the value moved to the middle of its decision
 * gap, s[0..L) the support of the filters before it (their values centered);
 * the value itself where it has no gap. */

/* min-p p: x - m >= ln p */
static int exact_min_p_valid(double p, int64_t V)
{
    (void)V;
    return p >= 0.0 && p <= 1.0;
}

static int64_t exact_min_p_prefix(const xi *s, int64_t n, double m, int64_t L, double p, double *margin)
{
    (void)n;
    const double lp = log(p);
    int64_t L1 = 0;
    while (L1 < L && s[L1].x - m >= lp)
        L1++;
    if (L1 > 0 && s[L1 - 1].x != m) /* x = m passes in any arithmetic */
        *margin = fmin(*margin, rel(s[L1 - 1].x - m - lp, fabs(s[L1 - 1].x) + fabs(m)));
    if (L1 < L)
        *margin = fmin(*margin, rel(s[L1].x - m - lp, fabs(s[L1].x) + fabs(m)));
    return L1;
}

/* ln p between the last kept and the first dropped x - m (of the whole row) */
static double exact_min_p_center(const xi *s, int64_t n, double m, int64_t L, double p)
{
    (void)L;
    if (!(p < 1.0))
        return p;
    const double lp = log(p);
    int64_t L1 = 0;
    while (L1 < n && s[L1].x - m >= lp)
        L1++;
    if (L1 < n && s[L1 - 1].x != m) {
        const double a = s[L1].x - m, b = s[L1 - 1].x - m; /* a < ln p <= b */
        return float_inside(exp(0.5 * (a + b)), exp(a), exp(b));
    }
    return p;
}

/* top-k k: up to the end of the k-th value's class */
static int exact_top_k_valid(double k, int64_t V)
{
    return k >= 0.0 && k == floor(k) && k <= (double)V;
}

static int64_t exact_top_k_prefix(const xi *s, int64_t n, double m, int64_t L, double kd, double *margin)
{
    (void)n;
    (void)m;
    const int64_t k = (int64_t)kd;
    if (k >= L)
        return L;
    const double c = s[k - 1].x;
    int64_t L2 = k;
    while (L2 < L && s[L2].x == c)
        L2++;
    if (L2 < L)
        *margin = fmin(*margin, rel(c - s[L2].x, fabs(c)));
    return L2;
}

/* a count: no gap to center in */
static double exact_top_k_center(const xi *s, int64_t n, double m, int64_t L, double k)
{
    (void)s;
    (void)n;
    (void)m;
    (void)L;
    return k;
}

/* top-p p: classes whose mass of strictly larger tokens is < p Z */
static int exact_top_p_valid(double p, int64_t V)
{
    (void)V;
    return p > 0.0 && p <= 1.0;
}

static int64_t exact_top_p_prefix(const xi *s, int64_t n, double m, int64_t L, double p, double *margin)
{
    (void)n;
    double Z = 0.0, cz = 0.0;
    for (int64_t i = 0; i < L; i++)
        neumaier(&Z, &cz, exp(s[i].x - m));
    Z += cz;
    const double target = p * Z;
    double A = 0.0, ca = 0.0;
    int64_t i = 0, L3 = L;
    double last_kept = INFINITY;
    while (i < L) {
        int64_t e = i + 1;
        while (e < L && s[e].x == s[i].x)
            e++;
        const double a = A + ca;
        if (!(a < target)) {
            L3 = i;
            *margin = fmin(*margin, rel(a - target, Z));
            break;
        }
        last_kept = rel(a - target, Z);
        for (int64_t j = i; j < e; j++)
            neumaier(&A, &ca, exp(s[j].x - m));
        i = e;
    }
    *margin = fmin(*margin, last_kept);
    return L3;
}

/* p between the last kept class's A / Z and the first dropped class's (within s[0..L)) */
static double exact_top_p_center(const xi *s, int64_t n, double m, int64_t L, double p)
{
    (void)n;
    double Z = 0.0, cz = 0.0;
    for (int64_t i = 0; i < L; i++)
        neumaier(&Z, &cz, exp(s[i].x - m));
    Z += cz;
    double A = 0.0, ca = 0.0, a_kept = 0.0;
    int64_t i = 0;
    while (i < L) {
        int64_t e = i + 1;
        while (e < L && s[e].x == s[i].x)
            e++;
        const double a = A + ca;
        if (!(a < p * Z))
            return float_inside(0.5 * (a_kept + a) / Z, a_kept / Z, a / Z);
        a_kept = a;
        for (int64_t j = i; j < e; j++)
            neumaier(&A, &ca, exp(s[j].x - m));
        i = e;
    }
    return p;
}

/* top-n-sigma n: x >= m - n sigma, sigma over every finite token */
static int exact_top_nsigma_valid(double n, int64_t V)
{
    (void)V;
    return n >= 0.0 && n < INFINITY;
}

static int64_t exact_top_nsigma_prefix(const xi *s, int64_t n, double m, int64_t L, double ns, double *margin)
{
    double mean = 0.0, cm = 0.0;
    for (int64_t i = 0; i < n; i++)
        neumaier(&mean, &cm, s[i].x);
    mean = (mean + cm) / (double)n;
    double m2 = 0.0, c2 = 0.0;
    for (int64_t i = 0; i < n; i++)
        neumaier(&m2, &c2, (s[i].x - mean) * (s[i].x - mean));
    const double sigma = sqrt((m2 + c2) / (double)n);
    const double thr = m - ns * sigma;
    int64_t L4 = 0;
    while (L4 < L && s[L4].x >= thr)
        L4++;
    if (L4 > 0 && s[L4 - 1].x != m) /* x = m passes in any arithmetic */
        *margin = fmin(*margin, rel(s[L4 - 1].x - thr, fabs(s[L4 - 1].x) + fabs(thr)));
    if (L4 < n)
        *margin = fmin(*margin, rel(s[L4].x - thr, fabs(s[L4].x) + fabs(thr)));
    return L4;
}

/* m - n sigma between the first dropped and the last kept x (of the whole row) */
static double exact_top_nsigma_center(const xi *s, int64_t n, double m, int64_t L, double ns)
{
    (void)L;
    double mean = 0.0;
    for (int64_t i = 0; i < n; i++)
        mean += s[i].x / (double)n;
    double m2 = 0.0;
    for (int64_t i = 0; i < n; i++)
        m2 += (s[i].x - mean) * (s[i].x - mean);
    const double sigma = sqrt(m2 / (double)n), thr = m - ns * sigma;
    int64_t L4 = 0;
    while (L4 < n && s[L4].x >= thr)
        L4++;
    if (sigma > 0.0 && L4 < n && s[L4 - 1].x != m) {
        const double lo = (m - s[L4 - 1].x) / sigma, hi = (m - s[L4].x) / sigma; /* lo <= n < hi */
        return 0.5 * (lo + hi);
    }
    return ns;
}

/* epsilon eps: p_v = exp(x - m) / Z over every finite token of the row (not
 * the support so far); keep x - m - log Z >= ln eps, and the maximum's class */
static int exact_epsilon_valid(double eps, int64_t V)
{
    (void)V;
    return eps >= 0.0 && eps <= 1.0;
}

/* log Z, Z = sum over the whole row of exp(x - m) (>= 1: the maximum's term) */
static double row_log_mass(const xi *s, int64_t n, double m)
{
    double Z = 0.0, cz = 0.0;
    for (int64_t i = 0; i < n; i++)
        neumaier(&Z, &cz, exp(s[i].x - m));
    return log(Z + cz);
}

static int64_t exact_epsilon_prefix(const xi *s, int64_t n, double m, int64_t L, double eps, double *margin)
{
    const double lz = row_log_mass(s, n, m), le = log(eps);
    int64_t L5 = 0;
    while (L5 < L && (s[L5].x == m || s[L5].x - m - lz >= le))
        L5++;
    if (L5 > 0 && s[L5 - 1].x != m) /* x = m passes whatever the threshold */
        *margin = fmin(*margin, rel(s[L5 - 1].x - m - lz - le, fabs(s[L5 - 1].x) + fabs(m)));
    if (L5 < L)
        *margin = fmin(*margin, rel(s[L5].x - m - lz - le, fabs(s[L5].x) + fabs(m)));
    return L5;
}

/* ln eps between the last kept and the first dropped x - m - log Z (of the whole row) */
static double exact_epsilon_center(const xi *s, int64_t n, double m, int64_t L, double eps)
{
    (void)L;
    if (!(eps < 1.0))
        return eps;
    const double lz = row_log_mass(s, n, m), le = log(eps);
    int64_t L5 = 0;
    while (L5 < n && (s[L5].x == m || s[L5].x - m - lz >= le))
        L5++;
    if (L5 < n && s[L5 - 1].x != m) {
        const double a = s[L5].x - m - lz, b = s[L5 - 1].x - m - lz; /* a < ln eps <= b */
        const double c = exp(0.5 * (a + b));
        return c > exp(a) && c < exp(b) ? c : eps;
    }
    return eps;
}

/* Test builds' extra rules (meson -Dprobe_rule=true) bring their exact pmf. */
#ifdef FLS_REGISTRY_EXTRA
#define FLS_PROBE_EXACT 1
#include FLS_REGISTRY_EXTRA
#undef FLS_PROBE_EXACT
#endif

/* The table, by registry id: every filter of FLS_FILTERS needs its three
 * functions above (exact_<rule>_valid, _prefix, _center). */
typedef struct exact_filter {
    int (*valid)(double value, int64_t V);
    int64_t (*prefix)(const xi *s, int64_t n, double m, int64_t L, double value, double *margin);
    double (*center)(const xi *s, int64_t n, double m, int64_t L, double value);
} exact_filter;

#define EXACT_ENTRY_(ID, rule)                                                                               \
    [FLS_FILTER_##ID] = {exact_##rule##_valid, exact_##rule##_prefix, exact_##rule##_center},
static const exact_filter exact[] = {FLS_FILTERS(EXACT_ENTRY_)};
#undef EXACT_ENTRY_
_Static_assert(sizeof exact / sizeof exact[0] == FLS_FILTER_COUNT,
               "stats/rules.c: every filter of the registry needs its exact pmf here");

/* Whether filter id is on in r. */
static int filter_on(const fls_stats_rule *r, int id)
{
    return r->value[id] != fls_filters[id].off;
}

void fls_stats_rule_off(fls_stats_rule *r)
{
    for (int id = 0; id < FLS_FILTER_COUNT; id++)
        r->value[id] = fls_filters[id].off;
}

int fls_stats_rule_active(const fls_stats_rule *r)
{
    if (!r)
        return 0;
    for (int id = 0; id < FLS_FILTER_COUNT; id++)
        if (filter_on(r, id))
            return 1;
    return 0;
}

fls_status fls_stats_rule_check(const fls_stats_rule *r, int64_t V)
{
    if (!r)
        return FLS_ERR_NULL;
    for (int id = 0; id < FLS_FILTER_COUNT; id++)
        if (!exact[id].valid(r->value[id], V))
            return FLS_ERR_PARAM;
    return FLS_OK;
}

fls_status fls_stats_rule_from_params(const fls_params *p, int64_t b, fls_stats_rule *r)
{
    if (!r)
        return FLS_ERR_NULL;
    fls_stats_rule_off(r);
    if (!p)
        return FLS_OK;
    /* the three built-ins have fields of their own */
    r->value[FLS_FILTER_MIN_P] = (double)(p->row_min_p ? p->row_min_p[b] : p->min_p);
    r->value[FLS_FILTER_TOP_K] = (double)(p->row_top_k ? p->row_top_k[b] : p->top_k);
    r->value[FLS_FILTER_TOP_P] = (double)(p->row_top_p ? p->row_top_p[b] : p->top_p);
    if (p->filter) {
        const int id = fls_filter_lookup(p->filter);
        if (id < 0 || id == FLS_FILTER_MIN_P || id == FLS_FILTER_TOP_K || id == FLS_FILTER_TOP_P)
            return FLS_ERR_PARAM;
        r->value[id] = p->row_filter_value ? p->row_filter_value[b] : p->filter_value;
    } else if (p->row_filter_value) {
        return FLS_ERR_PARAM;
    }
    return FLS_OK;
}

void fls_stats_rule_describe(const fls_stats_rule *r, char *out, size_t cap)
{
    if (!out || cap == 0)
        return;
    size_t k = 0;
    out[0] = '\0';
    for (int id = 0; r && id < FLS_FILTER_COUNT && k < cap; id++)
        if (filter_on(r, id)) {
            int w =
                snprintf(out + k, cap - k, "%s%s %.9g", k ? ", " : "", fls_filters[id].name, r->value[id]);
            k += w > 0 ? (size_t)w : 0;
        }
    if (k == 0)
        snprintf(out, cap, "none");
}

/* The sorted row and its kept prefix length; info filled. s has V entries. */
static fls_status support_sorted(const double *logits, int64_t V, double T, const fls_stats_rule *r, xi *s,
                                 int64_t *n_out, int64_t *L_out, fls_stats_support *info)
{
    if (!(isfinite(T) && T >= 0.0))
        return FLS_ERR_TEMPERATURE;
    fls_status st = fls_stats_rule_check(r, V);
    if (st != FLS_OK)
        return st;
    int64_t n = 0;
    for (int64_t v = 0; v < V; v++) {
        const double l = logits[v];
        if (isnan(l) || l == INFINITY)
            return FLS_ERR_NAN;
        if (l == -INFINITY)
            continue;
        s[n].x = T > 0.0 ? l / T : l;
        s[n].i = v;
        n++;
    }
    if (n == 0)
        return FLS_ERR_ALL_MASKED;
    qsort(s, (size_t)n, sizeof *s, by_x_desc);
    const double m = s[0].x;
    int64_t L = n;
    int by = 0;
    double margin = INFINITY;
    /* the filters in registry order, each within the support of those before it */
    for (int id = 0; id < FLS_FILTER_COUNT; id++) {
        if (!filter_on(r, id))
            continue;
        const int64_t Lf = exact[id].prefix(s, n, m, L, r->value[id], &margin);
        if (Lf < L) {
            L = Lf;
            by = id + 1;
        }
    }
    if (info) {
        info->finite = n;
        info->size = L;
        info->cut = s[L - 1].x;
        info->n_at_cut = 0;
        for (int64_t i = L - 1; i >= 0 && s[i].x == s[L - 1].x; i--)
            info->n_at_cut++;
        info->outside = L < n ? s[L].x : -INFINITY;
        info->n_outside = 0;
        for (int64_t i = L; i < n && s[i].x == s[L].x; i++)
            info->n_outside++;
        info->by = by;
        info->margin = margin;
    }
    *n_out = n;
    *L_out = L;
    return FLS_OK;
}

fls_status fls_stats_rule_center(const double *logits, int64_t V, double T, const fls_stats_rule *r,
                                 fls_stats_rule *out)
{
    if (!logits || !r || !out)
        return FLS_ERR_NULL;
    if (V < 1)
        return FLS_ERR_SIZE;
    *out = *r;
    xi *s = malloc((size_t)V * sizeof *s);
    if (!s)
        return FLS_ERR_OUT_OF_MEMORY;
    int64_t n = 0, L = 0;
    fls_stats_support info;
    fls_status st = support_sorted(logits, V, T, r, s, &n, &L, &info);
    if (st != FLS_OK) {
        free(s);
        return st;
    }
    const double m = s[0].x;
    /* each filter centered within the support of those before it, centered */
    int64_t Lb = n;
    double unused = INFINITY;
    for (int id = 0; id < FLS_FILTER_COUNT; id++) {
        if (!filter_on(r, id))
            continue;
        out->value[id] = exact[id].center(s, n, m, Lb, r->value[id]);
        Lb = exact[id].prefix(s, n, m, Lb, out->value[id], &unused);
    }
    free(s);
    return st;
}

fls_status fls_stats_rule_support(const double *logits, int64_t V, double T, const fls_stats_rule *r,
                                  uint8_t *keep, fls_stats_support *info)
{
    if (!logits || !r)
        return FLS_ERR_NULL;
    if (V < 1)
        return FLS_ERR_SIZE;
    xi *s = malloc((size_t)V * sizeof *s);
    if (!s)
        return FLS_ERR_OUT_OF_MEMORY;
    int64_t n = 0, L = 0;
    fls_status st = support_sorted(logits, V, T, r, s, &n, &L, info);
    if (st == FLS_OK && keep) {
        memset(keep, 0, (size_t)V);
        for (int64_t i = 0; i < L; i++)
            keep[s[i].i] = 1;
    }
    free(s);
    return st;
}

fls_status fls_stats_probs_rule(const double *logits, int64_t V, double T, const fls_stats_rule *r, double *p,
                                fls_stats_support *info)
{
    if (!logits || !p)
        return FLS_ERR_NULL;
    if (V < 1)
        return FLS_ERR_SIZE;
    fls_stats_rule off;
    if (!r) {
        fls_stats_rule_off(&off);
        r = &off;
    }
    xi *s = malloc((size_t)V * sizeof *s);
    if (!s)
        return FLS_ERR_OUT_OF_MEMORY;
    int64_t n = 0, L = 0;
    fls_status st = support_sorted(logits, V, T, r, s, &n, &L, info);
    if (st == FLS_OK) {
        memset(p, 0, (size_t)V * sizeof(double));
        if (T == 0.0) {
            p[s[0].i] = 1.0; /* the lowest-index maximum: first in the order */
        } else {
            const double m = s[0].x;
            double Z = 0.0, c = 0.0;
            for (int64_t i = 0; i < L; i++) {
                const double e = exp(s[i].x - m);
                p[s[i].i] = e;
                neumaier(&Z, &c, e);
            }
            Z += c;
            for (int64_t i = 0; i < L; i++)
                p[s[i].i] /= Z;
        }
    }
    free(s);
    return st;
}

fls_status fls_stats_probs_rule_f32(const float *logits, int64_t V, double T, const fls_stats_rule *r,
                                    double *p, fls_stats_support *info)
{
    if (!logits || !p)
        return FLS_ERR_NULL;
    if (V < 1)
        return FLS_ERR_SIZE;
    double *l = malloc((size_t)V * sizeof(double));
    if (!l)
        return FLS_ERR_OUT_OF_MEMORY;
    for (int64_t v = 0; v < V; v++)
        l[v] = (double)logits[v];
    fls_status st = fls_stats_probs_rule(l, V, T, r, p, info);
    free(l);
    return st;
}

/* ---- the CDF in decreasing-probability order ---- */

typedef struct pi {
    double p;
    int64_t i;
} pi;

static int by_p_desc(const void *a, const void *b)
{
    const pi *x = a, *y = b;
    if (x->p != y->p)
        return x->p > y->p ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

fls_status fls_stats_cdf_start(const double *p, int64_t V, double *start)
{
    if (!p || !start)
        return FLS_ERR_NULL;
    if (V < 1)
        return FLS_ERR_SIZE;
    pi *o = malloc((size_t)V * sizeof *o);
    if (!o)
        return FLS_ERR_OUT_OF_MEMORY;
    for (int64_t v = 0; v < V; v++) {
        o[v].p = p[v];
        o[v].i = v;
    }
    qsort(o, (size_t)V, sizeof *o, by_p_desc);
    double acc = 0.0, comp = 0.0;
    for (int64_t k = 0; k < V; k++) {
        start[o[k].i] = acc + comp;
        double y = o[k].p - comp, t = acc + y; /* Kahan */
        comp = (t - acc) - y;
        acc = t;
    }
    free(o);
    return FLS_OK;
}

/* ---- Plackett-Luce ---- */

#define PL_MAX_CELLS ((int64_t)1 << 20)

int64_t fls_stats_pl_cells(int64_t V, int K)
{
    if (V < 1 || K < 1)
        return -1;
    int64_t c = 1;
    for (int j = 0; j < K; j++) {
        if (c > PL_MAX_CELLS / (V + 1))
            return -1;
        c *= V + 1;
    }
    return c;
}

int64_t fls_stats_pl_cell(const int64_t *tuple, int64_t V, int K)
{
    int64_t c = 0;
    for (int j = 0; j < K; j++) {
        const int64_t t = tuple[j];
        if (t < -1 || t >= V)
            return -1;
        c = c * (V + 1) + (t < 0 ? V : t);
    }
    return c;
}

typedef struct pl_enum {
    const double *p;
    int64_t V;
    int K, k_row;
    uint8_t *taken;
    double *out;
} pl_enum;

static void pl_rec(const pl_enum *e, int j, int64_t cell, double prob)
{
    if (j == e->K) {
        e->out[cell] += prob;
        return;
    }
    if (j >= e->k_row) { /* the row's K_b positions are drawn: -1 from here on */
        for (int i = j; i < e->K; i++)
            cell = cell * (e->V + 1) + e->V;
        e->out[cell] += prob;
        return;
    }
    double rem = 0.0, c = 0.0;
    for (int64_t v = 0; v < e->V; v++)
        if (!e->taken[v] && e->p[v] > 0.0)
            neumaier(&rem, &c, e->p[v]);
    rem += c;
    if (!(rem > 0.0)) { /* the support is exhausted: -1 from here on */
        for (int i = j; i < e->K; i++)
            cell = cell * (e->V + 1) + e->V;
        e->out[cell] += prob;
        return;
    }
    for (int64_t v = 0; v < e->V; v++) {
        if (e->taken[v] || !(e->p[v] > 0.0))
            continue;
        e->taken[v] = 1;
        pl_rec(e, j + 1, cell * (e->V + 1) + v, prob * (e->p[v] / rem));
        e->taken[v] = 0;
    }
}

fls_status fls_stats_pl_tuples(const double *p, int64_t V, int K, int k_row, double *out)
{
    if (!p || !out)
        return FLS_ERR_NULL;
    const int64_t cells = fls_stats_pl_cells(V, K);
    if (cells < 0)
        return FLS_ERR_SIZE;
    uint8_t *taken = calloc((size_t)V, 1);
    if (!taken)
        return FLS_ERR_OUT_OF_MEMORY;
    memset(out, 0, (size_t)cells * sizeof(double));
    pl_enum e = {p, V, K, k_row > 0 && k_row < K ? k_row : K, taken, out};
    pl_rec(&e, 0, 0, 1.0);
    free(taken);
    return FLS_OK;
}

/* Whether token a comes before token t in decreasing-probability order. */
static int before(const double *p, int64_t a, int64_t t)
{
    return p[a] > p[t] || (p[a] == p[t] && a < t);
}

int fls_stats_pl_transform(const double *p, const double *start, int64_t V, int64_t support,
                           const int64_t *tuple, int K, int k_row, const double *U, double *u)
{
    int set = 0;
    double removed = 0.0;
    for (int j = 0; j < K; j++) {
        const int64_t t = tuple[j];
        if (j >= k_row || j >= support) {
            if (t != -1)
                return -1;
            u[j] = -1.0;
            continue;
        }
        if (t < 0 || t >= V || !(p[t] > 0.0))
            return -1;
        double rb = 0.0;
        for (int i = 0; i < j; i++) {
            if (tuple[i] == t)
                return -1;
            if (before(p, tuple[i], t))
                rb += p[tuple[i]];
        }
        /* the mass not yet drawn: accurate to ~1e-16 absolute (p sums to 1) */
        double rem = 1.0 - removed;
        rem = rem > p[t] ? rem : p[t];
        double x = (start[t] - rb) / rem + U[j] * (p[t] / rem);
        x = x < 0.0 ? 0.0 : x;
        u[j] = x < 1.0 ? x : nextafter(1.0, 0.0);
        removed += p[t];
        set++;
    }
    return set;
}
