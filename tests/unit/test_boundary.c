/*
 * test_boundary.c — boundary-sharp tests of every rule of the registry
 * (variants/registry.h): each rule's threshold is placed exactly at, one
 * ulp below and one ulp above a logit (of the double the rule compares, of
 * its float parameter, or of the logit itself), at several temperatures
 * (T = 1, powers of two, and T = 1.3), and the CPU engine (from logits and
 * fused) must give exactly the support of a brute force written here.
 *
 * The brute force (bf_*) is written from docs/RULES.md's definitions, in
 * plain double on the tempered floats x = l / T, sharing no code with
 * variants/ or stats/rules.c: per rule a filter of the support so far,
 * applied in registry order, then the Gumbel-max over the final support with
 * the noise contract's fls_gumbel. Every case checks, per draw, the token
 * (which pins the support wherever a token can win), that no token lies
 * outside the support, that every support token of probability >= 16/draws
 * is drawn, the logsumexp over the support (which pins the support exactly:
 * every token in these rows has a weight far above 1e-6) and the logprobs.
 *
 * How a case is exact:
 *   - min-p: log(p) of a float p is a double with 53 bits; the row's maximum
 *     m and the boundary logit x_b are found so that x_b - m == log(p) (or
 *     one double ulp off) exactly: x_b is then tiny and m ~ -log p.
 *   - top-k: ties and logits one float ulp above and below each value; every
 *     k from 1 to the number of finite tokens + 1.
 *   - top-p: rows whose weights exp(x - m) have 12 trailing zero bits, so
 *     every sum of them is exact in any order (the engines' Z and head masses
 *     are then the brute force's bit for bit); p is the float on either side
 *     of A / Z for each group's head mass A, or inside a group of ties. Also
 *     rows where Z / 2 is tuned to the head mass exactly and one double ulp
 *     off (p = 0.5): these rely on the sums' order (rank order = index
 *     order, one tile), so they are marked `exact` (the CUDA engine sums in
 *     another order).
 *   - top-n-sigma: dyadic rows with sigma a power of two (exact moments in
 *     any order); n puts m - n sigma exactly on a logit, one double ulp off,
 *     half a float ulp off.
 *   - epsilon: exact-sum rows; eps puts log Z + log eps exactly on x_b - m,
 *     one double ulp off, half a float ulp off; with a top-k cutting the tail
 *     (Z stays the row's); and eps so large that only the maximum stays.
 *
 * The case generators are a table indexed by registry id: a rule added to
 * the registry does not compile until it gets one here. The gpu suite
 * includes this file with FLS_BOUNDARY_CASES_ONLY (no Criterion) for the same
 * cases on the CUDA engine. tools/mutation-table.sh runs this test against
 * mutants of variants/ (docs/MUTATIONS.md).
 */
#include "flashsample.h"
#include "lib/base/fls_noise.h"
#include "variants/registry.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BND_VMAX 48

typedef struct bnd_case {
    char what[224];
    float T;
    int64_t V;
    float l[BND_VMAX];
    double value[FLS_FILTER_COUNT]; /* per registry id; the descriptor's off value = off */
    int exact;                      /* the decision is a tie to the last bits of a double (see the top) */
} bnd_case;

typedef struct bnd_list {
    bnd_case *c;
    int n, cap;
} bnd_list;

static uint64_t bnd_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double bnd_unif(uint64_t *s)
{
    return (double)(bnd_next(s) >> 11) * 0x1p-53;
}

static int bnd_int(uint64_t *s, int lo, int hi)
{
    return lo + (int)(bnd_next(s) % (uint64_t)(hi - lo + 1));
}

static int bnd_id(const char *name)
{
    for (int id = 0; id < FLS_FILTER_COUNT; id++)
        if (!strcmp(fls_filters[id].name, name))
            return id;
    return -1;
}

static void bnd_init(bnd_case *c, float T, const char *what)
{
    memset(c, 0, sizeof *c);
    c->T = T;
    for (int id = 0; id < FLS_FILTER_COUNT; id++)
        c->value[id] = fls_filters[id].off;
    snprintf(c->what, sizeof c->what, "%s", what);
}

static void bnd_push(bnd_list *L, const bnd_case *c)
{
    if (L->n == L->cap) {
        L->cap = L->cap ? 2 * L->cap : 256;
        L->c = realloc(L->c, (size_t)L->cap * sizeof *L->c);
        if (!L->c)
            abort();
    }
    L->c[L->n++] = *c;
}

/* A float l with l / T == x (float division, the tempered logit), or 0. */
static int bnd_reach(float T, float x, float *l)
{
    if (x == -INFINITY) {
        *l = -INFINITY;
        return 1;
    }
    const float l0 = (float)((double)x * (double)T);
    float a = l0, b = l0;
    for (int i = 0; i < 12; i++) {
        if (a / T == x) {
            *l = a;
            return 1;
        }
        if (b / T == x) {
            *l = b;
            return 1;
        }
        a = nextafterf(a, INFINITY);
        b = nextafterf(b, -INFINITY);
    }
    return 0;
}

/* Appends a token of tempered logit x to c, if some logit reaches it. */
static int bnd_add(bnd_case *c, float x)
{
    float l;
    if (c->V >= BND_VMAX || !bnd_reach(c->T, x, &l))
        return 0;
    c->l[c->V++] = l;
    return 1;
}

