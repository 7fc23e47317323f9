/*
 * mutants.c — the scenarios and samplers of mutants.h.
 */
#include "tests/stats/mutants.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const mut_scenario_name[MUT_N_SCENARIOS] = {
    "topk", "topk-tie", "topp", "minp", "wr-small", "wr-large", "groups", "group-deep", "merge-ties"};

/* ---- scenarios ---- */

static double hash_u(uint64_t i, uint64_t salt)
{
    uint64_t z = i * 0x9E3779B97F4A7C15ull + salt;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static double hash_normal(uint64_t i, uint64_t salt)
{
    double u = hash_u(i, salt), w = hash_u(i, salt ^ 0x5555);
    return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * w);
}

typedef struct lv {
    double x;
    int64_t i;
} lv;

static int by_x_desc(const void *a, const void *b)
{
    const lv *p = a, *q = b;
    if (p->x != q->x)
        return p->x > q->x ? -1 : 1;
    return p->i < q->i ? -1 : (p->i > q->i);
}

/* Indices of a row sorted by decreasing logit (ties by index). */
static lv *sorted_row(const float *l, int64_t V, double T)
{
    lv *s = malloc((size_t)V * sizeof *s);
    if (!s)
        return NULL;
    for (int64_t v = 0; v < V; v++) {
        s[v].x = l[v] == -INFINITY ? -INFINITY : (double)l[v] / T;
        s[v].i = v;
    }
    qsort(s, (size_t)V, sizeof *s, by_x_desc);
    return s;
}

void mut_make(mut_scenario sc, mut_input *in)
{
    memset(in, 0, sizeof *in);
    fls_params_default(&in->rule);
    int64_t B = 2, V = 256;
    double T = 1.0;
    switch (sc) {
    case MUT_MINP:
        V = 1024, T = 0.7;
        break;
    case MUT_WR_SMALL:
        V = 8;
        break;
    case MUT_WR_LARGE:
        V = 1024;
        break;
    case MUT_GROUPS:
        B = 8;
        break;
    case MUT_GROUP_DEEP:
        B = 1, V = (int64_t)1 << 20;
        break;
    case MUT_MERGE_TIES:
        B = 4, V = 64, T = 0.0;
        break;
    default:
        break;
    }
    in->B = B;
    in->V = V;
    in->logits = malloc((size_t)(B * V) * sizeof(float));
    in->temps = malloc((size_t)B * sizeof(float));
    for (int64_t b = 0; b < B; b++) {
        float *l = in->logits + b * V;
        in->temps[b] = (float)T;
        const uint64_t salt =
            1000 * (uint64_t)sc + (sc == MUT_MERGE_TIES ? (uint64_t)b : 0); /* identical rows */
        for (int64_t v = 0; v < V; v++) {
            const double z = hash_normal((uint64_t)v, salt);
            switch (sc) {
            case MUT_GROUPS:
                l[v] = (float)(0.3 * z - 0.45 * (double)(v / 32));
                break;
            case MUT_GROUP_DEEP: {
                const int64_t h = (int64_t)1 << 19;
                l[v] =
                    v % h == 0 ? 0.0f : (float)(v < h ? -(16.64 + 0.02 * hash_u((uint64_t)v, salt)) : -30.0);
                break;
            }
            case MUT_WR_SMALL:
            case MUT_MERGE_TIES:
                l[v] = (float)z;
                break;
            default:
                l[v] = (float)(1.5 * z);
                break;
            }
        }
        if (sc == MUT_MERGE_TIES) { /* the maximum in shards b % 2 and 2 + b % 2 */
            l[16 * (b % 2) + 7] = 5.0f;
            l[16 * (2 + b % 2) + 3] = 5.0f;
        }
    }
    if (sc == MUT_TOPK_TIE) { /* ranks 10, 11, 12 take rank 10's value (both rows identical) */
        lv *s = sorted_row(in->logits, V, 1.0);
        for (int64_t b = 0; b < B; b++) {
            float *l = in->logits + b * V;
            l[s[10].i] = l[s[11].i] = l[s[9].i];
        }
        free(s);
    }
    fls_params *r = &in->rule;
    switch (sc) {
    case MUT_TOPK:
    case MUT_TOPK_TIE:
        r->top_k = 10;
        in->has_rule = 1;
        break;
    case MUT_TOPP:
    case MUT_MINP: {
        /* the parameter in the middle of its decision gap (fls_stats_rule_center) */
        fls_stats_rule sr, c;
        fls_stats_rule_off(&sr);
        if (sc == MUT_TOPP)
            sr.value[FLS_FILTER_TOP_P] = 0.8;
        else
            sr.value[FLS_FILTER_MIN_P] = 0.05;
        double *ld = malloc((size_t)V * sizeof(double));
        for (int64_t v = 0; v < V; v++)
            ld[v] = in->logits[v];
        fls_stats_rule_center(ld, V, T, &sr, &c);
        free(ld);
        r->top_p = (float)c.value[FLS_FILTER_TOP_P];
        r->min_p = (float)c.value[FLS_FILTER_MIN_P];
        in->has_rule = 1;
        break;
    }
    case MUT_WR_SMALL:
        r->without_replacement_k = 3;
        in->has_rule = 1;
        break;
    case MUT_WR_LARGE:
        r->top_k = 64;
        r->without_replacement_k = 3;
        in->has_rule = 1;
        break;
    case MUT_GROUPS:
        in->group_size = 32;
        break;
    case MUT_GROUP_DEEP:
        in->group_size = (int64_t)1 << 19;
        break;
    case MUT_MERGE_TIES:
        in->shards = 4;
        break;
    default:
        break;
    }
}

