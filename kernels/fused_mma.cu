/*
 * fused_mma.cu — the fused LM-head + Gumbel-max kernel on tensor cores.
 *
 * W is (V, D) and H is (B, D), both bf16 or both f16, rows 16-byte aligned,
 * D % 8 == 0. A tile is 128 vocabulary rows x TB batch rows; a persistent CTA
 * (256 threads, 8 warps x 16 vocabulary rows) streams its tiles' K-blocks of
 * 64 through a 4-stage cp.async pipeline that runs across tile boundaries, so
 * the next tile's loads are in flight while the epilogue samples. Products on
 * mma.sync.m16n8k16 with fp32 accumulation; the accumulators go to shared
 * memory and the warp sampler (common.cuh) turns them into partial winners:
 * logits never reach HBM.
 *
 * Napkin math (D = 4096, V = 151936, bf16): W is 1.245 GB, read once; at the
 * H200's ~4.3 TB/s read bandwidth that is ~0.29 ms. FLOPs 2 B V D = 1.25 GFLOP
 * per batch row: memory-bound up to B ~ 100 at mma.sync rates. The noise adds
 * ~120 integer/FP32 instructions per (token, row, draw) in the epilogue.
 */
#include "common.cuh"

#define TV       FLS_MMA_TV
#define BK       64
#define STAGES   4
#define NTHREADS 256
#define SP       (TV + 4) /* pitch of the logits tile in floats: conflict-free fragment stores */

struct fls_mma_args {
    const char *W;
    int64_t ldw; /* elements */
    const char *H;
    int64_t ldh;
    int B;
    int64_t V;
    int D;
    int nvt, nbt, KB, nseg;
    const fls_row_params *rows;
    fls_ws ws;
};

__device__ __forceinline__ uint32_t fls_smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void fls_cp_async16(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void fls_cp_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}

template <int N> __device__ __forceinline__ void fls_cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void fls_ldsm_x4(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3,
                                            uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

__device__ __forceinline__ void fls_ldsm_x2(uint32_t &r0, uint32_t &r1, uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r0), "=r"(r1)
                 : "r"(addr));
}

