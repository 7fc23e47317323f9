/*
 * test_kernels.c — every CPU SIMD path's kernels (lib/cpu/cpu_kernels.h) against
 * their definitions, bit for bit: the noise against fls_gumbel, conversions
 * against the reference conversions, dot products against the documented
 * canonical accumulation order. Token-level tests almost never notice a
 * one-ulp difference in a logit or a Gumbel value (it needs a near-tie of
 * keys); these do. Paths the processor lacks are skipped with a message.
 */
#include "tests/unit/common.h"
#include "lib/cpu/cpu_kernels.h"
#include "lib/base/fls_gumbel_bound.h"
#include "lib/base/fls_noise.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct path {
    fls_simd simd;
    fls_cpu_kernels k;
} path;

static int kernel_paths(path *p)
{
    int n = 0;
    p[n].simd = FLS_SIMD_PORTABLE;
    fls_cpu_kernels_portable(&p[n++].k);
#if defined(__x86_64__)
    if (fls_cpu_simd_supported(FLS_SIMD_AVX2)) {
        p[n].simd = FLS_SIMD_AVX2;
        fls_cpu_kernels_portable(&p[n].k); /* the dispatcher upgrades the portable table */
        fls_cpu_kernels_avx2(&p[n++].k);
    } else {
        cr_log_info("AVX2 kernels not tested: the processor lacks AVX2/FMA/F16C");
    }
    if (fls_cpu_simd_supported(FLS_SIMD_AVX512)) {
        p[n].simd = FLS_SIMD_AVX512;
        fls_cpu_kernels_portable(&p[n].k);
        fls_cpu_kernels_avx512(&p[n++].k);
    } else {
        cr_log_info("AVX-512 kernels not tested: the processor lacks AVX-512F/BW/VL");
    }
#endif
    return n;
}

Test(kernels, gumbel_matches_contract)
{
    path p[3];
    int np = kernel_paths(p);
    const uint64_t starts[] = {
        0, 1, 2, 3, 14, 15, 1000, 1001, 0xfffffffeull, 0xffffffffull, (1ull << 33) - 200};
    const int64_t lens[] = {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 199};
    float *g = malloc(256 * sizeof *g);
    uint64_t s = 1;
    for (int pi = 0; pi < np; pi++)
        for (size_t si = 0; si < sizeof starts / sizeof starts[0]; si++)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
                for (int rep = 0; rep < 2; rep++) {
                    uint64_t seed = rep ? trng_next(&s) : 0, off = rep ? trng_next(&s) : 0;
                    uint32_t draw = rep ? (uint32_t)trng_next(&s) : 0;
                    int64_t n = lens[li];
                    for (int i = 0; i < 256; i++)
                        g[i] = u2f(GUARD_F32_BITS);
                    p[pi].k.gumbel(seed, off, draw, starts[si], n, g);
                    for (int64_t i = 0; i < n; i++) {
                        float want = fls_gumbel(seed, off, draw, starts[si] + (uint64_t)i);
                        if (f2u(g[i]) != f2u(want))
                            cr_assert_fail(
                                "%s gumbel(seed %016llx, offset %016llx, draw %u, v0 %llu, n %lld): "
                                "token %llu: %a, contract %a",
                                fls_simd_name(p[pi].simd), (unsigned long long)seed, (unsigned long long)off,
                                draw, (unsigned long long)starts[si], (long long)n,
                                (unsigned long long)(starts[si] + (uint64_t)i), (double)g[i], (double)want);
                    }
                    for (int i = (int)n; i < 256; i++)
                        cr_assert_eq(f2u(g[i]), GUARD_F32_BITS, "%s gumbel wrote past n = %lld",
                                     fls_simd_name(p[pi].simd), (long long)n);
                }
    free(g);
}

/* gumbel_skip on every path against its contract: each g[i] is the
 * token's noise bit for bit, or -inf where fl(x + up[bucket]) < thr; the
 * argmax of x + g (the engine's winner, lowest index on ties) is the one of
 * the full noise whenever thr is a key of the span; and some -inf happens
 * (a kernel that never skips would pass the rest). Thresholds: -inf (skip
 * nothing), every token's own key (as the engine passes: its best so far),
 * and above every key (skip where the bound allows). */
