/*
 * rule_plan.cu — the rule family on the CUDA engine (engine.cuh): a call's
 * plan, made from the rows' descriptors (variants/registry.h) and never from
 * a rule's name, and the passes of kernels/rules.cu that carry it out. Rows
 * the one-pass statistics leave undecided are finished exactly on the host
 * with the engines' shared reference (lib/ref/rule_ref.h).
 */
#include "kernels/engine.cuh"
#include "lib/base/fls_dtype.h"
#include "variants/registry.h"
#include "kernels/rules.cuh"
#include "variants/stair.h"
#include "variants/topc.h"

extern "C" {
#include "lib/ref/rule_ref.h"
}

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the rule family (kernels/rules.cuh) ---- */

/* The top list's capacity on the GPU: the longest list a row's filter
 * asks for by its value (up to 65536), and at least opts.rule_top_cap
 * (default 256) where a row reads a list that no value bounds (an open
 * list, or its support's log-sum-exp); 0 when the CPU engine keeps none.
 * Any capacity gives the same tokens: a row whose statistics do not decide
 * is decided from its full logits. */
static int64_t fls_rule_top_cap(const fls_request *req, const fls_ref_ctx *rc, int want_lse,
                                const fls_cuda_opts &opts)
{
    if (rc->top_cap == 0)
        return 0;
    int64_t cap = 0;
    const int64_t floor_cap = opts.rule_top_cap > 0 ? opts.rule_top_cap : 256;
    for (int64_t b = 0; b < req->batch; b++) {
        int64_t exact;
        FLS_BOOL bounded, open;
        fls_filter_row_list(req->rule[b].value, 65536.0, &exact, &bounded, &open);
        cap = exact > cap ? exact : cap;
        if (!bounded &&
            (open || (want_lse && (!req->rows || fls_temperature_noisy(req->rows[b].temperature)))))
            cap = cap > floor_cap ? cap : floor_cap;
    }
    cap = (cap + 31) / 32 * 32;
    cap = cap < 32 ? 32 : cap;
    return cap < req->vocab ? cap : req->vocab;
}

/* Row b's full tempered logits on the host (row i of the block at dL). */
static fls_status fls_rule_row_host(cudaStream_t str, const float *dL, int64_t ldl, int64_t i, int64_t V,
                                    float T, float *x)
{
    cudaError_t ce =
        cudaMemcpyAsync(x, dL + (size_t)i * ldl, (size_t)V * sizeof(float), cudaMemcpyDeviceToHost, str);
    if (ce == cudaSuccess)
        ce = cudaStreamSynchronize(str);
    if (ce != cudaSuccess)
        return fls_from_cuda(ce);
    for (int64_t v = 0; v < V; v++)
        x[v] = fls_temper(x[v], T);
    return FLS_OK;
}

static fls_status fls_rule_up(cudaStream_t str, void *dst, const void *src, size_t n)
{
    /* from pageable memory: the source is free to reuse when this returns */
    cudaError_t ce = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, str);
    return ce == cudaSuccess ? FLS_OK : fls_from_cuda(ce);
}

static fls_status fls_rule_down(cudaStream_t str, void *dst, const void *src, size_t n)
{
    cudaError_t ce = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, str);
    if (ce == cudaSuccess)
        ce = cudaStreamSynchronize(str);
    return ce == cudaSuccess ? FLS_OK : fls_from_cuda(ce);
}

/* Row i of the block on the host: its tempered logits into x and its
 * merged partial (the engine's second pass and exact reference inputs). */
static fls_status fls_rule_row_inputs(cudaStream_t str, const fls_rule_dev &d, int64_t i, float T, float *x,
                                      fls_row_part *part)
{
    fls_rpart pt;
    fls_status st = fls_rule_down(str, &pt, d.part + (size_t)i * d.P, sizeof pt);
    if (st == FLS_OK)
        st = fls_rule_row_host(str, d.L, d.ldl, i, d.V, T, x);
    part->lse.m = pt.lse_m;
    part->lse.s = pt.lse_s;
    part->n = pt.n;
    part->mean = pt.mean;
    part->m2 = pt.m2;
    return st;
}

/* Row i of the block, undecided by its statistics: its cutoff and support
 * log-sum-exp from its full row on the host (the CPU engine's second pass),
 * uploaded with its code. */
static fls_status fls_rule_second_row(cudaStream_t str, const fls_rule_dev &d, const fls_ref_ctx *rc,
                                      int64_t i, float **xp, int *code)
{
    const int64_t b = d.r0 + i;
    if (!*xp && !(*xp = (float *)malloc((size_t)d.V * sizeof(float))))
        return FLS_ERR_OUT_OF_MEMORY;
    float *x = *xp;
    fls_row_part part;
    fls_status st = fls_rule_row_inputs(str, d, i, rc->req->rows[b].temperature, x, &part);
    if (st != FLS_OK)
        return st;
    float c;
    double l;
    /* without the device's sum (need_s off), the host's own statistics of the row */
    const int r = fls_ref_cut_lse(rc, b, x, d.need_s ? &part : NULL, &c, &l, NULL);
    if (r != FLS_OK)
        return (fls_status)r;
    code[b] = FLS_RC_OK;
    st = fls_rule_up(str, d.cut + b, &c, sizeof c);
    if (st == FLS_OK)
        st = fls_rule_up(str, d.lse + b, &l, sizeof l);
    if (st == FLS_OK)
        st = fls_rule_up(str, d.code + b, &code[b], sizeof(int));
    return st;
}

