/*
 * test_curand.c — the C Philox4x32-10 of lib/base/fls_noise.h against cuRAND,
 * where cuRAND is installed (skipped with a message otherwise):
 *  1. cuRAND's host generator (curandCreateGeneratorHost with
 *     CURAND_RNG_PSEUDO_PHILOX4_32_10; it runs without a GPU);
 *  2. cuRAND's device function curand_Philox4x32_10 compiled for the host
 *     (curand_ref.cpp), on random counters and keys.
 *
 * The host generator's output order, found by experiment (CUDA 13.0,
 * cuRAND 10; it is not documented): with seed s and offset 0, curandGenerate
 * of 32-bit words returns word 4j + q = r_q of
 *     Philox4x32_10(counter (j / 65536, 0, j % 65536, 0), key (lo32(s), hi32(s)))
 * i.e. it emulates 65536 device threads, thread t using subsequence t
 * (counter words 2..3) and each thread's step j / 65536 in counter word 0;
 * the output walks threads first. The four words of a block come out in
 * order. (A nonzero offset o shifted the word index by o in our checks, but
 * only offset 0 is asserted here.) Generating 2^19 + 16 words crosses the
 * 65536-block boundary, so both counter words 0 and 2 are exercised.
 */
#include "tests/unit/common.h"

#include <criterion/criterion.h>

#include <stdlib.h>

#if FLS_HAVE_CURAND
#include <curand.h>
#endif

#if FLS_HAVE_CURAND_REF
void fls_test_curand_philox(const uint32_t c[4], const uint32_t k[2], uint32_t out[4]);
#endif

#if FLS_HAVE_CURAND
static void compare_host_generator(uint64_t seed)
{
    const size_t n = ((size_t)1 << 19) + 16;
    uint32_t *buf = malloc(n * sizeof *buf);
    cr_assert_not_null(buf);
    curandGenerator_t g;
    curandStatus_t cs = curandCreateGeneratorHost(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10);
    cr_assert_eq(cs, CURAND_STATUS_SUCCESS, "curandCreateGeneratorHost: status %d", (int)cs);
    cr_assert_eq(curandSetPseudoRandomGeneratorSeed(g, (unsigned long long)seed), CURAND_STATUS_SUCCESS);
    cr_assert_eq(curandSetGeneratorOffset(g, 0), CURAND_STATUS_SUCCESS);
    cs = curandGenerate(g, buf, n);
    cr_assert_eq(cs, CURAND_STATUS_SUCCESS, "curandGenerate: status %d", (int)cs);
    curandDestroyGenerator(g);

    const uint32_t k[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    for (size_t j = 0; j < n / 4; j++) {
        const uint32_t c[4] = {(uint32_t)(j / 65536), 0, (uint32_t)(j % 65536), 0};
        fls_philox_block r = fls_philox4x32_10(c, k);
        for (int q = 0; q < 4; q++)
            if (r.r[q] != buf[4 * j + q])
                cr_assert_fail("seed %016llx: cuRAND host word %zu = %08x, fls_philox4x32_10 counter "
                               "(%u, 0, %u, 0) word %d = %08x",
                               (unsigned long long)seed, 4 * j + q, buf[4 * j + q], c[0], c[2], q, r.r[q]);
    }
    free(buf);
}
#endif

Test(curand, host_generator)
{
#if FLS_HAVE_CURAND
    compare_host_generator(0);
    compare_host_generator(0x0123456789ABCDEFull);
    compare_host_generator(~0ull);
#else
    cr_skip_test("cuRAND not found at build time (libcurand, curand.h): comparison with its host "
                 "generator skipped");
#endif
}

Test(curand, device_function_on_random_inputs)
{
#if FLS_HAVE_CURAND_REF
    uint64_t s = 2024;
    int n = 200000 >> sweep_scale_shift();
    for (int i = 0; i < n; i++) {
        uint64_t a = trng_next(&s), b = trng_next(&s), c2 = trng_next(&s);
        /* mix full-range words with small ones (counters near zero are the common case) */
        int sh = i % 32;
        uint32_t c[4] = {(uint32_t)a >> sh, (uint32_t)(a >> 32), (uint32_t)b >> (sh % 32),
                         (uint32_t)(b >> 32)};
        uint32_t k[2] = {(uint32_t)c2, (uint32_t)(c2 >> 32) >> sh};
        uint32_t want[4];
        fls_test_curand_philox(c, k, want);
        fls_philox_block r = fls_philox4x32_10(c, k);
        for (int q = 0; q < 4; q++)
            if (r.r[q] != want[q])
                cr_assert_fail("counter %08x %08x %08x %08x key %08x %08x: word %d %08x, cuRAND %08x", c[0],
                               c[1], c[2], c[3], k[0], k[1], q, r.r[q], want[q]);
    }
#else
    cr_skip_test("cuRAND headers or a C++ compiler not found at build time: comparison with "
                 "curand_Philox4x32_10 skipped");
#endif
}
