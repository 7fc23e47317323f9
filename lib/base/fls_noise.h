/*
 * fls_noise.h — the noise contract of flashsample, one source for C and CUDA.
 *
 * The Gumbel noise of a token is a pure function of four values:
 *     (row seed s, row offset o, draw index d, global token index v)
 * and of nothing else (not tile size, grid, threads, batch position, device or
 * shard count). docs/NOISE.md is the normative description; this file is the
 * implementation, frozen by tests/kat_philox.txt, tests/unit/test_noise.c and
 * tests/unit/test_transform.c.
 *
 * Counter layout (Philox4x32-10, Salmon et al. SC'11; the same function as
 * cuRAND's curand_Philox4x32_10(c, k)):
 *     key     k = (lo32(s), hi32(s))
 *     counter c = (v >> 1, d, lo32(o), hi32(o))
 *     out     r = Philox4x32_10(c, k)  -> 4 words r0..r3
 *     bits(v) = v even: (r1 << 32) | r0,   v odd: (r3 << 32) | r2
 * So one Philox block serves two neighbouring tokens; v < 2^33 - 1, d < 2^32.
 *
 * Uniform -> exponential -> Gumbel, all in IEEE arithmetic that is the same on
 * every engine (no contraction, explicit fma, our own logf):
 *     k = bits(v), U = (k + 1/2) / 2^64        in (0, 1), never 0 or 1
 *     E = -log(U)                              U <= 1/2  (top bit of k clear)
 *     E = -log1p(-(1-U))                       U >  1/2  (1-U formed exactly)
 *     G = -log(E)
 * Values the transform can return: E in [2^-65, 45.054] (both ends reached:
 * k = 2^64-1 gives E = 2^-65, k = 0 gives E = 65 log 2), so G is finite, in
 * [-3.808, 45.054] (below FLS_GUMBEL_MAX); never +-inf, never NaN. U's smallest value is
 * 2^-65, so the Gumbel tail is represented down to probability 2^-65.
 * Steps are computed in float after forming U or 1-U exactly in double and
 * rounding once to float; fls_logf_ is within 0.82 ulp on [2^-66, 64], E within
 * 2 ulp and G within 1.8 ulp of long double (tests/unit/test_transform.c).
 */
#ifndef FLS_NOISE_H
#define FLS_NOISE_H

#include <stdint.h>

#include "lib/base/fls_hd.h"

#define FLS_PHILOX_M0 0xD2511F53u
#define FLS_PHILOX_M1 0xCD9E8D57u
#define FLS_PHILOX_W0 0x9E3779B9u
#define FLS_PHILOX_W1 0xBB67AE85u

/* The largest Gumbel value the transform returns (k = 2^64 - 1), rounded up. */
#define FLS_GUMBEL_MAX 45.06f

typedef struct fls_philox_block {
    uint32_t r[4];
} fls_philox_block;

FLS_HD uint32_t fls_mulhilo32_(uint32_t a, uint32_t b, uint32_t *hi)
{
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

/* Philox4x32-10 of counter c and key k: a pure function, bit-identical to
 * Random123's philox4x32_R(10, c, k) and cuRAND's curand_Philox4x32_10. */
FLS_HD fls_philox_block fls_philox4x32_10(const uint32_t c_in[4], const uint32_t k_in[2])
{
    uint32_t c0 = c_in[0], c1 = c_in[1], c2 = c_in[2], c3 = c_in[3];
    uint32_t k0 = k_in[0], k1 = k_in[1];
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = fls_mulhilo32_(FLS_PHILOX_M0, c0, &hi0);
        uint32_t lo1 = fls_mulhilo32_(FLS_PHILOX_M1, c2, &hi1);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += FLS_PHILOX_W0;
        k1 += FLS_PHILOX_W1;
    }
    fls_philox_block out = {{c0, c1, c2, c3}};
    return out;
}