void mut_free(mut_input *in)
{
    free(in->logits);
    free(in->temps);
}

int64_t mut_stride(const mut_input *in)
{
    return in->has_rule && in->rule.without_replacement_k > 0 ? in->rule.without_replacement_k : 1;
}

/* Row b's rule for the reference. */
static void row_rule(const mut_input *in, int64_t b, fls_stats_rule *r, int64_t *K)
{
    fls_stats_rule_off(r);
    *K = 1;
    if (!in->has_rule)
        return;
    const fls_params *p = &in->rule;
    r->value[FLS_FILTER_MIN_P] = (double)(p->row_min_p ? p->row_min_p[b] : p->min_p);
    r->value[FLS_FILTER_TOP_K] = (double)(p->row_top_k ? p->row_top_k[b] : p->top_k);
    r->value[FLS_FILTER_TOP_P] = (double)(p->row_top_p ? p->row_top_p[b] : p->top_p);
    *K = p->without_replacement_k > 0 ? p->without_replacement_k : 1;
}

/* ---- exact sampling from q (B x V), K positions without replacement ---- */

static fls_status sample_q(const double *q, int64_t B, int64_t V, int64_t N, int64_t K, int with_replacement,
                           uint64_t seed, int64_t *tokens)
{
    for (int64_t b = 0; b < B; b++) {
        const double *qb = q + b * V;
        int64_t support = 0;
        for (int64_t v = 0; v < V; v++)
            support += qb[v] > 0.0;
        fls_refsampler *s;
        fls_status st = fls_refsampler_create(&s, qb, V, seed * 1000003u + (uint64_t)b);
        if (st != FLS_OK)
            return st;
        for (int64_t n = 0; n < N; n++) {
            int64_t *t = tokens + (b * N + n) * K;
            for (int64_t j = 0; j < K; j++) {
                if (j >= support && !with_replacement) {
                    t[j] = -1;
                    continue;
                }
                int64_t v;
                int rep;
                do { /* sequential Plackett-Luce: a repeat is rejected (unless the mutant keeps it) */
                    v = fls_refsampler_draw(s);
                    rep = 0;
                    for (int64_t i = 0; i < j && !with_replacement; i++)
                        rep |= t[i] == v;
                } while (rep);
                t[j] = v;
            }
        }
        fls_refsampler_destroy(s);
    }
    return FLS_OK;
}

typedef fls_status (*row_probs)(const mut_input *in, int64_t b, double *q);

static fls_status probs_all(const mut_input *in, row_probs f, double *q)
{
    for (int64_t b = 0; b < in->B; b++) {
        fls_status st = f(in, b, q + b * in->V);
        if (st != FLS_OK)
            return st;
    }
    return FLS_OK;
}

static fls_status sample_with(const mut_input *in, row_probs f, int with_replacement, int64_t N,
                              uint64_t seed, int64_t *tokens)
{
    double *q = malloc((size_t)(in->B * in->V) * sizeof(double));
    if (!q)
        return FLS_ERR_OUT_OF_MEMORY;
    fls_status st = probs_all(in, f, q);
    if (st == FLS_OK)
        st = sample_q(q, in->B, in->V, N, mut_stride(in), with_replacement, seed, tokens);
    free(q);
    return st;
}

