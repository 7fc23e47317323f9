/*
 * fls_gumbel_bound.h — per-bucket bounds on the contract's Gumbel transform,
 * one source for C and CUDA (the CUDA engine uploads exactly this table; the
 * unit test tests/unit/test_gumbel_bound.c checks it).
 *
 * G(k) = fls_gumbel_from_bits(k) is non-decreasing in the 64-bit word k
 * (tests/unit/test_transform.c, dense sweep). Bucket j = k >> FLS_GB_SHIFT
 * holds k in [j 2^54, (j + 1) 2^54 - 1]; the table gives
 *     lo[j] <= G(k) <= up[j]   for every k of bucket j.
 * A sampler may then skip the two logs of a token whose key cannot win:
 * fl(x + G) <= fl(x + up[j]) (rounding is monotone), so fl(x + up[j]) < best
 * (strict) proves key < best. lo[] gives a lower bound of one token's key
 * without the logs (a seed for `best`). Bounds change no token; they only
 * decide which keys are computed.
 *
 * Margin: the float G is within 3 ulp of the exact -log(-log U) for
 * |G| >= 1/2 and within 2^-21 absolutely below (tests/unit/test_transform.c),
 * and the exact function is increasing, so for k in the bucket
 *     G(k) <= G_exact(k_hi) + err <= G(k_hi) + 2 err,
 * 2 err <= 6 ulp + 2^-20 <= |G| 2^-20.4 + 2^-20. The table adds |G| 2^-19 +
 * 2^-19 (four times that) in double and rounds outward to float. The last
 * bucket's upper bound is FLS_GUMBEL_MAX (k = 2^64 - 1 gives 45.0545), the
 * first bucket's lower bound G(0) - margin (G(0) = -3.808 is the minimum).
 */
#ifndef FLS_GUMBEL_BOUND_H
#define FLS_GUMBEL_BOUND_H

#include "lib/base/fls_noise.h"

#include <math.h>

#define FLS_GB_BITS   10
#define FLS_GB_N      (1 << FLS_GB_BITS)
#define FLS_GB_SHIFT  (64 - FLS_GB_BITS)
#define FLS_GB_MARGIN 0x1p-19

/* The top bucket (FLS_GB_N - 1, where G spans [6.9, 45.1]) split again:
 * sub-bucket j2 = (k >> FLS_GB2_SHIFT) & (FLS_GB2_N - 1) of a word k whose
 * bucket is the top one, with its own upper bound up2[j2] (same margin). A
 * sampler whose threshold is far above the logit can then skip most tokens
 * of the top bucket too (fls_gumbel_bound_top). */
#define FLS_GB2_BITS  8
#define FLS_GB2_N     (1 << FLS_GB2_BITS)
#define FLS_GB2_SHIFT (FLS_GB_SHIFT - FLS_GB2_BITS)

#if defined(__CUDACC__)
#define FLS_GB_HOST static inline __host__
#else
#define FLS_GB_HOST static inline
#endif

/* First and last word of bucket j. */
FLS_GB_HOST uint64_t fls_gb_first(int j)
{
    return (uint64_t)j << FLS_GB_SHIFT;
}

FLS_GB_HOST uint64_t fls_gb_last(int j)
{
    return j == FLS_GB_N - 1 ? ~(uint64_t)0 : ((uint64_t)(j + 1) << FLS_GB_SHIFT) - 1;
}

/* fl(d) rounded toward +inf (dir > 0) or -inf (dir < 0). */
FLS_GB_HOST float fls_gb_round_out_(double d, int dir)
{
    float f = (float)d;
    if (dir > 0 && (double)f < d)
        f = nextafterf(f, INFINITY);
    if (dir < 0 && (double)f > d)
        f = nextafterf(f, -INFINITY);
    return f;
}