/* The counter and key of token v (see the layout above). */
FLS_HD void fls_noise_counter(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t token, uint32_t c[4],
                              uint32_t k[2])
{
    k[0] = (uint32_t)seed;
    k[1] = (uint32_t)(seed >> 32);
    c[0] = (uint32_t)(token >> 1);
    c[1] = draw;
    c[2] = (uint32_t)offset;
    c[3] = (uint32_t)(offset >> 32);
}

/* 64 random bits of token v of (seed, offset, draw). */
FLS_HD uint64_t fls_noise_bits(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t token)
{
    uint32_t c[4], k[2];
    fls_noise_counter(seed, offset, draw, token, c, k);
    fls_philox_block b = fls_philox4x32_10(c, k);
    return (token & 1) ? ((uint64_t)b.r[3] << 32) | b.r[2] : ((uint64_t)b.r[1] << 32) | b.r[0];
}

FLS_HD uint32_t fls_f2u_(float x)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

FLS_HD float fls_u2f_(uint32_t u)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

/* Natural log for positive, finite, normal x. Range reduction
 * x = m 2^e with m in [sqrt(1/2), sqrt(2)), then f = m - 1 and a degree-9
 * minimax polynomial (Cephes logf coefficients), e log 2 added in two parts.
 * Every step is one IEEE operation or an explicit fma, so every engine (C,
 * AVX2, AVX-512, CUDA) produces the same bits. Not for 0, inf, NaN or
 * subnormals: the transform never passes those. */
#define FLS_LOG_C0     7.0376836292e-2f
#define FLS_LOG_C1     -1.1514610310e-1f
#define FLS_LOG_C2     1.1676998740e-1f
#define FLS_LOG_C3     -1.2420140846e-1f
#define FLS_LOG_C4     1.4249322787e-1f
#define FLS_LOG_C5     -1.6668057665e-1f
#define FLS_LOG_C6     2.0000714765e-1f
#define FLS_LOG_C7     -2.4999993993e-1f
#define FLS_LOG_C8     3.3333331174e-1f
#define FLS_LOG_LN2_HI 0.693359375f
#define FLS_LOG_LN2_LO -2.12194440e-4f

FLS_HD float fls_logf_(float x)
{
    uint32_t u = fls_f2u_(x);
    int32_t e = (int32_t)((u >> 23) & 0xffu) - 126; /* x = m 2^e, m in [0.5, 1) */
    float m = fls_u2f_((u & 0x007fffffu) | 0x3f000000u);
    /* m < sqrt(1/2): use 2m - 1 and e - 1 (exact: 2m is exact, 2m-1 Sterbenz) */
    float f;
    if (m < 0.707106781186547524f) {
        e -= 1;
        f = FLS_FSUB(FLS_FADD(m, m), 1.0f);
    } else {
        f = FLS_FSUB(m, 1.0f);
    }
    float fe = (float)e;
    float z = FLS_FMUL(f, f);
    float p = FLS_LOG_C0;
    p = FLS_FMA(p, f, FLS_LOG_C1);
    p = FLS_FMA(p, f, FLS_LOG_C2);
    p = FLS_FMA(p, f, FLS_LOG_C3);
    p = FLS_FMA(p, f, FLS_LOG_C4);
    p = FLS_FMA(p, f, FLS_LOG_C5);
    p = FLS_FMA(p, f, FLS_LOG_C6);
    p = FLS_FMA(p, f, FLS_LOG_C7);
    p = FLS_FMA(p, f, FLS_LOG_C8);
    float y = FLS_FMUL(FLS_FMUL(p, f), z);
    y = FLS_FMA(fe, FLS_LOG_LN2_LO, y);
    y = FLS_FMA(-0.5f, z, y);
    float r = FLS_FADD(f, y);
    return FLS_FMA(fe, FLS_LOG_LN2_HI, r);
}

