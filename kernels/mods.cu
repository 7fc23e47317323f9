/*
 * mods.cu — masks, logit bias and penalties on the CUDA engine (docs/RULES.md,
 * "Masks, bias and penalties"). A call stages them once: the caller's
 * arrays (host arrays are copied into the workspace; with params_on_device
 * they are read where they are, so a CUDA graph replays their current
 * values), then one block per row sorts the row's seen and bias lists by
 * token in shared memory, checks every value (a bad one raises the call's
 * parameter flag: FLS_ERR_PARAM, nothing written) and writes the row's
 * merged, sorted entries. The sampling paths then change each raw logit
 * once, before anything reads it: fls_launch_mods_apply over logits in
 * device memory (the caller's, copied; or a buffer the matmul wrote).
 */
#include "kernels/engine.cuh"

#include <string.h>

#define FLS_MODS_THREADS 512
#define FLS_MODS_TILE    2048
/* a sort key: place << 15 | list << 14 | index in the list (index < 2^14), with
 * place = fls_mods_order(token, ...): the token itself, or its place in the
 * wgmma launch's visiting order */
#define FLS_MODS_IDX_BITS 14
#define FLS_MODS_NONE     (~0ull)

static_assert(FLS_CUDA_MODS_MAX <= (1 << FLS_MODS_IDX_BITS), "the sort key's index field");

__device__ __forceinline__ uint64_t fls_mods_key_token(unsigned long long k)
{
    return k >> (FLS_MODS_IDX_BITS + 1);
}

/* Row blockIdx.x of the caller's lists (raw: device pointers) into its
 * sorted entries e[b * per ...], n[b] and its penalties pen[3 b ...]; P is
 * a power of two >= seen_k + bias_k. */
