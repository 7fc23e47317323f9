/*
 * rule.h — the interface every sampling rule implements, and the pieces
 * that every rule shares. C, C++ and CUDA; no engine code in here.
 *
 * A rule turns the tempered logits x_v = l_v / T of one row (T = 0: x = l)
 * and the contract's Gumbel noise G_v (docs/NOISE.md) into one token per
 * draw. Engines see a rule as a fold over the vocabulary, so that it can run
 * inside the matmul's tile loop, on any partition of the tokens:
 *
 *   init      an empty per-(row, draw) candidate state;
 *   push      one token: its tempered logit x, its noise g and its global
 *             index v (the key is the rule's; for Gumbel-max x + g);
 *   merge     two states of disjoint token sets: associative and
 *             commutative, ties broken to the LOWEST token index, so the
 *             result never depends on tiling, threads, order or engine;
 *   bound     a key such that tokens whose key is below it cannot enter the
 *             state (the engines' exact skip tests use it: a token whose key
 *             bound is below it needs neither its division nor its logs);
 *   finalize  the token and its log-probability, an error (no finite key:
 *             FLS_ERR_ALL_MASKED), or — for rules whose support depends on
 *             the whole row — a request for an exact second pass.
 *
 * Every rule also gets, per row, the online log-sum-exp of the tempered
 * logits (fls_lse below) and the row's input errors (a NaN or +inf logit;
 * a finite logit whose l / T overflows), which the engines track alike.
 *
 * One header per rule in variants/ (temperature.h is the first); each rule
 * has a C API (fls_<rule>_*) and, for C++ / CUDA engines that are templates
 * over the rule, a type with the same functions as static members.
 */
#ifndef FLS_RULE_H
#define FLS_RULE_H

#include <stdint.h>

#include "lib/base/fls_hd.h"

#if !defined(__CUDA_ARCH__)
#include <math.h>
#endif

/* A truth value: bool in C++ and CUDA (the kernels OR these into bool
 * registers), int in C. */
#if defined(__cplusplus)
#define FLS_BOOL bool
#else
#define FLS_BOOL int
#endif

/* ---- One candidate: (key, tempered logit, token) ---- */

/* idx < 0: empty (nothing with a finite key pushed yet). */
typedef struct fls_cand {
    float key; /* the rule's key (Gumbel-max: x + g; greedy: x) */
    float x;   /* the tempered logit, for the log-probability */
    int64_t idx;
} fls_cand;

FLS_HD fls_cand fls_cand_empty(void)
{
    fls_cand c;
    c.key = -INFINITY;
    c.x = -INFINITY;
    c.idx = -1;
    return c;
}

/* Whether (key, idx) beats the candidate c: a larger key, or the same key
 * and a lower index. A -inf key never enters (a masked token is never
 * sampled); an empty c is beaten by any finite key. */
FLS_HD FLS_BOOL fls_cand_beats(float key, int64_t idx, const fls_cand *c)
{
    return key > -INFINITY && (c->idx < 0 || key > c->key || (key == c->key && idx < c->idx));
}

FLS_HD void fls_cand_push(fls_cand *c, float key, float x, int64_t idx)
{
    if (fls_cand_beats(key, idx, c)) {
        c->key = key;
        c->x = x;
        c->idx = idx;
    }
}

FLS_HD void fls_cand_merge(fls_cand *a, const fls_cand *b)
{
    if (b->idx >= 0)
        fls_cand_push(a, b->key, b->x, b->idx);
}

/* ---- The packed form of a candidate's order (engines' 64-bit reductions) ----
 * fls_pack(key, v) = (ord(key) << 32) | (2^32 - 1 - v): unsigned order of the
 * packed words is fls_cand_beats' order (larger key, then lower index) for
 * v < 2^32 - 1; 0 is below every packed key (the empty state). */