/* The matmul of a fused rule call (fls_rule_matmul): opts, else AUTO: the
 * wgmma kernel at B <= 128 where the dispatcher picks the wgmma path. At
 * B = 128 it took 0.87-0.94x cuBLAS's time for min-p, top-k 50 and top-k 50 +
 * top-p 0.9 and 0.79-0.82x without replacement (H100, D = 4096 and 8192);
 * at B = 256 0.96-1.03x, so cuBLAS stays there. */
static int fls_rule_matmul_of(const fls_cuda_opts &opts, int64_t B, int64_t V, const fls_matrix *W,
                              const fls_matrix *H)
{
    if (opts.rule_matmul != FLS_RULE_MATMUL_AUTO)
        return opts.rule_matmul;
    return B <= 128 && fls_cuda_auto_path(B, V, W->cols, W->dtype, H->dtype) == FLS_CUDA_PATH_WGMMA
               ? FLS_RULE_MATMUL_WGMMA
               : FLS_RULE_MATMUL_CUBLAS;
}

extern "C" void fls_cuda_rule_matmul_counts(const fls_context_t *ctx, uint64_t counts[3])
{
    for (int k = 0; k < 3; k++)
        counts[k] = ctx && ctx->cuda ? ctx->cuda->rule_matmul_calls[k] : 0;
}

extern "C" uint64_t fls_cuda_rule_list_draws(const fls_context_t *ctx)
{
    return ctx && ctx->cuda ? ctx->cuda->rule_list_draw_calls : 0;
}

extern "C" uint64_t fls_cuda_rule_matmul_keys(const fls_context_t *ctx)
{
    return ctx && ctx->cuda ? ctx->cuda->rule_key_calls : 0;
}

extern "C" uint64_t fls_cuda_rule_pdl(const fls_context_t *ctx)
{
    return ctx && ctx->cuda ? ctx->cuda->rule_pdl_calls : 0;
}

/* A rule call: its inputs, its plan (decided before any launch), the
 * device view of its passes, and the host's state while it runs. */
struct fls_rule_call {
    /* inputs */
    fls_context_t *ctx;
    fls_cuda_state *s;
    const fls_matrix *W, *H, *L;
    const fls_request *req;
    const fls_outputs *out;
    fls_cuda_opts opts;
    bool capturing;
    int64_t B, V, draws, K;
    int want_lse;
    fls_ref_ctx rc;
    /* the plan */
    int64_t top_cap;
    int32_t stair_cap;
    int64_t nb;               /* rows per block */
    int64_t cf, nchunk, M;    /* threshold-first path: sub-chunks a chunk, chunks, group maxima */
    int gsz;                  /* tokens a group maximum */
    int fast;                 /* the threshold-first path (else the staircases) */
    size_t topb, sb;          /* a top list's and a staircase's bytes */
    int64_t P, S, nd;         /* parts of a row, tokens a part, draws a pass */
    int dev_rows;             /* params_on_device */
    int mm, wg;               /* the matmul (fls_rule_matmul), and whether the wgmma kernel runs it */
    int64_t m64, slots, nsel; /* its 64-token groups, its CTAs' key slots, picks a (row, draw) */
    int moments, wkeys;       /* the moments as its tables; it keeps the keys */
    int commit, queue_only;   /* committed on the device; queued only (async) */
    /* the device view and buffers */
    fls_rule_dev d;
    fls_row_params *rows_d;
    fls_row_rule *rule_d;
    unsigned *tflag;
    fls_mods_stage mods; /* masks, bias and penalties (mods.flag NULL: none) */
    float *g64, *gab, *buf;
    double *gmo;
    /* the host's state */
    cudaStream_t str;
    char *hup; /* the rows' parameters and rules, one upload */
    int uploaded, committed;
    int *code;       /* [B] the rows' fls_rcode */
    float *x;        /* a row's tempered logits (the host's rows) */
    int64_t *htok;   /* a row's tokens (overflowed staircases) */
    float *hlp;      /* and their log-probabilities */
    uint64_t redone; /* rows the host decided */
};

/* Rows a block, the threshold-first path's chunks and group maxima, or the
 * staircase path's parts and draws a pass. */
