/*
 * cpu_avx2.c — AVX2 + FMA + F16C kernels. Compiled with -mavx2 -mfma -mf16c
 * and called only after cpuid says so. Each kernel computes exactly the bits
 * of its twin in cpu_portable.c (see cpu_kernels.h for the shared order):
 * the 16 accumulation lanes live in two registers (lanes 0-7 and 8-15).
 */
#include "lib/cpu/cpu_kernels.h"
#include "lib/ref/rule_ref.h"
#include "lib/base/fls_dtype.h"
#include "lib/base/fls_noise.h"
#include "lib/base/fls_gumbel_bound.h"

#include <immintrin.h>
#include <string.h>

/* 8 consecutive elements of a W row as f32 (exact conversions). */
static inline __m256 load8(const void *p, fls_dtype dt)
{
    switch (dt) {
    case FLS_DTYPE_BF16: {
        __m128i h = _mm_loadu_si128((const __m128i *)p);
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case FLS_DTYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    case FLS_DTYPE_F32:
    default:
        return _mm256_loadu_ps((const float *)p);
    }
}

/* The canonical reduction of lanes (lo = 0..7, hi = 8..15). */
static inline float reduce(__m256 lo, __m256 hi)
{
    __m256 s = _mm256_add_ps(lo, hi);                                              /* s[j] = a[j] + a[j+8] */
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)); /* t[j] = s[j] + s[j+4] */
    __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));                                 /* u[j] = t[j] + t[j+2] */
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps(u, u, 1)));
}

#define NR 8 /* W rows per pass of the direct kernel */

static void dot_direct_avx2(const void *w, fls_dtype wd, int64_t ldw, int64_t nv, int64_t D, const float *h,
                            int64_t B, int64_t Dp, float *out, int64_t ldo)
{
    const size_t es = fls_dtype_bytes(wd);
    const int64_t Dfull = D / FLS_LANES * FLS_LANES;
    int64_t i = 0;
    for (; i + NR <= nv; i += NR) {
        const char *wr[NR];
        float tail[NR][FLS_LANES];
        for (int r = 0; r < NR; r++) {
            wr[r] = (const char *)w + (size_t)((i + r) * ldw) * es;
            if (Dfull < Dp)
                fls_convert_row(wr[r] + (size_t)Dfull * es, wd, D - Dfull, tail[r], FLS_LANES);
        }
        for (int64_t b = 0; b < B; b++) {
            const float *hb = h + b * Dp;
            __m256 lo[NR], hi[NR];
            for (int r = 0; r < NR; r++)
                lo[r] = hi[r] = _mm256_setzero_ps();
            for (int64_t d = 0; d < Dfull; d += FLS_LANES) {
                __m256 h0 = _mm256_loadu_ps(hb + d), h1 = _mm256_loadu_ps(hb + d + 8);
                if (b == 0 && i + 2 * NR <= nv) /* the next block's rows, one line per 16 columns */
                    for (int r = 0; r < NR; r++)
                        _mm_prefetch(wr[r] + (size_t)(NR * ldw + d) * es, _MM_HINT_T0);
                for (int r = 0; r < NR; r++) {
                    lo[r] = _mm256_fmadd_ps(load8(wr[r] + (size_t)d * es, wd), h0, lo[r]);
                    hi[r] = _mm256_fmadd_ps(load8(wr[r] + (size_t)(d + 8) * es, wd), h1, hi[r]);
                }
            }
            if (Dfull < Dp) {
                __m256 h0 = _mm256_loadu_ps(hb + Dfull), h1 = _mm256_loadu_ps(hb + Dfull + 8);
                for (int r = 0; r < NR; r++) {
                    lo[r] = _mm256_fmadd_ps(_mm256_loadu_ps(tail[r]), h0, lo[r]);
                    hi[r] = _mm256_fmadd_ps(_mm256_loadu_ps(tail[r] + 8), h1, hi[r]);
                }
            }
            for (int r = 0; r < NR; r++)
                out[b * ldo + i + r] = reduce(lo[r], hi[r]);
        }
    }
    for (; i < nv; i++) { /* leftover rows one at a time, same order */
        const char *wr = (const char *)w + (size_t)(i * ldw) * es;
        float tail[FLS_LANES];
        if (Dfull < Dp)
            fls_convert_row(wr + (size_t)Dfull * es, wd, D - Dfull, tail, FLS_LANES);
        for (int64_t b = 0; b < B; b++) {
            const float *hb = h + b * Dp;
            __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
            for (int64_t d = 0; d < Dfull; d += FLS_LANES) {
                lo = _mm256_fmadd_ps(load8(wr + (size_t)d * es, wd), _mm256_loadu_ps(hb + d), lo);
                hi = _mm256_fmadd_ps(load8(wr + (size_t)(d + 8) * es, wd), _mm256_loadu_ps(hb + d + 8), hi);
            }
            if (Dfull < Dp) {
                lo = _mm256_fmadd_ps(_mm256_loadu_ps(tail), _mm256_loadu_ps(hb + Dfull), lo);
                hi = _mm256_fmadd_ps(_mm256_loadu_ps(tail + 8), _mm256_loadu_ps(hb + Dfull + 8), hi);
            }
            out[b * ldo + i] = reduce(lo, hi);
        }
    }
}