Test(kernels, gumbel_skip_contract)
{
    path p[3];
    int np = kernel_paths(p);
    float up[FLS_GB_N], lo[FLS_GB_N];
    fls_gumbel_bound_table(up, lo);
    const uint64_t starts[] = {0, 1, 2, 15, 1001, 0xfffffffeull, (1ull << 33) - 200};
    const int64_t lens[] = {0, 1, 3, 15, 16, 17, 33, 64, 199};
    float *g = malloc(256 * sizeof *g), *full = malloc(256 * sizeof *full), *x = malloc(256 * sizeof *x);
    uint64_t s = 7;
    long skipped = 0;
    for (int pi = 0; pi < np; pi++)
        for (size_t si = 0; si < sizeof starts / sizeof starts[0]; si++)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
                for (int rep = 0; rep < 4; rep++) {
                    const uint64_t seed = trng_next(&s), off = trng_next(&s) % 5, v0 = starts[si];
                    const uint32_t draw = (uint32_t)(trng_next(&s) % 3);
                    const int64_t n = lens[li];
                    /* logits spread over 0.5 (rep 0-1) or 20 (rep 2-3) */
                    for (int64_t i = 0; i < n; i++)
                        x[i] = (trng_float(&s) - 0.5f) * (rep < 2 ? 0.5f : 20.0f);
                    for (int64_t i = 0; i < n; i++)
                        full[i] = fls_gumbel(seed, off, draw, v0 + (uint64_t)i);
                    int64_t arg = -1;
                    float top = -INFINITY;
                    for (int64_t i = 0; i < n; i++)
                        if (x[i] + full[i] > top)
                            top = x[i] + full[i], arg = i;
                    const float thrs[] = {-INFINITY, n ? x[n / 2] + full[n / 2] : 0.0f, top, top + 30.0f};
                    for (int ti = 0; ti < 4; ti++) {
                        const float thr = thrs[ti];
                        for (int i = 0; i < 256; i++)
                            g[i] = u2f(GUARD_F32_BITS);
                        p[pi].k.gumbel_skip(seed, off, draw, v0, n, x, thr, up, g);
                        int64_t got = -1;
                        float gk = -INFINITY;
                        for (int64_t i = 0; i < n; i++) {
                            const uint64_t bits = fls_noise_bits(seed, off, draw, v0 + (uint64_t)i);
                            const int may_skip = x[i] + up[bits >> FLS_GB_SHIFT] < thr;
                            if (g[i] == -INFINITY && may_skip) {
                                skipped++;
                            } else if (f2u(g[i]) != f2u(full[i])) {
                                cr_assert_fail("%s gumbel_skip(v0 %llu, n %lld, thr %a): token %lld: %a, "
                                               "noise %a, skippable %d",
                                               fls_simd_name(p[pi].simd), (unsigned long long)v0,
                                               (long long)n, (double)thr, (long long)i, (double)g[i],
                                               (double)full[i], may_skip);
                            }
                            if (x[i] + g[i] > gk)
                                gk = x[i] + g[i], got = i;
                        }
                        if (ti == 1 || ti == 2)
                            cr_assert_eq(got, arg,
                                         "%s gumbel_skip (thr a key of the span): winner %lld, full "
                                         "noise %lld",
                                         fls_simd_name(p[pi].simd), (long long)got, (long long)arg);
                        for (int i = (int)n; i < 256; i++)
                            cr_assert_eq(f2u(g[i]), GUARD_F32_BITS, "%s gumbel_skip wrote past n = %lld",
                                         fls_simd_name(p[pi].simd), (long long)n);
                    }
                }
    cr_assert(skipped > 0, "gumbel_skip never skipped a token");
    free(g);
    free(full);
    free(x);
}

/* Many noise values per path, to reach rare branches of a vectorized log
 * (the transform's extremes come from bits, which only the scalar path can
 * be fed directly; here many random bits stand in). */
Test(kernels, gumbel_many_values)
{
    path p[3];
    int np = kernel_paths(p);
    const int64_t n = 1 << (16 - sweep_scale_shift());
    float *g = malloc((size_t)n * sizeof *g);
    for (int pi = 1; pi < np; pi++)
        for (uint64_t seed = 0; seed < 4; seed++) {
            p[pi].k.gumbel(seed * 0x9E3779B97F4A7C15ull, seed, (uint32_t)seed, 0, n, g);
            for (int64_t i = 0; i < n; i++) {
                float want = fls_gumbel(seed * 0x9E3779B97F4A7C15ull, seed, (uint32_t)seed, (uint64_t)i);
                if (f2u(g[i]) != f2u(want))
                    cr_assert_fail("%s gumbel token %lld: %a, contract %a (bits %016llx)",
                                   fls_simd_name(p[pi].simd), (long long)i, (double)g[i], (double)want,
                                   (unsigned long long)fls_noise_bits(seed * 0x9E3779B97F4A7C15ull, seed,
                                                                      (uint32_t)seed, (uint64_t)i));
            }
        }
    free(g);
}

/* Tokens whose 64 random bits fall where a vectorized transform has its own
 * branches (found by searching seeds; offset 0, draw 0, tokens < 16 so a
 * 16-wide call with v0 = 0 takes the vector path):
 *   top 25 bits set: 1 - q rounds to 1 in float, E = q (the u == 1 blend);
 *   top 25 bits clear: E > 17, the far tail of the exponential;
 *   within 2^39 of 2^63: the lower/upper switch at U = 1/2. */
