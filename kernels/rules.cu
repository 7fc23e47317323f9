/*
 * rules.cu — the rule family's device kernels (kernels/rules.cuh says what
 * they compute). Every decision is a call into variants/: fls_topc_push,
 * fls_stair_push, fls_topc_merge, fls_stair_merge, fls_filter_chain,
 * fls_support_lse, fls_stair_select, fls_write_draw; the warps only decide
 * which tokens need a call (a token that the state's current threshold
 * rejects stays rejected whatever is pushed later, topc.h and stair.h).
 */
#include "kernels/common.cuh"
#include "variants/filters.h"
#include "variants/registry.h"
#include "kernels/rules.cuh"
#include "variants/stair.h"
#include "variants/topc.h"

/* Launches kern<<<g, bl, smem, st>>>(args...), as a programmatic dependent
 * of the stream's previous kernel when pdl (the kernel starts with
 * fls_pdl_wait, so it reads nothing before that kernel has finished). */
template <typename... P, typename... A>
static cudaError_t fls_rlaunch(void (*kern)(P...), dim3 g, dim3 bl, size_t smem, cudaStream_t st, int pdl,
                               A... args)
{
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t c = {};
    c.gridDim = g;
    c.blockDim = bl;
    c.dynamicSmemBytes = smem;
    c.stream = st;
    c.attrs = at;
    c.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&c, kern, args...);
}

/* The instance of a kernel template over its lists' length for K: lists
 * of one entry where every row draws one token (fewer registers), of 4,
 * or of FLS_FKMAX. */
#define FLS_RULE_BY_K(kern, K) ((K) == 1 ? kern<1> : (K) <= 4 ? kern<4> : kern<FLS_FKMAX>)

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

/* The statistics of no token (the merge's identity). */
__device__ __forceinline__ fls_rpart fls_rpart_empty(void)
{
    fls_rpart a;
    a.lse_m = -INFINITY;
    a.lse_s = a.n = a.mean = a.m2 = 0.0;
    a.bad = a.pad_ = 0;
    return a;
}

/* One token into a thread's running statistics: its logit l and tempered
 * logit x (an in-range token). */
__device__ __forceinline__ void fls_rpart_token(fls_rpart &a, const fls_rule_dev &d, float l, float x)
{
    if (fls_bad_logit(l))
        a.bad |= FLS_RBAD_NAN;
    else if (fls_temper_overflows(l, x))
        a.bad |= FLS_RBAD_TEMP;
    if (x > -INFINITY && x < INFINITY) {
        const double xd = x;
        if (!d.need_s) {
            a.lse_m = xd > a.lse_m ? xd : a.lse_m; /* the max alone (the sum stays 0, unused) */
        } else if (xd > a.lse_m) {
            a.lse_s = a.lse_s * exp(a.lse_m - xd) + 1.0;
            a.lse_m = xd;
        } else {
            a.lse_s += exp(xd - a.lse_m);
        }
        if (d.moments) {
            a.n += 1.0;
            const double delta = xd - a.mean;
            a.mean += delta / a.n;
            a.m2 += delta * (xd - a.mean);
        }
    }
}

/* The warp's statistics into lane 0, in a fixed tree (lane 0's result is
 * the warp's). */
__device__ __forceinline__ fls_rpart fls_rpart_warp(fls_rpart a, int lane)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        fls_rpart b;
        b.lse_m = __shfl_down_sync(FLS_FULL_MASK, a.lse_m, o);
        b.lse_s = __shfl_down_sync(FLS_FULL_MASK, a.lse_s, o);
        b.n = __shfl_down_sync(FLS_FULL_MASK, a.n, o);
        b.mean = __shfl_down_sync(FLS_FULL_MASK, a.mean, o);
        b.m2 = __shfl_down_sync(FLS_FULL_MASK, a.m2, o);
        b.bad = __shfl_down_sync(FLS_FULL_MASK, a.bad, o);
        b.pad_ = 0;
        if (lane < o)
            fls_rpart_merge(a, b);
    }
    return a;
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
    fls_rpart acc = fls_rpart_empty();
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
            if (first && in[e])
                fls_rpart_token(acc, d, l, x[e]);
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
        pt = fls_rpart_warp(acc, lane);
        dropmax = fls_warp_maxf(dropmax);
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

/* Row b's decision from its merged statistics pt and its top list (rank
 * order; NULL: none kept, nothing is known beyond m and the moments): the
 * cutoff and the support's log-sum-exp, or the row's code. dev_lse: a
 * support larger than the list has its log-sum-exp summed on the device
 * (lsedev[b] = 1) instead of sending the row to the host. */
__device__ void fls_rule_decide_row(const fls_rule_dev &d, int b, const fls_rpart &pt,
                                    const fls_top_entry *top, const double *w, const double *pw, int64_t ntop,
                                    float dropped, int dev_lse, const fls_row_rule &rule, float T)
{
    d.cut[b] = -INFINITY;
    d.lse[b] = pt.lse_m;
    d.lsedev[b] = 0;
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
    const bool greedy = !fls_temperature_noisy(T);
    fls_filter_stats st;
    st.m = pt.lse_m;
    st.lse_m = pt.lse_m;
    st.lse_s = pt.lse_s;
    st.mom_n = pt.n;
    st.mom_mean = pt.mean;
    st.mom_m2 = pt.m2;
    st.top = top;
    st.ntop = top ? ntop : 0;
    st.dropped = top ? dropped : INFINITY;
    st.w = top ? w : NULL;
    st.pw = top && w ? pw : NULL;
    float c;
    double l = 0.0;
    if (fls_filter_chain(&st, rule.value, &c) != FLS_CUT_OK) {
        d.code[b] = FLS_RC_SECOND;
        return;
    }
    if (d.want_lse && !greedy && fls_support_lse(&st, c, 0, &l) != FLS_CUT_OK) {
        if (!dev_lse) {
            d.code[b] = FLS_RC_SECOND;
            return;
        }
        d.lsedev[b] = 1; /* summed over the support by the select kernels */
    }
    d.cut[b] = c;
    d.lse[b] = greedy ? st.m : l;
    d.code[b] = FLS_RC_OK;
}

/* One thread per row: the staircase path's decision. */
__global__ void fls_rule_decide_kernel(fls_rule_dev d)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= d.nb)
        return;
    fls_topc *t = fls_rtop(d, (int64_t)i * d.P);
    if (t)
        fls_topc_sort(t);
    fls_rule_decide_row(d, d.r0 + i, d.part[(int64_t)i * d.P], t ? fls_topc_entries(t) : NULL, NULL, NULL,
                        t ? t->n : 0, t ? t->dropped : INFINITY, 0, d.rule[d.r0 + i],
                        d.rows[d.r0 + i].temperature);
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
    /* positions from n (<= the row's K) to K: -1 and 0 */
    if (fls_write_draw(px, pv, n, d.K, greedy, d.part[(int64_t)i * d.P].lse_m, d.lse[b], d.tok + o, d.lp + o))
        d.code[b] = FLS_RC_TEMP; /* beyond the key resolution (rule.h): the commit writes nothing */
}

__global__ void fls_rule_to_float_kernel(const double *in, float *out, int64_t n)
{
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n)
        out[t] = (float)in[t];
}