/* ---- the reference and the rule mutants' distributions ---- */

static fls_status exact_row(const mut_input *in, int64_t b, double *q)
{
    fls_stats_rule r;
    int64_t K;
    row_rule(in, b, &r, &K);
    return fls_stats_probs_rule_f32(in->logits + b * in->V, in->V, (double)in->temps[b], &r, q, NULL);
}

static fls_status topk_plus1_row(const mut_input *in, int64_t b, double *q)
{
    fls_stats_rule r;
    int64_t K;
    row_rule(in, b, &r, &K);
    if (r.value[FLS_FILTER_TOP_K] > 0 && r.value[FLS_FILTER_TOP_K] < (double)in->V)
        r.value[FLS_FILTER_TOP_K] += 1.0; /* the planted error */
    return fls_stats_probs_rule_f32(in->logits + b * in->V, in->V, (double)in->temps[b], &r, q, NULL);
}

/* softmax of x over the tokens with keep[v] */
static void softmax_kept(const float *l, int64_t V, double T, const uint8_t *keep, double *q)
{
    double m = -INFINITY, Z = 0.0;
    for (int64_t v = 0; v < V; v++)
        if (keep[v])
            m = fmax(m, (double)l[v] / T);
    for (int64_t v = 0; v < V; v++) {
        q[v] = keep[v] ? exp((double)l[v] / T - m) : 0.0;
        Z += q[v];
    }
    for (int64_t v = 0; v < V; v++)
        q[v] /= Z;
}

static fls_status topk_drops_ties_row(const mut_input *in, int64_t b, double *q)
{
    const float *l = in->logits + b * in->V;
    const double T = (double)in->temps[b];
    lv *s = sorted_row(l, in->V, T);
    uint8_t *keep = calloc((size_t)in->V, 1);
    if (!s || !keep) {
        free(s);
        free(keep);
        return FLS_ERR_OUT_OF_MEMORY;
    }
    /* the planted error: exactly k tokens by rank, the tie at the k-th value cut by index */
    for (int64_t i = 0; i < in->rule.top_k && i < in->V; i++)
        keep[s[i].i] = s[i].x > -INFINITY;
    softmax_kept(l, in->V, T, keep, q);
    free(s);
    free(keep);
    return FLS_OK;
}

static fls_status topp_exclusive_row(const mut_input *in, int64_t b, double *q)
{
    const float *l = in->logits + b * in->V;
    const double T = (double)in->temps[b];
    fls_status st = fls_stats_probs_temperature_f32(l, in->V, T, q);
    if (st != FLS_OK)
        return st;
    lv *s = sorted_row(l, in->V, T);
    uint8_t *keep = calloc((size_t)in->V, 1);
    if (!s || !keep) {
        free(s);
        free(keep);
        return FLS_ERR_OUT_OF_MEMORY;
    }
    /* the planted error: a token is kept while the mass up to and including it
     * is below p (exclusive), so the token that reaches p is dropped */
    double A = 0.0;
    for (int64_t i = 0; i < in->V; i++) {
        const double qi = q[s[i].i];
        if (i > 0 && !(A + qi < (double)in->rule.top_p))
            break;
        keep[s[i].i] = 1;
        A += qi;
    }
    softmax_kept(l, in->V, T, keep, q);
    free(s);
    free(keep);
    return FLS_OK;
}

#define MINP_TILE 128

static fls_status minp_tile_max_row(const mut_input *in, int64_t b, double *q)
{
    const float *l = in->logits + b * in->V;
    const double T = (double)in->temps[b], lp = log((double)in->rule.min_p);
    uint8_t *keep = calloc((size_t)in->V, 1);
    if (!keep)
        return FLS_ERR_OUT_OF_MEMORY;
    /* the planted error: each tile of 128 tokens judges min-p against its own maximum */
    for (int64_t t0 = 0; t0 < in->V; t0 += MINP_TILE) {
        const int64_t t1 = t0 + MINP_TILE < in->V ? t0 + MINP_TILE : in->V;
        double m = -INFINITY;
        for (int64_t v = t0; v < t1; v++)
            m = fmax(m, (double)l[v] / T);
        for (int64_t v = t0; v < t1; v++)
            keep[v] = l[v] > -INFINITY && (double)l[v] / T - m >= lp;
    }
    softmax_kept(l, in->V, T, keep, q);
    free(keep);
    return FLS_OK;
}

