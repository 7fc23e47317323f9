/*
 * tokens.c — fls_audit_tokens: the audit of tokens drawn by any sampler
 * (fls_tokens.h). Part of the statistics core: it uses the binning, the exact
 * and chi-square tests, the tail test and the power statements of fls_stats.h,
 * and knows nothing of engines or cases.
 *
 * Pooling rows with different references: the randomized probability integral
 * transform. Sort a row's tokens by decreasing probability (ties by index) and
 * let F(v-) be the mass before token v; for a sample v, u = F(v-) + U p_v with
 * U uniform on [0, 1) independent of everything else is exactly Uniform(0, 1)
 * when v has the row's exact distribution (whatever the row). So the samples
 * of all rows, in K equal-mass bins of u, are multinomial(n, 1/K each) under
 * the null: one test for every row at once, its bins of equal mass (where the
 * chi-square approximation is at its best), and a token of probability >= 1/K
 * fills whole bins on its own (so its mass is tested alone). U comes from a
 * hash of (seed, row, draw): reproducible, and independent of the sampler.
 * A deviation of TV d in every row is a deviation of at most d on the bins; a
 * deviation inside one bin of a row (finer than 1/K of its mass) is invisible
 * to this test, which is why the tail and tie tests look there on their own.
 */
#include "stats/fls_tokens.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void fls_tokens_options_default(fls_tokens_options *o)
{
    memset(o, 0, sizeof *o);
    o->alpha = 0.0;
    o->budget = FLS_STATS_BUDGET;
    o->tails = 1;
    o->pairs_draws = 1;
    o->pairs_rows = 0;
    o->ties = 1;
    o->seed = 20260301;
    o->name = "tokens";
    o->rule = NULL;
    o->boundary = 1;
}

/* Whether the rule truncates (a filter, or a per-row filter array, given). */
static int rule_truncates(const fls_params *r)
{
    return r && (r->min_p != 0.0f || r->top_k != 0 || r->top_p != 1.0f || r->filter || r->row_min_p ||
                 r->row_top_k || r->row_top_p || r->row_filter_value);
}

static int64_t rule_K(const fls_params *r)
{
    return r && r->without_replacement_k > 0 ? r->without_replacement_k : 0;
}

int fls_tokens_test_count(const fls_tokens_options *o)
{
    return 1 + (o->tails ? FLS_STATS_N_TAILS : 0) + (o->pairs_draws != 0) + (o->pairs_rows != 0) +
           (o->ties != 0) + (o->boundary && rule_truncates(o->rule)) + (rule_K(o->rule) >= 2 ? 2 : 0);
}

/* Row b's rule as the reference sees it (every registry rule: the built-ins
 * from their fields, `filter` by name); FLS_ERR_PARAM for a value the
 * library refuses (or a rule the registry does not know). */
static fls_status row_rule(const fls_params *r, int64_t b, int64_t V, fls_stats_rule *out, int64_t *K_b)
{
    *K_b = 1;
    fls_status st = fls_stats_rule_from_params(r, b, out);
    if (st != FLS_OK || !r)
        return st;
    const int64_t K = rule_K(r);
    if (r->without_replacement_k < 0 || K > V || (r->row_without_replacement_k && K == 0))
        return FLS_ERR_PARAM;
    if (K > 0) {
        *K_b = r->row_without_replacement_k ? r->row_without_replacement_k[b] : K;
        if (*K_b < 1 || *K_b > K)
            return FLS_ERR_PARAM;
    }
    return fls_stats_rule_check(out, V);
}

/* One row's tuple distribution sorted by decreasing probability: for a cell c,
 * tstart[c] = the mass before it. */
static fls_status tuple_cdf(const double *p, int64_t V, int K, int k_row, double *tp, double *tstart)
{
    fls_status st = fls_stats_pl_tuples(p, V, K, k_row, tp);
    if (st != FLS_OK)
        return st;
    return fls_stats_cdf_start(tp, fls_stats_pl_cells(V, K), tstart);
}

