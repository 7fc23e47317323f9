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
 *              into one partial winner per (row, tile, draw) with the
 *              contract's noise and common.cuh's key, packing and bound
 *              helpers (the same keys as every other path), skipping
 *              exactly with a per-row running bound — so the noise runs on
 *              the CUDA cores while the tensor cores and the copy engine
 *              work on the next tile.
 *
 * Hand-offs are mbarriers: full/empty per stage (copy engine -> MMA ->
 * producer) and sfull/sfree per logits buffer (MMA -> epilogue -> MMA).
 * Logits never reach HBM. Entries: one per (row, tile), ceil(V / 128) per
 * row; the finalize kernel is the one every path shares.
 */
#include "common.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <string.h>

#include "wgmma_ops.cuh"

#define WG_TV 128 /* vocabulary rows per tile: two m64 blocks */
#define WG_BK 64  /* K per stage: 64 16-bit elements = one 128-byte swizzle row */

template <int N, int E_> struct fls_wg_cfg {
    static constexpr int E = E_;                       /* epilogue warps */
    static constexpr int NTHREADS = 128 + 32 + 32 * E; /* E = 7, 11 or 15: whole warpgroups */
    /* With N = 128 the MMA warpgroup needs 128 accumulators: at 512 threads
     * (128 registers each at entry) it takes 176 and the other warpgroups
     * give theirs up (112; the CTA's pool is unchanged). 640 threads (96 at
     * entry, 72 after the split) spilled in the sampler and ran slower
     * (docs/PERF.md GPU v6), so N = 128 has 7 or 11 sampling warps. */
    static constexpr bool REG_SPLIT = NTHREADS >= 512 && N >= 128;
    static constexpr int REG_MMA = 176;
    static constexpr int REG_REST = 112;
    static_assert(NTHREADS % 128 == 0, "roles are whole warpgroups (setmaxnreg)");
    static constexpr int W_BYTES = WG_TV * WG_BK * 2;
    static constexpr int H_BYTES = N * WG_BK * 2;
    static constexpr int STAGE = W_BYTES + H_BYTES; /* a multiple of 1024 */
    static constexpr int SP = WG_TV + 4;            /* logits pitch: conflict-free fragment stores */
    static constexpr int S_BYTES = N * SP * 4;
    static constexpr int NS = N >= 128 ? 1 : 2; /* logits buffers */
    static constexpr int NTHR = 1024;           /* running bounds: (row, draw) pairs per CTA */
    static constexpr int EXTRA = NTHR * 4 + 2 * FLS_GB_N * 4;
    static constexpr int BUDGET = 227 * 1024 - 1024 - 256 - EXTRA;
    static constexpr int STAGES_FIT = (BUDGET - NS * S_BYTES) / STAGE;
    static constexpr int STAGES = STAGES_FIT > 8 ? 8 : STAGES_FIT;
    static constexpr int THR_OFF = STAGES * STAGE + NS * S_BYTES; /* float thr[NTHR] */
    static constexpr int GB_OFF = THR_OFF + NTHR * 4;             /* float up[], lo[] */
    static constexpr int BAR_OFF = GB_OFF + 2 * FLS_GB_N * 4;
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
    int sample; /* 0: the epilogue warps only hand the buffers back (benchmark: mainloop alone) */
    const fls_row_params *rows;
    fls_ws ws;
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

/*
 * One warp samples rows b[r] of one tile: the 128 logits S[r][0..128)
 * (shared memory; tokens v0 + i, i < n valid), entry e of each row. Lane p holds
 * tokens 2p, 2p + 1, 64 + 2p, 65 + 2p: two Philox blocks per lane, all
 * straight-line code (no loop: two independent chains per lane).
 *
 * Skipping, exact (gb = the Gumbel bound tables in shared memory, or NULL):
 * thr[j] is a lower bound of the final winning key of (b, draw j) — the best
 * exact key this warp has seen for the row in earlier tiles (one warp owns
 * a row for the whole launch), or, on the row's first tile here, the lower
 * bound fl(x_s + lo) of the key of the tile's max-logit token. A token with
 * fl(x + up[bucket]) < thr (strict) has key < thr <= the winner's key: it
 * cannot win, not even on a tie, and its logs are not computed; a pair with
 * fl(max x + FLS_GUMBEL_MAX) < thr skips its Philox block as well. A tile
 * whose tokens all skip writes the empty entry 0, which the finalize max
 * ignores; every key that is computed is the plain loop's key, bit for bit.
 */
template <int R>
__device__ __forceinline__ void fls_wg_sample_rows(const float *const (&S)[R], int n, uint64_t v0,
                                                   const int (&b)[R], int e, const fls_row_params (&rp)[R],
                                                   const fls_ws &ws, int lane, const float *gb,
                                                   float *const (&thr)[R])
{
    /* R rows at once: their chains are independent, so the scheduler can
     * interleave them (the sampler is latency-bound, docs/PERF.md GPU v6) */
    const int i0 = 2 * lane, i1 = 64 + 2 * lane;
    const int ix[4] = {i0, i0 + 1, i1, i1 + 1};
    float x[R][4], mx[R];
    bool nan[R];
    int i_seed[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float T = rp[r].temperature;
        const float2 ra = *(const float2 *)(S[r] + i0), rc = *(const float2 *)(S[r] + i1);
        float l[4] = {ra.x, ra.y, rc.x, rc.y};
        bool nn = false;
        float lm = -INFINITY;
        int li = -1;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (ix[k] >= n)
                l[k] = -INFINITY;
            nn |= isnan(l[k]);
            if (l[k] > lm) {
                lm = l[k];
                li = ix[k];
            }
        }
        nan[r] = __any_sync(FLS_FULL_MASK, nn);
        const float lmax = fls_warp_maxf(lm);
        mx[r] = fls_temper(lmax, T);
        fls_row_marks(ws, b[r], nan[r], mx[r], lane);
#pragma unroll
        for (int k = 0; k < 4; k++)
            x[r][k] = fls_temper(l[k], T);
        /* the tile's max-logit token (lowest lane holding it), for the seed */
        const unsigned mball = __ballot_sync(FLS_FULL_MASK, li >= 0 && lm == lmax);
        i_seed[r] = mball ? __shfl_sync(FLS_FULL_MASK, li, __ffs(mball) - 1) : -1;
    }
    if (ws.want_lse) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            float s = 0.0f;
            if (mx[r] > -INFINITY) {
#pragma unroll
                for (int k = 0; k < 4; k++)
                    if (ix[k] < n)
                        s = __fadd_rn(s, expf(__fsub_rn(x[r][k], mx[r])));
            }
            s = fls_warp_sumf(s);
            if (lane == 0) {
                ws.m[(int64_t)b[r] * ws.nent + e] = mx[r];
                ws.s[(int64_t)b[r] * ws.nent + e] = s;
            }
        }
    }
    for (int j = 0; j < ws.nd; j++) {
        const uint32_t d = ws.draw_base + (uint32_t)j;
        unsigned long long best[R];
        float bx[R], bk[R], t[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            best[r] = 0;
            bx[r] = bk[r] = t[r] = -INFINITY;
            if (!nan[r] && rp[r].temperature == 0.0f) {
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const unsigned long long pk = fls_pack(x[r][k], (uint32_t)(v0 + (uint64_t)ix[k]));
                    if (ix[k] < n && pk > best[r]) {
                        best[r] = pk;
                        bx[r] = x[r][k];
                    }
                }
                continue;
            }
            if (nan[r])
                continue;
            if (gb) {
                t[r] = thr[r] ? thr[r][j] : -INFINITY;
                if (t[r] == -INFINITY && i_seed[r] >= 0 && mx[r] > -INFINITY) {
                    const uint64_t vs = v0 + (uint64_t)i_seed[r];
                    const uint64_t ks = fls_pair_bits(fls_philox_pair(rp[r].seed, rp[r].offset, d, vs), vs);
                    t[r] = __fadd_rn(mx[r], gb[FLS_GB_N + (int)(ks >> FLS_GB_SHIFT)]);
                }
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const float xa = x[r][2 * h], xb = x[r][2 * h + 1];
                if (ix[2 * h] < n && !(__fadd_rn(fmaxf(xa, xb), FLS_GUMBEL_MAX) < t[r])) {
                    const uint4 q = fls_philox_pair(rp[r].seed, rp[r].offset, d, v0 + (uint64_t)ix[2 * h]);
                    const uint64_t kk[2] = {((uint64_t)q.y << 32) | q.x, ((uint64_t)q.w << 32) | q.z};
#pragma unroll
                    for (int u = 0; u < 2; u++) {
                        const int k = 2 * h + u;
                        const bool cand =
                            ix[k] < n &&
                            (!gb || !(__fadd_rn(x[r][k], gb[(int)(kk[u] >> FLS_GB_SHIFT)]) < t[r]));
                        if (cand) {
                            const unsigned long long before = best[r];
                            const float key = fls_exact_key(kk[u], x[r][k], (uint32_t)(v0 + (uint64_t)ix[k]),
                                                            best[r], bx[r]);
                            if (best[r] != before)
                                bk[r] = key;
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            int src;
            const unsigned long long w = fls_warp_put_winner(best[r], bx[r], ws, b[r], j, e, lane, src);
            const float wk = __shfl_sync(FLS_FULL_MASK, bk[r], src);
            if (lane == 0 && thr[r] && w != 0 && wk > thr[r][j])
                thr[r][j] = wk; /* an exact key of this row: a lower bound of its winner's */
        }
    }
    __syncwarp();
}

template <int N, int E, bool BF16>
__global__ void __launch_bounds__(fls_wg_cfg<N, E>::NTHREADS, 1)
    fls_fused_wgmma_kernel(const __grid_constant__ fls_wg_args a)
{
    typedef fls_wg_cfg<N, E> C;
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
    const int ntiles = a.nvt * a.nbt;

    if (warp < 4) {
        /* ---- the MMA warpgroup ---- */
        if (C::REG_SPLIT)
            asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(C::REG_MMA) : "memory");
        float acc0[N / 2], acc1[N / 2];
        int stage = 0, prev = -1, it = 0;
        uint32_t phase = 0;
        for (int t = blockIdx.x; t < ntiles; t += gridDim.x, it++) {
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
#pragma unroll
                for (int ks = 0; ks < WG_BK / 16; ks++) {
                    const uint64_t db = fls_wg_desc(hs_ + 32u * ks);
                    fls_wgmma_op<N, BF16>::run(acc0, fls_wg_desc(ws_ + 32u * ks), db);
                    fls_wgmma_op<N, BF16>::run(acc1, fls_wg_desc(ws_ + 8192u + 32u * ks), db);
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
            for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
                const int vt = t / a.nbt, bt = t - vt * a.nbt;
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
        /* ---- the epilogue warps: the warp sampler on S ---- */
        if (C::REG_SPLIT)
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(C::REG_REST) : "memory");
        const int ew = warp - 5;
        float *gb = NULL, *thr_all = NULL;
        if (a.ws.gup) {
            /* the bound tables and the running bounds, shared by the epilogue warps only */
            gb = (float *)(smem + C::GB_OFF);
            for (int i = tid - 160; i < FLS_GB_N; i += 32 * C::E) {
                gb[i] = a.ws.gup[i];
                gb[FLS_GB_N + i] = a.ws.glo[i];
            }
            if ((int64_t)a.B * a.ws.nd <= C::NTHR) {
                thr_all = (float *)(smem + C::THR_OFF);
                for (int i = tid - 160; i < a.B * a.ws.nd; i += 32 * C::E)
                    thr_all[i] = -INFINITY;
            }
            asm volatile("bar.sync 1, %0;\n" ::"n"(32 * C::E) : "memory");
        }
        int it = 0;
        for (int t = blockIdx.x; t < ntiles; t += gridDim.x, it++) {
            const int vt = t / a.nbt, bt = t - vt * a.nbt;
            const int buf = it % C::NS;
            fls_mbar_wait(SFULL(buf), (uint32_t)(it / C::NS) & 1u);
            __syncwarp();
            const float *S = (const float *)(smem + C::STAGES * C::STAGE + buf * C::S_BYTES);
            const int nb = a.sample ? min(N, a.B - bt * N) : 0;
            const int64_t v0 = (int64_t)vt * WG_TV;
            const int n = (int)min((int64_t)WG_TV, a.V - v0);
            /* one entry per (row, tile): entry vt; row bl always goes to warp bl % E */
            /* rows ew, ew + E, ... (one owner warp per row), two at a time
             * for N <= 64; at N = 128 one at a time measured faster
             * (docs/PERF.md GPU v6, run 9) */
            constexpr int STEP = N <= 64 ? 2 : 1;
            for (int bl = ew; bl < nb; bl += STEP * C::E) {
                const int b0 = bt * N + bl;
                float *t0 = thr_all ? thr_all + (int64_t)b0 * a.ws.nd : NULL;
                if (STEP == 2 && bl + C::E < nb) {
                    const int bb[2] = {b0, b0 + C::E};
                    const fls_row_params rr[2] = {a.rows[bb[0]], a.rows[bb[1]]};
                    const float *const ss[2] = {S + bl * C::SP, S + (bl + C::E) * C::SP};
                    float *const tt[2] = {t0, thr_all ? thr_all + (int64_t)bb[1] * a.ws.nd : NULL};
                    fls_wg_sample_rows<2>(ss, n, (uint64_t)v0, bb, vt, rr, a.ws, lane, gb, tt);
                } else {
                    const int bb[1] = {b0};
                    const fls_row_params rr[1] = {a.rows[b0]};
                    const float *const ss[1] = {S + bl * C::SP};
                    float *const tt[1] = {t0};
                    fls_wg_sample_rows<1>(ss, n, (uint64_t)v0, bb, vt, rr, a.ws, lane, gb, tt);
                }
            }
            fls_mbar_arrive(SFREE(buf));
        }
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

template <int N, int E, bool BF16>
static cudaError_t fls_wg_launch(const fls_wg_args &a, int sm_count, cudaStream_t st)
{
    typedef fls_wg_cfg<N, E> C;
    cudaError_t e = cudaFuncSetAttribute(fls_fused_wgmma_kernel<N, E, BF16>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, C::BYTES);
    if (e != cudaSuccess)
        return e;
    int64_t ntiles = (int64_t)a.nvt * a.nbt;
    int64_t grid = sm_count < ntiles ? sm_count : ntiles;
    fls_fused_wgmma_kernel<N, E, BF16><<<(unsigned)grid, C::NTHREADS, C::BYTES, st>>>(a);
    return cudaGetLastError();
}

extern "C" int fls_cuda_wgmma_tile_n(int64_t B)
{
    return B <= 16 ? 16 : (B <= 32 ? 32 : (B <= 64 ? 64 : 128));
}

cudaError_t fls_launch_fused_wgmma(const void *W, int64_t ldw, const void *H, int64_t ldh, fls_dtype dt,
                                   int B, int64_t V, int64_t D, int tile_n, int epi_warps, int sample,
                                   const fls_row_params *rows, const fls_ws &ws, int sm_count,
                                   cudaStream_t st)
{
    if ((int64_t)((V + WG_TV - 1) / WG_TV) * ((B + tile_n - 1) / tile_n) > INT32_MAX)
        return cudaErrorInvalidValue;
    fls_wg_args a;
    memset(&a, 0, sizeof a);
    if (!fls_make_map(&a.tw, W, dt, V, D, ldw, WG_TV) || !fls_make_map(&a.th, H, dt, B, D, ldh, tile_n))
        return cudaErrorInvalidValue;
    a.B = B;
    a.V = V;
    a.nvt = (int)((V + WG_TV - 1) / WG_TV);
    a.nbt = (B + tile_n - 1) / tile_n;
    a.KB = (int)((D + WG_BK - 1) / WG_BK);
    a.sample = sample;
    a.rows = rows;
    a.ws = ws;
    const bool bf = dt == FLS_DTYPE_BF16;
    if (epi_warps == 0) /* measured, docs/PERF.md GPU v6 */
        epi_warps = tile_n == 64 ? 15 : (tile_n >= 32 ? 11 : 7);
#define FLS_WG_CASE(NN, EE)                                                                                  \
    if (tile_n == NN && epi_warps == EE)                                                                     \
        return bf ? fls_wg_launch<NN, EE, true>(a, sm_count, st)                                             \
                  : fls_wg_launch<NN, EE, false>(a, sm_count, st);
    FLS_WG_CASE(16, 7)
    FLS_WG_CASE(32, 7)
    FLS_WG_CASE(32, 11)
    FLS_WG_CASE(64, 11)
    FLS_WG_CASE(64, 15)
    FLS_WG_CASE(128, 7)
    FLS_WG_CASE(128, 11)
#undef FLS_WG_CASE
    return cudaErrorInvalidValue;
}