/* Fills up[FLS_GB_N] and lo[FLS_GB_N] (see the top of this file). */
FLS_GB_HOST void fls_gumbel_bound_table(float *up, float *lo)
{
    for (int j = 0; j < FLS_GB_N; j++) {
        double gh = (double)fls_gumbel_from_bits(fls_gb_last(j));
        double gl = (double)fls_gumbel_from_bits(fls_gb_first(j));
        up[j] = j == FLS_GB_N - 1 ? FLS_GUMBEL_MAX
                                  : fls_gb_round_out_(gh + fabs(gh) * FLS_GB_MARGIN + FLS_GB_MARGIN, 1);
        lo[j] = fls_gb_round_out_(gl - fabs(gl) * FLS_GB_MARGIN - FLS_GB_MARGIN, -1);
    }
}

/* First and last word of sub-bucket j2 of the top bucket. */
FLS_GB_HOST uint64_t fls_gb2_first(int j2)
{
    return fls_gb_first(FLS_GB_N - 1) | ((uint64_t)j2 << FLS_GB2_SHIFT);
}

FLS_GB_HOST uint64_t fls_gb2_last(int j2)
{
    return j2 == FLS_GB2_N - 1 ? ~(uint64_t)0 : fls_gb2_first(j2 + 1) - 1;
}

/* Fills up2[FLS_GB2_N]: G(k) <= up2[j2] for every k of sub-bucket j2 (the
 * margin and rounding of fls_gumbel_bound_table; the last is FLS_GUMBEL_MAX). */
FLS_GB_HOST void fls_gumbel_bound_top(float *up2)
{
    for (int j = 0; j < FLS_GB2_N; j++) {
        double gh = (double)fls_gumbel_from_bits(fls_gb2_last(j));
        up2[j] = j == FLS_GB2_N - 1 ? FLS_GUMBEL_MAX
                                    : fls_gb_round_out_(gh + fabs(gh) * FLS_GB_MARGIN + FLS_GB_MARGIN, 1);
    }
}

/*
 * A bound of the tempered logit without the division, for skip tests only
 * (the CUDA wgmma sampler; tests/unit/test_gumbel_bound.c checks it against
 * the exact quotient on a dense sweep and at the range edges).
 *
 * fls_temper_rcp(T): rT = fl(1 / T) when it is normal (2^-126 <= rT <=
 * 2^126), else 0 (T = 0 greedy, or a T whose reciprocal leaves the normal
 * range: the caller divides exactly).
 *
 * fls_temper_upper(l, rT), rT != 0: y >= x = fl(l / T). x' = fl(l rT) is
 * within 3 ulp of l / T wherever x' is normal, so fl(x' + |x'| 2^-20) >= x
 * there. y = fl(x' m + 2^-100) with m = 1 + 2^-20 (x' >= 0) or 1 - 2^-20
 * (x' < 0), one fused rounding of x' + |x'| 2^-20 + 2^-100, which is at least
 * x' + |x'| 2^-20, so y >= fl(x' + |x'| 2^-20) >= x (monotone rounding); the
 * 2^-100 covers the subnormal range. l = -inf gives -inf (a masked token
 * stays skippable; x' m stays -inf, no inf - inf); an overflow or a NaN gives
 * +inf or NaN, which a negated test (!(y + up < thr)) never skips. Monotone
 * rounding then gives fl(x + up) <= fl(y + up), so fl(y + up) < thr proves
 * the key < thr. Four instructions: multiply, compare, select, fma.
 */
FLS_HD float fls_temper_rcp(float T)
{
#if defined(__CUDA_ARCH__)
    const float r = T > 0.0f ? __frcp_rn(T) : 0.0f;
#else
    const float r = T > 0.0f ? 1.0f / T : 0.0f;
#endif
    return r >= 0x1p-126f && r <= 0x1p126f ? r : 0.0f;
}

FLS_HD float fls_temper_upper(float l, float rT)
{
    const float xp = FLS_FMUL(l, rT);
    return FLS_FMA(xp, xp < 0.0f ? 0x1.ffffep-1f : 0x1.00001p+0f, 0x1p-100f);
}

#endif /* FLS_GUMBEL_BOUND_H */
