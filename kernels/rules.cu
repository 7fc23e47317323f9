/*
 * rules.cu — the rule family's device kernels (kernels/rules.cuh says what
 * they compute). Every decision is a call into variants/: fls_topc_push,
 * fls_stair_push, fls_topc_merge, fls_stair_merge, fls_filter_chain,
 * fls_support_lse, fls_stair_select, fls_write_draw; the warps only decide
 * which tokens need a call (a token that the state's current threshold
 * rejects stays rejected whatever is pushed later, topc.h and stair.h).
 */
#include "common.cuh"
#include "filters.h"
#include "registry.h"
#include "rules.cuh"
#include "stair.h"
#include "topc.h"

#define FLS_RW 8 /* at most this many warps (parts) per block */

/* One warp's candidate buffer and the thresholds of its states. */
struct fls_rwarp {
    float x[64], key[64];
    long long v[64];
    int tfull; /* the top list is full: tx / tv is its last entry */
    float tx;
    long long tv;
    int sk; /* 0: no quick reject; 1: kx/kv, wk/wv hold; 2: overflowed (reject all) */
    float kx, wk;
    long long kv, wv;
};

__device__ __forceinline__ fls_topc *fls_rtop(const fls_rule_dev &d, int64_t q)
{
    return d.top_cap > 0 ? (fls_topc *)(d.top + (size_t)q * fls_topc_bytes(d.top_cap)) : NULL;
}

__device__ __forceinline__ fls_stair *fls_rstair(const fls_rule_dev &d, int64_t q, int j)
{
    return (fls_stair *)(d.stair + ((size_t)q * d.nd + j) * fls_stair_bytes(d.stair_cap));
}

/* lane 0: the list's reject threshold */
__device__ __forceinline__ void fls_rtop_thr(const fls_topc *t, fls_rwarp &w)
{
    w.tfull = t->cap > 0 && t->n == t->cap;
    if (w.tfull) {
        const fls_top_entry *e = fls_topc_entries_c(t);
        w.tx = e[0].x;
        w.tv = e[0].v;
    }
}

/* lane 0: the staircase's reject threshold (the test of fls_stair_push_span:
 * ranked after the K-th entry and beaten by all of the first K keys) */
__device__ __forceinline__ void fls_rstair_thr(fls_stair *s, fls_rwarp &w)
{
    w.sk = 0;
    if (s->overflow) {
        w.sk = 2;
        return;
    }
    if (s->n < s->K)
        return;
    const fls_stair_entry *e = fls_stair_entries(s);
    fls_stair_weakest(s);
    w.sk = 1;
    w.kx = e[s->K - 1].x;
    w.kv = e[s->K - 1].v;
    w.wk = s->wk;
    w.wv = s->wv;
}

/* Copies n bytes (a multiple of 16, 16-aligned) with the threads [t0, t0 + nt). */
__device__ __forceinline__ void fls_rcopy(void *dst, const void *src, size_t n, int t, int nt)
{
    uint4 *o = (uint4 *)dst;
    const uint4 *in = (const uint4 *)src;
    for (size_t k = (size_t)t; k < n / 16; k += (size_t)nt)
        o[k] = in[k];
}

/* Merges the states of b into a (lists only in the first pass). */
__device__ void fls_rmerge_states(const fls_rule_dev &d, int first, fls_topc *ta, const fls_topc *tb,
                                  char *sa, const char *sbase, size_t sb)
{
    if (first && ta)
        fls_topc_merge(ta, tb);
    for (int j = 0; j < d.nd; j++)
        fls_stair_merge((fls_stair *)(sa + (size_t)j * sb), (const fls_stair *)(sbase + (size_t)j * sb));
}

__device__ __forceinline__ void fls_rpart_merge(fls_rpart &a, const fls_rpart &b)
{
    fls_lse l;
    l.m = a.lse_m;
    l.s = a.lse_s;
    fls_lse_merge(&l, b.lse_m, b.lse_s);
    a.lse_m = l.m;
    a.lse_s = l.s;
    fls_moments_merge(&a.n, &a.mean, &a.m2, b.n, b.mean, b.m2);
    a.bad |= b.bad;
}

