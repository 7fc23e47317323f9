/*
 * common.cuh — device pieces shared by every CUDA kernel of the engine:
 * the noise (cuRAND's Philox + the contract's transform), the ordered
 * (key, index) packing, and the warp sampler that turns a segment of
 * logits into one partial winner per draw plus a log-sum-exp partial.
 *
 * The rule (variants/rule.h, temperature.h) is a template parameter of the
 * segment sampler and the finalize reduction; its candidate state is kept in
 * the packed 64-bit form of rule.h (fls_pack: key bits << 32 | 2^32 - 1 -
 * token, whose unsigned max is the rule's merge: the larger key, ties to the
 * LOWEST token index, independent of how V was partitioned) plus the
 * winner's tempered logit. Every kernel writes one such partial per
 * (row b, draw j, segment e); the finalize kernel merges them and calls the
 * rule's finalize. Temporary memory is O(B x draws x segments), never O(B x V).
 */
#ifndef FLS_COMMON_CUH
#define FLS_COMMON_CUH

#include <cuda_runtime.h>
#include <curand_philox4x32_x.h>
#include <stdint.h>

#include "lib/base/fls_gumbel_bound.h"
#include "lib/base/fls_noise.h"
#include "lib/front/internal.h"
#include "variants/grouped.h"
#include "variants/rule.h"
#include "variants/stair.h"
#include "variants/temperature.h"

#define FLS_FULL_MASK 0xffffffffu

/* Programmatic dependent launch (sm_90): a kernel launched with the
 * programmatic-serialization attribute may start while the kernel before it
 * in the stream still runs; fls_pdl_wait() blocks until that kernel has
 * completed and its writes are visible (a no-op when launched without the
 * attribute), so it comes before any read of the previous kernels' outputs
 * and any write. fls_pdl_trigger() lets the next such kernel launch (its
 * blocks then wait in fls_pdl_wait); a block that exits triggers too. */
__device__ __forceinline__ void fls_pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void fls_pdl_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Tokens per warp segment in the from-logits sampler: fls_segment_len(B),
 * a power of two dividing FLS_SEG (even: Philox pairs; chunks are multiples of FLS_SEG). */
#define FLS_SEG 1024
int fls_segment_len(int64_t B);
/* The grouped method's segments: whole groups of g tokens. */
int fls_segment_len_grouped(int64_t B, int g);

/* The status word's code (ws.status[1]). The values are names, not
 * priorities: fls_finalize_status reports, like the CPU engine, a NaN
 * first, then a temperature overflow, then an all-masked row. */
enum fls_status_code : unsigned {
    FLS_SC_OK = 0,
    FLS_SC_NAN = 1,         /* FLS_ERR_NAN */
    FLS_SC_ALL_MASKED = 2,  /* FLS_ERR_ALL_MASKED */
    FLS_SC_TEMPERATURE = 3, /* FLS_ERR_TEMPERATURE */
    FLS_SC_UNSUPPORTED = 4, /* FLS_ERR_UNSUPPORTED: an async rule call with a row only the host can decide */
    FLS_SC_PARAM = 5,       /* FLS_ERR_PARAM: a mask, bias or penalty value from device memory out of range */
};

/* One token's change in a row on the device (docs/RULES.md, "Masks, bias
 * and penalties"): the penalties when seen >= 0 (its count), then the bias
 * when has_bias. */
struct fls_mod_dev {
    uint32_t token;
    int32_t seen;
    float bias;
    uint32_t has_bias;
};

/* A call's changes to its raw logits on the device (kernels/mods.cu builds
 * them from the caller's lists). */
struct fls_mods_dev {
    const uint32_t *mask; /* row b's words at mask + b * mask_ld; NULL: no mask */
    int64_t mask_ld;
    const uint8_t *mask_rows; /* row b masked only where mask_rows[b] != 0; NULL: every row */
    const fls_mod_dev *e;     /* row b's n[b] entries at e + b * per, sorted by token, each token once */
    const int *n;
    int64_t per;      /* 0: no lists (n and e unused) */
    const float *pen; /* [3 b + 0, 1, 2]: repetition, presence, frequency of row b */
    /* 0: entries sorted by token. > 0: sorted by fls_mods_order(token,
     * slots, kmax), the order in which the wgmma launch with these slots
     * visits them (only that kernel reads them then) */
    int64_t slots, kmax;
};

/* A token's place in the wgmma launch's visiting order: the CTA of slot s
 * takes the 128-token tiles s, s + slots, s + 2 slots, ..., so (the tile's
 * slot, its rank in the slot, the offset in the tile), with kmax = the
 * most tiles a slot takes; the token itself when slots = 0. One-to-one, so
 * a token listed twice still meets itself. */
__host__ __device__ __forceinline__ uint64_t fls_mods_order(uint64_t tok, int64_t slots, int64_t kmax)
{
    if (slots <= 0)
        return tok;
    const uint64_t t = tok >> 7;
    return ((t % (uint64_t)slots) * (uint64_t)kmax + t / (uint64_t)slots) << 7 | (tok & 127u);
}

/* The documented fp32 operations on one listed token's raw logit (the CPU
 * engine's fls_mods_apply; the files are built with -fmad=false and IEEE
 * division, so every operation rounds once, as there). */
__device__ __forceinline__ float fls_mod_logit(const fls_mod_dev &e, float l, const float *pen)
{
    if (e.seen >= 0) {
        const float r = pen[0];
        if (r != 1.0f)
            l = l > 0.0f ? __fdiv_rn(l, r) : __fmul_rn(l, r);
        const float fc = __fmul_rn(pen[2], (float)e.seen);
        l = __fsub_rn(l, fc);
        l = __fsub_rn(l, e.seen > 0 ? pen[1] : 0.0f);
    }
    if (e.has_bias)
        l = __fadd_rn(l, e.bias);
    return l;
}

/* Row b's mask words, or NULL where the row has none. */
__device__ __forceinline__ const uint32_t *fls_mods_row_mask(const fls_mods_dev &m, int64_t b)
{
    return m.mask && (!m.mask_rows || m.mask_rows[b]) ? m.mask + b * m.mask_ld : NULL;
}

