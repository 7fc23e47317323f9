/*
 * fused_wgmma.cu — the fused LM-head + Gumbel-max kernel on Hopper's
 * asynchronous tensor cores (sm_90a: wgmma, TMA, mbarriers).
 *
 * W is (V, D) and H is (B, D), both bf16 or both f16, rows 16-byte aligned,
 * D % 8 == 0. A tile is 128 vocabulary rows x N batch rows (N = 16, 32, 64
 * or 128; batch rows beyond B and vocabulary rows beyond V are zero-filled
 * by the copy engine and never sampled). A persistent CTA has three roles,
 * warp-specialised so that loading, multiplying and sampling overlap:
 *
 *   warps 0-3  one warpgroup: wgmma.m64nNk16 (two per K-step of 16, one per
 *              64-row half of the tile) with fp32 accumulators in registers;
 *              at the end of a tile it stores them to a logits buffer S in
 *              shared memory and goes straight on to the next tile;
 *   warp 4     the producer: one lane issues the TMA copies of W's and H's
 *              K-blocks (64 wide, 128-byte swizzle) into a ring of stages;
 *   warps 5..  E = 7, 11 or 15 sampling warps: fls_wg_sample_rows turns S
 *              into the CTA's running best per (row, draw) with the
 *              contract's noise and common.cuh's key and packing helpers
 *              (the same keys as every other path), skipping exactly: a
 *              token whose key bound is below the row's best exact key so
 *              far (this CTA's, or any other CTA's: fls_ws.gthr) costs
 *              neither its division nor its logs — so the noise runs on
 *              the CUDA cores while the tensor cores and the copy engine
 *              work on the next tile.
 *
 * CTA c takes batch tile c % nbt and vocabulary tiles c / nbt, + slots, ...
 * (grid = slots x nbt <= SMs where it can), so a row's state stays in one
 * CTA's shared memory for the whole launch and reaches global memory once:
 * one entry per (row, draw, CTA of the row), fls_wgmma_slots per row; the
 * finalize kernel is the one every path shares. Hand-offs are mbarriers:
 * full/empty per stage (copy engine -> MMA -> producer) and sfull/sfree per
 * logits buffer (MMA -> sampling warps -> MMA). Logits never reach HBM.
 */
#include "kernels/common.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <string.h>

#include <type_traits>

#include "kernels/wgmma_ops.cuh"

#define WG_TV 128 /* vocabulary rows per tile: two m64 blocks (fls_mods_order's tiles) */
#define WG_BK 64  /* K per stage: 64 16-bit elements = one 128-byte swizzle row */
#define WG_ST 512 /* (row, draw) pairs of sampler state per CTA: 512 / N draws per pass */

template <int N, int E_, bool G = false> struct fls_wg_cfg {
    static constexpr int E = E_;                       /* epilogue warps */
    static constexpr int NTHREADS = 128 + 32 + 32 * E; /* E = 7, 11 or 15: whole warpgroups */
    /* With N = 128 the MMA warpgroup needs 128 accumulators: at 512 threads
     * (128 registers each at entry) it takes 176 and the other warpgroups
     * give theirs up (112; the CTA's pool is unchanged). 640 threads at
     * N = 128 would leave the sampler 76 (the static_assert below; a 15-warp
     * variant asking for 80 deadlocked in setmaxnreg),
     * so N = 128 has 7 or 11 sampling warps; 15 (one row per call) exists
     * at N = 64 for the benchmark's comparison. */
    static constexpr bool REG_SPLIT = NTHREADS >= 512 && N >= 128;
    static constexpr int REG_MMA = 176;
    static constexpr int REG_REST = 112;
    static constexpr int R = E >= 15 ? 1 : 2; /* rows per sampler call (registers) */
    static_assert(NTHREADS % 128 == 0, "roles are whole warpgroups (setmaxnreg)");
    /* setmaxnreg redistributes the CTA's launch allocation (65536 / NTHREADS
     * per thread, in units of 8); asking for more blocks forever */
    static_assert(!REG_SPLIT ||
                      128 * REG_MMA + (NTHREADS - 128) * REG_REST <= NTHREADS * (65536 / NTHREADS / 8 * 8),
                  "register split exceeds the CTA's allocation");
    static constexpr int W_BYTES = WG_TV * WG_BK * 2;
    static constexpr int H_BYTES = N * WG_BK * 2;
    static constexpr int STAGE = W_BYTES + H_BYTES; /* a multiple of 1024 */
    static constexpr int SP = WG_TV + 4;            /* logits pitch: conflict-free fragment stores */
    static constexpr int S_BYTES = N * SP * 4;
    static constexpr int NS = N >= 128 ? 1 : 2; /* logits buffers */
    /* the sampling warps' state (fls_wg_state): ST (row, draw) pairs of
     * best (8 bytes) and bx (4), N rows of lse (8), T, rT (4 + 4), seed and
     * offset (8 + 8); then the Gumbel upper-bound table */
    static constexpr int ST = WG_ST;
    /* the grouped method (G): per (row, draw) the best group's key (8), its
     * group << 32 | token (8) and x (4); per row also the group noise's key
     * (8); no bound tables */
    static constexpr int ST_BYTES = G ? ST * 20 + N * 48 : ST * 12 + N * 40;
    static constexpr int GB_FLOATS = G ? 0 : FLS_GB_N + FLS_GB2_N; /* up, then the top bucket's up2 */
    /* masks, bias and penalties: per row its cursor into the sorted entries,
     * the next entry's token and whether the row is masked (fls_wg_mods_row) */
    static constexpr int MD_BYTES = N * 12;
    static constexpr int EXTRA = ST_BYTES + GB_FLOATS * 4 + MD_BYTES;
    static constexpr int BUDGET = 227 * 1024 - 1024 - 256 - EXTRA;
    static constexpr int STAGES_FIT = (BUDGET - NS * S_BYTES) / STAGE;
    static constexpr int STAGES = STAGES_FIT > 8 ? 8 : STAGES_FIT;
    static constexpr int ST_OFF = STAGES * STAGE + NS * S_BYTES; /* 8-byte aligned */
    static constexpr int GB_OFF = ST_OFF + ST_BYTES;             /* float up[GB_FLOATS] */
    static constexpr int MD_OFF = GB_OFF + GB_FLOATS * 4;        /* int cur[N], uint32 nxt[N], on[N] */
    static constexpr int BAR_OFF = MD_OFF + MD_BYTES;
    static constexpr int BYTES = 1024 + BAR_OFF + 256;
    static_assert(STAGE % 1024 == 0, "stages must keep the 1024-byte swizzle alignment");
    static_assert(STAGES >= 3, "too few stages");
};

struct fls_wg_args {
    CUtensorMap tw; /* W: dims {D, V}, box {64, 128} */
    CUtensorMap th; /* H: dims {D, B}, box {64, N} */
    int B;
    int64_t V;
    int nvt, nbt, KB;
    int slots;  /* CTAs per batch tile: CTA c takes batch tile c % nbt and vocabulary tiles
                   c / nbt, + slots, ...; its partial winners are entry c / nbt */
    int sample; /* 0: the epilogue warps only hand the buffers back (benchmark: mainloop alone);
                   2: they write the logits and their 64-token tables (fls_launch_wgmma_logits) */
    const fls_row_params *rows;
    fls_ws ws;
    /* the call's masks, bias and penalties (docs/RULES.md), applied to each
     * tile's raw logits in shared memory before the sampler reads them;
     * has_mods 0: none (sample == 2 never has them: the rule family takes
     * cuBLAS logits then) */
    fls_mods_dev mods;
    int has_mods;
    /* sample == 2: logits of row b at L + b * ldl (lvec: 16-byte stores);
     * per 64-token group q of row b, at b * m64 + q, the group's maximum
     * (NaN if any logit is NaN; +inf if any is +inf) and largest finite |l| */
    float *L;
    int64_t ldl;
    int lvec;
    float *g64, *gab;
    int64_t m64;
    /* sample == 2, or NULL: per group q of row b, at 3 (b * m64 + q), the
     * count, mean and sum of squared deviations of its finite tempered
     * logits x = fls_temper(l, rows[b].temperature) (rows then on the device
     * before the launch) */
    double *gmo;
    /* sample == 2: the K best keys per (row, draw) of rows without filters
     * (fls_wg_rule_extra) */
    const fls_row_rule *rule;
    int keys, kdraws;
    uint32_t first_draw;
    const float *gup;
    fls_stair_entry *sel;
    int64_t kst;
};

/* ---- PTX helpers ---- */

__device__ __forceinline__ uint32_t fls_wg_smem(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void fls_mbar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void fls_mbar_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void fls_mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void fls_mbar_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}

__device__ __forceinline__ void fls_tma_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}

/* Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups
 * 1024 bytes apart (SBO), LBO unused (1). The start address may move by
 * 32 bytes per K-step of 16 inside the swizzle row: the swizzle is applied
 * to absolute address bits, and every stage base is 1024-byte aligned. */
__device__ __forceinline__ uint64_t fls_wg_desc(uint32_t saddr)
{
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)64 << 32) |
           ((uint64_t)1 << 62);
}

/* A descriptor whose start address moves by c 16-byte units (no carry out of
 * the 14-bit field: fls_wg_desc's address is below 2^18). */
__device__ __forceinline__ uint64_t fls_wg_desc_add(uint64_t d, uint32_t c)
{
    return (d & 0xFFFFFFFF00000000ull) | (uint64_t)((uint32_t)d + c);
}

__device__ __forceinline__ void fls_wg_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void fls_wg_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int K> __device__ __forceinline__ void fls_wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(K) : "memory");
}