__global__ void __launch_bounds__(FLS_RW * 32) fls_rule_part_kernel(fls_rule_dev d, int first)
{
    extern __shared__ __align__(16) char fls_rdyn[];
    __shared__ fls_rwarp sw[FLS_RW];
    __shared__ fls_rpart spart[FLS_RW];
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    const int p = blockIdx.x * d.rw + wi, i = blockIdx.y;
    if (!d.smem && p >= d.Pw)
        return; /* the whole warp: no block-wide synchronisation in this mode */
    fls_rwarp &w = sw[wi];
    const int b = d.r0 + i;
    const fls_row_params rp = d.rows[b];
    const float T = rp.temperature;
    const bool noisy = fls_temperature_noisy(T);
    const int64_t v_begin = (int64_t)p * d.S;
    int64_t v_end = v_begin + d.S < d.V ? v_begin + d.S : d.V;
    v_end = v_end > v_begin ? v_end : v_begin;
    const size_t sb = fls_stair_bytes(d.stair_cap);
    /* this warp's states: its shared-memory region, or its global part */
    fls_topc *tc;
    char *st0;
    if (d.smem) {
        char *base = fls_rdyn + (size_t)wi * fls_rule_warp_bytes(d, first);
        tc = first && d.top_cap > 0 ? (fls_topc *)base : NULL;
        st0 = base + (tc ? fls_topc_bytes(d.top_cap) : 0);
    } else {
        const int64_t q = (int64_t)i * d.P + p;
        tc = first ? fls_rtop(d, q) : NULL;
        st0 = (char *)fls_rstair(d, q, 0);
    }
    if (lane == 0) {
        if (tc) {
            fls_topc_init(tc, d.top_cap);
            fls_rtop_thr(tc, w);
        }
        for (int j = 0; j < d.nd; j++)
            fls_stair_init((fls_stair *)(st0 + (size_t)j * sb), (int32_t)d.K, d.stair_cap);
    }
    __syncwarp();
    double lm = -INFINITY, ls = 0.0, mn = 0.0, mmean = 0.0, mm2 = 0.0;
    unsigned bad = 0;
    float dropmax = -INFINITY;
    const float *row = d.L + (size_t)i * d.ldl;
    for (int64_t base = v_begin; base < v_end; base += 64) {
        const int64_t v = base + 2 * lane; /* even: a Philox pair */
        float x[2];
        bool in[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            in[e] = v + e < v_end;
            const float l = in[e] ? row[v + e] : -INFINITY;
            x[e] = fls_temper(l, T);
            if (first && in[e]) {
                if (fls_bad_logit(l))
                    bad |= FLS_RBAD_NAN;
                else if (fls_temper_overflows(l, x[e]))
                    bad |= FLS_RBAD_TEMP;
                if (x[e] > -INFINITY && x[e] < INFINITY) {
                    const double xd = x[e];
                    if (!d.need_s) {
                        lm = xd > lm ? xd : lm; /* the max alone (the sum stays 0, unused) */
                    } else if (xd > lm) {
                        ls = ls * exp(lm - xd) + 1.0;
                        lm = xd;
                    } else {
                        ls += exp(xd - lm);
                    }
                    if (d.moments) {
                        mn += 1.0;
                        const double delta = xd - mmean;
                        mmean += delta / mn;
                        mm2 += delta * (xd - mmean);
                    }
                }
            }
        }
        if (tc) {
            bool c[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                c[e] = in[e] && x[e] > -INFINITY && (!w.tfull || fls_rank_before(x[e], v + e, w.tx, w.tv));
                if (in[e] && x[e] > -INFINITY && !c[e])
                    dropmax = x[e] > dropmax ? x[e] : dropmax;
            }
            const unsigned m0 = __ballot_sync(FLS_FULL_MASK, c[0]), m1 = __ballot_sync(FLS_FULL_MASK, c[1]);
            if (m0 | m1) {
                w.x[2 * lane] = x[0];
                w.x[2 * lane + 1] = x[1];
                w.v[2 * lane] = v;
                w.v[2 * lane + 1] = v + 1;
                __syncwarp();
                if (lane == 0) {
                    for (int k = 0; k < 64; k++)
                        if (((k & 1) ? m1 : m0) >> (k >> 1) & 1u)
                            fls_topc_push(tc, w.x[k], w.v[k]);
                    fls_rtop_thr(tc, w);
                }
                __syncwarp();
            }
        }
        for (int j = 0; j < d.nd; j++) {
            fls_stair *s = (fls_stair *)(st0 + (size_t)j * sb);
            if (lane == 0)
                fls_rstair_thr(s, w);
            __syncwarp();
            float key[2] = {x[0], x[1]};
            bool after[2], bounded[2] = {false, false};
#pragma unroll
            for (int e = 0; e < 2; e++)
                after[e] = w.sk == 1 && !fls_rank_before(x[e], v + e, w.kx, w.kv);
            if (noisy && (x[0] > -INFINITY || x[1] > -INFINITY) && w.sk != 2) {
                const uint4 r = fls_philox_pair(rp.seed, rp.offset, d.first_draw + d.draw0 + (uint32_t)j, v);
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const uint64_t bits = fls_pair_bits(r, v + e);
                    /* fl(x + g) <= fl(x + up[bucket]) < wk: beaten by the first K keys, no logs */
                    bounded[e] = after[e] && d.gup && __fadd_rn(x[e], d.gup[bits >> FLS_GB_SHIFT]) < w.wk;
                    key[e] = x[e] > -INFINITY && !bounded[e]
                                 ? fls_temperature_key(x[e], fls_gumbel_dev(bits), T)
                                 : -INFINITY;
                }
            }
            bool c[2];
#pragma unroll
            for (int e = 0; e < 2; e++)
                c[e] = in[e] && !bounded[e] && key[e] > -INFINITY && w.sk != 2 &&
                       !(after[e] && fls_key_beats(w.wk, w.wv, key[e], v + e));
            const unsigned m0 = __ballot_sync(FLS_FULL_MASK, c[0]), m1 = __ballot_sync(FLS_FULL_MASK, c[1]);
            if (m0 | m1) {
                w.x[2 * lane] = x[0];
                w.x[2 * lane + 1] = x[1];
                w.key[2 * lane] = key[0];
                w.key[2 * lane + 1] = key[1];
                w.v[2 * lane] = v;
                w.v[2 * lane + 1] = v + 1;
                __syncwarp();
                if (lane == 0)
                    for (int k = 0; k < 64; k++)
                        if (((k & 1) ? m1 : m0) >> (k >> 1) & 1u)
                            fls_stair_push(s, w.x[k], w.key[k], w.v[k]);
            }
            __syncwarp();
        }
    }
    fls_rpart pt;
    if (first) {
        /* the lanes' partials into lane 0, in a fixed order */
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const double om = __shfl_down_sync(FLS_FULL_MASK, lm, o),
                         os = __shfl_down_sync(FLS_FULL_MASK, ls, o);
            const double on = __shfl_down_sync(FLS_FULL_MASK, mn, o),
                         omean = __shfl_down_sync(FLS_FULL_MASK, mmean, o);
            const double om2 = __shfl_down_sync(FLS_FULL_MASK, mm2, o);
            if (lane < o) {
                fls_lse a;
                a.m = lm;
                a.s = ls;
                fls_lse_merge(&a, om, os);
                lm = a.m;
                ls = a.s;
                fls_moments_merge(&mn, &mmean, &mm2, on, omean, om2);
            }
        }
        bad = __reduce_or_sync(FLS_FULL_MASK, bad);
        dropmax = fls_warp_maxf(dropmax);
        pt.lse_m = lm;
        pt.lse_s = ls;
        pt.n = mn;
        pt.mean = mmean;
        pt.m2 = mm2;
        pt.bad = bad;
        pt.pad_ = 0;
        if (lane == 0 && tc && dropmax > tc->dropped)
            tc->dropped = dropmax;
    }
    if (!d.smem) {
        if (first && lane == 0)
            d.part[(int64_t)i * d.P + p] = pt;
        return;
    }
    /* shared-memory mode: the block's warps merge in a fixed tree, then the
     * block's state goes to its global part */
    if (first && lane == 0)
        spart[wi] = pt;
    __syncthreads();
    const size_t wb = fls_rule_warp_bytes(d, first), tb = tc ? fls_topc_bytes(d.top_cap) : 0;
    for (int s = 1; s < d.rw; s *= 2) {
        if (lane == 0 && wi % (2 * s) == 0 && wi + s < d.rw) {
            char *a = fls_rdyn + (size_t)wi * wb, *o = fls_rdyn + (size_t)(wi + s) * wb;
            fls_rmerge_states(d, first, tb ? (fls_topc *)a : NULL, (const fls_topc *)o, a + tb, o + tb, sb);
            if (first)
                fls_rpart_merge(spart[wi], spart[wi + s]);
        }
        __syncthreads();
    }
    const int64_t q = (int64_t)i * d.P + blockIdx.x;
    if (tb)
        fls_rcopy(fls_rtop(d, q), fls_rdyn, tb, threadIdx.x, blockDim.x);
    fls_rcopy(fls_rstair(d, q, 0), fls_rdyn + tb, (size_t)d.nd * sb, threadIdx.x, blockDim.x);
    if (first && threadIdx.x == 0)
        d.part[q] = spart[0];
}