static float bnd_x(const bnd_case *c, int64_t v)
{
    return c->l[v] / c->T;
}

static void bnd_shuffle(bnd_case *c, uint64_t *rng)
{
    for (int64_t i = c->V - 1; i > 0; i--) {
        const int64_t j = (int64_t)(bnd_next(rng) % (uint64_t)(i + 1));
        const float t = c->l[i];
        c->l[i] = c->l[j];
        c->l[j] = t;
    }
}

/* A tempered logit near target: the x of a random logit (always reachable). */
static float bnd_near(float T, double target)
{
    return (float)(target * (double)T) / T;
}

/* exp(d) with 12 trailing zero bits in its 53-bit significand: sums of up to
 * 2^5 of them, each in [2^-6, 1], are exact in any order. */
static int bnd_nice(double w)
{
    int e;
    const double f = frexp(w, &e);
    const uint64_t mant = (uint64_t)ldexp(f, 53);
    return w > 0x1p-6 && w <= 1.0 && (mant & 0xFFFu) == 0;
}

/* The first reachable x at or below m + d (walking down the logits) with a
 * nice weight exp(x - m); -inf if none within the search. */
static float bnd_nice_x(float T, float m, double d)
{
    float l = (float)(((double)m + d) * (double)T);
    for (int i = 0; i < 400000; i++) {
        const float x = l / T;
        if (x < m && bnd_nice(exp((double)x - (double)m)))
            return x;
        l = nextafterf(l, -INFINITY);
    }
    return -INFINITY;
}

/* ---- the brute force: docs/RULES.md, in double on the tempered floats ---- */

typedef struct bf_row {
    int64_t V, n; /* n: finite tokens */
    double x[BND_VMAX];
    int64_t rank[BND_VMAX]; /* the finite tokens, larger x first, lower index first on ties */
    double m;
} bf_row;

static void bf_make(const bnd_case *c, bf_row *r)
{
    r->V = c->V;
    r->n = 0;
    r->m = -INFINITY;
    for (int64_t v = 0; v < c->V; v++) {
        const float xf = c->l[v] / c->T;
        r->x[v] = xf;
        if (xf == -INFINITY)
            continue;
        int64_t i = r->n++;
        while (i > 0 && r->x[r->rank[i - 1]] < r->x[v]) {
            r->rank[i] = r->rank[i - 1];
            i--;
        }
        r->rank[i] = v;
        if (r->x[v] > r->m)
            r->m = r->x[v];
    }
}

/* min-p: x_v - m >= ln p */
static void bf_min_p(const bf_row *r, double p, uint8_t *in)
{
    for (int64_t v = 0; v < r->V; v++)
        in[v] = in[v] && r->x[v] - r->m >= log(p);
}

/* top-k: fewer than k tokens of the support strictly above */
static void bf_top_k(const bf_row *r, double k, uint8_t *in)
{
    uint8_t out[BND_VMAX] = {0};
    for (int64_t v = 0; v < r->V; v++) {
        int64_t above = 0;
        for (int64_t u = 0; u < r->V; u++)
            above += in[u] && in[v] && r->x[u] > r->x[v];
        out[v] = (double)above >= k;
    }
    for (int64_t v = 0; v < r->V; v++)
        in[v] = in[v] && !out[v];
}

/* top-p: the mass (in rank order) of the support's tokens strictly above v
 * is below p Z, Z the support's mass */
static void bf_top_p(const bf_row *r, double p, uint8_t *in)
{
    double Z = 0.0;
    for (int64_t i = 0; i < r->n; i++)
        if (in[r->rank[i]])
            Z += exp(r->x[r->rank[i]] - r->m);
    uint8_t out[BND_VMAX] = {0};
    for (int64_t v = 0; v < r->V; v++) {
        if (!in[v])
            continue;
        double A = 0.0;
        for (int64_t i = 0; i < r->n; i++) {
            const int64_t u = r->rank[i];
            if (in[u] && r->x[u] > r->x[v])
                A += exp(r->x[u] - r->m);
        }
        out[v] = !(A < p * Z);
    }
    for (int64_t v = 0; v < r->V; v++)
        in[v] = in[v] && !out[v];
}

/* top-n-sigma: x_v >= m - n sigma, sigma the population standard deviation
 * of the row's finite tempered logits */
static void bf_top_nsigma(const bf_row *r, double n, uint8_t *in)
{
    double s = 0.0, q = 0.0;
    for (int64_t v = 0; v < r->V; v++)
        if (r->x[v] > -INFINITY)
            s += r->x[v];
    const double mean = s / (double)r->n;
    for (int64_t v = 0; v < r->V; v++)
        if (r->x[v] > -INFINITY)
            q += (r->x[v] - mean) * (r->x[v] - mean);
    const double sigma = sqrt(q / (double)r->n);
    for (int64_t v = 0; v < r->V; v++)
        in[v] = in[v] && r->x[v] >= r->m - n * sigma;
}

/* epsilon: p_v >= eps with p the softmax over the whole row, i.e. x_v - m >=
 * log Z + ln eps; the maximum always stays */
static void bf_epsilon(const bf_row *r, double eps, uint8_t *in)
{
    double Z = 0.0;
    for (int64_t v = 0; v < r->V; v++)
        if (r->x[v] > -INFINITY)
            Z += exp(r->x[v] - r->m);
    for (int64_t v = 0; v < r->V; v++)
        in[v] = in[v] && (r->x[v] - r->m >= log(Z) + log(eps) || r->x[v] == r->m);
}