/* 16 elements at column d of two W rows (lanes 0-7 in x, 8-15 in y); past
 * the last full chunk, from the zero-padded tails t0 and t1 */
static inline void load_w2(const char *w0, const char *w1, const float *t0, const float *t1, int64_t d,
                           int64_t Dfull, size_t es, fls_dtype dt, __m256 *x0, __m256 *y0, __m256 *x1,
                           __m256 *y1)
{
    if (d < Dfull) {
        *x0 = load8(w0 + (size_t)d * es, dt);
        *y0 = load8(w0 + (size_t)(d + 8) * es, dt);
        *x1 = load8(w1 + (size_t)d * es, dt);
        *y1 = load8(w1 + (size_t)(d + 8) * es, dt);
    } else {
        *x0 = _mm256_loadu_ps(t0);
        *y0 = _mm256_loadu_ps(t0 + 8);
        *x1 = _mm256_loadu_ps(t1);
        *y1 = _mm256_loadu_ps(t1 + 8);
    }
}

/* Register-blocked kernel for B >= 3: 2 W rows x 3 H rows, 12 accumulators
 * and 4 W registers; each W chunk is loaded (and converted) once per 3 H rows.
 * H is walked in blocks of HB rows so the block stays in L2 while the tile's
 * W rows pass over it. One instance per dtype, so the load is not a branch. */