/* The call's outputs from the staged ones, only when every row of the call
 * is decided (code OK): a call with an error, or with a row the host must
 * decide, writes nothing. Every block checks the codes itself. sticky (an
 * asynchronous call): block 0 records the call's error there, in the CPU
 * engine's order (a NaN, an overflow of l / T, an empty row), or, when
 * only rows for the host are left, FLS_SC_UNSUPPORTED. */
__global__ void __launch_bounds__(256)
    fls_rule_commit_kernel(const int *code, int B, const int64_t *tok, const float *lp, const double *lse,
                           int64_t n, int64_t *otok, float *olp, float *olse, unsigned *sticky,
                           const unsigned *tflag, const unsigned *pflag)
{
    fls_pdl_wait();
    fls_pdl_trigger();
    __shared__ unsigned seen;
    if (threadIdx.x == 0) /* device values out of range first, as on the host: a mask, bias or
                             penalty value (32), then a temperature (16) */
        seen = (pflag && *pflag ? 32u : 0u) | (tflag && *tflag ? 16u : 0u);
    __syncthreads();
    unsigned mine = 0;
    for (int k = threadIdx.x; k < B; k += blockDim.x) {
        const int c = code[k];
        mine |= c == FLS_RC_OK           ? 0u
                : c == FLS_RC_NAN        ? 1u
                : c == FLS_RC_TEMP       ? 2u
                : c == FLS_RC_ALL_MASKED ? 4u
                                         : 8u;
    }
    if (mine)
        atomicOr(&seen, mine);
    __syncthreads();
    if (seen) {
        if (sticky && blockIdx.x == 0 && threadIdx.x == 0) {
            const unsigned sc = (seen & 32u)   ? FLS_SC_PARAM
                                : (seen & 16u) ? FLS_SC_TEMPERATURE
                                : (seen & 1u)  ? FLS_SC_NAN
                                : (seen & 2u)  ? FLS_SC_TEMPERATURE
                                : (seen & 4u)  ? FLS_SC_ALL_MASKED
                                               : FLS_SC_UNSUPPORTED;
            atomicCAS(sticky, 0u, sc);
        }
        return;
    }
    const int64_t t0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t q = t0; q < n; q += step) {
        otok[q] = tok[q];
        if (olp)
            olp[q] = lp[q];
    }
    if (olse)
        for (int64_t q = t0; q < B; q += step)
            olse[q] = (float)lse[q];
}

cudaError_t fls_rule_launch_commit(const int *code, int B, const int64_t *tok, const float *lp,
                                   const double *lse, int64_t n, int64_t *otok, float *olp, float *olse,
                                   unsigned *sticky, const unsigned *tflag, const unsigned *pflag, int pdl,
                                   cudaStream_t st)
{
    const int64_t nblk = (n > B ? n : B) / 256 + 1;
    return fls_rlaunch(fls_rule_commit_kernel, dim3((unsigned)(nblk < 64 ? nblk : 64)), dim3(256), 0, st, pdl,
                       code, B, tok, lp, lse, n, otok, olp, olse, sticky, tflag, pflag);
}

__global__ void fls_rule_fill_kernel(fls_row_rule *dst, int B, fls_row_rule r)
{
    for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < B; b += gridDim.x * blockDim.x)
        dst[b] = r;
}

cudaError_t fls_rule_launch_fill(fls_row_rule *dst, int B, const fls_row_rule &r, cudaStream_t st)
{
    const int blocks = (B + 255) / 256 < 64 ? (B + 255) / 256 : 64;
    fls_rule_fill_kernel<<<blocks, 256, 0, st>>>(dst, B, r);
    return cudaGetLastError();
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

/* ---- the threshold-first path ---- */

/* Token k (0 .. 8 cf - 1) of thread t in chunk c (cf sub-chunks of
 * FLS_FCK tokens, one after the other): in each sub-chunk, thread t holds
 * the 4 consecutive tokens 4t .. 4t + 3 of each half of 1024 (a warp reads
 * 128 consecutive tokens at a time: two groups of 64, 16 lanes each); a
 * pair (k even, k + 1) is a Philox pair (its first token even). */
__device__ __forceinline__ int64_t fls_ftoken(const fls_rule_dev &d, int c, int t, int k)
{
    return (int64_t)c * d.cf * FLS_FCK + (k >> 3) * FLS_FCK + ((k >> 2) & 1) * 1024 + 4 * t + (k & 3);
}

/* The thread's 8 logits of sub-chunk s of chunk c (-inf past V): two
 * 16-byte loads where the rows allow (vec). sg (or NULL): the chunk's
 * 64-token maxima of the logits (fls_fgroups); a half whose group maximum
 * is not above pre is not loaded (-inf: every logit there is <= pre). */
__device__ __forceinline__ void fls_fraw8(const fls_rule_dev &d, const float *row, int c, int s,
                                          float (&l)[8], const float *sg = NULL, float pre = -INFINITY)
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t v0 = fls_ftoken(d, c, threadIdx.x, 8 * s + 4 * h);
        /* the lane's 4 tokens lie in group 32 s + 16 h + t / 16 of the chunk */
        if (sg && !(sg[32 * s + 16 * h + (threadIdx.x >> 4)] > pre)) {
#pragma unroll
            for (int e = 0; e < 4; e++)
                l[4 * h + e] = -INFINITY;
        } else if (d.vec && v0 + 3 < d.V) {
            const float4 q = *(const float4 *)(row + v0);
            l[4 * h] = q.x;
            l[4 * h + 1] = q.y;
            l[4 * h + 2] = q.z;
            l[4 * h + 3] = q.w;
        } else {
#pragma unroll
            for (int e = 0; e < 4; e++)
                l[4 * h + e] = v0 + e < d.V ? row[v0 + e] : -INFINITY;
        }
    }
}

/* A logit p whose tempered value is below c, found in a few steps down
 * from c T (-inf when none is found): fls_temper is non-decreasing in l for
 * T >= 0, so every l with fls_temper(l, T) >= c is > p. The passes test
 * "l > p" first and divide only the tokens that pass. */
__device__ __forceinline__ float fls_fpre(float c, float T)
{
    if (!(c > -INFINITY && c < INFINITY))
        return -INFINITY;
    float p = T == 0.0f ? c : __fmul_rn(c, T);
    for (int q = 0; q < 64 && p > -INFINITY && p < INFINITY; q++) {
        if (fls_temper(p, T) < c)
            return p;
        p = nextafterf(p, -INFINITY);
    }
    return -INFINITY;
}

/* The block's chunk of row i: its 64-token maxima of the logits from the
 * matmul's tables into sg (cf x 32 entries; -inf past the table), or NULL
 * without tables; *any: whether a group's maximum is above pre (always 1
 * without tables). A block calls it whole (it synchronises). */
__device__ __forceinline__ const float *fls_fgroups(const fls_rule_dev &d, int i, float *sg, float pre,
                                                    int *any)
{
    *any = 1;
    if (!d.g64)
        return NULL;
    const int64_t q0 = (int64_t)blockIdx.x * d.cf * 32;
    int a = 0;
    for (int q = threadIdx.x; q < 32 * d.cf; q += blockDim.x) {
        const float g = q0 + q < d.m64 ? d.g64[(int64_t)i * d.m64 + q0 + q] : -INFINITY;
        sg[q] = g;
        a |= g > pre;
    }
    *any = __syncthreads_or(a);
    return sg;
}