template <bool BF16>
__device__ __forceinline__ void fls_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    if (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Byte offset of 16-byte chunk c of row r in a [rows][64] 16-bit tile, XOR
 * swizzled so that ldmatrix's 8 row reads hit 8 different bank groups. */
__device__ __forceinline__ uint32_t fls_swz(int r, int c)
{
    return (uint32_t)((r * BK + ((c ^ (r & 7)) << 3)) << 1);
}

template <int TB> struct fls_mma_smem {
    static constexpr int w_stage = TV * BK * 2;
    static constexpr int h_stage = TB * BK * 2;
    static constexpr int h_base = STAGES * w_stage;
    static constexpr int s_base = STAGES * (w_stage + h_stage);
    static constexpr int bytes = s_base + TB * SP * 4;
};

template <int TB, bool BF16>
__global__ void __launch_bounds__(NTHREADS, 1) fls_fused_mma_kernel(fls_mma_args a)
{
    extern __shared__ __align__(128) unsigned char smem[];
    typedef fls_mma_smem<TB> L;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t sbase = fls_smem_u32(smem);
    float *S = (float *)(smem + L::s_base);
    const int ntiles = a.nvt * a.nbt;
    const int my_tiles = (ntiles - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x;
    const int64_t total = (int64_t)my_tiles * a.KB;

    /* The loader walks (tile, K-block) in order with counters: no 64-bit
     * division in the hot loop. */
    int ld_ti = 0, ld_kb = 0, ld_stage = 0;
    int64_t ld_g = 0;
    auto load = [&]() {
        if (ld_g >= total)
            return;
        const int t = (int)blockIdx.x + ld_ti * (int)gridDim.x;
        const int bt = t % a.nbt, vt = t / a.nbt;
        const int stage = ld_stage;
        const int k0 = ld_kb * BK;
        ld_g++;
        ld_stage = ld_stage == STAGES - 1 ? 0 : ld_stage + 1;
        if (++ld_kb == a.KB) {
            ld_kb = 0;
            ld_ti++;
        }
#pragma unroll
        for (int i = 0; i < (TV * 8) / NTHREADS; i++) {
            const int idx = tid + NTHREADS * i, r = idx >> 3, c = idx & 7;
            const int64_t v = (int64_t)vt * TV + r;
            const int k = k0 + c * 8;
            const bool ok = v < a.V && k < a.D;
            const char *src = ok ? a.W + (v * a.ldw + k) * 2 : a.W;
            fls_cp_async16(sbase + stage * L::w_stage + fls_swz(r, c), src, ok ? 16 : 0);
        }
        for (int idx = tid; idx < TB * 8; idx += NTHREADS) {
            const int r = idx >> 3, c = idx & 7;
            const int b = bt * TB + r;
            const int k = k0 + c * 8;
            const bool ok = b < a.B && k < a.D;
            const char *src = ok ? a.H + ((int64_t)b * a.ldh + k) * 2 : a.H;
            fls_cp_async16(sbase + L::h_base + stage * L::h_stage + fls_swz(r, c), src, ok ? 16 : 0);
        }
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        load();
        fls_cp_commit();
    }
    float acc[TB / 8][4];
#pragma unroll
    for (int j = 0; j < TB / 8; j++)
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

    int stage = 0, c_ti = 0, c_kb = 0;
    for (int64_t g = 0; g < total; g++) {
        fls_cp_wait<STAGES - 2>();
        __syncthreads();
        load();
        fls_cp_commit();
        const uint32_t wst = sbase + stage * L::w_stage;
        const uint32_t hst = sbase + L::h_base + stage * L::h_stage;
#pragma unroll
        for (int ks = 0; ks < BK / 16; ks++) {
            uint32_t af[4];
            {
                const int mat = lane >> 3;
                const int row = warp * 16 + (mat & 1) * 8 + (lane & 7);
                fls_ldsm_x4(af[0], af[1], af[2], af[3], wst + fls_swz(row, ks * 2 + (mat >> 1)));
            }
            if (TB == 8) {
                const int mat = (lane >> 3) & 1;
                uint32_t b0, b1;
                fls_ldsm_x2(b0, b1, hst + fls_swz(lane & 7, ks * 2 + mat));
                fls_mma<BF16>(acc[0], af, b0, b1);
            } else {
#pragma unroll
                for (int j = 0; j < TB / 8; j += 2) {
                    const int mat = lane >> 3;
                    const int nrow = (j + (mat >> 1)) * 8 + (lane & 7);
                    uint32_t b0, b1, b2, b3;
                    fls_ldsm_x4(b0, b1, b2, b3, hst + fls_swz(nrow, ks * 2 + (mat & 1)));
                    fls_mma<BF16>(acc[j], af, b0, b1);
                    fls_mma<BF16>(acc[(j + 1) % (TB / 8)], af, b2, b3);
                }
            }
        }
        stage = stage == STAGES - 1 ? 0 : stage + 1;
        if (++c_kb == a.KB) {
            /* Epilogue: fragments -> S[b][v], then one warp per (row, segment). */
            const int t = (int)blockIdx.x + c_ti * (int)gridDim.x;
            c_kb = 0;
            c_ti++;
            const int bt = t % a.nbt, vt = t / a.nbt;
#pragma unroll
            for (int j = 0; j < TB / 8; j++) {
                const int col = j * 8 + 2 * (lane & 3), row = warp * 16 + (lane >> 2);
                S[col * SP + row] = acc[j][0];
                S[(col + 1) * SP + row] = acc[j][1];
                S[col * SP + row + 8] = acc[j][2];
                S[(col + 1) * SP + row + 8] = acc[j][3];
                acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
            }
            __syncthreads();
            const int nb = min(TB, a.B - bt * TB);
            const int seglen = TV / a.nseg;
            for (int item = warp; item < nb * a.nseg; item += NTHREADS / 32) {
                const int bl = item / a.nseg, sg = item - bl * a.nseg;
                const int b = bt * TB + bl;
                const int64_t v0 = (int64_t)vt * TV + (int64_t)sg * seglen;
                const int n = (int)max((int64_t)0, min((int64_t)seglen, a.V - v0));
                const fls_row_params rp = a.rows[b];
                /* 128-token segments: below FLS_SKIP_MIN_N, every key is computed */
                fls_warp_segment(S + bl * SP + sg * seglen, n, (uint64_t)v0, b, vt * a.nseg + sg, rp, a.ws,
                                 lane, NULL, NULL);
            }
            /* S is rewritten only after the next iteration's __syncthreads. */
        }
    }
    fls_cp_wait<0>();
}

int fls_mma_nseg(int B)
{
    return B >= 5 ? 1 : (B >= 3 ? 2 : (B == 2 ? 4 : 8));
}

template <int TB, bool BF16>
static cudaError_t fls_launch_tb(const fls_mma_args &a, int sm_count, cudaStream_t st)
{
    const int bytes = fls_mma_smem<TB>::bytes;
    cudaError_t e = cudaFuncSetAttribute(fls_fused_mma_kernel<TB, BF16>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess)
        return e;
    int occ = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fls_fused_mma_kernel<TB, BF16>, NTHREADS, bytes);
    if (e != cudaSuccess)
        return e;
    if (occ < 1)
        return cudaErrorInvalidConfiguration;
    int64_t ntiles = (int64_t)a.nvt * a.nbt;
    int64_t grid = (int64_t)occ * sm_count;
    if (grid > ntiles)
        grid = ntiles;
    fls_fused_mma_kernel<TB, BF16><<<(unsigned)grid, NTHREADS, bytes, st>>>(a);
    return cudaGetLastError();
}

cudaError_t fls_launch_fused_mma(const void *W, int64_t ldw, const void *H, int64_t ldh, fls_dtype dt, int B,
                                 int64_t V, int64_t D, int tile_b, const fls_row_params *rows,
                                 const fls_ws &ws, int sm_count, cudaStream_t st)
{
    fls_mma_args a;
    a.W = (const char *)W;
    a.ldw = ldw;
    a.H = (const char *)H;
    a.ldh = ldh;
    a.B = B;
    a.V = V;
    a.D = (int)D;
    a.nvt = (int)((V + TV - 1) / TV);
    a.nbt = (B + tile_b - 1) / tile_b;
    a.KB = (int)((D + BK - 1) / BK);
    a.nseg = fls_mma_nseg(B);
    a.rows = rows;
    a.ws = ws;
    const bool bf = dt == FLS_DTYPE_BF16;
    switch (tile_b) {
    case 8:
        return bf ? fls_launch_tb<8, true>(a, sm_count, st) : fls_launch_tb<8, false>(a, sm_count, st);
    case 16:
        return bf ? fls_launch_tb<16, true>(a, sm_count, st) : fls_launch_tb<16, false>(a, sm_count, st);
    case 32:
        return bf ? fls_launch_tb<32, true>(a, sm_count, st) : fls_launch_tb<32, false>(a, sm_count, st);
    case 64:
        return bf ? fls_launch_tb<64, true>(a, sm_count, st) : fls_launch_tb<64, false>(a, sm_count, st);
    default:
        return cudaErrorInvalidValue;
    }
}
