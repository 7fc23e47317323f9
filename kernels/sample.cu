/*
 * sample.cu — sampling from materialized logits, the final reduction, the
 * SIMT GEMM fallback and the multinomial baseline.
 *
 * Segment sampler: L is (B, V) fp32; one warp per (row, 1024-token segment).
 * Bytes: 4 B V read once. Work: one Philox4x32-10 block per token pair per
 * draw; the two logs of the Gumbel transform only for tokens that might win
 * (fls_draw_skip in common.cuh, bounds of fls_gumbel_bound.h), about 1-2 % of
 * them on N(0, 1.7) tempered logits at 1024-token segments.
 */
#include "kernels/common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define FLS_SEG_WARPS 8

/* Rule: the sampling rule (variants/). MINB: blocks per SM the register
 * allocation must allow: 1 (no cap; the default, 63 registers, 4 blocks
 * fit) or 5 (the benchmark's capped variant, <= 48 registers;
 * fls_cuda_opts.seg_cap5) */
template <class Rule, int MINB>
__global__ void __launch_bounds__(FLS_SEG_WARPS * 32, MINB)
    fls_segments_kernel(const float *__restrict__ L, int64_t ldl, int B, int64_t vn, uint64_t v_off,
                        int e_off, int seg, const fls_row_params *__restrict__ rows, fls_ws ws)
{
    /* the upper-bound table in shared memory (random indices: a shared-memory
     * gather, no constant-cache serialisation) and one queue per warp */
    __shared__ float s_gup[FLS_GB_N];
    __shared__ fls_candq s_q[FLS_SEG_WARPS];
    const bool skip = ws.gup != NULL;
    if (skip) {
        for (int i = threadIdx.x; i < FLS_GB_N; i += blockDim.x)
            s_gup[i] = ws.gup[i];
        __syncthreads();
    }
    const int lane = threadIdx.x & 31;
    const int64_t nseg = (vn + seg - 1) / seg;
    const int64_t items = nseg * B;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t it = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); it < items; it += warps) {
        int b = (int)(it / nseg);
        int64_t sg = it - (int64_t)b * nseg;
        int64_t c0 = sg * seg;
        int n = (int)min((int64_t)seg, vn - c0);
        fls_row_params rp = rows[b];
        fls_warp_segment<Rule>(L + (int64_t)b * ldl + c0, n, v_off + (uint64_t)c0, b, e_off + (int)sg, rp, ws,
                               lane, skip ? s_gup : NULL, skip ? &s_q[threadIdx.x >> 5] : NULL);
    }
}

/* The grouped method: one warp per (row, segment of whole groups). */
__global__ void __launch_bounds__(FLS_SEG_WARPS * 32)
    fls_segments_grouped_kernel(const float *__restrict__ L, int64_t ldl, int B, int64_t vn, uint64_t v_off,
                                int e_off, int seg, const fls_row_params *__restrict__ rows, fls_ws ws)
{
    const int lane = threadIdx.x & 31;
    const int64_t nseg = (vn + seg - 1) / seg;
    const int64_t items = nseg * B;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t it = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); it < items; it += warps) {
        int b = (int)(it / nseg);
        int64_t sg = it - (int64_t)b * nseg;
        int64_t c0 = sg * seg;
        int n = (int)min((int64_t)seg, vn - c0);
        const fls_row_params rp = rows[b];
        fls_warp_segment_grouped(L + (int64_t)b * ldl + c0, n, v_off + (uint64_t)c0, b, e_off + (int)sg, rp,
                                 ws, lane);
    }
}

int fls_segment_len(int64_t B)
{
    /* short segments at small B, so that every SM has warps to run */
    return B >= 16 ? FLS_SEG : (B >= 4 ? 256 : 128);
}

int fls_segment_len_grouped(int64_t B, int g)
{
    /* whole groups; long segments (their best group is the threshold that
     * spares the other groups' token noise) */
    const int s = B >= 64 ? 4096 : fls_segment_len(B);
    return s > g ? s : g;
}