/* ---- the boundary generators ---- */

static void bnd_note(bnd_case *c, const char *fmt, double a)
{
    char tail[48];
    snprintf(tail, sizeof tail, fmt, a);
    strncat(c->what, tail, sizeof c->what - strlen(c->what) - 1);
}

/* min-p: x_b - m == log(p) + j ulp exactly, then p and x_b one float ulp off */
static void gen_min_p(int id, float T, uint64_t seed, bnd_list *out)
{
    static const float p0s[3] = {0.1f, 0.3f, 0.02f};
    uint64_t rng = seed;
    for (int pi = 0; pi < 3; pi++) {
        for (int j = -1; j <= 1; j++) {
            float p = p0s[pi], mf = 0.0f, xb = 0.0f;
            int found = 0;
            for (int it = 0; it < 200000 && !found; it++, p = nextafterf(p, 1.0f)) {
                const double L = log((double)p);
                const double D = j == 0 ? L : nextafter(L, j > 0 ? INFINITY : -INFINITY);
                mf = (float)(-D);
                const double r = (double)mf + D;
                xb = (float)r;
                float t;
                found = (double)xb == r && xb < mf && bnd_reach(T, mf, &t) && bnd_reach(T, xb, &t);
            }
            if (!found)
                continue;
            p = nextafterf(p, 0.0f); /* the loop advanced once past it */
            /* the fillers, shared by the variants: 14 logits below m, away from x_b */
            float fill[14];
            for (int i = 0; i < 14;) {
                const float x = bnd_near(T, (double)mf - 4.5 * bnd_unif(&rng));
                if (x <= mf && fabs((double)x - (double)xb) > 0.1)
                    fill[i++] = x;
            }
            const uint64_t shuffle_seed = bnd_next(&rng);
            for (int var = 0; var < (j == 0 ? 5 : 1); var++) {
                /* var 0: as found; 1, 2: p one float ulp down, up; 3, 4: x_b one float ulp down, up */
                bnd_case c;
                char what[100];
                static const char *vn[5] = {"", ", p - 1 ulp", ", p + 1 ulp", ", x_b - 1 ulp",
                                            ", x_b + 1 ulp"};
                snprintf(what, sizeof what, "min-p: x_b - m = log p %s%s",
                         j == 0  ? "exactly"
                         : j > 0 ? "+ 1 ulp"
                                 : "- 1 ulp",
                         vn[var]);
                bnd_init(&c, T, what);
                float pv = p, xv = xb;
                if (var == 1 || var == 2)
                    pv = nextafterf(p, var == 1 ? 0.0f : 1.0f);
                if (var == 3 || var == 4)
                    xv = nextafterf(xb, var == 3 ? -INFINITY : INFINITY);
                c.value[id] = pv;
                c.exact = var == 0;
                if (!bnd_add(&c, mf) || !bnd_add(&c, xv))
                    continue;
                for (int i = 0; i < 14; i++)
                    bnd_add(&c, fill[i]);
                uint64_t sr = shuffle_seed;
                bnd_shuffle(&c, &sr);
                bnd_note(&c, " (p %.9g)", (double)pv);
                bnd_push(out, &c);
            }
        }
    }
}

/* top-k: rows of ties and one-ulp neighbours; every k */
static void gen_top_k(int id, float T, uint64_t seed, bnd_list *out)
{
    uint64_t rng = seed;
    for (int row = 0; row < 3; row++) {
        bnd_case c;
        bnd_init(&c, T, "top-k");
        int used[25] = {0};
        for (int cls = 0; cls < 8; cls++) {
            int q;
            do
                q = bnd_int(&rng, -12, 12);
            while (q == 0 || used[q + 12]);
            used[q + 12] = 1;
            const float b = (float)q / 4.0f;
            const int copies = bnd_int(&rng, 0, 2) == 0 ? bnd_int(&rng, 2, 3) : 1;
            for (int i = 0; i < copies; i++)
                bnd_add(&c, b);
            if (bnd_int(&rng, 0, 1))
                bnd_add(&c, nextafterf(b, INFINITY));
            if (bnd_int(&rng, 0, 2))
                bnd_add(&c, nextafterf(b, -INFINITY));
        }
        if (row == 1)
            for (int i = 0; i < 3; i++)
                bnd_add(&c, -INFINITY);
        bnd_shuffle(&c, &rng);
        int64_t nfin = 0;
        for (int64_t v = 0; v < c.V; v++)
            nfin += c.l[v] > -INFINITY;
        for (int64_t k = 1; k <= nfin + 1 && k <= c.V; k++) {
            bnd_case ck = c;
            ck.value[id] = (double)k;
            snprintf(ck.what, sizeof ck.what, "top-k: row %d, k = %lld of %lld finite", row, (long long)k,
                     (long long)nfin);
            bnd_push(out, &ck);
        }
    }
}

/* the smallest float p with p Z >= A */
static float bnd_p_at(double A, double Z)
{
    float p = (float)(A / Z);
    while (p > 0.0f && (double)p * Z >= A)
        p = nextafterf(p, 0.0f);
    while ((double)p * Z < A)
        p = nextafterf(p, 1.0f);
    return p;
}