FLS_HD uint32_t fls_ord(float k)
{
#if defined(__CUDA_ARCH__)
    uint32_t u = __float_as_uint(k);
#else
    uint32_t u;
    memcpy(&u, &k, sizeof u);
#endif
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

FLS_HD float fls_unord(uint32_t u)
{
    const uint32_t b = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
#if defined(__CUDA_ARCH__)
    return __uint_as_float(b);
#else
    float k;
    memcpy(&k, &b, sizeof k);
    return k;
#endif
}

FLS_HD uint64_t fls_pack(float key, uint32_t token)
{
    return ((uint64_t)fls_ord(key) << 32) | (uint64_t)(0xffffffffu - token);
}

/* The key of a packed candidate; -inf for the empty 0. */
FLS_HD float fls_key_of(uint64_t p)
{
    return p == 0 ? -INFINITY : fls_unord((uint32_t)(p >> 32));
}

/* The token of a packed candidate; -1 for the empty 0. */
FLS_HD int64_t fls_token_of(uint64_t p)
{
    return p == 0 ? -1 : (int64_t)(0xffffffffu - (uint32_t)p);
}

/* The candidate a packed word and its tempered logit stand for. A -inf key
 * is no candidate (fls_cand_beats). */
FLS_HD fls_cand fls_cand_unpack(uint64_t p, float x)
{
    fls_cand c = fls_cand_empty();
    const float k = fls_key_of(p);
    if (k > -INFINITY) {
        c.key = k;
        c.x = x;
        c.idx = fls_token_of(p);
    }
    return c;
}

/* ---- The online log-sum-exp of a row's tempered logits ----
 * A partial is (m, s): m = the max of its logits (-inf: none finite), s =
 * sum exp(x - m). Partials merge with one formula in either precision:
 *     M = max(m_a, m_b),  s = s_a exp(m_a - M) + s_b exp(m_b - M)
 * (a factor exp(0) = 1 is exact, so this is the usual two-branch merge bit
 * for bit), and the value is m + log s (for T = 0, the limit m).
 * fls_lse_term(s, m, M) = s exp(m - M) is one partial's share of a sum at a
 * known maximum M (engines that merge in two passes: max, then sum). */

typedef struct fls_lse {
    double m, s;
} fls_lse;

typedef struct fls_lsef {
    float m, s;
} fls_lsef;

FLS_HD fls_lse fls_lse_empty(void)
{
    fls_lse a;
    a.m = -INFINITY;
    a.s = 0.0;
    return a;
}

FLS_HD fls_lsef fls_lsef_empty(void)
{
    fls_lsef a;
    a.m = -INFINITY;
    a.s = 0.0f;
    return a;
}

FLS_HD double fls_lse_term(double s, double m, double M)
{
    return m == -INFINITY ? 0.0 : s * exp(m - M);
}

/* exp(x - M) in float: one logit's term of a partial at maximum M (0 for
 * x = -inf); the accurate expf (never a fast-math exp). */
FLS_HD float fls_lsef_exp(float x, float M)
{
    return expf(FLS_FSUB(x, M));
}

FLS_HD float fls_lsef_term(float s, float m, float M)
{
    return m == -INFINITY ? 0.0f : FLS_FMUL(s, fls_lsef_exp(m, M));
}

FLS_HD void fls_lse_merge(fls_lse *a, double m, double s)
{
    if (m == -INFINITY)
        return;
    const double M = a->m > m ? a->m : m;
    a->s = fls_lse_term(a->s, a->m, M) + fls_lse_term(s, m, M);
    a->m = M;
}

FLS_HD void fls_lsef_merge(fls_lsef *a, float m, float s)
{
    if (m == -INFINITY)
        return;
    const float M = a->m > m ? a->m : m;
    a->s = FLS_FADD(fls_lsef_term(a->s, a->m, M), fls_lsef_term(s, m, M));
    a->m = M;
}

/* Chan et al.'s merge of two (count, mean, sum of squared deviations)
 * partials of disjoint token sets: b into a. */
FLS_HD void fls_moments_merge(double *n_a, double *mean_a, double *m2_a, double n_b, double mean_b,
                              double m2_b)
{
    if (n_b == 0.0)
        return;
    if (*n_a == 0.0) {
        *n_a = n_b;
        *mean_a = mean_b;
        *m2_a = m2_b;
        return;
    }
    const double n = *n_a + n_b, d = mean_b - *mean_a;
    *mean_a += d * n_b / n;
    *m2_a += m2_b + d * d * *n_a * n_b / n;
    *n_a = n;
}

/* The log-sum-exp of a merged partial; greedy rows (T = 0) report the max,
 * the limit of T log sum exp(l / T). */
FLS_HD double fls_lse_value(double m, double s, int greedy)
{
    return greedy || m == -INFINITY ? m : m + log(s);
}

/* The partial of n tempered logits, summed in double in index order (the
 * CPU engine's tile partial). */
FLS_HD fls_lse fls_lse_span(const float *x, int64_t n)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    fls_lse a;
    a.m = m;
    a.s = 0.0;
    if (m > -INFINITY)
        for (int64_t i = 0; i < n; i++)
            a.s += exp((double)x[i] - (double)m);
    return a;
}

/* ---- A row's input errors, in the engines' order of priority ---- */

/* A NaN or +inf logit: FLS_ERR_NAN. -inf is a mask, never an error. */
FLS_HD FLS_BOOL fls_bad_logit(float l)
{
    return !(l <= 3.40282347e38f); /* one compare: true for NaN and +inf */
}

/* ---- Key resolution (docs/NOISE.md, "Exactness") ----
 * An fp32 key x + G keeps the noise only to ulp(|x|): once the keys that
 * decide a draw reach magnitude 2^12, the rounding moves a tie's odds by
 * more than 2^-15. A noisy row whose deciding value reaches FLS_KEY_LIMIT
 * is refused (FLS_ERR_TEMPERATURE), on every engine alike; below it the
 * contenders' keys and tempered logits stay under 2^12 + 2^7, whose
 * rounding moves any decision by at most 2^-14. The deciding value is, per
 * row, the key of the winner of the call's draw 0 (flat Gumbel-max: x + G;
 * grouped: the group key L_k + G'_k) or, with a rule, the tempered logit
 * of every token drawn. Greedy rows (T = 0) have no noise: never refused. */
#define FLS_KEY_LIMIT 4096.0

FLS_HD FLS_BOOL fls_key_unresolved(double k)
{
    return k >= FLS_KEY_LIMIT || (k <= -FLS_KEY_LIMIT && k > -INFINITY);
}

/* Whether a row (noisy: T > 0) is refused for its deciding value k. */
FLS_HD FLS_BOOL fls_key_refused(FLS_BOOL noisy, double k)
{
    return noisy && fls_key_unresolved(k);
}

/* A finite logit whose tempered value x is infinite: FLS_ERR_TEMPERATURE. */
FLS_HD FLS_BOOL fls_temper_overflows(float l, float x)
{
    return isfinite(l) && isinf(x);
}

#endif /* FLS_RULE_H */