static void rule_plan_sizes(fls_rule_call &c)
{
    fls_cuda_state *s = c.s;
    const int64_t V = c.V, K = c.K;
    c.top_cap = fls_rule_top_cap(c.req, &c.rc, c.want_lse, c.opts);
    /* a staircase capacity of the options forces the staircase path (tests:
     * overflows; any capacity gives the same tokens) */
    c.stair_cap = c.opts.rule_stair_cap > 0 ? c.opts.rule_stair_cap : c.rc.stair_cap;
    /* rows per block: fused calls hold a block's logits (at most 512 MiB) */
    c.nb = c.B;
    if (!c.L) {
        c.nb = ((int64_t)512 << 20) / (4 * V);
        c.nb = c.nb < 1 ? 1 : (c.nb > c.B ? c.B : c.nb);
    }
    /* chunks of cf x FLS_FCK tokens: the fewest sub-chunks a chunk whose
     * (chunks x rows) blocks of the select pass fit in one wave of its
     * resident blocks (the kernel's registers allow 3 to 5 a
     * multiprocessor), asked once per context and K; 8 where the query
     * fails or K takes the staircase path */
    int64_t bpm = 8;
    if (K >= 1 && K <= FLS_FKMAX) {
        if (s->select_bpm[K] == 0)
            s->select_bpm[K] = fls_rule_select_blocks_per_sm(K);
        bpm = s->select_bpm[K] > 0 ? s->select_bpm[K] : 8;
    }
    c.cf = 1;
    while (c.cf < 16 && (V + c.cf * FLS_FCK - 1) / (c.cf * FLS_FCK) * c.nb > bpm * s->sm_count)
        c.cf *= 2;
    /* the options may force 1, 2, 4, 8 or 16 sub-chunks a chunk (the same tokens) */
    const int f = c.opts.rule_cf;
    if (f == 1 || f == 2 || f == 4 || f == 8 || f == 16)
        c.cf = f;
    c.nchunk = (V + c.cf * FLS_FCK - 1) / (c.cf * FLS_FCK);
    /* group maxima: at least 4 per entry of the top list where the groups allow */
    c.gsz = FLS_FCK;
    while (c.gsz > 64 && c.nchunk * c.cf * FLS_FCK / c.gsz < 4 * c.top_cap)
        c.gsz /= 2;
    c.M = c.nchunk * c.cf * FLS_FCK / c.gsz;
    /* the threshold-first path (rules.cuh) unless a limit or the options force the staircases */
    c.fast = c.opts.rule_stair_cap <= 0 && c.opts.rule_path == FLS_RULE_PATH_AUTO && K <= FLS_FKMAX &&
             c.top_cap <= FLS_FTOP && V < ((int64_t)1 << 32) - 1 && c.M <= 4096 &&
             (size_t)(c.nb * c.draws * c.nchunk * K) * sizeof(fls_stair_entry) <= ((size_t)256 << 20);
    c.topb = c.top_cap > 0 && !c.fast ? fls_topc_bytes(c.top_cap) : 0;
    c.sb = fls_stair_bytes(c.stair_cap);
    /* the parts of a row (threshold first: its chunks) and the draws of a pass */
    c.P = c.nchunk;
    c.S = 0;
    c.nd = c.draws;
    if (!c.fast) {
        /* about 8192 warps a block, at least 1024 tokens a part, multiples of 64 */
        const int64_t Pmax = (V + 1023) / 1024;
        int64_t P = (8192 + c.nb - 1) / c.nb;
        P = P > Pmax ? Pmax : P;
        P = P < 1 ? 1 : P;
        int64_t S = (V + P - 1) / P;
        S = (S + 63) / 64 * 64;
        P = (V + S - 1) / S;
        /* the state of a block, the lists at most 256 MiB: fewer parts otherwise */
        while (P > 1 && (size_t)(c.nb * P) * c.topb > ((size_t)256 << 20)) {
            S *= 2;
            P = (V + S - 1) / S;
        }
        int64_t nd = ((int64_t)256 << 20) / (int64_t)((size_t)(c.nb * P) * c.sb);
        /* a warp's states in shared memory: about 24 KB of staircases */
        const int64_t nd_smem =
            (int64_t)(((size_t)24 << 10) > c.topb + c.sb ? (((size_t)24 << 10) - c.topb) / c.sb : 1);
        nd = nd > nd_smem ? nd_smem : nd;
        c.nd = nd < 1 ? 1 : (nd > c.draws ? c.draws : nd);
        c.P = P;
        c.S = S;
    }
}

/* Rows in device arrays (params_on_device) or a capture: the queued path
 * only (no host step), in async mode; a capture replays the rule values it
 * saw, so they must be one value for every row. FLS_ERR_UNSUPPORTED else. */
static fls_status rule_plan_check_queued(const fls_rule_call &c)
{
    if (!(c.dev_rows || c.capturing))
        return FLS_OK;
    if (!(c.fast && c.nb == c.B && c.B <= 4096 && (c.s->async || c.opts.no_sync || c.capturing)))
        return FLS_ERR_UNSUPPORTED;
    for (int64_t b = 1; b < c.B && c.capturing; b++)
        if (memcmp(&c.req->rule[b], &c.req->rule[0], sizeof(fls_row_rule)) != 0)
            return FLS_ERR_UNSUPPORTED;
    return FLS_OK;
}