static void bnd_push_top_p(bnd_list *out, const bnd_case *c, int id, float p, const char *what, int exact)
{
    if (!(p > 0.0f && p < 1.0f))
        return;
    bnd_case cp = *c;
    cp.value[id] = p;
    cp.exact = exact;
    snprintf(cp.what, sizeof cp.what, "top-p: %s (p %.9g)", what, (double)p);
    bnd_push(out, &cp);
}

/* top-p on exact-sum rows: p on either side of each group's head mass, and
 * inside groups of ties; also within a top-k support */
static void gen_top_p_exact_sums(int id, float T, uint64_t *rng, bnd_list *out, int with_top_k)
{
    bnd_case c;
    bnd_init(&c, T, "");
    const float m = bnd_near(T, 0.5 + bnd_unif(rng));
    bnd_add(&c, m);
    int64_t gstart[12], gsize[12];
    double gw[12];
    int G = 0;
    gstart[G] = 0, gsize[G] = 1, gw[G] = 1.0, G++;
    float prev = m;
    for (int g = 1; g < 11; g++) {
        const float x = bnd_nice_x(T, m, -0.38 * g - 0.05 * bnd_unif(rng));
        if (!(x < prev) || x == -INFINITY)
            break;
        const int copies = g >= 9 ? 1 : (bnd_int(rng, 0, 2) == 0 ? 3 : bnd_int(rng, 1, 2));
        gstart[G] = c.V;
        for (int i = 0; i < copies; i++)
            bnd_add(&c, x);
        gsize[G] = copies;
        gw[G] = exp((double)x - (double)m);
        G++;
        prev = x;
    }
    /* with_top_k: k keeps all but the last two groups (singletons) */
    const int Gs = with_top_k ? G - 2 : G;
    double Z = 0.0;
    for (int g = 0; g < Gs; g++)
        Z += gsize[g] * gw[g];
    if (with_top_k) {
        const int k_id = bnd_id("top-k");
        if (k_id < 0)
            return;
        c.value[k_id] = (double)(gstart[Gs - 1] + gsize[Gs - 1]);
    }
    double A = 0.0;
    char what[100];
    for (int g = 0; g < Gs; g++) {
        if (g > 0) {
            const float pa = bnd_p_at(A, Z);
            snprintf(what, sizeof what, "%sgroup %d: p Z just reaches its head mass",
                     with_top_k ? "top-k, " : "", g);
            bnd_push_top_p(out, &c, id, pa, what, 0);
            snprintf(what, sizeof what, "%sgroup %d: p Z one float ulp of p below its head mass",
                     with_top_k ? "top-k, " : "", g);
            bnd_push_top_p(out, &c, id, nextafterf(pa, 0.0f), what, 0);
        }
        for (int64_t t = 0; t < gsize[g]; t++) {
            const float pm = (float)((A + (t + 0.5) * gw[g]) / Z);
            snprintf(what, sizeof what, "%sgroup %d (%lld ties): p Z inside tie %lld",
                     with_top_k ? "top-k, " : "", g, (long long)gsize[g], (long long)t);
            bnd_push_top_p(out, &c, id, pm, what, 0);
        }
        A += gsize[g] * gw[g];
    }
}

/* top-p where Z / 2 is the head mass A exactly, or one double ulp of A off
 * (p = 0.5); rank order = index order; the head's sum in rank order differs
 * from its sum in the reverse order, so an engine summing in another order
 * fails one of the three */
