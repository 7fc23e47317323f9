/*
 * simd_check.c — every CPU SIMD path against the portable twin, bit for bit,
 * without Criterion: it runs where the test framework is absent (the GPU
 * machine, whose processor may have AVX-512 that the development machines
 * lack). Prints one line per path and exits non-zero on any difference.
 * tests/unit/test_kernels.c holds the Criterion version; this one is also a
 * unit test (tests/unit/meson.build).
 */
#include "lib/cpu/cpu_kernels.h"
#include "lib/base/fls_noise.h"
#include "lib/front/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void)
{
    return fls_splitmix64_(rng++);
}
static float unit_float(void)
{
    return (float)(next() >> 40) * 0x1p-24f - 0.5f;
}

/* n random weights in dtype dt */
static void fill_w(char *w, fls_dtype dt, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float x = unit_float();
        if (dt == FLS_DTYPE_F32)
            ((float *)w)[i] = x;
        else if (dt == FLS_DTYPE_F16)
            ((uint16_t *)w)[i] = fls_f32_to_f16(x);
        else
            ((uint16_t *)w)[i] = fls_f32_to_bf16(x);
    }
}

static int check_path(fls_simd simd, const char *name)
{
    fls_cpu_kernels ref, k;
    fls_cpu_kernels_portable(&ref);
    fls_cpu_kernels_portable(&k);
    if (simd == FLS_SIMD_AVX2)
        fls_cpu_kernels_avx2(&k);
    else if (simd == FLS_SIMD_AVX512)
        fls_cpu_kernels_avx512(&k);
    long cases = 0, bad = 0;
    const int64_t Ds[] = {1, 15, 16, 17, 77, 256, 1000};
    const int64_t Bs[] = {1,  2,  3,  5,
                          10, 13, 16, 37}; /* each AVX-512 kernel: direct, stream, rows (8, 12, 16), panels */
    const int64_t nvs[] = {11, 70};
    float *scratch = aligned_alloc(64, FLS_CPU_SCRATCH_FLOATS * sizeof(float));
    const fls_dtype dts[] = {FLS_DTYPE_F32, FLS_DTYPE_F16, FLS_DTYPE_BF16};
    for (size_t di = 0; di < sizeof Ds / sizeof *Ds; di++)
        for (size_t bi = 0; bi < sizeof Bs / sizeof *Bs; bi++)
            for (size_t ti = 0; ti < 3 * sizeof nvs / sizeof *nvs; ti++) {
                int64_t D = Ds[di], B = Bs[bi], nv = nvs[ti / 3], Dp = (D + 15) / 16 * 16, ldw = D + 3;
                fls_dtype dt = dts[ti % 3];
                size_t es = fls_dtype_size(dt);
                char *w = malloc((size_t)(nv * ldw) * es);
                float *wp = calloc((size_t)(nv * Dp), sizeof(float));
                float *h = calloc((size_t)(B * Dp), sizeof(float));
                float *o1 = malloc((size_t)(B * nv) * sizeof(float)),
                      *o2 = malloc((size_t)(B * nv) * sizeof(float));
                fill_w(w, dt, nv * ldw);
                for (int64_t b = 0; b < B; b++)
                    for (int64_t d = 0; d < D; d++)
                        h[b * Dp + d] = unit_float();
                ref.dot_direct(w, dt, ldw, nv, D, h, NULL, B, Dp, o1, nv, scratch);
                k.dot_direct(w, dt, ldw, nv, D, h, NULL, B, Dp, o2, nv, scratch);
                bad += memcmp(o1, o2, (size_t)(B * nv) * sizeof(float)) != 0;
                /* with H packed by the caller, where the path packs it */
                const int64_t hpn = k.pack_h ? k.packed_h_floats(B, Dp) : 0;
                if (hpn > 0) {
                    float *hpk = aligned_alloc(64, ((size_t)hpn * sizeof(float) + 63) / 64 * 64);
                    memset(hpk, 0xff, (size_t)hpn * sizeof(float)); /* NaNs where pack_h writes nothing */
                    k.pack_h(h, B, Dp, hpk);
                    memset(o2, 0xff, (size_t)(B * nv) * sizeof(float));
                    k.dot_direct(w, dt, ldw, nv, D, h, hpk, B, Dp, o2, nv, scratch);
                    bad += memcmp(o1, o2, (size_t)(B * nv) * sizeof(float)) != 0;
                    cases++;
                    free(hpk);
                }
                for (int64_t i = 0; i < nv; i++)
                    k.convert(w + (size_t)(i * ldw) * es, dt, D, wp + i * Dp, Dp);
                k.dot_f32(wp, nv, h, B, Dp, o2, nv);
                bad += memcmp(o1, o2, (size_t)(B * nv) * sizeof(float)) != 0;
                cases += 2;
                free(w), free(wp), free(h), free(o1), free(o2);
            }
    free(scratch);
    float g1[301], g2[301];
    for (int r = 0; r < 2000; r++) {
        uint64_t seed = next(), off = next() % 7, v0 = next() % 100000;
        uint32_t d = (uint32_t)(next() % 5);
        ref.gumbel(seed, off, d, v0, 301, g1);
        k.gumbel(seed, off, d, v0, 301, g2);
        bad += memcmp(g1, g2, sizeof g1) != 0;
        cases++;
    }
    printf("simd-check: %-8s %s (%ld cases, %ld differ)\n", name, bad ? "FAIL" : "ok", cases, bad);
    return bad != 0;
}