/* The exponential variate E of 64 random bits k (see the header comment).
 * Forms U (or 1-U) exactly in double from the two 32-bit halves, rounds
 * once to float, then takes logs in float. */
FLS_HD float fls_exponential_from_bits(uint64_t k)
{
    int upper = (int)(k >> 63);  /* U > 1/2 */
    uint64_t q = upper ? ~k : k; /* U = (q + 1/2)/2^64 or 1-U = that */
    uint32_t hi = (uint32_t)(q >> 32), lo = (uint32_t)q;
    /* (hi 2^32 + lo + 1/2) 2^-64: hi 2^-32 and (lo + 1/2) 2^-64 are exact in
     * double, their sum rounds once (to 53 bits); then once more to float. */
    double qd = (double)hi * 0x1p-32 + ((double)lo + 0.5) * 0x1p-64; /* products exact */
    float q_f = (float)qd;
    if (!upper)
        return -fls_logf_(q_f);
    /* E = -log1p(-y), y = q_f in (0, 1/2]: with u = fl(1 - y),
     * log1p(-y) = log(u) * (-y) / (u - 1) (Goldberg's trick), u - 1 exact. */
    float u = FLS_FSUB(1.0f, q_f);
    if (u == 1.0f)
        return q_f;
    float t = FLS_FDIV(q_f, FLS_FSUB(1.0f, u));
    return -FLS_FMUL(fls_logf_(u), t);
}

/* Standard Gumbel variate of 64 random bits: G = -log(E), in [-3.808, 45.054]. */
FLS_HD float fls_gumbel_from_bits(uint64_t k)
{
    return -fls_logf_(fls_exponential_from_bits(k));
}

/* The Gumbel noise of token v: the whole contract in one call. */
FLS_HD float fls_gumbel(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t token)
{
    return fls_gumbel_from_bits(fls_noise_bits(seed, offset, draw, token));
}

/* The uniform in (0,1) that the unfused multinomial baseline uses for
 * (seed, offset, draw): bits of the reserved token index 2^33 - 1, as double.
 * In (0, 1): the 1024 largest k, whose (k + 1/2) 2^-64 would round to 1,
 * give 1 - 2^-53. */
#define FLS_MULTINOMIAL_TOKEN ((((uint64_t)1) << 33) - 1)
FLS_HD double fls_uniform_from_bits(uint64_t k)
{
    uint32_t hi = (uint32_t)(k >> 32), lo = (uint32_t)k;
    double u = (double)hi * 0x1p-32 + ((double)lo + 0.5) * 0x1p-64;
    return u < 1.0 ? u : 0x1.fffffffffffffp-1;
}

/*
 * The group noise of the grouped method (docs/NOISE.md, "Group noise"): one
 * Gumbel per (row seed, offset, draw, group k), from a key domain of its
 * own. The group key K' of seed s is the (r1:r0) word of the Philox block
 * at counter (0x67726F75, 0xFFFFFFFF, 0, 0) under s: the draw word
 * 0xFFFFFFFF is one no token noise ever uses (draw indices < 2^32 - 1), so
 * deriving K' takes nothing from the token stream. Group k's bits are then
 * laid out exactly like token k's under K': counter (k >> 1, d, lo32(o),
 * hi32(o)), even k the low pair, odd k the high pair; the transform is the
 * same. Group noise would coincide with token noise only for a row whose
 * seed equals another row's K' (a 2^-64 event for unrelated seeds).
 */