/* Part p + stride into part p of each row, for p a multiple of 2 stride:
 * one thread per pair on global memory. */
__global__ void fls_rule_merge_kernel(fls_rule_dev d, int first, int stride)
{
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t np = (d.P + 2 * stride - 1) / (2 * stride);
    if (t >= (int64_t)d.nb * np)
        return;
    const int i = (int)(t / np);
    const int64_t p = (t % np) * 2 * stride;
    if (p + stride >= d.P)
        return;
    const int64_t qa = (int64_t)i * d.P + p, qb = qa + stride;
    if (first)
        fls_rpart_merge(d.part[qa], d.part[qb]);
    fls_rmerge_states(d, first, first ? fls_rtop(d, qa) : NULL, first ? fls_rtop(d, qb) : NULL,
                      (char *)fls_rstair(d, qa, 0), (const char *)fls_rstair(d, qb, 0),
                      fls_stair_bytes(d.stair_cap));
}

/* The same with one warp per pair: both states copied into shared memory,
 * merged there by lane 0, copied back. */
__global__ void fls_rule_merge_smem_kernel(fls_rule_dev d, int first, int stride)
{
    extern __shared__ __align__(16) char fls_rdyn[];
    const int64_t np = (d.P + 2 * stride - 1) / (2 * stride);
    const int i = (int)(blockIdx.x / np);
    const int64_t p = (blockIdx.x % np) * 2 * stride;
    if (p + stride >= d.P)
        return;
    const int64_t qa = (int64_t)i * d.P + p, qb = qa + stride;
    const size_t tb = first && d.top_cap > 0 ? fls_topc_bytes(d.top_cap) : 0,
                 sb = fls_stair_bytes(d.stair_cap);
    const size_t wb = tb + (size_t)d.nd * sb;
    char *a = fls_rdyn, *o = fls_rdyn + wb;
    if (tb) {
        fls_rcopy(a, fls_rtop(d, qa), tb, threadIdx.x, blockDim.x);
        fls_rcopy(o, fls_rtop(d, qb), tb, threadIdx.x, blockDim.x);
    }
    fls_rcopy(a + tb, fls_rstair(d, qa, 0), (size_t)d.nd * sb, threadIdx.x, blockDim.x);
    fls_rcopy(o + tb, fls_rstair(d, qb, 0), (size_t)d.nd * sb, threadIdx.x, blockDim.x);
    __syncthreads();
    if (threadIdx.x == 0) {
        fls_rmerge_states(d, first, tb ? (fls_topc *)a : NULL, (const fls_topc *)o, a + tb, o + tb, sb);
        if (first)
            fls_rpart_merge(d.part[qa], d.part[qb]);
    }
    __syncthreads();
    if (tb)
        fls_rcopy(fls_rtop(d, qa), a, tb, threadIdx.x, blockDim.x);
    fls_rcopy(fls_rstair(d, qa, 0), a + tb, (size_t)d.nd * sb, threadIdx.x, blockDim.x);
}

