/*
 * stair.h — the candidate state of the filter rules and of sampling without
 * replacement: a per-(row, draw) "K-staircase". C, C++, CUDA.
 *
 * Every filter of the family (min-p, top-k, top-p, and any rule of
 * variants/registry.h) keeps a support of the form {v : x_v >= c}: an
 * upper set in the rank order (larger x first, lower index first on ties),
 * whose cutoff c is known only once the whole row has been seen. The token
 * is the Gumbel-max over the support (without replacement: the K largest
 * keys, in order), with the contract's noise: a token that survives every
 * filter is exactly the unfiltered token.
 *
 * The K-staircase keeps, in rank order, every token whose key is among the
 * K best keys (larger key, lower index on ties) of the tokens ranked at or
 * before it. For any upper set P of the rank order, the K best keys of P are
 * all in the staircase (each of them is among the K best of its own prefix,
 * a subset of P), so one state answers every cutoff: select() takes the K
 * best keys among the entries with x >= c. For K = 1 the entries are the
 * "records" of the rank order: expected O(log n) of them for n tokens,
 * O(K log(n / K)) in general. Merging two staircases of disjoint token sets
 * (push every entry of one into the other) gives the staircase of the
 * union: associative, commutative, independent of tiling and threads.
 *
 * The state has a fixed capacity; a staircase that would exceed it is
 * marked `overflow` and the engine decides that (row, draw) by an exact
 * second pass (never a silent approximation).
 */
#ifndef FLS_VARIANT_STAIR_H
#define FLS_VARIANT_STAIR_H

#include "variants/rule.h"
#include "variants/topc.h"

typedef struct fls_stair_entry {
    float x, key;
    int64_t v;
} fls_stair_entry;

/* The header; cap entries follow it in memory (fls_stair_entries). */
typedef struct fls_stair {
    int32_t n, cap, K, overflow;
    /* cache: the weakest key among the first K entries (valid when wok) */
    float wk;
    int32_t wok;
    int64_t wv;
} fls_stair;

FLS_HD size_t fls_stair_bytes(int32_t cap)
{
    return sizeof(fls_stair) + (size_t)cap * sizeof(fls_stair_entry);
}

/* A capacity that a staircase of K over V tokens exceeds only with
 * negligible probability: 4x its expected size K (1 + ln(V / K)), plus 32. */
FLS_HD int32_t fls_stair_cap(int64_t K, int64_t V)
{
    double r = (double)V / (double)(K > 0 ? K : 1);
    double e = (double)K * (1.0 + (r > 1.0 ? log(r) : 0.0));
    double c = 4.0 * e + 32.0;
    return c > 1e6 ? 1000000 : (int32_t)c;
}

FLS_HD fls_stair_entry *fls_stair_entries(fls_stair *s)
{
    return (fls_stair_entry *)(s + 1);
}

FLS_HD const fls_stair_entry *fls_stair_entries_c(const fls_stair *s)
{
    return (const fls_stair_entry *)(s + 1);
}

FLS_HD void fls_stair_init(fls_stair *s, int32_t K, int32_t cap)
{
    s->n = 0;
    s->cap = cap;
    s->K = K;
    s->overflow = 0;
    s->wk = -INFINITY;
    s->wok = 0;
    s->wv = 0;
}

/* key a (token va) beats key b (token vb): larger key, lower index on ties */
FLS_HD FLS_BOOL fls_key_beats(float ka, int64_t va, float kb, int64_t vb)
{
    return ka > kb || (ka == kb && va < vb);
}

/* Pushes token v (tempered logit x, key). -inf keys never enter. */
FLS_HD void fls_stair_push(fls_stair *s, float x, float key, int64_t v)
{
    if (!(key > -INFINITY) || s->overflow)
        return;
    fls_stair_entry *e = fls_stair_entries(s);
    const int32_t K = s->K;
    /* position in rank order, counting the entries before it that beat it */
    int32_t p = s->n;
    while (p > 0 && fls_rank_before(x, v, e[p - 1].x, e[p - 1].v))
        p--;
    int32_t beaters = 0;
    for (int32_t i = 0; i < p && beaters < K; i++)
        beaters += fls_key_beats(e[i].key, e[i].v, key, v);
    if (beaters >= K)
        return;
    if (s->n == s->cap) {
        s->overflow = 1;
        return;
    }
    if (p < K)
        s->wok = 0; /* the first K entries change */
    for (int32_t i = s->n; i > p; i--)
        e[i] = e[i - 1];
    e[p].x = x;
    e[p].key = key;
    e[p].v = v;
    s->n++;
    /* entries after p now have one more token before them: drop those that
     * no longer are among the K best of their prefix */
    int32_t w = p + 1;
    for (int32_t i = p + 1; i < s->n; i++) {
        int32_t b = 0;
        for (int32_t j = 0; j < w && b < K; j++)
            b += fls_key_beats(e[j].key, e[j].v, e[i].key, e[i].v);
        if (b < K)
            e[w++] = e[i];
    }
    s->n = w;
}

