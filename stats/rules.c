/*
 * rules.c — the exact pmf of every rule of the family (docs/RULES.md) and of
 * sampling without replacement (Plackett-Luce), in double.
 *
 * Written from the definitions on the sorted row, not from the engines'
 * variants/ code (which decides with cutoffs from one-pass statistics): sort
 * the finite tempered logits x_v = l_v / T (T = 0: l as given) by decreasing
 * x, lowest index first on ties; every filter keeps a prefix of that order
 * that ends at a class boundary (ties kept), in the registry order:
 *   min-p p      the prefix with x - m >= ln p                 (m = the row's max)
 *   top-k k      the prefix up to the end of the k-th value's class
 *   top-p p      the classes whose mass of strictly larger tokens (A, in the
 *                kept prefix) is < p Z (Z the prefix's mass): the smallest head
 *                of mass >= p, ties at the boundary kept
 *   top-n-sigma  the prefix with x >= m - n sigma (sigma: the population standard
 *                deviation of the row's finite tempered logits, all of them)
 * then softmax over the prefix. Masses are sums of exp(x - m) with Neumaier
 * compensation. The engines decide on float tempered logits, this reference on
 * double ones: the two supports can differ only where a decision is within a
 * few float ulps of its threshold, which is what fls_stats_support.margin
 * reports (the case list keeps every margin >= 1e-5).
 */
#include "fls_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void fls_stats_rule_off(fls_stats_rule *r)
{
    r->min_p = 0.0;
    r->top_k = 0;
    r->top_p = 1.0;
    r->nsigma = 0.0;
}

int fls_stats_rule_active(const fls_stats_rule *r)
{
    return r && (r->min_p != 0.0 || r->top_k != 0 || r->top_p != 1.0 || r->nsigma != 0.0);
}

