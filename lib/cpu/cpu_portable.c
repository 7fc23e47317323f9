/*
 * cpu_portable.c — the plain C reference twin of every CPU kernel.
 * Readable first: the SIMD paths must produce exactly these bits.
 */
#include "lib/cpu/cpu_kernels.h"
#include "lib/ref/rule_ref.h"
#include "lib/base/fls_dtype.h"
#include "lib/base/fls_noise.h"
#include "lib/base/fls_gumbel_bound.h"

#include <math.h>
#include <string.h>

void fls_convert_row(const void *src, fls_dtype dt, int64_t n, float *dst, int64_t n_pad)
{
    switch (dt) {
    case FLS_DTYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case FLS_DTYPE_F16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = fls_f16_to_f32(s[i]);
        break;
    }
    case FLS_DTYPE_BF16: {
        const uint16_t *s = src;
        uint32_t *d = (uint32_t *)dst; /* bf16 is the top half of an f32 */
        for (int64_t i = 0; i < n; i++)
            d[i] = (uint32_t)s[i] << 16;
        break;
    }
    }
    for (int64_t i = n; i < n_pad; i++)
        dst[i] = 0.0f;
}

/* dot of two zero-padded f32 rows of length Dp (a multiple of 16) */
static float dot_padded(const float *w, const float *h, int64_t Dp)
{
    float acc[FLS_LANES] = {0};
    for (int64_t d = 0; d < Dp; d += FLS_LANES)
        for (int j = 0; j < FLS_LANES; j++)
            acc[j] = fmaf(w[d + j], h[d + j], acc[j]);
    return fls_reduce16(acc);
}

static void dot_f32_portable(const float *w, int64_t nv, const float *h, int64_t B, int64_t Dp, float *out,
                             int64_t ldo)
{
    for (int64_t i = 0; i < nv; i++)
        for (int64_t b = 0; b < B; b++)
            out[b * ldo + i] = dot_padded(w + i * Dp, h + b * Dp, Dp);
}

static void dot_direct_portable(const void *w, fls_dtype wd, int64_t ldw, int64_t nv, int64_t D,
                                const float *h, const float *hp, int64_t B, int64_t Dp, float *out,
                                int64_t ldo, float *scratch)
{
    (void)hp;
    (void)scratch;
    float row[4096 + FLS_LANES];
    const size_t es = fls_dtype_bytes(wd);
    for (int64_t i = 0; i < nv; i++) {
        const char *wr = (const char *)w + (size_t)(i * ldw) * es;
        for (int64_t b = 0; b < B; b++) {
            float acc[FLS_LANES] = {0};
            /* convert in blocks of up to 4096 columns; the lane order is unchanged */
            for (int64_t d0 = 0; d0 < Dp; d0 += 4096) {
                int64_t n = D - d0 < 4096 ? D - d0 : 4096;
                int64_t np = Dp - d0 < 4096 ? Dp - d0 : 4096;
                fls_convert_row(wr + (size_t)d0 * es, wd, n > 0 ? n : 0, row, np);
                for (int64_t d = 0; d < np; d += FLS_LANES)
                    for (int j = 0; j < FLS_LANES; j++)
                        acc[j] = fmaf(row[d + j], h[b * Dp + d0 + d + j], acc[j]);
            }
            out[b * ldo + i] = fls_reduce16(acc);
        }
    }
}

static void gumbel_skip_portable(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t v0, int64_t n,
                                 const float *x, float thr, const float *up, float *g)
{
    for (int64_t i = 0; i < n; i++) {
        const uint64_t k = fls_noise_bits(seed, offset, draw, v0 + (uint64_t)i);
        g[i] = x[i] + up[k >> FLS_GB_SHIFT] < thr ? -INFINITY : fls_gumbel_from_bits(k);
    }
}

void fls_cpu_kernels_portable(fls_cpu_kernels *k)
{
    k->dot_direct = dot_direct_portable;
    k->dot_f32 = dot_f32_portable;
    k->packed_h_floats = NULL; /* reads H as it is */
    k->pack_h = NULL;
    k->gumbel = fls_ref_gumbel_span;
    k->gumbel_skip = gumbel_skip_portable;
    k->convert = fls_convert_row;
}
