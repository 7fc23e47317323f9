/*
 * test_rule.c — the rule interface (variants/rule.h, temperature.h) on its
 * own: the candidate order and its packed form agree, merge is associative
 * and commutative with the lowest index on ties (so any partition of the
 * tokens gives the same winner), the log-sum-exp merge matches a direct sum
 * and does not depend on the order of partials beyond rounding, and the
 * temperature rule's finalize. Mutations these tests catch: a merge that
 * keeps the first state on equal keys, a packed order that inverts the
 * index, a greedy key with noise.
 */
#include "tests/unit/common.h"
#include "variants/rule.h"
#include "variants/temperature.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* keys with many exact ties: small integers / 4, a few -inf */
static float tie_key(uint64_t *rng)
{
    int64_t k = trng_int(rng, -6, 6);
    return k == -6 ? -INFINITY : (float)k / 4.0f;
}

Test(rule, packed_order_is_the_candidate_order)
{
    uint64_t rng = 11;
    for (int it = 0; it < 200000; it++) {
        fls_cand c = fls_cand_empty();
        float k0 = tie_key(&rng), k1 = tie_key(&rng);
        uint32_t i0 = (uint32_t)trng_int(&rng, 0, 40), i1 = (uint32_t)trng_int(&rng, 0, 40);
        fls_cand_push(&c, k0, 0.0f, i0);
        const int beats = fls_cand_beats(k1, i1, &c);
        const int packed = fls_pack(k1, i1) > fls_pack(k0, i0);
        /* -inf keys never enter the candidate; in the packed form they lose
         * to every finite key and the engines' finite marks reject them */
        if (k0 > -INFINITY && k1 > -INFINITY)
            cr_assert_eq(beats, packed, "(%g, %u) vs (%g, %u)", (double)k1, i1, (double)k0, i0);
        if (k0 > -INFINITY) {
            fls_cand u = fls_cand_unpack(fls_pack(k0, i0), 0.5f);
            cr_assert(u.key == k0 && u.idx == (int64_t)i0 && u.x == 0.5f);
        }
    }
    cr_assert_eq(fls_token_of(0), -1);
    cr_assert(isinf(fls_key_of(0)) && fls_key_of(0) < 0);
    cr_assert(fls_pack(-INFINITY, 0xfffffffeu) > 0, "the empty state is below every packed key");
    fls_cand e = fls_cand_unpack(fls_pack(-INFINITY, 3), 0.0f);
    cr_assert_eq(e.idx, -1, "a -inf key is no candidate");
}

/* The winner of tokens [0, n) pushed one by one in index order. */
static fls_cand sequential(const float *key, int n)
{
    fls_cand c = fls_cand_empty();
    for (int i = 0; i < n; i++)
        fls_cand_push(&c, key[i], key[i], i);
    return c;
}

Test(rule, merge_is_partition_invariant)
{
    uint64_t rng = 12;
    enum { N = 37 };
    float key[N];
    for (int it = 0; it < 20000; it++) {
        for (int i = 0; i < N; i++)
            key[i] = tie_key(&rng);
        const fls_cand ref = sequential(key, N);
        /* a random partition into up to 5 parts, each pushed in a random
         * order, merged in a random order */
        int part[N];
        const int np = (int)trng_int(&rng, 1, 5);
        for (int i = 0; i < N; i++)
            part[i] = (int)trng_int(&rng, 0, np - 1);
        fls_cand s[5];
        for (int p = 0; p < np; p++)
            fls_temperature_init(&s[p]);
        for (int r = 0; r < N; r++) {
            int i = (int)((r * 17 + it) % N); /* a permutation of 0..N-1 (17 is coprime to 37) */
            fls_cand_push(&s[part[i]], key[i], key[i], i);
        }
        fls_cand m = fls_cand_empty();
        for (int p = np - 1; p >= 0; p--)
            fls_temperature_merge(&m, &s[(p + it) % np]);
        cr_assert_eq(m.idx, ref.idx, "iteration %d", it);
        if (ref.idx >= 0)
            cr_assert_eq(m.key, ref.key);
    }
}