/* The thread's 8 tokens of sub-chunk s of its chunk: their tempered logits
 * where they are at or above cut, else -inf (pre = fls_fpre(cut, T)). */
__device__ __forceinline__ void fls_fload8(const fls_rule_dev &d, const float *row, int s, float T, float cut,
                                           float pre, float (&x)[8], const float *sg)
{
    float l[8];
    fls_fraw8(d, row, blockIdx.x, s, l, sg, pre);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        x[k] = -INFINITY;
        if (l[k] > pre) {
            const float t = fls_temper(l[k], T);
            if (t > -INFINITY && t >= cut)
                x[k] = t;
        }
    }
}

/* Sorts a[0, n) (n a power of two) into descending order with the block. */
__device__ void fls_bitonic_desc(unsigned long long *a, int n)
{
    for (int k = 2; k <= n; k *= 2)
        for (int j = k / 2; j > 0; j /= 2) {
            for (int t = threadIdx.x; t < n / 2; t += blockDim.x) {
                const int lo = ((t & ~(j - 1)) << 1) | (t & (j - 1)), hi = lo + j; /* j: a power of two */
                const bool desc = (lo & k) == 0;
                const unsigned long long x = a[lo], y = a[hi];
                if (desc ? x < y : x > y) {
                    a[lo] = y;
                    a[hi] = x;
                }
            }
            __syncthreads();
        }
}

/* Each chunk: its statistics and, for a top list, its group maxima.
 * fls_temper is non-decreasing in l (T >= 0), so a maximum of tempered
 * logits is the tempered maximum of the logits: the maxima, the errors
 * (a NaN or +inf logit; the largest finite |l| overflowing when divided)
 * and the group maxima need no division per token. Only the sum of
 * exp(x - m) (need_s) and the moments take each token's exact x: each
 * sub-chunk of 8 tokens first raises the thread's maximum (one rescale),
 * then adds 8 independent terms; its moments are shifted by its own
 * maximum (a data point, so the shift costs at most a factor 9 in rounding)
 * and merged into the thread's (fls_moments_merge). */
/* One sub-chunk s of 8 logits per thread into the thread's statistics
 * (fls_rfast_stats_kernel). */
__device__ __forceinline__ void fls_fstats8(const fls_rule_dev &d, float T, const float (&l)[8], int s,
                                            float *g64, float &lmax, float &amax, bool &nan, fls_rpart &acc)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float sm = -INFINITY;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        nan |= fls_bad_logit(l[k]);
        sm = fmaxf(sm, l[k]);
        const float a = fabsf(l[k]);
        amax = fmaxf(amax, a < INFINITY ? a : 0.0f);
    }
    lmax = fmaxf(lmax, sm);
    if (d.top_cap > 0) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float g = fmaxf(fmaxf(l[4 * h], l[4 * h + 1]), fmaxf(l[4 * h + 2], l[4 * h + 3]));
#pragma unroll
            for (int o = 8; o > 0; o >>= 1)
                g = fmaxf(g, __shfl_xor_sync(FLS_FULL_MASK, g, o));
            if ((lane & 15) == 0)
                g64[32 * s + 16 * h + 2 * w + (lane >> 4)] = g;
        }
    }
    if (!(d.need_s || d.moments))
        return;
    const float xm = fls_temper(sm, T); /* the sub-chunk's largest x */
    if (!(xm > -INFINITY && xm < INFINITY))
        return; /* nothing finite (or an error of the row) */
    float x[8];
#pragma unroll
    for (int k = 0; k < 8; k++)
        x[k] = fls_temper(l[k], T);
    if (d.need_s) {
        const double md = xm;
        if (md > acc.lse_m) {
            acc.lse_s = acc.lse_m > -INFINITY ? acc.lse_s * exp(acc.lse_m - md) : 0.0;
            acc.lse_m = md;
        }
#pragma unroll
        for (int k = 0; k < 8; k++)
            acc.lse_s += exp((double)x[k] - acc.lse_m); /* -inf: 0 */
    }
    if (d.moments) {
        double n = 0.0, s1 = 0.0, s2 = 0.0;
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (x[k] > -INFINITY) {
                const double dd = (double)x[k] - (double)xm;
                n += 1.0;
                s1 += dd;
                s2 += dd * dd;
            }
        const double q = s1 / n;
        fls_moments_merge(&acc.n, &acc.mean, &acc.m2, n, (double)xm + q, fmax(s2 - s1 * q, 0.0));
    }
}

__global__ void __launch_bounds__(256) fls_rfast_stats_kernel(fls_rule_dev d)
{
    __shared__ fls_rpart sp[8];
    __shared__ float g64[16 * 32]; /* each sub-chunk's 64-token maxima of the logits */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, i = blockIdx.y, b = d.r0 + i;
    const float T = d.rows[b].temperature;
    const float *row = d.L + (size_t)i * d.ldl;
    float lmax = -INFINITY, amax = 0.0f;
    bool nan = false;
    fls_rpart acc = fls_rpart_empty();
    /* two sub-chunks a step: their 4 loads in flight together (cf is 1 or even) */
    for (int s = 0; s < d.cf; s += 2) {
        float la[8], lb[8];
        fls_fraw8(d, row, blockIdx.x, s, la);
        if (s + 1 < d.cf)
            fls_fraw8(d, row, blockIdx.x, s + 1, lb);
        fls_fstats8(d, T, la, s, g64, lmax, amax, nan, acc);
        if (s + 1 < d.cf)
            fls_fstats8(d, T, lb, s + 1, g64, lmax, amax, nan, acc);
    }
    if (!d.need_s) {
        const float xm = fls_temper(lmax, T);
        acc.lse_m = xm > -INFINITY && xm < INFINITY ? (double)xm : -INFINITY;
    }
    acc.bad = (nan ? FLS_RBAD_NAN : 0u) | (isinf(fls_temper(amax, T)) ? FLS_RBAD_TEMP : 0u);
    const fls_rpart pt = fls_rpart_warp(acc, lane);
    if (lane == 0)
        sp[w] = pt;
    __syncthreads();
    if (d.top_cap > 0) {
        /* groups of gsz / 64 maxima of 64 tokens, tempered once */
        const int per = d.gsz / 64, ng = 32 * d.cf / per;
        for (int q = threadIdx.x; q < ng; q += blockDim.x) {
            float g = g64[q * per];
            for (int r = 1; r < per; r++)
                g = fmaxf(g, g64[q * per + r]);
            d.gmax[(int64_t)i * d.M + (int64_t)blockIdx.x * ng + q] = fls_temper(g, T);
        }
    }
    if (threadIdx.x == 0) {
        fls_rpart a = sp[0];
        for (int k = 1; k < 8; k++)
            fls_rpart_merge(a, sp[k]);
        d.part[(int64_t)i * d.P + blockIdx.x] = a;
    }
}

/* One block per row: the chunks' statistics merged (into part i * P), then
 * the decision, or (top list) the candidates' threshold. */