template <int R> __device__ __forceinline__ void fls_wg_pin(float (&d)[R])
{
#pragma unroll
    for (int i = 0; i < R; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

/* The sampling warps' per-CTA shared state (fls_wg_cfg's ST_OFF region). */
struct fls_wg_state {
    unsigned long long *best; /* [bl * nd + j]: the CTA's best packed key of (row, draw) so far */
    float *bx;                /* same index: that token's tempered logit */
    float2 *lse;              /* [bl]: running (max, sum exp(x - max)) of the row's tempered logits */
    float *T, *rT;            /* [bl]: temperature and fl(1 / T) (0: divide exactly) */
    uint64_t *seed, *offset;  /* [bl] */
};

/* The grouped method's per-CTA state (fls_wg_cfg<N, E, true>'s ST_OFF region). */
struct fls_wg_gstate {
    double *gk;            /* [bl * nd + j]: the best group key of (row, draw) so far */
    unsigned long long *w; /* same index: group << 32 | token (~0: none) */
    float *x;              /* same index: the token's tempered logit */
    float2 *lse;           /* [bl] */
    uint64_t *seed, *offset, *gkey;
    float *T, *rT;
};

/*
 * The grouped method on one tile (variants/grouped.h, g = 128 = the tile):
 * a warp takes 32 / LPR rows, LPR lanes per row, each lane 128 / LPR tokens
 * of its row as 16-byte chunks (chunk sub + LPR q), so a row's statistics
 * cost its lanes, not a warp: the max (first index), the smallest finite
 * logit (the overflow test), r = the other tokens' terms expf(x - xm) — one
 * expf per token, x - xm as fl((l - l_max) rT) where fl(1 / T) is normal (a
 * few ulp per term: L within ~1e-7 of the exact log-mass, the order of a
 * float key's rounding), exact division otherwise — and L = xm + log1p(r)
 * in double (no fp32 absorption of a deep tail), computed only where the
 * bound xm + r + G' might beat the (row, draw)'s best. Lane sub of a row
 * draws the group Gumbels of the draws j = sub mod LPR. A group that leads
 * a (row, draw) gets its within-group Gumbel-max (the flat contract's token
 * noise, exact division) from the whole warp, 4 tokens per lane.
 */
template <int LPR>
__device__ __forceinline__ void fls_wg_group_rows(const float *S, int sp, uint64_t v0, int rb, int nb,
                                                  const fls_wg_gstate &st, int nd, uint32_t draw0,
                                                  bool want_lse, int lane, bool &saw_nan, bool &saw_ovf)
{
    constexpr int CH = 32 / LPR; /* 16-byte chunks per lane (and rows per warp) */
    const int sub = lane % LPR, rl = lane / LPR, bl = rb + rl;
    const bool act = bl < nb;
    const float *R = S + (act ? bl : rb) * sp;
    const float T = act ? st.T[bl] : 1.0f, rT = act ? st.rT[bl] : 1.0f;
    const bool noisy = fls_temperature_noisy(T);
    /* pass 1: max (first index), smallest finite, bad values */
    float lm = -INFINITY, ln = INFINITY;
    int im = 0x7fffffff;
    bool bad = false;
#pragma unroll 4
    for (int q = 0; q < CH; q++) {
        const int c = sub + LPR * q;
        const float4 v = *(const float4 *)(R + 4 * c);
        const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int t = 0; t < 4; t++) {
            bad |= fls_bad_logit(e[t]);
            if (e[t] > -INFINITY)
                ln = fminf(ln, e[t]);
            if (e[t] > lm) { /* chunks ascend: the first maximum of this lane */
                lm = e[t];
                im = 4 * c + t;
            }
        }
    }
#pragma unroll
    for (int o = 1; o < LPR; o <<= 1) {
        const float lm2 = __shfl_xor_sync(FLS_FULL_MASK, lm, o);
        const int im2 = __shfl_xor_sync(FLS_FULL_MASK, im, o);
        if (lm2 > lm || (lm2 == lm && im2 < im)) {
            lm = lm2;
            im = im2;
        }
        ln = fminf(ln, __shfl_xor_sync(FLS_FULL_MASK, ln, o));
        bad |= __shfl_xor_sync(FLS_FULL_MASK, (int)bad, o) != 0;
    }
    bool live = act && !bad && lm > -INFINITY; /* a fully masked group has no mass */
    saw_nan |= act && bad;
    float xm = -INFINITY, r = 0.0f;
    if (live) {
        xm = fls_temper(lm, T);
        saw_ovf |= fls_temper_overflows(lm, xm) || fls_temper_overflows(ln, fls_temper(ln, T));
    }
    /* pass 2: the other tokens' terms */
    if (live && noisy) {
#pragma unroll 4
        for (int q = 0; q < CH; q++) {
            const int c = sub + LPR * q;
            const float4 v = *(const float4 *)(R + 4 * c);
            const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const float d =
                    rT != 0.0f ? __fmul_rn(__fsub_rn(e[t], lm), rT) : __fsub_rn(fls_temper(e[t], T), xm);
                r = __fadd_rn(r, 4 * c + t == im ? 0.0f : fls_lsef_exp(d, 0.0f));
            }
        }
    }
#pragma unroll
    for (int o = 1; o < LPR; o <<= 1)
        r = __fadd_rn(r, __shfl_xor_sync(FLS_FULL_MASK, r, o));
    if (live && want_lse && sub == 0) {
        const float2 old = st.lse[bl];
        fls_lsef a = {old.x, old.y};
        fls_lsef_merge(&a, xm, __fadd_rn(1.0f, r));
        st.lse[bl] = make_float2(a.m, a.s);
    }
    /* the group keys of this lane's draws; a bit per draw that this group leads */
    const uint64_t k = v0 / WG_TV;
    unsigned need = 0;
    double L = (double)xm;
    bool have_L = !noisy;
    for (int t = 0; live && t * LPR + sub < nd; t++) {
        const int j = t * LPR + sub;
        const uint32_t d = draw0 + (uint32_t)j;
        const float gj =
            noisy ? fls_gumbel_dev(fls_pair_bits(fls_philox_pair(st.gkey[bl], st.offset[bl], d, k), k))
                  : 0.0f;
        const double kb = st.gk[bl * nd + j];
        const unsigned long long wb = st.w[bl * nd + j];
        /* L <= xm + r: the log1p only where the bound might beat */
        if (wb != ~0ull && (double)xm + (double)r + (double)gj < kb)
            continue;
        if (!have_L) {
            L = (double)xm + log1p((double)r);
            have_L = true;
        }
        const double key = L + (double)gj;
        if (wb == ~0ull || fls_gk_beats(key, (uint32_t)k, kb, (uint32_t)(wb >> 32)))
            need |= 1u << t; /* the owner recomputes the key when it writes the state */
    }
    /* the within-group samples, one (row, draw) at a time, the whole warp */
    const int i0 = 2 * lane, i1 = 64 + 2 * lane;
    unsigned lanes = __ballot_sync(FLS_FULL_MASK, need != 0);
    while (lanes) {
        const int src = __ffs(lanes) - 1;
        const int t = __ffs(__shfl_sync(FLS_FULL_MASK, need, src)) - 1;
        const int brow = rb + src / LPR, j = t * LPR + src % LPR;
        const float Tr = st.T[brow];
        const float *Rr = S + brow * sp;
        const uint32_t d = draw0 + (uint32_t)j;
        unsigned long long best = 0;
        float bx = -INFINITY;
        const int ix[4] = {i0, i0 + 1, i1, i1 + 1};
        if (!fls_temperature_noisy(Tr)) {
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const unsigned long long pk = fls_pack(Rr[ix[q]], (uint32_t)(v0 + (uint64_t)ix[q]));
                if (Rr[ix[q]] > -INFINITY && pk > best) {
                    best = pk;
                    bx = Rr[ix[q]];
                }
            }
        } else {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint4 qb = fls_philox_pair(st.seed[brow], st.offset[brow], d, v0 + (uint64_t)ix[2 * h]);
                const uint64_t b0 = ((uint64_t)qb.y << 32) | qb.x, b1 = ((uint64_t)qb.w << 32) | qb.z;
                (void)fls_exact_key(b0, fls_temper(Rr[ix[2 * h]], Tr), (uint32_t)(v0 + (uint64_t)ix[2 * h]),
                                    best, bx);
                (void)fls_exact_key(b1, fls_temper(Rr[ix[2 * h + 1]], Tr),
                                    (uint32_t)(v0 + (uint64_t)ix[2 * h + 1]), best, bx);
            }
        }
        int wsrc;
        float wx;
        const unsigned long long w = fls_warp_winner(best, bx, wsrc, wx);
        if (lane == src) {
            const double key = noisy ? L + (double)fls_gumbel_dev(fls_pair_bits(
                                               fls_philox_pair(st.gkey[bl], st.offset[bl], d, k), k))
                                     : L;
            st.gk[bl * nd + j] = key;
            st.w[bl * nd + j] = (k << 32) | (unsigned long long)(0xffffffffu - (uint32_t)w);
            st.x[bl * nd + j] = wx;
            need &= need - 1;
        }
        __syncwarp();
        lanes = __ballot_sync(FLS_FULL_MASK, need != 0);
    }
}

/* max with NaN propagation (PTX max.NaN, sm_80+): a NaN tempered logit
 * keeps its pair in the candidate set, where the error is detected. */
