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
 *  - W goes from HBM straight into registers in 64-element k-slabs (128
 *    bytes of each of the group's 16 rows): 4 load instructions per slab,
 *    each 16 bytes per lane with 8 lanes per row, so one instruction reads 4
 *    rows x 128 contiguous bytes (4 full-line L2 requests, like the read
 *    floor; the mma layout would put only 4 lanes on a row: 64-byte requests,
 *    twice the L2 requests per byte, which v4 measured as the limit). 16
 *    shuffles and 16 selects per slab move the bytes into the mma layout
 *    (fs_to_frag). Steps of 4 slabs at NT = 1, 3 at NT = 2, 1 at NT = 4
 *    (registers: 122-128, no spills); a slab's registers are reloaded with
 *    the next step's slab as soon as they are shuffled out, so one step (up
 *    to 8 KB per warp, 128 KB per SM) stays in flight, also across group
 *    boundaries and during the epilogue;
 *  - H (B padded to 8 NT rows, D padded to a multiple of the step) sits in shared
 *    memory for the whole kernel; its rows are padded by 64 bytes, so the
 *    16-byte fragment loads of a quarter warp hit 8 different bank groups;
 *  - the products run on mma.sync.m16n8k16 (W rows as A, H^T as B, fp32
 *    accumulators). A dot product does not care in which order its k terms
 *    are paired, only that A and B pair them alike: lane (g, t) holds the
 *    8 contiguous elements t*8 .. t*8+7 of its rows' k-block, and the two
 *    k-steps of the block take elements 0-3 and 4-7 of every lane, for W and
 *    H alike, so one 16-byte vector per row and k-block, no ldmatrix;
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
/* 64-element k-slabs per step: 4 (8 KB per warp in flight); 2 at NT = 4,
 * whose larger state would spill */
#define FS_NH(NT)    ((NT) == 1 ? 4 : ((NT) == 2 ? 3 : 1))
#define FS_KSTEP(NT) (64 * FS_NH(NT)) /* elements of k per step */
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

/* 16 bytes from global memory, read-only, no L1 allocation (W is read once);
 * PF: with the 256-byte L2 prefetch hint (the next slab reads the other
 * half of those 256 bytes). */
template <bool PF> __device__ __forceinline__ uint4 fs_ldg(const char *p)
{
    uint4 r;
    if (PF)
        asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
            : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
            : "l"(p));
    else
        asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
            : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
            : "l"(p));
    return r;
}

__device__ __forceinline__ uint4 fs_shfl4(uint4 v, int src)
{
    v.x = __shfl_sync(FLS_FULL_MASK, v.x, src);
    v.y = __shfl_sync(FLS_FULL_MASK, v.y, src);
    v.z = __shfl_sync(FLS_FULL_MASK, v.z, src);
    v.w = __shfl_sync(FLS_FULL_MASK, v.w, src);
    return v;
}

/*
 * One slab, load layout -> mma layout. Loaded: w[q] (q = 0..3) holds, in
 * lane L, the 8 elements of chunk c = (L & 7) ^ 4 (q & 1) (8-element chunks
 * 0..7 of the slab) of row 4q + (L >> 3). Wanted (the v4 register layout):
 * f[e][s] in lane (g, t) = chunk 4e + t of row g + 8s. Source of f[e][s]:
 * row g + 8s sits in q = 2s + (g >> 2), lane (g & 3) * 8 + c' with
 * c' = (4e + t) ^ 4 (g >> 2), i.e. lane (g & 3) * 8 + t + 4 (e ^ (g >> 2)).
 * Each source lane feeds exactly one destination per (e, s), and it knows
 * which q that destination needs: q = 2s + (e ^ bit 2 of its own lane), so
 * the source selects the register and one shuffle per 32-bit word moves it.
 */
__device__ __forceinline__ void fs_to_frag(const uint4 (&w)[4], uint4 (&f)[2][2], int lane)
{
    const int g = lane >> 2, t = lane & 3;
    const bool sb = (lane >> 2) & 1;
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int src = (g & 3) * 8 + t + 4 * (e ^ (g >> 2));
#pragma unroll
        for (int s = 0; s < 2; s++)
            f[e][s] = fs_shfl4((sb != (e != 0)) ? w[2 * s + 1] : w[2 * s], src);
    }
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