__global__ void __launch_bounds__(FLS_MODS_THREADS)
    fls_mods_prep_kernel(fls_mods_raw raw, int64_t V, int P, int64_t per, int64_t slots, int64_t kmax,
                         fls_mod_dev *e, int *n, float *pen, unsigned *flag)
{
    extern __shared__ unsigned long long keys[];
    __shared__ int scan[FLS_MODS_THREADS];
    const int64_t b = blockIdx.x;
    const int tid = threadIdx.x, T = blockDim.x;
    const int64_t S = raw.seen_k, K = raw.bias_k;
    bool bad = false;
    if (tid == 0) {
        const float r = raw.row_repetition ? raw.row_repetition[b] : raw.repetition;
        const float p = raw.row_presence ? raw.row_presence[b] : raw.presence;
        const float f = raw.row_frequency ? raw.row_frequency[b] : raw.frequency;
        bad = !(isfinite(r) && r > 0.0f) || !isfinite(p) || !isfinite(f);
        pen[3 * b + 0] = r;
        pen[3 * b + 1] = p;
        pen[3 * b + 2] = f;
    }
    for (int i = tid; i < P; i += T) {
        unsigned long long k = FLS_MODS_NONE;
        if (i < S) {
            const int64_t id = raw.seen_ids[b * S + i];
            const int32_t c = raw.seen_counts ? raw.seen_counts[b * S + i] : 0;
            if (id != -1) {
                if (id < 0 || id >= V || c < 0)
                    bad = true;
                else
                    k = (unsigned long long)fls_mods_order((uint64_t)id, slots, kmax)
                            << (FLS_MODS_IDX_BITS + 1) |
                        (unsigned long long)i;
            }
        } else if (i < S + K) {
            const int64_t j = i - S;
            const int64_t id = raw.bias_ids[b * K + j];
            if (id != -1) {
                if (id < 0 || id >= V || !isfinite(raw.bias_values[b * K + j]))
                    bad = true;
                else
                    k = (unsigned long long)fls_mods_order((uint64_t)id, slots, kmax)
                            << (FLS_MODS_IDX_BITS + 1) |
                        1ull << FLS_MODS_IDX_BITS | (unsigned long long)j;
            }
        }
        keys[i] = k;
    }
    /* bitonic sort, ascending */
    for (int k = 2; k <= P; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            __syncthreads();
            for (int i = tid; i < P; i += T) {
                const int ixj = i ^ j;
                if (ixj > i) {
                    const unsigned long long a = keys[i], c = keys[ixj];
                    if ((a > c) == ((i & k) == 0)) {
                        keys[i] = c;
                        keys[ixj] = a;
                    }
                }
            }
        }
    __syncthreads();
    /* an entry starts at each new token; the same token twice in one list is an error */
    const int span = (P + T - 1) / T, i0 = tid * span, i1 = i0 + span < P ? i0 + span : P;
    int cnt = 0;
    for (int i = i0; i < i1; i++) {
        const unsigned long long k = keys[i];
        if (k == FLS_MODS_NONE)
            break;
        const unsigned long long prev = i > 0 ? keys[i - 1] : FLS_MODS_NONE;
        if (i > 0 && fls_mods_key_token(prev) == fls_mods_key_token(k)) {
            if (((prev ^ k) >> FLS_MODS_IDX_BITS & 1ull) == 0)
                bad = true;
        } else {
            cnt++;
        }
    }
    scan[tid] = cnt;
    __syncthreads();
    for (int d = 1; d < T; d <<= 1) { /* inclusive scan (Hillis-Steele) */
        const int add = tid >= d ? scan[tid - d] : 0;
        __syncthreads();
        scan[tid] += add;
        __syncthreads();
    }
    int pos = scan[tid] - cnt;
    fls_mod_dev *row = e + b * per;
    for (int i = i0; i < i1; i++) {
        const unsigned long long k = keys[i];
        if (k == FLS_MODS_NONE)
            break;
        const uint64_t tok = fls_mods_key_token(k);
        if (i > 0 && fls_mods_key_token(keys[i - 1]) == tok)
            continue;
        fls_mod_dev m;
        const int64_t idx = (int64_t)(k & ((1ull << FLS_MODS_IDX_BITS) - 1));
        /* the token from its list (the key holds its place in the order) */
        m.token = (uint32_t)((k >> FLS_MODS_IDX_BITS & 1ull) ? raw.bias_ids[b * K + idx]
                                                             : raw.seen_ids[b * S + idx]);
        m.seen = -1;
        m.has_bias = 0;
        m.bias = 0.0f;
        if ((k >> FLS_MODS_IDX_BITS & 1ull) == 0) {
            m.seen = raw.seen_counts ? raw.seen_counts[b * S + idx] : 0;
            const unsigned long long nx = i + 1 < P ? keys[i + 1] : FLS_MODS_NONE;
            if (nx != FLS_MODS_NONE && fls_mods_key_token(nx) == tok && (nx >> FLS_MODS_IDX_BITS & 1ull)) {
                m.has_bias = 1;
                m.bias = raw.bias_values[b * K + (int64_t)(nx & ((1ull << FLS_MODS_IDX_BITS) - 1))];
            }
        } else {
            m.has_bias = 1;
            m.bias = raw.bias_values[b * K + idx];
        }
        row[pos++] = m;
    }
    if (tid == T - 1)
        n[b] = scan[T - 1];
    if (bad)
        atomicOr(flag, 1u);
}

/* Rows b0 + blockIdx.y of logits src (row stride lds, column 0 = token v0)
 * into dst (ldd; may be src): the listed tokens changed, then the
 * disallowed ones -inf, FLS_MODS_TILE tokens a block. */
