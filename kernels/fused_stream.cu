/*
 * fused_stream.cu — the fused LM-head + Gumbel-max kernel for small batches
 * (B <= 32): one streaming pass over W, logits never leave the registers.
 *
 * At small B the product is a matrix-vector product: W (V, D) 16-bit is read
 * once (D = 4096, V = 151936: 1.245 GB, ~0.27 ms at the H200's ~4.6 TB/s
 * read rate) and the arithmetic is 2 B V D (B = 8: 10 GFLOP, ~2 % of the
 * tensor cores over that time). So the kernel is built like the read floor:
 *  - a persistent grid of one CTA per SM (16 warps); CTA c takes a contiguous
 *    range of 16-row groups of W, warp w of the CTA its groups w, w + 16, ...;
 *  - W goes from HBM straight into registers: each lane loads 16 bytes of two
 *    rows per 32-element k-block (ld.global.nc, no L1 allocation, 256-byte L2
 *    prefetch), 4 k-blocks (8 loads, 128 bytes per lane) per step, and the
 *    next step's loads are issued before the current step's products (double
 *    buffer), also across group boundaries, so the epilogue of a group runs
 *    while the next group's bytes are in flight: 4-8 KB per warp, 64-128 KB
 *    per SM in flight;
 *  - H (B padded to 8 NT rows, D padded to a multiple of 128) sits in shared
 *    memory for the whole kernel; its rows are padded by 64 bytes, so the
 *    16-byte fragment loads of a quarter warp hit 8 different bank groups;
 *  - the products run on mma.sync.m16n8k16 (W rows as A, H^T as B, fp32
 *    accumulators). A dot product does not care in which order its k terms
 *    are paired, only that A and B pair them alike: lane (g, t) holds the
 *    8 contiguous elements t*8 .. t*8+7 of its rows' k-block, and the two
 *    k-steps of the block take elements 0-3 and 4-7 of every lane, for W and
 *    H alike. So each load is one 16-byte vector and no shuffle is needed;
 *  - epilogue per group: one shuffle gives each lane two adjacent rows
 *    (v, v + 1, v even) of two batch columns, i.e. whole Philox pairs; every
 *    key is computed (fl(fl(l / T) + G), G = the contract's Gumbel of
 *    fls_noise.h via common.cuh; T = 0 greedy) and the lane keeps the packed
 *    maximum (ties to the lowest token, as everywhere) and, when asked, an
 *    online log-sum-exp (max, sum exp(x - max));
 *  - at the end the CTA reduces its lanes to one partial winner per
 *    (row, CTA) and the last CTA to finish (a counter, self-resetting) runs
 *    the finalize reduction over the grid's partials: one launch per call.
 * Skipping (fls_gumbel_bound.h) is not used: at B <= 32 the noise is a few
 * percent of the issue slots and overlaps the stream.
 *
 * One draw per launch (FLS_STREAM_ND): the engine runs more draws as more
 * passes (each streams W again) and the dispatcher takes this kernel only
 * for draws == 1.
 */
#include "common.cuh"

#define FS_WARPS   16
#define FS_THREADS (FS_WARPS * 32)
/* 32-element k-blocks per step: 4 (128 bytes per lane in flight, twice
 * with the double buffer); 2 at NT = 4, whose larger state would spill */
#define FS_KU(NT)    ((NT) == 4 ? 2 : 4)
#define FS_KSTEP(NT) (32 * FS_KU(NT)) /* elements of k per step */
#define FS_HPAD      32               /* elements of padding per H row in shared memory (64 bytes) */
#define FS_SMEM_MAX  (227 * 1024)

struct fls_stream_args {
    const char *W;
    int64_t ldw; /* elements */
    const char *H;
    int64_t ldh;
    int B;
    int64_t V;
    int D;
    int Dpad;        /* D rounded up to FS_KSTEP */
    int nst;         /* steps per group: Dpad / FS_KSTEP */
    int64_t ngroups; /* ceil(V / 16) */
    const fls_row_params *rows;
    fls_ws ws;
    int64_t draws_total;
    int64_t *tokens;
    float *lse;
    float *logprobs;
};