/* The index of row b's first entry at or past token v (n[b] when none). */
__device__ __forceinline__ int fls_mods_lower(const fls_mods_dev &m, int64_t b, uint64_t v)
{
    const fls_mod_dev *e = m.e + b * m.per;
    int lo = 0, hi = m.n[b];
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if ((uint64_t)e[mid].token < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The device view of one request's workspace. */
struct fls_ws {
    unsigned long long *best; /* [(b * nd + j) * nent + e] packed winners */
    float *xw;                /* same index: the winner's tempered logit */
    float *m, *s;             /* [b * nent + e] log-sum-exp partials (max, sum exp(x - max)) */
    unsigned *finite;         /* [B]: == epoch when the row has a logit > -inf */
    unsigned *shallow;        /* [B]: == epoch when the row's draw-0 winner is within the key
                                 resolution (fls_key_marks); NULL: not checked (no keys) */
    unsigned *nanflag;        /* [1]: == epoch when some logit is NaN */
    unsigned *tempflag;       /* [1]: == epoch when a finite logit's l / T overflowed (the CPU
                                 engine's FLS_ERR_TEMPERATURE) */
    unsigned *status;         /* [2]: (epoch, code) written by the finalize kernel */
    unsigned epoch;
    int nent;            /* segments per (b, j) */
    int nd;              /* draws in this pass */
    uint32_t draw_base;  /* the call's draw index of j = 0 (its tokens' column) */
    uint32_t first_draw; /* the noise's draw index of the call's draw 0 */
    int want_lse;
    /* Gumbel bound tables (fls_gumbel_bound.h, device, FLS_GB_N floats each),
     * or NULL: no skipping (the plain loop computes every key). */
    const float *gup, *glo;
    const float *gup2; /* the top bucket's sub-bucket bounds (FLS_GB2_N), or NULL */
    /* The wgmma kernel's row thresholds shared across CTAs, [b * nd + j]:
     * (tepoch << 32) | fls_ord(an exact key of row b, draw j in this pass),
     * raised with 64-bit atomicMax; a value of another pass (another
     * tepoch) reads as -inf, so the array is never cleared between passes.
     * NULL: no sharing (the engine sets it only when gup is set). */
    unsigned long long *gthr;
    unsigned tepoch;
    /* FLS_METHOD_GROUPED: group size (0: the flat method) and, per entry,
     * the group key (best then holds group << 32 | token, xw its x) */
    int group_size;
    double *gk;
    int noise;                 /* fls_noise: FLS_NOISE_MIN_FIRST takes the flat method only */
    unsigned *sticky;          /* the first error code since the last fls_context_sync (async mode) */
    const unsigned *paramflag; /* not 0: a mask, bias or penalty value from device memory is out of
                                  range (kernels/mods.cu); NULL: none checked on the device */
};

/* The call's status word, and the sticky error of async mode. */
__device__ __forceinline__ void fls_write_status(const fls_ws &ws, unsigned code)
{
    ws.status[0] = ws.epoch;
    ws.status[1] = code;
    if (code && ws.sticky)
        atomicCAS(ws.sticky, 0u, code);
}

/* The noise's draw index of draw j of the pass. */
__device__ __forceinline__ uint32_t fls_noise_draw(const fls_ws &ws, int j)
{
    return ws.first_draw + ws.draw_base + (uint32_t)j;
}

/* The grouped method keeps each (row, draw)'s best group of a segment in
 * registers: at most this many draws per pass. */
#define FLS_GROUP_MAX_ND 8

/* Segments shorter than this never skip: the seed and the final drain cost
 * about two exact tokens per lane, more than a short segment saves. */
#define FLS_SKIP_MIN_N 512

/* A warp's queue of tokens whose key must be computed exactly (shared
 * memory): up to 31 left over plus 64 new per step. */
#define FLS_CANDQ 96
struct fls_candq {
    uint64_t bits[FLS_CANDQ];
    float x[FLS_CANDQ];
    int idx[FLS_CANDQ];
};

/* Philox4x32-10 block of the pair (token & ~1, token | 1) through cuRAND's
 * device API, with the counter/key layout of fls_noise_counter. */
__device__ __forceinline__ uint4 fls_philox_pair(uint64_t seed, uint64_t offset, uint32_t draw,
                                                 uint64_t token)
{
    uint4 c = make_uint4((uint32_t)(token >> 1), draw, (uint32_t)offset, (uint32_t)(offset >> 32));
    uint2 k = make_uint2((uint32_t)seed, (uint32_t)(seed >> 32));
    return curand_Philox4x32_10(c, k);
}

/*
 * fls_gumbel_from_bits (fls_noise.h), restated for the device with the same
 * bits and fewer slow instructions:
 *  - U (or 1-U) = (2q + 1) 2^-65 with q < 2^63: the header adds two exact
 *    doubles and rounds once to 53 bits; here one u64 -> f64 conversion
 *    rounds the odd integer 2q + 1 once to 53 bits and the power-of-two scale
 *    is exact, so the double (and the float after it) is the same;
 *  - both halves of the exponential share one fls_logf_ call (select of the
 *    argument) instead of diverging into two.
 * The GPU tests compare it bit for bit with the host's fls_gumbel.
 */
__device__ __forceinline__ float fls_exponential_dev(uint64_t k)
{
    const bool upper = (k >> 63) != 0;
    const uint64_t q = upper ? ~k : k;
    const float q_f = __double2float_rn(__dmul_rn(__ull2double_rn(2 * q + 1), 0x1p-65));
    const float u = __fsub_rn(1.0f, q_f);
    const float lg = fls_logf_(upper ? u : q_f);
    const float t = __fdiv_rn(q_f, __fsub_rn(1.0f, u)); /* used only when upper and u < 1 */
    return upper ? (u == 1.0f ? q_f : -__fmul_rn(lg, t)) : -lg;
}

__device__ __forceinline__ float fls_gumbel_dev(uint64_t k)
{
    return -fls_logf_(fls_exponential_dev(k));
}

/* The min-first scheme (fls_noise.h's fls_mf_group_of and fls_mf_noise,
 * bit for bit): group g's block under the row seed, then a token's noise
 * from its own bits. */
__device__ __forceinline__ fls_mf_group fls_mf_group_dev(uint64_t seed, uint64_t offset, uint32_t d,
                                                         uint64_t g)
{
    const uint4 c = make_uint4(FLS_MF_TAG | (uint32_t)g, d, (uint32_t)offset, (uint32_t)(offset >> 32));
    const uint4 r = curand_Philox4x32_10(c, make_uint2((uint32_t)seed, (uint32_t)(seed >> 32)));
    fls_mf_group o;
    o.emin = __fmul_rn(fls_exponential_dev(((uint64_t)r.y << 32) | r.x), 0x1p-6f);
    o.m = -fls_logf_(o.emin);
    o.idx = r.z & (FLS_MF_GROUP - 1);
    return o;
}

__device__ __forceinline__ float fls_mf_noise_dev(float emin, float m, uint32_t idx, uint32_t local,
                                                  uint64_t bits)
{
    if (local == idx)
        return m;
    return fminf(-fls_logf_(__fadd_rn(emin, fls_exponential_dev(bits))), m);
}

__device__ __forceinline__ unsigned long long fls_warp_max_u64(unsigned long long v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long w = __shfl_xor_sync(FLS_FULL_MASK, v, o);
        v = w > v ? w : v;
    }
    return v;
}

__device__ __forceinline__ float fls_warp_maxf(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(FLS_FULL_MASK, v, o));
    return v;
}