#define FLS_GROUP_TAG 0x67726F75u
FLS_HD uint64_t fls_group_key(uint64_t seed)
{
    uint32_t c[4] = {FLS_GROUP_TAG, 0xFFFFFFFFu, 0u, 0u};
    uint32_t k[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    fls_philox_block b = fls_philox4x32_10(c, k);
    return ((uint64_t)b.r[1] << 32) | b.r[0];
}

/* 64 random bits and the Gumbel noise of group k (gkey = fls_group_key(seed)). */
FLS_HD uint64_t fls_group_noise_bits(uint64_t gkey, uint64_t offset, uint32_t draw, uint64_t group)
{
    return fls_noise_bits(gkey, offset, draw, group);
}

FLS_HD float fls_group_gumbel(uint64_t gkey, uint64_t offset, uint32_t draw, uint64_t group)
{
    return fls_gumbel_from_bits(fls_group_noise_bits(gkey, offset, draw, group));
}

/*
 * The min-first scheme (FLS_NOISE_MIN_FIRST, docs/NOISE.md "The min-first
 * scheme"): the 64 tokens 64g .. 64g + 63 of group g (tokens past V count)
 * get the joint law of 64 independent Exp(1) variables built from their
 * minimum: Emin = E0 / 64 (E0 the exponential of the group's own block; the
 * scaling by 2^-6 is exact), the minimum at token 64g + idx, the other 63
 * at Emin + E_v (memorylessness) with E_v the exponential of token v's own
 * bits (fls_noise_bits, as in the per-token scheme). G = -log of that,
 * clamped to the group's largest noise M = -log(Emin), so M bounds every
 * noise of the group rigorously in float: a token with fl(x + M) below a
 * known key cannot win, and its Philox block is never needed.
 * The group block is Philox4x32-10 under the row seed at counter
 * (2^31 | g, d, lo32(o), hi32(o)); token blocks use v >> 1 < 2^31 there
 * (V <= 2^32 with this scheme), so the two never share a counter.
 */
#define FLS_MF_GROUP      64
#define FLS_MF_TAG        0x80000000u
#define FLS_MF_VOCAB_MAX  (((int64_t)1) << 32)
#define FLS_MF_GUMBEL_MAX 49.22f /* -log(2^-65 / 64) = 49.213: bounds every min-first noise */

typedef struct fls_mf_group {
    float emin;   /* the group's smallest exponential */
    float m;      /* -log(emin): the group's largest noise */
    uint32_t idx; /* the token of the minimum: 64g + idx */
} fls_mf_group;

FLS_HD fls_mf_group fls_mf_group_of(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t group)
{
    uint32_t c[4] = {FLS_MF_TAG | (uint32_t)group, draw, (uint32_t)offset, (uint32_t)(offset >> 32)};
    uint32_t k[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    fls_philox_block b = fls_philox4x32_10(c, k);
    fls_mf_group g;
    g.emin = FLS_FMUL(fls_exponential_from_bits(((uint64_t)b.r[1] << 32) | b.r[0]), 0x1p-6f);
    g.m = -fls_logf_(g.emin);
    g.idx = b.r[2] & (FLS_MF_GROUP - 1);
    return g;
}

/* The noise of token v of group g, given v's own 64 bits. */
FLS_HD float fls_mf_noise(const fls_mf_group *g, uint64_t token, uint64_t bits)
{
    if ((uint32_t)(token & (FLS_MF_GROUP - 1)) == g->idx)
        return g->m;
    float e = FLS_FADD(g->emin, fls_exponential_from_bits(bits));
    float n = -fls_logf_(e);
    return n < g->m ? n : g->m;
}

/* The min-first noise of token v: the whole scheme in one call. */
FLS_HD float fls_gumbel_mf(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t token)
{
    fls_mf_group g = fls_mf_group_of(seed, offset, draw, token / FLS_MF_GROUP);
    return fls_mf_noise(&g, token, fls_noise_bits(seed, offset, draw, token));
}

/* Row seed of row b when only one seed is given: splitmix64's finalizer of
 * seed + (b + 1) * golden gamma. Documented in docs/NOISE.md; frozen. */
FLS_HD uint64_t fls_splitmix64_(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

FLS_HD uint64_t fls_row_seed_derive(uint64_t seed, uint64_t row)
{
    return fls_splitmix64_(seed + (row + 1) * 0x9E3779B97F4A7C15ull);
}

#endif /* FLS_NOISE_H */