fls_status fls_stats_rule_check(const fls_stats_rule *r, int64_t V)
{
    if (!r)
        return FLS_ERR_NULL;
    if (!(r->min_p >= 0.0 && r->min_p <= 1.0) || r->top_k < 0 || r->top_k > V ||
        !(r->top_p > 0.0 && r->top_p <= 1.0) || !(r->nsigma >= 0.0 && r->nsigma < INFINITY))
        return FLS_ERR_PARAM;
    return FLS_OK;
}

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

    /* 1. min-p: x - m >= ln p */
    if (r->min_p > 0.0) {
        const double lp = log(r->min_p);
        int64_t L1 = 0;
        while (L1 < L && s[L1].x - m >= lp)
            L1++;
        if (L1 > 0 && s[L1 - 1].x != m) /* x = m passes in any arithmetic */
            margin = fmin(margin, rel(s[L1 - 1].x - m - lp, fabs(s[L1 - 1].x) + fabs(m)));
        if (L1 < L)
            margin = fmin(margin, rel(s[L1].x - m - lp, fabs(s[L1].x) + fabs(m)));
        if (L1 < L) {
            L = L1;
            by = 1;
        }
    }
    /* 2. top-k: up to the end of the k-th value's class */
    if (r->top_k > 0 && r->top_k < L) {
        const double c = s[r->top_k - 1].x;
        int64_t L2 = r->top_k;
        while (L2 < L && s[L2].x == c)
            L2++;
        if (L2 < L) {
            margin = fmin(margin, rel(c - s[L2].x, fabs(c)));
            L = L2;
            by = 2;
        }
    }
    /* 3. top-p: classes whose mass of strictly larger tokens is < p Z */
    if (r->top_p < 1.0) {
        double Z = 0.0, cz = 0.0;
        for (int64_t i = 0; i < L; i++)
            neumaier(&Z, &cz, exp(s[i].x - m));
        Z += cz;
        const double target = r->top_p * Z;
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
                margin = fmin(margin, rel(a - target, Z));
                break;
            }
            last_kept = rel(a - target, Z);
            for (int64_t j = i; j < e; j++)
                neumaier(&A, &ca, exp(s[j].x - m));
            i = e;
        }
        margin = fmin(margin, last_kept);
        if (L3 < L) {
            L = L3;
            by = 3;
        }
    }
    /* 4. top-n-sigma: x >= m - n sigma, sigma over every finite token */
    if (r->nsigma > 0.0) {
        double mean = 0.0, cm = 0.0;
        for (int64_t i = 0; i < n; i++)
            neumaier(&mean, &cm, s[i].x);
        mean = (mean + cm) / (double)n;
        double m2 = 0.0, c2 = 0.0;
        for (int64_t i = 0; i < n; i++)
            neumaier(&m2, &c2, (s[i].x - mean) * (s[i].x - mean));
        const double sigma = sqrt((m2 + c2) / (double)n);
        const double thr = m - r->nsigma * sigma;
        int64_t L4 = 0;
        while (L4 < L && s[L4].x >= thr)
            L4++;
        if (L4 > 0 && s[L4 - 1].x != m) /* x = m passes in any arithmetic */
            margin = fmin(margin, rel(s[L4 - 1].x - thr, fabs(s[L4 - 1].x) + fabs(thr)));
        if (L4 < n)
            margin = fmin(margin, rel(s[L4].x - thr, fabs(s[L4].x) + fabs(thr)));
        if (L4 < L) {
            L = L4;
            by = 4;
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
    /* min-p: ln p between the last kept and the first dropped x - m */
    if (r->min_p > 0.0 && r->min_p < 1.0) {
        const double lp = log(r->min_p);
        int64_t L1 = 0;
        while (L1 < n && s[L1].x - m >= lp)
            L1++;
        if (L1 < n && s[L1 - 1].x != m) {
            const double a = s[L1].x - m, b = s[L1 - 1].x - m; /* a < ln p <= b */
            out->min_p = float_inside(exp(0.5 * (a + b)), exp(a), exp(b));
        }
    }
    /* top-p: p between the last kept class's A / Z and the first dropped class's */
    if (r->top_p < 1.0) {
        int64_t L2 = n; /* the support before top-p: min-p and top-k */
        fls_stats_rule pre = *out;
        pre.top_p = 1.0;
        pre.nsigma = 0.0;
        fls_stats_support ps;
        xi *t = malloc((size_t)V * sizeof *t);
        if (!t) {
            free(s);
            return FLS_ERR_OUT_OF_MEMORY;
        }
        int64_t nn = 0;
        if ((st = support_sorted(logits, V, T, &pre, t, &nn, &L2, &ps)) == FLS_OK) {
            double Z = 0.0, cz = 0.0;
            for (int64_t i = 0; i < L2; i++)
                neumaier(&Z, &cz, exp(t[i].x - m));
            Z += cz;
            double A = 0.0, ca = 0.0, a_kept = 0.0;
            int64_t i = 0;
            while (i < L2) {
                int64_t e = i + 1;
                while (e < L2 && t[e].x == t[i].x)
                    e++;
                const double a = A + ca;
                if (!(a < r->top_p * Z)) {
                    out->top_p = float_inside(0.5 * (a_kept + a) / Z, a_kept / Z, a / Z);
                    break;
                }
                a_kept = a;
                for (int64_t j = i; j < e; j++)
                    neumaier(&A, &ca, exp(t[j].x - m));
                i = e;
            }
        }
        free(t);
    }
    /* top-n-sigma: m - n sigma between the first dropped and the last kept x */
    if (r->nsigma > 0.0 && st == FLS_OK) {
        double mean = 0.0;
        for (int64_t i = 0; i < n; i++)
            mean += s[i].x / (double)n;
        double m2 = 0.0;
        for (int64_t i = 0; i < n; i++)
            m2 += (s[i].x - mean) * (s[i].x - mean);
        const double sigma = sqrt(m2 / (double)n), thr = m - r->nsigma * sigma;
        int64_t L4 = 0;
        while (L4 < n && s[L4].x >= thr)
            L4++;
        if (sigma > 0.0 && L4 < n && s[L4 - 1].x != m) {
            const double lo = (m - s[L4 - 1].x) / sigma, hi = (m - s[L4].x) / sigma; /* lo <= n < hi */
            out->nsigma = 0.5 * (lo + hi);
        }
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
