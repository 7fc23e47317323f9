/*
 * test_noise.c — freezes the noise contract: Philox4x32-10 known answers
 * (tests/kat_philox.txt), the counter layout, the frozen Gumbel values, the
 * row-seed derivation and the multinomial uniform.
 */
#include "tests/unit/common.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FLS_KAT_PATH
#define FLS_KAT_PATH "tests/kat_philox.txt"
#endif

/* The records named `name` of tests/kat_philox.txt (FLS_KAT_PATH overrides it). */
static int kat_records(const char *name, int nfields, kat_fn fn)
{
    return kat_each(FLS_KAT_PATH, "FLS_KAT_PATH", name, nfields, 0, fn, NULL);
}

static void check_philox(const uint64_t *f, int n, int line, void *arg)
{
    (void)n;
    (void)arg;
    if (f[0] != 10)
        return; /* other round counts are not part of the contract */
    uint32_t c[4] = {(uint32_t)f[1], (uint32_t)f[2], (uint32_t)f[3], (uint32_t)f[4]};
    uint32_t k[2] = {(uint32_t)f[5], (uint32_t)f[6]};
    fls_philox_block r = fls_philox4x32_10(c, k);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(r.r[i], (uint32_t)f[7 + i], "kat line %d: word %d is %08x, expected %08x", line, i,
                     r.r[i], (unsigned)f[7 + i]);
}

Test(noise, philox_known_answers)
{
    int n = kat_records("philox4x32", 11, check_philox);
    cr_assert_geq(n, 3, "expected at least Random123's three philox4x32 10 vectors, found %d", n);
}

static void check_noise(const uint64_t *f, int n, int line, void *arg)
{
    (void)n;
    (void)arg;
    uint64_t bits = fls_noise_bits(f[0], f[1], (uint32_t)f[2], f[3]);
    cr_expect_eq(bits, f[4], "kat line %d: bits %016llx, expected %016llx", line, (unsigned long long)bits,
                 (unsigned long long)f[4]);
    /* fls_gumbel is the transform of exactly these bits */
    float g = fls_gumbel(f[0], f[1], (uint32_t)f[2], f[3]);
    cr_expect_eq(f2u(g), f2u(fls_gumbel_from_bits(f[4])), "kat line %d: fls_gumbel differs", line);
}

Test(noise, counter_layout_known_answers)
{
    int n = kat_records("noise", 5, check_noise);
    cr_assert_geq(n, 5, "too few noise records: %d", n);
}

static void check_gumbel(const uint64_t *f, int n, int line, void *arg)
{
    (void)n;
    (void)arg;
    float e = fls_exponential_from_bits(f[0]);
    float g = fls_gumbel_from_bits(f[0]);
    cr_expect_eq(f2u(e), (uint32_t)f[1], "kat line %d: k %016llx: E %08x (%.9g), expected %08x (%.9g)", line,
                 (unsigned long long)f[0], f2u(e), (double)e, (unsigned)f[1], (double)u2f((uint32_t)f[1]));
    cr_expect_eq(f2u(g), (uint32_t)f[2], "kat line %d: k %016llx: G %08x (%.9g), expected %08x (%.9g)", line,
                 (unsigned long long)f[0], f2u(g), (double)g, (unsigned)f[2], (double)u2f((uint32_t)f[2]));
}

Test(noise, gumbel_known_answers)
{
    int n = kat_records("gumbel", 3, check_gumbel);
    cr_assert_geq(n, 8, "too few gumbel records: %d", n);
}

static void check_rowseed(const uint64_t *f, int n, int line, void *arg)
{
    (void)n;
    (void)arg;
    cr_expect_eq(fls_row_seed_derive(f[0], f[1]), f[2], "kat line %d: fls_row_seed_derive", line);
    cr_expect_eq(fls_row_seed(f[0], f[1]), f[2], "kat line %d: fls_row_seed (public)", line);
}

Test(noise, row_seed_known_answers)
{
    int n = kat_records("rowseed", 3, check_rowseed);
    cr_assert_geq(n, 3, "too few rowseed records: %d", n);
}

Test(noise, row_seed_public_matches_header)
{
    uint64_t s = 99;
    for (int i = 0; i < 1000; i++) {
        uint64_t seed = trng_next(&s), row = trng_next(&s) >> (i % 64);
        cr_assert_eq(fls_row_seed(seed, row), fls_row_seed_derive(seed, row));
    }
}

/* One Philox block serves tokens 2j and 2j + 1; the draw and offset enter the
 * counter, the seed the key. */