/* Caches in (wk, wv) the weakest key among the first K entries (n >= K):
 * a token ranked after the K-th entry whose key loses to it cannot enter. */
FLS_HD void fls_stair_weakest(fls_stair *s)
{
    if (s->wok)
        return;
    const fls_stair_entry *e = fls_stair_entries(s);
    s->wk = e[0].key;
    s->wv = e[0].v;
    for (int32_t j = 1; j < s->K; j++)
        if (fls_key_beats(s->wk, s->wv, e[j].key, e[j].v)) {
            s->wk = e[j].key;
            s->wv = e[j].v;
        }
    s->wok = 1;
}

/* The tokens v0.. of a span with tempered logits x and keys: a cheap test
 * rejects a token ranked after the K-th entry that none of the first K
 * entries' keys lose to (the common case), the rest go through push. */
FLS_HD void fls_stair_push_span(fls_stair *s, const float *x, const float *key, int64_t v0, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (s->n >= s->K && !s->overflow) {
            const fls_stair_entry *e = fls_stair_entries(s);
            const fls_stair_entry *k = &e[s->K - 1];
            if (!fls_rank_before(x[i], v0 + i, k->x, k->v)) {
                fls_stair_weakest(s);
                if (fls_key_beats(s->wk, s->wv, key[i], v0 + i))
                    continue;
            }
        }
        fls_stair_push(s, x[i], key[i], v0 + i);
    }
}

FLS_HD void fls_stair_merge(fls_stair *a, const fls_stair *b)
{
    if (b->overflow)
        a->overflow = 1;
    const fls_stair_entry *e = fls_stair_entries_c(b);
    for (int32_t i = 0; i < b->n && !a->overflow; i++)
        fls_stair_push(a, e[i].x, e[i].key, e[i].v);
}

/* The k <= K best keys among the entries with x >= c, best first: writes
 * their entry indices to pick[] and returns how many (fewer than k when the
 * support holds fewer tokens). */
FLS_HD int32_t fls_stair_select(const fls_stair *s, float c, int32_t k, int32_t *pick)
{
    const fls_stair_entry *e = fls_stair_entries_c(s);
    int32_t m = 0;
    for (int32_t i = 0; i < s->n && e[i].x >= c; i++) {
        /* insertion into the k best so far */
        int32_t q = m < k ? m++ : k;
        if (q == k) {
            if (k == 0 || !fls_key_beats(e[i].key, e[i].v, e[pick[k - 1]].key, e[pick[k - 1]].v))
                continue;
            q = k - 1;
        }
        while (q > 0 && fls_key_beats(e[i].key, e[i].v, e[pick[q - 1]].key, e[pick[q - 1]].v)) {
            pick[q] = pick[q - 1];
            q--;
        }
        pick[q] = i;
    }
    return m;
}

/* The outputs of one draw from the picked support tokens (x, v), best key
 * first (the selection above): tokens, and each position's log-probability
 * given the positions before it (0 for greedy rows; positions past the
 * picks: -1 and 0). m is the row's max, lse its support's log-sum-exp.
 * Returns whether a noisy row drew a token beyond the key resolution
 * (fls_key_unresolved: the caller refuses the row, FLS_ERR_TEMPERATURE). */
FLS_HD int fls_write_draw(const float *px, const int64_t *pv, int32_t n, int64_t K, int greedy, double m,
                          double lse, int64_t *tok, float *lp)
{
    int unresolved = 0;
    double removed = 0.0;
    const double Z = exp(lse - m);
    for (int64_t j = 0; j < K; j++) {
        if (j >= n) {
            tok[j] = -1;
            lp[j] = 0.0f;
            continue;
        }
        tok[j] = pv[j];
        if (greedy) {
            lp[j] = 0.0f;
        } else if (j == 0) {
            lp[j] = (float)((double)px[j] - lse);
        } else {
            const double e = exp((double)px[j] - m);
            double rem = Z - removed;
            rem = rem > e ? rem : e; /* rounding: never less than the token's own mass */
            lp[j] = (float)((double)px[j] - m - log(rem));
        }
        if (!greedy) {
            removed += exp((double)px[j] - m);
            unresolved |= fls_key_unresolved((double)px[j]);
        }
    }
    return unresolved;
}

#endif /* FLS_VARIANT_STAIR_H */