#define HB 12
#define DEFINE_DOT23(NAME, DT)                                                                               \
    static void NAME(const void *w, int64_t ldw, int64_t nv, int64_t D, const float *h, int64_t B,           \
                     int64_t Dp, float *out, int64_t ldo)                                                    \
    {                                                                                                        \
        const size_t es = fls_dtype_bytes(DT);                                                               \
        const int64_t Dfull = D / FLS_LANES * FLS_LANES;                                                     \
        const int has_tail = Dfull < Dp;                                                                     \
        for (int64_t b0 = 0; b0 < B; b0 += HB) {                                                             \
            const int64_t b1 = b0 + HB < B ? b0 + HB : B;                                                    \
            int64_t i = 0;                                                                                   \
            for (; i + 2 <= nv; i += 2) {                                                                    \
                const char *w0 = (const char *)w + (size_t)(i * ldw) * es, *w1 = w0 + (size_t)ldw * es;      \
                float t0[FLS_LANES], t1[FLS_LANES];                                                          \
                if (has_tail) {                                                                              \
                    fls_convert_row(w0 + (size_t)Dfull * es, DT, D - Dfull, t0, FLS_LANES);                  \
                    fls_convert_row(w1 + (size_t)Dfull * es, DT, D - Dfull, t1, FLS_LANES);                  \
                }                                                                                            \
                int64_t b = b0;                                                                              \
                for (; b + 3 <= b1; b += 3) {                                                                \
                    const float *h0 = h + b * Dp, *h1 = h0 + Dp, *h2 = h1 + Dp;                              \
                    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a10 = a00, a11 = a00, a12 = a00; \
                    __m256 c00 = a00, c01 = a00, c02 = a00, c10 = a00, c11 = a00, c12 = a00;                 \
                    for (int64_t d = 0; d < Dp; d += FLS_LANES) {                                            \
                        __m256 x0, y0, x1, y1;                                                               \
                        load_w2(w0, w1, t0, t1, d, Dfull, es, DT, &x0, &y0, &x1, &y1);                       \
                        __m256 hv = _mm256_loadu_ps(h0 + d), hw = _mm256_loadu_ps(h0 + d + 8);               \
                        a00 = _mm256_fmadd_ps(x0, hv, a00);                                                  \
                        c00 = _mm256_fmadd_ps(y0, hw, c00);                                                  \
                        a10 = _mm256_fmadd_ps(x1, hv, a10);                                                  \
                        c10 = _mm256_fmadd_ps(y1, hw, c10);                                                  \
                        hv = _mm256_loadu_ps(h1 + d);                                                        \
                        hw = _mm256_loadu_ps(h1 + d + 8);                                                    \
                        a01 = _mm256_fmadd_ps(x0, hv, a01);                                                  \
                        c01 = _mm256_fmadd_ps(y0, hw, c01);                                                  \
                        a11 = _mm256_fmadd_ps(x1, hv, a11);                                                  \
                        c11 = _mm256_fmadd_ps(y1, hw, c11);                                                  \
                        hv = _mm256_loadu_ps(h2 + d);                                                        \
                        hw = _mm256_loadu_ps(h2 + d + 8);                                                    \
                        a02 = _mm256_fmadd_ps(x0, hv, a02);                                                  \
                        c02 = _mm256_fmadd_ps(y0, hw, c02);                                                  \
                        a12 = _mm256_fmadd_ps(x1, hv, a12);                                                  \
                        c12 = _mm256_fmadd_ps(y1, hw, c12);                                                  \
                    }                                                                                        \
                    out[(b + 0) * ldo + i] = reduce(a00, c00);                                               \
                    out[(b + 1) * ldo + i] = reduce(a01, c01);                                               \
                    out[(b + 2) * ldo + i] = reduce(a02, c02);                                               \
                    out[(b + 0) * ldo + i + 1] = reduce(a10, c10);                                           \
                    out[(b + 1) * ldo + i + 1] = reduce(a11, c11);                                           \
                    out[(b + 2) * ldo + i + 1] = reduce(a12, c12);                                           \
                }                                                                                            \
                if (b < b1) {                                                                                \
                    /* 1 or 2 H rows left: 2 x r block, r chains per W row half */                           \
                    const int r = (int)(b1 - b);                                                             \
                    const float *h0 = h + b * Dp, *h1 = r > 1 ? h0 + Dp : h0;                                \
                    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00;                       \
                    __m256 c00 = a00, c01 = a00, c10 = a00, c11 = a00;                                       \
                    for (int64_t d = 0; d < Dp; d += FLS_LANES) {                                            \
                        __m256 x0, y0, x1, y1;                                                               \
                        load_w2(w0, w1, t0, t1, d, Dfull, es, DT, &x0, &y0, &x1, &y1);                       \
                        __m256 hv = _mm256_loadu_ps(h0 + d), hw = _mm256_loadu_ps(h0 + d + 8);               \
                        a00 = _mm256_fmadd_ps(x0, hv, a00);                                                  \
                        c00 = _mm256_fmadd_ps(y0, hw, c00);                                                  \
                        a10 = _mm256_fmadd_ps(x1, hv, a10);                                                  \
                        c10 = _mm256_fmadd_ps(y1, hw, c10);                                                  \
                        if (r > 1) {                                                                         \
                            hv = _mm256_loadu_ps(h1 + d);                                                    \
                            hw = _mm256_loadu_ps(h1 + d + 8);                                                \
                            a01 = _mm256_fmadd_ps(x0, hv, a01);                                              \
                            c01 = _mm256_fmadd_ps(y0, hw, c01);                                              \
                            a11 = _mm256_fmadd_ps(x1, hv, a11);                                              \
                            c11 = _mm256_fmadd_ps(y1, hw, c11);                                              \
                        }                                                                                    \
                    }                                                                                        \
                    out[b * ldo + i] = reduce(a00, c00);                                                     \
                    out[b * ldo + i + 1] = reduce(a10, c10);                                                 \
                    if (r > 1) {                                                                             \
                        out[(b + 1) * ldo + i] = reduce(a01, c01);                                           \
                        out[(b + 1) * ldo + i + 1] = reduce(a11, c11);                                       \
                    }                                                                                        \
                }                                                                                            \
            }                                                                                                \
            if (i < nv)                                                                                      \
                dot_direct_avx2((const char *)w + (size_t)(i * ldw) * es, DT, ldw, nv - i, D, h + b0 * Dp,   \
                                b1 - b0, Dp, out + b0 * ldo + i, ldo);                                       \
        }                                                                                                    \
    }