int64_t fls_tokens_draws_needed(int64_t B, double alpha)
{
    if (B < 1)
        return -1;
    int64_t n = fls_stats_sample_size(FLS_STATS_MAX_BINS - 1, alpha / FLS_STATS_CHI2_KAPPA, FLS_STATS_TV,
                                      FLS_STATS_POWER);
    const int64_t floor_n = (int64_t)(FLS_STATS_MIN_EXPECTED * FLS_STATS_MAX_BINS); /* all 32 bins */
    n = n > floor_n ? n : floor_n;
    return (n + B - 1) / B;
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* U in [0, 1) from (seed, row, draw), 53 bits. */
static double pit_uniform(uint64_t seed, int64_t b, int64_t n)
{
    uint64_t h = mix64(seed ^ mix64((uint64_t)b * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) ^
                       ((uint64_t)n * 0xD1B54A32D192ED03ull));
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

typedef struct idx_p {
    double p;
    int64_t i;
} idx_p;

static int by_p_desc(const void *a, const void *b)
{
    const idx_p *x = a, *y = b;
    if (x->p != y->p)
        return x->p > y->p ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

typedef struct idx_l {
    float l;
    int64_t i;
} idx_l;

static int by_l(const void *a, const void *b)
{
    const idx_l *x = a, *y = b;
    if (x->l != y->l)
        return x->l > y->l ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

/* start[v] = mass of the tokens before v in decreasing-probability order. */
static void row_cdf(const double *p, int64_t V, idx_p *order, double *start)
{
    for (int64_t v = 0; v < V; v++) {
        order[v].p = p[v];
        order[v].i = v;
    }
    qsort(order, (size_t)V, sizeof *order, by_p_desc);
    double acc = 0.0, comp = 0.0;
    for (int64_t k = 0; k < V; k++) {
        start[order[k].i] = acc + comp;
        double y = order[k].p - comp, t = acc + y; /* Kahan */
        comp = (t - acc) - y;
        acc = t;
    }
}

/* A growable list of (n, m, k) for the tie test. */
typedef struct tie_list {
    int64_t *n, *k;
    double *m;
    size_t len, cap;
} tie_list;

static int tie_push(tie_list *t, int64_t n, double m, int64_t k)
{
    if (t->len == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        int64_t *nn = realloc(t->n, cap * sizeof(int64_t)), *kk = NULL;
        if (nn)
            t->n = nn;
        kk = nn ? realloc(t->k, cap * sizeof(int64_t)) : NULL;
        if (kk)
            t->k = kk;
        double *mm = kk ? realloc(t->m, cap * sizeof(double)) : NULL;
        if (!mm)
            return -1;
        t->m = mm;
        t->cap = cap;
    }
    t->n[t->len] = n;
    t->m[t->len] = m;
    t->k[t->len] = k;
    t->len++;
    return 0;
}

static void row_init(fls_audit_row *r, const char *prefix, const char *test, int64_t V, int64_t draws,
                     double alpha)
{
    memset(r, 0, sizeof *r);
    snprintf(r->test, sizeof r->test, "%.40s/%s", prefix, test);
    snprintf(r->engine, sizeof r->engine, "ext");
    r->V = V;
    r->draws = draws;
    r->alpha = alpha;
    r->deficit_caught = r->excess_caught = r->tv_caught = INFINITY;
}

const fls_audit_row *fls_audit_row_named(const fls_audit_row *rows, size_t n, const char *test)
{
    for (size_t k = 0; rows && test && k < n; k++) {
        const char *slash = strrchr(rows[k].test, '/');
        if (slash && !strcmp(slash + 1, test))
            return &rows[k];
    }
    return NULL;
}

int fls_audit_rows_flagged(const fls_audit_row *rows, size_t n, const char *test)
{
    for (size_t k = 0; rows && k < n; k++) {
        const char *slash = strrchr(rows[k].test, '/');
        if (fls_audit_row_verdict(&rows[k]) == FLS_AUDIT_FAIL &&
            (!test || (slash && !strcmp(slash + 1, test))))
            return 1;
    }
    return 0;
}

/* Via fls_gof; n large enough that every cell is a bin of its own. */
fls_status fls_audit_equal_cells(const int64_t *counts, int K, int64_t impossible, double alpha,
                                 fls_audit_row *r)
{
    double *u = malloc((size_t)K * sizeof(double));
    if (!u)
        return FLS_ERR_OUT_OF_MEMORY;
    int64_t n = 0;
    for (int j = 0; j < K; j++) {
        u[j] = 1.0 / K;
        n += counts[j];
    }
    fls_bins bins;
    fls_status st = fls_bins_build(&bins, u, K, (int64_t)(FLS_STATS_MIN_EXPECTED * K) + 1, K);
    free(u);
    if (st != FLS_OK)
        return st;
    fls_gof g;
    fls_gof_init(&g);
    st = fls_gof_add_counts(&g, &bins, counts, impossible);
    fls_bins_free(&bins);
    if (st != FLS_OK)
        return st;
    r->chi2 = g.impossible ? INFINITY : g.chi2;
    r->dof = K - 1;
    r->p = g.p;
    r->pass = fls_gof_pass(&g, alpha);
    r->bins = K;
    r->min_mass = 1.0 / K;
    r->tv_caught = K > 2 ? fls_stats_tv_caught(K - 1, alpha / FLS_STATS_CHI2_KAPPA, n, FLS_STATS_POWER)
                         : fls_stats_binom_tv_caught(0.5, n, alpha, FLS_STATS_POWER);
    return FLS_OK;
}

/* Samples on the boundary class per row, for the boundary test. */
typedef struct bnd_list {
    int64_t *n, *k;
    double *m;
    int64_t len;
} bnd_list;

/* One audit: its inputs, sizes, buffers and pooled counts. */
typedef struct tok_audit {
    /* inputs */
    const float *logits;
    int64_t B, V, ld, N;
    const float *temperature;
    float temperature_value;
    const int64_t *tokens;
    const fls_tokens_options *o;
    double alpha;
    const char *name;
    /* what runs, and the sizes of the pooled tests */
    int64_t KW, stride; /* without replacement: positions per draw (0: off); int64 per draw */
    int do_boundary, do_pl, do_tuples;
    int64_t tcells;
    int64_t n_all;
    int K, Kd, Kr, Kc;
    /* per-row buffers */
    double *p, *start, *u, *u_prev, *tp, *tstart;
    idx_p *order;
    idx_l *lorder;
    uint8_t *in;
    int64_t *hist, *t0;
    /* pooled counts */
    int64_t *gof, *cd, *crw, *tn, *tk, *tcount, *ccount;
    double *tm;
    bnd_list bnd;
    tie_list ties;
    int64_t impossible, imp_d, imp_r, n_pd, n_pr, tie_classes;
    int64_t imp_pl, n_cond, n_tup, b_out, b_rows;
    double b_exp, b_obs, b_margin;
} tok_audit;

static double row_T(const tok_audit *a, int64_t b)
{
    return a->temperature ? (double)a->temperature[b] : (double)a->temperature_value;
}

static fls_status ta_alloc(tok_audit *a)
{
    const int64_t V = a->V, N = a->N, B = a->B;
    a->p = malloc((size_t)V * sizeof(double));
    a->start = malloc((size_t)V * sizeof(double));
    a->order = malloc((size_t)V * sizeof(idx_p));
    a->lorder = a->o->ties ? malloc((size_t)V * sizeof(idx_l)) : NULL;
    a->in = malloc((size_t)V);
    a->hist = calloc((size_t)V, sizeof(int64_t));
    a->u = malloc((size_t)N * sizeof(double));
    a->u_prev = malloc((size_t)N * sizeof(double));
    a->gof = calloc((size_t)a->K, sizeof(int64_t));
    a->cd = calloc((size_t)(a->Kd * a->Kd), sizeof(int64_t));
    a->crw = calloc((size_t)(a->Kr * a->Kr), sizeof(int64_t));
    a->tn = malloc((size_t)B * sizeof(int64_t));
    a->tk = malloc((size_t)(B * FLS_STATS_N_TAILS) * sizeof(int64_t));
    a->tm = malloc((size_t)(B * FLS_STATS_N_TAILS) * sizeof(double));
    a->t0 = a->KW > 0 ? malloc((size_t)N * sizeof(int64_t)) : NULL;
    a->tp = a->do_tuples ? malloc((size_t)a->tcells * sizeof(double)) : NULL;
    a->tstart = a->do_tuples ? malloc((size_t)a->tcells * sizeof(double)) : NULL;
    a->tcount = a->do_tuples ? calloc((size_t)a->K, sizeof(int64_t)) : NULL;
    if (a->do_boundary) {
        a->bnd.n = malloc((size_t)B * sizeof(int64_t));
        a->bnd.k = malloc((size_t)B * sizeof(int64_t));
        a->bnd.m = malloc((size_t)B * sizeof(double));
    }
    if (!a->p || !a->start || !a->order || (a->o->ties && !a->lorder) || !a->in || !a->hist || !a->u ||
        !a->u_prev || !a->gof || !a->cd || !a->crw || !a->tn || !a->tk || !a->tm || (a->KW > 0 && !a->t0) ||
        (a->do_tuples && (!a->tp || !a->tstart || !a->tcount)) ||
        (a->do_boundary && (!a->bnd.n || !a->bnd.k || !a->bnd.m)))
        return FLS_ERR_OUT_OF_MEMORY;
    return FLS_OK;
}

static void ta_free(tok_audit *a)
{
    free(a->t0);
    free(a->tp);
    free(a->tstart);
    free(a->tcount);
    free(a->ccount);
    free(a->bnd.n);
    free(a->bnd.k);
    free(a->bnd.m);
    free(a->p);
    free(a->start);
    free(a->order);
    free(a->lorder);
    free(a->in);
    free(a->hist);
    free(a->u);
    free(a->u_prev);
    free(a->gof);
    free(a->cd);
    free(a->crw);
    free(a->tn);
    free(a->tk);
    free(a->tm);
    free(a->ties.n);
    free(a->ties.k);
    free(a->ties.m);
}

/* Without replacement: the cells of the conditional test, sized on the
 * transforms an exact sampler gives (N (min(K_b, support) - 1) per row). */
static fls_status ta_cond_cells(tok_audit *a)
{
    int64_t n_cond_max = 0;
    for (int64_t b = 0; b < a->B; b++) {
        const double T = row_T(a, b);
        fls_stats_rule rr;
        int64_t K_b = 1;
        fls_stats_support sup;
        fls_status st;
        if ((st = row_rule(a->o->rule, b, a->V, &rr, &K_b)) != FLS_OK ||
            (st = fls_stats_probs_rule_f32(a->logits + b * a->ld, a->V, T, &rr, a->p, &sup)) != FLS_OK)
            return st;
        const int64_t support = T > 0.0 ? sup.size : 1, kk = K_b < support ? K_b : support;
        n_cond_max += a->N * (kk - 1);
    }
    a->Kc = fls_stats_equal_cells_for(n_cond_max);
    if (!(a->ccount = calloc((size_t)a->Kc, sizeof(int64_t))))
        return FLS_ERR_OUT_OF_MEMORY;
    return FLS_OK;
}

/* Row b's samples into the global test's cells (u[n]: their transforms, -1
 * for one that fails outright), the histogram and tn[b]. */
static void ta_row_gof(tok_audit *a, int64_t b, const int64_t *tok)
{
    a->tn[b] = 0;
    for (int64_t n = 0; n < a->N; n++) {
        const int64_t v = tok[n];
        if (v < 0 || v >= a->V || !(a->p[v] > 0.0)) {
            a->u[n] = -1.0; /* fails outright */
            a->impossible++;
            continue;
        }
        double x = a->start[v] + pit_uniform(a->o->seed, b, n) * a->p[v];
        x = x < 1.0 ? x : nextafter(1.0, 0.0);
        a->u[n] = x;
        int j = (int)(x * a->K);
        a->gof[j < a->K ? j : a->K - 1]++;
        a->hist[v]++;
        a->tn[b]++;
    }
}

/* Without replacement: row b's conditional transforms of positions 2..K and
 * its tuples. */
static fls_status ta_row_pl(tok_audit *a, int64_t b, int64_t K_b, int64_t support)
{
    const int64_t KW = a->KW, V = a->V;
    fls_status st;
    if (a->do_tuples && (st = tuple_cdf(a->p, V, (int)KW, (int)K_b, a->tp, a->tstart)) != FLS_OK)
        return st;
    for (int64_t n = 0; n < a->N; n++) {
        const int64_t *tup = a->tokens + (b * a->N + n) * a->stride;
        double U[64], uu[64];
        const int KK = (int)(KW < 64 ? KW : 64);
        for (int j = 0; j < KK; j++)
            U[j] = pit_uniform(a->o->seed ^ (0x51ED27ull * (uint64_t)(j + 1)), b, n);
        int set =
            KW <= 64 ? fls_stats_pl_transform(a->p, a->start, V, support, tup, KK, (int)K_b, U, uu) : -1;
        if (set < 0) {
            a->imp_pl++;
            continue;
        }
        for (int j = 1; j < KK; j++)
            if (uu[j] >= 0.0) {
                int c = (int)(uu[j] * a->Kc);
                a->ccount[c < a->Kc ? c : a->Kc - 1]++;
                a->n_cond++;
            }
        if (a->do_tuples) {
            int64_t c = fls_stats_pl_cell(tup, V, (int)KW);
            if (c < 0 || !(a->tp[c] > 0.0)) {
                a->imp_pl++;
                continue;
            }
            double x = a->tstart[c] + pit_uniform(a->o->seed ^ 0x7A11E5ull, b, n) * a->tp[c];
            int j = (int)(x * a->K);
            a->tcount[j < a->K ? j : a->K - 1]++;
            a->n_tup++;
        }
    }
    return FLS_OK;
}

/* Row b's samples on the boundary class (the tokens at the cutoff value). */
static void ta_row_boundary(tok_audit *a, int64_t b, const float *l, double T, const int64_t *tok,
                            const fls_stats_support *sup)
{
    double mb = 0.0;
    int64_t kb = 0;
    for (int64_t v = 0; v < a->V; v++) {
        if (l[v] == -INFINITY)
            continue;
        const double x = (double)l[v] / T;
        if (x == sup->cut)
            mb += a->p[v];
    }
    for (int64_t n = 0; n < a->N; n++) {
        const int64_t v = tok[n];
        if (v < 0 || v >= a->V || l[v] == -INFINITY)
            continue;
        const double x = (double)l[v] / T;
        kb += x == sup->cut;
        a->b_out += x == sup->outside;
    }
    a->b_margin = sup->margin < a->b_margin ? sup->margin : a->b_margin;
    a->bnd.n[a->b_rows] = a->tn[b];
    a->bnd.m[a->b_rows] = mb;
    a->bnd.k[a->b_rows] = kb;
    a->b_rows++;
    a->b_exp += (double)a->tn[b] * mb;
    a->b_obs += (double)kb;
}

/* Row b's tails: the count in and the mass of each. */
static void ta_row_tails(tok_audit *a, int64_t b, const int64_t *tok)
{
    for (int t = 0; t < FLS_STATS_N_TAILS; t++) {
        a->tm[b * FLS_STATS_N_TAILS + t] = fls_stats_tail_set(a->p, a->V, fls_stats_tail_t[t], a->in);
        int64_t k = 0;
        for (int64_t n = 0; n < a->N; n++)
            k += a->u[n] >= 0.0 && a->in[tok[n]];
        a->tk[b * FLS_STATS_N_TAILS + t] = k;
    }
}

/* The pair (x, y) of transforms into a side x side grid. */
static void pair_cell(int64_t *grid, int side, double x, double y)
{
    int i = (int)(x * side), j = (int)(y * side);
    grid[(i < side ? i : side - 1) * side + (j < side ? j : side - 1)]++;
}

/* Row b's pairs of draws (2k, 2k + 1) and, for an odd b, the pairs of rows
 * (b - 1, b) draw by draw. */
static void ta_row_pairs(tok_audit *a, int64_t b)
{
    if (a->o->pairs_draws)
        for (int64_t k = 0; k + 1 < a->N; k += 2) {
            if (a->u[k] < 0.0 || a->u[k + 1] < 0.0) {
                a->imp_d++;
                continue;
            }
            pair_cell(a->cd, a->Kd, a->u[k], a->u[k + 1]);
            a->n_pd++;
        }
    if (a->o->pairs_rows && (b & 1))
        for (int64_t n = 0; n < a->N; n++) {
            if (a->u_prev[n] < 0.0 || a->u[n] < 0.0) {
                a->imp_r++;
                continue;
            }
            pair_cell(a->crw, a->Kr, a->u_prev[n], a->u[n]);
            a->n_pr++;
        }
}

/* Row b's tie classes: bit-identical logits of positive probability (T > 0). */
static fls_status ta_row_ties(tok_audit *a, const float *l)
{
    int64_t nl = 0;
    for (int64_t v = 0; v < a->V; v++)
        if (a->p[v] > 0.0) {
            a->lorder[nl].l = l[v];
            a->lorder[nl].i = v;
            nl++;
        }
    qsort(a->lorder, (size_t)nl, sizeof *a->lorder, by_l);
    for (int64_t s = 0; s < nl;) {
        int64_t e = s + 1;
        while (e < nl && a->lorder[e].l == a->lorder[s].l)
            e++;
        if (e - s >= 2) {
            /* the lower half of the class by index (lorder sorts ties by index) */
            const int64_t size = e - s, half = size / 2;
            int64_t nc = 0, low = 0;
            for (int64_t j = s; j < e; j++) {
                nc += a->hist[a->lorder[j].i];
                low += j - s < half ? a->hist[a->lorder[j].i] : 0;
            }
            a->tie_classes++;
            if (nc > 0 && tie_push(&a->ties, nc, (double)half / (double)size, low) != 0)
                return FLS_ERR_OUT_OF_MEMORY;
        }
        s = e;
    }
    return FLS_OK;
}

/* Row b: its exact pmf under its rule, then every test's share of it. */
static fls_status ta_row(tok_audit *a, int64_t b)
{
    const float *l = a->logits + b * a->ld;
    const double T = row_T(a, b);
    fls_stats_rule rr;
    int64_t K_b = 1;
    fls_stats_support sup;
    fls_status st;
    if ((st = row_rule(a->o->rule, b, a->V, &rr, &K_b)) != FLS_OK)
        return st;
    if ((st = fls_stats_probs_rule_f32(l, a->V, T, &rr, a->p, &sup)) != FLS_OK)
        return st;
    row_cdf(a->p, a->V, a->order, a->start);
    const int64_t support = T > 0.0 ? sup.size : 1;
    const int64_t *tok = a->tokens + b * a->N * a->stride;
    if (a->KW > 0) { /* position 1 of each tuple */
        for (int64_t n = 0; n < a->N; n++)
            a->t0[n] = tok[n * a->stride];
        tok = a->t0;
    }
    ta_row_gof(a, b, tok);
    if (a->do_pl && (st = ta_row_pl(a, b, K_b, support)) != FLS_OK)
        return st;
    if (a->do_boundary && T > 0.0 && sup.n_outside > 0) /* something was cut */
        ta_row_boundary(a, b, l, T, tok, &sup);
    if (a->o->tails)
        ta_row_tails(a, b, tok);
    ta_row_pairs(a, b);
    if (a->o->ties && T > 0.0 && (st = ta_row_ties(a, l)) != FLS_OK)
        return st;
    for (int64_t n = 0; n < a->N; n++)
        if (tok[n] >= 0 && tok[n] < a->V)
            a->hist[tok[n]] = 0;
    double *sw = a->u_prev;
    a->u_prev = a->u;
    a->u = sw;
    return FLS_OK;
}

/* ---- the rows ---- */

static fls_status ta_emit_gof(const tok_audit *a, fls_audit_row *row)
{
    char note[112];
    snprintf(note, sizeof note, "transform seed %llu", (unsigned long long)a->o->seed);
    row_init(row, a->name, "gof", a->V, a->n_all, a->alpha);
    snprintf(row->kind, sizeof row->kind, "gof");
    fls_status st = fls_audit_equal_cells(a->gof, a->K, a->impossible, a->alpha, row);
    if (st != FLS_OK)
        return st;
    snprintf(row->note, sizeof row->note, "%.40s; %lld sample(s) on zero-probability tokens", note,
             (long long)a->impossible);
    return FLS_OK;
}

/* The tail test at fls_stats_tail_t[t]. */
static fls_status ta_emit_tail(const tok_audit *a, int t, fls_audit_row *row)
{
    const int64_t B = a->B;
    char nm[16];
    snprintf(nm, sizeof nm, "tail%d", (int)fls_stats_tail_t[t]);
    row_init(row, a->name, nm, a->V, a->n_all, a->alpha);
    snprintf(row->kind, sizeof row->kind, "tail");
    int64_t *kk = malloc((size_t)B * sizeof(int64_t));
    double *mm = malloc((size_t)B * sizeof(double));
    fls_status st = FLS_ERR_OUT_OF_MEMORY;
    if (!kk || !mm)
        goto done;
    double expected = 0.0, obs = 0.0, mu = 0.0;
    int64_t ntot = 0;
    for (int64_t b = 0; b < B; b++) {
        kk[b] = a->tk[b * FLS_STATS_N_TAILS + t];
        mm[b] = a->tm[b * FLS_STATS_N_TAILS + t];
        expected += (double)a->tn[b] * mm[b];
        obs += (double)kk[b];
        ntot += a->tn[b];
    }
    int bonf = 0;
    double pv = fls_stats_binsum_test((int)B, a->tn, mm, kk, &bonf);
    if (isnan(pv))
        goto done;
    fls_stats_tail_resolution(a->tn, mm, B, a->alpha, FLS_STATS_POWER, &row->deficit_caught,
                              &row->excess_caught);
    mu = ntot > 0 ? expected / (double)ntot : 0.0;
    row->tail_t = fls_stats_tail_t[t];
    row->tail_mass = mu;
    row->expected = expected;
    row->observed = obs;
    double var = expected * (1.0 - mu);
    row->chi2 = var > 0.0 ? (obs - expected) * (obs - expected) / var : 0.0;
    row->dof = 1;
    row->p = a->impossible ? 0.0 : pv;
    row->pass = !a->impossible && pv >= a->alpha;
    snprintf(row->note, sizeof row->note, "exact %s%s", B > 1 ? "sum of binomials over rows" : "binomial",
             bonf ? " (Bonferroni over rows: too many to convolve)" : "");
    (void)fls_audit_tail_untested(row); /* nothing detectable: not tested */
    st = FLS_OK;
done:
    free(kk);
    free(mm);
    return st;
}

/* A pairs test: n_pairs pairs (imp failing outright) on a side x side grid;
 * none (have_pairs 0) tests nothing: the row is not tested. */
static fls_status ta_emit_pairs(const tok_audit *a, const char *test, int have_pairs, const char *nothing,
                                const int64_t *grid, int side, int64_t imp, int64_t n_pairs, const char *what,
                                fls_audit_row *row)
{
    row_init(row, a->name, test, a->V, a->n_all, a->alpha);
    snprintf(row->kind, sizeof row->kind, "pairs");
    if (!have_pairs) {
        row->chi2 = NAN;
        fls_audit_row_untested(row, nothing);
        return FLS_OK;
    }
    fls_status st = fls_audit_equal_cells(grid, side * side, imp, a->alpha, row);
    if (st != FLS_OK)
        return st;
    snprintf(row->note, sizeof row->note, "%lld pairs (%s) on a %dx%d grid of u", (long long)n_pairs, what,
             side, side);
    return FLS_OK;
}

static fls_status ta_emit_ties(const tok_audit *a, fls_audit_row *row)
{
    const tie_list *ties = &a->ties;
    row_init(row, a->name, "ties", a->V, a->n_all, a->alpha);
    snprintf(row->kind, sizeof row->kind, "ties");
    double expected = 0.0, obs = 0.0, s0 = 0.0;
    for (size_t c = 0; c < ties->len; c++) {
        expected += (double)ties->n[c] * ties->m[c];
        obs += (double)ties->k[c];
        s0 += (double)ties->n[c] * ties->m[c] * (1.0 - ties->m[c]);
    }
    row->expected = expected;
    row->observed = obs;
    row->dof = 1;
    if (ties->len == 0) {
        row->chi2 = NAN;
        fls_audit_row_untested(row, a->tie_classes ? "tie classes never sampled"
                                                   : "no tied logits (at T > 0) in any row");
        return FLS_OK;
    }
    int bonf = 0;
    double pv = fls_stats_binsum_test((int)ties->len, ties->n, ties->m, ties->k, &bonf);
    if (isnan(pv))
        return FLS_ERR_OUT_OF_MEMORY;
    row->chi2 = s0 > 0.0 ? (obs - expected) * (obs - expected) / s0 : 0.0;
    row->p = pv;
    row->pass = pv >= a->alpha;
    snprintf(row->note, sizeof row->note,
             "%lld tie class(es): samples on each class's lower half vs its share, exact",
             (long long)ties->len);
    return FLS_OK;
}

static fls_status ta_emit_boundary(const tok_audit *a, fls_audit_row *row)
{
    row_init(row, a->name, "boundary", a->V, a->n_all, a->alpha);
    snprintf(row->kind, sizeof row->kind, "boundary");
    row->expected = a->b_exp;
    row->observed = a->b_obs;
    row->dof = 1;
    if (a->b_rows == 0) {
        row->chi2 = NAN;
        fls_audit_row_untested(row, "no row's rule cut a token (or T = 0)");
        return FLS_OK;
    }
    const bnd_list *bnd = &a->bnd;
    int bonf = 0;
    double pv = fls_stats_binsum_test((int)a->b_rows, bnd->n, bnd->m, bnd->k, &bonf);
    if (isnan(pv))
        return FLS_ERR_OUT_OF_MEMORY;
    double var = 0.0;
    for (int64_t i = 0; i < a->b_rows; i++)
        var += (double)bnd->n[i] * bnd->m[i] * (1.0 - bnd->m[i]);
    fls_stats_tail_resolution(bnd->n, bnd->m, a->b_rows, a->alpha, FLS_STATS_POWER, &row->deficit_caught,
                              &row->excess_caught);
    row->chi2 = var > 0.0 ? (a->b_obs - a->b_exp) * (a->b_obs - a->b_exp) / var : 0.0;
    row->p = a->b_out ? 0.0 : pv;
    row->pass = !a->b_out && pv >= a->alpha;
    snprintf(row->note, sizeof row->note,
             "class at the cutoff vs its mass, exact; %lld just outside; decisions >= %.2g from "
             "thresholds",
             (long long)a->b_out, a->b_margin);
    return FLS_OK;
}

/* pl-cond and pl-tuples (two rows). */
static fls_status ta_emit_pl(const tok_audit *a, fls_audit_row *rows)
{
    fls_audit_row *row = &rows[0];
    fls_status st;
    row_init(row, a->name, "pl-cond", a->V, a->n_all, a->alpha);
    snprintf(row->kind, sizeof row->kind, "pl");
    if (a->n_cond == 0 && a->imp_pl == 0) {
        row->chi2 = NAN;
        fls_audit_row_untested(row, "no support beyond the first position");
    } else {
        if ((st = fls_audit_equal_cells(a->ccount, a->Kc, a->imp_pl, a->alpha, row)) != FLS_OK)
            return st;
        snprintf(row->note, sizeof row->note, "%lld transforms (positions 2..%d); %lld impossible tuple(s)",
                 (long long)a->n_cond, (int)a->KW, (long long)a->imp_pl);
    }
    row = &rows[1];
    row_init(row, a->name, "pl-tuples", a->V, a->n_all, a->alpha);
    snprintf(row->kind, sizeof row->kind, "pl");
    if (!a->do_tuples) {
        row->chi2 = NAN;
        fls_audit_row_untested(row, "(V + 1)^K > 65536 tuples: not enumerated (pl-cond tests them)");
        return FLS_OK;
    }
    if ((st = fls_audit_equal_cells(a->tcount, a->K, a->imp_pl, a->alpha, row)) != FLS_OK)
        return st;
    snprintf(row->note, sizeof row->note, "%lld ordered tuples in %lld cells of each row's tuple pmf",
             (long long)a->n_tup, (long long)a->tcells);
    return FLS_OK;
}

/* Every row of the audit, in the order of fls_tokens.h; their count in *n. */
static fls_status ta_emit(const tok_audit *a, fls_audit_row *rows, size_t *n)
{
    const fls_tokens_options *o = a->o;
    size_t r = 0;
    fls_status st;
    if ((st = ta_emit_gof(a, &rows[r++])) != FLS_OK)
        return st;
    if (o->tails)
        for (int t = 0; t < FLS_STATS_N_TAILS; t++)
            if ((st = ta_emit_tail(a, t, &rows[r++])) != FLS_OK)
                return st;
    if (o->pairs_draws &&
        (st = ta_emit_pairs(a, "pairs-draws", a->N >= 2, "one draw per row: no pairs of draws", a->cd, a->Kd,
                            a->imp_d, a->n_pd, "draw 2k, 2k+1", &rows[r++])) != FLS_OK)
        return st;
    if (o->pairs_rows && (st = ta_emit_pairs(a, "pairs-rows", a->B >= 2, "one row: no pairs of rows", a->crw,
                                             a->Kr, a->imp_r, a->n_pr, "row 2i, 2i+1", &rows[r++])) != FLS_OK)
        return st;
    if (o->ties && (st = ta_emit_ties(a, &rows[r++])) != FLS_OK)
        return st;
    if (a->do_boundary && (st = ta_emit_boundary(a, &rows[r++])) != FLS_OK)
        return st;
    if (a->do_pl) {
        if ((st = ta_emit_pl(a, &rows[r])) != FLS_OK)
            return st;
        r += 2;
    }
    *n = r;
    return FLS_OK;
}

/* The inputs' sizes and every row's temperature and rule; what runs. */
static fls_status ta_setup(tok_audit *a)
{
    const fls_tokens_options *o = a->o;
    a->KW = rule_K(o->rule);
    a->stride = a->KW > 0 ? a->KW : 1;
    const int64_t B = a->B, V = a->V, N = a->N;
    if (B < 1 || V < 1 || N < 1 || a->ld < V || B > INT64_MAX / N || B * N > INT64_MAX / a->stride)
        return FLS_ERR_SIZE;
    const int n_tests = fls_tokens_test_count(o);
    a->alpha = o->alpha > 0.0 ? o->alpha
                              : fls_stats_bonferroni(o->budget > 0.0 ? o->budget : FLS_STATS_BUDGET, n_tests);
    a->name = o->name ? o->name : "tokens";
    for (int64_t b = 0; b < B; b++) {
        float T = a->temperature ? a->temperature[b] : a->temperature_value;
        if (!(isfinite(T) && T >= 0.0f))
            return FLS_ERR_TEMPERATURE;
        fls_stats_rule rr;
        int64_t kb;
        fls_status rst = row_rule(o->rule, b, V, &rr, &kb);
        if (rst != FLS_OK)
            return rst;
    }
    a->do_boundary = o->boundary && rule_truncates(o->rule);
    a->do_pl = a->KW >= 2;
    a->tcells = a->do_pl ? fls_stats_pl_cells(V, (int)a->KW) : -1;
    a->do_tuples = a->do_pl && a->tcells > 0 && a->tcells <= ((int64_t)1 << 16);
    /* sizes of the pooled tests */
    a->n_all = B * N;
    a->K = fls_stats_equal_cells_for(a->n_all);
    a->Kd = fls_stats_pair_side(B * (N / 2));
    a->Kr = fls_stats_pair_side((B / 2) * N);
    a->b_margin = INFINITY;
    return FLS_OK;
}

fls_status fls_audit_tokens(const float *logits, int64_t B, int64_t V, int64_t ld, const float *temperature,
                            float temperature_value, const int64_t *tokens, int64_t N,
                            const fls_tokens_options *o, fls_audit_row *rows, size_t *n_rows)
{
    if (!logits || !tokens || !rows || !n_rows)
        return FLS_ERR_NULL;
    fls_tokens_options def;
    if (!o) {
        fls_tokens_options_default(&def);
        o = &def;
    }
    tok_audit a;
    memset(&a, 0, sizeof a);
    a.logits = logits;
    a.B = B;
    a.V = V;
    a.ld = ld;
    a.N = N;
    a.temperature = temperature;
    a.temperature_value = temperature_value;
    a.tokens = tokens;
    a.o = o;
    fls_status st = ta_setup(&a);
    if (st != FLS_OK)
        return st;
    if ((st = ta_alloc(&a)) == FLS_OK && (!a.do_pl || (st = ta_cond_cells(&a)) == FLS_OK)) {
        for (int64_t b = 0; b < B && st == FLS_OK; b++)
            st = ta_row(&a, b);
        if (st == FLS_OK)
            st = ta_emit(&a, rows, n_rows);
    }
    ta_free(&a);
    return st;
}