fls_status mut_probs_exact(const mut_input *in, double *q)
{
    return probs_all(in, exact_row, q);
}
fls_status mut_probs_topk_plus1(const mut_input *in, double *q)
{
    return probs_all(in, topk_plus1_row, q);
}
fls_status mut_probs_topk_drops_ties(const mut_input *in, double *q)
{
    return probs_all(in, topk_drops_ties_row, q);
}
fls_status mut_probs_topp_exclusive(const mut_input *in, double *q)
{
    return probs_all(in, topp_exclusive_row, q);
}
fls_status mut_probs_minp_tile_max(const mut_input *in, double *q)
{
    return probs_all(in, minp_tile_max_row, q);
}

fls_status mut_alias(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    return sample_with(in, exact_row, 0, N, seed, tokens);
}
fls_status mut_topk_plus1(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    return sample_with(in, topk_plus1_row, 0, N, seed, tokens);
}
fls_status mut_topk_drops_ties(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    return sample_with(in, topk_drops_ties_row, 0, N, seed, tokens);
}
fls_status mut_topp_exclusive(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    return sample_with(in, topp_exclusive_row, 0, N, seed, tokens);
}
fls_status mut_minp_tile_max(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    return sample_with(in, minp_tile_max_row, 0, N, seed, tokens);
}
fls_status mut_pl_with_replacement(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    /* the planted error: positions 2..K drawn from the same pmf, repeats kept */
    return sample_with(in, exact_row, 1, N, seed, tokens);
}

/* ---- our engine ---- */

static void engine_params(const mut_input *in, int64_t N, const uint64_t *seeds, fls_params *p)
{
    *p = in->rule;
    p->temperature = in->temps;
    p->row_seeds = seeds;
    p->draws = N;
    if (in->group_size) {
        p->method = FLS_METHOD_GROUPED;
        p->group_size = in->group_size;
    }
}

fls_status mut_ours(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    fls_context_t *ctx = NULL;
    fls_status st = fls_context_create(&ctx, &cfg);
    if (st != FLS_OK)
        return st;
    uint64_t *seeds = malloc((size_t)in->B * sizeof(uint64_t));
    if (!seeds) {
        fls_context_destroy(ctx);
        return FLS_ERR_OUT_OF_MEMORY;
    }
    for (int64_t b = 0; b < in->B; b++)
        seeds[b] = fls_row_seed(seed, (uint64_t)b);
    fls_matrix L = {in->logits, FLS_DTYPE_F32, in->B, in->V, in->V};
    fls_params p;
    engine_params(in, N, seeds, &p);
    fls_outputs out = {tokens, NULL, NULL};
    st = fls_sample_logits(ctx, &L, &p, &out);
    free(seeds);
    fls_context_destroy(ctx);
    return st;
}

fls_status mut_ours_shards(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    const int64_t S = in->shards > 1 ? in->shards : 4, V = in->V;
    if (S > 16 || S > V)
        return FLS_ERR_PARAM;
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    fls_context_t *ctx = NULL;
    fls_status st = fls_context_create(&ctx, &cfg);
    if (st != FLS_OK)
        return st;
    uint64_t *seeds = malloc((size_t)in->B * sizeof(uint64_t));
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    fls_stream_t *state[16] = {0};
    int order[16];
    if (!seeds || !r) {
        st = FLS_ERR_OUT_OF_MEMORY;
        goto done;
    }
    gsl_rng_set(r, (unsigned long)seed);
    for (int64_t b = 0; b < in->B; b++)
        seeds[b] = fls_row_seed(seed, (uint64_t)b);
    fls_params p;
    engine_params(in, N, seeds, &p);
    for (int j = 0; j < S; j++)
        order[j] = j;
    gsl_ran_shuffle(r, order, (size_t)S, sizeof(int));
    for (int j = 0; j < S && st == FLS_OK; j++) {
        const int64_t v0 = V * j / S, v1 = V * (j + 1) / S;
        fls_stream_t *s = NULL;
        if ((st = fls_stream_create(&s, ctx, in->B, V, &p)) != FLS_OK)
            break;
        fls_matrix Lc = {in->logits + v0, FLS_DTYPE_F32, in->B, v1 - v0, V};
        size_t bytes = 0;
        void *buf = NULL;
        if ((st = fls_stream_feed_logits(s, &Lc, v0)) == FLS_OK &&
            (st = fls_stream_serialize(s, NULL, &bytes)) == FLS_OK) {
            if (!(buf = malloc(bytes)))
                st = FLS_ERR_OUT_OF_MEMORY;
            else if ((st = fls_stream_serialize(s, buf, &bytes)) == FLS_OK)
                st = fls_stream_deserialize(&state[j], ctx, buf, bytes);
        }
        free(buf);
        fls_stream_destroy(s);
    }
    for (int j = 1; j < S && st == FLS_OK; j++) /* merged in a random order */
        st = fls_stream_merge(state[order[0]], state[order[j]]);
    if (st == FLS_OK) {
        fls_outputs out = {tokens, NULL, NULL};
        st = fls_stream_finalize(state[order[0]], &out);
    }
done:
    for (int j = 0; j < S; j++)
        fls_stream_destroy(state[j]);
    if (r)
        gsl_rng_free(r);
    free(seeds);
    fls_context_destroy(ctx);
    return st;
}

