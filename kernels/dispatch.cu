/*
 * dispatch.cu — which path computes a call's tokens, and the plain calls
 * (no rules) and a stream's chunks on the CUDA engine (engine.cuh).
 */
#include "kernels/engine.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* W and H fit the tensor-core kernel's operand rules. */
bool fls_wgmma_eligible(const fls_matrix *W, const fls_matrix *H)
{
    if (W->dtype != H->dtype || (W->dtype != FLS_DTYPE_BF16 && W->dtype != FLS_DTYPE_F16))
        return false;
    if (((uintptr_t)W->data) % 16 || ((uintptr_t)H->data) % 16 || W->ld % 8 || H->ld % 8 || W->cols % 8)
        return false;
    if (W->cols > (1 << 30) || W->rows >= ((int64_t)1 << 31) - 128 || H->rows > (1 << 30))
        return false;
    return true;
}

/* Dispatcher (docs/GPU.md). Measured on an H200 (bf16, T = 0.7, one draw,
 * median of 100; docs/PERF.md): the warp-specialised wgmma kernel beats the
 * cuBLAS-chunked path at every benchmarked shape and B <= 256 (at D = 8192,
 * B = 256: 1.011 vs 1.083 ms). Above B = 256 nothing is measured; there the
 * chunked path (cuBLAS at its best with large B) stays at D >= 6144, split
 * between the measured 4096 and 8192. */
static const struct {
    int64_t d_min, d_max, b_min, b_max;
} k_chunked_rules[] = {
    {6144, INT64_MAX, 257, INT64_MAX},
};

extern "C" fls_cuda_path fls_cuda_auto_path(int64_t B, int64_t V, int64_t D, fls_dtype wd, fls_dtype hd)
{
    (void)V;
    const bool w16 = wd == hd && (wd == FLS_DTYPE_BF16 || wd == FLS_DTYPE_F16);
    if (!w16)
        return FLS_CUDA_PATH_CHUNKED;
    for (size_t i = 0; i < sizeof k_chunked_rules / sizeof k_chunked_rules[0]; i++)
        if (D >= k_chunked_rules[i].d_min && D <= k_chunked_rules[i].d_max && B >= k_chunked_rules[i].b_min &&
            B <= k_chunked_rules[i].b_max)
            return FLS_CUDA_PATH_CHUNKED;
    return FLS_CUDA_PATH_WGMMA;
}

enum fls_kind { K_WGMMA, K_CHUNKED, K_UNFUSED_GUMBEL, K_LOGITS_GUMBEL, K_MULTINOMIAL };

/* The device view of one pass's partials (nent entries per (row, draw)) and
 * the context's marks under this epoch; no skipping tables, shared
 * thresholds or groups until the caller sets them. */
static fls_ws fls_ws_view(const fls_cuda_state *s, unsigned epoch, unsigned long long *best, float *xw,
                          float *pm, float *ps, uint32_t first_draw, int64_t nent, int want_lse)
{
    fls_ws ws;
    memset(&ws, 0, sizeof ws);
    ws.best = best;
    ws.xw = xw;
    ws.m = pm;
    ws.s = ps;
    ws.status = s->flags;
    ws.nanflag = s->flags + 2;
    ws.tempflag = s->flags + 3;
    ws.finite = s->flags + 4;
    ws.shallow = NULL; /* set by calls that check the key resolution */
    ws.epoch = epoch;
    ws.first_draw = first_draw;
    ws.nent = (int)nent;
    ws.want_lse = want_lse;
    return ws;
}

/* The path of a call without rules: its kind, the wgmma kernel's batch
 * tile, the chunked path's vocabulary rows a chunk (the options' choice, or
 * the dispatcher's). FLS_ERR_PARAM for a tile the options got wrong. */