/* 16 bytes from global memory, read-only, no L1 allocation (W is read once),
 * with the 256-byte L2 prefetch hint (the next three steps read the rest of
 * those 256 bytes). */
__device__ __forceinline__ uint4 fs_ldg(const char *p)
{
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

__device__ __forceinline__ uint4 fs_lds(uint32_t addr)
{
    uint4 r;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "r"(addr));
    return r;
}

template <bool BF16>
__device__ __forceinline__ void fs_mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint32_t b0, uint32_t b1)
{
    if (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Online log-sum-exp of tempered logits: (m, s) with s = sum exp(x - m). */
__device__ __forceinline__ void fs_lse_add(float &m, float &s, float x)
{
    if (x > m) {
        s = __fadd_rn(m > -INFINITY ? __fmul_rn(s, expf(__fsub_rn(m, x))) : 0.0f, 1.0f);
        m = x;
    } else if (x > -INFINITY) {
        s = __fadd_rn(s, expf(__fsub_rn(x, m)));
    }
}

__device__ __forceinline__ void fs_lse_merge(float &m, float &s, float om, float os)
{
    const float M = fmaxf(m, om);
    const float a = m == M ? s : __fmul_rn(s, expf(__fsub_rn(m, M)));
    const float b = om == M ? os : __fmul_rn(os, expf(__fsub_rn(om, M)));
    m = M;
    s = __fadd_rn(a, b);
}

template <int NT> struct fs_state {
    unsigned long long best[NT][2];
    float bx[NT][2];
    float m[NT][2], s[NT][2];
};

template <int NT, bool BF16>
__global__ void __launch_bounds__(FS_THREADS, 1) fls_fused_stream_kernel(fls_stream_args a)
{
    constexpr int KU = FS_KU(NT), KS = FS_KSTEP(NT);
    extern __shared__ __align__(128) unsigned char hsm[];
    __shared__ unsigned long long s_best[FS_WARPS][NT * 8];
    __shared__ float s_bx[FS_WARPS][NT * 8], s_m[FS_WARPS][NT * 8], s_s[FS_WARPS][NT * 8];
    __shared__ int s_last;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const bool even = (g & 1) == 0;
    const int hpitch = (a.Dpad + FS_HPAD) * 2; /* bytes */
    const uint32_t hbase = (uint32_t)__cvta_generic_to_shared(hsm);

    /* this CTA's groups [gs, ge), this warp's: gs + warp, gs + warp + FS_WARPS, ... */
    const int64_t gs = a.ngroups * (int64_t)blockIdx.x / gridDim.x;
    const int64_t ge = a.ngroups * ((int64_t)blockIdx.x + 1) / gridDim.x;
    int64_t grp = gs + warp;
    int st = 0;
    const bool tail_k = a.D % KS != 0;

    /* 8 loads of one step: rows g and g + 8 of the group (clamped to V - 1;
     * clamped rows are never sampled), 4 k-blocks; past D: zeros (H's padding
     * is zero too, and garbage W times zero could be NaN). */
    auto load = [&](uint4(&w)[KU][2], int64_t gr, int s) {
        int64_t r0 = gr * 16 + g, r1 = r0 + 8;
        r0 = r0 < a.V ? r0 : a.V - 1;
        r1 = r1 < a.V ? r1 : a.V - 1;
        const char *p0 = a.W + (r0 * a.ldw + (int64_t)s * KS + t * 8) * 2;
        const char *p1 = a.W + (r1 * a.ldw + (int64_t)s * KS + t * 8) * 2;
        if (!tail_k || s < a.nst - 1) {
#pragma unroll
            for (int i = 0; i < KU; i++) {
                w[i][0] = fs_ldg(p0 + i * 64);
                w[i][1] = fs_ldg(p1 + i * 64);
            }
        } else {
#pragma unroll
            for (int i = 0; i < KU; i++) {
                const bool ok = s * KS + i * 32 + t * 8 < a.D;
                w[i][0] = ok ? fs_ldg(p0 + i * 64) : make_uint4(0, 0, 0, 0);
                w[i][1] = ok ? fs_ldg(p1 + i * 64) : make_uint4(0, 0, 0, 0);
            }
        }
    };

    uint4 cur[KU][2], nxt[KU][2];
    const bool active = grp < ge;
    if (active)
        load(cur, grp, 0);

    /* H -> shared memory (rows >= B and columns >= D are zero), while the
     * first W loads are in flight */
    {
        const int cpr = a.Dpad / 8; /* 16-byte chunks per row */
        for (int idx = tid; idx < NT * 8 * cpr; idx += FS_THREADS) {
            const int b = idx / cpr, c = idx - b * cpr;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (b < a.B && c * 8 < a.D)
                v = *(const uint4 *)(a.H + ((int64_t)b * a.ldh + c * 8) * 2);
            *(uint4 *)(hsm + b * hpitch + c * 16) = v;
        }
    }
    __syncthreads();

    fs_state<NT> S;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
            S.best[nt][c] = 0;
            S.bx[nt][c] = -INFINITY;
            S.m[nt][c] = -INFINITY;
            S.s[nt][c] = 0.0f;
        }
    bool nan = false;
    unsigned fin = 0; /* bit nt * 2 + c: a logit > -inf seen in that column */
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
        acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
    const uint32_t d = a.ws.draw_base;
    /* lane's H fragment address: row nt * 8 + g, element t * 8 of each k-block */
    const uint32_t hl = hbase + (uint32_t)(g * hpitch + t * 16);

    while (active) {
        int nst_ = st + 1;
        int64_t ngrp = grp;
        if (nst_ == a.nst) {
            nst_ = 0;
            ngrp += FS_WARPS;
        }
        const bool more = ngrp < ge;
        if (more)
            load(nxt, ngrp, nst_);
#pragma unroll
        for (int i = 0; i < KU; i++) {
            const uint32_t ha = hl + (uint32_t)((st * KS + i * 32) * 2);
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                if (nt * 8 < a.B) {
                    const uint4 h = fs_lds(ha + (uint32_t)(nt * 8 * hpitch));
                    fs_mma<BF16>(acc[nt], cur[i][0].x, cur[i][1].x, cur[i][0].y, cur[i][1].y, h.x, h.y);
                    fs_mma<BF16>(acc[nt], cur[i][0].z, cur[i][1].z, cur[i][0].w, cur[i][1].w, h.z, h.w);
                }
            }
        }
        if (st == a.nst - 1) {
            /* Epilogue of group grp. Even g: rows (g, g + 1) from its own c0/c1
             * and the odd neighbour's; odd g: rows (g + 7, g + 8) from the even
             * neighbour's c2/c3 and its own. */
            const int64_t v0 = grp * 16 + (even ? g : g + 7);
            const bool ok0 = v0 < a.V, ok1 = v0 + 1 < a.V;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                if (nt * 8 >= a.B)
                    break;
                const float s0 = even ? acc[nt][2] : acc[nt][0];
                const float s1 = even ? acc[nt][3] : acc[nt][1];
                const float q0 = __shfl_xor_sync(FLS_FULL_MASK, s0, 4);
                const float q1 = __shfl_xor_sync(FLS_FULL_MASK, s1, 4);
                const float lo[2] = {even ? acc[nt][0] : q0, even ? acc[nt][1] : q1};
                const float hi[2] = {even ? q0 : acc[nt][2], even ? q1 : acc[nt][3]};
                acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int b = nt * 8 + 2 * t + c;
                    if (b >= a.B || !ok0)
                        continue;
                    const float T = __ldg(&a.rows[b].temperature);
                    const float l0 = lo[c], l1 = hi[c];
                    nan |= isnan(l0) || (ok1 && isnan(l1));
                    const float x0 = fls_temper(l0, T);
                    const float x1 = ok1 ? fls_temper(l1, T) : -INFINITY;
                    float k0 = x0, k1 = x1;
                    if (T != 0.0f) {
                        const uint4 r = fls_philox_pair(__ldg(&a.rows[b].seed), __ldg(&a.rows[b].offset), d,
                                                        (uint64_t)v0);
                        k0 = __fadd_rn(x0, fls_gumbel_dev(((uint64_t)r.y << 32) | r.x));
                        if (ok1)
                            k1 = __fadd_rn(x1, fls_gumbel_dev(((uint64_t)r.w << 32) | r.z));
                    }
                    const unsigned long long p0 = fls_pack(k0, (uint32_t)v0);
                    if (p0 > S.best[nt][c]) {
                        S.best[nt][c] = p0;
                        S.bx[nt][c] = x0;
                    }
                    if (ok1) {
                        const unsigned long long p1 = fls_pack(k1, (uint32_t)(v0 + 1));
                        if (p1 > S.best[nt][c]) {
                            S.best[nt][c] = p1;
                            S.bx[nt][c] = x1;
                        }
                    }
                    if (x0 > -INFINITY || x1 > -INFINITY)
                        fin |= 1u << (nt * 2 + c);
                    if (a.ws.want_lse) {
                        fs_lse_add(S.m[nt][c], S.s[nt][c], x0);
                        if (ok1)
                            fs_lse_add(S.m[nt][c], S.s[nt][c], x1);
                    }
                }
            }
        }
        if (!more)
            break;