__device__ __forceinline__ float fls_warp_sumf(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = __fadd_rn(v, __shfl_xor_sync(FLS_FULL_MASK, v, o));
    return v;
}

/* Ordered 64-bit rank key: rule.h's fls_pack of (x, v), larger is earlier
 * in rank order (larger x, then lower index); x == 0 as +0 (the rank order
 * does not tell -0 from +0). fls_frank_x: its x back (fls_unord). */
__device__ __forceinline__ unsigned long long fls_frank(float x, int64_t v)
{
    return fls_pack(x + 0.0f, (uint32_t)v);
}

__device__ __forceinline__ float fls_frank_x(unsigned long long k)
{
    return fls_unord((uint32_t)(k >> 32));
}

/* The k-th largest of the warp's 32 values (k <= 32; ties count once per
 * lane): k - 1 times, the lowest lane holding the maximum drops out. */
__device__ __forceinline__ float fls_warp_kth_maxf(float v, int k)
{
    for (int r = 1; r < k; r++) {
        const float m = fls_warp_maxf(v);
        const unsigned at = __ballot_sync(FLS_FULL_MASK, v == m);
        if ((threadIdx.x & 31) == __ffs(at) - 1)
            v = -INFINITY;
    }
    return fls_warp_maxf(v);
}

/* The bits of token v from the Philox block of its pair. */
__device__ __forceinline__ uint64_t fls_pair_bits(uint4 r, uint64_t v)
{
    return (v & 1) ? ((uint64_t)r.w << 32) | r.z : ((uint64_t)r.y << 32) | r.x;
}

/* Exact key of one queued token; updates the lane's packed best. */
__device__ __forceinline__ float fls_exact_key(uint64_t bits, float x, uint32_t token,
                                               unsigned long long &best, float &bx)
{
    const float key = __fadd_rn(x, fls_gumbel_dev(bits));
    const unsigned long long pk = fls_pack(key, token);
    if (pk > best) {
        best = pk;
        bx = x;
    }
    return key;
}

/*
 * One draw of one segment with skipping (T != 0): the same winner as the
 * plain loop, computing the two logs only for tokens that might win.
 *  - thr is a lower bound of the segment's winning key (any token's key is):
 *    seeded with fl(x_s + lo[bucket]) <= key_s of the segment's max-logit
 *    token s (Philox only), then raised to the max exact key computed so far.
 *  - a token whose fl(x + up[bucket]) < thr (STRICT) has key < thr <= winner's
 *    key, so it cannot be the winner, not even on a tie with a lower index;
 *    a pair whose fl(max x + FLS_GUMBEL_MAX) < thr skips the Philox block too.
 *  - the others go to a warp queue; whenever it holds 32 tokens every lane
 *    computes one exact key (no divergence on the logs), the rest at the end.
 * x = -inf gives fl(-inf + G) = -inf < thr for any finite thr.
 */
template <class Rule>
__device__ __forceinline__ void fls_draw_skip(const float *S, int n, uint64_t v0, float T, float x_seed,
                                              int i_seed, uint32_t d, const fls_row_params &rp,
                                              const fls_ws &ws, const float *gup, fls_candq *q, int lane,
                                              unsigned long long &best, float &bx)
{
    const int np = (n + 1) >> 1;
    if (i_seed < 0) {
        /* no finite logit (n > 0): every key is -inf and the plain loop's
         * winner is the lowest token, v0 */
        if (lane == 0) {
            best = fls_pack(-INFINITY, (uint32_t)v0);
            bx = -INFINITY;
        }
        return;
    }
    float thr = -INFINITY;
    if (x_seed > -INFINITY) {
        const uint64_t vs = v0 + (uint64_t)i_seed;
        const uint64_t ks = fls_pair_bits(fls_philox_pair(rp.seed, rp.offset, d, vs), vs);
        thr = __fadd_rn(x_seed, __ldg(ws.glo + (ks >> FLS_GB_SHIFT)));
    }
    int cnt = 0; /* warp-uniform */
    const unsigned lt = (1u << lane) - 1u;
    __syncwarp();
    for (int p0 = 0; p0 < np; p0 += 32) {
        const int p = p0 + lane, i = 2 * p;
        const bool ok0 = p < np, ok1 = i + 1 < n;
        const float x0 = ok0 ? Rule::temper(S[i], T) : -INFINITY;
        const float x1 = ok1 ? Rule::temper(S[i + 1], T) : -INFINITY;
        bool c0 = false, c1 = false;
        uint64_t k0 = 0, k1 = 0;
        if (ok0 && !(__fadd_rn(fmaxf(x0, x1), FLS_GUMBEL_MAX) < thr)) {
            const uint4 r = fls_philox_pair(rp.seed, rp.offset, d, v0 + (uint64_t)i);
            k0 = ((uint64_t)r.y << 32) | r.x;
            k1 = ((uint64_t)r.w << 32) | r.z;
            c0 = !(__fadd_rn(x0, gup[k0 >> FLS_GB_SHIFT]) < thr);
            c1 = ok1 && !(__fadd_rn(x1, gup[k1 >> FLS_GB_SHIFT]) < thr);
        }
        const unsigned m0 = __ballot_sync(FLS_FULL_MASK, c0), m1 = __ballot_sync(FLS_FULL_MASK, c1);
        if ((m0 | m1) == 0)
            continue;
        const int n0 = __popc(m0);
        if (c0) {
            const int s = cnt + __popc(m0 & lt);
            q->bits[s] = k0;
            q->x[s] = x0;
            q->idx[s] = i;
        }
        if (c1) {
            const int s = cnt + n0 + __popc(m1 & lt);
            q->bits[s] = k1;
            q->x[s] = x1;
            q->idx[s] = i + 1;
        }
        cnt += n0 + __popc(m1);
        while (cnt >= 32) {
            __syncwarp();
            cnt -= 32;
            const uint64_t kb = q->bits[cnt + lane];
            const float xb = q->x[cnt + lane];
            const int ib = q->idx[cnt + lane];
            __syncwarp();
            const float key = fls_exact_key(kb, xb, (uint32_t)(v0 + (uint64_t)ib), best, bx);
            thr = fmaxf(thr, fls_warp_maxf(key));
        }
    }
    if (cnt > 0) {
        __syncwarp();
        if (lane < cnt)
            fls_exact_key(q->bits[lane], q->x[lane], (uint32_t)(v0 + (uint64_t)q->idx[lane]), best, bx);
    }
    __syncwarp();
}

/* The row's NaN and finite marks for one segment or tile (lane 0 writes). */
__device__ __forceinline__ void fls_row_marks(const fls_ws &ws, int b, bool nan, float mx, int lane)
{
    if (lane == 0) {
        if (nan)
            *ws.nanflag = ws.epoch;
        if (mx > -INFINITY)
            ws.finite[b] = ws.epoch;
    }
}