/* The matmul: the wgmma kernel with its 64-token tables for one block of
 * rows on the threshold-first path (fls_rule_matmul_of), else cuBLAS; the
 * moments among its tables where a filter needs them; its CTAs' K best keys
 * where no row has a filter. */
static void rule_plan_matmul(fls_rule_call &c)
{
    /* masks, bias and penalties change the logits after the matmul: cuBLAS,
     * not the wgmma kernel whose tables describe its own logits */
    c.mm =
        c.L || c.req->has_raw_mods ? FLS_RULE_MATMUL_CUBLAS : fls_rule_matmul_of(c.opts, c.B, c.V, c.W, c.H);
    c.wg = c.fast && c.nb == c.B && c.mm != FLS_RULE_MATMUL_CUBLAS && !c.opts.force_simt &&
           fls_wgmma_eligible(c.W, c.H) &&
           fls_wgmma_m64(c.V) * 4 <= (96 << 10); /* the row kernel holds a row's table */
    c.m64 = c.wg ? fls_wgmma_m64(c.V) : 0;
    c.moments = (c.req->needs & FLS_NEED_MOMENTS) != 0;
    /* rows without filters (the support: every finite token) and no
     * log-sum-exp asked: the matmul keeps each CTA's K best keys per (row,
     * draw) and the select pass is not run (opts.rule_keys < 0, tests: run
     * anyway) */
    c.wkeys = c.wg && c.mm == FLS_RULE_MATMUL_WGMMA && !c.want_lse && c.K <= FLS_WG_KMAX &&
              c.draws <= fls_wgmma_key_draws(c.B) && c.opts.rule_keys >= 0;
    for (int64_t b = 0; b < c.B && c.wkeys; b++)
        c.wkeys = !fls_filter_row_active(c.req->rule[b].value);
    c.slots = c.wkeys ? fls_wgmma_logits_slots(c.B, c.V, c.s->sm_count) : 0;
    /* entries per (row, draw) of the chunks' (or the CTAs') picks */
    c.nsel = c.slots > c.nchunk ? c.slots : c.nchunk;
}

/* The workspace's buffers of the plan: a sizing pass, then the carve. A
 * capture never allocates (one eager call first). */
static fls_status rule_carve(fls_rule_call &c)
{
    fls_rule_dev &d = c.d;
    const int64_t B = c.B, nb = c.nb, P = c.P, K = c.K;
    for (int pass = 0; pass < 2; pass++) {
        fls_carve w = {pass ? c.s->ws : NULL, 0};
        /* rows and rules adjacent: one upload */
        char *up = w.take<char>((size_t)B * (sizeof(fls_row_params) + sizeof(fls_row_rule)));
        c.rows_d = (fls_row_params *)up;
        c.rule_d = up ? (fls_row_rule *)(up + (size_t)B * sizeof(fls_row_params)) : NULL;
        d.part = w.take<fls_rpart>((size_t)(nb * P));
        d.top = c.topb ? w.take<char>((size_t)(nb * P) * c.topb) : NULL;
        d.stair = c.fast ? NULL : w.take<char>((size_t)(nb * P * c.nd) * c.sb);
        d.cut = w.take<float>((size_t)B);
        d.lse = w.take<double>((size_t)B);
        d.code = w.take<int>((size_t)B);
        if (!c.fast) { /* the staircases' picks */
            d.pick = w.take<int32_t>((size_t)(nb * c.nd * K));
            d.px = w.take<float>((size_t)(nb * c.nd * K));
            d.pv = w.take<int64_t>((size_t)(nb * c.nd * K));
        }
        d.tok = w.take<int64_t>((size_t)(B * c.draws * K));
        d.lp = w.take<float>((size_t)(B * c.draws * K));
        d.lsedev = w.take<int>((size_t)B);
        if (c.fast) {
            d.gmax = c.top_cap > 0 ? w.take<float>((size_t)(nb * c.M)) : NULL;
            d.thr = w.take<float>((size_t)nb);
            d.ccount = w.take<unsigned>((size_t)nb);
            d.cand = c.top_cap > 0 ? w.take<unsigned long long>((size_t)nb * FLS_FCCAP) : NULL;
            d.sel = w.take<fls_stair_entry>((size_t)(nb * c.draws * c.nsel * K));
            d.lsep = w.take<double>((size_t)(nb * c.nchunk));
            d.nsup = w.take<int>((size_t)nb);
        }
        /* the caller's logits are read in place unless changed (a copy) */
        c.buf = c.L && !c.req->has_raw_mods ? NULL : w.take<float>((size_t)(nb * c.V));
        fls_mods_take(w, c.req, &c.mods);
        c.tflag = c.dev_rows ? w.take<unsigned>(1) : NULL;
        c.g64 = c.wg ? w.take<float>((size_t)(nb * c.m64)) : NULL;
        c.gab = c.wg ? w.take<float>((size_t)(nb * c.m64)) : NULL;
        c.gmo = c.wg && c.moments ? w.take<double>((size_t)(nb * c.m64) * 3) : NULL;
        if (pass == 0) {
            if (c.capturing && w.off > c.s->ws_bytes)
                return FLS_ERR_UNSUPPORTED;
            fls_status st = fls_ensure_ws(c.s, w.off);
            if (st != FLS_OK)
                return st;
        }
    }
    return FLS_OK;
}