Test(kernels, gumbel_transform_branches)
{
    const struct {
        uint64_t seed;
        uint64_t token;
        uint64_t bits;
    } cases[] = {
        {1142540, 2, 0xffffffb81c26866full}, {5427667, 4, 0xffffffdf51459ec8ull},
        {1343428, 1, 0x000000002ff8ac0aull}, {9798701, 11, 0x0000000f47cff8d6ull},
        {601688, 2, 0x800000017c1947ebull},  {1954407, 8, 0x7fffffa45e8408f2ull},
    };
    path p[3];
    int np = kernel_paths(p);
    float g[16];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cr_assert_eq(fls_noise_bits(cases[c].seed, 0, 0, cases[c].token), cases[c].bits);
        for (int pi = 0; pi < np; pi++) {
            p[pi].k.gumbel(cases[c].seed, 0, 0, 0, 16, g);
            float want = fls_gumbel_from_bits(cases[c].bits);
            cr_assert_eq(f2u(g[cases[c].token]), f2u(want), "%s: bits %016llx: G %a, contract %a",
                         fls_simd_name(p[pi].simd), (unsigned long long)cases[c].bits,
                         (double)g[cases[c].token], (double)want);
        }
    }
}

Test(kernels, convert_exact_and_padded)
{
    path p[3];
    int np = kernel_paths(p);
    /* every 16-bit pattern, in chunks of awkward lengths */
    uint16_t *src = malloc(65536 * sizeof *src);
    float *src32 = malloc(65536 * sizeof *src32);
    float *dst = malloc((65536 + 64) * sizeof *dst);
    for (uint32_t i = 0; i < 65536; i++)
        src[i] = (uint16_t)i, src32[i] = u2f(i * 0x10001u + 12345u);
    const fls_dtype dts[] = {FLS_DTYPE_F32, FLS_DTYPE_F16, FLS_DTYPE_BF16};
    for (int pi = 0; pi < np; pi++)
        for (int di = 0; di < 3; di++) {
            int64_t pos = 0, len = 0;
            while (pos < 65536) {
                len = len % 37 + 1;
                int64_t n = pos + len > 65536 ? 65536 - pos : len;
                int64_t npad = n + (n % 5) * 3;
                for (int64_t i = 0; i < npad + 8; i++)
                    dst[i] = u2f(GUARD_F32_BITS);
                const void *sp =
                    dts[di] == FLS_DTYPE_F32 ? (const void *)(src32 + pos) : (const void *)(src + pos);
                p[pi].k.convert(sp, dts[di], n, dst, npad);
                for (int64_t i = 0; i < n; i++) {
                    float want = dts[di] == FLS_DTYPE_F32   ? src32[pos + i]
                                 : dts[di] == FLS_DTYPE_F16 ? ref_f16_to_f32(src[pos + i])
                                                            : ref_bf16_to_f32(src[pos + i]);
                    int ok = (isnan(want) && isnan(dst[i])) || f2u(want) == f2u(dst[i]);
                    if (!ok)
                        cr_assert_fail("%s convert %s element %lld: %a, want %a", fls_simd_name(p[pi].simd),
                                       fls_dtype_name(dts[di]), (long long)(pos + i), (double)dst[i],
                                       (double)want);
                }
                for (int64_t i = n; i < npad; i++)
                    cr_assert_eq(f2u(dst[i]), 0u, "%s convert: padding %lld not +0",
                                 fls_simd_name(p[pi].simd), (long long)i);
                for (int64_t i = npad; i < npad + 8; i++)
                    cr_assert_eq(f2u(dst[i]), GUARD_F32_BITS, "%s convert wrote past n_pad",
                                 fls_simd_name(p[pi].simd));
                pos += n;
            }
        }
    free(src);
    free(src32);
    free(dst);
}

/* dot_direct and dot_f32 on every shape class: D below, at and above the
 * 16 lanes, odd, above the portable kernel's 4096-column block and over
 * several panels (FLS_PANEL_COLS); nv and B not multiples of the kernels'
 * register blocking, and above a panel's tokens and rows (FLS_PANEL_TOKENS,
 * FLS_PANEL_ROWS); strided W and out. The timeout leaves room for the
 * unoptimised sanitizer build, about 30x the release time (45 s on two cores). */