__global__ void __launch_bounds__(512) fls_rfast_row_kernel(fls_rule_dev d)
{
    extern __shared__ __align__(16) char fls_rdyn[];
    __shared__ fls_rpart sp[512];
    fls_pdl_trigger(); /* launched plainly after the matmul (or a copy): the next kernels may start */
    const int i = blockIdx.x, b = d.r0 + i, t = threadIdx.x;
    /* the group maxima (dynamic: M4 float4), then with the matmul's tables
     * and a top list, the row's table of 64-token maxima (m64 floats) */
    float *gm = (float *)fls_rdyn;
    const int M4 = (d.M + 3) / 4;
    float *s64 = d.gfold && d.top_cap > 0 ? gm + 4 * M4 : NULL;
    if (d.gfold) {
        /* the matmul's 64-token tables: the row's largest logit, its errors
         * (a NaN or +inf logit: a group maximum NaN or +inf) and its largest
         * finite |l| — the statistics pass's values (maxima: in any order),
         * tempered once by thread 0; 4 entries of each table in flight */
        __shared__ float wl[16], wa[16];
        float lm = -INFINITY, am = 0.0f;
        int bad = 0;
        const float *g64 = d.g64 + (int64_t)i * d.m64, *gab = d.gab + (int64_t)i * d.m64;
        for (int64_t q0 = t; q0 < d.m64; q0 += 4 * (int64_t)blockDim.x) {
            float g[4], ab[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int64_t q = q0 + u * (int64_t)blockDim.x;
                g[u] = q < d.m64 ? g64[q] : -INFINITY;
                ab[u] = q < d.m64 ? gab[q] : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int64_t q = q0 + u * (int64_t)blockDim.x;
                if (s64 && q < d.m64)
                    s64[q] = g[u];
                bad |= isnan(g[u]) || g[u] == INFINITY;
                lm = fmaxf(lm, g[u]);
                am = fmaxf(am, ab[u]);
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            lm = fmaxf(lm, __shfl_xor_sync(FLS_FULL_MASK, lm, o));
            am = fmaxf(am, __shfl_xor_sync(FLS_FULL_MASK, am, o));
        }
        if ((t & 31) == 0) {
            wl[t >> 5] = lm;
            wa[t >> 5] = am;
        }
        bad = __syncthreads_or(bad);
        /* the row's largest logit, in every thread */
        for (int w = 0; w < (int)(blockDim.x >> 5); w++)
            lm = fmaxf(lm, wl[w]);
        const float T = d.rows[b].temperature, xm = fls_temper(lm, T);
        /* the groups' moments (gmo) as sums about one shift, the row's
         * largest x (a data point): count, sum and sum of squares of the
         * deviations add without a division; each thread's in table order,
         * the warps' in a fixed tree, then the 16 warps' in order */
        __shared__ double wm[16][3];
        if (d.moments) {
            double n = 0.0, s1 = 0.0, s2 = 0.0;
            if (xm > -INFINITY && xm < INFINITY) {
                const double *go = d.gmo + (int64_t)i * d.m64 * 3;
                for (int64_t q = t; q < d.m64; q += blockDim.x) {
                    const double gn = go[3 * q], dm = go[3 * q + 1] - (double)xm;
                    if (gn > 0.0) {
                        n += gn;
                        s1 += gn * dm;
                        s2 += go[3 * q + 2] + gn * dm * dm;
                    }
                }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                n += __shfl_xor_sync(FLS_FULL_MASK, n, o);
                s1 += __shfl_xor_sync(FLS_FULL_MASK, s1, o);
                s2 += __shfl_xor_sync(FLS_FULL_MASK, s2, o);
            }
            if ((t & 31) == 0) {
                wm[t >> 5][0] = n;
                wm[t >> 5][1] = s1;
                wm[t >> 5][2] = s2;
            }
            __syncthreads();
        }
        if (t == 0) {
            for (int w = 1; w < (int)(blockDim.x >> 5); w++)
                am = fmaxf(am, wa[w]);
            fls_rpart a = fls_rpart_empty();
            if (d.moments) {
                double n = 0.0, s1 = 0.0, s2 = 0.0;
                for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
                    n += wm[w][0];
                    s1 += wm[w][1];
                    s2 += wm[w][2];
                }
                if (n > 0.0) {
                    const double q = s1 / n;
                    a.n = n;
                    a.mean = (double)xm + q;
                    a.m2 = fmax(s2 - s1 * q, 0.0);
                }
            }
            a.lse_m = xm > -INFINITY && xm < INFINITY ? (double)xm : -INFINITY;
            a.bad = (bad ? FLS_RBAD_NAN : 0u) | (isinf(fls_temper(am, T)) ? FLS_RBAD_TEMP : 0u);
            sp[0] = a;
        }
        __syncthreads();
    } else {
        fls_rpart a = fls_rpart_empty();
        for (int c = t; c < d.nchunk; c += blockDim.x)
            fls_rpart_merge(a, d.part[(int64_t)i * d.P + c]);
        sp[t] = a;
        __syncthreads();
        for (int s = 256; s > 0; s >>= 1) {
            if (t < s)
                fls_rpart_merge(sp[t], sp[t + s]);
            __syncthreads();
        }
    }
    const fls_rpart pt = sp[0];
    if (t == 0) {
        d.part[(int64_t)i * d.P] = pt;
        d.nsup[i] = -1; /* the select pass reads the row */
    }
    const bool pending = d.top_cap > 0 && !(pt.bad & (FLS_RBAD_NAN | FLS_RBAD_TEMP)) && pt.lse_m > -INFINITY;
    if (!pending) {
        if (t == 0)
            fls_rule_decide_row(d, b, pt, NULL, NULL, NULL, 0, INFINITY, 1, d.rule[b], d.rows[b].temperature);
        return;
    }
    /* t: the C-th largest group maximum (-inf when fewer groups: every
     * finite token), the value whose count of larger maxima is below C and
     * whose count of larger or equal ones is not */
    if (d.gfold) {
        /* groups of gsz / 64 table entries (past the table: -inf, as past V),
         * their maximum tempered once: the statistics pass's values */
        const float T = d.rows[b].temperature;
        const int per = d.gsz / 64;
        for (int k = t; k < 4 * M4; k += blockDim.x) {
            float g = -INFINITY;
            for (int r = 0; r < per && k < d.M; r++) {
                const int64_t q = (int64_t)k * per + r;
                if (q < d.m64)
                    g = fmaxf(g, s64[q]);
            }
            gm[k] = k < d.M ? fls_temper(g, T) : NAN; /* NaN: never counted */
        }
    } else {
        for (int k = t; k < 4 * M4; k += blockDim.x)
            gm[k] = k < d.M ? d.gmax[(int64_t)i * d.M + k] : NAN; /* NaN: never counted */
    }
    if (t == 0) {
        d.thr[i] = -INFINITY;
        d.ccount[i] = 0;
        d.code[b] = FLS_RC_PENDING;
    }
    __syncthreads();
    if (d.M < d.top_cap)
        return;
    const float4 *g4 = (const float4 *)gm;
    for (int k = t; k < d.M; k += blockDim.x) {
        const float y = gm[k];
        int gt = 0, ge = 0;
        for (int q = 0; q < M4; q++) {
            const float4 a = g4[q];
            gt += (a.x > y) + (a.y > y) + (a.z > y) + (a.w > y);
            ge += (a.x >= y) + (a.y >= y) + (a.z >= y) + (a.w >= y);
        }
        if (gt < d.top_cap && ge >= d.top_cap)
            d.thr[i] = y; /* every thread that finds it writes the same value */
    }
}