__global__ void __launch_bounds__(256)
    fls_mods_apply_kernel(const float *src, int64_t lds, float *dst, int64_t ldd, int64_t b0, int64_t v0,
                          int64_t vn, fls_mods_dev m)
{
    __shared__ float t[FLS_MODS_TILE];
    const int64_t r = blockIdx.y, b = b0 + r;
    const int64_t c0 = (int64_t)blockIdx.x * FLS_MODS_TILE;
    const int nt = (int)(vn - c0 < FLS_MODS_TILE ? vn - c0 : FLS_MODS_TILE);
    const float *s = src + r * lds + c0;
    float *d = dst + r * ldd + c0;
    const uint64_t lo = (uint64_t)(v0 + c0), hi = lo + (uint64_t)nt;
    for (int i = threadIdx.x; i < nt; i += blockDim.x)
        t[i] = s[i];
    if (m.per) {
        __syncthreads();
        const fls_mod_dev *e = m.e + b * m.per;
        const int cnt = m.n[b];
        for (int k = fls_mods_lower(m, b, lo) + threadIdx.x; k < cnt && e[k].token < hi; k += blockDim.x)
            t[e[k].token - lo] = fls_mod_logit(e[k], t[e[k].token - lo], m.pen + 3 * b);
    }
    __syncthreads();
    const uint32_t *mw = fls_mods_row_mask(m, b);
    for (int i = threadIdx.x; i < nt; i += blockDim.x) {
        const uint64_t v = lo + (uint64_t)i;
        float x = t[i];
        if (mw && !((mw[v >> 5] >> (v & 31)) & 1u))
            x = -INFINITY;
        d[i] = x;
    }
}

void fls_mods_take(fls_carve &c, const fls_request *req, fls_mods_stage *m)
{
    memset(m, 0, sizeof *m);
    if (!req->has_raw_mods)
        return;
    const fls_mods_raw &r = req->raw_mods;
    const int64_t B = req->batch, S = r.seen_k, K = r.bias_k;
    m->flag = c.take<unsigned>(1);
    if (!req->params_on_device) {
        m->up_mask = r.mask ? c.take<uint32_t>((size_t)(B * r.mask_ld)) : NULL;
        m->up_rows = r.mask_rows ? c.take<uint8_t>((size_t)B) : NULL;
        m->up_bias_ids = K ? c.take<int64_t>((size_t)(B * K)) : NULL;
        m->up_bias_values = K ? c.take<float>((size_t)(B * K)) : NULL;
        m->up_seen_ids = S ? c.take<int64_t>((size_t)(B * S)) : NULL;
        m->up_seen_counts = S && r.seen_counts ? c.take<int32_t>((size_t)(B * S)) : NULL;
        m->up_pen = c.take<float>((size_t)(3 * B));
    }
    m->prep = S + K > 0 || r.row_repetition || r.row_presence || r.row_frequency;
    if (m->prep) {
        m->e = c.take<fls_mod_dev>((size_t)(B * (S + K > 0 ? S + K : 1)));
        m->n = c.take<int>((size_t)B);
        m->pen = c.take<float>((size_t)(3 * B));
    }
}

static cudaError_t fls_up(void *dst, const void *src, size_t bytes, cudaStream_t st)
{
    return bytes ? cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st) : cudaSuccess;
}