Test(noise, counter_layout_structure)
{
    uint64_t s = 7;
    for (int i = 0; i < 200; i++) {
        uint64_t seed = trng_next(&s), offset = trng_next(&s);
        uint32_t draw = (uint32_t)trng_next(&s);
        uint64_t j = trng_next(&s) >> 32; /* token pair index < 2^32 */
        uint32_t c[4] = {(uint32_t)j, draw, (uint32_t)offset, (uint32_t)(offset >> 32)};
        uint32_t k[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
        fls_philox_block b = fls_philox4x32_10(c, k);
        uint64_t even = ((uint64_t)b.r[1] << 32) | b.r[0], odd = ((uint64_t)b.r[3] << 32) | b.r[2];
        cr_assert_eq(fls_noise_bits(seed, offset, draw, 2 * j), even);
        cr_assert_eq(fls_noise_bits(seed, offset, draw, 2 * j + 1), odd);
        uint32_t c2[4], k2[2];
        fls_noise_counter(seed, offset, draw, 2 * j + 1, c2, k2);
        cr_assert(memcmp(c, c2, sizeof c) == 0 && memcmp(k, k2, sizeof k) == 0);
    }
}

/* The multinomial uniform is RN((k + 1/2) 2^-64) in double: strictly inside
 * (0, 1). */
Test(noise, multinomial_uniform)
{
    uint64_t ks[] = {0,
                     1,
                     2,
                     0x7fffffffffffffffull,
                     0x8000000000000000ull,
                     0xfffffffffffffbffull,
                     0xfffffffffffffc00ull,
                     0xfffffffffffffffeull,
                     0xffffffffffffffffull};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        double u = fls_uniform_from_bits(ks[i]);
        cr_assert(u > 0.0 && u < 1.0, "k %016llx: u = %a", (unsigned long long)ks[i], u);
    }
    cr_assert_eq(fls_uniform_from_bits(0), 0x1p-65);
    /* the largest k must not round up to 1: (2^64 - 1/2) 2^-64 is nearer to 1
     * than to 1 - 2^-53 */
    cr_assert(fls_uniform_from_bits(~0ull) < 1.0);
    uint64_t s = 3;
    for (int i = 0; i < 10000; i++) {
        uint64_t k = trng_next(&s) >> (i % 64);
        double u = fls_uniform_from_bits(k);
        cr_assert(u > 0.0 && u < 1.0);
        /* non-decreasing in k */
        if (k < ~0ull)
            cr_assert(fls_uniform_from_bits(k + 1) >= u, "k %016llx", (unsigned long long)k);
        /* below 2^52, (k + 1/2) 2^-64 is a double: no rounding at all */
        if (k < (1ull << 52))
            cr_assert_eq(u, ((double)k + 0.5) * 0x1p-64, "k %016llx", (unsigned long long)k);
    }
    /* FLS_MULTINOMIAL_TOKEN is the reserved token index 2^33 - 1 */
    cr_assert_eq(FLS_MULTINOMIAL_TOKEN, (1ull << 33) - 1);
}

/* The group noise domain (docs/NOISE.md, "Group noise"): frozen values. The
 * derivation of K' is the Philox block at the reserved draw word 0xFFFFFFFF;
 * group k's bits are token k's under K'. */
Test(noise, group_noise_frozen)
{
    const struct {
        uint64_t seed, key, bits;
        float g;
    } kat[] = {
        {0, 0xe8c7047b49fc3b2full, 0xd67fe7a7e37b85ccull, 0x1.bb7adep+0f},
        {1, 0xc2a260c356b2fd35ull, 0xb3956843efe7a511ull, 0x1.09752ap+0f},
        {0x0123456789abcdefull, 0x0019abdf21678b54ull, 0xd0138ea807105d3eull, 0x1.92df7cp+0f},
    };
    for (int i = 0; i < 3; i++) {
        const uint64_t k = fls_group_key(kat[i].seed);
        cr_assert_eq(k, kat[i].key, "group key of seed %d", i);
        cr_assert_eq(fls_group_noise_bits(k, 5, 2, 7), kat[i].bits);
        cr_assert_eq(fls_group_gumbel(k, 5, 2, 7), kat[i].g);
        /* the same layout as the token noise, under K' */
        cr_assert_eq(fls_group_noise_bits(k, 5, 2, 7), fls_noise_bits(k, 5, 2, 7));
        /* and the derivation uses the reserved draw word: never a token's block */
        uint32_t c[4] = {FLS_GROUP_TAG, 0xFFFFFFFFu, 0, 0},
                 key[2] = {(uint32_t)kat[i].seed, (uint32_t)(kat[i].seed >> 32)};
        fls_philox_block b = fls_philox4x32_10(c, key);
        cr_assert_eq(k, ((uint64_t)b.r[1] << 32) | b.r[0]);
    }
}