/* The tokens x >= thr of the pending rows, into the row's candidates. */
__global__ void __launch_bounds__(256) fls_rfast_collect_kernel(fls_rule_dev d)
{
    fls_pdl_wait();
    fls_pdl_trigger();
    const int lane = threadIdx.x & 31, i = blockIdx.y, b = d.r0 + i;
    if (d.code[b] != FLS_RC_PENDING)
        return;
    const float T = d.rows[b].temperature, thr = d.thr[i], pre = fls_fpre(thr, T);
    const float *row = d.L + (size_t)i * d.ldl;
    /* with the matmul's tables only the 64-token groups whose maximum
     * passes are read (on flat rows a few dozen of the row's thousands) */
    __shared__ float sgb[16 * 32];
    int any;
    const float *sg = fls_fgroups(d, i, sgb, pre, &any);
    if (!any)
        return; /* no candidate in the chunk */
    /* two sub-chunks a step (their loads in flight together); a warp with no
     * candidate among its 256 tokens goes on at once */
    for (int s0 = 0; s0 < d.cf; s0 += 2) {
        float x[2][8];
        fls_fload8(d, row, s0, T, thr, pre, x[0], sg);
        if (s0 + 1 < d.cf)
            fls_fload8(d, row, s0 + 1, T, thr, pre, x[1], sg);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (s0 + h >= d.cf)
                break;
            bool any = false;
#pragma unroll
            for (int k = 0; k < 8; k++)
                any |= x[h][k] > -INFINITY;
            if (!__any_sync(FLS_FULL_MASK, any))
                continue;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const bool c = x[h][k] > -INFINITY;
                const unsigned m = __ballot_sync(FLS_FULL_MASK, c);
                if (!m)
                    continue;
                unsigned base = 0;
                if (lane == 0)
                    base = atomicAdd(&d.ccount[i], (unsigned)__popc(m));
                base = __shfl_sync(FLS_FULL_MASK, base, 0);
                const unsigned pos = base + (unsigned)__popc(m & ((1u << lane) - 1u));
                if (c && pos < FLS_FCCAP)
                    d.cand[(int64_t)i * FLS_FCCAP + pos] =
                        fls_frank(x[h][k], fls_ftoken(d, blockIdx.x, threadIdx.x, 8 * (s0 + h) + k));
            }
        }
    }
}

/* The first of two (key, token) by fls_key_beats; token -1: none. */
struct fls_fbest {
    float key, x;
    long long v;
};

__device__ __forceinline__ bool fls_fbeats(const fls_fbest &a, const fls_fbest &b)
{
    return a.v >= 0 && (b.v < 0 || fls_key_beats(a.key, a.v, b.key, b.v));
}

__device__ __forceinline__ fls_fbest fls_fbest_warp(fls_fbest a)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        fls_fbest o2;
        o2.key = __shfl_xor_sync(FLS_FULL_MASK, a.key, o);
        o2.x = __shfl_xor_sync(FLS_FULL_MASK, a.x, o);
        o2.v = __shfl_xor_sync(FLS_FULL_MASK, a.v, o);
        if (fls_fbeats(o2, a))
            a = o2;
    }
    return a;
}

/* Inserts c into the best-first list l (empty slots: v < 0) keeping its k
 * best; every index static, so the list stays in registers. */
template <int N> __device__ __forceinline__ void fls_flist_push(fls_fbest (&l)[N], int k, const fls_fbest &c)
{
    bool bt[N];
#pragma unroll
    for (int q = 0; q < N; q++)
        bt[q] = q < k && fls_fbeats(c, l[q]);
#pragma unroll
    for (int q = N - 1; q >= 0; q--)
        if (bt[q])
            l[q] = q > 0 && bt[q > 0 ? q - 1 : 0] ? l[q > 0 ? q - 1 : 0] : c;
}

/* Whether c enters the best-first list l of k slots (beats its k-th). */
template <int N>
__device__ __forceinline__ bool fls_flist_enters(const fls_fbest (&l)[N], int k, const fls_fbest &c)
{
    bool r = false;
#pragma unroll
    for (int q = 0; q < N; q++)
        if (q == k - 1)
            r = fls_fbeats(c, l[q]);
    return r;
}

/* Drops the list's head. */
template <int N> __device__ __forceinline__ void fls_flist_pop(fls_fbest (&l)[N])
{
#pragma unroll
    for (int q = 0; q + 1 < N; q++)
        l[q] = l[q + 1];
    l[N - 1].v = -1;
    l[N - 1].key = l[N - 1].x = -INFINITY;
}

template <int N> __device__ __forceinline__ void fls_flist_init(fls_fbest (&l)[N])
{
#pragma unroll
    for (int q = 0; q < N; q++) {
        l[q].v = -1;
        l[q].key = l[q].x = -INFINITY;
    }
}

/* The warp's k best of its lanes' best-first lists l, one a round while
 * any is left: the round's best is popped from its lane's list and passed
 * to put(r, best) in every lane; returns how many. */
template <int N, typename F>
__device__ __forceinline__ int fls_flist_warp_take(fls_fbest (&l)[N], int k, F put)
{
    int got = 0;
#pragma unroll
    for (int r = 0; r < N; r++) {
        if (r >= k)
            break;
        const fls_fbest bw = fls_fbest_warp(l[0]);
        if (bw.v < 0)
            break;
        if (l[0].v == bw.v)
            fls_flist_pop(l);
        put(r, bw);
        got = r + 1;
    }
    return got;
}

/* The key of the list's k-th entry (-inf while it has fewer). */
template <int N> __device__ __forceinline__ float fls_flist_kth(const fls_fbest (&l)[N], int k)
{
    float r = -INFINITY;
#pragma unroll
    for (int q = 0; q < N; q++)
        if (q == k - 1 && l[q].v >= 0)
            r = l[q].key;
    return r;
}

/* A best-first list of ordered keys (fls_frank of (key, token): one 64-bit
 * compare ranks two entries as fls_key_beats does; 0: empty) whose first k
 * slots are in use: u is carried down past every entry it beats. Every
 * index static, so the list stays in registers; a push is k compares. */
template <int N>
__device__ __forceinline__ void fls_ulist_push(unsigned long long (&l)[N], int k, unsigned long long u)
{
#pragma unroll
    for (int q = 0; q < N; q++)
        if (q < k && u > l[q]) {
            const unsigned long long t = l[q];
            l[q] = u;
            u = t;
        }
}

/* Drops the list's head. */
template <int N> __device__ __forceinline__ void fls_ulist_pop(unsigned long long (&l)[N])
{
#pragma unroll
    for (int q = 0; q + 1 < N; q++)
        l[q] = l[q + 1];
    l[N - 1] = 0ull;
}

template <int N> __device__ __forceinline__ void fls_ulist_init(unsigned long long (&l)[N])
{
#pragma unroll
    for (int q = 0; q < N; q++)
        l[q] = 0ull;
}

/* The warp's k best of its lanes' best-first lists l, one a round: the
 * round's maximum is popped from its lane's list and passed to
 * put(r, best) in every lane (0: none left). */
