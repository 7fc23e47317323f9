/*
 * test_gumbel_bound.c — the per-bucket bounds of lib/base/fls_gumbel_bound.h (the
 * table the CUDA engine uses to skip the logs of tokens that cannot win):
 * lo[j] <= fls_gumbel_from_bits(k) <= up[j] for every k of bucket j, checked
 * at every bucket's endpoints and their neighbours, densely at both ends of
 * the word range and around 2^63, and at random words; plus the table's shape
 * (ordered, finite, tight enough to be useful); likewise the top bucket's
 * sub-bucket bounds (fls_gumbel_bound_top).
 */
#include "tests/unit/common.h"
#include "lib/base/fls_gumbel_bound.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

static float g_up[FLS_GB_N], g_lo[FLS_GB_N];

static void build(void)
{
    fls_gumbel_bound_table(g_up, g_lo);
}

static void check_word(uint64_t k)
{
    int j = (int)(k >> FLS_GB_SHIFT);
    float g = fls_gumbel_from_bits(k);
    if (!(g <= g_up[j]) || !(g >= g_lo[j]))
        cr_assert_fail("k %016llx (bucket %d): G %.9g outside [%.9g, %.9g]", (unsigned long long)k, j,
                       (double)g, (double)g_lo[j], (double)g_up[j]);
}

TestSuite(gumbel_bound, .init = build);

Test(gumbel_bound, table_shape)
{
    for (int j = 0; j < FLS_GB_N; j++) {
        cr_assert(isfinite(g_up[j]) && isfinite(g_lo[j]), "bucket %d not finite", j);
        cr_assert(g_lo[j] < g_up[j], "bucket %d: lo %.9g >= up %.9g", j, (double)g_lo[j], (double)g_up[j]);
        if (j > 0) {
            cr_assert(g_up[j] >= g_up[j - 1], "up not non-decreasing at %d", j);
            cr_assert(g_lo[j] >= g_lo[j - 1], "lo not non-decreasing at %d", j);
        }
        /* the margin is a few ulps, not a bucket: up[j] is within 2^-17 |G| + 2^-17
         * of G at the bucket's last word (the last bucket: FLS_GUMBEL_MAX) */
        if (j < FLS_GB_N - 1) {
            double gh = (double)fls_gumbel_from_bits(fls_gb_last(j));
            cr_assert(g_up[j] - gh <= fabs(gh) * 0x1p-17 + 0x1p-17, "bucket %d: up %.9g too loose over %.9g",
                      j, (double)g_up[j], gh);
        }
        double gl = (double)fls_gumbel_from_bits(fls_gb_first(j));
        cr_assert(gl - g_lo[j] <= fabs(gl) * 0x1p-17 + 0x1p-17, "bucket %d: lo too loose", j);
    }
    cr_assert_eq(g_up[FLS_GB_N - 1], FLS_GUMBEL_MAX);
    cr_assert(fls_gumbel_from_bits(~0ull) <= FLS_GUMBEL_MAX);
    cr_assert_eq(fls_gb_first(0), 0ull);
    cr_assert_eq(fls_gb_last(FLS_GB_N - 1), ~0ull);
    cr_assert_eq(fls_gb_last(5) + 1, fls_gb_first(6));
}

Test(gumbel_bound, bucket_endpoints_and_neighbours)
{
    for (int j = 0; j < FLS_GB_N; j++) {
        uint64_t a = fls_gb_first(j), z = fls_gb_last(j);
        for (uint64_t d = 0; d < 64; d++) {
            check_word(a + d);
            check_word(z - d);
            check_word(a + (d << 20)); /* coarser steps into the bucket */
            check_word(z - (d << 20));
        }
        check_word(a + ((z - a) >> 1)); /* middle */
        if (j > 0)
            check_word(a - 1); /* the neighbour in the bucket below */
        if (j < FLS_GB_N - 1)
            check_word(z + 1);
    }
}

Test(gumbel_bound, dense_ends_and_middle, .timeout = 120)
{
    /* 2^20 consecutive words at both ends and on both sides of 2^63, where
     * G changes fastest with k and the transform switches branch */
    for (uint64_t d = 0; d < ((uint64_t)1 << 20); d++) {
        check_word(d);
        check_word(~d);
        check_word(((uint64_t)1 << 63) + d);
        check_word(((uint64_t)1 << 63) - 1 - d);
    }
}