Test(rule, push_span_equals_pushes)
{
    uint64_t rng = 13;
    float x[64], g[64];
    for (int it = 0; it < 20000; it++) {
        const int n = (int)trng_int(&rng, 1, 64);
        const float T = it % 3 == 0 ? 0.0f : 0.7f;
        for (int i = 0; i < n; i++) {
            x[i] = tie_key(&rng);
            g[i] = (float)trng_int(&rng, -2, 2) / 4.0f;
        }
        fls_cand a = fls_cand_empty(), b = fls_cand_empty();
        fls_temperature_push_span(&a, x, T == 0.0f ? NULL : g, T, 100, n);
        for (int i = 0; i < n; i++)
            fls_temperature_push(&b, x[i], g[i], T, 100 + i);
        cr_assert(a.idx == b.idx && (a.idx < 0 || (a.key == b.key && a.x == b.x)), "iteration %d", it);
    }
    /* greedy keys carry no noise */
    cr_assert_eq(fls_temperature_key(1.5f, 30.0f, 0.0f), 1.5f);
    cr_assert_eq(fls_temperature_key(1.5f, 0.25f, 1.0f), 1.75f);
}

Test(rule, lse_merge_matches_direct_sum)
{
    uint64_t rng = 14;
    float x[200];
    for (int it = 0; it < 2000; it++) {
        const int n = (int)trng_int(&rng, 1, 200);
        for (int i = 0; i < n; i++)
            x[i] = trng_int(&rng, 0, 9) == 0 ? -INFINITY : (trng_float(&rng) - 0.5f) * 60.0f;
        /* direct, in long double */
        long double m = -INFINITY, s = 0;
        for (int i = 0; i < n; i++)
            m = x[i] > m ? x[i] : m;
        for (int i = 0; i < n && m > -INFINITY; i++)
            s += expl((long double)x[i] - m);
        /* in random pieces, merged in order and in reverse */
        fls_lse a = fls_lse_empty(), r = fls_lse_empty();
        fls_lse parts[200];
        int np = 0;
        for (int i0 = 0; i0 < n;) {
            int len = (int)trng_int(&rng, 1, 17);
            len = len < n - i0 ? len : n - i0;
            parts[np++] = fls_lse_span(x + i0, len);
            i0 += len;
        }
        for (int p = 0; p < np; p++)
            fls_lse_merge(&a, parts[p].m, parts[p].s);
        for (int p = np - 1; p >= 0; p--)
            fls_lse_merge(&r, parts[p].m, parts[p].s);
        if (m == -INFINITY) {
            cr_assert(a.m == -INFINITY && fls_lse_value(a.m, a.s, 0) == -INFINITY);
            continue;
        }
        const double want = (double)(m + logl(s));
        cr_assert(fabs(fls_lse_value(a.m, a.s, 0) - want) <= 1e-12 * (1 + fabs(want)), "forward %d", it);
        cr_assert(fabs(fls_lse_value(r.m, r.s, 0) - want) <= 1e-12 * (1 + fabs(want)), "reverse %d", it);
        cr_assert_eq(fls_lse_value(a.m, a.s, 1), (double)m, "greedy rows report the max");
        /* the float merge, as the GPU kernels run it */
        fls_lsef f = fls_lsef_empty();
        for (int p = 0; p < np; p++)
            fls_lsef_merge(&f, (float)parts[p].m, (float)parts[p].s);
        cr_assert(fabs((double)f.m + log((double)f.s) - want) <= 1e-5 * (1 + fabs(want)), "float %d", it);
    }
}

Test(rule, finalize)
{
    fls_cand c = fls_cand_empty();
    int64_t tok = 7;
    float lp = 3.0f;
    cr_assert_eq(fls_temperature_finalize(&c, 1.0f, 0.0, &tok, &lp), FLS_ERR_ALL_MASKED);
    cr_assert(tok == 7 && lp == 3.0f, "nothing written on error");
    fls_temperature_push(&c, 2.0f, 0.5f, 1.0f, 42);
    cr_assert_eq(fls_temperature_bound(&c), 2.5f);
    cr_assert_eq(fls_temperature_finalize(&c, 1.0f, 3.0, &tok, &lp), FLS_OK);
    cr_assert(tok == 42 && lp == -1.0f);
    cr_assert_eq(fls_temperature_finalize(&c, 0.0f, 3.0, &tok, NULL), FLS_OK);
    cr_assert_eq(fls_temperature_finalize(&c, 0.0f, 3.0, &tok, &lp), FLS_OK);
    cr_assert(lp == 0.0f, "greedy rows have log-probability 0");
}