/* The AMX path (cpu_amx.c) sums bf16 W's products in the tile unit's
 * order: its logits are checked against the exact dot product (double)
 * within the worst-case rounding of any order of D + 32 additions of exact
 * products, 2 (D + 32) 2^-24 sum |w h| (a wrong tile layout misses by the
 * size of the terms), and for what the path promises bit for bit: the same
 * logit for a token whatever the call's tokens around it (split calls), the
 * rows around it (a row alone), and whether H came packed. Other dtypes run
 * the AVX-512 kernels: bit-identical to portable. */
static int check_amx(void)
{
    fls_cpu_kernels ref, k;
    fls_cpu_kernels_portable(&ref);
    fls_cpu_select_kernels(FLS_SIMD_AMX, &k);
    long cases = 0, bad = 0, logits = 0, same = 0;
    double worst = 0.0; /* largest |error| / (2^-24 sum |w h|) */
    const int64_t Ds[] = {1, 15, 16, 17, 33, 77, 256, 1000};
    const int64_t Bs[] = {1, 2, 5, 16, 17, 37, 70};
    const int64_t nvs[] = {11, 70};
    float *scratch = aligned_alloc(64, FLS_CPU_SCRATCH_FLOATS * sizeof(float));
    const fls_dtype dts[] = {FLS_DTYPE_F32, FLS_DTYPE_F16, FLS_DTYPE_BF16};
    for (size_t di = 0; di < sizeof Ds / sizeof *Ds; di++)
        for (size_t bi = 0; bi < sizeof Bs / sizeof *Bs; bi++)
            for (size_t ti = 0; ti < 3 * sizeof nvs / sizeof *nvs; ti++) {
                const int64_t D = Ds[di], B = Bs[bi], nv = nvs[ti / 3], Dp = (D + 15) / 16 * 16, ldw = D + 3;
                const fls_dtype dt = dts[ti % 3];
                const size_t es = fls_dtype_size(dt);
                /* exactly nv rows: a read past them or past D is for the sanitizers to catch */
                char *w = malloc((size_t)(nv * ldw) * es);
                float *h = calloc((size_t)(B * Dp), sizeof(float));
                float *o1 = malloc((size_t)(B * nv) * sizeof(float)),
                      *o2 = malloc((size_t)(B * nv) * sizeof(float)),
                      *o3 = malloc((size_t)(B * nv) * sizeof(float));
                fill_w(w, dt, nv * ldw);
                for (int64_t b = 0; b < B; b++)
                    for (int64_t d = 0; d < D; d++) /* bf16-exact rows (one part) and full f32 rows (three) */
                        h[b * Dp + d] =
                            b % 3 == 1 ? fls_bf16_to_f32(fls_f32_to_bf16(unit_float())) : unit_float();
                ref.dot_direct(w, dt, ldw, nv, D, h, NULL, B, Dp, o1, nv, scratch);
                memset(o2, 0xff, (size_t)(B * nv) * sizeof(float));
                k.dot_direct(w, dt, ldw, nv, D, h, NULL, B, Dp, o2, nv, scratch);
                cases++;
                if (dt != FLS_DTYPE_BF16) {
                    bad += memcmp(o1, o2, (size_t)(B * nv) * sizeof(float)) != 0;
                } else {
                    for (int64_t b = 0; b < B; b++)
                        for (int64_t i = 0; i < nv; i++) {
                            double e = 0.0, a = 0.0;
                            for (int64_t d = 0; d < D; d++) {
                                const double p = (double)fls_bf16_to_f32(((uint16_t *)w)[i * ldw + d]) *
                                                 (double)h[b * Dp + d];
                                e += p;
                                a += fabs(p);
                            }
                            const double err = fabs((double)o2[b * nv + i] - e), unit = a * 0x1p-24;
                            const int ok = err <= 2.0 * (double)(D + 32) * unit;
                            bad += !ok;
                            if (!ok && bad <= 5)
                                printf(
                                    "simd-check: amx D=%lld B=%lld nv=%lld row %lld token %lld: %.9g, exact "
                                    "%.9g\n",
                                    (long long)D, (long long)B, (long long)nv, (long long)b, (long long)i,
                                    (double)o2[b * nv + i], e);
                            if (unit > 0.0 && err / unit > worst)
                                worst = err / unit;
                            logits++;
                            same += memcmp(&o1[b * nv + i], &o2[b * nv + i], sizeof(float)) == 0;
                        }
                }
                /* H packed by the caller */
                const int64_t hpn = k.packed_h_floats(B, Dp);
                float *hpk = aligned_alloc(64, ((size_t)hpn * sizeof(float) + 63) / 64 * 64);
                memset(hpk, 0xff, (size_t)hpn * sizeof(float));
                k.pack_h(h, B, Dp, hpk);
                memset(o3, 0xff, (size_t)(B * nv) * sizeof(float));
                k.dot_direct(w, dt, ldw, nv, D, h, hpk, B, Dp, o3, nv, scratch);
                bad += memcmp(o2, o3, (size_t)(B * nv) * sizeof(float)) != 0;
                /* the tokens in two calls, split at 5 (inside the first tile) */
                memset(o3, 0xff, (size_t)(B * nv) * sizeof(float));
                k.dot_direct(w, dt, ldw, 5, D, h, hpk, B, Dp, o3, nv, scratch);
                k.dot_direct(w + (size_t)(5 * ldw) * es, dt, ldw, nv - 5, D, h, hpk, B, Dp, o3 + 5, nv,
                             scratch);
                bad += memcmp(o2, o3, (size_t)(B * nv) * sizeof(float)) != 0;
                /* the last row alone */
                k.dot_direct(w, dt, ldw, nv, D, h + (B - 1) * Dp, NULL, 1, Dp, o3, nv, scratch);
                bad += memcmp(o2 + (B - 1) * nv, o3, (size_t)nv * sizeof(float)) != 0;
                cases += 3;
                free(hpk);
                free(w), free(h), free(o1), free(o2), free(o3);
            }
    free(scratch);
    printf("simd-check: %-8s %s (%ld cases, %ld fail; bf16 W: %ld logits, %.1f %% bit-equal to the canonical "
           "order, largest error %.2f x 2^-24 sum |w h|)\n",
           "amx", bad ? "FAIL" : "ok", cases, bad, logits,
           logits ? 100.0 * (double)same / (double)logits : 0.0, worst);
    return bad != 0;
}

int main(void)
{
    int fail = 0, ran = 0;
    const fls_simd paths[] = {FLS_SIMD_AVX2, FLS_SIMD_AVX512};
    for (int i = 0; i < 2; i++) {
        if (!fls_cpu_simd_supported(paths[i])) {
            printf("simd-check: %-8s skipped: this processor lacks it\n", fls_simd_name(paths[i]));
            continue;
        }
        fail |= check_path(paths[i], fls_simd_name(paths[i]));
        ran++;
    }
    if (fls_cpu_simd_supported(FLS_SIMD_AMX)) {
        fail |= check_amx();
        ran++;
    } else {
        printf("simd-check: %-8s skipped: this processor (or its kernel) lacks it\n", "amx");
    }
    printf("simd-check: %d path(s) checked against portable: %s\n", ran, fail ? "FAIL" : "ok");
    return fail;
}