/* ---- the grouped mutants ---- */

/* The groups' log-masses of row b in double, and the within-group pmf p (V). */
static fls_status group_masses(const mut_input *in, int64_t b, int fp32, double *L, double *p)
{
    const int64_t V = in->V, g = in->group_size, n = (V + g - 1) / g;
    const float *l = in->logits + b * V;
    const double T = (double)in->temps[b];
    fls_status st = fls_stats_probs_temperature_f32(l, V, T, p);
    if (st != FLS_OK)
        return st;
    float *x = malloc((size_t)g * sizeof(float));
    if (!x)
        return FLS_ERR_OUT_OF_MEMORY;
    for (int64_t k = 0; k < n; k++) {
        const int64_t v0 = k * g, v1 = v0 + g < V ? v0 + g : V;
        if (fp32) {
            for (int64_t v = v0; v < v1; v++)
                x[v - v0] = l[v] / (float)T;
            L[k] = (double)mut_group_lse_f32(x, v1 - v0);
        } else {
            double m = -INFINITY, s = 0.0;
            for (int64_t v = v0; v < v1; v++)
                m = fmax(m, (double)l[v] / T);
            for (int64_t v = v0; v < v1; v++)
                s += exp((double)l[v] / T - m);
            L[k] = m + log(s);
        }
    }
    free(x);
    return FLS_OK;
}

float mut_group_lse_f32(const float *x, int64_t n)
{
    /* online log-sum-exp in fp32 (running max, running sum), in index order */
    float m = -INFINITY, s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        if (x[i] == -INFINITY)
            continue;
        if (x[i] > m) {
            s = (m == -INFINITY ? 0.0f : s * expf(m - x[i])) + 1.0f;
            m = x[i];
        } else {
            s += expf(x[i] - m);
        }
    }
    return m + logf(s);
}

/* q_v = P(group chosen = sel(k(v))) p(v | k(v)): sel maps the group drawn to the one sampled from. */
static fls_status grouped_q(const mut_input *in, int64_t b, int fp32, int shift, double *q)
{
    const int64_t V = in->V, g = in->group_size, n = (V + g - 1) / g;
    double *L = malloc((size_t)n * sizeof(double)), *Pg = malloc((size_t)n * sizeof(double)),
           *mass = calloc((size_t)n, sizeof(double));
    fls_status st = L && Pg && mass ? group_masses(in, b, fp32, L, q) : FLS_ERR_OUT_OF_MEMORY;
    if (st == FLS_OK) {
        st = fls_stats_probs_temperature(L, n, 1.0, Pg); /* softmax of the (possibly wrong) log-masses */
        for (int64_t v = 0; v < V; v++)
            mass[v / g] += q[v];
        for (int64_t v = 0; v < V; v++) {
            const int64_t k = v / g, from = ((k - shift) % n + n) % n; /* group `from` drawn, k sampled */
            q[v] = mass[k] > 0.0 ? Pg[from] * q[v] / mass[k] : 0.0;
        }
    }
    free(L);
    free(Pg);
    free(mass);
    return st;
}

static fls_status wrong_group_row(const mut_input *in, int64_t b, double *q)
{
    return grouped_q(in, b, 0, 1, q); /* the planted error: the token of group k* + 1 */
}

static fls_status lse_fp32_row(const mut_input *in, int64_t b, double *q)
{
    return grouped_q(in, b, 1, 0, q); /* the planted error: L_k summed online in fp32 */
}