static int gen_top_p_mass(int id, float T, uint64_t *rng, int j, bnd_list *out)
{
    bnd_case c;
    bnd_init(&c, T, "");
    const float m = bnd_near(T, 0.3 + bnd_unif(rng));
    bnd_add(&c, m);
    const int h = bnd_int(rng, 3, 6);
    double w[BND_VMAX];
    w[0] = 1.0;
    float prev = m;
    for (int i = 1; i < h; i++) {
        const float x = bnd_near(T, (double)prev - 0.05 - 0.3 * bnd_unif(rng));
        if (!(x < prev) || !bnd_add(&c, x))
            return 0;
        w[i] = exp((double)x - (double)m);
        prev = x;
    }
    double A = 0.0, Ar = 0.0;
    for (int i = 0; i < h; i++)
        A += w[i];
    for (int i = h - 1; i >= 0; i--)
        Ar += w[i];
    if (A == Ar)
        return 0;
    const double Zt = 2.0 * (j == 0 ? A : nextafter(A, j > 0 ? INFINITY : -INFINITY));
    /* the boundary group: 1 or 2 ties just below the head */
    const float xg = bnd_near(T, (double)prev - 0.05 - 0.2 * bnd_unif(rng));
    if (!(xg < prev))
        return 0;
    const int gn = bnd_int(rng, 1, 2);
    double S = A;
    for (int i = 0; i < gn; i++)
        if (!bnd_add(&c, xg))
            return 0;
    const double wg = exp((double)xg - (double)m);
    for (int i = 0; i < gn; i++)
        S += wg;
    if (!(S < Zt))
        return 0;
    /* the rest: ties at 0.9 wg while far from Zt, then smaller tokens, each
     * the largest reachable x keeping the running sum (in rank order) below
     * Zt by a margin that shrinks: 1e-5, 1e-6 Zt, then 2^-38 Zt, then
     * exactly Zt */
    static const double margins[3] = {1e-5, 1e-6, 0x1p-38};
    float xr = bnd_near(T, (double)m + log(0.9 * wg));
    const double wr = exp((double)xr - (double)m);
    while (Zt - (S + wr) > 1e-3 * Zt && c.V < BND_VMAX - 8) {
        if (!bnd_add(&c, xr))
            return 0;
        S += wr;
    }
    prev = xr;
    for (int s = 0; s < 3; s++) {
        const double want = Zt - S - margins[s] * Zt;
        if (!(want > 0.0))
            continue;
        const double x0 = fmin((double)m + log(want), (double)prev);
        float l = (float)(x0 * (double)T);
        float x = l / T;
        while (x >= prev || !(S + exp((double)x - (double)m) <= Zt - 0.5 * margins[s] * Zt)) {
            l = nextafterf(l, -INFINITY);
            x = l / T;
        }
        if (!bnd_add(&c, x))
            return 0;
        S += exp((double)x - (double)m);
        prev = x;
    }
    /* the finest token: S + w == Zt exactly */
    const double gap = Zt - S;
    if (!(gap > 0.0))
        return 0;
    float l = (float)(((double)m + log(gap)) * (double)T);
    int hit = 0;
    for (int i = 0; i < 100000; i++) {
        const float x = l / T;
        const double s = S + exp((double)x - (double)m);
        if (s == Zt && x < prev) {
            hit = bnd_add(&c, x);
            break;
        }
        l = nextafterf(l, s < Zt ? INFINITY : -INFINITY);
    }
    if (!hit)
        return 0;
    char what[100];
    snprintf(what, sizeof what, "Z / 2 = head mass %s (%d ties at the boundary)",
             j == 0  ? "exactly"
             : j > 0 ? "+ 1 ulp"
                     : "- 1 ulp",
             gn);
    bnd_push_top_p(out, &c, id, 0.5f, what, 1);
    if (j == 0) {
        snprintf(what, sizeof what, "Z / 2 = head mass, p - 1 ulp (%d ties at the boundary)", gn);
        bnd_push_top_p(out, &c, id, nextafterf(0.5f, 0.0f), what, 0);
        snprintf(what, sizeof what, "Z / 2 = head mass, p + 1 ulp (%d ties at the boundary)", gn);
        bnd_push_top_p(out, &c, id, nextafterf(0.5f, 1.0f), what, 0);
    }
    return 1;
}

static void gen_top_p(int id, float T, uint64_t seed, bnd_list *out)
{
    uint64_t rng = seed;
    gen_top_p_exact_sums(id, T, &rng, out, 0);
    gen_top_p_exact_sums(id, T, &rng, out, 1);
    for (int j = -1; j <= 1; j++)
        for (int made = 0, tries = 0; made < 2 && tries < 200; tries++)
            made += gen_top_p_mass(id, T, &rng, j, out);
}

/* top-n-sigma: 8 pairs mu +- s k_i / 4 with sum k_i^2 = 128, so sigma = s
 * (a power of two) and the moments are exact in any order */
static void gen_top_nsigma(int id, float T, uint64_t seed, bnd_list *out)
{
    uint64_t rng = seed;
    static const double scales[3] = {1.0, 2.0, 0.5};
    for (int row = 0; row < 3; row++) {
        bnd_case c;
        int ok = 0;
        for (int tries = 0; tries < 1000 && !ok; tries++) {
            int k[8], sum = 0;
            for (int i = 0; i < 8; i++) {
                k[i] = bnd_int(&rng, 0, 8);
                sum += k[i] * k[i];
            }
            if (sum != 128)
                continue;
            const double mu = (2 * bnd_int(&rng, -8, 7) + 1) / 8.0, s = scales[row];
            bnd_init(&c, T, "");
            ok = 1;
            for (int i = 0; i < 8 && ok; i++)
                ok = bnd_add(&c, (float)(mu + s * k[i] / 4.0)) && bnd_add(&c, (float)(mu - s * k[i] / 4.0));
            if (row == 1)
                for (int i = 0; i < 2; i++)
                    bnd_add(&c, -INFINITY);
        }
        if (!ok)
            continue;
        bnd_shuffle(&c, &rng);
        const double sigma = scales[row];
        double m = -INFINITY;
        for (int64_t v = 0; v < c.V; v++)
            m = bnd_x(&c, v) > m ? bnd_x(&c, v) : m;
        /* up to 5 distinct values below m as boundaries */
        int done = 0;
        for (int64_t v = 0; v < c.V && done < 5; v++) {
            const float xb = bnd_x(&c, v);
            if (!(xb < m) || xb == -INFINITY)
                continue;
            int dup = 0;
            for (int64_t u = 0; u < v; u++)
                dup |= bnd_x(&c, u) == xb;
            if (dup)
                continue;
            done++;
            /* the thresholds: exactly x_b; one double ulp below, above; half a float ulp below, above */
            const double tt[5] = {xb, nextafter((double)xb, -INFINITY), nextafter((double)xb, INFINITY),
                                  ((double)xb + nextafterf(xb, -INFINITY)) / 2.0,
                                  ((double)xb + nextafterf(xb, INFINITY)) / 2.0};
            static const char *tn[5] = {"exactly at x_b", "1 double ulp below x_b", "1 double ulp above x_b",
                                        "half a float ulp below x_b", "half a float ulp above x_b"};
            for (int t = 0; t < 5; t++) {
                /* n from the threshold, then walked by double ulps until m - n sigma is tt[t] exactly
                 * (t < 3), or within a thousandth of a float ulp of it (t >= 3) */
                const double nc = (m - tt[t]) / sigma;
                const double tol = t < 3 ? 0.0 : 1e-3 * ((double)nextafterf(xb, INFINITY) - xb);
                double n = nc;
                int hit = 0;
                for (int dir = -1; dir <= 1 && !hit; dir += 2) {
                    n = nc;
                    for (int i = 0; i < 64 && !hit; i++) {
                        hit = n > 0.0 && fabs((m - n * sigma) - tt[t]) <= tol;
                        if (!hit)
                            n = nextafter(n, dir * INFINITY);
                    }
                }
                if (!hit)
                    continue;
                bnd_case cn = c;
                cn.value[id] = n;
                cn.exact = t < 3;
                snprintf(cn.what, sizeof cn.what, "top-n-sigma: row %d (sigma %g), m - n sigma %s (n %.17g)",
                         row, sigma, tn[t], n);
                bnd_push(out, &cn);
            }
        }
    }
}