static fls_status fls_dispatch_kind(const fls_matrix *W, const fls_matrix *H, const fls_matrix *L,
                                    const fls_request *req, const fls_cuda_opts &opts, fls_kind *kind_out,
                                    int *tile_out, int64_t *chunk_out)
{
    const int64_t B = req->batch, V = req->vocab;
    const bool grouped = req->method == FLS_METHOD_GROUPED;
    const int g = grouped ? (int)req->group_size : 0;
    fls_kind kind;
    int tile_b = 0;
    int64_t chunk_v = 0;
    if (L) {
        kind = req->method == FLS_METHOD_UNFUSED_MULTINOMIAL ? K_MULTINOMIAL : K_LOGITS_GUMBEL;
    } else if (grouped) {
        /* the wgmma kernel's grouped sampler takes g = its 128-row tile;
         * otherwise cuBLAS chunks + the grouped segment sampler */
        fls_cuda_path p = opts.path != FLS_CUDA_PATH_AUTO
                              ? opts.path
                              : fls_cuda_auto_path(B, V, W->cols, W->dtype, H->dtype);
        if (p == FLS_CUDA_PATH_WGMMA && g == 128 && fls_wgmma_eligible(W, H)) {
            kind = K_WGMMA;
            tile_b = opts.tile_b ? opts.tile_b : fls_cuda_wgmma_tile_n(B);
            if (tile_b != 16 && tile_b != 32 && tile_b != 64 && tile_b != 128)
                return FLS_ERR_PARAM;
        } else {
            kind = K_CHUNKED;
            chunk_v = opts.chunk_v > 0 ? opts.chunk_v : ((int64_t)8 << 20) / B;
            if (chunk_v < 32768)
                chunk_v = 32768;
        }
    } else if (req->method == FLS_METHOD_UNFUSED_MULTINOMIAL) {
        kind = K_MULTINOMIAL;
    } else if (req->method == FLS_METHOD_UNFUSED_GUMBEL) {
        kind = K_UNFUSED_GUMBEL;
    } else {
        fls_cuda_path p = opts.path != FLS_CUDA_PATH_AUTO
                              ? opts.path
                              : fls_cuda_auto_path(B, V, W->cols, W->dtype, H->dtype);
        if (p == FLS_CUDA_PATH_WGMMA && fls_wgmma_eligible(W, H))
            kind = K_WGMMA;
        else
            kind = K_CHUNKED;
        if (kind == K_WGMMA) {
            tile_b = opts.tile_b ? opts.tile_b : fls_cuda_wgmma_tile_n(B);
            if (tile_b != 16 && tile_b != 32 && tile_b != 64 && tile_b != 128)
                return FLS_ERR_PARAM;
        } else if (kind == K_CHUNKED) {
            chunk_v = opts.chunk_v;
            if (chunk_v <= 0) {
                chunk_v = ((int64_t)8 << 20) / B; /* a 32 MB fp32 chunk: stays in the 50 MB L2 */
                if (chunk_v < 32768)
                    chunk_v = 32768;
            }
            chunk_v = (chunk_v + FLS_SEG - 1) / FLS_SEG * FLS_SEG;
            if (chunk_v > (V + FLS_SEG - 1) / FLS_SEG * FLS_SEG)
                chunk_v = (V + FLS_SEG - 1) / FLS_SEG * FLS_SEG;
        }
    }
    *kind_out = kind;
    *tile_out = tile_b;
    *chunk_out = chunk_v;
    return FLS_OK;
}

