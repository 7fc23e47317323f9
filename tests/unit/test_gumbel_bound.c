/*
 * test_gumbel_bound.c — the per-bucket bounds of lib/fls_gumbel_bound.h (the
 * table the CUDA engine uses to skip the logs of tokens that cannot win):
 * lo[j] <= fls_gumbel_from_bits(k) <= up[j] for every k of bucket j, checked
 * at every bucket's endpoints and their neighbours, densely at both ends of
 * the word range and around 2^63, and at random words; plus the table's shape
 * (ordered, finite, tight enough to be useful).
 */
#include "common.h"
#include "fls_gumbel_bound.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>

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