template <int N, typename F>
__device__ __forceinline__ void fls_ulist_warp_take(unsigned long long (&l)[N], int k, F put)
{
    for (int r = 0; r < k; r++) {
        const unsigned long long bw = fls_warp_max_u64(l[0]);
        if (bw && l[0] == bw) /* the winner's lane pops it */
            fls_ulist_pop(l);
        put(r, bw);
    }
}

/* The key of the list's k-th entry (-inf while it has fewer). */
template <int N> __device__ __forceinline__ float fls_ulist_kth(const unsigned long long (&l)[N], int k)
{
    float r = -INFINITY;
#pragma unroll
    for (int q = 0; q < N; q++)
        if (q == k - 1 && l[q])
            r = fls_frank_x(l[q]);
    return r;
}

/* A chunk's pick from its ordered key u (0: none, v = -1), x read back
 * from the row (the x it was ranked with). */
__device__ __forceinline__ void fls_fsel_write(fls_stair_entry &out, unsigned long long u, const float *row,
                                               float T)
{
    const int64_t v = u ? (int64_t)(0xffffffffu - (uint32_t)u) : -1;
    out.key = u ? fls_frank_x(u) : -INFINITY;
    out.x = u ? fls_temper(row[v], T) : -INFINITY;
    out.v = v;
}

/* Each (chunk, draw): the K best keys of the chunk's support; and, where
 * the support's log-sum-exp is summed here, the chunk's sum (in the first
 * draw's pass). A chunk without support writes empty entries (v = -1).
 * The lists hold ordered keys (fls_ulist_push); an entry's x is read back
 * from the row when it is written. */
template <int KM> __global__ void __launch_bounds__(256) fls_rfast_select_kernel(fls_rule_dev d)
{
    __shared__ unsigned long long sw[8 * KM];
    __shared__ double sz[8];
    fls_pdl_wait();
    fls_pdl_trigger();
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, i = blockIdx.y, b = d.r0 + i;
    if (d.code[b] != FLS_RC_OK || d.nsup[i] != -1) /* drawn from the list (>= 0) */
        return;
    const fls_row_params rp = d.rows[b];
    const float T = rp.temperature, cut = d.cut[b], pre = fls_fpre(cut, T);
    const bool noisy = fls_temperature_noisy(T);
    const int Kb = (int)d.rule[b].K;
    const float *row = d.L + (size_t)i * d.ldl;
    const double m = d.part[(int64_t)i * d.P].lse_m;
    const int lsedev = d.lsedev[b];
    /* with the matmul's tables only the groups that reach the cut are read */
    __shared__ float sgb[16 * 32];
    int any;
    const float *sg = fls_fgroups(d, i, sgb, pre, &any);
    if (!any) {
        /* no token of the chunk in the support: empty picks, a sum of 0 */
        for (int j = 0; j < d.draws; j++) {
            fls_stair_entry *out = d.sel + (((int64_t)i * d.draws + j) * d.nsel + blockIdx.x) * d.K;
            if (threadIdx.x < Kb)
                fls_fsel_write(out[threadIdx.x], 0ull, row, T);
        }
        if (lsedev && threadIdx.x == 0)
            d.lsep[(int64_t)i * d.nchunk + blockIdx.x] = 0.0;
        return;
    }
    for (int j = 0; j < d.draws; j++) {
        fls_stair_entry *out = d.sel + (((int64_t)i * d.draws + j) * d.nsel + blockIdx.x) * d.K;
        const bool sum = lsedev && j == 0;
        double z = 0.0;
        unsigned long long l[KM];
        fls_ulist_init(l);
        /* a key below thr is beaten by K keys of the warp, so it cannot be
         * among the chunk's K best, and its log is skipped when the bound of
         * its noise's bucket shows it (as the fused kernels do). thr: a
         * lane's K-th best key, or the K-th largest of the lanes' best keys
         * (K lanes hold a key at least that large) */
        float thr = -INFINITY;
        for (int s = 0; s < d.cf; s++) {
            float x[8];
            fls_fload8(d, row, s, T, cut, pre, x, sg);
            if (sum) {
#pragma unroll
                for (int k = 0; k < 8; k++)
                    if (x[k] > -INFINITY)
                        z += exp((double)x[k] - m);
            }
#pragma unroll
            for (int p = 0; p < 4; p++) {
                if (!(x[2 * p] > -INFINITY || x[2 * p + 1] > -INFINITY))
                    continue;
                const int64_t v0 = fls_ftoken(d, blockIdx.x, threadIdx.x, 8 * s + 2 * p);
                uint4 r = make_uint4(0, 0, 0, 0);
                if (noisy)
                    r = fls_philox_pair(rp.seed, rp.offset, d.first_draw + (uint32_t)j, (uint64_t)v0);
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float xe = x[2 * p + e];
                    if (!(xe > -INFINITY))
                        continue;
                    float key = xe;
                    if (noisy) {
                        const uint64_t bits = fls_pair_bits(r, (uint64_t)(v0 + e));
                        if (d.gup && __fadd_rn(xe, d.gup[bits >> FLS_GB_SHIFT]) < thr)
                            continue; /* fl(x + g) <= fl(x + up[bucket]) < thr */
                        key = fls_temperature_key(xe, fls_gumbel_dev(bits), T);
                    }
                    if (key < thr)
                        continue; /* K keys of the warp are >= thr: not among the chunk's K best */
                    fls_ulist_push(l, Kb, fls_frank(key, v0 + e));
                }
                thr = fmaxf(thr, fls_ulist_kth(l, Kb));
            }
            thr = fls_warp_maxf(thr);
            if (KM > 1)
                thr = fmaxf(thr, fls_warp_kth_maxf(l[0] ? fls_frank_x(l[0]) : -INFINITY, Kb));
        }
        if (sum) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                z += __shfl_down_sync(FLS_FULL_MASK, z, o);
            if (lane == 0)
                sz[w] = z;
            __syncthreads();
            if (threadIdx.x == 0) {
                double a = 0.0;
                for (int k = 0; k < 8; k++)
                    a += sz[k];
                d.lsep[(int64_t)i * d.nchunk + blockIdx.x] = a;
            }
        }
        /* each warp's Kb best (Kb rounds: the warp's best head, popped from
         * its lane's list), then warp 0 the block's Kb best of those: two
         * barriers a draw, not three a round */
        fls_ulist_warp_take(l, Kb, [&](int r, unsigned long long bw) {
            if (lane == 0)
                sw[w * KM + r] = bw;
        });
        __syncthreads();
        if (w == 0) {
            unsigned long long bl[KM];
            fls_ulist_init(bl);
            for (int q = lane; q < 8 * Kb; q += 32)
                fls_ulist_push(bl, Kb, sw[(q / Kb) * KM + q % Kb]);
            fls_ulist_warp_take(bl, Kb, [&](int r, unsigned long long bw) {
                if (lane == 0)
                    fls_fsel_write(out[r], bw, row, T);
            });
        }
        __syncthreads(); /* sw is the next draw's */
    }
}

/* The warp's (row b, draw j): the Kb best of the lanes' lists, written
 * with the row's max m and support log-sum-exp lse (lane 0 writes). */