/* The device view's sizes and the statistics the rows' descriptors ask
 * for; the launch choices; the context's counters. */
static void rule_dev_plan(fls_rule_call &c)
{
    fls_rule_dev &d = c.d;
    fls_cuda_state *s = c.s;
    const fls_request *req = c.req;
    d.V = c.V;
    d.Pw = (int)c.P;
    d.S = c.S;
    d.top_cap = c.top_cap;
    d.stair_cap = c.stair_cap;
    d.nd = (int)c.nd;
    d.nchunk = (int)c.nchunk;
    d.cf = (int)c.cf;
    d.gsz = c.gsz;
    d.M = (int)c.M;
    d.P = (int)c.P;
    if (!c.fast) {
        /* shared-memory mode when a warp's states fit: 8 warps a block, merged in the block */
        const size_t wb = fls_rule_warp_bytes(d, 1);
        int64_t rw = (int64_t)(FLS_RSMEM_MAX / wb);
        rw = rw > 8 ? 8 : rw;
        /* FLS_RULE_PATH_STAIR_GLOBAL (tests): the global-memory path of lists too large for shared memory */
        d.smem = rw >= 1 && c.opts.rule_path != FLS_RULE_PATH_STAIR_GLOBAL;
        d.rw = d.smem ? (int)rw : 4;
        d.P = d.smem ? (int)((c.P + rw - 1) / rw) : (int)c.P;
    }
    d.K = c.K;
    d.moments = c.moments;
    /* the row's sum of exp(x - m): for logsumexp / logprobs, and for the
     * filters that read it (fls_filter_row_needs_sum). On the
     * threshold-first path a filter that needs its support's sum after an
     * earlier cut reads it from the list, except in a row with fewer finite
     * tokens than its list: the list then holds every finite token, and the
     * list kernel sums them there. */
    d.need_s = c.want_lse;
    for (int64_t b = 0; b < c.B && !d.need_s; b++)
        d.need_s = fls_filter_row_needs_sum(req->rule[b].value, c.fast);
    /* the matmul's tables: the passes read only the groups that reach their
     * threshold, and (gfold) they replace the statistics pass where no sum
     * is needed (maxima, and the moments in gmo: the matmul then reads the
     * rows' temperatures, uploaded before it) */
    if (c.wg) {
        d.g64 = c.g64;
        d.gab = c.gab;
        d.m64 = c.m64;
        d.gfold = c.mm == FLS_RULE_MATMUL_WGMMA && !d.need_s;
        d.gmo = d.gfold && c.moments ? c.gmo : NULL;
    }
    d.wkeys = c.wkeys;
    d.nsel = c.wkeys ? (int)c.slots : (int)c.nchunk;
    s->rule_key_calls += c.wkeys != 0;
    /* the kernels after the row kernel start as programmatic dependents
     * (each one's launch overlaps the end of the one before it; every such
     * kernel waits for it before reading anything): measured faster on the
     * select and list chains, slower where the final kernel follows the row
     * kernel directly (the matmul's keys), so not there. opts.rule_pdl
     * -1 / 1: never / always (A/B, tests) */
    d.pdl = c.opts.rule_pdl < 0 ? 0 : c.opts.rule_pdl > 0 ? 1 : !c.wkeys;
    s->rule_pdl_calls += d.pdl != 0;
    if (!c.L)
        s->rule_matmul_calls[!c.wg ? 0 : d.gfold ? 1 : 2]++;
    /* every row bounded by a list that a filter's value sizes (so its
     * support lies within its top list) and no log-sum-exp asked: the list
     * kernel draws the rows and the select and final kernels are not
     * launched (opts.rule_list_draw < 0, tests: launched anyway) */
    d.ldraw = c.fast && !c.want_lse && c.opts.rule_list_draw >= 0;
    for (int64_t b = 0; b < c.B && d.ldraw; b++) {
        const double k = fls_filter_row_bound(req->rule[b].value);
        d.ldraw = k >= 0.0 && k <= (double)c.top_cap;
    }
    s->rule_list_draw_calls += d.ldraw != 0;
    d.gup = c.opts.no_skip ? NULL : s->gbound;
    d.want_lse = c.want_lse;
    d.first_draw = req->first_draw;
    d.draws = c.draws;
    d.rows = c.rows_d;
    d.rule = c.rule_d;
    /* one block of rows on the threshold-first path: the outputs are
     * committed on the device when every row is decided, so the call
     * synchronises once (fls_rule_launch_commit) */
    c.commit = c.fast && c.nb == c.B && c.B <= 4096;
    /* such a call in async mode returns once queued: the commit kernel
     * records its error (or a row only the host can decide) in the sticky
     * word that fls_context_sync reads; other rule calls stay synchronous */
    c.queue_only = c.commit && (s->async || c.opts.no_sync || c.capturing);
}