/* One thread per row: the cutoff and the support's log-sum-exp. */
__global__ void fls_rule_decide_kernel(fls_rule_dev d)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= d.nb)
        return;
    const int b = d.r0 + i;
    const fls_rpart pt = d.part[(int64_t)i * d.P];
    d.cut[b] = -INFINITY;
    d.lse[b] = pt.lse_m;
    if (pt.bad & FLS_RBAD_NAN) {
        d.code[b] = FLS_RC_NAN;
        return;
    }
    if (pt.bad & FLS_RBAD_TEMP) {
        d.code[b] = FLS_RC_TEMP;
        return;
    }
    if (pt.lse_m == -INFINITY) {
        d.code[b] = FLS_RC_ALL_MASKED;
        return;
    }
    const bool greedy = !fls_temperature_noisy(d.rows[b].temperature);
    fls_filter_stats st;
    st.m = pt.lse_m;
    st.lse_m = pt.lse_m;
    st.lse_s = pt.lse_s;
    st.mom_n = pt.n;
    st.mom_mean = pt.mean;
    st.mom_m2 = pt.m2;
    st.top = NULL;
    st.ntop = 0;
    st.dropped = INFINITY; /* no list kept: nothing is known beyond m and the moments */
    fls_topc *t = fls_rtop(d, (int64_t)i * d.P);
    if (t) {
        fls_topc_sort(t);
        st.top = fls_topc_entries(t);
        st.ntop = t->n;
        st.dropped = t->dropped;
    }
    float c;
    double l = 0.0;
    if (fls_filter_chain(&st, d.rule[b].value, &c) != FLS_CUT_OK ||
        (d.want_lse && !greedy && fls_support_lse(&st, c, 0, &l) != FLS_CUT_OK)) {
        d.code[b] = FLS_RC_SECOND;
        return;
    }
    d.cut[b] = c;
    d.lse[b] = greedy ? st.m : l;
    d.code[b] = FLS_RC_OK;
}