/* The key-resolution marks (variants/rule.h, fls_key_unresolved) of a
 * partial winner of row b, draw j of the pass, with key k (-inf: none):
 * only the call's draw 0 counts. Its winning key is the max of the
 * partials' keys, so "some partial >= the limit" (the temperature mark)
 * and "some partial above -limit" (the shallow mark; any finite key of a
 * greedy row) decide it exactly whatever the tiling. */
__device__ __forceinline__ void fls_key_marks(const fls_ws &ws, int b, int j, double k, bool noisy)
{
    if (!ws.shallow || ws.draw_base + (uint32_t)j != 0 || !(k > -INFINITY))
        return;
    if (!noisy || k > -FLS_KEY_LIMIT)
        ws.shallow[b] = ws.epoch;
    if (noisy && k >= FLS_KEY_LIMIT)
        *ws.tempflag = ws.epoch;
}

/* Warp-collective: the warp's winner (max of the lanes' packed best), the
 * lowest lane holding it (src) and its x (wx). */
__device__ __forceinline__ unsigned long long fls_warp_winner(unsigned long long best, float bx, int &src,
                                                              float &wx)
{
    const unsigned long long w = fls_warp_max_u64(best);
    src = __ffs(__ballot_sync(FLS_FULL_MASK, best == w)) - 1;
    wx = __shfl_sync(FLS_FULL_MASK, bx, src);
    return w;
}

/* Warp-collective: the warp's winner of row b, draw j of the pass, entry e
 * into the workspace, with the winner's x; returns it, and in src the lowest
 * lane holding it. */
__device__ __forceinline__ unsigned long long fls_warp_put_winner(unsigned long long best, float bx,
                                                                  const fls_ws &ws, int b, int j, int e,
                                                                  bool noisy, int lane, int &src)
{
    float wx;
    const unsigned long long w = fls_warp_winner(best, bx, src, wx);
    if (lane == 0) {
        const int64_t idx = ((int64_t)b * ws.nd + j) * ws.nent + e;
        ws.best[idx] = w;
        ws.xw[idx] = wx;
        fls_key_marks(ws, b, j, fls_key_of(w), noisy);
    }
    return w;
}

/*
 * One draw of one segment under the min-first scheme (T != 0), exact: the
 * same winner as the plain loop with fls_mf_noise_dev. The segment touches
 * at most 32 groups (n <= FLS_SEG + 64): lane q draws the block of group
 * v0 / 64 + q. thr, a lower bound of the segment's winning key: the largest
 * exact key of the groups' minimum tokens (noise M, no token block) and of
 * the segment's largest logit (x_seed at i_seed). A token with
 * fl(x + M) < thr (strict; every noise of its group <= M) cannot win, not
 * even on a tie; the others get their pair's block. On flat rows that is
 * about one block per group instead of one per pair.
 */
template <class Rule>
__device__ __forceinline__ void fls_draw_mf(const float *S, int n, uint64_t v0, float T, float x_seed,
                                            int i_seed, uint32_t d, const fls_row_params &rp, int lane,
                                            unsigned long long &best, float &bx)
{
    const uint64_t g0 = v0 / FLS_MF_GROUP;
    const fls_mf_group mq = fls_mf_group_dev(rp.seed, rp.offset, d, g0 + (uint64_t)lane);
    /* the lane's group's minimum token, if it is in the segment */
    const int64_t im = (int64_t)((g0 + (uint64_t)lane) * FLS_MF_GROUP + mq.idx) - (int64_t)v0;
    float key_m = -INFINITY;
    if (im >= 0 && im < n) {
        const float x = Rule::temper(S[im], T);
        key_m = Rule::key(x, mq.m, T);
        const unsigned long long pk = fls_pack(key_m, (uint32_t)(v0 + (uint64_t)im));
        if (pk > best) {
            best = pk;
            bx = x;
        }
    }
    float thr = fls_warp_maxf(key_m);
    if (i_seed >= 0) {
        /* the largest logit's key (lane 0 computes it; every lane adopts it) */
        const uint64_t vs = v0 + (uint64_t)i_seed;
        const int src = (int)(vs / FLS_MF_GROUP - g0);
        const float em = __shfl_sync(FLS_FULL_MASK, mq.emin, src), mm = __shfl_sync(FLS_FULL_MASK, mq.m, src);
        const uint32_t id = __shfl_sync(FLS_FULL_MASK, mq.idx, src);
        const uint32_t loc = (uint32_t)(vs % FLS_MF_GROUP);
        float ks = -INFINITY;
        if (lane == 0 && loc != id) {
            ks = Rule::key(x_seed,
                           fls_mf_noise_dev(em, mm, id, loc,
                                            fls_pair_bits(fls_philox_pair(rp.seed, rp.offset, d, vs), vs)),
                           T);
            const unsigned long long pk = fls_pack(ks, (uint32_t)vs);
            if (pk > best) {
                best = pk;
                bx = x_seed;
            }
        }
        thr = fmaxf(thr, __shfl_sync(FLS_FULL_MASK, ks, 0));
    }
    const int np = (n + 1) >> 1;
    for (int p0 = 0; p0 < np; p0 += 32) {
        const int p = p0 + lane, i = 2 * p;
        const uint64_t v = v0 + (uint64_t)i;
        /* a pair is in one group (v0 even); lanes past the end read group 0 */
        const int src = p < np ? (int)(v / FLS_MF_GROUP - g0) : 0;
        const float em = __shfl_sync(FLS_FULL_MASK, mq.emin, src), mm = __shfl_sync(FLS_FULL_MASK, mq.m, src);
        const uint32_t id = __shfl_sync(FLS_FULL_MASK, mq.idx, src);
        if (p >= np)
            continue;
        const float x0 = Rule::temper(S[i], T);
        const float x1 = i + 1 < n ? Rule::temper(S[i + 1], T) : -INFINITY;
        const uint32_t loc = (uint32_t)(v % FLS_MF_GROUP);
        /* the minimum token and the seed are done */
        const bool c0 = !(__fadd_rn(x0, mm) < thr) && loc != id && i != i_seed;
        const bool c1 = i + 1 < n && !(__fadd_rn(x1, mm) < thr) && loc + 1 != id && i + 1 != i_seed;
        if (c0 || c1) {
            const uint4 r = fls_philox_pair(rp.seed, rp.offset, d, v);
            if (c0) {
                const float k =
                    Rule::key(x0, fls_mf_noise_dev(em, mm, id, loc, ((uint64_t)r.y << 32) | r.x), T);
                const unsigned long long pk = fls_pack(k, (uint32_t)v);
                if (pk > best) {
                    best = pk;
                    bx = x0;
                }
            }
            if (c1) {
                const float k =
                    Rule::key(x1, fls_mf_noise_dev(em, mm, id, loc + 1, ((uint64_t)r.w << 32) | r.z), T);
                const unsigned long long pk = fls_pack(k, (uint32_t)(v + 1));
                if (pk > best) {
                    best = pk;
                    bx = x1;
                }
            }
        }
    }
}