cudaError_t fls_launch_segments(const float *L, int64_t ldl, int B, int64_t vn, uint64_t v_off, int e_off,
                                const fls_row_params *rows, const fls_ws &ws, int sm_count, int cap5,
                                cudaStream_t st)
{
    const int seg = ws.group_size ? fls_segment_len_grouped(B, ws.group_size) : fls_segment_len(B);
    int64_t items = ((vn + seg - 1) / seg) * B;
    int64_t blocks = (items + 7) / 8;
    int64_t cap = (int64_t)sm_count * 8; /* 8 blocks of 8 warps per SM, grid-stride beyond */
    if (blocks > cap)
        blocks = cap;
    if (ws.group_size) {
        fls_segments_grouped_kernel<<<(unsigned)blocks, FLS_SEG_WARPS * 32, 0, st>>>(L, ldl, B, vn, v_off,
                                                                                     e_off, seg, rows, ws);
        return cudaGetLastError();
    }
    typedef fls_temperature_rule Rule; /* the one rule so far */
    if (cap5)
        fls_segments_kernel<Rule, 5>
            <<<(unsigned)blocks, FLS_SEG_WARPS * 32, 0, st>>>(L, ldl, B, vn, v_off, e_off, seg, rows, ws);
    else
        fls_segments_kernel<Rule, 1>
            <<<(unsigned)blocks, FLS_SEG_WARPS * 32, 0, st>>>(L, ldl, B, vn, v_off, e_off, seg, rows, ws);
    return cudaGetLastError();
}

/* One warp per (row, draw): the rule's merge over the entries, the
 * log-sum-exp from partials, the rule's finalize (common.cuh,
 * fls_finalize_item). */
template <class Rule>
__global__ void fls_finalize_kernel(const fls_row_params *__restrict__ rows, int B, int64_t draws_total,
                                    fls_ws ws, int64_t *tokens, float *lse_out, float *logprobs)
{
    const int lane = threadIdx.x & 31;
    const int64_t w = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    /* Errors are global: every warp checks them so that nothing is written. */
    const unsigned code = fls_finalize_status(B, ws, lane);
    if (blockIdx.x == 0 && threadIdx.x == 0)
        fls_write_status(ws, code);
    if (code || w >= (int64_t)B * ws.nd)
        return;
    fls_finalize_item<Rule>(rows, draws_total, ws, tokens, lse_out, logprobs, w, lane);
}

__global__ void fls_finalize_grouped_kernel(const fls_row_params *__restrict__ rows, int B,
                                            int64_t draws_total, fls_ws ws, int64_t *tokens, float *lse_out,
                                            float *logprobs)
{
    const int lane = threadIdx.x & 31;
    const int64_t w = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const unsigned code = fls_finalize_status(B, ws, lane);
    if (blockIdx.x == 0 && threadIdx.x == 0)
        fls_write_status(ws, code);
    if (code || w >= (int64_t)B * ws.nd)
        return;
    fls_finalize_item_grouped(rows, draws_total, ws, tokens, lse_out, logprobs, w, lane);
}

cudaError_t fls_launch_finalize(const fls_row_params *rows, int B, int64_t draws_total, const fls_ws &ws,
                                int64_t *tokens, float *lse, float *logprobs, cudaStream_t st)
{
    int64_t warps = (int64_t)B * ws.nd;
    if (ws.group_size) {
        fls_finalize_grouped_kernel<<<(unsigned)((warps + 7) / 8), 256, 0, st>>>(rows, B, draws_total, ws,
                                                                                 tokens, lse, logprobs);
        return cudaGetLastError();
    }
    fls_finalize_kernel<fls_temperature_rule>
        <<<(unsigned)((warps + 7) / 8), 256, 0, st>>>(rows, B, draws_total, ws, tokens, lse, logprobs);
    return cudaGetLastError();
}

/* ---- SIMT GEMM for any dtype pair and any alignment ---- */

__device__ __forceinline__ float fls_load_elem(const void *p, fls_dtype dt, int64_t i)
{
    switch (dt) {
    case FLS_DTYPE_BF16:
        return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case FLS_DTYPE_F16:
        return __half2float(((const __half *)p)[i]);
    default:
        return ((const float *)p)[i];
    }
}

#define SIMT_TV 64
#define SIMT_TB 16
#define SIMT_TK 32