extern "C" fls_status fls_cuda_run(fls_context_t *ctx, const fls_matrix *W, const fls_matrix *H,
                                   const fls_matrix *L, const fls_request *req, const fls_outputs *out,
                                   const fls_cuda_opts *opts_in)
{
    if (!ctx || !ctx->cuda || !req || !out || !out->tokens)
        return FLS_ERR_NULL;
    fls_cuda_state *s = ctx->cuda;
    const fls_cuda_opts opts = opts_in ? *opts_in : s->dev;
    const int64_t B = req->batch, V = req->vocab, draws = req->draws;
    if (V >= (int64_t)0xffffffffLL || B > (1 << 30))
        return FLS_ERR_UNSUPPORTED; /* 32-bit token field of the packed winner */
    if (L && L->dtype != FLS_DTYPE_F32)
        return FLS_ERR_DTYPE; /* from-logits on the GPU takes fp32 logits */
    const bool grouped = req->method == FLS_METHOD_GROUPED;
    const int g = grouped ? (int)req->group_size : 0;
    if (grouped && g > 4096)
        return FLS_ERR_UNSUPPORTED; /* the GPU's grouped segments hold at most 4096 tokens */
    cudaError_t ce = cudaSetDevice(s->device);
    if (ce != cudaSuccess)
        return fls_from_cuda(ce);
    cudaStreamCaptureStatus cap_status = cudaStreamCaptureStatusNone;
    if (s->stream && cudaStreamIsCapturing(s->stream, &cap_status) != cudaSuccess)
        return fls_from_cuda(cudaGetLastError());
    const bool capturing = cap_status != cudaStreamCaptureStatusNone;
    if (capturing && !req->params_on_device)
        return FLS_ERR_UNSUPPORTED; /* a graph would replay the host's rows of this call: params_on_device */
    if (req->rule) {
        if (req->method == FLS_METHOD_UNFUSED_MULTINOMIAL)
            return FLS_ERR_UNSUPPORTED; /* the baseline takes no rules on the GPU (docs/GPU.md) */
        return fls_cuda_rules(ctx, W, H, L, req, out, opts, capturing);
    }

    fls_kind kind;
    int tile_b = 0;
    int64_t chunk_v = 0;
    const fls_status ks = fls_dispatch_kind(W, H, L, req, opts, &kind, &tile_b, &chunk_v);
    if (ks != FLS_OK)
        return ks;

    /* segments (chunks are whole segments: the entry of a segment is c0 / seg) */
    const int64_t seg = grouped ? fls_segment_len_grouped(B, g) : fls_segment_len(B);
    if (kind == K_CHUNKED && grouped) {
        chunk_v = (chunk_v + seg - 1) / seg * seg;
        if (chunk_v > (V + seg - 1) / seg * seg)
            chunk_v = (V + seg - 1) / seg * seg;
    }
    int64_t nent;
    if (kind == K_WGMMA)
        nent = fls_wgmma_slots(B, V, tile_b, s->sm_count); /* one partial per (row, CTA) */
    else
        nent = (V + seg - 1) / seg;
    if (nent > INT32_MAX)
        return FLS_ERR_UNSUPPORTED;
    const int want_lse = out->logsumexp != NULL || out->logprobs != NULL;
    /* draws per pass: partial winners of one pass stay under 256 MB */
    int64_t nd = ((int64_t)256 << 20) / (12 * B * nent);
    if (nd < 1)
        nd = 1;
    if (kind == K_MULTINOMIAL && nd > 64)
        nd = 64;
    if (grouped && nd > FLS_GROUP_MAX_ND)
        nd = FLS_GROUP_MAX_ND; /* the grouped segment sampler's best groups live in registers */
    if (kind == K_WGMMA && nd > fls_wgmma_max_draws(tile_b))
        nd = fls_wgmma_max_draws(tile_b); /* the kernel keeps (row, draw) state in shared memory */
    if (nd > draws)
        nd = draws;

    /* workspace layout */
    fls_row_params *rows_d = NULL;
    unsigned long long *best = NULL;
    double *gk = NULL;
    float *xw = NULL, *pm = NULL, *ps = NULL, *buf = NULL, *P = NULL, *rmax = NULL, *rsum = NULL;
    float *lmod = NULL; /* the caller's logits with the masks, bias and penalties */
    int64_t ldbuf = 0;
    fls_mods_stage mst;
    for (int pass = 0; pass < 2; pass++) {
        fls_carve c = {pass ? s->ws : NULL, 0};
        rows_d = c.take<fls_row_params>((size_t)B);
        fls_mods_take(c, req, &mst);
        if (L && req->has_raw_mods)
            lmod = c.take<float>((size_t)(B * V));
        if (kind != K_MULTINOMIAL) {
            best = c.take<unsigned long long>((size_t)(B * nd * nent));
            xw = c.take<float>((size_t)(B * nd * nent));
            if (grouped)
                gk = c.take<double>((size_t)(B * nd * nent));
            if (want_lse) {
                pm = c.take<float>((size_t)(B * nent));
                ps = c.take<float>((size_t)(B * nent));
            }
        }
        if (kind == K_CHUNKED) {
            ldbuf = chunk_v;
            buf = c.take<float>((size_t)(B * chunk_v));
        } else if (kind == K_UNFUSED_GUMBEL || (kind == K_MULTINOMIAL && !L)) {
            ldbuf = V;
            buf = c.take<float>((size_t)(B * V));
        }
        if (kind == K_MULTINOMIAL) {
            P = c.take<float>((size_t)(B * V));
            rmax = c.take<float>((size_t)B);
            rsum = c.take<float>((size_t)B);
        }
        if (pass == 0) {
            if (capturing && c.off > s->ws_bytes)
                return FLS_ERR_UNSUPPORTED; /* no allocation under capture: warm up with these shapes first */
            fls_status st = fls_ensure_ws(s, c.off);
            if (st != FLS_OK)
                return st;
        }
    }
    if (capturing &&
        (B > s->flags_rows || s->epoch == 0xffffffffu ||
         (kind == K_WGMMA && !grouped && !opts.no_skip && B > s->gthr_rows && B <= FLS_GTHR_MAX_ROWS)))
        return FLS_ERR_UNSUPPORTED; /* the marks or the thresholds would be (re)allocated */
    fls_status st = fls_ensure_flags(s, B);
    if (st != FLS_OK)
        return st;
    cudaStream_t str = s->stream;
    /* a call captured in a graph has the reserved epoch 1 and clears its
     * marks first, so every replay starts clean; eager calls count from 2 */
    const unsigned epoch = capturing ? 1u : ++s->epoch;
    if (capturing) {
        /* one node: the flags, every finite mark and the shallow marks of B rows */
        ce = cudaMemsetAsync(s->flags, 0, (size_t)(4 + s->flags_rows + B) * sizeof(unsigned), str);
        if (ce != cudaSuccess)
            return fls_from_cuda(ce);
    }
    if (!req->params_on_device && !opts.rows_cached) {
        ce = cudaMemcpyAsync(rows_d, req->rows, (size_t)B * sizeof(fls_row_params), cudaMemcpyHostToDevice,
                             str);
        if (ce != cudaSuccess)
            return fls_from_cuda(ce);
    }
    fls_ws ws = fls_ws_view(s, epoch, best, xw, pm, ps, req->first_draw, nent, want_lse);
    /* every sampler with keys marks the key resolution (the multinomial has none) */
    if (kind != K_MULTINOMIAL)
        ws.shallow = s->flags + 4 + s->flags_rows;
    /* Skipping (exact, common.cuh) on the chunked and from-logits samplers
     * with segments long enough for it and on the wgmma kernel (its own
     * per-row running bound, fused_wgmma.cu); the unfused Gumbel baseline
     * keeps the plain loop. */
    const bool skip = !opts.no_skip && kind != K_UNFUSED_GUMBEL && !grouped &&
                      (kind == K_WGMMA || fls_segment_len(B) >= FLS_SKIP_MIN_N);
    ws.gup = skip ? s->gbound : NULL;
    ws.glo = skip ? s->gbound + FLS_GB_N : NULL;
    ws.gup2 = skip ? s->gbound + 2 * FLS_GB_N : NULL;
    ws.gthr = NULL;
    ws.tepoch = 0;
    ws.group_size = g;
    ws.gk = gk;
    ws.noise = req->noise;
    ws.sticky = s->sticky;
    ws.paramflag = mst.flag;
    st = fls_mods_stage_run(req, &mst, kind == K_WGMMA ? nent : 0, str);
    if (st != FLS_OK)
        return st;
    if (req->params_on_device) {
        ce = fls_launch_pack_rows((int)B, req->dev_temperature, req->temperature_value, req->dev_row_seeds,
                                  req->seed, req->dev_row_offsets, req->offset, rows_d, ws, str);
        if (ce != cudaSuccess)
            return fls_from_cuda(ce);
    }

    /* logits that every draw pass reuses */
    const float *Lp = NULL;
    int64_t ldl = 0;
    if (L) {
        Lp = (const float *)L->data;
        ldl = L->ld;
        if (lmod) {
            ce = fls_launch_mods_apply(Lp, ldl, lmod, V, 0, B, 0, V, mst.dev, str);
            if (ce != cudaSuccess)
                return fls_from_cuda(ce);
            Lp = lmod;
            ldl = V;
        }
    } else if (kind == K_UNFUSED_GUMBEL || kind == K_MULTINOMIAL) {
        st = fls_gemm_logits(s, W, H, 0, V, buf, ldbuf, opts.force_simt);
        if (st != FLS_OK)
            return st;
        if (req->has_raw_mods) {
            ce = fls_launch_mods_apply(buf, ldbuf, buf, ldbuf, 0, B, 0, V, mst.dev, str);
            if (ce != cudaSuccess)
                return fls_from_cuda(ce);
        }
        Lp = buf;
        ldl = ldbuf;
    }
    if (kind == K_MULTINOMIAL) {
        ws.draw_base = 0;
        ws.nd = 0;
        ce = fls_launch_softmax(Lp, ldl, (int)B, V, rows_d, P, rmax, rsum, ws, str);
        if (ce != cudaSuccess)
            return fls_from_cuda(ce);
    }
    for (int64_t db = 0; db < draws; db += nd) {
        ws.draw_base = (uint32_t)db;
        ws.nd = (int)(draws - db < nd ? draws - db : nd);
        if (kind == K_MULTINOMIAL) {
            ce = fls_launch_multinomial(Lp, ldl, P, (int)B, V, rows_d, rmax, rsum, ws, draws, out->tokens,
                                        out->logsumexp, out->logprobs, str);
            if (ce != cudaSuccess)
                return fls_from_cuda(ce);
            continue;
        }
        if (kind == K_WGMMA) {
            if (skip && !grouped) {
                /* a fresh tag per pass */
                if (capturing) {
                    /* the reserved tag 1 on cleared thresholds, at every replay */
                    ws.gthr = B <= FLS_GTHR_MAX_ROWS ? s->gthr : NULL;
                    ws.tepoch = ws.gthr ? 1u : 0u;
                    if (ws.gthr) {
                        ce = cudaMemsetAsync(ws.gthr, 0, fls_gthr_bytes(B), str);
                        if (ce != cudaSuccess)
                            return fls_from_cuda(ce);
                    }
                } else {
                    st = fls_ensure_gthr(s, B, &ws.gthr);
                    if (st != FLS_OK)
                        return st;
                    ws.tepoch = ws.gthr ? ++s->tepoch : 0;
                }
            }
            ce = fls_launch_fused_wgmma(W->data, W->ld, H->data, H->ld, W->dtype, (int)B, V, W->cols, tile_b,
                                        opts.wg_epi_warps, !opts.gemm_only, rows_d, ws,
                                        req->has_raw_mods ? &mst.dev : NULL, s->sm_count, str);
        } else if (kind == K_CHUNKED) {
            ce = cudaSuccess;
            for (int64_t c0 = 0; c0 < V && ce == cudaSuccess; c0 += chunk_v) {
                int64_t vn = V - c0 < chunk_v ? V - c0 : chunk_v;
                st = fls_gemm_logits(s, W, H, c0, vn, buf, ldbuf, opts.force_simt);
                if (st != FLS_OK)
                    return st;
                if (opts.gemm_only)
                    continue;
                if (req->has_raw_mods)
                    ce = fls_launch_mods_apply(buf, ldbuf, buf, ldbuf, 0, B, c0, vn, mst.dev, str);
                if (ce == cudaSuccess)
                    ce = fls_launch_segments(buf, ldbuf, (int)B, vn, (uint64_t)c0, (int)(c0 / seg), rows_d,
                                             ws, s->sm_count, opts.seg_cap5, str);
            }
        } else {
            ce = fls_launch_segments(Lp, ldl, (int)B, V, 0, 0, rows_d, ws, s->sm_count, opts.seg_cap5, str);
        }
        if (ce != cudaSuccess)
            return fls_from_cuda(ce);
        ce = fls_launch_finalize(rows_d, (int)B, draws, ws, out->tokens, out->logsumexp, out->logprobs, str);
        if (ce != cudaSuccess)
            return fls_from_cuda(ce);
    }
    if (opts.no_sync || s->async || capturing)
        return FLS_OK; /* the status stays on the device: fls_context_sync */
    unsigned status[2] = {0, 0};
    ce = cudaMemcpyAsync(status, s->flags, sizeof status, cudaMemcpyDeviceToHost, str);
    if (ce == cudaSuccess)
        ce = cudaStreamSynchronize(str);
    if (ce != cudaSuccess)
        return fls_from_cuda(ce);
    if (status[0] != epoch)
        return FLS_ERR_INTERNAL;
    return status[1] == FLS_SC_NAN           ? FLS_ERR_NAN
           : status[1] == FLS_SC_TEMPERATURE ? FLS_ERR_TEMPERATURE
           : status[1] == FLS_SC_ALL_MASKED  ? FLS_ERR_ALL_MASKED
           : status[1] == FLS_SC_PARAM       ? FLS_ERR_PARAM
                                             : FLS_OK;
}