/*
 * One warp samples one segment: n logits S[0..n) (stride 1, generic memory:
 * shared or global) of row b, global token index v0 + i, v0 even. Writes the
 * segment's partial winners (entry e) for the pass's draws, its log-sum-exp
 * partial when asked, and the row's finite / NaN marks. Warp-uniform control
 * flow; n may be 0 (an empty entry is still written).
 * Lane p handles the token pairs (v0 + 2p', v0 + 2p' + 1), p' = p mod 32, so
 * one Philox block serves both tokens of a pair, as in the CPU engine.
 * gup (the upper-bound table, in shared memory) and q (this warp's queue)
 * enable skipping (fls_draw_skip) for T != 0 and n >= FLS_SKIP_MIN_N; with
 * gup == NULL every key is computed.
 */
template <class Rule>
__device__ __forceinline__ void fls_warp_segment(const float *S, int n, uint64_t v0, int b, int e,
                                                 const fls_row_params &rp, const fls_ws &ws, int lane,
                                                 const float *gup, fls_candq *q)
{
    const float T = rp.temperature;
    const int np = (n + 1) >> 1;
    /* max x = fl(max l / T): division by T > 0 is monotone, so one division
     * per segment instead of one per token; lm is a logit of token li */
    float lm = -INFINITY, ln = INFINITY; /* ln: the smallest finite logit */
    int li = -1;
    bool nan = false;
    for (int p = lane; p < np; p += 32) {
        int i = 2 * p;
        float l0 = S[i];
        nan |= fls_bad_logit(l0);
        if (l0 > -INFINITY)
            ln = fminf(ln, l0);
        if (l0 > lm) {
            lm = l0;
            li = i;
        }
        if (i + 1 < n) {
            float l1 = S[i + 1];
            nan |= fls_bad_logit(l1);
            if (l1 > -INFINITY)
                ln = fminf(ln, l1);
            if (l1 > lm) {
                lm = l1;
                li = i + 1;
            }
        }
    }
    nan = __any_sync(FLS_FULL_MASK, nan);
    const float lmax = fls_warp_maxf(lm);
    const float mx = Rule::temper(lmax, T);
    fls_row_marks(ws, b, nan, mx, lane);
    /* l / T of a finite l overflows at the extremes first (monotone) */
    ln = -fls_warp_maxf(-ln);
    if (lane == 0 &&
        (fls_temper_overflows(lmax, mx) || (ln < INFINITY && fls_temper_overflows(ln, Rule::temper(ln, T)))))
        *ws.tempflag = ws.epoch;
    if (ws.want_lse) {
        /* the segment's log-sum-exp partial: sum of exp(x - max) with the
         * accurate expf (no fast math), lane-strided, then a warp tree */
        float s = 0.0f;
        if (mx > -INFINITY) {
            for (int p = lane; p < np; p += 32) {
                int i = 2 * p;
                s = __fadd_rn(s, fls_lsef_exp(Rule::temper(S[i], T), mx));
                if (i + 1 < n)
                    s = __fadd_rn(s, fls_lsef_exp(Rule::temper(S[i + 1], T), mx));
            }
        }
        s = fls_warp_sumf(s);
        if (lane == 0) {
            ws.m[(int64_t)b * ws.nent + e] = mx;
            ws.s[(int64_t)b * ws.nent + e] = s;
        }
    }
    const bool mf = ws.noise == FLS_NOISE_MIN_FIRST;
    /* min-first: its own skipping (fls_draw_mf) where the plain loop would skip */
    const bool mf_skip = mf && gup != NULL && Rule::noisy(T) && n >= FLS_SKIP_MIN_N && n <= FLS_SEG;
    const bool skip = !mf && gup != NULL && q != NULL && Rule::noisy(T) && n >= FLS_SKIP_MIN_N;
    float x_seed = -INFINITY;
    int i_seed = -1;
    if (skip || mf_skip) {
        /* the seed token: the first lane holding the max logit */
        const unsigned ball = __ballot_sync(FLS_FULL_MASK, li >= 0 && lm == lmax);
        const int src = ball ? __ffs(ball) - 1 : 0;
        const float ls = __shfl_sync(FLS_FULL_MASK, lm, src);
        i_seed = __shfl_sync(FLS_FULL_MASK, li, src);
        if (!ball)
            i_seed = -1;
        x_seed = Rule::temper(ls, T);
    }
    for (int j = 0; j < ws.nd; j++) {
        const uint32_t d = fls_noise_draw(ws, j);
        unsigned long long best = 0;
        float bx = -INFINITY;
        if (!nan && mf_skip) {
            fls_draw_mf<Rule>(S, n, v0, T, x_seed, i_seed, d, rp, lane, best, bx);
        } else if (!nan && skip) {
            fls_draw_skip<Rule>(S, n, v0, T, x_seed, i_seed, d, rp, ws, gup, q, lane, best, bx);
        } else if (!nan) {
            /* the plain loop: every key (no noise for greedy rows) */
            for (int p = lane; p < np; p += 32) {
                int i = 2 * p;
                uint64_t v = v0 + (uint64_t)i;
                float x0 = Rule::temper(S[i], T);
                float x1 = (i + 1 < n) ? Rule::temper(S[i + 1], T) : -INFINITY;
                float g0 = 0.0f, g1 = 0.0f;
                if (Rule::noisy(T)) {
                    uint4 r = fls_philox_pair(rp.seed, rp.offset, d, v);
                    const uint64_t k0 = ((uint64_t)r.y << 32) | r.x, k1 = ((uint64_t)r.w << 32) | r.z;
                    if (mf) { /* v even: both tokens of the pair in one group */
                        const fls_mf_group mg = fls_mf_group_dev(rp.seed, rp.offset, d, v / FLS_MF_GROUP);
                        const uint32_t lv = (uint32_t)(v % FLS_MF_GROUP);
                        g0 = fls_mf_noise_dev(mg.emin, mg.m, mg.idx, lv, k0);
                        g1 = fls_mf_noise_dev(mg.emin, mg.m, mg.idx, lv + 1, k1);
                    } else {
                        g0 = fls_gumbel_dev(k0);
                        if (i + 1 < n)
                            g1 = fls_gumbel_dev(k1);
                    }
                }
                unsigned long long p0 = fls_pack(Rule::key(x0, g0, T), (uint32_t)v);
                if (p0 > best) {
                    best = p0;
                    bx = x0;
                }
                if (i + 1 < n) {
                    unsigned long long p1 = fls_pack(Rule::key(x1, g1, T), (uint32_t)(v + 1));
                    if (p1 > best) {
                        best = p1;
                        bx = x1;
                    }
                }
            }
        }
        int src;
        (void)fls_warp_put_winner(best, bx, ws, b, j, e, Rule::noisy(T), lane, src);
    }
}

