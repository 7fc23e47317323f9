/*
 * reference.c — exact reference probabilities in double.
 *
 * The rules are evaluated on exact input values in double: softmax by
 * log-sum-exp (the maximum is subtracted first, so every exp is in (0, 1] and
 * nothing overflows; the sum uses Neumaier compensation, so even V = 2^18 terms
 * lose nothing measurable). The engines work in float; the differences (a few
 * ulps of float in l / T) move probabilities by ~1e-6 relative, far below the
 * 0.01 total variation the tests are sized for.
 */
#include "stats/fls_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void neumaier_add(double *sum, double *comp, double x)
{
    double t = *sum + x;
    if (fabs(*sum) >= fabs(x))
        *comp += (*sum - t) + x;
    else
        *comp += (x - t) + *sum;
    *sum = t;
}

fls_status fls_stats_probs_temperature(const double *logits, int64_t V, double T, double *p)
{
    if (!logits || !p)
        return FLS_ERR_NULL;
    if (V < 1)
        return FLS_ERR_SIZE;
    if (!(isfinite(T) && T >= 0.0))
        return FLS_ERR_TEMPERATURE;
    int64_t amax = -1;
    for (int64_t v = 0; v < V; v++) {
        double l = logits[v];
        if (isnan(l) || l == INFINITY)
            return FLS_ERR_NAN;
        if (l == -INFINITY)
            continue;
        if (amax < 0 || l > logits[amax])
            amax = v; /* strict >: the lowest index wins ties */
    }
    if (amax < 0)
        return FLS_ERR_ALL_MASKED;
    if (T == 0.0) {
        memset(p, 0, (size_t)V * sizeof(double));
        p[amax] = 1.0;
        return FLS_OK;
    }
    /* x_v = l_v / T - max_u l_u / T <= 0; division first so T < 1 cannot
     * overflow a finite float logit (|l| / T <= 3.4e38 / 1.4e-45 fits double). */
    const double xmax = logits[amax] / T;
    double sum = 0.0, comp = 0.0;
    for (int64_t v = 0; v < V; v++) {
        double e = logits[v] == -INFINITY ? 0.0 : exp(logits[v] / T - xmax);
        p[v] = e;
        neumaier_add(&sum, &comp, e);
    }
    sum += comp; /* >= 1: the maximum contributes exp(0) */
    for (int64_t v = 0; v < V; v++)
        p[v] /= sum;
    return FLS_OK;
}

fls_status fls_stats_probs_temperature_f32(const float *logits, int64_t V, double T, double *p)
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
    fls_status st = fls_stats_probs_temperature(l, V, T, p);
    free(l);
    return st;
}

/* Exact decoders, written here on purpose instead of calling lib/base/half.c: the
 * reference must not share code with what it checks. */
static double bf16_value(uint16_t x)
{
    uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return (double)f;
}

static double f16_value(uint16_t x)
{
    int sign = x >> 15, e = (x >> 10) & 0x1f, m = x & 0x3ff;
    double v;
    if (e == 0)
        v = ldexp((double)m, -24); /* subnormal: m 2^-24 */
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp((double)(m | 0x400), e - 25); /* (1024 + m) 2^(e - 15 - 10) */
    return sign ? -v : v;
}

double fls_stats_matrix_get(const fls_matrix *M, int64_t i, int64_t j)
{
    size_t k = (size_t)(i * M->ld + j);
    switch (M->dtype) {
    case FLS_DTYPE_F32:
        return (double)((const float *)M->data)[k];
    case FLS_DTYPE_BF16:
        return bf16_value(((const uint16_t *)M->data)[k]);
    case FLS_DTYPE_F16:
        return f16_value(((const uint16_t *)M->data)[k]);
    }
    return NAN;
}

fls_status fls_stats_logits_fused(const fls_matrix *W, const fls_matrix *H, int64_t row, double *logits)
{
    if (!W || !H || !logits || !W->data || !H->data)
        return FLS_ERR_NULL;
    if (W->cols != H->cols || row < 0 || row >= H->rows || W->rows < 1 || W->cols < 1)
        return FLS_ERR_SHAPE;
    const int64_t D = W->cols;
    double *h = malloc((size_t)D * sizeof(double));
    if (!h)
        return FLS_ERR_OUT_OF_MEMORY;
    for (int64_t k = 0; k < D; k++)
        h[k] = fls_stats_matrix_get(H, row, k);
    for (int64_t v = 0; v < W->rows; v++) {
        double s = 0.0;
        for (int64_t k = 0; k < D; k++)
            s += fls_stats_matrix_get(W, v, k) * h[k];
        logits[v] = s;
    }
    free(h);
    return FLS_OK;
}

void fls_stats_product(const double *p, int64_t Vp, const double *q, int64_t Vq, double *pq)
{
    for (int64_t x = 0; x < Vp; x++)
        for (int64_t y = 0; y < Vq; y++)
            pq[x * Vq + y] = p[x] * q[y];
}

fls_status fls_stats_perturb(const double *p, int64_t V, const uint8_t *from, const uint8_t *to, double tv,
                             double *q)
{
    if (!p || !from || !to || !q)
        return FLS_ERR_NULL;
    double mf = 0.0, mt = 0.0;
    int64_t nt = 0, nf = 0;
    for (int64_t v = 0; v < V; v++) {
        if (from[v] && to[v])
            return FLS_ERR_PARAM;
        if (from[v]) {
            mf += p[v];
            nf++;
        }
        if (to[v]) {
            mt += p[v];
            nt++;
        }
    }
    if (nf == 0 || nt == 0 || !(tv >= 0.0) || mf < tv)
        return FLS_ERR_PARAM;
    for (int64_t v = 0; v < V; v++) {
        q[v] = p[v];
        if (from[v])
            q[v] = p[v] * (1.0 - tv / mf);
        else if (to[v])
            q[v] = mt > 0.0 ? p[v] * (1.0 + tv / mt) : p[v] + tv / (double)nt;
    }
    return FLS_OK;
}

double fls_stats_tv(const double *p, const double *q, int64_t V)
{
    double s = 0.0;
    for (int64_t v = 0; v < V; v++)
        s += fabs(p[v] - q[v]);
    return 0.5 * s;
}

void fls_stats_mods_apply(const fls_stats_mods *m, double *l, int64_t V)
{
    if (!m)
        return;
    /* 1. the seen tokens' penalties, each step one fp32 rounding */
    const float r = m->repetition;
    for (int64_t i = 0; i < m->seen_k; i++) {
        const int64_t v = m->seen_ids[i];
        if (v < 0 || v >= V)
            continue; /* -1: padding */
        const int32_t c = m->seen_counts ? m->seen_counts[i] : 0;
        float x = (float)l[v];
        if (r != 1.0f)
            x = x > 0.0f ? x / r : x * r;
        const float fc = m->frequency * (float)c;
        x = x - fc;
        x = x - (c > 0 ? m->presence : 0.0f);
        l[v] = (double)x;
    }
    /* 2. the bias */
    for (int64_t i = 0; i < m->bias_k; i++) {
        const int64_t v = m->bias_ids[i];
        if (v < 0 || v >= V)
            continue;
        const float x = (float)l[v] + m->bias_values[i];
        l[v] = (double)x;
    }
    /* 3. the mask */
    if (m->mask)
        for (int64_t v = 0; v < V; v++)
            if (!(((uint32_t)m->mask[v / 32] >> (v % 32)) & 1u))
                l[v] = -INFINITY;
}