__device__ __forceinline__ float fls_fmax_nan(float a, float b)
{
    float d;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

/*
 * The exact keys of the tokens k in the lane's mask cm (bit k: token ix[k]),
 * one per iteration, so that the warp runs the two logs once for the lanes
 * that have a candidate, not once per token slot; returns the largest key
 * (-inf if none). x = y when y is exact, else fl(l / T). The input errors
 * are detected here, off the hot path: a NaN or +inf logit (FLS_ERR_NAN), a
 * finite logit whose l / T overflows to +inf (FLS_ERR_TEMPERATURE; to -inf:
 * fls_wg_sample_rows' range check). Such tokens are always candidates: their
 * y is NaN or +inf, and the skip tests are negated compares (NaN never
 * skips) with fls_fmax_nan for the pair's bound.
 */
__device__ __forceinline__ float fls_wg_exact_keys(unsigned cm, const uint64_t (&bits)[4],
                                                   const float (&l)[4], const float (&y)[4], bool exact_y,
                                                   float T, uint64_t v0, const int (&ix)[4],
                                                   unsigned long long &best, float &bx, bool &saw_nan,
                                                   bool &saw_ovf)
{
    float kmax = -INFINITY;
    while (__any_sync(FLS_FULL_MASK, cm != 0)) {
        if (cm) {
            const int k = __ffs(cm) - 1;
            cm &= cm - 1;
            /* selects, not an indexed load: the arrays stay in registers */
            const uint64_t kb = k == 0 ? bits[0] : (k == 1 ? bits[1] : (k == 2 ? bits[2] : bits[3]));
            const float lk = k == 0 ? l[0] : (k == 1 ? l[1] : (k == 2 ? l[2] : l[3]));
            const float yk = k == 0 ? y[0] : (k == 1 ? y[1] : (k == 2 ? y[2] : y[3]));
            const int ik = k == 0 ? ix[0] : (k == 1 ? ix[1] : (k == 2 ? ix[2] : ix[3]));
            const float x = exact_y ? yk : fls_temper(lk, T);
            saw_nan |= fls_bad_logit(lk);
            saw_ovf |= fls_temper_overflows(lk, x);
            const float key = fls_exact_key(kb, x, (uint32_t)(v0 + (uint64_t)ik), best, bx);
            kmax = fmaxf(kmax, key);
        }
    }
    return kmax;
}

/* The lane's valid tokens of a tile of n (bit k: token ix[k] < n, with
 * ix = 2p, 2p + 1, 64 + 2p, 65 + 2p for lane p). */
__device__ __forceinline__ unsigned fls_wg_lane_valid(int n, int lane)
{
    if (n >= WG_TV)
        return 0xfu;
    const int i0 = 2 * lane, i1 = 64 + 2 * lane;
    return (unsigned)(i0 < n) | (unsigned)(i0 + 1 < n) << 1 | (unsigned)(i1 < n) << 2 |
           (unsigned)(i1 + 1 < n) << 3;
}

/* The tile's part every scheme shares: the lane's logits l, their upper
 * bounds y >= x (x itself where exact_y), the greedy rows' winners (gb, gx)
 * and the running log-sum-exp; the input errors it sees. */
template <int R>
__device__ __forceinline__ void
fls_wg_rows_load(const float *const (&S)[R], unsigned okm, uint64_t v0, const int (&bl)[R],
                 const fls_wg_state &st, bool want_lse, int lane, const int (&ix)[4], float (&l)[R][4],
                 float (&y)[R][4], float (&T)[R], bool (&exact_y)[R], unsigned long long (&gb)[R],
                 float (&gx)[R], bool &saw_nan, bool &saw_ovf)
{
    const int i0 = ix[0], i1 = ix[2];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float2 ra = *(const float2 *)(S[r] + i0), rc = *(const float2 *)(S[r] + i1);
        l[r][0] = ra.x;
        l[r][1] = ra.y;
        l[r][2] = rc.x;
        l[r][3] = rc.y;
        T[r] = st.T[bl[r]];
        const float rT = st.rT[bl[r]];
        exact_y[r] = want_lse || !fls_temperature_noisy(T[r]) || rT == 0.0f;
        if (exact_y[r]) {
#pragma unroll
            for (int k = 0; k < 4; k++)
                y[r][k] = fls_temper(l[r][k], T[r]);
        } else {
#pragma unroll
            for (int k = 0; k < 4; k++)
                y[r][k] = fls_temper_upper(l[r][k], rT);
        }
        /* l / T overflowing to -inf for a finite l leaves y <= -2^126 (or NaN,
         * which stays a candidate); -inf logits land here too (rare path) */
        if (!(fminf(fminf(y[r][0], y[r][1]), fminf(y[r][2], y[r][3])) > -0x1p126f))
#pragma unroll
            for (int k = 0; k < 4; k++)
                if (isfinite(l[r][k]) && !(y[r][k] > -0x1p126f))
                    saw_ovf |= fls_temper_overflows(l[r][k], fls_temper(l[r][k], T[r]));
        gb[r] = 0;
        gx[r] = -INFINITY;
        if (!fls_temperature_noisy(T[r])) {
            /* greedy: the largest logit, lowest index on ties; no noise */
#pragma unroll
            for (int k = 0; k < 4; k++) {
                saw_nan |= fls_bad_logit(l[r][k]);
                const unsigned long long pk = fls_pack(l[r][k], (uint32_t)(v0 + (uint64_t)ix[k]));
                if (((okm >> k) & 1u) && pk > gb[r]) {
                    gb[r] = pk;
                    gx[r] = l[r][k];
                }
            }
        }
    }
    if (want_lse) {
        /* y is x here: the tile's (max, sum exp(x - max)), merged into the row's */
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float mt = fls_warp_maxf(fmaxf(fmaxf(y[r][0], y[r][1]), fmaxf(y[r][2], y[r][3])));
            float s = 0.0f;
            if (mt > -INFINITY) {
#pragma unroll
                for (int k = 0; k < 4; k++)
                    if ((okm >> k) & 1u)
                        s = __fadd_rn(s, fls_lsef_exp(y[r][k], mt));
            }
            s = fls_warp_sumf(s);
            if (lane == 0) {
                const float2 o = st.lse[bl[r]];
                fls_lsef a = {o.x, o.y};
                fls_lsef_merge(&a, mt, s);
                st.lse[bl[r]] = make_float2(a.m, a.s);
            }
        }
    }
}

/* The warp's winners of draw j into the rows' states where they beat them,
 * and their keys to the rows' other CTAs (gthr). */
template <int R>
__device__ __forceinline__ void fls_wg_rows_commit(const unsigned long long (&best)[R], const float (&bx)[R],
                                                   const unsigned long long (&sb)[R], const int (&bl)[R],
                                                   const fls_wg_state &st, int nd, int j,
                                                   unsigned long long *gthr, int row0, unsigned tep, int lane)
{
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (__any_sync(FLS_FULL_MASK, best[r] > sb[r])) {
            int src;
            float wx;
            const unsigned long long w = fls_warp_winner(best[r], bx[r], src, wx);
            __syncwarp(); /* every lane has read sb before lane 0 overwrites it */
            if (lane == 0) {
                st.best[bl[r] * nd + j] = w;
                st.bx[bl[r] * nd + j] = wx;
                if (gthr) /* share the key with the row's other CTAs */
                    atomicMax(gthr + (uint32_t)((row0 + bl[r]) * nd + j),
                              ((unsigned long long)tep << 32) | (w >> 32));
            }
            __syncwarp();
        }
    }
}

/*
 * The exact keys of the lane's tokens in cm under the min-first scheme
 * (em, mm, id: the lane's two groups' minimum exponential, largest noise and
 * minimum token). A token needs its pair's Philox block (kb when have_bits)
 * unless it is its group's minimum; the lanes take one pair at a time together, both tokens
 * of a pair from one block; a token whose bits' bound (up, as the per-token
 * sampler's) puts it below thr needs no logs. Returns the lane's largest
 * key computed.
 */
__device__ __forceinline__ float
fls_wg_mf_keys(unsigned cm, const float (&l)[4], const float (&y)[4], bool exact_y, float T, uint64_t v0,
               const int (&ix)[4], const float (&em)[2], const float (&mm)[2], const uint32_t (&id)[2],
               uint64_t seed, uint64_t offset, uint32_t d, bool have_bits, const uint64_t (&kb)[4],
               const float *up, float thr, unsigned long long &best, float &bx, bool &saw_nan, bool &saw_ovf)
{
    float kmax = -INFINITY;
    while (__any_sync(FLS_FULL_MASK, cm != 0)) {
        if (cm) {
            const int h = (cm & 3u) ? 0 : 1; /* the pair: tokens 2h, 2h + 1 */
            const unsigned pm = (cm >> (2 * h)) & 3u;
            cm &= ~(3u << (2 * h));
            const int i = h ? ix[2] : ix[0]; /* even */
            const uint64_t v = v0 + (uint64_t)i;
            const float emh = h ? em[1] : em[0], mmh = h ? mm[1] : mm[0];
            const uint32_t idh = h ? id[1] : id[0], loc = (uint32_t)i % FLS_MF_GROUP;
            /* the block only if a token of the pair other than the minimum needs it */
            /* selects, not an indexed load: kb stays in registers */
            const uint64_t ka = h ? kb[2] : kb[0], kc = h ? kb[3] : kb[1];
            uint4 q = have_bits
                          ? make_uint4((uint32_t)ka, (uint32_t)(ka >> 32), (uint32_t)kc, (uint32_t)(kc >> 32))
                          : make_uint4(0u, 0u, 0u, 0u);
            if (!have_bits && (((pm & 1u) && loc != idh) || ((pm & 2u) && loc + 1 != idh)))
                q = fls_philox_pair(seed, offset, d, v);
#pragma unroll
            for (int t = 0; t < 2; t++) {
                if (!((pm >> t) & 1u))
                    continue;
                const float lk = h ? (t ? l[3] : l[2]) : (t ? l[1] : l[0]);
                const float yk = h ? (t ? y[3] : y[2]) : (t ? y[1] : y[0]);
                const float x = exact_y ? yk : fls_temper(lk, T);
                saw_nan |= fls_bad_logit(lk);
                saw_ovf |= fls_temper_overflows(lk, x);
                const uint64_t bits = t ? ((uint64_t)q.w << 32) | q.z : ((uint64_t)q.y << 32) | q.x;
                /* the per-token scheme's bound of these bits bounds this noise
                 * too (fls_mf_noise: -log of more than the same E; fls_logf_ is
                 * monotone), so no logs for a token below thr */
                if (loc + (uint32_t)t != idh && __fadd_rn(yk, fminf(mmh, up[bits >> FLS_GB_SHIFT])) < thr)
                    continue;
                const float key = __fadd_rn(x, fls_mf_noise_dev(emh, mmh, idh, loc + (uint32_t)t, bits));
                const unsigned long long pk = fls_pack(key, (uint32_t)(v + (uint64_t)t));
                if (pk > best) {
                    best = pk;
                    bx = x;
                }
                kmax = fmaxf(kmax, key);
            }
        }
    }
    return kmax;
}

/*
 * fls_wg_sample_rows under the min-first scheme (docs/NOISE.md). The tile's
 * tokens 0-63 and 64-127 are two whole groups (v0 is a multiple of 128).
 * The group blocks: with one draw, the caller's per-tile pass (pre: lane
 * 2s + h holds group h of the warp's s-th row of the tile, so one Philox
 * pass serves all the warp's rows); else, per draw, lane q < 2R draws group
 * q % 2 of row q / 2 here. Exact skipping: thr is an exact key of the row
 * and draw (the state's best, another CTA's, or on the row's first tile
 * here the keys of each lane's largest logit and of the groups' minimum
 * tokens), so a lower bound of the winner's key; a token with
 * fl(y + M) < thr (strict; y >= x, every noise of its group <= M) has
 * key <= fl(x + M) <= fl(y + M) < thr and cannot win, not even on a tie.
 * Only the others get their pair's Philox block (the minimum token needs
 * none): on flat rows, about one block per group instead of one per pair.
 */