/* ---- the grouped method (variants/grouped.h) on a warp ---- */

/* (gkey, group) order as fls_gbest_beats: larger key, lower group on ties. */
__device__ __forceinline__ bool fls_gk_beats(double ka, uint32_t ga, double kb, uint32_t gb)
{
    return ka > kb || (ka == kb && ga < gb);
}

/* Warp-collective best of the lanes' (gkey, word = group << 32 | token, x):
 * every lane gets the winner. */
__device__ __forceinline__ void fls_warp_gbest(double &k, unsigned long long &w, float &x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const double k2 = __shfl_xor_sync(FLS_FULL_MASK, k, o);
        const unsigned long long w2 = __shfl_xor_sync(FLS_FULL_MASK, w, o);
        const float x2 = __shfl_xor_sync(FLS_FULL_MASK, x, o);
        if (fls_gk_beats(k2, (uint32_t)(w2 >> 32), k, (uint32_t)(w >> 32)) ||
            (k2 == k && w2 == w && x2 > x)) {
            k = k2;
            w = w2;
            x = x2;
        }
    }
}

/*
 * One group of n <= 32 * per tokens S[0..n) (global index v0 + i, group k)
 * of row b on one warp: its log-mass L (double: xm + log1p of the other
 * tokens' terms, each expf(x - xm) in float, so no fp32 absorption of a deep
 * tail), then for each draw of the pass its key L + G'; where the key beats
 * the (row, draw)'s best so far (best[], the warp's copy, every lane), the
 * within-group Gumbel-max with the token noise. Lane-strided tokens.
 * Returns the group's lse partial (xm, 1 + r) in *m, *s; input errors in
 * nan / ovf. T = 0: L = the max, no noise, the first maximum.
 */
__device__ __forceinline__ void fls_warp_group(const float *S, int n, uint64_t v0, uint64_t k,
                                               const fls_row_params &rp, uint64_t gkey, const fls_ws &ws,
                                               int nd, double *bk, unsigned long long *bw, float *bxx,
                                               int lane, bool &nan, bool &ovf, float &pm, float &ps)
{
    const float T = rp.temperature;
    const bool noisy = fls_temperature_noisy(T);
    /* the max logit (first index) and the smallest finite one */
    float lm = -INFINITY, ln = INFINITY;
    int im = 0x7fffffff;
    bool bad = false;
    for (int i = lane; i < n; i += 32) {
        const float l = S[i];
        bad |= fls_bad_logit(l);
        if (l > -INFINITY)
            ln = fminf(ln, l);
        if (l > lm) {
            lm = l;
            im = i;
        }
    }
    bad = __any_sync(FLS_FULL_MASK, bad);
    nan |= bad;
    const float lmax = fls_warp_maxf(lm);
    im = __reduce_min_sync(FLS_FULL_MASK, (unsigned)(lm == lmax && lmax > -INFINITY ? im : 0x7fffffff));
    ln = -fls_warp_maxf(-ln);
    pm = -INFINITY;
    ps = 0.0f;
    if (bad || !(lmax > -INFINITY))
        return; /* a NaN (the call fails) or a fully masked group (no mass) */
    const float xm = fls_temper(lmax, T);
    ovf |= fls_temper_overflows(lmax, xm) || fls_temper_overflows(ln, fls_temper(ln, T));
    double L = xm;
    float r = 0.0f;
    if (noisy) {
        for (int i = lane; i < n; i += 32)
            if (i != im)
                r = __fadd_rn(r, fls_lsef_exp(fls_temper(S[i], T), xm));
        r = fls_warp_sumf(r);
        L = (double)xm + log1p((double)r);
    }
    pm = xm;
    ps = __fadd_rn(1.0f, r);
    for (int j = 0; j < nd; j++) {
        const uint32_t d = fls_noise_draw(ws, j);
        const double key =
            noisy ? L + (double)fls_gumbel_dev(fls_pair_bits(fls_philox_pair(gkey, rp.offset, d, k), k)) : L;
        if (!fls_gk_beats(key, (uint32_t)k, bk[j], (uint32_t)(bw[j] >> 32)) && bw[j] != ~0ull)
            continue;
        /* the within-group sample (the token noise of the flat contract) */
        unsigned long long best = 0;
        float bx = -INFINITY;
        if (!noisy) {
            best = fls_pack(lmax, (uint32_t)(v0 + (uint64_t)im));
            bx = lmax;
        } else {
            for (int i = lane; i < n; i += 32) {
                const uint64_t v = v0 + (uint64_t)i;
                const float x = fls_temper(S[i], T);
                (void)fls_exact_key(fls_pair_bits(fls_philox_pair(rp.seed, rp.offset, d, v), v), x,
                                    (uint32_t)v, best, bx);
            }
        }
        int src;
        float wx;
        const unsigned long long w = fls_warp_winner(best, bx, src, wx);
        bk[j] = key;
        bw[j] = ((unsigned long long)k << 32) | (unsigned long long)(0xffffffffu - (uint32_t)w);
        bxx[j] = wx;
    }
}

/* One warp samples one segment of n tokens (v0 a multiple of g) of row b
 * by the grouped method; entry e of each draw of the pass, and the
 * segment's lse partial when asked. */
__device__ __forceinline__ void fls_warp_segment_grouped(const float *S, int n, uint64_t v0, int b, int e,
                                                         const fls_row_params &rp, const fls_ws &ws, int lane)
{
    const int g = ws.group_size;
    const uint64_t gkey = fls_group_key(rp.seed);
    double bk[FLS_GROUP_MAX_ND];
    unsigned long long bw[FLS_GROUP_MAX_ND];
    float bx[FLS_GROUP_MAX_ND];
    for (int j = 0; j < ws.nd; j++) {
        bk[j] = -INFINITY;
        bw[j] = ~0ull; /* none */
        bx[j] = -INFINITY;
    }
    bool nan = false, ovf = false;
    fls_lsef part = fls_lsef_empty();
    float mx = -INFINITY;
    for (int i0 = 0; i0 < n; i0 += g) {
        const int ng = n - i0 < g ? n - i0 : g;
        float pm, ps;
        fls_warp_group(S + i0, ng, v0 + (uint64_t)i0, (v0 + (uint64_t)i0) / (uint64_t)g, rp, gkey, ws, ws.nd,
                       bk, bw, bx, lane, nan, ovf, pm, ps);
        fls_lsef_merge(&part, pm, ps);
        mx = fmaxf(mx, pm);
    }
    fls_row_marks(ws, b, nan, mx, lane);
    if (lane == 0) {
        if (ovf)
            *ws.tempflag = ws.epoch;
        if (ws.want_lse) {
            ws.m[(int64_t)b * ws.nent + e] = part.m;
            ws.s[(int64_t)b * ws.nent + e] = part.s;
        }
        for (int j = 0; j < ws.nd; j++) {
            const int64_t idx = ((int64_t)b * ws.nd + j) * ws.nent + e;
            ws.gk[idx] = bk[j];
            ws.best[idx] = bw[j];
            ws.xw[idx] = bx[j];
            fls_key_marks(ws, b, j, bw[j] == ~0ull ? -INFINITY : bk[j],
                          fls_temperature_noisy(rp.temperature));
        }
    }
}