fls_status mut_probs_group_wrong_group(const mut_input *in, double *q)
{
    return probs_all(in, wrong_group_row, q);
}
fls_status mut_probs_group_lse_fp32(const mut_input *in, double *q)
{
    return probs_all(in, lse_fp32_row, q);
}
fls_status mut_group_wrong_group(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    return sample_with(in, wrong_group_row, 0, N, seed, tokens);
}
fls_status mut_group_lse_fp32(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    return sample_with(in, lse_fp32_row, 0, N, seed, tokens);
}

/* Gumbel(0, 1) from mt19937 (53-bit uniform) */
static double gumbel(gsl_rng *r)
{
    double u = ((double)(gsl_rng_get(r) >> 5) * 67108864.0 + (double)(gsl_rng_get(r) >> 6) + 0.5) *
               (1.0 / 9007199254740992.0);
    return -log(-log(u));
}

static fls_status reused_groups(const mut_input *in, uint64_t seed, int64_t *groups)
{
    const int64_t V = in->V, g = in->group_size, n = (V + g - 1) / g;
    double *L = malloc((size_t)n * sizeof(double)), *p = malloc((size_t)V * sizeof(double));
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    fls_status st = L && p && r ? FLS_OK : FLS_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < in->B && st == FLS_OK; b++) {
        if ((st = group_masses(in, b, 0, L, p)) != FLS_OK)
            break;
        /* the planted error: one Gumbel per (row, group), the same for every draw */
        gsl_rng_set(r, (unsigned long)(seed * 1000003u + (uint64_t)b));
        double best = -INFINITY;
        groups[b] = -1;
        for (int64_t k = 0; k < n; k++) {
            const double key = L[k] + gumbel(r);
            if (L[k] > -INFINITY && key > best) {
                best = key;
                groups[b] = k;
            }
        }
    }
    free(L);
    free(p);
    if (r)
        gsl_rng_free(r);
    return st;
}

void mut_group_noise_reused_groups(const mut_input *in, uint64_t seed, int64_t *groups)
{
    (void)reused_groups(in, seed, groups);
}

fls_status mut_group_noise_reused(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    const int64_t V = in->V, g = in->group_size;
    int64_t *groups = malloc((size_t)in->B * sizeof(int64_t));
    double *q = malloc((size_t)V * sizeof(double));
    fls_status st = groups && q ? reused_groups(in, seed, groups) : FLS_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < in->B && st == FLS_OK; b++) {
        /* within the group: exact (its own noise per draw) */
        if ((st = fls_stats_probs_temperature_f32(in->logits + b * V, V, (double)in->temps[b], q)) != FLS_OK)
            break;
        for (int64_t v = 0; v < V; v++)
            q[v] = v / g == groups[b] ? q[v] : 0.0;
        st = sample_q(q, 1, V, N, 1, 0, seed ^ (0xABCDull + (uint64_t)b), tokens + b * N);
    }
    free(groups);
    free(q);
    return st;
}

/* ---- merging per-shard states ---- */

fls_status mut_merge_first_on_ties(const mut_input *in, int64_t N, uint64_t seed, int64_t *tokens)
{
    const int64_t S = in->shards > 1 ? in->shards : 4, V = in->V;
    if (S > 16 || S > V)
        return FLS_ERR_PARAM;
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    if (!r)
        return FLS_ERR_OUT_OF_MEMORY;
    gsl_rng_set(r, (unsigned long)seed);
    for (int64_t b = 0; b < in->B; b++) {
        const float *l = in->logits + b * V;
        const double T = (double)in->temps[b];
        for (int64_t n = 0; n < N; n++) {
            double key[16];
            int64_t idx[16];
            int order[16];
            for (int64_t j = 0; j < S; j++) { /* each shard's state: its best key, lowest index on ties */
                key[j] = -INFINITY;
                idx[j] = -1;
                for (int64_t v = V * j / S; v < V * (j + 1) / S; v++) {
                    if (l[v] == -INFINITY)
                        continue;
                    const double k = T > 0.0 ? (double)l[v] / T + gumbel(r) : (double)l[v];
                    if (idx[j] < 0 || k > key[j]) {
                        key[j] = k;
                        idx[j] = v;
                    }
                }
                order[j] = (int)j;
            }
            gsl_ran_shuffle(r, order, (size_t)S, sizeof(int));
            double bk = key[order[0]];
            int64_t bi = idx[order[0]];
            for (int64_t j = 1; j < S; j++) {
                const int o = order[j];
                /* the planted error: on equal keys the first state stays, whatever its index */
                if (idx[o] >= 0 && (bi < 0 || key[o] > bk)) {
                    bk = key[o];
                    bi = idx[o];
                }
            }
            tokens[b * N + n] = bi;
        }
    }
    gsl_rng_free(r);
    return FLS_OK;
}