/* Block: 64 vocab x 16 batch outputs, 256 threads, each 4 vocab x 1 batch. */
__global__ void fls_simt_logits_kernel(const void *W, fls_dtype wd, int64_t ldw, const void *H, fls_dtype hd,
                                       int64_t ldh, int B, int64_t D, int64_t v0, int64_t vn, float *L,
                                       int64_t ldl)
{
    __shared__ float ws_[SIMT_TK][SIMT_TV + 1];
    __shared__ float hs_[SIMT_TB][SIMT_TK + 1];
    const int64_t vb = (int64_t)blockIdx.x * SIMT_TV;
    const int bb = blockIdx.y * SIMT_TB;
    const int tx = threadIdx.x & 15; /* vocab group: rows tx + 16 r */
    const int ty = threadIdx.x >> 4; /* batch row */
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t k0 = 0; k0 < D; k0 += SIMT_TK) {
        for (int i = threadIdx.x; i < SIMT_TV * SIMT_TK; i += 256) {
            int r = i / SIMT_TK, k = i % SIMT_TK;
            int64_t v = vb + r;
            ws_[k][r] = (v < vn && k0 + k < D) ? fls_load_elem(W, wd, (v0 + v) * ldw + k0 + k) : 0.0f;
        }
        for (int i = threadIdx.x; i < SIMT_TB * SIMT_TK; i += 256) {
            int r = i / SIMT_TK, k = i % SIMT_TK;
            hs_[r][k] =
                (bb + r < B && k0 + k < D) ? fls_load_elem(H, hd, (int64_t)(bb + r) * ldh + k0 + k) : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int k = 0; k < SIMT_TK; k++) {
            float h = hs_[ty][k];
#pragma unroll
            for (int r = 0; r < 4; r++)
                acc[r] = __fmaf_rn(ws_[k][tx + 16 * r], h, acc[r]);
        }
        __syncthreads();
    }
    if (bb + ty < B) {
#pragma unroll
        for (int r = 0; r < 4; r++) {
            int64_t v = vb + tx + 16 * r;
            if (v < vn)
                L[(int64_t)(bb + ty) * ldl + v] = acc[r];
        }
    }
}

cudaError_t fls_launch_simt_logits(const void *W, fls_dtype wd, int64_t ldw, const void *H, fls_dtype hd,
                                   int64_t ldh, int B, int64_t D, int64_t v0, int64_t vn, float *L,
                                   int64_t ldl, cudaStream_t st)
{
    dim3 grid((unsigned)((vn + SIMT_TV - 1) / SIMT_TV), (unsigned)((B + SIMT_TB - 1) / SIMT_TB));
    fls_simt_logits_kernel<<<grid, 256, 0, st>>>(W, wd, ldw, H, hd, ldh, B, D, v0, vn, L, ldl);
    return cudaGetLastError();
}

/* ---- multinomial baseline: softmax into HBM, then inverse CDF ---- */

#define SM_THREADS 1024

__device__ __forceinline__ double fls_block_sum_d(double v, double *red)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(FLS_FULL_MASK, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    double t = 0.0;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++)
        t += red[i];
    return t;
}

__device__ __forceinline__ float fls_block_max_f(float v, float *red)
{
    v = fls_warp_maxf(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = -INFINITY;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++)
        t = fmaxf(t, red[i]);
    return t;
}

/* One block per row: rowmax = max x, P[v] = exp(x_v - rowmax), rowsum = sum P.
 * Greedy rows (T = 0) get the one-hot of the first maximum. */