/* Row b's log-sum-exp from its (max, scaled sum) entries in the workspace, on
 * a whole warp (every lane gets it); greedy rows as fls_lse_value says. */
__device__ __forceinline__ double fls_warp_row_lse(const fls_ws &ws, int b, int lane, bool greedy)
{
    const int64_t lb = (int64_t)b * ws.nent;
    float M = -INFINITY;
    for (int e = lane; e < ws.nent; e += 32)
        M = fmaxf(M, __ldcg(ws.m + lb + e));
    M = fls_warp_maxf(M);
    double S = 0.0;
    for (int e = lane; e < ws.nent; e += 32)
        S += fls_lse_term((double)__ldcg(ws.s + lb + e), (double)__ldcg(ws.m + lb + e), (double)M);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        S += __shfl_xor_sync(FLS_FULL_MASK, S, o);
    return fls_lse_value((double)M, S, greedy);
}

/* The grouped finalize of item w = b * nd + j: the best (gkey, group) over
 * the entries; the token and its x; the log-sum-exp from the partials. */
__device__ __forceinline__ void fls_finalize_item_grouped(const fls_row_params *rows, int64_t draws_total,
                                                          const fls_ws &ws, int64_t *tokens, float *lse_out,
                                                          float *logprobs, int64_t w, int lane)
{
    const int b = (int)(w / ws.nd);
    const int j = (int)(w - (int64_t)b * ws.nd);
    const int64_t base = w * ws.nent;
    double k = -INFINITY;
    unsigned long long bw = ~0ull;
    float x = -INFINITY;
    for (int e = lane; e < ws.nent; e += 32) {
        const unsigned long long we = __ldcg(ws.best + base + e);
        const double ke = __ldcg(ws.gk + base + e);
        if (we != ~0ull && (bw == ~0ull || fls_gk_beats(ke, (uint32_t)(we >> 32), k, (uint32_t)(bw >> 32)))) {
            k = ke;
            bw = we;
            x = __ldcg(ws.xw + base + e);
        }
    }
    if (bw == ~0ull)
        k = -INFINITY; /* an empty lane loses every comparison below */
    fls_warp_gbest(k, bw, x);
    const float T = rows[b].temperature;
    const double lse = ws.want_lse ? fls_warp_row_lse(ws, b, lane, !fls_temperature_noisy(T)) : 0.0;
    if (lane == 0) {
        const int64_t d = (int64_t)ws.draw_base + j;
        tokens[(int64_t)b * draws_total + d] = (int64_t)(uint32_t)bw;
        if (logprobs)
            logprobs[(int64_t)b * draws_total + d] =
                fls_temperature_noisy(T) ? (float)((double)x - lse) : 0.0f;
        if (lse_out && d == 0)
            lse_out[b] = (float)lse;
    }
}

/*
 * The final reduction (the finalize kernel, sample.cu). Loads go through L2
 * (ld.cg): the partials were written by other CTAs.
 * fls_finalize_status (warp-collective): the call's status code (a NaN was
 * seen, a finite logit's l / T overflowed, some row has no finite logit, in
 * that order); anything but FLS_SC_OK means no output is written.
 */
__device__ __forceinline__ unsigned fls_finalize_status(int B, const fls_ws &ws, int lane)
{
    if (ws.paramflag && __ldcg(ws.paramflag))
        return FLS_SC_PARAM; /* the host checks its own arrays before anything else: so here */
    if (__ldcg(ws.nanflag) == ws.epoch)
        return FLS_SC_NAN;
    if (__ldcg(ws.tempflag) == ws.epoch)
        return FLS_SC_TEMPERATURE;
    /* a row with a finite key whose draw-0 winner is beyond the key
     * resolution (fls_key_marks; a pass without draws marks nothing) */
    const bool marked = ws.shallow && ws.nd > 0;
    bool m = false, deep = false;
    for (int b = lane; b < B; b += 32) {
        const bool fin = __ldcg(ws.finite + b) == ws.epoch;
        m |= !fin;
        deep |= fin && marked && __ldcg(ws.shallow + b) != ws.epoch;
    }
    if (__any_sync(FLS_FULL_MASK, deep))
        return FLS_SC_TEMPERATURE;
    return __any_sync(FLS_FULL_MASK, m) ? FLS_SC_ALL_MASKED : FLS_SC_OK;
}

/* One warp reduces item w = b * nd + j: the rule's merge over the nent
 * entries (the max of the packed words; equal packed values are the same
 * token), the row's log-sum-exp from its partials (max, then the sum of
 * fls_lse_term in double), then the rule's finalize. */
template <class Rule>
__device__ __forceinline__ void fls_finalize_item(const fls_row_params *rows, int64_t draws_total,
                                                  const fls_ws &ws, int64_t *tokens, float *lse_out,
                                                  float *logprobs, int64_t w, int lane)
{
    const int b = (int)(w / ws.nd);
    const int j = (int)(w - (int64_t)b * ws.nd);
    const int64_t base = w * ws.nent;
    unsigned long long best = 0;
    int be = -1;
    /* four independent loads in flight per lane; the winner's x is read once */
    int e = lane;
    for (; e + 96 < ws.nent; e += 128) {
        const unsigned long long p0 = __ldcg(ws.best + base + e), p1 = __ldcg(ws.best + base + e + 32),
                                 p2 = __ldcg(ws.best + base + e + 64), p3 = __ldcg(ws.best + base + e + 96);
        if (p0 > best) {
            best = p0;
            be = e;
        }
        if (p1 > best) {
            best = p1;
            be = e + 32;
        }
        if (p2 > best) {
            best = p2;
            be = e + 64;
        }
        if (p3 > best) {
            best = p3;
            be = e + 96;
        }
    }
    for (; e < ws.nent; e += 32) {
        const unsigned long long p = __ldcg(ws.best + base + e);
        if (p > best) {
            best = p;
            be = e;
        }
    }
    const float bx = be >= 0 ? __ldcg(ws.xw + base + be) : -INFINITY;
    unsigned long long wbest = fls_warp_max_u64(best);
    unsigned ball = __ballot_sync(FLS_FULL_MASK, best == wbest);
    float wx = __shfl_sync(FLS_FULL_MASK, bx, __ffs(ball) - 1);
    const float T = rows[b].temperature;
    const double lse = ws.want_lse ? fls_warp_row_lse(ws, b, lane, !Rule::noisy(T)) : 0.0;
    if (lane == 0) {
        const int64_t d = (int64_t)ws.draw_base + j;
        const typename Rule::cand c = fls_cand_unpack(wbest, wx);
        int64_t tok = -1;
        float lp = 0.0f;
        /* the status word already says whether a row has no finite key */
        (void)Rule::finalize(&c, T, lse, &tok, &lp);
        tokens[(int64_t)b * draws_total + d] = tok;
        if (logprobs)
            logprobs[(int64_t)b * draws_total + d] = lp;
        if (lse_out && d == 0)
            lse_out[b] = (float)lse;
    }
}