/* ---- power ---- */

static double overlap(double a0, double a1, double b0, double b1)
{
    double lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0.0;
}

void mut_pair_cells_groups(const double *p, int64_t V, int64_t g, const int64_t *groups, int64_t B, int K,
                           double *Q)
{
    double *start = malloc((size_t)V * sizeof(double)), c[8];
    (void)fls_stats_cdf_start(p, V, start);
    memset(Q, 0, (size_t)(K * K) * sizeof(double));
    for (int64_t b = 0; b < B; b++) {
        const int64_t k = groups[b];
        double P = 0.0;
        for (int x = 0; x < K; x++)
            c[x] = 0.0;
        for (int64_t v = k * g; v < (k + 1) * g && v < V; v++) {
            P += p[v];
            for (int x = 0; x < K; x++)
                c[x] += overlap(start[v], start[v] + p[v], (double)x / K, (double)(x + 1) / K);
        }
        for (int x = 0; x < K; x++)
            for (int y = 0; y < K; y++)
                Q[x * K + y] += c[x] / P * c[y] / P / (double)B;
    }
    free(start);
}

/* ---- the stated N ---- */

int64_t mut_n_impossible(mut_scenario s, mut_probs_fn mutant, double alpha, double power, double *what)
{
    (void)alpha; /* an impossible sample fails the test at any level */
    mut_input in;
    mut_make(s, &in);
    double *p = malloc((size_t)(in.B * in.V) * sizeof(double)),
           *q = malloc((size_t)(in.B * in.V) * sizeof(double));
    int64_t N = -1;
    if (p && q && mut_probs_exact(&in, p) == FLS_OK && mutant(&in, q) == FLS_OK) {
        double log_hit = 0.0;
        for (int64_t b = 0; b < in.B; b++) {
            double m = 0.0;
            for (int64_t v = 0; v < in.V; v++)
                m += p[b * in.V + v] == 0.0 ? q[b * in.V + v] : 0.0;
            log_hit += log1p(-m);
            if (b == 0 && what)
                *what = m;
        }
        N = (int64_t)ceil(log(1.0 - power) / log_hit);
    }
    free(p);
    free(q);
    mut_free(&in);
    return N;
}

int64_t mut_n_repeats(mut_scenario s, double alpha, double power, double *what)
{
    (void)alpha;
    mut_input in;
    mut_make(s, &in);
    double *p = malloc((size_t)(in.B * in.V) * sizeof(double));
    int64_t N = -1;
    if (p && mut_stride(&in) == 3 && mut_probs_exact(&in, p) == FLS_OK) {
        double log_miss = 0.0;
        for (int64_t b = 0; b < in.B; b++) {
            double s2 = 0.0, s3 = 0.0;
            for (int64_t v = 0; v < in.V; v++) {
                const double x = p[b * in.V + v];
                s2 += x * x;
                s3 += x * x * x;
            }
            const double dup = 3.0 * s2 - 2.0 * s3; /* K = 3 iid draws: not all distinct */
            log_miss += log1p(-dup);
            if (b == 0 && what)
                *what = dup;
        }
        N = (int64_t)ceil(log(1.0 - power) / log_miss);
    }
    free(p);
    mut_free(&in);
    return N;
}