/* epsilon on exact-sum rows: log Z + log eps on x_b - m exactly, one double
 * ulp off, half a float ulp off; with a top-k cutting the tail; the maximum
 * alone */
static void gen_epsilon(int id, float T, uint64_t seed, bnd_list *out)
{
    uint64_t rng = seed;
    const int k_id = bnd_id("top-k");
    for (int row = 0; row < 3; row++) {
        bnd_case c;
        bnd_init(&c, T, "");
        const float m = bnd_near(T, -1.0 + 2.0 * bnd_unif(&rng));
        bnd_add(&c, m);
        if (row == 2)
            bnd_add(&c, m); /* ties at the maximum */
        float xs[16];
        int nx = 0;
        for (int i = 0; i < 12; i++) {
            const float x = bnd_nice_x(T, m, -0.3 - 3.6 * bnd_unif(&rng));
            if (x == -INFINITY)
                continue;
            const int copies = bnd_int(&rng, 0, 3) == 0 ? 2 : 1;
            for (int t = 0; t < copies; t++)
                bnd_add(&c, x);
            xs[nx++] = x;
        }
        bnd_shuffle(&c, &rng);
        double Z = 0.0;
        for (int64_t v = 0; v < c.V; v++)
            Z += exp((double)bnd_x(&c, v) - (double)m);
        /* the smallest values are cut by the top-k of with_k cases */
        int64_t k_keep = 0;
        float xmin3 = INFINITY;
        {
            float s[BND_VMAX];
            int64_t n = 0;
            for (int64_t v = 0; v < c.V; v++)
                s[n++] = bnd_x(&c, v);
            for (int64_t i = 1; i < n; i++)
                for (int64_t q = i; q > 0 && s[q - 1] < s[q]; q--) {
                    const float t = s[q];
                    s[q] = s[q - 1];
                    s[q - 1] = t;
                }
            k_keep = n - 4;
            while (k_keep > 1 && s[k_keep - 1] == s[k_keep])
                k_keep--;
            xmin3 = s[k_keep - 1];
        }
        for (int b = 0; b < nx && b < 6; b++) {
            const float xb = xs[b];
            const double D = (double)xb - (double)m;
            const double targets[5] = {D, nextafter(D, -INFINITY), nextafter(D, INFINITY),
                                       ((double)nextafterf(xb, -INFINITY) + xb) / 2.0 - (double)m,
                                       ((double)nextafterf(xb, INFINITY) + xb) / 2.0 - (double)m};
            static const char *tn[5] = {"exactly at x_b - m", "1 double ulp below", "1 double ulp above",
                                        "half a float ulp below", "half a float ulp above"};
            for (int t = 0; t < 5; t++) {
                const double e0 = exp(targets[t] - log(Z));
                double eps = e0;
                int hit = 0;
                for (int i = 0; i < 20000 && !hit; i++) {
                    const int step = (i + 1) / 2 * (i % 2 ? 1 : -1);
                    eps = e0;
                    if (step != 0)
                        eps = e0 + step * (nextafter(e0, INFINITY) - e0);
                    hit = eps > 0.0 && eps <= 1.0 && log(Z) + log(eps) == targets[t];
                    if (t >= 3)
                        hit = eps > 0.0 && eps <= 1.0;
                }
                if (!hit)
                    continue;
                for (int with_k = 0; with_k < 2; with_k++) {
                    if (with_k && (k_id < 0 || !(xb > xmin3)))
                        continue;
                    bnd_case ce = c;
                    ce.value[id] = eps;
                    ce.exact = t < 3;
                    if (with_k)
                        ce.value[k_id] = (double)k_keep;
                    snprintf(ce.what, sizeof ce.what, "epsilon: row %d, log Z + log eps %s%s (eps %.17g)",
                             row, tn[t], with_k ? ", top-k cuts the tail" : "", eps);
                    bnd_push(out, &ce);
                }
            }
        }
        /* the maximum alone (its ties too): eps above every p_v */
        static const double big[3] = {1.0, 0.9, 0.5};
        for (int i = 0; i < 3; i++) {
            bnd_case ce = c;
            ce.value[id] = big[i];
            snprintf(ce.what, sizeof ce.what, "epsilon: row %d, eps %g (the maximum stays)", row, big[i]);
            bnd_push(out, &ce);
        }
    }
}