/* ---- launchers (host, defined in the .cu files) ---- */

/* Sampling over a logits block L (B rows, vn columns, row stride ldl) whose
 * column 0 is global token v_off (a multiple of FLS_SEG); entries e_off + segment,
 * segments of fls_segment_len(B) tokens. cap5: the variant compiled for 5
 * blocks per SM (register cap 48; benchmark comparison). */
cudaError_t fls_launch_segments(const float *L, int64_t ldl, int B, int64_t vn, uint64_t v_off, int e_off,
                                const fls_row_params *rows, const fls_ws &ws, int sm_count, int cap5,
                                cudaStream_t st);
/* Final reduction over the nent entries; writes tokens / logsumexp / logprobs
 * (row stride draws_total) unless a NaN or an all-masked row was seen. */
cudaError_t fls_launch_finalize(const fls_row_params *rows, int B, int64_t draws_total, const fls_ws &ws,
                                int64_t *tokens, float *lse, float *logprobs, cudaStream_t st);
/* rows[b] from device arrays or scalars (params_on_device); a bad
 * temperature sets the temperature mark. */
cudaError_t fls_launch_pack_rows(int B, const float *temperature, float temperature_value,
                                 const uint64_t *row_seeds, uint64_t seed, const uint64_t *row_offsets,
                                 uint64_t offset, fls_row_params *rows, const fls_ws &ws, cudaStream_t st);
/* L[b * ldl + v] = sum_k W[v0 + v, k] H[b, k] (fp32 fma) for v < vn: any dtypes, any strides. */
cudaError_t fls_launch_simt_logits(const void *W, fls_dtype wd, int64_t ldw, const void *H, fls_dtype hd,
                                   int64_t ldh, int B, int64_t D, int64_t v0, int64_t vn, float *L,
                                   int64_t ldl, cudaStream_t st);
/* Multinomial baseline: P = exp(x - max) per row, then inverse-CDF sampling. */
cudaError_t fls_launch_softmax(const float *L, int64_t ldl, int B, int64_t V, const fls_row_params *rows,
                               float *P, float *rowmax, float *rowsum, const fls_ws &ws, cudaStream_t st);
cudaError_t fls_launch_multinomial(const float *L, int64_t ldl, const float *P, int B, int64_t V,
                                   const fls_row_params *rows, const float *rowmax, const float *rowsum,
                                   const fls_ws &ws, int64_t draws_total, int64_t *tokens, float *lse,
                                   float *logprobs, cudaStream_t st);
/* The fused wgmma kernel (fused_wgmma.cu, sm_90a): W and H 16-bit of one
 * dtype, 16-byte aligned rows, D % 8 == 0; entries: fls_wgmma_slots per row (one per CTA that
 * works on the row), at most fls_wgmma_max_draws draws per pass. tile_n = batch rows
 * per tile (16, 32, 64, 128), fls_cuda_wgmma_tile_n(B) (fls_cuda.h) by default; epi_warps =
 * sampling warps (0: the default for tile_n); sample = 0 skips the sampler
 * (benchmark only: outputs are garbage); mods: the call's masks, bias and
 * penalties (NULL or empty: none), applied in the epilogue. */
int fls_wgmma_slots(int64_t B, int64_t V, int tile_n, int sm_count);
int fls_wgmma_max_draws(int tile_n);
/* fls_wgmma_max_draws at the smallest tile: the shared thresholds' draws per row */
#define FLS_GTHR_DRAWS 32
cudaError_t fls_launch_fused_wgmma(const void *W, int64_t ldw, const void *H, int64_t ldh, fls_dtype dt,
                                   int B, int64_t V, int64_t D, int tile_n, int epi_warps, int sample,
                                   const fls_row_params *rows, const fls_ws &ws, const fls_mods_dev *mods,
                                   int sm_count, cudaStream_t st);
/* The wgmma kernel as the rule family's matmul (sample mode 2): the fp32
 * logits of the B rows into L (row b at L + b * ldl) and, per row b and
 * 64-token group q (q < fls_wgmma_m64(V), tokens past V read -inf), at
 * g64[b * m64 + q] the group's largest logit (NaN if one is NaN, +inf if
 * one is +inf: the max propagates NaN) and at gab[b * m64 + q] its largest
 * finite |l| (0 if none). ex (or NULL): ex->gmo (or NULL): at
 * gmo[3 (b * m64 + q)] the count, mean and sum of squared deviations of
 * the group's finite tempered logits fls_temper(l, rows[b].temperature).
 * Tile rows and epilogue warps: the fused call's defaults for B. */
int64_t fls_wgmma_m64(int64_t V);
/* keys (or 0): per (row b, draw j) the K = rule[b].K <= keys best keys of
 * the CTA's tokens, K <= FLS_WG_KMAX: the keys of the select pass
 * (fls_rfast_select_kernel) over a support of every finite token (rows
 * without filters), at sel[((b * draws + j) * slots + c) * kst + r] for
 * the CTA's slot c (fls_wgmma_slots at the call's tile) and r < K (empty:
 * v = -1). Draws at most fls_wgmma_key_draws(B). */
#define FLS_WG_KMAX 4
typedef struct fls_wg_rule_extra {
    double *gmo;                /* or NULL: the groups' moments */
    const fls_row_params *rows; /* device, before the launch (gmo, keys) */
    const fls_row_rule *rule;   /* device, before the launch (keys) */
    int keys;
    int draws;
    uint32_t first_draw;
    const float *gup; /* the Gumbel bound table or NULL */
    fls_stair_entry *sel;
    int64_t kst;
    int warps; /* the epilogue's warps at tile 64: 0 = 15 where the keys are kept, else 11; 11 or 15 */
} fls_wg_rule_extra;
int fls_wgmma_key_draws(int64_t B);
int fls_wgmma_logits_slots(int64_t B, int64_t V, int sm_count);
cudaError_t fls_launch_wgmma_logits(const void *W, int64_t ldw, const void *H, int64_t ldh, fls_dtype dt,
                                    int B, int64_t V, int64_t D, float *L, int64_t ldl, float *g64,
                                    float *gab, const fls_wg_rule_extra *ex, int sm_count, cudaStream_t st);
#endif /* FLS_COMMON_CUH */