__global__ void fls_softmax_kernel(const float *__restrict__ L, int64_t ldl, int B, int64_t V,
                                   const fls_row_params *__restrict__ rows, float *P, float *rowmax,
                                   float *rowsum, fls_ws ws)
{
    __shared__ double redd[32];
    __shared__ float redf[32];
    __shared__ unsigned long long redu[32];
    const int b = blockIdx.x;
    const float T = rows[b].temperature;
    const float *l = L + (int64_t)b * ldl;
    float *p = P + (int64_t)b * V;
    float mx = -INFINITY;
    int nan = 0, ovf = 0;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
        float x = l[v];
        nan |= fls_bad_logit(x);
        const float t = fls_temper(x, T);
        ovf |= fls_temper_overflows(x, t);
        mx = fmaxf(mx, t);
    }
    nan = __syncthreads_or(nan);
    if (__syncthreads_or(ovf) && threadIdx.x == 0)
        *ws.tempflag = ws.epoch;
    mx = fls_block_max_f(mx, redf);
    if (threadIdx.x == 0) {
        if (nan)
            *ws.nanflag = ws.epoch;
        if (mx > -INFINITY)
            ws.finite[b] = ws.epoch;
        rowmax[b] = mx;
    }
    if (nan || !(mx > -INFINITY))
        return;
    if (!fls_temperature_noisy(T)) { /* greedy: the one-hot of the first maximum */
        unsigned long long best = 0;
        for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
            unsigned long long pk = fls_pack(l[v], (uint32_t)v);
            best = pk > best ? pk : best;
        }
        best = fls_warp_max_u64(best);
        __syncthreads();
        if ((threadIdx.x & 31) == 0)
            redu[threadIdx.x >> 5] = best;
        __syncthreads();
        for (int i = 0; i < (int)(blockDim.x >> 5); i++)
            best = redu[i] > best ? redu[i] : best;
        int64_t arg = (int64_t)(0xffffffffu - (uint32_t)best);
        for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
            p[v] = v == arg ? 1.0f : 0.0f;
        if (threadIdx.x == 0)
            rowsum[b] = 1.0f;
        return;
    }
    double s = 0.0;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
        float e = fls_lsef_exp(fls_temper(l[v], T), mx);
        p[v] = e;
        s += e;
    }
    s = fls_block_sum_d(s, redd);
    if (threadIdx.x == 0)
        rowsum[b] = (float)s;
}

cudaError_t fls_launch_softmax(const float *L, int64_t ldl, int B, int64_t V, const fls_row_params *rows,
                               float *P, float *rowmax, float *rowsum, const fls_ws &ws, cudaStream_t st)
{
    fls_softmax_kernel<<<B, SM_THREADS, 0, st>>>(L, ldl, B, V, rows, P, rowmax, rowsum, ws);
    return cudaGetLastError();
}

/* Inclusive block scan in double; *chunk gets the block total (all threads). */
__device__ __forceinline__ double fls_block_scan_d(double v, double *warp_tot, double *chunk)
{
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        double t = __shfl_up_sync(FLS_FULL_MASK, v, o);
        if (lane >= o)
            v += t;
    }
    __syncthreads();
    if (lane == 31)
        warp_tot[wid] = v;
    __syncthreads();
    double off = 0.0;
    for (int i = 0; i < wid; i++)
        off += warp_tot[i];
    v += off;
    if (threadIdx.x == blockDim.x - 1)
        *chunk = v;
    __syncthreads();
    return v;
}

#define MN_MAX_DRAWS 64

/* One block per row. Pass 1 sums P with the scan itself (total = the last
 * inclusive prefix), pass 2 picks, for each draw, the first token with
 * P > 0 whose inclusive prefix exceeds u * total. Zero-probability tokens
 * (masked, or underflowed) are never picked. The uniform u comes from the
 * contract (reserved token index FLS_MULTINOMIAL_TOKEN), 64 bits, in double. */
