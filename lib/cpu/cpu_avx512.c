/*
 * cpu_avx512.c — AVX-512F/BW/VL dot kernels: the 16 accumulation lanes of the
 * canonical order (cpu_kernels.h) are one zmm register. The noise uses the
 * AVX2 kernel (the path is only chosen where AVX2 is present too).
 * Not exercised on the development machine (it has no AVX-512): the unit
 * tests force this path wherever the processor has it.
 */
#include "lib/cpu/cpu_kernels.h"
#include "lib/base/fls_dtype.h"

#include <immintrin.h>

static inline __m512 load16(const void *p, fls_dtype dt)
{
    switch (dt) {
    case FLS_DTYPE_BF16:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
    case FLS_DTYPE_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    case FLS_DTYPE_F32:
    default:
        return _mm512_loadu_ps((const float *)p);
    }
}

static inline float reduce(__m512 a)
{
    __m256 s = _mm256_add_ps(_mm512_castps512_ps256(a),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps(u, u, 1)));
}

#define NR 4

static void dot_direct_avx512(const void *w, fls_dtype wd, int64_t ldw, int64_t nv, int64_t D, const float *h,
                              int64_t B, int64_t Dp, float *out, int64_t ldo)
{
    const size_t es = fls_dtype_bytes(wd);
    const int64_t Dfull = D / FLS_LANES * FLS_LANES;
    for (int64_t i = 0; i < nv; i += NR) {
        int nr = nv - i < NR ? (int)(nv - i) : NR;
        const char *wr[NR];
        float tail[NR][FLS_LANES];
        for (int r = 0; r < nr; r++) {
            wr[r] = (const char *)w + (size_t)((i + r) * ldw) * es;
            if (Dfull < Dp)
                fls_convert_row(wr[r] + (size_t)Dfull * es, wd, D - Dfull, tail[r], FLS_LANES);
        }
        for (int64_t b = 0; b < B; b++) {
            const float *hb = h + b * Dp;
            __m512 acc[NR];
            for (int r = 0; r < NR; r++)
                acc[r] = _mm512_setzero_ps();
            for (int64_t d = 0; d < Dfull; d += FLS_LANES) {
                __m512 hv = _mm512_loadu_ps(hb + d);
                for (int r = 0; r < nr; r++)
                    acc[r] = _mm512_fmadd_ps(load16(wr[r] + (size_t)d * es, wd), hv, acc[r]);
            }
            if (Dfull < Dp) {
                __m512 hv = _mm512_loadu_ps(hb + Dfull);
                for (int r = 0; r < nr; r++)
                    acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(tail[r]), hv, acc[r]);
            }
            for (int r = 0; r < nr; r++)
                out[b * ldo + i + r] = reduce(acc[r]);
        }
    }
}

/* 2 W rows x 4 H rows: 8 accumulators */
static void dot_f32_avx512(const float *w, int64_t nv, const float *h, int64_t B, int64_t Dp, float *out,
                           int64_t ldo)
{
    int64_t i = 0;
    for (; i + 2 <= nv; i += 2) {
        const float *w0 = w + i * Dp, *w1 = w0 + Dp;
        int64_t b = 0;
        for (; b + 4 <= B; b += 4) {
            __m512 a[2][4];
            for (int r = 0; r < 2; r++)
                for (int c = 0; c < 4; c++)
                    a[r][c] = _mm512_setzero_ps();
            for (int64_t d = 0; d < Dp; d += FLS_LANES) {
                __m512 x0 = _mm512_loadu_ps(w0 + d), x1 = _mm512_loadu_ps(w1 + d);
                for (int c = 0; c < 4; c++) {
                    __m512 hv = _mm512_loadu_ps(h + (b + c) * Dp + d);
                    a[0][c] = _mm512_fmadd_ps(x0, hv, a[0][c]);
                    a[1][c] = _mm512_fmadd_ps(x1, hv, a[1][c]);
                }
            }
            for (int c = 0; c < 4; c++) {
                out[(b + c) * ldo + i] = reduce(a[0][c]);
                out[(b + c) * ldo + i + 1] = reduce(a[1][c]);
            }
        }
        if (b < B)
            dot_direct_avx512(w0, FLS_DTYPE_F32, Dp, 2, Dp, h + b * Dp, B - b, Dp, out + b * ldo + i, ldo);
    }
    if (i < nv)
        dot_direct_avx512(w + i * Dp, FLS_DTYPE_F32, Dp, nv - i, Dp, h, B, Dp, out + i, ldo);
}

void fls_cpu_kernels_avx512(fls_cpu_kernels *k)
{
    fls_cpu_kernels_avx2(k);
    k->dot_direct = dot_direct_avx512;
    k->dot_f32 = dot_f32_avx512;
}