Test(kernels, dots_match_canonical_order, .timeout = 120)
{
    path p[3];
    int np = kernel_paths(p);
    const int64_t Ds[] = {1, 2, 15, 16, 17, 33, 64, 100, 4099};
    const int64_t nvs[] = {1, 2, 3, 5, 9, 70};
    const int64_t Bs[] = {1, 2, 3, 4, 7, 12, 16, 17, 37};
    const fls_dtype dts[] = {FLS_DTYPE_F32, FLS_DTYPE_F16, FLS_DTYPE_BF16};
    float *scratch = aligned_alloc(64, FLS_CPU_SCRATCH_FLOATS * sizeof(float));
    for (size_t di = 0; di < sizeof Ds / sizeof Ds[0]; di++) {
        int64_t D = Ds[di], Dp = (D + FLS_LANES - 1) / FLS_LANES * FLS_LANES;
        int64_t nvmax = 70, Bmax = 37;
        float *w = random_floats(nvmax * D, 7 + (uint64_t)D), *h = random_floats(Bmax * D, 8 + (uint64_t)D);
        tmat Hm = tmat_make(FLS_DTYPE_F32, Bmax, D, D, h);
        /* H zero padded to Dp, as the engine passes it */
        float *hp = calloc((size_t)(Bmax * Dp), sizeof *hp);
        for (int64_t b = 0; b < Bmax; b++)
            memcpy(hp + b * Dp, h + b * D, (size_t)D * sizeof *hp);
        for (int wd = 0; wd < 3; wd++) {
            tmat Wm = tmat_make_rounded(dts[wd], nvmax, D, D + 3, w);
            float *cl = canonical_logits(&Wm, &Hm); /* (Bmax, nvmax) */
            /* W converted and padded for dot_f32 */
            float *wp = calloc((size_t)(nvmax * Dp), sizeof *wp);
            for (int64_t i = 0; i < nvmax; i++)
                for (int64_t d = 0; d < D; d++)
                    wp[i * Dp + d] = tmat_get(&Wm, i, d);
            const int64_t ldo = nvmax + 2;
            float *out = malloc((size_t)(Bmax * ldo) * sizeof *out);
            for (int pi = 0; pi < np; pi++)
                for (size_t ni = 0; ni < sizeof nvs / sizeof nvs[0]; ni++)
                    for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++)
                        for (int kind = 0; kind < 3; kind++) {
                            int64_t nv = nvs[ni], B = Bs[bi];
                            for (int64_t i = 0; i < Bmax * ldo; i++)
                                out[i] = u2f(GUARD_F32_BITS);
                            const int64_t hpn = p[pi].k.pack_h ? p[pi].k.packed_h_floats(B, Dp) : 0;
                            if (kind == 0)
                                p[pi].k.dot_direct(Wm.m.data, dts[wd], Wm.m.ld, nv, D, hp, NULL, B, Dp, out,
                                                   ldo, scratch);
                            else if (kind == 2) { /* H packed by the caller, where the path packs it */
                                if (hpn == 0)
                                    continue;
                                float *hpk = aligned_alloc(64, ((size_t)hpn * sizeof(float) + 63) / 64 * 64);
                                cr_assert_not_null(hpk);
                                memset(hpk, 0xff,
                                       (size_t)hpn * sizeof(float)); /* NaNs where pack_h writes nothing */
                                p[pi].k.pack_h(hp, B, Dp, hpk);
                                p[pi].k.dot_direct(Wm.m.data, dts[wd], Wm.m.ld, nv, D, hp, hpk, B, Dp, out,
                                                   ldo, scratch);
                                free(hpk);
                            } else if (wd == 0)
                                p[pi].k.dot_f32(wp, nv, hp, B, Dp, out, ldo);
                            else
                                continue;
                            for (int64_t b = 0; b < Bmax; b++)
                                for (int64_t i = 0; i < ldo; i++) {
                                    float got = out[b * ldo + i];
                                    if (b < B && i < nv) {
                                        if (f2u(got) != f2u(cl[b * nvmax + i]))
                                            cr_assert_fail(
                                                "%s %s W %s D %lld nv %lld B %lld: out[%lld][%lld] = %a, "
                                                "canonical %a",
                                                fls_simd_name(p[pi].simd),
                                                kind == 1   ? "dot_f32"
                                                : kind == 2 ? "dot_direct (packed H)"
                                                            : "dot_direct",
                                                fls_dtype_name(dts[wd]), (long long)D, (long long)nv,
                                                (long long)B, (long long)b, (long long)i, (double)got,
                                                (double)cl[b * nvmax + i]);
                                    } else if (f2u(got) != GUARD_F32_BITS) {
                                        cr_assert_fail("%s %s D %lld nv %lld B %lld: wrote out[%lld][%lld]",
                                                       fls_simd_name(p[pi].simd),
                                                       kind ? "dot_f32" : "dot_direct", (long long)D,
                                                       (long long)nv, (long long)B, (long long)b,
                                                       (long long)i);
                                    }
                                }
                        }
            free(out);
            free(wp);
            free(cl);
            tmat_free(&Wm);
        }
        free(hp);
        tmat_free(&Hm);
        free(w);
        free(h);
    }
    free(scratch);
}