__global__ void fls_multinomial_kernel(const float *__restrict__ L, int64_t ldl, const float *__restrict__ P,
                                       int B, int64_t V, const fls_row_params *__restrict__ rows,
                                       const float *__restrict__ rowmax, const float *__restrict__ rowsum,
                                       fls_ws ws, int64_t draws_total, int64_t *tokens, float *lse_out,
                                       float *logprobs)
{
    __shared__ double wt[32];
    __shared__ double chunk;
    __shared__ double target[MN_MAX_DRAWS];
    __shared__ unsigned long long found[MN_MAX_DRAWS];
    __shared__ unsigned long long lastpos;
    __shared__ unsigned code;
    const int b = blockIdx.x;
    /* the finalize kernel's status check (errors are global: no block writes) */
    if (threadIdx.x < 32) {
        const unsigned c = fls_finalize_status(B, ws, threadIdx.x);
        if (threadIdx.x == 0) {
            code = c;
            if (b == 0)
                fls_write_status(ws, c);
        }
    }
    __syncthreads();
    if (code != FLS_SC_OK)
        return;
    const float *p = P + (int64_t)b * V;
    const fls_row_params rp = rows[b];
    double total = 0.0;
    for (int64_t c = 0; c < V; c += blockDim.x) {
        int64_t v = c + threadIdx.x;
        fls_block_scan_d(v < V ? (double)p[v] : 0.0, wt, &chunk);
        total += chunk;
        __syncthreads();
    }
    if (threadIdx.x < ws.nd) {
        uint32_t d = fls_noise_draw(ws, threadIdx.x);
        double u = fls_uniform_from_bits(fls_noise_bits(rp.seed, rp.offset, d, FLS_MULTINOMIAL_TOKEN));
        target[threadIdx.x] = u * total;
        found[threadIdx.x] = ~0ull;
    }
    if (threadIdx.x == 0)
        lastpos = 0;
    __syncthreads();
    double run = 0.0;
    for (int64_t c = 0; c < V; c += blockDim.x) {
        int64_t v = c + threadIdx.x;
        double x = v < V ? (double)p[v] : 0.0;
        double hi = run + fls_block_scan_d(x, wt, &chunk);
        if (x > 0.0) {
            for (int j = 0; j < ws.nd; j++)
                if (hi > target[j])
                    atomicMin(&found[j], (unsigned long long)v);
            atomicMax(&lastpos, (unsigned long long)v);
        }
        run += chunk;
        __syncthreads();
    }
    if (threadIdx.x < ws.nd) {
        unsigned long long f = found[threadIdx.x];
        int64_t tok = (int64_t)(f != ~0ull ? f : lastpos); /* rounding guard: target >= last prefix */
        int64_t d = (int64_t)ws.draw_base + threadIdx.x;
        const float T = rp.temperature;
        const bool greedy = !fls_temperature_noisy(T);
        double lse = fls_lse_value((double)rowmax[b], (double)rowsum[b], greedy);
        tokens[(int64_t)b * draws_total + d] = tok;
        if (logprobs)
            logprobs[(int64_t)b * draws_total + d] =
                greedy ? 0.0f : (float)((double)fls_temper(L[(int64_t)b * ldl + tok], T) - lse);
        if (lse_out && d == 0)
            lse_out[b] = (float)lse;
    }
}

cudaError_t fls_launch_multinomial(const float *L, int64_t ldl, const float *P, int B, int64_t V,
                                   const fls_row_params *rows, const float *rowmax, const float *rowsum,
                                   const fls_ws &ws, int64_t draws_total, int64_t *tokens, float *lse,
                                   float *logprobs, cudaStream_t st)
{
    if (ws.nd > MN_MAX_DRAWS)
        return cudaErrorInvalidValue;
    fls_multinomial_kernel<<<B, SM_THREADS, 0, st>>>(L, ldl, P, B, V, rows, rowmax, rowsum, ws, draws_total,
                                                     tokens, lse, logprobs);
    return cudaGetLastError();
}

/* ---- rows from device arrays (params_on_device: CUDA graphs) ---- */

__global__ void fls_pack_rows_kernel(int B, const float *temperature, float temperature_value,
                                     const uint64_t *row_seeds, uint64_t seed, const uint64_t *row_offsets,
                                     uint64_t offset, fls_row_params *rows, fls_ws ws)
{
    for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < B; b += gridDim.x * blockDim.x) {
        float T = temperature ? temperature[b] : temperature_value;
        if (!(T >= 0.0f && T < INFINITY)) {
            *ws.tempflag = ws.epoch; /* FLS_ERR_TEMPERATURE: nothing is written */
            T = 1.0f;
        }
        fls_row_params r;
        r.temperature = T == 0.0f ? 0.0f : T; /* -0 is greedy too */
        r.pad_ = 0;
        r.seed = row_seeds ? row_seeds[b] : fls_row_seed_derive(seed, (uint64_t)b);
        r.offset = row_offsets ? row_offsets[b] : offset;
        rows[b] = r;
    }
}

cudaError_t fls_launch_pack_rows(int B, const float *temperature, float temperature_value,
                                 const uint64_t *row_seeds, uint64_t seed, const uint64_t *row_offsets,
                                 uint64_t offset, fls_row_params *rows, const fls_ws &ws, cudaStream_t st)
{
    const int blocks = (B + 255) / 256 < 1024 ? (B + 255) / 256 : 1024;
    fls_pack_rows_kernel<<<blocks, 256, 0, st>>>(B, temperature, temperature_value, row_seeds, seed,
                                                 row_offsets, offset, rows, ws);
    return cudaGetLastError();
}