#pragma unroll
        for (int i = 0; i < KU; i++) {
            cur[i][0] = nxt[i][0];
            cur[i][1] = nxt[i][1];
        }
        st = nst_;
        grp = ngrp;
    }

    /* lanes -> one value per (warp, column): reduce over g (lane bits 2-4) */
    if (__any_sync(FLS_FULL_MASK, nan) && lane == 0)
        *a.ws.nanflag = a.ws.epoch;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
        for (int c = 0; c < 2; c++) {
            unsigned long long bb = S.best[nt][c];
            float xx = S.bx[nt][c], m = S.m[nt][c], s = S.s[nt][c];
            bool f = (fin >> (nt * 2 + c)) & 1u;
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) {
                const unsigned long long ob = __shfl_xor_sync(FLS_FULL_MASK, bb, o);
                const float ox = __shfl_xor_sync(FLS_FULL_MASK, xx, o);
                if (ob > bb) { /* equal packed values are the same token */
                    bb = ob;
                    xx = ox;
                }
                const float om = __shfl_xor_sync(FLS_FULL_MASK, m, o);
                const float os = __shfl_xor_sync(FLS_FULL_MASK, s, o);
                fs_lse_merge(m, s, om, os);
                f = __shfl_xor_sync(FLS_FULL_MASK, (int)f, o) != 0 || f;
            }
            const int b = nt * 8 + 2 * t + c;
            if (g == 0) {
                s_best[warp][b] = bb;
                s_bx[warp][b] = xx;
                s_m[warp][b] = m;
                s_s[warp][b] = s;
                if (f && b < a.B)
                    a.ws.finite[b] = a.ws.epoch;
            }
        }
    }
    __syncthreads();
    /* warps -> this CTA's partial of row b (entry blockIdx.x, one draw) */
    if (tid < a.B) {
        const int b = tid;
        unsigned long long bb = 0;
        float xx = -INFINITY, m = -INFINITY, s = 0.0f;
        for (int w = 0; w < FS_WARPS; w++) {
            if (s_best[w][b] > bb) {
                bb = s_best[w][b];
                xx = s_bx[w][b];
            }
            fs_lse_merge(m, s, s_m[w][b], s_s[w][b]);
        }
        const int64_t idx = (int64_t)b * a.ws.nd * a.ws.nent + blockIdx.x;
        a.ws.best[idx] = bb;
        a.ws.xw[idx] = xx;
        if (a.ws.want_lse) {
            a.ws.m[(int64_t)b * a.ws.nent + blockIdx.x] = m;
            a.ws.s[(int64_t)b * a.ws.nent + blockIdx.x] = s;
        }
    }
    /* the last CTA to get here reduces every CTA's partials (threadfence
     * reduction: each CTA's writes are visible before its count) */
    __threadfence();
    __syncthreads();
    if (tid == 0)
        s_last = atomicAdd(a.ws.counter, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!s_last)
        return;
    __threadfence();
    if (tid == 0)
        *a.ws.counter = 0; /* ready for the next launch on this stream */
    bool bad_nan, bad_mask;
    fls_finalize_flags(a.B, a.ws, lane, bad_nan, bad_mask);
    if (tid == 0) {
        a.ws.status[0] = a.ws.epoch;
        a.ws.status[1] = bad_nan ? 1u : (bad_mask ? 2u : 0u);
    }
    if (bad_nan || bad_mask)
        return;
    for (int64_t w = warp; w < (int64_t)a.B * a.ws.nd; w += FS_WARPS)
        fls_finalize_item(a.rows, a.draws_total, a.ws, a.tokens, a.lse, a.logprobs, w, lane);
}