template <int KM>
__device__ void fls_fwarp_write(const fls_rule_dev &d, int b, int j, int Kb, fls_fbest (&l)[KM], double m,
                                double lse)
{
    const int lane = threadIdx.x & 31;
    float px[KM];
    int64_t pv[KM];
    const int got = fls_flist_warp_take(l, Kb, [&](int r, const fls_fbest &bw) {
        px[r] = bw.x;
        pv[r] = bw.v;
    });
    if (lane != 0)
        return;
    if (got == 0) {
        d.code[b] = FLS_RC_ALL_MASKED;
        return;
    }
    const size_t o = ((size_t)b * d.draws + j) * d.K;
    const bool greedy = !fls_temperature_noisy(d.rows[b].temperature);
    /* from got to K: -1 and 0; beyond the key resolution (rule.h): the commit writes nothing */
    if (fls_write_draw(px, pv, got, d.K, greedy, m, lse, d.tok + o, d.lp + o))
        d.code[b] = FLS_RC_TEMP;
}

/* The lane's share of the support's keys of row i, draw j, from the row's
 * sorted candidates (its first nsup entries are the support). */
template <int KM>
__device__ void fls_fcand_keys(const fls_rule_dev &d, int i, int b, int j, int Kb, fls_fbest (&l)[KM])
{
    const fls_row_params rp = d.rows[b];
    const float T = rp.temperature;
    const bool noisy = fls_temperature_noisy(T);
    const unsigned long long *sup = d.cand + (int64_t)i * FLS_FCCAP;
    for (int q = threadIdx.x & 31; q < d.nsup[i]; q += 32) {
        fls_fbest c;
        c.x = fls_frank_x(sup[q]);
        c.v = (int64_t)(0xffffffffu - (uint32_t)sup[q]);
        c.key = c.x;
        if (noisy) {
            const uint4 r = fls_philox_pair(rp.seed, rp.offset, d.first_draw + (uint32_t)j, (uint64_t)c.v);
            c.key = fls_temperature_key(c.x, fls_gumbel_dev(fls_pair_bits(r, (uint64_t)c.v)), T);
        }
        fls_flist_push(l, Kb, c);
    }
}

/* The warp's (row i, draw j) from the row's sorted candidates, whose
 * first nsup hold the support: its K best keys, written (lane 0). */
template <int KM> __device__ void fls_fdraw_cand(const fls_rule_dev &d, int i, int b, int j, int Kb, double m)
{
    fls_fbest l[KM];
    fls_flist_init(l);
    fls_fcand_keys(d, i, b, j, Kb, l);
    fls_fwarp_write(d, b, j, Kb, l, m, d.lse[b]);
}

/* One block per pending row: its candidates sorted into the exact top list,
 * then the decision; with d.ldraw (every row bounded by a top-k within the
 * list, no log-sum-exp asked) also the row's draws from its support, which
 * then always lies within the candidates (the final kernel's work, one warp
 * per draw; the select and final kernels are not launched). */
template <int KM> __global__ void __launch_bounds__(256) fls_rfast_list_kernel(fls_rule_dev d)
{
    extern __shared__ __align__(16) char fls_rdyn[];
    fls_pdl_wait();
    fls_pdl_trigger();
    const int i = blockIdx.x, b = d.r0 + i;
    if (d.code[b] != FLS_RC_PENDING)
        return;
    const unsigned n = d.ccount[i];
    if (n > FLS_FCCAP) {
        if (threadIdx.x == 0) {
            d.code[b] = FLS_RC_SECOND; /* massive ties: the host decides from the full row */
            d.cut[b] = -INFINITY;
            d.lsedev[b] = 0;
        }
        return;
    }
    unsigned long long *k = (unsigned long long *)fls_rdyn;
    fls_top_entry *e = (fls_top_entry *)(k + FLS_FCCAP);
    /* what the decision reads, staged by another warp while the keys load
     * (thread 0 then decides from shared memory, not a chain of global loads) */
    __shared__ fls_row_rule srule;
    __shared__ fls_rpart spt;
    __shared__ float sthr, sT;
    if (threadIdx.x == 32) {
        srule = d.rule[b];
        spt = d.part[(int64_t)i * d.P];
        sthr = d.thr[i];
        sT = d.rows[b].temperature;
    }
    int n2 = 64;
    while (n2 < (int)n)
        n2 *= 2;
    for (int j = threadIdx.x; j < n2; j += blockDim.x)
        k[j] = j < (int)n ? d.cand[(int64_t)i * FLS_FCCAP + j] : 0ull;
    __syncthreads();
    if ((int)n <= (int)blockDim.x) {
        /* a thread per key: its rank is the number of larger keys (the keys
         * are distinct: the token is in them), one pass and one barrier;
         * the sorted keys go to k + FLS_FCCAP / 2 (unused: n <= 256) */
        unsigned long long *ks = k + FLS_FCCAP / 2;
        if (threadIdx.x < n) {
            const unsigned long long key = k[threadIdx.x];
            int r = 0;
            for (int q = 0; q < (int)n; q++)
                r += k[q] > key;
            ks[r] = key;
        }
        __syncthreads();
        k = ks;
    } else {
        fls_bitonic_desc(k, n2);
    }
    const int64_t ntop = (int64_t)n < d.top_cap ? (int64_t)n : d.top_cap;
    double *wt = (double *)(e + FLS_FTOP), *pw = wt + FLS_FTOP;
    const double m = spt.lse_m;
    for (int j = threadIdx.x; j < ntop; j += blockDim.x) {
        e[j].x = fls_frank_x(k[j]);
        e[j].pad_ = 0;
        e[j].v = (int64_t)(0xffffffffu - (uint32_t)k[j]);
        wt[j] = exp((double)e[j].x - m);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        /* where the decision sums the list (a filter that needs its
         * support's sum, a support's log-sum-exp): the weights' prefix sums
         * in list order (fls_filter_stats.pw), so it bisects instead of
         * adding one by one */
        const bool lsum = (fls_filter_row_needs(srule.value) & FLS_NEED_SUPPORT_SUM) != 0;
        double z = 0.0;
        if (lsum || d.want_lse) {
            pw[0] = 0.0;
            for (int64_t j = 0; j < ntop; j++) {
                z += wt[j];
                pw[j + 1] = z;
            }
        }
        /* every token not in the list is ranked after it: the next candidate,
         * or (all candidates kept) below the threshold */
        const float thr = sthr;
        const float dropped = (int64_t)n > d.top_cap ? fls_frank_x(k[d.top_cap])
                              : thr > -INFINITY      ? nextafterf(thr, -INFINITY)
                                                     : -INFINITY;
        fls_rpart pt = spt;
        if (!d.need_s && dropped == -INFINITY && lsum) {
            /* the statistics carry no sum (need_s off: an earlier filter
             * cuts before the support's sum is read, unless the row has too
             * few finite tokens); every finite token is in the list: its
             * sum, in rank order */
            pt.lse_s = z;
        }
        fls_rule_decide_row(d, b, pt, e, wt, lsum || d.want_lse ? pw : NULL, ntop, dropped, 1, srule, sT);
    }
    __syncthreads();
    /* a support within the candidates ({x >= cut} with cut >= thr, its
     * log-sum-exp known): its sorted keys stay for the draws (nsup) */
    const float cut = d.cut[b];
    if (d.code[b] != FLS_RC_OK)
        return;
    if (d.lsedev[b] || !(cut >= sthr)) {
        /* not with ldraw (the host's condition rules it out); were it
         * reached, the row goes to the host, never drawn wrong */
        if (d.ldraw && threadIdx.x == 0)
            d.code[b] = FLS_RC_SECOND;
        return;
    }
    for (int j = threadIdx.x; j < (int)n; j += blockDim.x) {
        d.cand[(int64_t)i * FLS_FCCAP + j] = k[j];
        if (fls_frank_x(k[j]) >= cut && (j + 1 == (int)n || !(fls_frank_x(k[j + 1]) >= cut)))
            d.nsup[i] = j + 1;
    }
    if (!d.ldraw)
        return;
    __syncthreads(); /* the block's writes of cand and nsup seen by its warps */
    const int Kb = (int)srule.K;
    for (int j = threadIdx.x >> 5; j < d.draws; j += blockDim.x >> 5)
        fls_fdraw_cand<KM>(d, i, b, j, Kb, m);
}