/*
 * One chunk of a stream (lib/front/stream.c) on the device: the segment sampler of
 * the from-logits path over logits L (B rows, n columns, row stride ldl,
 * fp32, device memory) whose column 0 is token v0, then the merge of its
 * segments' partials on the host: per (row b, draw j) the chunk's candidate
 * (cand for the flat method, gbest for the grouped method with g tokens per
 * group) and per row the chunk's log-sum-exp partial. v0 is even (Philox
 * pairs) and, grouped, a multiple of g with n a multiple of g unless the
 * chunk ends the vocabulary. Synchronous. A NaN is FLS_ERR_NAN, an l / T
 * overflow FLS_ERR_TEMPERATURE, as a call; on any error the outputs are
 * unspecified (the caller's scratch, merged into its state only on FLS_OK).
 */
extern "C" fls_status fls_cuda_stream_chunk(fls_context_t *ctx, const float *L, int64_t ldl, int64_t B,
                                            int64_t n, int64_t v0, const fls_row_params *rows, int64_t draws,
                                            uint32_t first_draw, int g, fls_cand *cand, fls_gbest *gbest,
                                            fls_lse *lse)
{
    if (!ctx || !ctx->cuda)
        return FLS_ERR_NO_DEVICE;
    if (!L || !rows || !lse || (g ? !gbest : !cand))
        return FLS_ERR_NULL;
    if (B <= 0 || n <= 0 || draws <= 0 || ldl < n)
        return FLS_ERR_SIZE;
    if (v0 + n >= (int64_t)0xffffffffLL || B > (1 << 30) || g > 4096)
        return FLS_ERR_UNSUPPORTED; /* the packed winner's 32-bit token; the grouped segments' 4096 */
    if ((v0 & 1) || (g && v0 % g))
        return FLS_ERR_PARAM;
    fls_cuda_state *s = ctx->cuda;
    cudaError_t ce = cudaSetDevice(s->device);
    if (ce != cudaSuccess)
        return fls_from_cuda(ce);
    const int64_t seg = g ? fls_segment_len_grouped(B, g) : fls_segment_len(B);
    const int64_t nent = (n + seg - 1) / seg;
    /* draws per pass: the partials of a pass stay under 64 MB */
    int64_t nd = ((int64_t)64 << 20) / (20 * B * nent);
    if (nd < 1)
        nd = 1;
    if (g && nd > FLS_GROUP_MAX_ND)
        nd = FLS_GROUP_MAX_ND;
    if (nd > draws)
        nd = draws;
    fls_row_params *rows_d = NULL;
    unsigned long long *best = NULL;
    double *gk = NULL;
    float *xw = NULL, *pm = NULL, *ps = NULL;
    for (int pass = 0; pass < 2; pass++) {
        fls_carve c = {pass ? s->ws : NULL, 0};
        rows_d = c.take<fls_row_params>((size_t)B);
        best = c.take<unsigned long long>((size_t)(B * nd * nent));
        xw = c.take<float>((size_t)(B * nd * nent));
        if (g)
            gk = c.take<double>((size_t)(B * nd * nent));
        pm = c.take<float>((size_t)(B * nent));
        ps = c.take<float>((size_t)(B * nent));
        if (pass == 0) {
            fls_status st = fls_ensure_ws(s, c.off);
            if (st != FLS_OK)
                return st;
        }
    }
    fls_status st = fls_ensure_flags(s, B);
    if (st != FLS_OK)
        return st;
    const size_t ne = (size_t)(B * nd * nent);
    unsigned long long *hb = (unsigned long long *)malloc(ne * sizeof *hb);
    float *hx = (float *)malloc(ne * sizeof *hx);
    double *hg = g ? (double *)malloc(ne * sizeof *hg) : NULL;
    float *hm = (float *)malloc((size_t)(B * nent) * sizeof *hm);
    float *hs = (float *)malloc((size_t)(B * nent) * sizeof *hs);
    if (!hb || !hx || (g && !hg) || !hm || !hs) {
        st = FLS_ERR_OUT_OF_MEMORY;
        goto done;
    }
    {
        cudaStream_t str = s->stream;
        const unsigned epoch = ++s->epoch;
        fls_ws ws = fls_ws_view(s, epoch, best, xw, pm, ps, first_draw, nent, 1);
        const bool skip = !s->dev.no_skip && !g && fls_segment_len(B) >= FLS_SKIP_MIN_N;
        ws.gup = skip ? s->gbound : NULL;
        ws.glo = skip ? s->gbound + FLS_GB_N : NULL;
        ws.gup2 = skip ? s->gbound + 2 * FLS_GB_N : NULL;
        ws.group_size = g;
        ws.gk = gk;
        ce = cudaMemcpyAsync(rows_d, rows, (size_t)B * sizeof(fls_row_params), cudaMemcpyHostToDevice, str);
        for (int64_t db = 0; db < draws && ce == cudaSuccess; db += nd) {
            ws.draw_base = (uint32_t)db;
            ws.nd = (int)(draws - db < nd ? draws - db : nd);
            const size_t m = (size_t)(B * ws.nd * nent);
            ce = fls_launch_segments(L, ldl, (int)B, n, (uint64_t)v0, 0, rows_d, ws, s->sm_count, 0, str);
            if (ce == cudaSuccess)
                ce = cudaMemcpyAsync(hb, best, m * sizeof *hb, cudaMemcpyDeviceToHost, str);
            if (ce == cudaSuccess)
                ce = cudaMemcpyAsync(hx, xw, m * sizeof *hx, cudaMemcpyDeviceToHost, str);
            if (ce == cudaSuccess && g)
                ce = cudaMemcpyAsync(hg, gk, m * sizeof *hg, cudaMemcpyDeviceToHost, str);
            if (ce == cudaSuccess && db == 0) {
                ce = cudaMemcpyAsync(hm, pm, (size_t)(B * nent) * sizeof *hm, cudaMemcpyDeviceToHost, str);
                if (ce == cudaSuccess)
                    ce =
                        cudaMemcpyAsync(hs, ps, (size_t)(B * nent) * sizeof *hs, cudaMemcpyDeviceToHost, str);
            }
            unsigned marks[2] = {0, 0};
            if (ce == cudaSuccess)
                ce = cudaMemcpyAsync(marks, s->flags + 2, sizeof marks, cudaMemcpyDeviceToHost, str);
            if (ce == cudaSuccess)
                ce = cudaStreamSynchronize(str);
            if (ce != cudaSuccess)
                break;
            if (marks[0] == epoch) {
                st = FLS_ERR_NAN;
                goto done;
            }
            if (marks[1] == epoch) {
                st = FLS_ERR_TEMPERATURE;
                goto done;
            }
            /* the merge of the segments (the finalize kernel's, on the host) */
            for (int64_t b = 0; b < B; b++)
                for (int j = 0; j < ws.nd; j++) {
                    const int64_t base = (b * ws.nd + j) * nent, o = b * draws + db + j;
                    if (g) {
                        fls_gbest r = fls_gbest_empty();
                        for (int64_t e = 0; e < nent; e++) {
                            const unsigned long long w = hb[base + e];
                            if (w == ~0ull || !fls_gbest_beats(hg[base + e], (int64_t)(w >> 32), &r))
                                continue;
                            r.gkey = hg[base + e];
                            r.group = (int64_t)(w >> 32);
                            r.tok = (int64_t)(uint32_t)w;
                            r.x = hx[base + e];
                        }
                        gbest[o] = r;
                    } else {
                        fls_cand r = fls_cand_empty();
                        for (int64_t e = 0; e < nent; e++) {
                            const fls_cand ce_ = fls_cand_unpack(hb[base + e], hx[base + e]);
                            fls_cand_merge(&r, &ce_);
                        }
                        cand[o] = r;
                    }
                }
        }
        if (ce != cudaSuccess) {
            st = fls_from_cuda(ce);
            goto done;
        }
    }
    for (int64_t b = 0; b < B; b++) {
        lse[b] = fls_lse_empty();
        for (int64_t e = 0; e < nent; e++)
            fls_lse_merge(&lse[b], (double)hm[b * nent + e], (double)hs[b * nent + e]);
    }
    st = FLS_OK;
done:
    free(hb);
    free(hx);
    free(hg);
    free(hm);
    free(hs);
    return st;
}