template <int R>
__device__ __forceinline__ void
fls_wg_sample_rows_mf(const float *const (&S)[R], unsigned okm, uint64_t v0, const int (&bl)[R],
                      const int (&slot)[R], const fls_wg_state &st, int nd, uint32_t draw0, bool want_lse,
                      bool pre, const fls_mf_group &tq, const float *up, unsigned long long *gthr, int row0,
                      unsigned tep, int lane, bool &saw_nan, bool &saw_ovf)
{
    const int i0 = 2 * lane, i1 = 64 + 2 * lane;
    const int ix[4] = {i0, i0 + 1, i1, i1 + 1};
    float l[R][4], y[R][4], T[R];
    bool exact_y[R];
    unsigned long long gb[R];
    float gx[R];
    fls_wg_rows_load<R>(S, okm, v0, bl, st, want_lse, lane, ix, l, y, T, exact_y, gb, gx, saw_nan, saw_ovf);
    bool any_noisy = false;
#pragma unroll
    for (int r = 0; r < R; r++)
        any_noisy |= fls_temperature_noisy(T[r]);
    for (int j = 0; j < nd; j++) {
        const uint32_t d = draw0 + (uint32_t)j;
        unsigned long long sb[R], best[R];
        float bx[R], thr[R], gk[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            sb[r] = st.best[bl[r] * nd + j];
            thr[r] = fls_key_of(sb[r]);
            best[r] = gb[r];
            bx[r] = gx[r];
            const unsigned long long g = gthr ? __ldcg(gthr + (uint32_t)((row0 + bl[r]) * nd + j)) : 0ull;
            gk[r] = gthr && (uint32_t)(g >> 32) == tep ? fls_unord((uint32_t)g) : -INFINITY;
        }
        if (any_noisy) { /* warp-uniform */
            fls_mf_group mq = tq;
            if (!pre) {
                const int q = lane & (2 * R - 1);
                const int blq = (q >> 1) == 0 ? bl[0] : bl[R - 1];
                mq = fls_mf_group_dev(st.seed[blq], st.offset[blq], d, v0 / FLS_MF_GROUP + (uint64_t)(q & 1));
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                float em[2], mm[2];
                uint32_t id[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int src = pre ? 2 * slot[r] + h : 2 * r + h;
                    em[h] = __shfl_sync(FLS_FULL_MASK, mq.emin, src);
                    mm[h] = __shfl_sync(FLS_FULL_MASK, mq.m, src);
                    id[h] = __shfl_sync(FLS_FULL_MASK, mq.idx, src);
                }
                if (!fls_temperature_noisy(T[r]))
                    continue;
                thr[r] = fmaxf(thr[r], gk[r]);
                const uint64_t sr = st.seed[bl[r]], orr = st.offset[bl[r]];
                uint64_t kb[4] = {0, 0, 0, 0};
                if (thr[r] == -INFINITY) {
                    /* the row's first tile here: most tokens are candidates
                     * against a fresh bound, so every pair's block, straight-line
                     * as the per-token sampler; the groups' minimum tokens and
                     * each lane's largest logit first, then the rest against
                     * their bits' bounds */
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const uint4 q = fls_philox_pair(sr, orr, d, v0 + (uint64_t)ix[2 * h]);
                        kb[2 * h] = ((uint64_t)q.y << 32) | q.x;
                        kb[2 * h + 1] = ((uint64_t)q.w << 32) | q.z;
                    }
                    unsigned seed_m = 0;
                    int ks = -1;
                    float ym = -INFINITY;
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        if (((okm >> k) & 1u) && (ks < 0 || y[r][k] > ym)) {
                            ks = k;
                            ym = y[r][k];
                        }
                        seed_m |= (uint32_t)ix[k] % FLS_MF_GROUP == id[k >> 1] ? 1u << k : 0u;
                    }
                    seed_m = (seed_m | (ks >= 0 ? 1u << ks : 0u)) & okm;
                    thr[r] = fls_warp_maxf(fls_wg_mf_keys(seed_m, l[r], y[r], exact_y[r], T[r], v0, ix, em,
                                                          mm, id, sr, orr, d, true, kb, up, -INFINITY,
                                                          best[r], bx[r], saw_nan, saw_ovf));
                    (void)fls_wg_mf_keys(okm & ~seed_m, l[r], y[r], exact_y[r], T[r], v0, ix, em, mm, id, sr,
                                         orr, d, true, kb, up, thr[r], best[r], bx[r], saw_nan, saw_ovf);
                    continue;
                }
                /* branch-free candidate mask: one add and compare per token */
                unsigned cm = 0;
#pragma unroll
                for (int k = 0; k < 4; k++)
                    cm |= !(__fadd_rn(y[r][k], mm[k >> 1]) < thr[r]) ? 1u << k : 0u;
                (void)fls_wg_mf_keys(cm & okm, l[r], y[r], exact_y[r], T[r], v0, ix, em, mm, id, sr, orr, d,
                                     false, kb, up, thr[r], best[r], bx[r], saw_nan, saw_ovf);
            }
        }
        fls_wg_rows_commit<R>(best, bx, sb, bl, st, nd, j, gthr, row0, tep, lane);
    }
}

/*
 * One warp samples R rows bl[r] of one tile: the 128 logits S[r][0..128)
 * (shared memory; tokens v0 + i; bit k of okm: the lane's token k is valid,
 * fls_wg_lane_valid; the invalid ones read -inf) against the CTA's running
 * state of each (row, draw). Lane p holds tokens 2p, 2p + 1, 64 + 2p,
 * 65 + 2p: two Philox blocks per lane and row, straight-line code, so the
 * R x 2 chains interleave.
 *
 * Exact skipping (up = the Gumbel upper-bound table in shared memory; all
 * +inf when skip is off: every key computed): thr = the key of the state's
 * best, an exact key of this row and draw, so a lower bound of the final
 * winner's key (on the row's first tile here, each lane first computes the
 * exact key of its largest logit, and thr is their maximum). A token with
 * fl(y + up[bucket]) < thr (strict), y >= x (fls_temper_upper,
 * fls_gumbel_bound.h), has key <= fl(x + up) <= fl(y + up) < thr: it cannot
 * win, not even on a tie, and neither its division nor its logs are
 * computed. Every key that is computed is the plain loop's key, bit for bit
 * (exact division, fls_exact_key). The hot path is branch-free per token:
 * the candidate mask is built from predicates, the rare cases (greedy rows,
 * logsumexp, a tail tile, a very negative y) are warp-uniform or per-lane
 * branches around it. The warp reduces its lanes only when one of them
 * beats the state, and writes the state back; entries reach global memory
 * once, at the end of the launch.
 */
template <int R>
__device__ __forceinline__ void
fls_wg_sample_rows(const float *const (&S)[R], unsigned okm, uint64_t v0, const int (&bl)[R],
                   const fls_wg_state &st, int nd, uint32_t draw0, bool want_lse, bool skip, const float *up,
                   unsigned long long *gthr, int row0, unsigned tep, int lane, bool &saw_nan, bool &saw_ovf)
{
    const int i0 = 2 * lane, i1 = 64 + 2 * lane;
    const int ix[4] = {i0, i0 + 1, i1, i1 + 1};
    float l[R][4], y[R][4], T[R];
    bool exact_y[R];
    unsigned long long gb[R]; /* greedy rows (T = 0): the winner of every draw */
    float gx[R];
    fls_wg_rows_load<R>(S, okm, v0, bl, st, want_lse, lane, ix, l, y, T, exact_y, gb, gx, saw_nan, saw_ovf);
    /* the pairs' bounds: fl(max y + FLS_GUMBEL_MAX), NaN kept */
    float pb[R][2];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            pb[r][h] = __fadd_rn(fls_fmax_nan(y[r][2 * h], y[r][2 * h + 1]), FLS_GUMBEL_MAX);
    for (int j = 0; j < nd; j++) {
        const uint32_t d = draw0 + (uint32_t)j;
        unsigned long long sb[R], best[R];
        float bx[R], thr[R];
        unsigned needm[R];
        bool any_need = false;
#pragma unroll
        for (int r = 0; r < R; r++) {
            sb[r] = st.best[bl[r] * nd + j];
            thr[r] = skip ? fls_key_of(sb[r]) : -INFINITY;
            best[r] = gb[r];
            bx[r] = gx[r];
            /* pairs that might hold a winner: the Philox block is needed */
            const bool n0 = !(pb[r][0] < thr[r]), n1 = !(pb[r][1] < thr[r]);
            needm[r] = fls_temperature_noisy(T[r]) ? ((n0 ? 0x3u : 0u) | (n1 ? 0xcu : 0u)) & okm : 0u;
            any_need |= needm[r] != 0u;
        }
        /* the other CTAs' thresholds of these rows (loaded here, used after
         * the Philox blocks: the load's latency hides behind them) */
        float gk[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            /* 32-bit index: B x FLS_GTHR_DRAWS < 2^31 */
            const unsigned long long g = gthr ? __ldcg(gthr + (uint32_t)((row0 + bl[r]) * nd + j)) : 0ull;
            gk[r] = gthr && (uint32_t)(g >> 32) == tep ? fls_unord((uint32_t)g) : -INFINITY;
        }
        if (__any_sync(FLS_FULL_MASK, any_need)) {
            /* every Philox block of the R rows, straight-line: R x 2 independent chains */
            uint64_t bits[R][4];
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint64_t s0 = st.seed[bl[r]], o0 = st.offset[bl[r]];
                    const uint4 q = fls_philox_pair(s0, o0, d, v0 + (uint64_t)ix[2 * h]);
                    bits[r][2 * h] = ((uint64_t)q.y << 32) | q.x;
                    bits[r][2 * h + 1] = ((uint64_t)q.w << 32) | q.z;
                }
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (!fls_temperature_noisy(T[r]))
                    continue;
                /* an exact key of this row and draw from any CTA of this pass is a
                 * lower bound of the winner's key too */
                thr[r] = fmaxf(thr[r], gk[r]);
                unsigned seed_m = 0;
                if (skip && thr[r] == -INFINITY) {
                    /* the row's first tile here: each lane's largest logit first */
                    int ks = -1;
                    float ym = -INFINITY;
#pragma unroll
                    for (int k = 0; k < 4; k++)
                        if (((okm >> k) & 1u) && (ks < 0 || y[r][k] > ym)) {
                            ks = k;
                            ym = y[r][k];
                        }
                    seed_m = ks >= 0 ? 1u << ks : 0u;
                    thr[r] = fls_warp_maxf(fls_wg_exact_keys(seed_m, bits[r], l[r], y[r], exact_y[r], T[r],
                                                             v0, ix, best[r], bx[r], saw_nan, saw_ovf));
                }
                /* branch-free candidate mask: one table load per token */
                unsigned cm = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const float u = up[(uint32_t)(bits[r][k] >> 32) >> (32 - FLS_GB_BITS)];
                    cm |= !(__fadd_rn(y[r][k], u) < thr[r]) ? 1u << k : 0u;
                }
                cm &= needm[r] & ~seed_m;
                if (cm) {
                    /* rare (per lane): a candidate of the top bucket against its
                     * sub-bucket's bound, up + FLS_GB_N (the same argument) */
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        const uint32_t hi = (uint32_t)(bits[r][k] >> 32);
                        if (((cm >> k) & 1u) && (hi >> (32 - FLS_GB_BITS)) == FLS_GB_N - 1 &&
                            __fadd_rn(y[r][k],
                                      up[FLS_GB_N + ((hi >> (FLS_GB2_SHIFT - 32)) & (FLS_GB2_N - 1))]) <
                                thr[r])
                            cm &= ~(1u << k);
                    }
                }
                (void)fls_wg_exact_keys(cm, bits[r], l[r], y[r], exact_y[r], T[r], v0, ix, best[r], bx[r],
                                        saw_nan, saw_ovf);
            }
        }
        fls_wg_rows_commit<R>(best, bx, sb, bl, st, nd, j, gthr, row0, tep, lane);
    }
}

/* The moments of one 64-token group's finite tempered logits (16 lanes, 4
 * tokens e each; m: the group's largest logit, NaN-propagating) into
 * o[0..3) = count, mean, sum of squared deviations (the half-warp's lane 0
 * writes). As the statistics pass does for 8 tokens (kernels/rules.cu,
 * fls_fstats8): the deviations from the group's largest x, a data point,
 * summed in double in a fixed tree; a group whose largest x is not finite
 * (all -inf, or an error of the row) counts nothing. */