int64_t mut_n_boundary(mut_scenario s, mut_probs_fn mutant, double alpha, double power, double *what,
                       double *what2)
{
    mut_input in;
    mut_make(s, &in);
    double *p = malloc((size_t)in.V * sizeof(double)), *q = malloc((size_t)(in.B * in.V) * sizeof(double)),
           *l = malloc((size_t)in.V * sizeof(double));
    int64_t N = -1;
    if (p && q && l) {
        for (int64_t v = 0; v < in.V; v++)
            l[v] = in.logits[v];
        fls_stats_rule r;
        fls_stats_rule_off(&r);
        r.value[FLS_FILTER_TOP_K] = (double)in.rule.top_k;
        r.value[FLS_FILTER_TOP_P] = in.rule.top_p;
        r.value[FLS_FILTER_MIN_P] = in.rule.min_p;
        fls_stats_support sup;
        if (fls_stats_probs_rule(l, in.V, (double)in.temps[0], &r, p, &sup) == FLS_OK &&
            mutant(&in, q) == FLS_OK) {
            /* identical rows: the rows' counts on the class sum to one binomial */
            fls_stats_cell_alt c = {0.0, 0.0, alpha, in.B};
            for (int64_t v = 0; v < in.V; v++)
                if (l[v] / (double)in.temps[0] == sup.cut) {
                    c.m0 += p[v];
                    c.m1 += q[v];
                }
            N = fls_stats_smallest_n(fls_stats_cell_alt_power, &c, power, 1);
            if (what)
                *what = c.m0;
            if (what2)
                *what2 = c.m1;
        }
    }
    free(p);
    free(q);
    free(l);
    mut_free(&in);
    return N;
}

typedef struct cells_ctx {
    const double *p, *q;
    int64_t B, V;
    double alpha;
    double Q[FLS_STATS_MAX_BINS + 1][FLS_STATS_MAX_BINS]; /* the cells per K, computed once */
    int have[FLS_STATS_MAX_BINS + 1];
} cells_ctx;

static double cells_power(const void *c, int64_t N)
{
    cells_ctx *x = (cells_ctx *)c;
    const int K = fls_stats_equal_cells_for(x->B * N);
    if (K < 3)
        return 0.0;
    if (!x->have[K]) {
        (void)fls_stats_gof_cells(x->p, x->q, x->B, x->V, K, x->Q[K]);
        x->have[K] = 1;
    }
    return fls_stats_cells_power(x->Q[K], K, x->B * N, x->alpha);
}

int64_t mut_n_cells(mut_scenario s, mut_probs_fn mutant, double alpha, double power, double *what)
{
    mut_input in;
    mut_make(s, &in);
    double *p = malloc((size_t)(in.B * in.V) * sizeof(double)),
           *q = malloc((size_t)(in.B * in.V) * sizeof(double));
    cells_ctx *c = calloc(1, sizeof *c);
    int64_t N = -1;
    if (p && q && c && mut_probs_exact(&in, p) == FLS_OK && mutant(&in, q) == FLS_OK) {
        double tv = 0.0;
        for (int64_t b = 0; b < in.B; b++)
            tv += fls_stats_tv(p + b * in.V, q + b * in.V, in.V) / (double)in.B;
        c->p = p;
        c->q = q;
        c->B = in.B;
        c->V = in.V;
        c->alpha = alpha;
        N = fls_stats_smallest_n(cells_power, c, power, 3000 / in.B + 1);
        if (what)
            *what = tv;
    }
    free(c);
    free(p);
    free(q);
    mut_free(&in);
    return N;
}

typedef struct pairs_ctx {
    const double *p;
    const int64_t *groups;
    int64_t B, V, g;
    double alpha;
} pairs_ctx;

static double pairs_power(const void *c, int64_t N)
{
    const pairs_ctx *x = c;
    const int64_t pairs = x->B * (N / 2);
    const int K = fls_stats_pair_side(pairs);
    double Q[64];
    mut_pair_cells_groups(x->p, x->V, x->g, x->groups, x->B, K, Q);
    return fls_stats_cells_power(Q, K * K, pairs, x->alpha);
}

int64_t mut_n_reused(uint64_t seed, double alpha, double power, int64_t *groups)
{
    mut_input in;
    mut_make(MUT_GROUPS, &in);
    double *p = malloc((size_t)(in.B * in.V) * sizeof(double));
    int64_t N = -1;
    if (p && in.B <= 16 && mut_probs_exact(&in, p) == FLS_OK) { /* identical rows: row 0's is used */
        mut_group_noise_reused_groups(&in, seed, groups);
        pairs_ctx c = {p, groups, in.B, in.V, in.group_size, alpha};
        N = fls_stats_smallest_n(pairs_power, &c, power, 2);
    }
    free(p);
    mut_free(&in);
    return N;
}

int64_t mut_n_merge(double alpha, double power)
{
    (void)alpha;
    mut_input in;
    mut_make(MUT_MERGE_TIES, &in);
    /* the lower index arrives first (and wins) with probability 1/2 per draw and row */
    const int64_t N = (int64_t)ceil(-log2(1.0 - power) / (double)in.B);
    mut_free(&in);
    return N;
}