/* Logits C (B, n) = Wc H^T of a vocabulary slice Wc (n, D) against H (B, D),
 * device memory (the chunked path's GEMM; a stream's fused feed). */
extern "C" fls_status fls_cuda_chunk_logits(fls_context_t *ctx, const fls_matrix *Wc, const fls_matrix *H,
                                            float *C)
{
    if (!ctx || !ctx->cuda)
        return FLS_ERR_NO_DEVICE;
    cudaError_t ce = cudaSetDevice(ctx->cuda->device);
    if (ce != cudaSuccess)
        return fls_from_cuda(ce);
    return fls_gemm_logits(ctx->cuda, Wc, H, 0, Wc->rows, C, Wc->rows, 0);
}

extern "C" fls_status fls_cuda_sync(fls_context_t *ctx)
{
    if (!ctx || !ctx->cuda)
        return FLS_ERR_NO_DEVICE;
    fls_cuda_state *s = ctx->cuda;
    cudaError_t e = cudaSetDevice(s->device);
    unsigned code = 0;
    if (e == cudaSuccess)
        e = s->stream ? cudaStreamSynchronize(s->stream) : cudaDeviceSynchronize();
    if (e == cudaSuccess)
        e = cudaMemcpy(&code, s->sticky, sizeof code, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess && code)
        e = cudaMemset(s->sticky, 0, sizeof code);
    if (e != cudaSuccess)
        return fls_from_cuda(e);
    return code == FLS_SC_NAN           ? FLS_ERR_NAN
           : code == FLS_SC_TEMPERATURE ? FLS_ERR_TEMPERATURE
           : code == FLS_SC_ALL_MASKED  ? FLS_ERR_ALL_MASKED
           : code == FLS_SC_UNSUPPORTED ? FLS_ERR_UNSUPPORTED
           : code == FLS_SC_PARAM       ? FLS_ERR_PARAM
                                        : FLS_OK;
}

extern "C" fls_status fls_cuda_sample_fused(fls_context_t *ctx, const fls_matrix *W, const fls_matrix *H,
                                            const fls_request *req, const fls_outputs *out)
{
    return fls_cuda_run(ctx, W, H, NULL, req, out, NULL);
}

extern "C" fls_status fls_cuda_sample_logits(fls_context_t *ctx, const fls_matrix *L, const fls_request *req,
                                             const fls_outputs *out)
{
    return fls_cuda_run(ctx, NULL, NULL, L, req, out, NULL);
}

extern "C" fls_status fls_cuda_device_info(const fls_context_t *ctx, char *name, size_t name_len,
                                           int *sm_count)
{
    if (!ctx || !ctx->cuda)
        return FLS_ERR_NO_DEVICE;
    if (name && name_len) {
        size_t n = strlen(ctx->cuda->name);
        if (n > name_len - 1)
            n = name_len - 1;
        memcpy(name, ctx->cuda->name, n);
        name[n] = 0;
    }
    if (sm_count)
        *sm_count = ctx->cuda->sm_count;
    return FLS_OK;
}