/* The rows' parameters and rules to the device, once: after the first
 * block's matmul is queued (its staging then overlaps the matmul), or
 * before it where the matmul reads the temperatures (gmo) or the rules
 * (keys). */
static fls_status rule_upload_rows(fls_rule_call &c)
{
    const fls_request *req = c.req;
    const size_t rb = (size_t)c.B * sizeof(fls_row_params), ub = (size_t)c.B * sizeof(fls_row_rule);
    fls_status su;
    c.uploaded = 1;
    if (!c.dev_rows)
        return fls_rule_up(c.str, c.rows_d, c.hup, rb + ub);
    /* the rows packed from the device arrays (a temperature out of range
     * raises tflag: the commit writes nothing); the rule values from the
     * host, or in a capture from the kernel's argument */
    fls_ws pws;
    memset(&pws, 0, sizeof pws);
    pws.tempflag = c.tflag;
    pws.epoch = 1;
    cudaError_t ce = cudaMemsetAsync(c.tflag, 0, sizeof(unsigned), c.str);
    if (ce == cudaSuccess)
        ce = fls_launch_pack_rows((int)c.B, req->dev_temperature, req->temperature_value, req->dev_row_seeds,
                                  req->seed, req->dev_row_offsets, req->offset, c.rows_d, pws, c.str);
    if (ce == cudaSuccess && c.capturing)
        ce = fls_rule_launch_fill(c.rule_d, (int)c.B, req->rule[0], c.str);
    su = fls_from_cuda(ce);
    if (su == FLS_OK && !c.capturing)
        su = fls_rule_up(c.str, c.rule_d, req->rule, ub);
    return su;
}

/* The logits of the block of nbc rows from r0: the caller's, or the
 * matmul's into the workspace (the wgmma kernel with its tables, or
 * cuBLAS). */
static fls_status rule_block_logits(fls_rule_call &c, int64_t r0, int64_t nbc)
{
    fls_rule_dev &d = c.d;
    fls_status st = FLS_OK;
    if (c.L) {
        d.L = (const float *)c.L->data + (size_t)r0 * c.L->ld;
        d.ldl = c.L->ld;
        if (c.mods.flag) {
            st = fls_from_cuda(
                fls_launch_mods_apply(d.L, d.ldl, c.buf, c.V, r0, nbc, 0, c.V, c.mods.dev, c.str));
            d.L = c.buf;
            d.ldl = c.V;
        }
        return st;
    }
    const fls_matrix *W = c.W;
    fls_matrix Hb = *c.H;
    Hb.data = (const char *)c.H->data + (size_t)r0 * c.H->ld * fls_dtype_bytes(c.H->dtype);
    Hb.rows = nbc;
    if (c.wg) {
        fls_wg_rule_extra ex;
        memset(&ex, 0, sizeof ex);
        ex.gmo = d.gmo ? c.gmo : NULL;
        ex.rows = c.rows_d;
        ex.rule = c.rule_d;
        ex.keys = c.wkeys ? (int)c.K : 0;
        ex.draws = (int)c.draws;
        ex.first_draw = c.req->first_draw;
        ex.gup = d.gup;
        ex.sel = d.sel;
        ex.kst = c.K;
        ex.warps = c.opts.logits_warps;
        if ((ex.gmo || ex.keys) && !c.uploaded) /* the matmul reads the rows */
            st = rule_upload_rows(c);
        if (st == FLS_OK)
            st = fls_from_cuda(fls_launch_wgmma_logits(W->data, W->ld, Hb.data, Hb.ld, W->dtype, (int)nbc,
                                                       c.V, W->cols, c.buf, c.V, c.g64, c.gab, &ex,
                                                       c.s->sm_count, c.str));
    } else {
        st = fls_gemm_logits(c.s, W, &Hb, 0, c.V, c.buf, c.V, c.opts.force_simt);
        if (st == FLS_OK && c.mods.flag)
            st = fls_from_cuda(
                fls_launch_mods_apply(c.buf, c.V, c.buf, c.V, r0, nbc, 0, c.V, c.mods.dev, c.str));
    }
    d.L = c.buf;
    d.ldl = c.V;
    return st;
}

/* Row i of the block, undecided by its statistics: decided on the host. */
static fls_status rule_host_decide(fls_rule_call &c, int64_t i)
{
    c.redone++;
    return fls_rule_second_row(c.str, c.d, &c.rc, i, &c.x, c.code);
}

/* The threshold-first path over the block: decide, select (or the list
 * kernel's draws), commit; one download of the codes, and the rows the
 * host decides are selected again (the others give the same picks). */
