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

#include "fls_noise.h"

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

/*
 * A per-lane cut for the CUDA wgmma sampler's fast path (v9): instead of one
 * table load per token, one cut per (lane, row, draw) on the top 32 bits of
 * the token's word, from the lane's largest tempered-logit bound ymax.
 *
 * Units: the top FLS_GC_BITS (= FLS_GB_BITS + FLS_GB2_BITS) bits of a word;
 * unit c lies in bucket c >> FLS_GB2_BITS and, when that is the top bucket,
 * in its sub-bucket c & (FLS_GB2_N - 1). tab = up ++ up2 (the CUDA engine's
 * shared-memory table), and tab[fls_gc_index(c)] bounds G over unit c.
 *
 * fls_gumbel_cut(ymax, thr, tab) returns c in [0, FLS_GC_N] such that every
 * word k of a unit below c has a key below thr for any tempered logit
 * x <= ymax: c > 0 only after the check fl(ymax + tab[fls_gc_index(c - 1)])
 * < thr (strict), and G is non-decreasing in k, so for k in units < c,
 * fl(x + G(k)) <= fl(ymax + tab[...]) < thr (monotone rounding), the
 * argument of the per-token skip test. The guess of c before the check uses
 * exp2 approximations (G(k) ~ -log(-log u), u = k / 2^64): it decides only
 * how many units are skipped, never whether a skip is valid. A NaN or +inf
 * ymax, or thr = -inf, gives 0 (nothing skipped); ymax = -inf (masked) or
 * fl(ymax + FLS_GUMBEL_MAX) < thr gives FLS_GC_N (every word skipped).
 * Below the top bucket the guess is rounded down to a bucket boundary (the
 * check then reads the bound of the last whole bucket). A token of word k is
 * then skipped when (k >> 32) < c << (32 - FLS_GC_BITS).
 */
#define FLS_GC_BITS  (FLS_GB_BITS + FLS_GB2_BITS)
#define FLS_GC_N     (1 << FLS_GC_BITS)
#define FLS_GC_SHIFT (32 - FLS_GC_BITS) /* unit = (k >> 32) >> FLS_GC_SHIFT */

FLS_HD int fls_gc_index(int c)
{
    const int b = c >> FLS_GB2_BITS;
    return b < FLS_GB_N - 1 ? b : FLS_GB_N + (c & (FLS_GB2_N - 1));
}

FLS_HD float fls_gc_exp2_(float x)
{
#if defined(__CUDA_ARCH__)
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#else
    return exp2f(x);
#endif
}

/* The guess: c near the largest valid cut, rounded down to a bucket boundary
 * below the top bucket; any value in [0, FLS_GC_N) (NaN and inf inputs: 0). */
FLS_HD int fls_gumbel_cut_guess(float ymax, float thr)
{
    /* u = exp(-exp(-gap)): the unit where G reaches the gap thr - ymax, less
     * |thr| 2^-22 (a few ulps of the check's rounding of ymax + bound) */
    const float ng = FLS_FMA(fabsf(thr), 0x1p-22f, FLS_FSUB(ymax, thr));
    const float e = fls_gc_exp2_(FLS_FMUL(ng, 1.44269504f));
    const float u = fls_gc_exp2_(FLS_FMUL(e, -1.44269504f));
    const float cf = FLS_FMA(u, (float)FLS_GC_N, -1.0f); /* one unit of margin */
    int c = cf >= 1.0f ? (int)cf : 0;                    /* NaN: 0; cf < FLS_GC_N */
    if (c < (FLS_GB_N - 1) << FLS_GB2_BITS)
        c &= ~(FLS_GB2_N - 1);
    return c;
}

/* The check: c when every unit below c is skippable, else 0. */
FLS_HD int fls_gumbel_cut_check(int c, float ymax, float thr, const float *tab)
{
    return c > 0 && FLS_FADD(ymax, tab[fls_gc_index(c - 1)]) < thr ? c : 0;
}

FLS_HD int fls_gumbel_cut(float ymax, float thr, const float *tab)
{
    if (FLS_FADD(ymax, FLS_GUMBEL_MAX) < thr)
        return FLS_GC_N;
    return fls_gumbel_cut_check(fls_gumbel_cut_guess(ymax, thr), ymax, thr, tab);
}

#endif /* FLS_GUMBEL_BOUND_H */