__device__ __forceinline__ void fls_wg_group_moments(const float (&e)[4], float m, float T, int lane,
                                                     double *o)
{
    const float xm = fls_temper(m, T);
    const bool fin = xm > -INFINITY && xm < INFINITY;
    double n = 0.0, s1 = 0.0, s2 = 0.0;
#pragma unroll
    for (int t = 0; t < 4; t++) {
        const float x = fls_temper(e[t], T);
        if (fin && x > -INFINITY) {
            const double dd = (double)x - (double)xm;
            n += 1.0;
            s1 += dd;
            s2 += dd * dd;
        }
    }
#pragma unroll
    for (int o2 = 8; o2 > 0; o2 >>= 1) {
        n += __shfl_xor_sync(FLS_FULL_MASK, n, o2);
        s1 += __shfl_xor_sync(FLS_FULL_MASK, s1, o2);
        s2 += __shfl_xor_sync(FLS_FULL_MASK, s2, o2);
    }
    if ((lane & 15) == 0) {
        const double q = n > 0.0 ? s1 / n : 0.0;
        o[0] = n;
        o[1] = n > 0.0 ? (double)xm + q : 0.0;
        o[2] = n > 0.0 ? fmax(s2 - s1 * q, 0.0) : 0.0;
    }
}

/* Row b's tokens of one tile into its (row, draw) lists l (ordered keys,
 * best first) and lx (their x): the warp's 128 tokens, 4 a lane (e: the
 * lane's logits, -inf past V; v: its first token). A key enters when it is
 * at least the list's K-th (tau) and the K-th largest of the lanes' best
 * keys of the tile (K lanes hold a key that large); the log of a token's
 * noise is skipped where the bound of its bucket shows its key below tau
 * (as the select pass does). The keys and their order are the select
 * pass's: fls_frank of (key, token). */
__device__ __noinline__ void fls_wg_row_keys(const fls_wg_args &a, float4 e, int64_t b, uint64_t v, int lane,
                                             unsigned long long *l, float *lx)
{
    const fls_row_params rp = a.rows[b];
    const int Kb = (int)a.rule[b].K;
    const float T = rp.temperature;
    const bool noisy = fls_temperature_noisy(T);
    const float x[4] = {fls_temper(e.x, T), fls_temper(e.y, T), fls_temper(e.z, T), fls_temper(e.w, T)};
    const bool any = x[0] > -INFINITY || x[1] > -INFINITY || x[2] > -INFINITY || x[3] > -INFINITY;
    for (int j = 0; j < a.kdraws; j++) {
        unsigned long long *lj = l + j * FLS_WG_KMAX;
        float *xj = lx + j * FLS_WG_KMAX;
        const float tau = lj[Kb - 1] ? fls_frank_x(lj[Kb - 1]) : -INFINITY;
        uint4 r[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
        if (noisy && any) {
            r[0] = fls_philox_pair(rp.seed, rp.offset, a.first_draw + (uint32_t)j, v);
            r[1] = fls_philox_pair(rp.seed, rp.offset, a.first_draw + (uint32_t)j, v + 2);
        }
        float key[4], kb = -INFINITY;
#pragma unroll
        for (int t = 0; t < 4; t++) {
            key[t] = -INFINITY; /* no key: past V, masked, or below tau by its bound */
            if (!(x[t] > -INFINITY))
                continue;
            if (noisy) {
                const uint64_t bits = fls_pair_bits(r[t >> 1], v + t);
                if (a.gup && __fadd_rn(x[t], a.gup[bits >> FLS_GB_SHIFT]) < tau)
                    continue; /* fl(x + g) <= fl(x + up[bucket]) < tau */
                key[t] = fls_temperature_key(x[t], fls_gumbel_dev(bits), T);
            } else {
                key[t] = x[t];
            }
            kb = fmaxf(kb, key[t]);
        }
        const float thr = fmaxf(tau, fls_warp_kth_maxf(kb, Kb));
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const bool c = key[t] > -INFINITY && key[t] >= thr;
            const unsigned long long u = c ? fls_frank(key[t], (int64_t)(v + t)) : 0ull;
            for (unsigned m = __ballot_sync(FLS_FULL_MASK, c); m; m &= m - 1) {
                const int src = __ffs(m) - 1;
                const unsigned long long us = __shfl_sync(FLS_FULL_MASK, u, src);
                const float xs = __shfl_sync(FLS_FULL_MASK, x[t], src);
                if (lane == 0 && us > lj[Kb - 1]) {
                    int q = Kb - 1;
                    for (; q > 0 && us > lj[q - 1]; q--) {
                        lj[q] = lj[q - 1];
                        xj[q] = xj[q - 1];
                    }
                    lj[q] = us;
                    xj[q] = xs;
                }
            }
        }
        __syncwarp();
    }
}

static_assert(WG_TV == 128, "fls_mods_order counts tiles of 128 tokens");

/* Whether entry token tok lies in a tile of the CTA of slot `slot`. */
__device__ __forceinline__ bool fls_wg_mods_mine(uint32_t tok, const fls_mods_dev &m, int slot)
{
    return (int64_t)((tok >> 7) % (uint64_t)m.slots) == slot;
}

/* The rows' mods state in shared memory at md (fls_wg_cfg::MD_OFF), for
 * rows bt * N + i, i < nb, of the CTA of slot `slot`; by the sampling warps
 * (thread et of them), before their barrier. The entries are in the
 * launch's visiting order (m.slots = the launch's slots): the CTA's own
 * start at the first whose place is at least slot * kmax tiles, and follow
 * one another in the order its tiles come. */