/* One thread per (row, draw of the pass): the K best keys of the support. */
__global__ void fls_rule_select_kernel(fls_rule_dev d)
{
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (int64_t)d.nb * d.nd)
        return;
    const int i = (int)(t / d.nd), j = (int)(t % d.nd);
    const int b = d.r0 + i;
    if (d.code[b] != FLS_RC_OK)
        return;
    const fls_stair *s = fls_rstair(d, (int64_t)i * d.P, j);
    if (s->overflow) {
        d.code[b] = FLS_RC_OVERFLOW; /* the row goes to the exact reference */
        return;
    }
    const int64_t Kb = d.rule[b].K;
    int32_t *pick = d.pick + t * d.K;
    float *px = d.px + t * d.K;
    int64_t *pv = d.pv + t * d.K;
    const int32_t n = fls_stair_select(s, d.cut[b], (int32_t)Kb, pick);
    if (n == 0) {
        d.code[b] = FLS_RC_ALL_MASKED;
        return;
    }
    const fls_stair_entry *e = fls_stair_entries_c(s);
    for (int32_t k = 0; k < n; k++) {
        px[k] = e[pick[k]].x;
        pv[k] = e[pick[k]].v;
    }
    const size_t o = ((size_t)b * d.draws + d.draw0 + j) * d.K;
    const bool greedy = !fls_temperature_noisy(d.rows[b].temperature);
    fls_write_draw(px, pv, n, d.K, greedy, d.part[(int64_t)i * d.P].lse_m, d.lse[b], d.tok + o, d.lp + o);
    for (int64_t k = Kb; k < d.K; k++) { /* past this row's own K */
        d.tok[o + k] = -1;
        d.lp[o + k] = 0.0f;
    }
}

__global__ void fls_rule_to_float_kernel(const double *in, float *out, int64_t n)
{
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n)
        out[t] = (float)in[t];
}

cudaError_t fls_rule_launch_fold(const fls_rule_dev &d, int first, cudaStream_t st)
{
    const size_t wb = fls_rule_warp_bytes(d, first);
    const size_t dyn = d.smem ? (size_t)d.rw * wb : 0;
    cudaError_t e =
        cudaFuncSetAttribute(fls_rule_part_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn);
    dim3 grid((unsigned)((d.Pw + d.rw - 1) / d.rw), (unsigned)d.nb);
    if (e == cudaSuccess) {
        fls_rule_part_kernel<<<grid, d.rw * 32, dyn, st>>>(d, first);
        e = cudaGetLastError();
    }
    /* the tree across blocks in shared memory too, unless the states live in global memory */
    const bool msmem = d.smem && 2 * wb <= FLS_RSMEM_MAX;
    if (msmem && e == cudaSuccess)
        e = cudaFuncSetAttribute(fls_rule_merge_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)(2 * wb));
    for (int stride = 1; stride < d.P && e == cudaSuccess; stride *= 2) {
        const int64_t n = (int64_t)d.nb * ((d.P + 2 * stride - 1) / (2 * stride));
        if (msmem)
            fls_rule_merge_smem_kernel<<<(unsigned)n, 128, 2 * wb, st>>>(d, first, stride);
        else
            fls_rule_merge_kernel<<<(unsigned)((n + 127) / 128), 128, 0, st>>>(d, first, stride);
        e = cudaGetLastError();
    }
    if (first && e == cudaSuccess) {
        fls_rule_decide_kernel<<<(unsigned)((d.nb + 63) / 64), 64, 0, st>>>(d);
        e = cudaGetLastError();
    }
    return e;
}

cudaError_t fls_rule_launch_select(const fls_rule_dev &d, cudaStream_t st)
{
    const int64_t n = (int64_t)d.nb * d.nd;
    fls_rule_select_kernel<<<(unsigned)((n + 127) / 128), 128, 0, st>>>(d);
    return cudaGetLastError();
}

cudaError_t fls_rule_launch_to_float(const double *in, float *out, int64_t n, cudaStream_t st)
{
    if (n <= 0)
        return cudaSuccess;
    fls_rule_to_float_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(in, out, n);
    return cudaGetLastError();
}