template <int NT, bool BF16, bool PF>
__global__ void __launch_bounds__(FS_THREADS, 1) fls_fused_stream_kernel(fls_stream_args a)
{
    constexpr int NH = FS_NH(NT), KS = FS_KSTEP(NT);
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

    /* Slab h of step s into w (fs_to_frag's load layout). lp: this lane's
     * row (lane >> 3) of the group being loaded, at chunk lane & 7; row
     * 4q + (lane >> 3) is q row quads further, at chunk (lane & 7) ^ 4 for
     * odd q (cflip bytes away). Rows past V and columns past D read as zeros
     * (H's padding is zero too, and garbage W times zero could be NaN; rows
     * past V are never sampled); a slab wholly past D is not loaded (nor
     * computed). */
    const int64_t quad_bytes = 4 * a.ldw * 2;
    const int cflip = (((lane & 7) ^ 4) - (lane & 7)) * 16;
    const char *lp = a.W;
    int lrows = 16; /* rows of the loaded group below V */
    auto set_rows = [&](int64_t gr) {
        const int64_t r = gr * 16;
        lrows = a.V - r < 16 ? (int)(a.V - r) : 16;
        lp = a.W + ((r + (lane >> 3)) * a.ldw + (lane & 7) * 8) * 2;
    };
    auto load = [&](uint4(&w)[4], int s, int h) {
        const int k0 = s * KS + h * 64;
        const char *p = lp + (int64_t)k0 * 2;
        if (lrows == 16 && (!tail_k || s < a.nst - 1)) {
#pragma unroll
            for (int q = 0; q < 4; q++)
                w[q] = fs_ldg<PF>(p + q * quad_bytes + (q & 1) * cflip);
        } else if (k0 < a.D) {
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const bool ok = 4 * q + (lane >> 3) < lrows && k0 + (((lane & 7) ^ ((q & 1) << 2)) * 8) < a.D;
                w[q] = ok ? fs_ldg<PF>(p + q * quad_bytes + (q & 1) * cflip) : make_uint4(0, 0, 0, 0);
            }
        }
    };

    uint4 raw[NH][4];
    const bool active = grp < ge;
    if (active) {
        set_rows(grp);
#pragma unroll
        for (int h = 0; h < NH; h++)
            load(raw[h], 0, h);
    }

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
    unsigned bad = 0; /* bit 0: a NaN logit; bit 1: l / T overflowed (one register: no spill) */
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
        if (more && ngrp != grp)
            set_rows(ngrp);
#pragma unroll
        for (int h = 0; h < NH; h++) {
            /* warp-uniform: slab wholly past D (last step only) */
            const bool hv = !tail_k || st * KS + h * 64 < a.D;
            uint4 f[2][2];
            if (hv)
                fs_to_frag(raw[h], f, lane);
            if (more)
                load(raw[h], nst_, h);
            if (!hv)
                continue;
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const uint32_t ha = hl + (uint32_t)((st * KS + h * 64 + e * 32) * 2);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    if (nt * 8 < a.B) {
                        const uint4 hv4 = fs_lds(ha + (uint32_t)(nt * 8 * hpitch));
                        fs_mma<BF16>(acc[nt], f[e][0].x, f[e][1].x, f[e][0].y, f[e][1].y, hv4.x, hv4.y);
                        fs_mma<BF16>(acc[nt], f[e][0].z, f[e][1].z, f[e][0].w, f[e][1].w, hv4.z, hv4.w);
                    }
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
                    const float x0 = fls_temper(l0, T);
                    const float x1 = ok1 ? fls_temper(l1, T) : -INFINITY;
                    /* rare: x = NaN or inf where l is not -inf (a NaN or +inf logit, or l / T
                     * overflowed); which one is decided off the hot path */
                    if (!(fabsf(x0) <= __FLT_MAX__) && l0 != -INFINITY)
                        bad |= fls_bad_logit(l0) ? 1u : 2u;
                    if (ok1 && !(fabsf(x1) <= __FLT_MAX__) && l1 != -INFINITY)
                        bad |= fls_bad_logit(l1) ? 1u : 2u;
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
        st = nst_;
        grp = ngrp;
    }

    /* lanes -> one value per (warp, column): reduce over g (lane bits 2-4) */
    if (__any_sync(FLS_FULL_MASK, bad & 1u) && lane == 0)
        *a.ws.nanflag = a.ws.epoch;
    if (__any_sync(FLS_FULL_MASK, bad & 2u) && lane == 0)
        *a.ws.tempflag = a.ws.epoch;
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
    const unsigned code = fls_finalize_status(a.B, a.ws, lane);
    if (tid == 0) {
        a.ws.status[0] = a.ws.epoch;
        a.ws.status[1] = code;
    }
    if (code)
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

template <int NT, bool BF16, bool PF>
static cudaError_t fs_launch(const fls_stream_args &a, int grid, cudaStream_t st)
{
    const int bytes = (int)fs_dyn_smem(a.B, a.D);
    cudaError_t e = cudaFuncSetAttribute(fls_fused_stream_kernel<NT, BF16, PF>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess)
        return e;
    fls_fused_stream_kernel<NT, BF16, PF><<<(unsigned)grid, FS_THREADS, bytes, st>>>(a);
    return cudaGetLastError();
}

template <int NT>
static cudaError_t fs_launch_nt(const fls_stream_args &a, bool bf, bool pf, int grid, cudaStream_t st)
{
    if (bf)
        return pf ? fs_launch<NT, true, true>(a, grid, st) : fs_launch<NT, true, false>(a, grid, st);
    return pf ? fs_launch<NT, false, true>(a, grid, st) : fs_launch<NT, false, false>(a, grid, st);
}

cudaError_t fls_launch_fused_stream(const void *W, int64_t ldw, const void *H, int64_t ldh, fls_dtype dt,
                                    int B, int64_t V, int64_t D, const fls_row_params *rows, const fls_ws &ws,
                                    int grid, int64_t draws_total, int64_t *tokens, float *lse,
                                    float *logprobs, int l2_prefetch, cudaStream_t st)
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
    const bool bf = dt == FLS_DTYPE_BF16, pf = l2_prefetch != 0;
    switch (fs_nt(B)) {
    case 1:
        return fs_launch_nt<1>(a, bf, pf, grid, st);
    case 2:
        return fs_launch_nt<2>(a, bf, pf, grid, st);
    case 4:
        return fs_launch_nt<4>(a, bf, pf, grid, st);
    default:
        return cudaErrorInvalidValue;
    }
}