Test(gumbel_bound, random_words, .timeout = 120)
{
    uint64_t s = 0x5eed5eed12345678ull;
    for (int i = 0; i < (1 << 21); i++) {
        uint64_t r = trng_next(&s);
        int mode = i & 3;
        /* uniform words, words near the top, words with few bits set, words near 0 */
        uint64_t k =
            mode == 0 ? r : (mode == 1 ? ~(r >> (r & 63)) : (mode == 2 ? r & trng_next(&s) : r >> (r & 63)));
        check_word(k);
    }
}

/* ---- the top bucket's sub-bucket bounds (fls_gumbel_bound_top) ---- */

static void check_top_word(const float *up2, uint64_t k)
{
    cr_assert_eq((int)(k >> FLS_GB_SHIFT), FLS_GB_N - 1);
    int j2 = (int)((k >> FLS_GB2_SHIFT) & (FLS_GB2_N - 1));
    float g = fls_gumbel_from_bits(k);
    if (!(g <= up2[j2]))
        cr_assert_fail("k %016llx (top sub-bucket %d): G %.9g above %.9g", (unsigned long long)k, j2,
                       (double)g, (double)up2[j2]);
}

Test(gumbel_bound, top_table, .timeout = 120)
{
    float up2[FLS_GB2_N];
    fls_gumbel_bound_top(up2);
    cr_assert_eq(fls_gb2_first(0), fls_gb_first(FLS_GB_N - 1));
    cr_assert_eq(fls_gb2_last(FLS_GB2_N - 1), ~0ull);
    cr_assert_eq(fls_gb2_last(7) + 1, fls_gb2_first(8));
    cr_assert_eq(up2[FLS_GB2_N - 1], FLS_GUMBEL_MAX);
    for (int j = 0; j < FLS_GB2_N; j++) {
        cr_assert(isfinite(up2[j]), "sub-bucket %d not finite", j);
        cr_assert(up2[j] <= g_up[FLS_GB_N - 1], "sub-bucket %d looser than the bucket", j);
        if (j > 0)
            cr_assert(up2[j] >= up2[j - 1], "up2 not non-decreasing at %d", j);
        if (j < FLS_GB2_N - 1) {
            /* tight: a few ulps above G at the sub-bucket's last word */
            double gh = (double)fls_gumbel_from_bits(fls_gb2_last(j));
            cr_assert(up2[j] - gh <= fabs(gh) * 0x1p-17 + 0x1p-17, "sub-bucket %d: %.9g too loose over %.9g",
                      j, (double)up2[j], gh);
        }
        /* every sub-bucket's ends, their neighbours and steps into it */
        uint64_t a = fls_gb2_first(j), z = fls_gb2_last(j);
        for (uint64_t d = 0; d < 64; d++) {
            check_top_word(up2, a + d);
            check_top_word(up2, z - d);
            check_top_word(up2, a + (d << 30));
            check_top_word(up2, z - (d << 30));
        }
        check_top_word(up2, a + ((z - a) >> 1));
        if (j > 0)
            check_top_word(up2, a - 1);
    }
    /* densely at the very top, where G grows fastest with k */
    for (uint64_t d = 0; d < ((uint64_t)1 << 20); d++)
        check_top_word(up2, ~d);
    uint64_t s = 0x70b70b70b70bull;
    for (int i = 0; i < (1 << 20); i++)
        check_top_word(up2, fls_gb_first(FLS_GB_N - 1) | (trng_next(&s) >> FLS_GB_BITS));
    /* the split is useful: half the top bucket's words have a bound below 8.5 */
    cr_assert(up2[FLS_GB2_N / 2] < 8.5f, "up2 middle %.9g", (double)up2[FLS_GB2_N / 2]);
}

/* ---- fls_temper_upper: a division-free upper bound of fl(l / T) ---- */

static int64_t g_upper_checked;

/* y >= x = fl(l / T) in the order a negated skip test sees (a NaN y is never
 * skipped, so it passes); and not loose: within |x| 2^-19 + 2^-99. */