static fls_status rule_block_fast(fls_rule_call &c, int64_t r0, int64_t nbc)
{
    fls_rule_dev &d = c.d;
    const fls_outputs *out = c.out;
    fls_status st = fls_from_cuda(fls_rule_launch_fast_decide(d, c.str));
    for (int round = 0; st == FLS_OK; round++) {
        /* with ldraw the list kernel drew every row it decided; the rows
         * the host decided are selected in round 1 */
        if (round == 1)
            d.pdl = 0; /* after the host's copies: plain launches */
        if (round == 1 && d.wkeys) {
            /* the rows the host decided: the select pass's picks */
            d.wkeys = 0;
            d.nsel = d.nchunk;
        }
        if (!(d.ldraw && round == 0))
            st = fls_from_cuda(fls_rule_launch_fast_select(d, c.str));
        if (st == FLS_OK && c.commit)
            st = fls_from_cuda(fls_rule_launch_commit(
                d.code, (int)c.B, d.tok, d.lp, d.lse, c.B * c.draws * c.K, out->tokens, out->logprobs,
                out->logsumexp, c.queue_only ? c.s->sticky : NULL, c.tflag, c.mods.flag, d.pdl, c.str));
        if (st != FLS_OK || c.queue_only)
            break;
        st = fls_rule_down(c.str, c.code + r0, d.code + r0, (size_t)nbc * sizeof(int));
        int again = 0;
        for (int64_t i = 0; i < nbc && st == FLS_OK && round == 0; i++)
            if (c.code[r0 + i] == FLS_RC_SECOND) {
                st = rule_host_decide(c, i);
                again = 1;
            }
        if (!again)
            break;
    }
    /* committed on the device: queued, or every row decided */
    c.committed = c.commit && st == FLS_OK;
    for (int64_t b = 0; b < c.B && c.committed && !c.queue_only; b++)
        c.committed = c.code[b] == FLS_RC_OK;
    return st;
}

/* Row b (row i of the block) whose staircase overflowed: every draw by the
 * CPU engine's exact reference, uploaded to the staged outputs. */
static fls_status rule_host_draws(fls_rule_call &c, int64_t i, int64_t b)
{
    const int64_t n = c.draws * c.K;
    if (!c.x)
        c.x = (float *)malloc((size_t)c.V * sizeof(float));
    if (!c.htok)
        c.htok = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    if (!c.hlp)
        c.hlp = (float *)malloc((size_t)n * sizeof(float));
    if (!c.x || !c.htok || !c.hlp)
        return FLS_ERR_OUT_OF_MEMORY;
    fls_row_part part;
    fls_status st = fls_rule_row_inputs(c.str, c.d, i, c.req->rows[b].temperature, c.x, &part);
    if (st != FLS_OK)
        return st;
    double l;
    const int r = fls_ref_row(&c.rc, b, c.x, &part, fls_ref_gumbel_span, c.htok, c.hlp, &l);
    if (r != FLS_OK)
        return (fls_status)r;
    st = fls_rule_up(c.str, c.d.tok + (size_t)(b * n), c.htok, (size_t)n * sizeof(int64_t));
    if (st == FLS_OK)
        st = fls_rule_up(c.str, c.d.lp + (size_t)(b * n), c.hlp, (size_t)n * sizeof(float));
    if (st == FLS_OK)
        st = fls_rule_up(c.str, c.d.lse + b, &l, sizeof l);
    c.redone++;
    return st;
}

/* The staircase path over the block: the fold and select passes of each
 * pass of draws (the first also decides; the host decides what it leaves
 * undecided), then the rows whose staircase overflowed. */
static fls_status rule_block_stair(fls_rule_call &c, int64_t r0, int64_t nbc)
{
    fls_rule_dev &d = c.d;
    fls_status st = FLS_OK;
    for (int64_t db = 0; db < c.draws && st == FLS_OK; db += c.nd) {
        d.nd = (int)(c.draws - db < c.nd ? c.draws - db : c.nd);
        d.draw0 = (uint32_t)db;
        st = fls_from_cuda(fls_rule_launch_fold(d, db == 0, c.str));
        if (st == FLS_OK && db == 0) {
            /* the rows the statistics left undecided: their full row, on the host */
            st = fls_rule_down(c.str, c.code + r0, d.code + r0, (size_t)nbc * sizeof(int));
            for (int64_t i = 0; i < nbc && st == FLS_OK; i++)
                if (c.code[r0 + i] == FLS_RC_SECOND)
                    st = rule_host_decide(c, i);
        }
        if (st == FLS_OK)
            st = fls_from_cuda(fls_rule_launch_select(d, c.str));
    }
    if (st == FLS_OK)
        st = fls_rule_down(c.str, c.code + r0, d.code + r0, (size_t)nbc * sizeof(int));
    for (int64_t i = 0; i < nbc && st == FLS_OK; i++) {
        const int64_t b = r0 + i;
        if (c.code[b] != FLS_RC_OVERFLOW)
            continue;
        c.code[b] = FLS_RC_OK;
        st = rule_host_draws(c, i, b);
    }
    return st;
}

/* The call's status in the CPU engine's order (a NaN, then an overflow of
 * l / T, then an empty row), and the staged outputs where the device did
 * not commit them. */
