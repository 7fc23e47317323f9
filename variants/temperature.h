/*
 * temperature.h — the temperature rule (and greedy, its T = 0 case), shared
 * by every engine (C and CUDA). The interface is variants/rule.h's.
 *
 * Row b samples v with probability softmax(l_b / T_b)_v by Gumbel-max:
 *     x_v = fl(l_v / T),  key_v = fl(x_v + G_v),  token = argmax key
 * (lowest index on ties) with IEEE division and addition, one rounding each
 * (no fma contraction, never a reciprocal multiply), so every engine
 * computes the same key from the same logit and noise.
 * T = 0 is greedy: x_v = l_v, key_v = l_v, and no noise is drawn — the one
 * place where greedy differs from sampling is fls_temperature_key.
 * -inf (a masked token) stays -inf and never wins; a row with no finite key
 * is FLS_ERR_ALL_MASKED.
 *
 * State: one fls_cand per (row, draw) (or its packed 64-bit form on the
 * GPU, fls_pack). Finalize: the token, and its log-probability x - lse
 * (0 for greedy rows).
 */
#ifndef FLS_VARIANT_TEMPERATURE_H
#define FLS_VARIANT_TEMPERATURE_H

#include "flashsample_status.h"
#include "variants/rule.h"

/* The tempered logit l / T (l itself for T = 0). */
FLS_HD float fls_temper(float l, float T)
{
    return T == 0.0f ? l : FLS_FDIV(l, T);
}

/* Whether the row draws noise at all (T = 0, greedy, does not). */
FLS_HD FLS_BOOL fls_temperature_noisy(float T)
{
    return T != 0.0f;
}

/* The Gumbel-max key of a tempered logit x and its noise g (T = 0: x). */
FLS_HD float fls_temperature_key(float x, float g, float T)
{
    return fls_temperature_noisy(T) ? FLS_FADD(x, g) : x;
}

FLS_HD void fls_temperature_init(fls_cand *c)
{
    *c = fls_cand_empty();
}

FLS_HD void fls_temperature_push(fls_cand *c, float x, float g, float T, int64_t v)
{
    fls_cand_push(c, fls_temperature_key(x, g, T), x, v);
}

/* Tokens v0 .. v0 + n - 1 at once: x their tempered logits, g their noise
 * (unused, and may be NULL, for T = 0). One strict compare per token (the
 * first maximum is the lowest index), then one push. */
FLS_HD void fls_temperature_push_span(fls_cand *c, const float *x, const float *g, float T, int64_t v0,
                                      int64_t n)
{
    int64_t bi = -1;
    float bk = -INFINITY;
    if (fls_temperature_noisy(T)) {
        for (int64_t i = 0; i < n; i++) {
            const float key = FLS_FADD(x[i], g[i]);
            if (key > bk) {
                bk = key;
                bi = i;
            }
        }
    } else {
        for (int64_t i = 0; i < n; i++)
            if (x[i] > bk) {
                bk = x[i];
                bi = i;
            }
    }
    if (bi >= 0)
        fls_cand_push(c, bk, x[bi], v0 + bi);
}

FLS_HD void fls_temperature_merge(fls_cand *a, const fls_cand *b)
{
    fls_cand_merge(a, b);
}

/* Keys below the bound cannot enter the state (-inf: everything can). */
FLS_HD float fls_temperature_bound(const fls_cand *c)
{
    return c->idx < 0 ? -INFINITY : c->key;
}

/* The token of a (row, draw) and, when logprob is not NULL, its
 * log-probability under the rule given the row's log-sum-exp. */
FLS_HD fls_status fls_temperature_finalize(const fls_cand *c, float T, double lse, int64_t *token,
                                           float *logprob)
{
    if (c->idx < 0)
        return FLS_ERR_ALL_MASKED;
    *token = c->idx;
    if (logprob)
        *logprob = fls_temperature_noisy(T) ? (float)((double)c->x - lse) : 0.0f;
    return FLS_OK;
}

#if defined(__cplusplus)
/* The rule as a type, for engines that are templates over the rule. */
struct fls_temperature_rule {
    typedef fls_cand cand;
    /* one candidate per (row, draw): engines keep it as a packed key (8
     * bytes) and its tempered logit (4 bytes) */
    static const int packed_words = 1;
    static FLS_HDM float temper(float l, float T)
    {
        return fls_temper(l, T);
    }
    static FLS_HDM bool noisy(float T)
    {
        return fls_temperature_noisy(T);
    }
    static FLS_HDM float key(float x, float g, float T)
    {
        return fls_temperature_key(x, g, T);
    }
    static FLS_HDM void init(cand *c)
    {
        fls_temperature_init(c);
    }
    static FLS_HDM void push(cand *c, float x, float g, float T, int64_t v)
    {
        fls_temperature_push(c, x, g, T, v);
    }
    static FLS_HDM void merge(cand *a, const cand *b)
    {
        fls_temperature_merge(a, b);
    }
    static FLS_HDM float bound(const cand *c)
    {
        return fls_temperature_bound(c);
    }
    static FLS_HDM fls_status finalize(const cand *c, float T, double lse, int64_t *token, float *logprob)
    {
        return fls_temperature_finalize(c, T, lse, token, logprob);
    }
};
#endif

#endif /* FLS_VARIANT_TEMPERATURE_H */