static void check_upper(float l, float T)
{
    const float rT = fls_temper_rcp(T);
    const float r = 1.0f / T;
    if (rT == 0.0f) {
        cr_assert(!(r >= 0x1p-126f && r <= 0x1p126f), "T %a: fl(1/T) = %a is normal but rcp gave 0",
                  (double)T, (double)r);
        return;
    }
    cr_assert_eq(rT, r, "T %a: rcp %a, fl(1/T) %a", (double)T, (double)rT, (double)r);
    const float x = l / T, y = fls_temper_upper(l, rT);
    if (y < x)
        cr_assert_fail("l %a T %a: bound %a below fl(l / T) = %a", (double)l, (double)T, (double)y,
                       (double)x);
    if (isfinite(x) && isfinite(y) && (double)y - (double)x > fabs((double)x) * 0x1p-19 + 0x1p-99)
        cr_assert_fail("l %a T %a: bound %a too loose over %a", (double)l, (double)T, (double)y, (double)x);
    if (l == -INFINITY)
        cr_assert(y == -INFINITY, "a masked token must stay skippable");
    g_upper_checked++;
}

static float float_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

Test(gumbel_bound, temper_upper_edges)
{
    /* T at the ends of the range where fl(1/T) is normal, and beyond */
    const float Ts[] = {0x1p-126f,
                        0x1.000002p-126f,
                        0x1p-127f,
                        1e-40f,
                        1e-38f,
                        1e-30f,
                        1e-10f,
                        0.3f,
                        0.7f,
                        1.0f,
                        1.5f,
                        3.0f,
                        100.0f,
                        1e30f,
                        3e37f,
                        0x1p126f,
                        0x1.fffffep125f,
                        0x1.000002p126f,
                        0x1.8p126f,
                        0x1p127f,
                        3.4e38f};
    const float Ls[] = {0.0f,    -0.0f,  0x1p-149f, -0x1p-149f, 0x1p-126f, -0x1p-126f, 1e-30f,
                        -1e-30f, 1.0f,   -1.0f,     0.7f,       -12.5f,    1e30f,      -1e30f,
                        1e38f,   -1e38f, 3.4e38f,   -3.4e38f,   INFINITY,  -INFINITY};
    for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++)
        for (size_t j = 0; j < sizeof Ls / sizeof Ls[0]; j++) {
            check_upper(Ls[j], Ts[i]);
            /* the logits around the overflow threshold l = T * FLT_MAX, and
             * around the subnormal edge of the quotient */
            const float edges[] = {Ts[i] * 3.4028235e38f, Ts[i] * 0x1p-126f, Ts[i] * 0x1p-149f};
            for (size_t e = 0; e < 3; e++) {
                float l = edges[e];
                for (int k = 0; k < 64 && isfinite(l); k++) {
                    check_upper(l, Ts[i]);
                    check_upper(-l, Ts[i]);
                    l = nextafterf(l, INFINITY);
                }
                l = edges[e];
                for (int k = 0; k < 64 && l > 0.0f; k++) {
                    check_upper(l, Ts[i]);
                    check_upper(-l, Ts[i]);
                    l = nextafterf(l, 0.0f);
                }
            }
        }
    cr_assert(g_upper_checked > 10000, "only %lld pairs had a normal fl(1/T)", (long long)g_upper_checked);
}

Test(gumbel_bound, temper_upper_random, .timeout = 120)
{
    uint64_t s = 0x7e3e7e3e00c0ffeeull;
    int64_t n = 0;
    for (int i = 0; i < (1 << 22); i++) {
        const uint64_t r = trng_next(&s);
        /* every finite positive float as T, logits of every exponent and both signs;
         * every fourth pair with logits of realistic size and T in (0, 4] */
        float T = float_of_bits((uint32_t)(r % 0x7f7fffffu) + 1u);
        float l = float_of_bits((uint32_t)(r >> 32) & 0xff7fffffu); /* finite, any sign */
        if ((i & 3) == 0) {
            T = (float)((double)(r & 0xffffff) * 0x1p-22) + 0x1p-10f;
            l = trng_float(&s) * 40.0f;
        }
        check_upper(l, T);
        n++;
    }
    cr_assert_eq(n, (int64_t)1 << 22);
}