DEFINE_DOT23(dot23_f32, FLS_DTYPE_F32)
DEFINE_DOT23(dot23_f16, FLS_DTYPE_F16)
DEFINE_DOT23(dot23_bf16, FLS_DTYPE_BF16)

static void dot_avx2(const void *w, fls_dtype wd, int64_t ldw, int64_t nv, int64_t D, const float *h,
                     const float *hp, int64_t B, int64_t Dp, float *out, int64_t ldo, float *scratch)
{
    (void)hp;
    (void)scratch;
    if (B < 3) { /* memory-bound: 8 row streams, 16 independent chains per H row */
        dot_direct_avx2(w, wd, ldw, nv, D, h, B, Dp, out, ldo);
        return;
    }
    switch (wd) {
    case FLS_DTYPE_F32:
        dot23_f32(w, ldw, nv, D, h, B, Dp, out, ldo);
        break;
    case FLS_DTYPE_F16:
        dot23_f16(w, ldw, nv, D, h, B, Dp, out, ldo);
        break;
    case FLS_DTYPE_BF16:
        dot23_bf16(w, ldw, nv, D, h, B, Dp, out, ldo);
        break;
    }
}

static void dot_f32_avx2(const float *w, int64_t nv, const float *h, int64_t B, int64_t Dp, float *out,
                         int64_t ldo)
{
    dot_avx2(w, FLS_DTYPE_F32, Dp, nv, Dp, h, NULL, B, Dp, out, ldo, NULL);
}

/* ---- the noise, 8 Philox blocks (16 tokens) at a time ---- */

/* hi and lo 32-bit halves of a * b for 8 unsigned lanes */
static inline void mulhilo8(__m256i a, __m256i b, __m256i *lo, __m256i *hi)
{
    __m256i pe = _mm256_mul_epu32(a, b);                                               /* lanes 0,2,4,6 */
    __m256i po = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), _mm256_srli_epi64(b, 32)); /* 1,3,5,7 */
    *lo = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xAA);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
}

/* fls_logf_ on 8 lanes, operation for operation. */
static inline __m256 logf8(__m256 x)
{
    __m256i u = _mm256_castps_si256(x);
    __m256i e = _mm256_sub_epi32(_mm256_and_si256(_mm256_srli_epi32(u, 23), _mm256_set1_epi32(0xff)),
                                 _mm256_set1_epi32(126));
    __m256 m = _mm256_castsi256_ps(
        _mm256_or_si256(_mm256_and_si256(u, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x3f000000)));
    __m256 small = _mm256_cmp_ps(m, _mm256_set1_ps(0.707106781186547524f), _CMP_LT_OQ);
    e = _mm256_add_epi32(e, _mm256_castps_si256(small)); /* true lanes are -1 */
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 f = _mm256_blendv_ps(_mm256_sub_ps(m, one), _mm256_sub_ps(_mm256_add_ps(m, m), one), small);
    __m256 fe = _mm256_cvtepi32_ps(e);
    __m256 z = _mm256_mul_ps(f, f);
    __m256 p = _mm256_set1_ps(FLS_LOG_C0);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLS_LOG_C1));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLS_LOG_C2));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLS_LOG_C3));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLS_LOG_C4));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLS_LOG_C5));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLS_LOG_C6));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLS_LOG_C7));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLS_LOG_C8));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, f), z);
    y = _mm256_fmadd_ps(fe, _mm256_set1_ps(FLS_LOG_LN2_LO), y);
    y = _mm256_fmadd_ps(_mm256_set1_ps(-0.5f), z, y);
    __m256 r = _mm256_add_ps(f, y);
    return _mm256_fmadd_ps(fe, _mm256_set1_ps(FLS_LOG_LN2_HI), r);
}

/* unsigned 32-bit lanes (4 of them) -> exact doubles */
static inline __m256d u32_to_pd(__m128i x)
{
    __m256d d = _mm256_cvtepi32_pd(_mm_xor_si128(x, _mm_set1_epi32((int)0x80000000u)));
    return _mm256_add_pd(d, _mm256_set1_pd(2147483648.0));
}