static fls_status rule_finish(fls_rule_call &c, fls_status st)
{
    const int64_t n = c.B * c.draws * c.K;
    if (st == FLS_OK && !c.queue_only && c.mods.flag) {
        /* a value the device found out of range comes first, as on the host */
        unsigned bad = 0;
        st = fls_rule_down(c.str, &bad, c.mods.flag, sizeof bad);
        if (st == FLS_OK && bad)
            return FLS_ERR_PARAM;
    }
    if (st == FLS_OK && !c.queue_only) {
        const int order[3] = {FLS_RC_NAN, FLS_RC_TEMP, FLS_RC_ALL_MASKED};
        const fls_status as[3] = {FLS_ERR_NAN, FLS_ERR_TEMPERATURE, FLS_ERR_ALL_MASKED};
        for (int k = 0; k < 3 && st == FLS_OK; k++)
            for (int64_t b = 0; b < c.B; b++)
                if (c.code[b] == order[k]) {
                    st = as[k];
                    break;
                }
    }
    if (st == FLS_OK && !c.committed) {
        const fls_outputs *out = c.out;
        cudaError_t ce = cudaMemcpyAsync(out->tokens, c.d.tok, (size_t)n * sizeof(int64_t),
                                         cudaMemcpyDeviceToDevice, c.str);
        if (ce == cudaSuccess && out->logprobs)
            ce = cudaMemcpyAsync(out->logprobs, c.d.lp, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice,
                                 c.str);
        if (ce == cudaSuccess && out->logsumexp)
            ce = fls_rule_launch_to_float(c.d.lse, out->logsumexp, c.B, c.str);
        if (ce == cudaSuccess)
            ce = cudaStreamSynchronize(c.str);
        if (ce != cudaSuccess)
            st = fls_from_cuda(ce);
    }
    if (c.req->second_pass_rows)
        *c.req->second_pass_rows += c.redone;
    return st;
}

/*
 * The rule family on the CUDA engine: the one-pass statistics of
 * kernels/rules.cu over the caller's fp32 logits (L) or over blocks of rows
 * whose logits the matmul computes into the workspace (W, H); rows the
 * statistics leave undecided, and rows whose staircase overflowed, are
 * finished exactly on the host with the CPU engine's code. Outputs are
 * staged and written only when every row succeeded. Synchronous, except a
 * call of one block of rows on the threshold-first path in async mode,
 * which only queues (its status in the sticky word; rows for the host are
 * FLS_ERR_UNSUPPORTED there).
 */
fls_status fls_cuda_rules(fls_context_t *ctx, const fls_matrix *W, const fls_matrix *H, const fls_matrix *L,
                          const fls_request *req, const fls_outputs *out, const fls_cuda_opts &opts,
                          bool capturing)
{
    fls_rule_call c;
    memset(&c, 0, sizeof c);
    c.ctx = ctx;
    c.s = ctx->cuda;
    c.W = W;
    c.H = H;
    c.L = L;
    c.req = req;
    c.out = out;
    c.opts = opts;
    c.capturing = capturing;
    c.B = req->batch;
    c.V = req->vocab;
    c.draws = req->draws;
    c.K = req->K;
    c.want_lse = out->logsumexp != NULL || out->logprobs != NULL;
    c.dev_rows = req->params_on_device;
    c.str = c.s->stream;
    fls_ref_plan(req, c.want_lse, &c.rc);

    rule_plan_sizes(c);
    fls_status st = rule_plan_check_queued(c);
    if (st != FLS_OK)
        return st;
    rule_plan_matmul(c);
    st = rule_carve(c);
    if (st != FLS_OK)
        return st;
    if (!c.dev_rows) { /* the rows' parameters and rules in one host buffer (rule_upload_rows) */
        const size_t rb = (size_t)c.B * sizeof(fls_row_params), ub = (size_t)c.B * sizeof(fls_row_rule);
        c.hup = (char *)malloc(rb + ub);
        if (!c.hup)
            return FLS_ERR_OUT_OF_MEMORY;
        memcpy(c.hup, req->rows, rb);
        memcpy(c.hup + rb, req->rule, ub);
    }
    rule_dev_plan(c);
    st = fls_mods_stage_run(req, &c.mods, 0, c.str);
    if (st != FLS_OK)
        return st;
    c.code = (int *)malloc((size_t)c.B * sizeof(int));
    if (!c.code)
        st = FLS_ERR_OUT_OF_MEMORY;
    for (int64_t r0 = 0; r0 < c.B && st == FLS_OK; r0 += c.nb) {
        const int64_t nbc = c.B - r0 < c.nb ? c.B - r0 : c.nb;
        c.d.nb = (int)nbc;
        c.d.r0 = (int)r0;
        st = rule_block_logits(c, r0, nbc);
        c.d.vec = (uintptr_t)c.d.L % 16 == 0 && c.d.ldl % 4 == 0;
        if (!c.uploaded && st == FLS_OK)
            st = rule_upload_rows(c);
        if (st == FLS_OK)
            st = c.fast ? rule_block_fast(c, r0, nbc) : rule_block_stair(c, r0, nbc);
    }
    st = rule_finish(c, st);
    free(c.hup);
    free(c.code);
    free(c.x);
    free(c.htok);
    free(c.hlp);
    return st;
}