/* One block per (row, draw): the K best of the chunks' (or the matmul's
 * CTAs') picks, or (a support within the sorted candidates, nsup >= 0) of
 * the support's keys drawn from that list alone (warp 0); written. The
 * FLS_FFIN_WARPS warps take the chunks (a thread's few lists, best first:
 * the first entry that does not enter its list ends a chunk's), each
 * warp's K best go to shared memory, and warp 0 takes their K best: the K
 * best of one set of distinct tokens under one total order, so the same
 * picks as any other split (one warp a row measured about 1.6x slower for
 * K = 4 over 132 CTAs' lists). */
#define FLS_FFIN_WARPS 8
template <int KM>
__global__ void __launch_bounds__(32 * FLS_FFIN_WARPS) fls_rfast_final_kernel(fls_rule_dev d)
{
    __shared__ fls_fbest wl[FLS_FFIN_WARPS][KM];
    __shared__ int wn[FLS_FFIN_WARPS];
    fls_pdl_wait();
    fls_pdl_trigger();
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int i = (int)(blockIdx.x / d.draws), j = (int)(blockIdx.x % d.draws), b = d.r0 + i;
    if (d.code[b] != FLS_RC_OK)
        return;
    const int Kb = (int)d.rule[b].K;
    const double m = d.part[(int64_t)i * d.P].lse_m;
    if (d.nsup[i] >= 0) {
        if (w == 0)
            fls_fdraw_cand<KM>(d, i, b, j, Kb, m);
        return;
    }
    fls_fbest l[KM];
    fls_flist_init(l);
    const fls_stair_entry *in = d.sel + ((int64_t)i * d.draws + j) * d.nsel * d.K;
    for (int c = threadIdx.x; c < d.nsel; c += blockDim.x) {
        fls_stair_entry e[KM];
#pragma unroll
        for (int r = 0; r < KM; r++) {
            e[r].v = -1;
            if (r < Kb)
                e[r] = in[(int64_t)c * d.K + r];
        }
        bool go = true;
#pragma unroll
        for (int r = 0; r < KM; r++) {
            fls_fbest f;
            f.x = e[r].x;
            f.key = e[r].key;
            f.v = e[r].v;
            go = go && r < Kb && f.v >= 0 && fls_flist_enters(l, Kb, f);
            if (go)
                fls_flist_push(l, Kb, f);
        }
    }
    /* the warp's K best, best first */
    const int got = fls_flist_warp_take(l, Kb, [&](int r, const fls_fbest &bw) {
        if (lane == 0)
            wl[w][r] = bw;
    });
    if (lane == 0)
        wn[w] = got;
    __syncthreads();
    if (w != 0)
        return;
    /* warp 0: lane q < FLS_FFIN_WARPS holds warp q's list */
    fls_flist_init(l);
#pragma unroll
    for (int r = 0; r < KM; r++)
        if (lane < FLS_FFIN_WARPS && r < wn[lane])
            l[r] = wl[lane][r];
    double lse;
    if (!d.lsedev[b]) {
        lse = d.lse[b];
    } else {
        double z = 0.0;
        for (int c = lane; c < d.nchunk; c += 32)
            z += d.lsep[(int64_t)i * d.nchunk + c];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            z += __shfl_down_sync(FLS_FULL_MASK, z, o);
        z = __shfl_sync(FLS_FULL_MASK, z, 0);
        lse = m + log(z);
        if (j == 0 && lane == 0)
            d.lse[b] = lse;
    }
    fls_fwarp_write(d, b, j, Kb, l, m, lse);
}

cudaError_t fls_rule_launch_fast_decide(const fls_rule_dev &d, cudaStream_t st)
{
    const dim3 grid((unsigned)d.nchunk, (unsigned)d.nb);
    cudaError_t e = cudaSuccess;
    if (!d.gfold) { /* with the matmul's tables the row kernel folds them */
        fls_rfast_stats_kernel<<<grid, 256, 0, st>>>(d);
        e = cudaGetLastError();
    }
    const size_t gb = d.top_cap > 0 ? (size_t)(d.M + 3) / 4 * 16 + (d.gfold ? (size_t)d.m64 * 4 : 0) : 0;
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(fls_rfast_row_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)gb);
    if (e == cudaSuccess) {
        fls_rfast_row_kernel<<<(unsigned)d.nb, 512, gb, st>>>(d);
        e = cudaGetLastError();
    }
    if (d.top_cap > 0 && e == cudaSuccess) {
        e = fls_rlaunch(fls_rfast_collect_kernel, grid, dim3(256), 0, st, d.pdl, d);
        const size_t lb = (size_t)FLS_FCCAP * 8 +
                          (size_t)FLS_FTOP * (sizeof(fls_top_entry) + 2 * sizeof(double)) + sizeof(double);
        void (*kern)(fls_rule_dev) = FLS_RULE_BY_K(fls_rfast_list_kernel, d.K);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)lb);
        if (e == cudaSuccess)
            e = fls_rlaunch(kern, dim3((unsigned)d.nb), dim3(256), lb, st, d.pdl, d);
    }
    return e;
}

int fls_rule_select_blocks_per_sm(int64_t K)
{
    int n = 0;
    if (K < 1 || K > FLS_FKMAX ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, FLS_RULE_BY_K(fls_rfast_select_kernel, K), 256,
                                                      0) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

cudaError_t fls_rule_launch_fast_select(const fls_rule_dev &d, cudaStream_t st)
{
    if ((int64_t)d.nb * d.draws > INT32_MAX) /* the final kernel: a block per (row, draw) */
        return cudaErrorInvalidConfiguration;
    const dim3 grid((unsigned)d.nchunk, (unsigned)d.nb);
    cudaError_t e = cudaSuccess;
    if (!d.wkeys) /* else the matmul kept the keys */
        e = fls_rlaunch(FLS_RULE_BY_K(fls_rfast_select_kernel, d.K), grid, dim3(256), 0, st, d.pdl, d);
    if (e == cudaSuccess)
        e = fls_rlaunch(FLS_RULE_BY_K(fls_rfast_final_kernel, d.K), dim3((unsigned)((int64_t)d.nb * d.draws)),
                        dim3(32 * FLS_FFIN_WARPS), 0, st, d.pdl, d);
    return e;
}