/* ---- the table: one generator and one brute-force filter per registry id ---- */

typedef struct bnd_rule {
    const char *name; /* fls_filters[id].name, checked */
    void (*gen)(int id, float T, uint64_t seed, bnd_list *out);
    void (*bf)(const bf_row *r, double value, uint8_t *in);
} bnd_rule;

static const bnd_rule bnd_rules[] = {
    {"min-p", gen_min_p, bf_min_p},       {"top-k", gen_top_k, bf_top_k},
    {"top-p", gen_top_p, bf_top_p},       {"top-nsigma", gen_top_nsigma, bf_top_nsigma},
    {"epsilon", gen_epsilon, bf_epsilon},
};
_Static_assert(sizeof bnd_rules / sizeof bnd_rules[0] == FLS_FILTER_PRODUCT_COUNT,
               "every rule of variants/registry.h needs a boundary generator and a brute force in "
               "tests/unit/test_boundary.c");

/* Whether the table's names are the registry's, in its order. */
static int bnd_table_matches_registry(void)
{
    for (int id = 0; id < FLS_FILTER_PRODUCT_COUNT; id++)
        if (strcmp(bnd_rules[id].name, fls_filters[id].name))
            return 0;
    return 1;
}

static const float bnd_temps[] = {1.0f, 1.3f, 0.5f, 2.0f};
#define BND_NTEMPS ((int)(sizeof bnd_temps / sizeof bnd_temps[0]))

/* Every case of rule id at temperature T. */
static void bnd_cases(int id, float T, bnd_list *out)
{
    uint32_t tb;
    memcpy(&tb, &T, sizeof tb);
    bnd_rules[id].gen(id, T, 0xB0DA + 7919u * (uint64_t)id + (uint64_t)tb, out);
}

/* The case as fls_params (the rule values by the descriptors' names). */
static fls_params bnd_params(const bnd_case *c, int64_t draws, uint64_t seed)
{
    fls_params p;
    fls_params_default(&p);
    p.temperature_value = c->T;
    p.draws = draws;
    p.seed = seed;
    for (int id = 0; id < FLS_FILTER_COUNT; id++) {
        const double v = c->value[id];
        if (v == fls_filters[id].off)
            continue;
        const char *name = fls_filters[id].name;
        if (!strcmp(name, "min-p"))
            p.min_p = (float)v;
        else if (!strcmp(name, "top-k"))
            p.top_k = (int64_t)v;
        else if (!strcmp(name, "top-p"))
            p.top_p = (float)v;
        else {
            p.filter = name;
            p.filter_value = v;
        }
    }
    return p;
}

/* The brute force's support (keep) and its log-sum-exp. */
static double bnd_brute(const bnd_case *c, uint8_t *keep)
{
    bf_row r;
    bf_make(c, &r);
    for (int64_t v = 0; v < c->V; v++)
        keep[v] = r.x[v] > -INFINITY;
    for (int id = 0; id < FLS_FILTER_COUNT; id++)
        if (c->value[id] != fls_filters[id].off)
            bnd_rules[id].bf(&r, c->value[id], keep);
    double Z = 0.0;
    for (int64_t i = 0; i < r.n; i++)
        if (keep[r.rank[i]])
            Z += exp(r.x[r.rank[i]] - r.m);
    return r.m + log(Z);
}

/* The Gumbel-max token over the support (the noise contract's keys
 * fl(x + G), lowest index on ties). */
static int64_t bnd_token(const bnd_case *c, const uint8_t *keep, uint64_t row_seed, uint32_t draw)
{
    int64_t best = -1;
    float bk = -INFINITY;
    for (int64_t v = 0; v < c->V; v++) {
        if (!keep[v])
            continue;
        const float key = bnd_x(c, v) + fls_gumbel(row_seed, 0, draw, (uint64_t)v);
        if (best < 0 || key > bk) {
            bk = key;
            best = v;
        }
    }
    return best;
}

#ifndef FLS_BOUNDARY_CASES_ONLY

#include "tests/unit/common.h"

#include <criterion/criterion.h>

