/*
 * case_inputs.c — the inputs of the audit's cases: the target logits of each
 * shape (fls_case_shape) and the fused path's W and H, from gsl_rng_mt19937
 * seeded with a hash of the case's name (the same inputs in every run).
 */
#include "stats/case_internal.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t case_splitmix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t case_name_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

double case_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct sorted_l {
    double l;
    int64_t i;
} sorted_l;

static int by_l_desc(const void *a, const void *b)
{
    const sorted_l *x = a, *y = b;
    if (x->l != y->l)
        return x->l > y->l ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

/* N(0, scale) logits, sorted copy in s (V entries). */
static void gaussian_sorted(gsl_rng *r, double scale, int64_t V, float *l, sorted_l *s)
{
    for (int64_t v = 0; v < V; v++) {
        l[v] = (float)gsl_ran_gaussian(r, scale);
        s[v].l = l[v];
        s[v].i = v;
    }
    qsort(s, (size_t)V, sizeof *s, by_l_desc);
}

/* Three bit-identical tokens straddling the nucleus of top-p p at temperature
 * T: the mass of the tokens above them is < p Z by a relative margin of 1e-3
 * and the mass up to their end is > p Z by as much. Ties in tie[0..2]. */
static void gen_tie_p(const fls_audit_case *c, gsl_rng *r, float *l, sorted_l *s, int64_t *tie)
{
    const int64_t V = c->V;
    const double p = (double)c->ext->filter[FLS_FILTER_TOP_P][0],
                 T = c->temps[0] > 0.0f ? (double)c->temps[0] : 1.0;
    for (int attempt = 0; attempt < 1000; attempt++) {
        gaussian_sorted(r, c->scale, V, l, s);
        const double m = s[0].l / T;
        double Z = 0.0, A = 0.0;
        for (int64_t k = 0; k < V; k++)
            Z += exp(s[k].l / T - m);
        int64_t k = 0;
        while (k < V && (A + exp(s[k].l / T - m)) < p * Z) {
            A += exp(s[k].l / T - m);
            k++;
        }
        if (k < 1 || k + 1 >= V)
            continue;
        /* ranks k-1, k, k+1 take the value of rank k */
        const float cval = l[s[k].i];
        l[s[k - 1].i] = l[s[k + 1].i] = cval;
        double Z2 = 0.0, A2 = 0.0;
        for (int64_t j = 0; j < V; j++) {
            const double e = exp((double)l[s[j].i] / T - m);
            Z2 += e;
            A2 += j < k - 1 ? e : 0.0;
        }
        const double mc = 3.0 * exp((double)cval / T - m);
        if (A2 < p * Z2 * (1.0 - 1e-3) && A2 + mc > p * Z2 * (1.0 + 1e-3)) {
            tie[0] = s[k - 1].i;
            tie[1] = s[k].i;
            tie[2] = s[k + 1].i;
            return;
        }
    }
}

void case_gen_logits(const fls_audit_case *c, gsl_rng *r, float *l, int64_t *tie, int *n_tie)
{
    const int64_t V = c->V;
    *n_tie = 0;
    switch (c->shape) {
    case FLS_SHAPE_FLAT:
        for (int64_t v = 0; v < V; v++)
            l[v] = c->scale != 0.0 ? (float)c->scale : 0.75f;
        break;
    case FLS_SHAPE_CLASSES: {
        /* classes of bit-identical logits, positive, zero and negative (the
         * repetition penalty divides the positive ones, multiplies the others) */
        static const float cls[5] = {1.5f, 0.75f, 0.0f, -0.6f, -1.2f};
        for (int64_t v = 0; v < V; v++)
            l[v] = cls[v % 5];
        break;
    }
    case FLS_SHAPE_COIN:
        for (int64_t v = 0; v < V; v++)
            l[v] = v == 0 ? 0.0f : -0.85f;
        break;
    case FLS_SHAPE_ZIPF: {
        size_t *perm = malloc((size_t)V * sizeof(size_t));
        for (int64_t v = 0; v < V; v++)
            perm[v] = (size_t)v;
        gsl_ran_shuffle(r, perm, (size_t)V, sizeof(size_t));
        for (int64_t k = 0; k < V; k++)
            l[perm[k]] = (float)(-1.1 * log((double)k + 1.0));
        free(perm);
        break;
    }
    case FLS_SHAPE_PEAKED:
        for (int64_t v = 0; v < V; v++)
            l[v] = (float)gsl_ran_gaussian(r, 1.0);
        l[gsl_rng_uniform_int(r, (unsigned long)V)] = 12.0f;
        break;
    case FLS_SHAPE_HEAVY: {
        /* Tail 15..15+w nats below the head (2% of the tail down to 25 nats):
         * V = 4096, one head token, w = 0.5: tail mass ~1e-3;
         * V = 262144, three head tokens, w = 4: tail mass ~1e-2.
         * Head tokens sit at random places, so tiles of every thread hold some. */
        const int big = V >= 65536;
        const double w = big ? 4.0 : 0.5;
        for (int64_t v = 0; v < V; v++) {
            double u = gsl_rng_uniform(r);
            l[v] = gsl_rng_uniform(r) < 0.98 ? (float)(-15.0 - w * u) : (float)(-15.0 - w - (10.0 - w) * u);
        }
        const float head[3] = {0.0f, -0.7f, -1.4f};
        for (int k = 0; k < (big ? 3 : 1); k++)
            l[gsl_rng_uniform_int(r, (unsigned long)V)] = head[k];
        break;
    }
    case FLS_SHAPE_DEEP: {
        /* One head token; 12% of the tokens 10.5-14.5 nats below it (the t = 10
         * tail); the rest deeper: 75% uniform in [s, s + 2] nats, 25% in
         * [s + 2, 30], s = scale (16 or 17), where uniforms of 24 bits lose most
         * of the mass (their Gumbel noise stops at 16.6). Depths are in nats of
         * l / T: the logits are depth x T. */
        const double s0 = c->scale, T = c->temps[0] > 0.0f ? (double)c->temps[0] : 1.0;
        for (int64_t v = 0; v < V; v++) {
            double u = gsl_rng_uniform(r), w = gsl_rng_uniform(r), d;
            if (w < 0.12)
                d = 10.5 + 4.0 * u;
            else if (w < 0.12 + 0.88 * 0.75)
                d = s0 + 2.0 * u;
            else
                d = s0 + 2.0 + (30.0 - s0 - 2.0) * u;
            l[v] = (float)(-d * T);
        }
        l[gsl_rng_uniform_int(r, (unsigned long)V)] = 0.0f;
        break;
    }
    case FLS_SHAPE_MASKED:
        for (int64_t v = 0; v < V; v++) {
            int masked = v % 3 == 1 || (v >= V / 2 && v < V / 2 + V / 8) || v == 0 || v == V - 1;
            l[v] = masked ? -INFINITY : (float)gsl_ran_gaussian(r, 1.5);
        }
        break;
    case FLS_SHAPE_NORMAL:
        for (int64_t v = 0; v < V; v++)
            l[v] = (float)gsl_ran_gaussian(r, c->scale);
        break;
    case FLS_SHAPE_TIE_K: {
        /* ranks k-1, k, k+1 (1-based) share the value of rank k: top-k keeps k + 1 tokens */
        sorted_l *s = malloc((size_t)V * sizeof *s);
        if (!s)
            break;
        gaussian_sorted(r, c->scale, V, l, s);
        const int64_t k = c->ext ? (int64_t)c->ext->filter[FLS_FILTER_TOP_K][0] : 2;
        if (k >= 2 && k + 1 <= V) {
            l[s[k - 2].i] = l[s[k].i] = l[s[k - 1].i];
            tie[0] = s[k - 2].i;
            tie[1] = s[k - 1].i;
            tie[2] = s[k].i;
            *n_tie = 3;
        }
        free(s);
        break;
    }
    case FLS_SHAPE_TIE_P: {
        sorted_l *s = malloc((size_t)V * sizeof *s);
        if (!s || !c->ext)
            break;
        tie[0] = -1;
        gen_tie_p(c, r, l, s, tie);
        *n_tie = tie[0] >= 0 ? 3 : 0;
        free(s);
        break;
    }
    case FLS_SHAPE_MASKED_GROUPS: {
        const int64_t g = c->ext && c->ext->group_size ? c->ext->group_size : 128;
        for (int64_t v = 0; v < V; v++) {
            double u = gsl_rng_uniform(r);
            int masked = ((v / g) % 3 == 1) || (u < 0.1 && v > 0);
            l[v] = masked ? -INFINITY : (float)gsl_ran_gaussian(r, 1.5);
        }
        break;
    }
    case FLS_SHAPE_GROUP_DEEP: {
        /* the head's group (group 1): its other members 15.2-15.7 nats below the
         * head (98%) or 15.7-25 (2%); every other group 10.5-14.5 nats below.
         * Depths in nats of l / T. The group: the grouped method's g, or the
         * min-first scheme's 64 tokens (FLS_MF_GROUP: their noises share the
         * group's largest one as a bound). */
        const int64_t g = c->ext && c->ext->group_size                     ? c->ext->group_size
                          : c->ext && c->ext->noise == FLS_NOISE_MIN_FIRST ? 64
                                                                           : 128;
        const int64_t hg = V > g ? 1 : 0, h0 = hg * g, hn = V - h0 < g ? V - h0 : g;
        const double T = c->temps[0] > 0.0f ? (double)c->temps[0] : 1.0;
        for (int64_t v = 0; v < V; v++) {
            double u = gsl_rng_uniform(r), w = gsl_rng_uniform(r), d;
            if (v / g == hg)
                d = w < 0.98 ? 15.2 + 0.5 * u : 15.7 + 9.3 * u;
            else
                d = 10.5 + 4.0 * u;
            l[v] = (float)(-d * T);
        }
        l[h0 + (int64_t)gsl_rng_uniform_int(r, (unsigned long)hn)] = 0.0f;
        break;
    }
    case FLS_SHAPE_TIES: {
        float m = -INFINITY;
        for (int64_t v = 0; v < V; v++) {
            l[v] = (float)gsl_ran_gaussian(r, 1.0);
            m = l[v] > m ? l[v] : m;
        }
        /* a clear gap (3 nats) to every other token, so fp32 and double agree on the argmax set */
        l[V / 3] = l[V / 2] = l[V - 1] = m + 3.0f;
        break;
    }
    }
}

fls_status case_gen_fused(const fls_audit_case *c, gsl_rng *r, const float *target, const int64_t *tie,
                          int n_tie, void **W, float **H)
{
    const int64_t V = c->V, D = c->D, G = c->groups;
    const size_t es = fls_dtype_size(c->w_dtype);
    *W = malloc((size_t)(V * D) * es);
    *H = malloc((size_t)(G * D) * sizeof(float));
    if (!*W || !*H)
        return FLS_ERR_OUT_OF_MEMORY;
    for (int64_t v = 0; v < V; v++)
        for (int64_t k = 0; k < D; k++) {
            float x = k == 0 ? target[v] / 4.0f : (float)gsl_ran_gaussian(r, 0.05);
            size_t i = (size_t)(v * D + k);
            if (c->w_dtype == FLS_DTYPE_F32)
                ((float *)*W)[i] = x;
            else if (c->w_dtype == FLS_DTYPE_BF16)
                ((uint16_t *)*W)[i] = fls_f32_to_bf16(x);
            else
                ((uint16_t *)*W)[i] = fls_f32_to_f16(x);
        }
    if (c->shape == FLS_SHAPE_TIES) { /* identical rows: identical fp32 logits, a true tie */
        const int64_t tied[2] = {V / 2, V - 1};
        for (int k = 0; k < 2; k++)
            memcpy((char *)*W + (size_t)(tied[k] * D) * es, (char *)*W + (size_t)((V / 3) * D) * es,
                   (size_t)D * es);
    }
    for (int k = 1; k < n_tie; k++) /* planted ties: identical rows, bit-identical fp32 logits */
        memcpy((char *)*W + (size_t)(tie[k] * D) * es, (char *)*W + (size_t)(tie[0] * D) * es,
               (size_t)D * es);
    for (int64_t g = 0; g < G; g++)
        for (int64_t k = 0; k < D; k++)
            (*H)[g * D + k] = k == 0 ? 4.0f : (float)gsl_ran_gaussian(r, 1.0);
    return FLS_OK;
}

/* ---- masks, bias and penalties ---- */

static int64_t mods_id(int64_t id, const sorted_l *s, int64_t V)
{
    if (id >= -1)
        return id < V ? id : INT64_MIN;
    const int64_t k = -2 - id;
    return k < V ? s[k].i : INT64_MIN;
}

fls_status case_mods_make(const fls_audit_case *c, uint64_t input_seed, const float *target, int64_t B,
                          case_mods *m)
{
    memset(m, 0, sizeof *m);
    const fls_case_mods *x = c->ext ? c->ext->mods : NULL;
    if (!x)
        return FLS_OK;
    const int64_t V = c->V, G = c->groups, words = (V + 31) / 32;
    m->B = B;
    m->K = x->bias_k;
    m->S = x->seen_k;
    m->ld = words + (x->ld_pad > 0 ? x->ld_pad : 0);
    m->ld_param = x->ld_pad > 0 ? m->ld : 0;
    sorted_l *s = malloc((size_t)V * sizeof *s);
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    int masked = 0, all = 1;
    for (int64_t g = 0; g < G; g++) {
        masked |= x->mask[g] != 0;
        all &= x->mask[g] != 0;
    }
    m->mask = masked ? malloc((size_t)(B * m->ld) * sizeof *m->mask) : NULL;
    m->rows = masked && !all ? malloc((size_t)B) : NULL;
    m->bias_ids = m->K ? malloc((size_t)(B * m->K) * sizeof *m->bias_ids) : NULL;
    m->bias_values = m->K ? malloc((size_t)(B * m->K) * sizeof *m->bias_values) : NULL;
    m->seen_ids = m->S ? malloc((size_t)(B * m->S) * sizeof *m->seen_ids) : NULL;
    m->seen_counts = m->S ? malloc((size_t)(B * m->S) * sizeof *m->seen_counts) : NULL;
    m->rep = malloc((size_t)B * sizeof(float));
    m->pres = malloc((size_t)B * sizeof(float));
    m->freq = malloc((size_t)B * sizeof(float));
    if (!s || !r || (masked && !m->mask) || (masked && !all && !m->rows) || (m->K && !m->bias_ids) ||
        (m->K && !m->bias_values) || (m->S && (!m->seen_ids || !m->seen_counts)) || !m->rep || !m->pres ||
        !m->freq) {
        free(s);
        gsl_rng_free(r);
        return FLS_ERR_OUT_OF_MEMORY;
    }
    for (int64_t v = 0; v < V; v++) {
        s[v].l = (double)target[v];
        s[v].i = v;
    }
    qsort(s, (size_t)V, sizeof *s, by_l_desc);
    fls_status st = FLS_OK;
    for (int64_t g = 0; g < G && g < B; g++) {
        /* group g's row, then copied to every row of the group */
        if (m->mask) {
            int32_t *w = m->mask + g * m->ld;
            for (int64_t i = 0; i < m->ld; i++)
                w[i] = i < words ? (int32_t)0xFFFFFFFFu : (int32_t)0x5A5A5A5Au; /* bits past V: ignored */
            if (x->mask[g]) {
                gsl_rng_set(r, (unsigned long)(input_seed ^ case_splitmix64((uint64_t)g + 1)));
                for (int64_t k = 0; k < V; k++) {
                    const double u = gsl_rng_uniform(r);
                    const int drop = k < x->head_cut || (k > x->head_cut && u < x->drop);
                    if (drop)
                        w[s[k].i / 32] &= (int32_t) ~(1u << (s[k].i % 32));
                }
            }
            if (m->rows)
                m->rows[g] = (uint8_t)(x->mask[g] != 0);
        }
        for (int64_t i = 0; i < m->K; i++) {
            m->bias_ids[g * m->K + i] = mods_id(x->bias_id[i], s, V);
            m->bias_values[g * m->K + i] = x->bias_value[g][i];
            st = m->bias_ids[g * m->K + i] == INT64_MIN ? FLS_ERR_PARAM : st;
        }
        for (int64_t i = 0; i < m->S; i++) {
            m->seen_ids[g * m->S + i] = mods_id(x->seen_id[i], s, V);
            m->seen_counts[g * m->S + i] = x->seen_count[g][i];
            st = m->seen_ids[g * m->S + i] == INT64_MIN ? FLS_ERR_PARAM : st;
        }
        m->rep[g] = x->repetition[g] != 0.0f ? x->repetition[g] : 1.0f;
        m->pres[g] = x->presence[g];
        m->freq[g] = x->frequency[g];
        m->row_pen |= m->rep[g] != m->rep[0] || m->pres[g] != m->pres[0] || m->freq[g] != m->freq[0];
    }
    for (int64_t b = G; b < B; b++) {
        const int64_t g = b % G;
        if (m->mask)
            memcpy(m->mask + b * m->ld, m->mask + g * m->ld, (size_t)m->ld * sizeof *m->mask);
        if (m->rows)
            m->rows[b] = m->rows[g];
        if (m->K) {
            memcpy(m->bias_ids + b * m->K, m->bias_ids + g * m->K, (size_t)m->K * sizeof *m->bias_ids);
            memcpy(m->bias_values + b * m->K, m->bias_values + g * m->K, (size_t)m->K * sizeof(float));
        }
        if (m->S) {
            memcpy(m->seen_ids + b * m->S, m->seen_ids + g * m->S, (size_t)m->S * sizeof *m->seen_ids);
            memcpy(m->seen_counts + b * m->S, m->seen_counts + g * m->S, (size_t)m->S * sizeof(int32_t));
        }
        m->rep[b] = m->rep[g];
        m->pres[b] = m->pres[g];
        m->freq[b] = m->freq[g];
    }
    free(s);
    gsl_rng_free(r);
    return st;
}

void case_mods_free(case_mods *m)
{
    free(m->mask);
    free(m->rows);
    free(m->bias_ids);
    free(m->bias_values);
    free(m->seen_ids);
    free(m->seen_counts);
    free(m->rep);
    free(m->pres);
    free(m->freq);
    memset(m, 0, sizeof *m);
}

void case_mods_row(const case_mods *m, int64_t b, unsigned omit, fls_stats_mods *out)
{
    memset(out, 0, sizeof *out);
    out->repetition = 1.0f;
    if (!m->rep)
        return;
    if (m->mask && (!m->rows || m->rows[b]) && !(omit & FLS_AUDIT_OMIT_MASK))
        out->mask = m->mask + b * m->ld;
    if (m->K && !(omit & FLS_AUDIT_OMIT_BIAS)) {
        out->bias_ids = m->bias_ids + b * m->K;
        out->bias_values = m->bias_values + b * m->K;
        out->bias_k = m->K;
    }
    if (m->S && !(omit & FLS_AUDIT_OMIT_PENALTIES)) {
        out->seen_ids = m->seen_ids + b * m->S;
        out->seen_counts = m->seen_counts + b * m->S;
        out->seen_k = m->S;
        out->repetition = m->rep[b];
        out->presence = m->pres[b];
        out->frequency = m->freq[b];
    }
}

void case_mods_params(const case_mods *m, fls_params *p)
{
    if (!m->rep)
        return;
    p->allowed_bitmask = m->mask;
    p->bitmask_ld = m->mask ? m->ld_param : 0;
    p->bitmask_rows = m->rows;
    p->logit_bias_ids = m->bias_ids;
    p->logit_bias_values = m->bias_values;
    p->logit_bias_k = m->K;
    p->seen_ids = m->seen_ids;
    p->seen_counts = m->seen_counts;
    p->seen_k = m->S;
    if (m->row_pen) {
        p->row_repetition_penalty = m->rep;
        p->row_presence_penalty = m->pres;
        p->row_frequency_penalty = m->freq;
    } else {
        p->repetition_penalty = m->rep[0];
        p->presence_penalty = m->pres[0];
        p->frequency_penalty = m->freq[0];
    }
}