fls_status fls_mods_stage_run(const fls_request *req, fls_mods_stage *m, int64_t slots, cudaStream_t st)
{
    if (!req->has_raw_mods)
        return FLS_OK;
    fls_mods_raw r = req->raw_mods;
    const int64_t B = req->batch, S = r.seen_k, K = r.bias_k;
    cudaError_t ce = cudaMemsetAsync(m->flag, 0, sizeof(unsigned), st);
    if (ce == cudaSuccess && !req->params_on_device) {
        /* host arrays: copies in the workspace, the device's input */
        if (r.mask)
            ce = fls_up(m->up_mask, r.mask, (size_t)(B * r.mask_ld) * 4, st);
        if (ce == cudaSuccess && r.mask_rows)
            ce = fls_up(m->up_rows, r.mask_rows, (size_t)B, st);
        if (ce == cudaSuccess && K) {
            ce = fls_up(m->up_bias_ids, r.bias_ids, (size_t)(B * K) * 8, st);
            if (ce == cudaSuccess)
                ce = fls_up(m->up_bias_values, r.bias_values, (size_t)(B * K) * 4, st);
        }
        if (ce == cudaSuccess && S) {
            ce = fls_up(m->up_seen_ids, r.seen_ids, (size_t)(B * S) * 8, st);
            if (ce == cudaSuccess && r.seen_counts)
                ce = fls_up(m->up_seen_counts, r.seen_counts, (size_t)(B * S) * 4, st);
        }
        const float *host_pen[3] = {r.row_repetition, r.row_presence, r.row_frequency};
        for (int q = 0; q < 3 && ce == cudaSuccess; q++)
            if (host_pen[q])
                ce = fls_up(m->up_pen + q * B, host_pen[q], (size_t)B * 4, st);
        r.mask = (const int32_t *)m->up_mask;
        r.mask_rows = m->up_rows;
        r.bias_ids = m->up_bias_ids;
        r.bias_values = m->up_bias_values;
        r.seen_ids = m->up_seen_ids;
        r.seen_counts = m->up_seen_counts;
        r.row_repetition = r.row_repetition ? m->up_pen : NULL;
        r.row_presence = r.row_presence ? m->up_pen + B : NULL;
        r.row_frequency = r.row_frequency ? m->up_pen + 2 * B : NULL;
    }
    const int64_t nvt = (req->vocab + 127) / 128, kmax = slots > 0 ? (nvt + slots - 1) / slots : 0;
    if (ce == cudaSuccess && m->prep) {
        int P = 1;
        while (P < S + K)
            P <<= 1;
        const size_t smem = (size_t)P * sizeof(unsigned long long);
        ce = cudaFuncSetAttribute(fls_mods_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem);
        for (int64_t b0 = 0; b0 < B && ce == cudaSuccess; b0 += 65535) {
            /* a grid holds at most 2^31 - 1 blocks: rows in slices for a
             * simple index (the kernel takes b from blockIdx.x) */
            const int64_t nb = B - b0 < 65535 ? B - b0 : 65535;
            fls_mods_raw rs = r;
            if (rs.mask)
                rs.mask += b0 * r.mask_ld;
            if (rs.mask_rows)
                rs.mask_rows += b0;
            if (rs.bias_ids) {
                rs.bias_ids += b0 * K;
                rs.bias_values += b0 * K;
            }
            if (rs.seen_ids) {
                rs.seen_ids += b0 * S;
                if (rs.seen_counts)
                    rs.seen_counts += b0 * S;
            }
            if (rs.row_repetition)
                rs.row_repetition += b0;
            if (rs.row_presence)
                rs.row_presence += b0;
            if (rs.row_frequency)
                rs.row_frequency += b0;
            const int64_t per = S + K > 0 ? S + K : 1;
            fls_mods_prep_kernel<<<(unsigned)nb, FLS_MODS_THREADS, smem, st>>>(
                rs, req->vocab, P, per, slots, kmax, m->e + b0 * per, m->n + b0, m->pen + 3 * b0, m->flag);
            ce = cudaGetLastError();
        }
    }
    if (ce != cudaSuccess)
        return fls_from_cuda(ce);
    fls_mods_dev &d = m->dev;
    d.mask = (const uint32_t *)r.mask;
    d.mask_ld = r.mask_ld;
    d.mask_rows = r.mask_rows;
    d.e = m->e;
    d.n = m->n;
    d.per = S + K > 0 ? S + K : 0;
    d.pen = m->pen;
    d.slots = d.per ? slots : 0;
    d.kmax = d.per ? kmax : 0;
    return FLS_OK;
}

cudaError_t fls_launch_mods_apply(const float *src, int64_t lds, float *dst, int64_t ldd, int64_t b0,
                                  int64_t nb, int64_t v0, int64_t vn, const fls_mods_dev &m, cudaStream_t st)
{
    const int64_t tiles = (vn + FLS_MODS_TILE - 1) / FLS_MODS_TILE;
    if (tiles <= 0 || nb <= 0)
        return cudaSuccess;
    if (tiles > INT32_MAX)
        return cudaErrorInvalidValue;
    for (int64_t r0 = 0; r0 < nb; r0 += 65535) {
        const int64_t rn = nb - r0 < 65535 ? nb - r0 : 65535;
        fls_mods_apply_kernel<<<dim3((unsigned)tiles, (unsigned)rn), 256, 0, st>>>(
            src + r0 * lds, lds, dst + r0 * ldd, ldd, b0 + r0, v0, vn, m);
        const cudaError_t ce = cudaGetLastError();
        if (ce != cudaSuccess)
            return ce;
    }
    return cudaSuccess;
}