/* fls_gumbel_from_bits on 8 tokens given the 32-bit halves of their bits. */
static inline __m256 gumbel8(__m256i khi, __m256i klo)
{
    __m256i flip = _mm256_srai_epi32(khi, 31); /* all ones where U > 1/2 */
    __m256i qhi = _mm256_xor_si256(khi, flip), qlo = _mm256_xor_si256(klo, flip);
    const __m256d s32 = _mm256_set1_pd(0x1p-32), s64 = _mm256_set1_pd(0x1p-64), half = _mm256_set1_pd(0.5);
    __m128 qf[2];
    for (int k = 0; k < 2; k++) {
        __m128i hi4 = k ? _mm256_extracti128_si256(qhi, 1) : _mm256_castsi256_si128(qhi);
        __m128i lo4 = k ? _mm256_extracti128_si256(qlo, 1) : _mm256_castsi256_si128(qlo);
        __m256d a = _mm256_mul_pd(u32_to_pd(hi4), s32);
        __m256d b = _mm256_mul_pd(_mm256_add_pd(u32_to_pd(lo4), half), s64);
        qf[k] = _mm256_cvtpd_ps(_mm256_add_pd(a, b));
    }
    __m256 q = _mm256_set_m128(qf[1], qf[0]);
    __m256 upper = _mm256_castsi256_ps(flip);
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 u = _mm256_sub_ps(one, q);
    __m256 lg = logf8(_mm256_blendv_ps(q, u, upper));
    __m256 e_low = _mm256_xor_ps(lg, sign);
    __m256 t = _mm256_div_ps(q, _mm256_sub_ps(one, u));
    __m256 e_up = _mm256_xor_ps(_mm256_mul_ps(lg, t), sign);
    e_up = _mm256_blendv_ps(e_up, q, _mm256_cmp_ps(u, one, _CMP_EQ_OQ));
    __m256 e = _mm256_blendv_ps(e_low, e_up, upper);
    return _mm256_xor_ps(logf8(e), sign);
}

/* The 8 Philox blocks of tokens v .. v + 15 (v even): lane p of r0..r3 is
 * block p's outputs (bits of token v + 2p: r1:r0, of v + 2p + 1: r3:r2). */
static inline void philox8(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t v, __m256i *r0,
                           __m256i *r1, __m256i *r2, __m256i *r3)
{
    const __m256i M0 = _mm256_set1_epi32((int)FLS_PHILOX_M0), M1 = _mm256_set1_epi32((int)FLS_PHILOX_M1);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)(v >> 1)), lane);
    __m256i c1 = _mm256_set1_epi32((int)draw);
    __m256i c2 = _mm256_set1_epi32((int)(uint32_t)offset);
    __m256i c3 = _mm256_set1_epi32((int)(uint32_t)(offset >> 32));
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        __m256i lo0, hi0, lo1, hi1;
        mulhilo8(M0, c0, &lo0, &hi0);
        mulhilo8(M1, c2, &lo1, &hi1);
        __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
        __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += FLS_PHILOX_W0;
        k1 += FLS_PHILOX_W1;
    }
    *r0 = c0;
    *r1 = c1;
    *r2 = c2;
    *r3 = c3;
}