template <int N>
__device__ __forceinline__ void fls_wg_mods_init(const fls_mods_dev &m, unsigned char *md, int64_t r0, int nb,
                                                 int slot, int et, int nthreads)
{
    int *cur = (int *)md;
    uint32_t *nxt = (uint32_t *)(cur + N), *on = nxt + N;
    for (int i = et; i < nb; i += nthreads) {
        const int64_t b = r0 + i;
        int lo = 0;
        uint32_t first = 0xffffffffu;
        if (m.per) {
            const fls_mod_dev *e = m.e + b * m.per;
            const uint64_t start = (uint64_t)slot * (uint64_t)m.kmax << 7;
            int hi = m.n[b];
            while (lo < hi) {
                const int mid = (lo + hi) >> 1;
                if (fls_mods_order(e[mid].token, m.slots, m.kmax) < start)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (lo < m.n[b] && fls_wg_mods_mine(e[lo].token, m, slot))
                first = e[lo].token;
        }
        cur[i] = lo;
        nxt[i] = first;
        on[i] = fls_mods_row_mask(m, b) != NULL;
    }
}

/* Row b's masks, bias and penalties on its raw logits of one tile in shared
 * memory (s[i]: token v0 + i for i < n, -inf past V), before anything reads
 * them: its listed tokens of the tile changed (fls_mod_logit), then the
 * disallowed ones -inf. Only the row's owner warp calls it (i: the row's
 * place in the tile), tile after tile of the CTA (slot) in increasing v0;
 * the row's entries of those tiles come in that order (fls_wg_mods_init),
 * so its cursor only moves forward and a row whose next entry lies past
 * the tile costs one shared-memory read. */
template <int N>
__device__ __forceinline__ void fls_wg_mods_row(const fls_mods_dev &m, unsigned char *md, int i, float *s,
                                                int64_t b, uint64_t v0, int n, int slot, int lane)
{
    int *cur = (int *)md;
    uint32_t *nxt = (uint32_t *)(cur + N), *on = nxt + N;
    const uint64_t vend = v0 + WG_TV;
    const uint32_t *mw = on[i] ? m.mask + b * m.mask_ld : NULL;
    uint32_t w = 0;
    if (mw && 4 * lane < n)
        w = __ldg(mw + ((v0 + 4u * (uint32_t)lane) >> 5)) >> ((4 * lane) & 31); /* v0 % 32 == 0 */
    if ((uint64_t)nxt[i] < vend) {
        const fls_mod_dev *e = m.e + b * m.per;
        const int ne = m.n[b];
        const float *pen = m.pen + 3 * b;
        int c = cur[i];
        uint32_t nx = 0xffffffffu;
        for (;;) {
            fls_mod_dev d;
            d.token = 0xffffffffu;
            if (c + lane < ne)
                d = e[c + lane];
            const bool mine = c + lane < ne && fls_wg_mods_mine(d.token, m, slot);
            /* in the visiting order the CTA's entries of this tile (all at or
             * past v0: its earlier tiles took theirs) form a prefix */
            const bool here = mine && (uint64_t)d.token < vend;
            if (here && d.token >= v0)
                s[d.token - v0] = fls_mod_logit(d, s[d.token - v0], pen);
            const int k = __popc(__ballot_sync(FLS_FULL_MASK, here));
            c += k;
            if (k < 32) {
                nx = __shfl_sync(FLS_FULL_MASK, mine ? d.token : 0xffffffffu, k);
                break;
            }
        }
        __syncwarp();
        if (lane == 0) {
            cur[i] = c;
            nxt[i] = nx;
        }
    }
    if (mw && 4 * lane < n) {
        /* bits of tokens past V are ignored: their logits are -inf already */
        float4 *q = (float4 *)(s + 4 * lane);
        float4 x = *q;
        x.x = (w & 1u) ? x.x : -INFINITY;
        x.y = (w & 2u) ? x.y : -INFINITY;
        x.z = (w & 4u) ? x.z : -INFINITY;
        x.w = (w & 8u) ? x.w : -INFINITY;
        *q = x;
    }
    __syncwarp();
}

template <int N, int E, bool BF16, bool G>
__global__ void __launch_bounds__(fls_wg_cfg<N, E, G>::NTHREADS, 1)
    fls_fused_wgmma_kernel(const __grid_constant__ fls_wg_args a)
{
    typedef fls_wg_cfg<N, E, G> C;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t raw = fls_wg_smem(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    unsigned char *smem = smem_raw + (base - raw);
    const uint32_t bar0 = base + C::BAR_OFF;
    /* barriers: full[STAGES], empty[STAGES], sfull[NS], sfree[NS] (8 bytes each) */
#define FULL(s)  (bar0 + 8u * (uint32_t)(s))
#define EMPTY(s) (bar0 + 8u * (uint32_t)(C::STAGES + (s)))
#define SFULL(i) (bar0 + 8u * (uint32_t)(2 * C::STAGES + (i)))
#define SFREE(i) (bar0 + 8u * (uint32_t)(2 * C::STAGES + C::NS + (i)))
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    if (tid == 0) {
        for (int s = 0; s < C::STAGES; s++) {
            fls_mbar_init(FULL(s), 1);
            fls_mbar_init(EMPTY(s), 4);
        }
        for (int i = 0; i < C::NS; i++) {
            fls_mbar_init(SFULL(i), 128);
            fls_mbar_init(SFREE(i), 32 * C::E);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();
    const int bt = (int)blockIdx.x % a.nbt, slot = (int)blockIdx.x / a.nbt;

    if (warp < 4) {
        /* ---- the MMA warpgroup ---- */
        if (C::REG_SPLIT)
            asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(C::REG_MMA) : "memory");
        float acc0[N / 2], acc1[N / 2];
        int stage = 0, prev = -1, it = 0;
        uint32_t phase = 0;
        for (int vt = slot; vt < a.nvt; vt += a.slots, it++) {
#pragma unroll
            for (int i = 0; i < N / 2; i++)
                acc0[i] = acc1[i] = 0.0f;
            for (int kb = 0; kb < a.KB; kb++) {
                fls_mbar_wait(FULL(stage), phase);
                __syncwarp();
                const uint32_t ws_ = base + (uint32_t)(stage * C::STAGE);
                const uint32_t hs_ = ws_ + C::W_BYTES;
                fls_wg_pin(acc0);
                fls_wg_pin(acc1);
                fls_wg_fence();
                /* the stage's descriptors once; a K-step of 16 moves the start
                 * address by 32 bytes (2 in the descriptor's 16-byte units), the
                 * second 64-row half by 8192 (512): additions to the low word,
                 * which never carry (shared addresses < 2^18) */
                const uint64_t dw = fls_wg_desc(ws_), dh = fls_wg_desc(hs_);
#pragma unroll
                for (int ks = 0; ks < WG_BK / 16; ks++) {
                    const uint64_t db = fls_wg_desc_add(dh, 2u * ks);
                    fls_wgmma_op<N, BF16>::run(acc0, fls_wg_desc_add(dw, 2u * ks), db);
                    fls_wgmma_op<N, BF16>::run(acc1, fls_wg_desc_add(dw, 512u + 2u * ks), db);
                }
                fls_wg_commit();
                fls_wg_wait<1>();
                fls_wg_pin(acc0);
                fls_wg_pin(acc1);
                if (prev >= 0 && lane == 0)
                    fls_mbar_arrive(EMPTY(prev));
                prev = stage;
                if (++stage == C::STAGES) {
                    stage = 0;
                    phase ^= 1u;
                }
            }
            fls_wg_wait<0>();
            fls_wg_pin(acc0);
            fls_wg_pin(acc1);
            if (prev >= 0 && lane == 0)
                fls_mbar_arrive(EMPTY(prev));
            prev = -1;
            /* hand the tile's logits to the epilogue warps */
            const int buf = it % C::NS;
            fls_mbar_wait(SFREE(buf), ((uint32_t)(it / C::NS) & 1u) ^ 1u);
            float *S = (float *)(smem + C::STAGES * C::STAGE + buf * C::S_BYTES);
            const int row = warp * 16 + (lane >> 2);
#pragma unroll
            for (int j = 0; j < N / 8; j++) {
                const int col = j * 8 + 2 * (lane & 3);
                S[col * C::SP + row] = acc0[4 * j];
                S[(col + 1) * C::SP + row] = acc0[4 * j + 1];
                S[col * C::SP + row + 8] = acc0[4 * j + 2];
                S[(col + 1) * C::SP + row + 8] = acc0[4 * j + 3];
                S[col * C::SP + row + 64] = acc1[4 * j];
                S[(col + 1) * C::SP + row + 64] = acc1[4 * j + 1];
                S[col * C::SP + row + 72] = acc1[4 * j + 2];
                S[(col + 1) * C::SP + row + 72] = acc1[4 * j + 3];
            }
            fls_mbar_arrive(SFULL(buf));
        }
    } else if (warp == 4) {
        /* ---- the producer ---- */
        if (C::REG_SPLIT)
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(C::REG_REST) : "memory");
        if (lane == 0) {
            asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&a.tw) : "memory");
            asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&a.th) : "memory");
            int stage = 0;
            uint32_t phase = 0;
            for (int vt = slot; vt < a.nvt; vt += a.slots) {
                for (int kb = 0; kb < a.KB; kb++) {
                    fls_mbar_wait(EMPTY(stage), phase ^ 1u);
                    const uint32_t dst = base + (uint32_t)(stage * C::STAGE);
                    fls_mbar_expect_tx(FULL(stage), C::STAGE);
                    fls_tma_2d(dst, &a.tw, kb * WG_BK, vt * WG_TV, FULL(stage));
                    fls_tma_2d(dst + C::W_BYTES, &a.th, kb * WG_BK, bt * N, FULL(stage));
                    if (++stage == C::STAGES) {
                        stage = 0;
                        phase ^= 1u;
                    }
                }
            }
        }
    } else {
        /* ---- the sampling warps ---- */
        if (C::REG_SPLIT)
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(C::REG_REST) : "memory");
        const int ew = warp - 5, et = tid - 160;
        if (a.sample == 2) {
            /* ---- the logits and their 64-token tables (the rule family's
             * statistics: kernels/rules.cu's row kernel folds the tables) ----
             * a warp takes rows ew, ew + E, ...; lane p holds tokens 4p .. 4p + 3
             * (lanes 0-15: the tile's first group of 64, 16-31: the second) */
            const int nr = min(N, a.B - bt * N);
            /* keys: per (row, draw) of the warp's rows a best-first list of
             * FLS_WG_KMAX ordered keys (fls_frank; 0: empty) and their x */
            unsigned long long *kl = (unsigned long long *)(smem + C::ST_OFF);
            float *kx = (float *)(kl + (size_t)N * a.kdraws * FLS_WG_KMAX);
            if (a.keys) {
                for (int bl = ew; bl < nr; bl += C::E)
                    for (int q = lane; q < a.kdraws * FLS_WG_KMAX; q += 32) {
                        kl[(size_t)bl * a.kdraws * FLS_WG_KMAX + q] = 0ull;
                        kx[(size_t)bl * a.kdraws * FLS_WG_KMAX + q] = -INFINITY;
                    }
                __syncwarp();
            }
            int it = 0;
            for (int vt = slot; vt < a.nvt; vt += a.slots, it++) {
                const int buf = it % C::NS;
                fls_mbar_wait(SFULL(buf), (uint32_t)(it / C::NS) & 1u);
                __syncwarp();
                const float *S = (const float *)(smem + C::STAGES * C::STAGE + buf * C::S_BYTES);
                const int64_t v0 = (int64_t)vt * WG_TV;
                const int n = (int)min((int64_t)WG_TV, a.V - v0), i = 4 * lane;
                for (int bl = ew; bl < nr; bl += C::E) {
                    const float4 q = *(const float4 *)(S + bl * C::SP + i);
                    float e[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
                    for (int t = 0; t < 4; t++)
                        e[t] = i + t < n ? e[t] : -INFINITY; /* past V: never a token */
                    const int64_t b = (int64_t)bt * N + bl;
                    float *dst = a.L + b * a.ldl + v0 + i;
                    if (a.lvec && i + 3 < n) {
                        __stcg((float4 *)dst, make_float4(e[0], e[1], e[2], e[3]));
                    } else {
#pragma unroll
                        for (int t = 0; t < 4; t++)
                            if (i + t < n)
                                dst[t] = e[t];
                    }
                    float m = fls_fmax_nan(fls_fmax_nan(e[0], e[1]), fls_fmax_nan(e[2], e[3])), am = 0.0f;
#pragma unroll
                    for (int t = 0; t < 4; t++) {
                        const float ab = fabsf(e[t]);
                        am = fmaxf(am, ab < INFINITY ? ab : 0.0f);
                    }
#pragma unroll
                    for (int o = 8; o > 0; o >>= 1) {
                        m = fls_fmax_nan(m, __shfl_xor_sync(FLS_FULL_MASK, m, o));
                        am = fmaxf(am, __shfl_xor_sync(FLS_FULL_MASK, am, o));
                    }
                    const int64_t g = b * a.m64 + 2 * (int64_t)vt + (lane >> 4);
                    if ((lane & 15) == 0) {
                        a.g64[g] = m;
                        a.gab[g] = am;
                    }
                    if (a.gmo)
                        fls_wg_group_moments(e, m, a.rows[b].temperature, lane, a.gmo + 3 * g);
                    if (a.keys)
                        fls_wg_row_keys(a, make_float4(e[0], e[1], e[2], e[3]), b, (uint64_t)(v0 + i), lane,
                                        kl + (size_t)bl * a.kdraws * FLS_WG_KMAX,
                                        kx + (size_t)bl * a.kdraws * FLS_WG_KMAX);
                }
                __syncwarp();
                fls_mbar_arrive(SFREE(buf));
            }
            if (a.keys) {
                /* the CTA's lists: entry slot of each (row, draw) */
                for (int bl = ew; bl < nr; bl += C::E) {
                    const int64_t b = (int64_t)bt * N + bl;
                    const int Kb = (int)a.rule[b].K;
                    for (int q = lane; q < a.kdraws * FLS_WG_KMAX; q += 32) {
                        const int j = q / FLS_WG_KMAX, r = q % FLS_WG_KMAX;
                        if (r >= Kb)
                            continue;
                        const unsigned long long u = kl[(size_t)bl * a.kdraws * FLS_WG_KMAX + q];
                        fls_stair_entry o;
                        o.key = u ? fls_frank_x(u) : -INFINITY;
                        o.x = u ? kx[(size_t)bl * a.kdraws * FLS_WG_KMAX + q] : -INFINITY;
                        o.v = u ? (int64_t)(0xffffffffu - (uint32_t)u) : -1;
                        a.sel[((b * a.kdraws + j) * a.slots + slot) * a.kst + r] = o;
                    }
                }
            }
            return;
        }
        const int nb = a.sample ? min(N, a.B - bt * N) : 0;
        const int nd = a.ws.nd;
        unsigned char *sp = smem + C::ST_OFF;
        if constexpr (G) {
            /* ---- the grouped method ---- */
            fls_wg_gstate gs;
            gs.gk = (double *)sp;
            gs.w = (unsigned long long *)(sp + C::ST * 8);
            gs.x = (float *)(sp + C::ST * 16);
            gs.lse = (float2 *)(sp + C::ST * 20);
            gs.seed = (uint64_t *)(gs.lse + N);
            gs.offset = gs.seed + N;
            gs.gkey = gs.offset + N;
            gs.T = (float *)(gs.gkey + N);
            gs.rT = gs.T + N;
            for (int i = et; i < nb * nd; i += 32 * C::E) {
                gs.gk[i] = -INFINITY;
                gs.w[i] = ~0ull;
                gs.x[i] = -INFINITY;
            }
            for (int i = et; i < nb; i += 32 * C::E) {
                const fls_row_params rp = a.rows[bt * N + i];
                gs.T[i] = rp.temperature;
                gs.rT[i] = fls_temper_rcp(rp.temperature);
                gs.seed[i] = rp.seed;
                gs.offset[i] = rp.offset;
                gs.gkey[i] = fls_group_key(rp.seed);
                gs.lse[i] = make_float2(-INFINITY, 0.0f);
            }
            if (a.has_mods)
                fls_wg_mods_init<N>(a.mods, smem + C::MD_OFF, (int64_t)bt * N, nb, slot, et, 32 * C::E);
            asm volatile("bar.sync 1, %0;\n" ::"n"(32 * C::E) : "memory");
            bool saw_nan = false, saw_ovf = false;
            int it = 0;
            for (int vt = slot; vt < a.nvt; vt += a.slots, it++) {
                const int buf = it % C::NS;
                fls_mbar_wait(SFULL(buf), (uint32_t)(it / C::NS) & 1u);
                __syncwarp();
                float *S = (float *)(smem + C::STAGES * C::STAGE + buf * C::S_BYTES);
                const int64_t v0 = (int64_t)vt * WG_TV;
                const int n = (int)min((int64_t)WG_TV, a.V - v0);
                constexpr int RPW0 = N >= 128 ? 16 : (N >= 64 ? 8 : 4); /* this warp's rows (RPW) */
                if (n < WG_TV) {
                    /* the tail tile: this warp's rows read -inf past V */
                    for (int rb = ew * RPW0; rb < nb; rb += C::E * RPW0)
                        for (int bl = rb; bl < rb + RPW0 && bl < nb; bl++)
                            for (int i = n + lane; i < WG_TV; i += 32)
                                S[bl * C::SP + i] = -INFINITY;
                    __syncwarp();
                }
                if (a.has_mods)
                    for (int rb = ew * RPW0; rb < nb; rb += C::E * RPW0)
                        for (int bl = rb; bl < rb + RPW0 && bl < nb; bl++)
                            fls_wg_mods_row<N>(a.mods, smem + C::MD_OFF, bl, S + bl * C::SP,
                                               (int64_t)bt * N + bl, (uint64_t)v0, n, slot, lane);
                constexpr int LPR = N >= 128 ? 2 : (N >= 64 ? 4 : 8), RPW = 32 / LPR;
                static_assert(RPW == RPW0, "the tail and the mods take the sampler's rows");
                for (int rb = ew * RPW; rb < nb; rb += C::E * RPW)
                    fls_wg_group_rows<LPR>(S, C::SP, (uint64_t)v0, rb, nb, gs, nd, fls_noise_draw(a.ws, 0),
                                           a.ws.want_lse != 0, lane, saw_nan, saw_ovf);
                __syncwarp();
                fls_mbar_arrive(SFREE(buf));
            }
            /* entries by the same lanes that own the state (no barrier needed) */
            {
                constexpr int LPR = N >= 128 ? 2 : (N >= 64 ? 4 : 8), RPW = 32 / LPR;
                const int sub = lane % LPR;
                for (int rb = ew * RPW; rb < nb; rb += C::E * RPW) {
                    const int bl = rb + lane / LPR;
                    if (bl >= nb)
                        continue;
                    const int b = bt * N + bl;
                    for (int j = sub; j < nd; j += LPR) {
                        const int64_t idx = ((int64_t)b * nd + j) * a.ws.nent + slot;
                        a.ws.gk[idx] = gs.gk[bl * nd + j];
                        a.ws.best[idx] = gs.w[bl * nd + j];
                        a.ws.xw[idx] = gs.x[bl * nd + j];
                        fls_key_marks(a.ws, b, j, gs.w[bl * nd + j] == ~0ull ? -INFINITY : gs.gk[bl * nd + j],
                                      fls_temperature_noisy(gs.T[bl]));
                    }
                    if (sub == 0) {
                        if (gs.w[bl * nd] != ~0ull)
                            a.ws.finite[b] = a.ws.epoch;
                        if (a.ws.want_lse) {
                            a.ws.m[(int64_t)b * a.ws.nent + slot] = gs.lse[bl].x;
                            a.ws.s[(int64_t)b * a.ws.nent + slot] = gs.lse[bl].y;
                        }
                    }
                }
            }
            if (__any_sync(FLS_FULL_MASK, saw_nan) && lane == 0)
                *a.ws.nanflag = a.ws.epoch;
            if (__any_sync(FLS_FULL_MASK, saw_ovf) && lane == 0)
                *a.ws.tempflag = a.ws.epoch;
            return;
        }
        fls_wg_state st;
        st.best = (unsigned long long *)sp;
        st.bx = (float *)(sp + C::ST * 8);
        st.lse = (float2 *)(sp + C::ST * 12);
        st.seed = (uint64_t *)(sp + C::ST * 12 + N * 8);
        st.offset = st.seed + N;
        st.T = (float *)(st.offset + N);
        st.rT = st.T + N;
        /* the Gumbel upper-bound table; all +inf without skipping (every key computed) */
        const bool skip = a.ws.gup != NULL;
        const bool mf = a.ws.noise == FLS_NOISE_MIN_FIRST; /* exact skipping by the groups' bounds */
        float *up = (float *)(smem + C::GB_OFF);
        for (int i = et; i < nb * nd; i += 32 * C::E) {
            st.best[i] = 0;
            st.bx[i] = -INFINITY;
        }
        for (int i = et; i < nb; i += 32 * C::E) {
            const fls_row_params rp = a.rows[bt * N + i];
            const float rT = fls_temper_rcp(rp.temperature); /* 0: divide exactly */
            st.T[i] = rp.temperature;
            st.rT[i] = rT;
            st.seed[i] = rp.seed;
            st.offset[i] = rp.offset;
            st.lse[i] = make_float2(-INFINITY, 0.0f);
        }
        for (int i = et; i < C::GB_FLOATS; i += 32 * C::E)
            up[i] = !skip ? INFINITY : i < FLS_GB_N ? a.ws.gup[i] : a.ws.gup2[i - FLS_GB_N];
        if (a.has_mods)
            fls_wg_mods_init<N>(a.mods, smem + C::MD_OFF, (int64_t)bt * N, nb, slot, et, 32 * C::E);
        asm volatile("bar.sync 1, %0;\n" ::"n"(32 * C::E) : "memory");
        bool saw_nan = false, saw_ovf = false;
        /* one copy of the tile loop per noise scheme (their registers never
         * live together) */
        auto tiles = [&](auto mf_tag) {
            constexpr bool MF = decltype(mf_tag)::value;
            int it = 0;
            for (int vt = slot; vt < a.nvt; vt += a.slots, it++) {
                const int buf = it % C::NS;
                fls_mbar_wait(SFULL(buf), (uint32_t)(it / C::NS) & 1u);
                __syncwarp();
                float *S = (float *)(smem + C::STAGES * C::STAGE + buf * C::S_BYTES);
                const int64_t v0 = (int64_t)vt * WG_TV;
                const int n = (int)min((int64_t)WG_TV, a.V - v0);
                const unsigned okm = fls_wg_lane_valid(n, lane);
                if (n < WG_TV) {
                    /* the tail tile: the columns past V (zero-filled by the copy engine)
                     * read -inf in this warp's rows, so the sampler needs no mask on
                     * its loads (the MMA rewrites every column of the next tile) */
                    for (int bl = ew; bl < nb; bl += C::E)
                        for (int i = n + lane; i < WG_TV; i += 32)
                            S[bl * C::SP + i] = -INFINITY;
                    __syncwarp();
                }
                if (a.has_mods)
                    for (int bl = ew; bl < nb; bl += C::E)
                        fls_wg_mods_row<N>(a.mods, smem + C::MD_OFF, bl, S + bl * C::SP, (int64_t)bt * N + bl,
                                           (uint64_t)v0, n, slot, lane);
                /* the min-first scheme with one draw: the group blocks of all the
                 * warp's rows of the tile in one pass (lane 2s + h: group h of row
                 * ew + s E; where a warp has at most 16 rows) */
                const bool pre = MF && nd == 1 && (N + C::E - 1) / C::E <= 16;
                fls_mf_group tq = {0.0f, 0.0f, 0u};
                if (pre) {
                    const int blq = ew + (lane >> 1) * C::E;
                    if (blq < nb)
                        tq = fls_mf_group_dev(st.seed[blq], st.offset[blq], fls_noise_draw(a.ws, 0),
                                              (uint64_t)v0 / FLS_MF_GROUP + (uint64_t)(lane & 1));
                }
                /* rows ew, ew + E, ...: one owner warp per row for the whole
                 * launch (it alone touches the row's state), two rows per call */
                /* the min-first sampler one row a call: its first tile holds a
                 * row's four token blocks in registers */
                constexpr int RC = MF ? 1 : C::R;
                for (int bl = ew; bl < nb; bl += RC * C::E) {
                    if (RC == 2 && bl + C::E < nb) {
                        const int bb[2] = {bl, bl + C::E};
                        const float *const ss[2] = {S + bl * C::SP, S + (bl + C::E) * C::SP};
                        fls_wg_sample_rows<2>(ss, okm, (uint64_t)v0, bb, st, nd, fls_noise_draw(a.ws, 0),
                                              a.ws.want_lse != 0, skip, up, a.ws.gthr, bt * N, a.ws.tepoch,
                                              lane, saw_nan, saw_ovf);
                    } else {
                        const int bb[1] = {bl};
                        const float *const ss[1] = {S + bl * C::SP};
                        const int sl[1] = {(bl - ew) / C::E};
                        if constexpr (MF)
                            fls_wg_sample_rows_mf<1>(ss, okm, (uint64_t)v0, bb, sl, st, nd,
                                                     fls_noise_draw(a.ws, 0), a.ws.want_lse != 0, pre, tq, up,
                                                     a.ws.gthr, bt * N, a.ws.tepoch, lane, saw_nan, saw_ovf);
                        else
                            fls_wg_sample_rows<1>(ss, okm, (uint64_t)v0, bb, st, nd, fls_noise_draw(a.ws, 0),
                                                  a.ws.want_lse != 0, skip, up, a.ws.gthr, bt * N,
                                                  a.ws.tepoch, lane, saw_nan, saw_ovf);
                    }
                }
                __syncwarp();
                fls_mbar_arrive(SFREE(buf));
            }
        };
        if (mf)
            tiles(std::true_type{});
        else
            tiles(std::false_type{});
        /* the CTA's partial winners: entry `slot` of each (row, draw); the
         * row's marks (finite: its best key > -inf; NaN: any lane saw one) */
        for (int bl = ew; bl < nb; bl += C::E) {
            const int b = bt * N + bl;
            for (int j = lane; j < nd; j += 32) {
                const int64_t idx = ((int64_t)b * nd + j) * a.ws.nent + slot;
                a.ws.best[idx] = st.best[bl * nd + j];
                a.ws.xw[idx] = st.bx[bl * nd + j];
                fls_key_marks(a.ws, b, j, fls_key_of(st.best[bl * nd + j]), fls_temperature_noisy(st.T[bl]));
            }
            if (lane == 0) {
                if (fls_key_of(st.best[bl * nd]) > -INFINITY)
                    a.ws.finite[b] = a.ws.epoch;
                if (a.ws.want_lse) {
                    a.ws.m[(int64_t)b * a.ws.nent + slot] = st.lse[bl].x;
                    a.ws.s[(int64_t)b * a.ws.nent + slot] = st.lse[bl].y;
                }
            }
        }
        if (__any_sync(FLS_FULL_MASK, saw_nan) && lane == 0)
            *a.ws.nanflag = a.ws.epoch;
        if (__any_sync(FLS_FULL_MASK, saw_ovf) && lane == 0)
            *a.ws.tempflag = a.ws.epoch;
    }
