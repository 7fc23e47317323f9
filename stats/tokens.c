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
#include "fls_tokens.h"

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

/* Row b's rule as the reference sees it; FLS_ERR_PARAM for a value the
 * library refuses (or a registry rule the audit does not know). */
static fls_status row_rule(const fls_params *r, int64_t b, int64_t V, fls_stats_rule *out, int64_t *K_b)
{
    fls_stats_rule_off(out);
    *K_b = 1;
    if (!r)
        return FLS_OK;
    out->min_p = (double)(r->row_min_p ? r->row_min_p[b] : r->min_p);
    out->top_k = r->row_top_k ? r->row_top_k[b] : r->top_k;
    out->top_p = (double)(r->row_top_p ? r->row_top_p[b] : r->top_p);
    if (r->filter) {
        if (strcmp(r->filter, "top-nsigma") != 0)
            return FLS_ERR_PARAM;
        out->nsigma = r->row_filter_value ? r->row_filter_value[b] : r->filter_value;
    } else if (r->row_filter_value) {
        return FLS_ERR_PARAM;
    }
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
        if (!rows[k].pass && (!test || (slash && !strcmp(slash + 1, test))))
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
    const int64_t KW = rule_K(o->rule);     /* without replacement: positions per draw (0: off) */
    const int64_t stride = KW > 0 ? KW : 1; /* int64 per draw in tokens */
    if (B < 1 || V < 1 || N < 1 || ld < V || B > INT64_MAX / N || B * N > INT64_MAX / stride)
        return FLS_ERR_SIZE;
    const int n_tests = fls_tokens_test_count(o);
    const double alpha = o->alpha > 0.0
                             ? o->alpha
                             : fls_stats_bonferroni(o->budget > 0.0 ? o->budget : FLS_STATS_BUDGET, n_tests);
    const char *name = o->name ? o->name : "tokens";
    for (int64_t b = 0; b < B; b++) {
        float T = temperature ? temperature[b] : temperature_value;
        if (!(isfinite(T) && T >= 0.0f))
            return FLS_ERR_TEMPERATURE;
        fls_stats_rule rr;
        int64_t kb;
        fls_status rst = row_rule(o->rule, b, V, &rr, &kb);
        if (rst != FLS_OK)
            return rst;
    }
    const int do_boundary = o->boundary && rule_truncates(o->rule);
    const int do_pl = KW >= 2;
    const int64_t tcells = do_pl ? fls_stats_pl_cells(V, (int)KW) : -1;
    const int do_tuples = do_pl && tcells > 0 && tcells <= ((int64_t)1 << 16);

    /* sizes of the pooled tests */
    const int64_t n_all = B * N;
    const int K = fls_stats_equal_cells_for(n_all);
    const int64_t pairs_d = B * (N / 2), pairs_r = (B / 2) * N;
    const int Kd = fls_stats_pair_side(pairs_d), Kr = fls_stats_pair_side(pairs_r);
    /* the conditional positions: at most (K - 1) per draw; cells sized on the count of transforms seen */
    int Kc = 0;

    fls_status st = FLS_ERR_OUT_OF_MEMORY;
    double *p = malloc((size_t)V * sizeof(double)), *start = malloc((size_t)V * sizeof(double));
    idx_p *order = malloc((size_t)V * sizeof(idx_p));
    idx_l *lorder = o->ties ? malloc((size_t)V * sizeof(idx_l)) : NULL;
    uint8_t *in = malloc((size_t)V);
    int64_t *hist = calloc((size_t)V, sizeof(int64_t));
    double *u = malloc((size_t)N * sizeof(double)), *u_prev = malloc((size_t)N * sizeof(double));
    int64_t *gof = calloc((size_t)K, sizeof(int64_t));
    int64_t *cd = calloc((size_t)(Kd * Kd), sizeof(int64_t)),
            *crw = calloc((size_t)(Kr * Kr), sizeof(int64_t));
    int64_t *tn = malloc((size_t)B * sizeof(int64_t)),
            *tk = malloc((size_t)(B * FLS_STATS_N_TAILS) * sizeof(int64_t));
    double *tm = malloc((size_t)(B * FLS_STATS_N_TAILS) * sizeof(double));
    int64_t *t0 = KW > 0 ? malloc((size_t)N * sizeof(int64_t)) : NULL;
    double *tp = do_tuples ? malloc((size_t)tcells * sizeof(double)) : NULL;
    double *tstart = do_tuples ? malloc((size_t)tcells * sizeof(double)) : NULL;
    int64_t *tcount = do_tuples ? calloc((size_t)K, sizeof(int64_t)) : NULL;
    bnd_list bnd = {0};
    if (do_boundary) {
        bnd.n = malloc((size_t)B * sizeof(int64_t));
        bnd.k = malloc((size_t)B * sizeof(int64_t));
        bnd.m = malloc((size_t)B * sizeof(double));
    }
    int64_t *ccount = NULL;
    tie_list ties = {0};
    int64_t impossible = 0, imp_d = 0, imp_r = 0, n_pd = 0, n_pr = 0, tie_classes = 0;
    int64_t imp_pl = 0, n_cond = 0, n_tup = 0, b_out = 0, b_rows = 0;
    double b_exp = 0.0, b_obs = 0.0, b_margin = INFINITY;
    if (!p || !start || !order || (o->ties && !lorder) || !in || !hist || !u || !u_prev || !gof || !cd ||
        !crw || !tn || !tk || !tm || (KW > 0 && !t0) || (do_tuples && (!tp || !tstart || !tcount)) ||
        (do_boundary && (!bnd.n || !bnd.k || !bnd.m)))
        goto done;
    if (do_pl) {
        /* the conditional transforms an exact sampler gives: N (min(K_b, support) - 1) per row */
        int64_t n_cond_max = 0;
        for (int64_t b = 0; b < B; b++) {
            const double T = temperature ? (double)temperature[b] : (double)temperature_value;
            fls_stats_rule rr;
            int64_t K_b = 1;
            fls_stats_support sup;
            if ((st = row_rule(o->rule, b, V, &rr, &K_b)) != FLS_OK ||
                (st = fls_stats_probs_rule_f32(logits + b * ld, V, T, &rr, p, &sup)) != FLS_OK)
                goto done;
            const int64_t support = T > 0.0 ? sup.size : 1, kk = K_b < support ? K_b : support;
            n_cond_max += N * (kk - 1);
        }
        Kc = fls_stats_equal_cells_for(n_cond_max);
        st = FLS_ERR_OUT_OF_MEMORY;
        if (!(ccount = calloc((size_t)Kc, sizeof(int64_t))))
            goto done;
    }

    for (int64_t b = 0; b < B; b++) {
        const float *l = logits + b * ld;
        const double T = temperature ? (double)temperature[b] : (double)temperature_value;
        fls_stats_rule rr;
        int64_t K_b = 1;
        fls_stats_support sup;
        if ((st = row_rule(o->rule, b, V, &rr, &K_b)) != FLS_OK)
            goto done;
        if ((st = fls_stats_probs_rule_f32(l, V, T, &rr, p, &sup)) != FLS_OK)
            goto done;
        row_cdf(p, V, order, start);
        const int64_t support = T > 0.0 ? sup.size : 1;
        const int64_t *tok = tokens + b * N * stride;
        if (KW > 0) {
            for (int64_t n = 0; n < N; n++)
                t0[n] = tok[n * stride];
            tok = t0;
        }
        tn[b] = 0;
        for (int64_t n = 0; n < N; n++) {
            const int64_t v = tok[n];
            if (v < 0 || v >= V || !(p[v] > 0.0)) {
                u[n] = -1.0; /* fails outright */
                impossible++;
                continue;
            }
            double x = start[v] + pit_uniform(o->seed, b, n) * p[v];
            x = x < 1.0 ? x : nextafter(1.0, 0.0);
            u[n] = x;
            int j = (int)(x * K);
            gof[j < K ? j : K - 1]++;
            hist[v]++;
            tn[b]++;
        }
        /* without replacement: the conditional transforms of positions 2..K, the tuples */
        if (do_pl) {
            if (do_tuples && (st = tuple_cdf(p, V, (int)KW, (int)K_b, tp, tstart)) != FLS_OK)
                goto done;
            for (int64_t n = 0; n < N; n++) {
                const int64_t *tup = tokens + (b * N + n) * stride;
                double U[64], uu[64];
                const int KK = (int)(KW < 64 ? KW : 64);
                for (int j = 0; j < KK; j++)
                    U[j] = pit_uniform(o->seed ^ (0x51ED27ull * (uint64_t)(j + 1)), b, n);
                int set =
                    KW <= 64 ? fls_stats_pl_transform(p, start, V, support, tup, KK, (int)K_b, U, uu) : -1;
                if (set < 0) {
                    imp_pl++;
                    continue;
                }
                for (int j = 1; j < KK; j++)
                    if (uu[j] >= 0.0) {
                        int c = (int)(uu[j] * Kc);
                        ccount[c < Kc ? c : Kc - 1]++;
                        n_cond++;
                    }
                if (do_tuples) {
                    int64_t c = fls_stats_pl_cell(tup, V, (int)KW);
                    if (c < 0 || !(tp[c] > 0.0)) {
                        imp_pl++;
                        continue;
                    }
                    double x = tstart[c] + pit_uniform(o->seed ^ 0x7A11E5ull, b, n) * tp[c];
                    int j = (int)(x * K);
                    tcount[j < K ? j : K - 1]++;
                    n_tup++;
                }
            }
        }
        /* the boundary class: tokens at the cutoff value, when something was cut */
        if (do_boundary && T > 0.0 && sup.n_outside > 0) {
            double mb = 0.0;
            int64_t kb = 0;
            for (int64_t v = 0; v < V; v++) {
                if (l[v] == -INFINITY)
                    continue;
                const double x = (double)l[v] / T;
                if (x == sup.cut)
                    mb += p[v];
            }
            for (int64_t n = 0; n < N; n++) {
                const int64_t v = tok[n];
                if (v < 0 || v >= V || l[v] == -INFINITY)
                    continue;
                const double x = (double)l[v] / T;
                kb += x == sup.cut;
                b_out += x == sup.outside;
            }
            b_margin = sup.margin < b_margin ? sup.margin : b_margin;
            bnd.n[b_rows] = tn[b];
            bnd.m[b_rows] = mb;
            bnd.k[b_rows] = kb;
            b_rows++;
            b_exp += (double)tn[b] * mb;
            b_obs += (double)kb;
        }
        /* tails: per row, the count in and the mass of its tail */
        if (o->tails)
            for (int t = 0; t < FLS_STATS_N_TAILS; t++) {
                tm[b * FLS_STATS_N_TAILS + t] = fls_stats_tail_set(p, V, fls_stats_tail_t[t], in);
                int64_t k = 0;
                for (int64_t n = 0; n < N; n++)
                    k += u[n] >= 0.0 && in[tok[n]];
                tk[b * FLS_STATS_N_TAILS + t] = k;
            }
        /* pairs of draws (2k, 2k + 1) */
        if (o->pairs_draws)
            for (int64_t k = 0; k + 1 < N; k += 2) {
                if (u[k] < 0.0 || u[k + 1] < 0.0) {
                    imp_d++;
                    continue;
                }
                int x = (int)(u[k] * Kd), y = (int)(u[k + 1] * Kd);
                cd[(x < Kd ? x : Kd - 1) * Kd + (y < Kd ? y : Kd - 1)]++;
                n_pd++;
            }
        /* pairs of rows (2i, 2i + 1), draw by draw */
        if (o->pairs_rows && (b & 1))
            for (int64_t n = 0; n < N; n++) {
                if (u_prev[n] < 0.0 || u[n] < 0.0) {
                    imp_r++;
                    continue;
                }
                int x = (int)(u_prev[n] * Kr), y = (int)(u[n] * Kr);
                crw[(x < Kr ? x : Kr - 1) * Kr + (y < Kr ? y : Kr - 1)]++;
                n_pr++;
            }
        /* tie classes: bit-identical logits of positive probability (T > 0) */
        if (o->ties && T > 0.0) {
            int64_t nl = 0;
            for (int64_t v = 0; v < V; v++)
                if (p[v] > 0.0) {
                    lorder[nl].l = l[v];
                    lorder[nl].i = v;
                    nl++;
                }
            qsort(lorder, (size_t)nl, sizeof *lorder, by_l);
            for (int64_t a = 0; a < nl;) {
                int64_t e = a + 1;
                while (e < nl && lorder[e].l == lorder[a].l)
                    e++;
                if (e - a >= 2) {
                    /* the lower half of the class by index (lorder sorts ties by index) */
                    const int64_t size = e - a, half = size / 2;
                    int64_t nc = 0, low = 0;
                    for (int64_t j = a; j < e; j++) {
                        nc += hist[lorder[j].i];
                        low += j - a < half ? hist[lorder[j].i] : 0;
                    }
                    tie_classes++;
                    if (nc > 0 && tie_push(&ties, nc, (double)half / (double)size, low) != 0) {
                        st = FLS_ERR_OUT_OF_MEMORY;
                        goto done;
                    }
                }
                a = e;
            }
        }
        for (int64_t n = 0; n < N; n++)
            if (tok[n] >= 0 && tok[n] < V)
                hist[tok[n]] = 0;
        double *sw = u_prev;
        u_prev = u;
        u = sw;
    }

    /* the rows */
    size_t r = 0;
    char note[112];
    snprintf(note, sizeof note, "transform seed %llu", (unsigned long long)o->seed);
    row_init(&rows[r], name, "gof", V, n_all, alpha);
    snprintf(rows[r].kind, sizeof rows[r].kind, "gof");
    if ((st = fls_audit_equal_cells(gof, K, impossible, alpha, &rows[r])) != FLS_OK)
        goto done;
    snprintf(rows[r].note, sizeof rows[r].note, "%.40s; %lld sample(s) on zero-probability tokens", note,
             (long long)impossible);
    r++;
    if (o->tails)
        for (int t = 0; t < FLS_STATS_N_TAILS; t++) {
            char nm[16];
            snprintf(nm, sizeof nm, "tail%d", (int)fls_stats_tail_t[t]);
            fls_audit_row *row = &rows[r++];
            row_init(row, name, nm, V, n_all, alpha);
            snprintf(row->kind, sizeof row->kind, "tail");
            int64_t *kk = malloc((size_t)B * sizeof(int64_t));
            double *mm = malloc((size_t)B * sizeof(double));
            if (!kk || !mm) {
                free(kk);
                free(mm);
                st = FLS_ERR_OUT_OF_MEMORY;
                goto done;
            }
            double expected = 0.0, obs = 0.0, mu = 0.0;
            int64_t ntot = 0;
            for (int64_t b = 0; b < B; b++) {
                kk[b] = tk[b * FLS_STATS_N_TAILS + t];
                mm[b] = tm[b * FLS_STATS_N_TAILS + t];
                expected += (double)tn[b] * mm[b];
                obs += (double)kk[b];
                ntot += tn[b];
            }
            int bonf = 0;
            double pv = fls_stats_binsum_test((int)B, tn, mm, kk, &bonf);
            if (isnan(pv)) {
                free(kk);
                free(mm);
                st = FLS_ERR_OUT_OF_MEMORY;
                goto done;
            }
            fls_stats_tail_resolution(tn, mm, B, alpha, FLS_STATS_POWER, &row->deficit_caught,
                                      &row->excess_caught);
            mu = ntot > 0 ? expected / (double)ntot : 0.0;
            row->tail_t = fls_stats_tail_t[t];
            row->tail_mass = mu;
            row->expected = expected;
            row->observed = obs;
            double var = expected * (1.0 - mu);
            row->chi2 = var > 0.0 ? (obs - expected) * (obs - expected) / var : 0.0;
            row->dof = 1;
            row->p = impossible ? 0.0 : pv;
            row->pass = !impossible && pv >= alpha;
            snprintf(row->note, sizeof row->note, "exact %s%s",
                     B > 1 ? "sum of binomials over rows" : "binomial",
                     bonf ? " (Bonferroni over rows: too many to convolve)" : "");
            free(kk);
            free(mm);
        }
    if (o->pairs_draws) {
        fls_audit_row *row = &rows[r++];
        row_init(row, name, "pairs-draws", V, n_all, alpha);
        snprintf(row->kind, sizeof row->kind, "pairs");
        if (N < 2) {
            row->p = 1.0;
            row->pass = 1;
            snprintf(row->note, sizeof row->note, "one draw per row: no pairs, nothing tested");
        } else {
            if ((st = fls_audit_equal_cells(cd, Kd * Kd, imp_d, alpha, row)) != FLS_OK)
                goto done;
            snprintf(row->note, sizeof row->note, "%lld pairs (draw 2k, 2k+1) on a %dx%d grid of u",
                     (long long)n_pd, Kd, Kd);
        }
    }
    if (o->pairs_rows) {
        fls_audit_row *row = &rows[r++];
        row_init(row, name, "pairs-rows", V, n_all, alpha);
        snprintf(row->kind, sizeof row->kind, "pairs");
        if (B < 2) {
            row->p = 1.0;
            row->pass = 1;
            snprintf(row->note, sizeof row->note, "one row: no pairs of rows, nothing tested");
        } else {
            if ((st = fls_audit_equal_cells(crw, Kr * Kr, imp_r, alpha, row)) != FLS_OK)
                goto done;
            snprintf(row->note, sizeof row->note, "%lld pairs (row 2i, 2i+1) on a %dx%d grid of u",
                     (long long)n_pr, Kr, Kr);
        }
    }
    if (o->ties) {
        fls_audit_row *row = &rows[r++];
        row_init(row, name, "ties", V, n_all, alpha);
        snprintf(row->kind, sizeof row->kind, "ties");
        double expected = 0.0, obs = 0.0, s0 = 0.0;
        for (size_t c = 0; c < ties.len; c++) {
            expected += (double)ties.n[c] * ties.m[c];
            obs += (double)ties.k[c];
            s0 += (double)ties.n[c] * ties.m[c] * (1.0 - ties.m[c]);
        }
        row->expected = expected;
        row->observed = obs;
        row->dof = 1;
        if (ties.len == 0) {
            row->p = 1.0;
            row->pass = 1;
            row->chi2 = 0.0;
            snprintf(row->note, sizeof row->note, "%s",
                     tie_classes ? "tie classes never sampled: nothing tested"
                                 : "no tied logits: nothing tested");
        } else {
            int bonf = 0;
            double pv = fls_stats_binsum_test((int)ties.len, ties.n, ties.m, ties.k, &bonf);
            if (isnan(pv)) {
                st = FLS_ERR_OUT_OF_MEMORY;
                goto done;
            }
            row->chi2 = s0 > 0.0 ? (obs - expected) * (obs - expected) / s0 : 0.0;
            row->p = pv;
            row->pass = pv >= alpha;
            snprintf(row->note, sizeof row->note,
                     "%lld tie class(es): samples on each class's lower half vs its share, exact",
                     (long long)ties.len);
        }
    }
    if (do_boundary) {
        fls_audit_row *row = &rows[r++];
        row_init(row, name, "boundary", V, n_all, alpha);
        snprintf(row->kind, sizeof row->kind, "boundary");
        row->expected = b_exp;
        row->observed = b_obs;
        row->dof = 1;
        if (b_rows == 0) {
            row->p = 1.0;
            row->pass = 1;
            row->chi2 = 0.0;
            snprintf(row->note, sizeof row->note, "no row's rule cut a token (or T = 0): nothing tested");
        } else {
            int bonf = 0;
            double pv = fls_stats_binsum_test((int)b_rows, bnd.n, bnd.m, bnd.k, &bonf);
            if (isnan(pv)) {
                st = FLS_ERR_OUT_OF_MEMORY;
                goto done;
            }
            double var = 0.0;
            for (int64_t i = 0; i < b_rows; i++)
                var += (double)bnd.n[i] * bnd.m[i] * (1.0 - bnd.m[i]);
            fls_stats_tail_resolution(bnd.n, bnd.m, b_rows, alpha, FLS_STATS_POWER, &row->deficit_caught,
                                      &row->excess_caught);
            row->chi2 = var > 0.0 ? (b_obs - b_exp) * (b_obs - b_exp) / var : 0.0;
            row->p = b_out ? 0.0 : pv;
            row->pass = !b_out && pv >= alpha;
            snprintf(row->note, sizeof row->note,
                     "class at the cutoff vs its mass, exact; %lld just outside; decisions >= %.2g from "
                     "thresholds",
                     (long long)b_out, b_margin);
        }
    }
    if (do_pl) {
        fls_audit_row *row = &rows[r++];
        row_init(row, name, "pl-cond", V, n_all, alpha);
        snprintf(row->kind, sizeof row->kind, "pl");
        if (n_cond == 0 && imp_pl == 0) {
            row->p = 1.0;
            row->pass = 1;
            snprintf(row->note, sizeof row->note, "no support beyond the first position: nothing tested");
        } else {
            if ((st = fls_audit_equal_cells(ccount, Kc, imp_pl, alpha, row)) != FLS_OK)
                goto done;
            snprintf(row->note, sizeof row->note,
                     "%lld transforms (positions 2..%d); %lld impossible tuple(s)", (long long)n_cond,
                     (int)KW, (long long)imp_pl);
        }
        row = &rows[r++];
        row_init(row, name, "pl-tuples", V, n_all, alpha);
        snprintf(row->kind, sizeof row->kind, "pl");
        if (!do_tuples) {
            row->p = 1.0;
            row->pass = 1;
            snprintf(row->note, sizeof row->note,
                     "(V + 1)^K > 65536 tuples: not enumerated (pl-cond tests them)");
        } else {
            if ((st = fls_audit_equal_cells(tcount, K, imp_pl, alpha, row)) != FLS_OK)
                goto done;
            snprintf(row->note, sizeof row->note, "%lld ordered tuples in %lld cells of each row's tuple pmf",
                     (long long)n_tup, (long long)tcells);
        }
    }
    *n_rows = r;
    st = FLS_OK;
done:
    free(t0);
    free(tp);
    free(tstart);
    free(tcount);
    free(ccount);
    free(bnd.n);
    free(bnd.k);
    free(bnd.m);
    free(p);
    free(start);
    free(order);
    free(lorder);
    free(in);
    free(hist);
    free(u);
    free(u_prev);
    free(gof);
    free(cd);
    free(crw);
    free(tn);
    free(tk);
    free(tm);
    free(ties.n);
    free(ties.k);
    free(ties.m);
    return st;
}