/* 16 tokens starting at the even token index v (8 Philox blocks) into g[0..15] */
static inline void gumbel16(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t v, float *g)
{
    __m256i c0, c1, c2, c3;
    philox8(seed, offset, draw, v, &c0, &c1, &c2, &c3);
    __m256 ge = gumbel8(c1, c0); /* even tokens: bits r1:r0 */
    __m256 go = gumbel8(c3, c2); /* odd tokens: bits r3:r2 */
    /* interleave: g[2p] = ge[p], g[2p+1] = go[p] */
    __m256 lo = _mm256_unpacklo_ps(ge, go), hi = _mm256_unpackhi_ps(ge, go);
    _mm256_storeu_ps(g, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(g + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}

static void gumbel_avx2(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t v0, int64_t n, float *g)
{
    int64_t i = 0;
    if ((v0 & 1) && n > 0) {
        g[0] = fls_gumbel(seed, offset, draw, v0);
        i = 1;
    }
    /* a block's 8 pair counters are (v >> 1) + lane in 32 bits: a block that
     * would wrap them goes to the scalar code (only at token ~2^33) */
    for (; i + 16 <= n && (uint32_t)((v0 + (uint64_t)i) >> 1) <= 0xFFFFFFFFu - 7u; i += 16)
        gumbel16(seed, offset, draw, v0 + (uint64_t)i, g + i);
    if (n - i >= 4 && (uint32_t)((v0 + (uint64_t)i) >> 1) <= 0xFFFFFFFFu - 7u) {
        /* a short tail: one padded block; the extra tokens' noise is unused */
        float t[16];
        gumbel16(seed, offset, draw, v0 + (uint64_t)i, t);
        memcpy(g + i, t, (size_t)(n - i) * sizeof(float));
        return;
    }
    fls_ref_gumbel_span(seed, offset, draw, v0 + (uint64_t)i, n - i, g + i);
}

/* gumbel16 where a token's key may reach thr (cpu_kernels.h, gumbel_skip):
 * the 8 even and the 8 odd tokens each run the transform only if one of
 * them has fl(x + up[bucket]) >= thr (or NaN), else read -inf. */
static inline void gumbel16_skip(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t v, const float *x,
                                 float thr, const float *up, float *g)
{
    __m256i c0, c1, c2, c3;
    philox8(seed, offset, draw, v, &c0, &c1, &c2, &c3);
    /* x of the even and the odd tokens */
    const __m256 xa = _mm256_loadu_ps(x), xb = _mm256_loadu_ps(x + 8);
    const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6),
                  odd = _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7);
    const __m256 xe =
        _mm256_blend_ps(_mm256_permutevar8x32_ps(xa, even), _mm256_permutevar8x32_ps(xb, even), 0xF0);
    const __m256 xo =
        _mm256_blend_ps(_mm256_permutevar8x32_ps(xa, odd), _mm256_permutevar8x32_ps(xb, odd), 0xF0);
    const __m256 t = _mm256_set1_ps(thr), ninf = _mm256_set1_ps(-INFINITY);
    const __m256 ue = _mm256_i32gather_ps(up, _mm256_srli_epi32(c1, 32 - FLS_GB_BITS), 4);
    const __m256 uo = _mm256_i32gather_ps(up, _mm256_srli_epi32(c3, 32 - FLS_GB_BITS), 4);
    /* not (fl(x + up) < thr): NaN keeps the token */
    const int need_e = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_add_ps(xe, ue), t, _CMP_NLT_UQ));
    const int need_o = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_add_ps(xo, uo), t, _CMP_NLT_UQ));
    __m256 ge = need_e ? gumbel8(c1, c0) : ninf;
    __m256 go = need_o ? gumbel8(c3, c2) : ninf;
    __m256 lo = _mm256_unpacklo_ps(ge, go), hi = _mm256_unpackhi_ps(ge, go);
    _mm256_storeu_ps(g, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(g + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}

static void gumbel_skip_avx2(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t v0, int64_t n,
                             const float *x, float thr, const float *up, float *g)
{
    int64_t i = 0;
    if ((v0 & 1) && n > 0) {
        g[0] = fls_gumbel(seed, offset, draw, v0);
        i = 1;
    }
    for (; i + 16 <= n && (uint32_t)((v0 + (uint64_t)i) >> 1) <= 0xFFFFFFFFu - 7u; i += 16)
        gumbel16_skip(seed, offset, draw, v0 + (uint64_t)i, x + i, thr, up, g + i);
    if (i < n)
        gumbel_avx2(seed, offset, draw, v0 + (uint64_t)i, n - i, g + i);
}

static void convert_avx2(const void *src, fls_dtype dt, int64_t n, float *dst, int64_t n_pad)
{
    const size_t es = fls_dtype_bytes(dt);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, load8((const char *)src + (size_t)i * es, dt));
    fls_convert_row((const char *)src + (size_t)i * es, dt, n - i, dst + i, n_pad - i);
}

void fls_cpu_kernels_avx2(fls_cpu_kernels *k)
{
    k->convert = convert_avx2;
    k->dot_direct = dot_avx2;
    k->dot_f32 = dot_f32_avx2;
    k->gumbel = gumbel_avx2;
    k->gumbel_skip = gumbel_skip_avx2;
}