static int fs_nt(int B)
{
    return B <= 8 ? 1 : (B <= 16 ? 2 : (B <= 32 ? 4 : 0));
}

static int64_t fs_dpad(int B, int64_t D)
{
    const int ks = FS_KSTEP(fs_nt(B));
    return (D + ks - 1) / ks * ks;
}

static size_t fs_dyn_smem(int B, int64_t D)
{
    const int64_t dpad = fs_dpad(B, D);
    return (size_t)(fs_nt(B) * 8) * (size_t)(dpad + FS_HPAD) * 2;
}

int fls_stream_supported(int64_t B, int64_t D)
{
    if (B < 1 || B > 32 || D < 8 || D % 8 || D > (1 << 20))
        return 0;
    const size_t stat = (size_t)FS_WARPS * (size_t)(fs_nt((int)B) * 8) * 20 + 16;
    return fs_dyn_smem((int)B, D) + stat <= FS_SMEM_MAX;
}

int fls_stream_grid(int64_t V, int sm_count)
{
    const int64_t ng = (V + 15) / 16;
    return (int)(ng < sm_count ? ng : sm_count);
}

template <int NT, bool BF16> static cudaError_t fs_launch(const fls_stream_args &a, int grid, cudaStream_t st)
{
    const int bytes = (int)fs_dyn_smem(a.B, a.D);
    cudaError_t e = cudaFuncSetAttribute(fls_fused_stream_kernel<NT, BF16>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess)
        return e;
    fls_fused_stream_kernel<NT, BF16><<<(unsigned)grid, FS_THREADS, bytes, st>>>(a);
    return cudaGetLastError();
}