#undef FULL
#undef EMPTY
#undef SFULL
#undef SFREE
}

/* ---- host side ---- */

static PFN_cuTensorMapEncodeTiled_v12000 fls_encode_fn(void)
{
    static PFN_cuTensorMapEncodeTiled_v12000 fn = NULL;
    if (!fn) {
        void *p = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (PFN_cuTensorMapEncodeTiled_v12000)p;
        else
            (void)cudaGetLastError();
    }
    return fn;
}

static bool fls_make_map(CUtensorMap *m, const void *p, fls_dtype dt, int64_t rows, int64_t cols, int64_t ld,
                         int box_rows)
{
    PFN_cuTensorMapEncodeTiled_v12000 enc = fls_encode_fn();
    if (!enc)
        return false;
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)ld * 2};
    const cuuint32_t box[2] = {WG_BK, (cuuint32_t)box_rows};
    const cuuint32_t estr[2] = {1, 1};
    CUresult r =
        enc(m, dt == FLS_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2,
            (void *)p, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS;
}

template <int N, int E, bool BF16, bool G = false>
static cudaError_t fls_wg_launch(const fls_wg_args &a, cudaStream_t st)
{
    typedef fls_wg_cfg<N, E, G> C;
    cudaError_t e = cudaFuncSetAttribute(fls_fused_wgmma_kernel<N, E, BF16, G>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, C::BYTES);
    if (e != cudaSuccess)
        return e;
    const int64_t grid = (int64_t)a.slots * a.nbt;
    fls_fused_wgmma_kernel<N, E, BF16, G><<<(unsigned)grid, C::NTHREADS, C::BYTES, st>>>(a);
    return cudaGetLastError();
}