/* One case on one path: 0 when it passes, else a message in msg. */
static int bnd_check(fls_context_t *ctx, const bnd_case *c, int fused, int64_t draws, uint64_t seed,
                     char *msg, size_t msz)
{
    uint8_t keep[BND_VMAX];
    const double want_lse = bnd_brute(c, keep);
    int64_t tok[4096];
    float lp[4096], lse = 0.0f;
    fls_params p = bnd_params(c, draws, seed);
    fls_outputs o = {tok, &lse, lp};
    for (int64_t d = 0; d < draws; d++)
        tok[d] = -7;
    fls_status st;
    if (fused) {
        /* W (V, 4): column 0 the logits, the others small values H's zeros cancel; H = e_0 */
        float W[BND_VMAX * 4], H[4] = {1.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t v = 0; v < c->V; v++) {
            W[v * 4] = c->l[v];
            for (int d = 1; d < 4; d++)
                W[v * 4 + d] = (float)((v * 7 + d * 3) % 11 - 5) / 8.0f;
        }
        fls_matrix Wm = {W, FLS_DTYPE_F32, c->V, 4, 4}, Hm = {H, FLS_DTYPE_F32, 1, 4, 4};
        st = fls_sample_fused(ctx, &Wm, &Hm, &p, &o);
    } else {
        fls_matrix L = {c->l, FLS_DTYPE_F32, 1, c->V, c->V};
        st = fls_sample_logits(ctx, &L, &p, &o);
    }
    const char *path = fused ? "fused" : "from logits";
    if (st != FLS_OK) {
        snprintf(msg, msz, "%s [T %g, %s]: %s", c->what, (double)c->T, path, fls_status_string(st));
        return 1;
    }
    int64_t nsup = 0, hits[BND_VMAX] = {0};
    for (int64_t v = 0; v < c->V; v++)
        nsup += keep[v];
    const uint64_t rs = fls_row_seed(seed, 0);
    for (int64_t d = 0; d < draws; d++) {
        const int64_t want = bnd_token(c, keep, rs, (uint32_t)d);
        if (tok[d] < 0 || tok[d] >= c->V || !keep[tok[d]] || tok[d] != want) {
            snprintf(msg, msz, "%s [T %g, %s]: draw %lld token %lld, want %lld (%s the support of %lld)",
                     c->what, (double)c->T, path, (long long)d, (long long)tok[d], (long long)want,
                     tok[d] >= 0 && tok[d] < c->V && keep[tok[d]] ? "in" : "outside", (long long)nsup);
            return 1;
        }
        hits[tok[d]]++;
        const double x = bnd_x(c, tok[d]);
        if (fabs((double)lp[d] - (x - want_lse)) > 1e-5 * (1.0 + fabs(x - want_lse))) {
            snprintf(msg, msz, "%s [T %g, %s]: logprob %.9g, want %.9g", c->what, (double)c->T, path,
                     (double)lp[d], x - want_lse);
            return 1;
        }
    }
    for (int64_t v = 0; v < c->V; v++)
        if (keep[v] && exp((double)bnd_x(c, v) - want_lse) * (double)draws >= 16.0 && hits[v] == 0) {
            snprintf(msg, msz, "%s [T %g, %s]: support token %lld never drawn in %lld draws", c->what,
                     (double)c->T, path, (long long)v, (long long)draws);
            return 1;
        }
    if (!(fabs((double)lse - want_lse) <= 1e-6 * (1.0 + fabs(want_lse)))) {
        snprintf(msg, msz, "%s [T %g, %s]: logsumexp %.9g, want %.9g (support of %lld)", c->what,
                 (double)c->T, path, (double)lse, want_lse, (long long)nsup);
        return 1;
    }
    return 0;
}

Test(boundary, table_is_the_registry)
{
    cr_assert(bnd_table_matches_registry(), "bnd_rules must list the registry's rules in its order");
}

/* Every case of every rule on the CPU engine, from logits and fused. */
Test(boundary, every_rule_every_side, .timeout = 120)
{
    cr_assert(bnd_table_matches_registry());
    const int shift = (int)sweep_scale_shift();
    const int64_t draws = shift > 0 ? 48 : 384;
    fls_context_t *ctx = ctx_make(0, FLS_SIMD_AUTO, 0);
    int64_t total = 0, failed = 0, exact_cases = 0;
    for (int id = 0; id < FLS_FILTER_PRODUCT_COUNT; id++) {
        int64_t rule_cases = 0, rule_failed = 0;
        for (int ti = 0; ti < BND_NTEMPS; ti++) {
            if (shift > 0 && ti >= 2)
                break; /* under valgrind: T = 1 and T = 1.3 */
            bnd_list L = {0};
            bnd_cases(id, bnd_temps[ti], &L);
            cr_assert(L.n >= 10, "%s at T %g: only %d boundary cases", fls_filters[id].name,
                      (double)bnd_temps[ti], L.n);
            for (int i = 0; i < L.n; i++) {
                exact_cases += L.c[i].exact;
                for (int fused = 0; fused < 2; fused++) {
                    char msg[400];
                    total++;
                    rule_cases++;
                    if (bnd_check(ctx, &L.c[i], fused, draws, 4242 + (uint64_t)i, msg, sizeof msg)) {
                        if (failed < 12)
                            cr_log_error("%s", msg);
                        failed++;
                        rule_failed++;
                    }
                }
            }
            free(L.c);
        }
        /* for tools/mutation-table.sh */
        printf("BOUNDARY %s: %lld of %lld checks failed\n", fls_filters[id].name, (long long)rule_failed,
               (long long)rule_cases);
    }
    fls_context_destroy(ctx);
    printf("BOUNDARY total: %lld of %lld checks failed (%lld exact-tie cases)\n", (long long)failed,
           (long long)total, (long long)exact_cases);
    fflush(stdout);
    cr_assert_eq(failed, 0, "%lld of %lld boundary checks failed", (long long)failed, (long long)total);
}

/* The exact constructions were found: the double-level ties are in the
 * table for every rule whose decision is a comparison of doubles. */
Test(boundary, exact_ties_are_built)
{
    for (int id = 0; id < FLS_FILTER_PRODUCT_COUNT; id++) {
        bnd_list L = {0};
        bnd_cases(id, 1.0f, &L);
        int exact = 0;
        for (int i = 0; i < L.n; i++)
            exact += L.c[i].exact;
        if (strcmp(fls_filters[id].name, "top-k") != 0)
            cr_expect(exact >= 3, "%s: only %d exact-tie cases", fls_filters[id].name, exact);
        free(L.c);
    }
}

#endif /* FLS_BOUNDARY_CASES_ONLY */