cudaError_t fls_launch_fused_stream(const void *W, int64_t ldw, const void *H, int64_t ldh, fls_dtype dt,
                                    int B, int64_t V, int64_t D, const fls_row_params *rows, const fls_ws &ws,
                                    int grid, int64_t draws_total, int64_t *tokens, float *lse,
                                    float *logprobs, cudaStream_t st)
{
    if (!fls_stream_supported(B, D) || ws.nd != 1 || grid < 1 || ws.nent != grid)
        return cudaErrorInvalidValue;
    fls_stream_args a;
    a.W = (const char *)W;
    a.ldw = ldw;
    a.H = (const char *)H;
    a.ldh = ldh;
    a.B = B;
    a.V = V;
    a.D = (int)D;
    a.Dpad = (int)fs_dpad(B, D);
    a.nst = a.Dpad / FS_KSTEP(fs_nt(B));
    a.ngroups = (V + 15) / 16;
    a.rows = rows;
    a.ws = ws;
    a.draws_total = draws_total;
    a.tokens = tokens;
    a.lse = lse;
    a.logprobs = logprobs;
    const bool bf = dt == FLS_DTYPE_BF16;
    switch (fs_nt(B)) {
    case 1:
        return bf ? fs_launch<1, true>(a, grid, st) : fs_launch<1, false>(a, grid, st);
    case 2:
        return bf ? fs_launch<2, true>(a, grid, st) : fs_launch<2, false>(a, grid, st);
    case 4:
        return bf ? fs_launch<4, true>(a, grid, st) : fs_launch<4, false>(a, grid, st);
    default:
        return cudaErrorInvalidValue;
    }
}