extern "C" int fls_cuda_wgmma_tile_n(int64_t B)
{
    return B <= 16 ? 16 : (B <= 32 ? 32 : (B <= 64 ? 64 : 128));
}

int fls_wgmma_slots(int64_t B, int64_t V, int tile_n, int sm_count)
{
    const int64_t nvt = (V + WG_TV - 1) / WG_TV, nbt = (B + tile_n - 1) / tile_n;
    int64_t s = sm_count / nbt;
    if (s < 1)
        s = 1;
    return (int)(s < nvt ? s : nvt);
}

/* the engine's shared-threshold array holds FLS_GTHR_DRAWS draws per row */
static_assert(WG_ST / 16 <= FLS_GTHR_DRAWS, "FLS_GTHR_DRAWS below the draws of a pass at tile 16");

int fls_wgmma_max_draws(int tile_n)
{
    return WG_ST / tile_n;
}

/* The launch's operands and tiling (everything else zero); false if the
 * tiles overflow the grid or a tensor map cannot be made. */
static bool fls_wg_shape(const void *W, int64_t ldw, const void *H, int64_t ldh, fls_dtype dt, int B,
                         int64_t V, int64_t D, int tile_n, fls_wg_args *a)
{
    memset(a, 0, sizeof *a);
    if ((int64_t)((V + WG_TV - 1) / WG_TV) * ((B + tile_n - 1) / tile_n) > INT32_MAX)
        return false;
    if (!fls_make_map(&a->tw, W, dt, V, D, ldw, WG_TV) || !fls_make_map(&a->th, H, dt, B, D, ldh, tile_n))
        return false;
    a->B = B;
    a->V = V;
    a->nvt = (int)((V + WG_TV - 1) / WG_TV);
    a->nbt = (B + tile_n - 1) / tile_n;
    a->KB = (int)((D + WG_BK - 1) / WG_BK);
    return true;
}

cudaError_t fls_launch_fused_wgmma(const void *W, int64_t ldw, const void *H, int64_t ldh, fls_dtype dt,
                                   int B, int64_t V, int64_t D, int tile_n, int epi_warps, int sample,
                                   const fls_row_params *rows, const fls_ws &ws, const fls_mods_dev *mods,
                                   int sm_count, cudaStream_t st)
{
    if (ws.nd > fls_wgmma_max_draws(tile_n) || ws.nent != fls_wgmma_slots(B, V, tile_n, sm_count))
        return cudaErrorInvalidValue;
    fls_wg_args a;
    if (!fls_wg_shape(W, ldw, H, ldh, dt, B, V, D, tile_n, &a))
        return cudaErrorInvalidValue;
    a.slots = ws.nent;
    a.sample = sample;
    a.rows = rows;
    a.ws = ws;
    if (mods && (mods->mask || mods->per)) {
        if (mods->per && mods->slots != a.slots)
            return cudaErrorInvalidValue; /* the entries must come in this launch's visiting order */
        a.mods = *mods;
        a.has_mods = 1;
    }
    const bool bf = dt == FLS_DTYPE_BF16;
    if (epi_warps == 0) /* the measured best (docs/GPU.md) */
        epi_warps = tile_n >= 32 ? 11 : 7;
    if (ws.group_size) { /* the grouped method: g = the tile's 128 rows */
        if (ws.group_size != WG_TV)
            return cudaErrorInvalidValue;
#define FLS_WG_GCASE(NN, EE)                                                                                 \
    if (tile_n == NN && epi_warps == EE)                                                                     \
        return bf ? fls_wg_launch<NN, EE, true, true>(a, st) : fls_wg_launch<NN, EE, false, true>(a, st);
        FLS_WG_GCASE(16, 7)
        FLS_WG_GCASE(32, 11)
        FLS_WG_GCASE(64, 11)
        FLS_WG_GCASE(128, 11)
#undef FLS_WG_GCASE
        return cudaErrorInvalidValue;
    }
#define FLS_WG_CASE(NN, EE)                                                                                  \
    if (tile_n == NN && epi_warps == EE)                                                                     \
        return bf ? fls_wg_launch<NN, EE, true>(a, st) : fls_wg_launch<NN, EE, false>(a, st);
    FLS_WG_CASE(16, 7)
    FLS_WG_CASE(32, 7)
    FLS_WG_CASE(32, 11)
    FLS_WG_CASE(64, 11)
    FLS_WG_CASE(64, 7)
    FLS_WG_CASE(64, 15)
    FLS_WG_CASE(128, 7)
    FLS_WG_CASE(128, 11)
#undef FLS_WG_CASE
    return cudaErrorInvalidValue;
}

cudaError_t fls_launch_wgmma_logits(const void *W, int64_t ldw, const void *H, int64_t ldh, fls_dtype dt,
                                    int B, int64_t V, int64_t D, float *L, int64_t ldl, float *g64,
                                    float *gab, const fls_wg_rule_extra *ex, int sm_count, cudaStream_t st)
{
    const int tile_n = fls_cuda_wgmma_tile_n(B);
    fls_wg_args a;
    if (!fls_wg_shape(W, ldw, H, ldh, dt, B, V, D, tile_n, &a))
        return cudaErrorInvalidValue;
    a.slots = fls_wgmma_slots(B, V, tile_n, sm_count);
    a.sample = 2;
    a.L = L;
    a.ldl = ldl;
    a.lvec = (uintptr_t)L % 16 == 0 && ldl % 4 == 0;
    a.g64 = g64;
    a.gab = gab;
    a.m64 = fls_wgmma_m64(V);
    if (ex) {
        a.gmo = ex->gmo;
        a.rows = ex->rows;
        a.rule = ex->rule;
        a.keys = ex->keys;
        a.kdraws = ex->keys ? ex->draws : 0;
        a.first_draw = ex->first_draw;
        a.gup = ex->gup;
        a.sel = ex->sel;
        a.kst = ex->kst;
        if (((a.gmo || a.keys) && !a.rows) ||
            (a.keys && (a.keys > FLS_WG_KMAX || !a.rule || !a.sel || a.kst < a.keys || a.kdraws < 1 ||
                        a.kdraws > fls_wgmma_key_draws(B))))
            return cudaErrorInvalidValue;
    }
    const bool bf = dt == FLS_DTYPE_BF16;
    /* the epilogue only copies: the sampler's default warps */
#define FLS_WG_LCASE(NN, EE)                                                                                 \
    if (tile_n == NN)                                                                                        \
        return bf ? fls_wg_launch<NN, EE, true>(a, st) : fls_wg_launch<NN, EE, false>(a, st);
    /* where the epilogue keeps each CTA's K best keys, 15 warps at tile 64
     * (measured faster for the keys, the other rules within 1% either way);
     * ex->warps = 11 / 15 forces 11 / 15 there (tests, A/B) */
    const int lw = ex ? ex->warps : 0;
    const bool w15 = lw == 15 ? true : lw == 11 ? false : a.keys > 0;
    if (tile_n == 64 && w15)
        return bf ? fls_wg_launch<64, 15, true>(a, st) : fls_wg_launch<64, 15, false>(a, st);
    FLS_WG_LCASE(16, 7)
    FLS_WG_LCASE(32, 11)
    FLS_WG_LCASE(64, 11)
    FLS_WG_LCASE(128, 11)
#undef FLS_WG_LCASE
    return cudaErrorInvalidValue;
}

/* fls_launch_wgmma_logits may run the keys with 15 warps at tile 64: the
 * lists' room does not depend on the warps */
static_assert(fls_wg_cfg<64, 15>::ST_BYTES == fls_wg_cfg<64, 11>::ST_BYTES, "key lists per warp count");

int fls_wgmma_key_draws(int64_t B)
{
    /* the lists live in the sampler's state area, unused in sample mode 2 */
    const int n = fls_cuda_wgmma_tile_n(B);
    const int st = n == 16   ? fls_wg_cfg<16, 7>::ST_BYTES
                   : n == 32 ? fls_wg_cfg<32, 11>::ST_BYTES
                   : n == 64 ? fls_wg_cfg<64, 11>::ST_BYTES
                             : fls_wg_cfg<128, 11>::ST_BYTES;
    return st / (n * FLS_WG_KMAX * (8 + 4));
}

int fls_wgmma_logits_slots(int64_t B, int64_t V, int sm_count)
{
    return fls_wgmma_slots(B, V, fls_cuda_wgmma_tile_n(B), sm_count);
}

int64_t fls_wgmma_m64(int64_t V)
{
    return 2 * ((V + WG_TV - 1) / WG_TV);
}
