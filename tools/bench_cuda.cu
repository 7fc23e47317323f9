/*
 * bench_cuda.cu — `flashsample bench --device cuda`: the GPU benchmark.
 *
 * For each shape (D, V) and batch B, bf16 W (V, D) and H (B, D), T = 0.7,
 * one run measures side by side:
 *   floor           a read-only kernel over W (16-byte loads): the bytes floor
 *   cublas          cuBLAS GEMM only (B x V fp32 logits), launched eagerly
 *   cublas_graph    the same GEMM replayed from a CUDA graph
 *   fused_graph     the public fused call (dispatcher's path) captured in a CUDA graph and
 *                   replayed: an async context, the rows' params in device memory
 *   fused_grouped   the grouped method (Group-Gumbel-Max, g = 128) on the wgmma kernel;
 *                   grouped_chunked the same on cuBLAS chunks + the grouped segment sampler
 *   fused_wgmma_mf, fused_chunked_mf  the wgmma kernel and the chunked path under the
 *                   min-first noise scheme (FLS_NOISE_MIN_FIRST, docs/NOISE.md)
 *   fused_wgmma     the fused warp-specialised tensor-core kernel (logits stay on chip);
 *                   wgmma_gemm_only its mainloop alone, fused_wgmma_noskip every key
 *                   computed, fused_wgmma_xe / _n64 other sampler-warp counts and tiles
 *   fused_chunked_cap5    the chunked path with the sampler compiled for 5 blocks per SM
 *                   (register cap 48 instead of 63)
 *   fused_chunked   cuBLAS per 32k-row chunk into an L2-resident buffer + sampling
 *                   (bound-based skipping of the Gumbel logs, exact)
 *   fused_chunked_noskip   the same, every key computed (the sampler before skipping)
 *   chunked_gemms_only     its cuBLAS chunk GEMMs alone (no sampler; for the breakdown)
 *   logits_sampler(_noskip)  fls_sample_logits' sampler alone on B x V fp32 logits in HBM
 *   unfused_gumbel  cuBLAS -> logits in HBM -> Gumbel argmax (same tokens)
 *   unfused_multinomial  cuBLAS -> logits -> softmax in HBM -> inverse CDF
 *   rule_minp005, rule_topk50, rule_k50_p09, rule_nsigma1, rule_wr4 (opt-in)
 *                   the fused call with a rule (min-p 0.05, top-k 50, top-k 50 +
 *                   top-p 0.9, top-n-sigma 1, without replacement K = 4), queued
 *                   like the fused call (async mode; the status is checked after
 *                   each engine's runs); rule_minp005_sync and rule_k50_p09_sync
 *                   wait for their status like a synchronous call, and rule_topp09
 *                   (top-p alone: the host finishes flat rows) is always synchronous;
 *                   rule_k50_p09_graph replays top-k 50 + top-p 0.9 from a CUDA graph
 *                   (an async context, the rows' params in device memory); the
 *                   default matmul at B <= 64 is the wgmma kernel writing the
 *                   logits and their 64-token tables, and rule_*_blas (minp005,
 *                   topk50, k50_p09, nsigma1, wr4) take cuBLAS + the statistics
 *                   pass instead
 *   fused_dev, mods_fused, mods_mask, mods_topk50, mods_logits (opt-in)
 *                   queued, every param in device memory (a captured decode
 *                   step's form): fused_dev the plain fused call; mods_fused
 *                   with a random mask (about half the tokens allowed), 16 bias
 *                   pairs, 256 seen tokens and the three penalties; mods_mask
 *                   the mask alone; mods_topk50 all of them and top-k 50;
 *                   mods_logits all of them on logits_sampler's logits
 * Every time is the median of >= 100 runs timed with device events after a
 * warm-up of at least 250 ms of the same engine (25 ms with --quick): the
 * GPU's power management (700 W cap on an H200, reached under sustained load
 * by every engine at B = 256, with the SM clock between ~1.3 and ~1.5 GHz
 * depending on the engine) reacts within ~100 ms, so a short warm-up timed
 * an engine in the power state the previous engine left — 5-15 % faster
 * after a light engine than in steady state (docs/PERF.md, method). W rotates over 3 copies (each copy is far
 * larger than the 50 MB L2), so every run streams W from HBM. Kernels are enqueued without host
 * synchronisation (the C API adds one stream sync per call for its status).
 * CSV (long format): device,engine,dtype,B,V,D,median_ms,gbps,tflops,min_ms,reps,date,gpu
 * gbps counts W + H read once (+ the logits written for cuBLAS/unfused);
 * tflops counts 2 B V D.
 * --engines a,b,... times only those engines (plus floor, cublas and the
 * dispatcher's pick, which every ratio needs); the rest print as "-".
 */
#include "tools/bench_cuda.h"
#include "flashsample.h"
#include "kernels/fls_cuda.h"
#include "variants/registry.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NROT 3
#define MAXB 1024

#define CK(x)                                                                                                \
    do {                                                                                                     \
        cudaError_t e_ = (x);                                                                                \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "bench: %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));               \
            goto fail;                                                                                       \
        }                                                                                                    \
    } while (0)

__global__ void bench_fill_bf16(__nv_bfloat16 *p, int64_t n, uint64_t seed, float scale)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + (uint64_t)i * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        float u = (float)(z >> 40) * 0x1p-24f * 2.0f - 1.0f; /* uniform in [-1, 1) */
        p[i] = __float2bfloat16(u * scale);
    }
}

/* Reads every 16-byte word of W once; the branch keeps the loads alive. */
__global__ void bench_read_floor(const uint4 *w, int64_t n, unsigned *sink)
{
    unsigned acc = 0;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = __ldcs(w + i), b = __ldcs(w + i + stride), c = __ldcs(w + i + 2 * stride),
              d = __ldcs(w + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        uint4 a = __ldcs(w + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9e3779b9u)
        *sink = acc;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef struct bench_ctx {
    fls_context_t *ctx;
    cublasHandle_t blas;
    cudaStream_t st;
    int sms;
    int reps, warm;
    double warm_ms; /* minimum warm-up time per engine and shape */
    __nv_bfloat16 *W[NROT];
    __nv_bfloat16 *H;
    float *logits;
    int64_t *tokens;
    int64_t *rule_tokens; /* MAXB x 4 (without replacement, K = 4) */
    unsigned *sink;
    int64_t V, D, B;
    fls_row_params rows[MAXB];
    cudaGraphExec_t graph[NROT];
    /* fused_graph: the public fused call captured in a CUDA graph (an async
     * context on its own stream, the rows' params in device memory) */
    fls_context_t *actx;
    cudaStream_t ast;
    cudaGraphExec_t fgraph[NROT];
    cudaGraphExec_t rgraph[NROT]; /* rule_k50_p09_graph */
    float *dT;
    uint64_t *dS, *dO;
    /* the mods engines' device arrays (MAXB rows; mask_ld words a row) */
    int32_t *mask, *seen_counts;
    int64_t *seen_ids, *bias_ids;
    float *bias_values;
    int64_t mask_ld;
    float *times;
    cudaEvent_t *ev;
} bench_ctx;

enum {
    E_FLOOR,
    E_CUBLAS,
    E_GRAPH,
    E_CHUNKED,
    E_UGUMBEL,
    E_UMULT,
    E_CHUNKED_NS,
    E_CHUNK_GEMM,
    E_LOGITS,
    E_LOGITS_NS,
    E_CHUNKED_CAP5,
    E_WGMMA,
    E_WGMMA_GEMM,
    E_WGMMA_XE,
    E_WGMMA_NS,
    E_WGMMA_N64,
    E_GROUPED,
    E_GROUPED_CHUNKED,
    E_FUSED_GRAPH,
    E_WGMMA_MF,
    E_CHUNKED_MF,
    /* the rule family (opt-in: --engines rule_...) */
    E_RULE_MINP,
    E_RULE_TOPK,
    E_RULE_TOPP,
    E_RULE_KP,
    E_RULE_NSIGMA,
    E_RULE_WR,
    E_RULE_MINP_SYNC,
    E_RULE_KP_SYNC,
    E_RULE_KP_GRAPH,
    /* the same rules with cuBLAS, then the statistics pass */
    E_RULE_MINP_BLAS,
    E_RULE_TOPK_BLAS,
    E_RULE_KP_BLAS,
    E_RULE_NSIGMA_BLAS,
    E_RULE_WR_BLAS,
    /* masks, bias and penalties (opt-in: --engines fused_dev,mods_...): the
     * serving engine's form, every array in device memory (params_on_device) */
    E_FUSED_DEV,
    E_MODS,
    E_MODS_MASK,
    E_MODS_TOPK,
    E_MODS_LOGITS,
    E_COUNT
};
#define E_RULE_FIRST E_RULE_MINP
static const char *engine_names[E_COUNT] = {"floor",
                                            "cublas",
                                            "cublas_graph",
                                            "fused_chunked",
                                            "unfused_gumbel",
                                            "unfused_multinomial",
                                            "fused_chunked_noskip",
                                            "chunked_gemms_only",
                                            "logits_sampler",
                                            "logits_sampler_noskip",
                                            "fused_chunked_cap5",
                                            "fused_wgmma",
                                            "wgmma_gemm_only",
                                            "fused_wgmma_xe",
                                            "fused_wgmma_noskip",
                                            "fused_wgmma_n64",
                                            "fused_grouped",
                                            "grouped_chunked",
                                            "fused_graph",
                                            "fused_wgmma_mf",
                                            "fused_chunked_mf",
                                            "rule_minp005",
                                            "rule_topk50",
                                            "rule_topp09",
                                            "rule_k50_p09",
                                            "rule_nsigma1",
                                            "rule_wr4",
                                            "rule_minp005_sync",
                                            "rule_k50_p09_sync",
                                            "rule_k50_p09_graph",
                                            "rule_minp005_blas",
                                            "rule_topk50_blas",
                                            "rule_k50_p09_blas",
                                            "rule_nsigma1_blas",
                                            "rule_wr4_blas",
                                            "fused_dev",
                                            "mods_fused",
                                            "mods_mask",
                                            "mods_topk50",
                                            "mods_logits"};
#define E_MODS_FIRST E_FUSED_DEV

/* The mods engines' inputs (bench_alloc_mods): S seen tokens with counts
 * 0..3 and the scalar penalties r = 1.1, p = 0.5, f = 0.25; K bias pairs;
 * a random mask allowing about half of each row's tokens. */
#define BENCH_MODS_S 256
#define BENCH_MODS_K 16

/* The options every engine's call starts from (--cuda-opt; zero, the
 * production choices, by default: fls_cuda_opts_default). */
static fls_cuda_opts g_base_opts;

/* The rule of engine e (a _sync or _blas engine: its queued, default form). */
static int bench_rule_base(int e)
{
    switch (e) {
    case E_RULE_MINP_SYNC:
    case E_RULE_MINP_BLAS:
        return E_RULE_MINP;
    case E_RULE_KP_SYNC:
    case E_RULE_KP_BLAS:
        return E_RULE_KP;
    case E_RULE_TOPK_BLAS:
        return E_RULE_TOPK;
    case E_RULE_NSIGMA_BLAS:
        return E_RULE_NSIGMA;
    case E_RULE_WR_BLAS:
        return E_RULE_WR;
    default:
        return e;
    }
}

/* The rule of rule engine e (its base form, bench_rule_base) as a bench
 * spec: terms joined by +, each NAME=VALUE of the rule registry
 * (variants/registry.h), or wr=K (without replacement, K tokens per draw). */
static const char *bench_rule_spec(int e)
{
    switch (bench_rule_base(e)) {
    case E_RULE_MINP:
        return "min-p=0.05";
    case E_RULE_TOPK:
        return "top-k=50";
    case E_RULE_TOPP:
        return "top-p=0.9";
    case E_RULE_KP:
        return "top-k=50+top-p=0.9";
    case E_RULE_NSIGMA:
        return "top-nsigma=1";
    case E_RULE_WR:
        return "wr=4";
    default:
        return "";
    }
}

/* A spec into one row's rule: every filter of the registry at its "off"
 * value, then each term. 0, or -1 after a message. */
static int bench_parse_rule_spec(const char *spec, fls_row_rule *r)
{
    for (int id = 0; id < FLS_FILTER_COUNT; id++)
        r->value[id] = fls_filters[id].off;
    r->K = 1;
    for (const char *t = spec; *t;) {
        const size_t len = strcspn(t, "+");
        char term[64];
        snprintf(term, sizeof term, "%.*s", (int)len, t);
        char *eq = strchr(term, '=');
        char *end = NULL;
        const double v = eq ? strtod(eq + 1, &end) : 0.0;
        if (len >= sizeof term || !eq || end == eq + 1 || *end) {
            fprintf(stderr, "bench: rule spec '%s': term '%s' is not NAME=VALUE\n", spec, term);
            return -1;
        }
        *eq = '\0';
        const int id = fls_filter_lookup(term);
        if (id < 0 && strcmp(term, "wr") == 0 && v >= 1.0 && v <= 4.0 && v == (double)(int64_t)v) {
            r->K = (int64_t)v; /* rule_tokens holds 4 per row */
        } else if (id < 0 || !fls_filter_valid(id, v)) {
            fprintf(stderr, "bench: rule spec '%s': %s=%g is not a rule of the registry in its range\n", spec,
                    term, v);
            return -1;
        }
        if (id >= 0)
            r->value[id] = v;
        t += len + (t[len] == '+');
    }
    return 0;
}

/* Each rule engine's row (every row of its request alike), from its spec. */
static fls_row_rule bench_rules[E_COUNT];

static int bench_parse_rule_specs(void)
{
    for (int e = E_RULE_FIRST; e < E_COUNT; e++)
        if (bench_parse_rule_spec(bench_rule_spec(e), &bench_rules[e]) != 0)
            return -1;
    return 0;
}

/* The request's rows of rule engine e (every row alike) and what its
 * filters need (fls_filter_row_needs). */
static void bench_rule_rows(int e, int64_t B, fls_request *req)
{
    static fls_row_rule rr[MAXB];
    const fls_row_rule *one = &bench_rules[e];
    for (int64_t b = 0; b < B; b++)
        rr[b] = *one;
    req->rule = rr;
    req->K = one->K;
    req->needs = fls_filter_row_needs(one->value);
}

static cublasStatus_t bench_gemm(bench_ctx *b, int r)
{
    const float one = 1.0f, zero = 0.0f;
    return fls_cublas()->gemm_ex(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)b->V, (int)b->B, (int)b->D, &one,
                                 b->W[r], CUDA_R_16BF, (int)b->D, b->H, CUDA_R_16BF, (int)b->D, &zero,
                                 b->logits, CUDA_R_32F, (int)b->V, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

static fls_status bench_sample(bench_ctx *b, int engine, int r, int cached, int sync)
{
    fls_matrix W = {b->W[r], FLS_DTYPE_BF16, b->V, b->D, b->D};
    fls_matrix H = {b->H, FLS_DTYPE_BF16, b->B, b->D, b->D};
    fls_request req;
    memset(&req, 0, sizeof req);
    req.rows = b->rows;
    req.batch = b->B;
    req.vocab = b->V;
    req.draws = 1;
    req.method = FLS_METHOD_FUSED;
    req.K = 1;
    fls_outputs out = {b->tokens, NULL, NULL};
    fls_cuda_opts o = g_base_opts;
    o.rows_cached = cached;
    o.no_sync = !sync;
    o.no_skip = engine == E_CHUNKED_NS || engine == E_LOGITS_NS;
    o.gemm_only = engine == E_CHUNK_GEMM;
    o.seg_cap5 = engine == E_CHUNKED_CAP5;
    if (engine >= E_MODS_FIRST) {
        /* queued (async mode), every array on the device as a captured
         * decode step has them: rows from dT, dS, dO */
        req.params_on_device = 1;
        req.rows = NULL;
        req.dev_temperature = b->dT;
        req.dev_row_seeds = b->dS;
        req.dev_row_offsets = b->dO;
        if (engine != E_FUSED_DEV) {
            fls_mods_raw *m = &req.raw_mods;
            req.has_raw_mods = 1;
            m->mask = b->mask;
            m->mask_ld = b->mask_ld;
            m->repetition = 1.0f;
            if (engine != E_MODS_MASK) {
                m->bias_ids = b->bias_ids;
                m->bias_values = b->bias_values;
                m->bias_k = BENCH_MODS_K;
                m->seen_ids = b->seen_ids;
                m->seen_counts = b->seen_counts;
                m->seen_k = BENCH_MODS_S;
                m->repetition = 1.1f;
                m->presence = 0.5f;
                m->frequency = 0.25f;
            }
        }
        if (engine == E_MODS_TOPK) {
            static fls_row_rule rr[MAXB];
            fls_row_rule one;
            if (bench_parse_rule_spec("top-k=50", &one) != 0)
                return FLS_ERR_PARAM;
            for (int64_t i = 0; i < b->B; i++)
                rr[i] = one;
            req.rule = rr;
            req.K = 1;
            req.needs = fls_filter_row_needs(one.value);
            out.tokens = b->rule_tokens;
        }
        if (engine == E_MODS_LOGITS) {
            fls_matrix L = {b->logits, FLS_DTYPE_F32, b->B, b->V, b->V};
            return fls_cuda_run(b->ctx, NULL, NULL, &L, &req, &out, &o);
        }
        return fls_cuda_run(b->ctx, &W, &H, NULL, &req, &out, &o);
    }
    if (engine >= E_RULE_FIRST) {
        /* queued like the fused call (async mode: the status at the next
         * fls_context_sync), except the _sync engines, which wait for their
         * status like a synchronous call, and top-p alone, whose flat rows
         * the host finishes (an async call would report them unsupported) */
        o.no_sync = !sync && engine != E_RULE_TOPP && engine != E_RULE_MINP_SYNC && engine != E_RULE_KP_SYNC;
        o.rule_matmul = engine >= E_RULE_MINP_BLAS ? FLS_RULE_MATMUL_CUBLAS : g_base_opts.rule_matmul;
        bench_rule_rows(engine, b->B, &req);
        out.tokens = b->rule_tokens;
        return fls_cuda_run(b->ctx, &W, &H, NULL, &req, &out, &o);
    }
    if (engine == E_LOGITS || engine == E_LOGITS_NS) {
        /* the sampler alone on the B x V fp32 logits the cuBLAS engine left (HBM) */
        fls_matrix L = {b->logits, FLS_DTYPE_F32, b->B, b->V, b->V};
        return fls_cuda_run(b->ctx, NULL, NULL, &L, &req, &out, &o);
    }
    if (engine == E_WGMMA_MF || engine == E_CHUNKED_MF) /* the min-first noise scheme */
        req.noise = FLS_NOISE_MIN_FIRST;
    if (engine == E_WGMMA || engine == E_WGMMA_GEMM || engine == E_WGMMA_XE || engine == E_WGMMA_NS ||
        engine == E_WGMMA_N64 || engine == E_WGMMA_MF) {
        /* _gemm_only: the mainloop without the sampler; _xe: 15 sampling
         * warps of one row per call at tile 64, 7 at the others (the
         * default is 11 warps of two rows per call at tiles 32-128, 7 at
         * 16); _n64: 64-row batch
         * tiles at every B (the dispatcher's choice at B > 64 is 128) */
        o.path = FLS_CUDA_PATH_WGMMA;
        o.gemm_only = engine == E_WGMMA_GEMM;
        o.no_skip = engine == E_WGMMA_NS;
        if (engine == E_WGMMA_XE)
            o.wg_epi_warps = fls_cuda_wgmma_tile_n(b->B) == 64 ? 15 : 7;
        if (engine == E_WGMMA_N64)
            o.tile_b = 64;
    } else if (engine == E_GROUPED || engine == E_GROUPED_CHUNKED) {
        /* the grouped method, g = 128: the wgmma kernel's grouped sampler
         * (the dispatcher's pick) or cuBLAS chunks + the grouped segments */
        req.method = FLS_METHOD_GROUPED;
        req.group_size = 128;
        if (engine == E_GROUPED_CHUNKED)
            o.path = FLS_CUDA_PATH_CHUNKED;
    } else if (engine == E_CHUNKED || engine == E_CHUNKED_NS || engine == E_CHUNK_GEMM ||
               engine == E_CHUNKED_CAP5 || engine == E_CHUNKED_MF)
        o.path = FLS_CUDA_PATH_CHUNKED;
    else if (engine == E_UGUMBEL)
        req.method = FLS_METHOD_UNFUSED_GUMBEL;
    else
        req.method = FLS_METHOD_UNFUSED_MULTINOMIAL;
    return fls_cuda_run(b->ctx, &W, &H, NULL, &req, &out, &o);
}

/* One enqueue of engine e on rotation r; 0 on success. */
static int bench_enqueue(bench_ctx *b, int e, int r, int cached)
{
    switch (e) {
    case E_FLOOR: {
        int64_t n = b->V * b->D * 2 / 16;
        bench_read_floor<<<b->sms * 8, 512, 0, b->st>>>((const uint4 *)b->W[r], n, b->sink);
        return cudaGetLastError() != cudaSuccess;
    }
    case E_CUBLAS:
        return bench_gemm(b, r) != CUBLAS_STATUS_SUCCESS;
    case E_GRAPH:
        return cudaGraphLaunch(b->graph[r], b->st) != cudaSuccess;
    case E_FUSED_GRAPH:
        return cudaGraphLaunch(b->fgraph[r], b->st) != cudaSuccess;
    case E_RULE_KP_GRAPH:
        return cudaGraphLaunch(b->rgraph[r], b->st) != cudaSuccess;
    default:
        return bench_sample(b, e, r, cached, 0) != FLS_OK;
    }
}

/* Median and minimum of reps timed runs (ms), after warm-up. */
static int bench_time(bench_ctx *b, int e, double *median, double *mn)
{
    /* warm-up: at least b->warm runs and b->warm_ms of this engine alone, so
     * that clocks and power reach this engine's steady state */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0;;) {
        for (int k = 0; k < 8; k++, i++)
            if (bench_enqueue(b, e, i % NROT, i > 0))
                return 1;
        if (cudaStreamSynchronize(b->st) != cudaSuccess)
            return 1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
        if (i >= b->warm && ms >= b->warm_ms)
            break;
    }
    for (int i = 0; i < b->reps; i++) {
        cudaEventRecord(b->ev[2 * i], b->st);
        if (bench_enqueue(b, e, i % NROT, 1))
            return 1;
        cudaEventRecord(b->ev[2 * i + 1], b->st);
    }
    if (cudaStreamSynchronize(b->st) != cudaSuccess)
        return 1;
    for (int i = 0; i < b->reps; i++)
        cudaEventElapsedTime(&b->times[i], b->ev[2 * i], b->ev[2 * i + 1]);
    qsort(b->times, (size_t)b->reps, sizeof(float), cmp_float);
    *median = b->reps % 2 ? b->times[b->reps / 2] : 0.5 * (b->times[b->reps / 2 - 1] + b->times[b->reps / 2]);
    *mn = b->times[0];
    return 0;
}

static int parse_list(const char *s, int64_t *out, int max)
{
    int n = 0;
    while (s && *s && n < max) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || v <= 0)
            return -1;
        out[n++] = v;
        s = *end ? end + 1 : end;
    }
    return n;
}

static void bench_usage(void)
{
    printf("usage: flashsample bench --device cuda [--csv PATH] [--quick] [--reps N]\n"
           "                         [--shapes D:V,D:V,...] [--batches 1,2,4,...] [--engines a,b,...]\n"
           "                         [--hscale S] [--cuda-opt NAME=VALUE ...] [--profile]\n"
           "Times the fused GPU sampler against cuBLAS, the unfused baselines and a read floor.\n"
           "--profile launches each engine named by --engines once per shape and batch, times\n"
           "nothing and launches nothing else (no floor, cuBLAS or agreement calls): for a\n"
           "profiler's kernel filter, e.g. ncu -k regex:fls_fused_wgmma -c 1.\n"
           "--hscale S scales H's entries (default 1: flat rows, logits' std about 1.1; 4: peaked\n"
           "rows, std about 4.5, the top token's probability about one half at T = 0.7).\n"
           "--cuda-opt NAME=VALUE (repeatable) sets an experiment's field of fls_cuda_opts for every\n"
           "engine (rule_matmul (the rule_* engines but the _blas ones), rule_top_cap,\n"
           "rule_stair_cap, rule_cf, rule_path, rule_keys, rule_pdl, rule_list_draw,\n"
           "logits_warps, no_skip, tile_b, wg_epi_warps; docs/GPU.md, developer options): an A/B\n"
           "of one switch is two runs, with and without it. Every value gives the same tokens.\n"
           "CSV columns: device,engine,dtype,B,V,D,median_ms,gbps,tflops,min_ms,reps,date,gpu\n");
}

/* ---- the command: options, setup, one shape and batch at a time ---- */

/* The experiments' switches (`--cuda-opt NAME=VALUE`): the fields of
 * fls_cuda_opts every engine's call starts from (all 0: the production
 * choices; every value gives the same tokens). */
static const struct {
    const char *name;
    size_t off;
    int is64;
} k_cuda_opts[] = {
    {"rule_matmul", offsetof(fls_cuda_opts, rule_matmul), 0},
    {"rule_top_cap", offsetof(fls_cuda_opts, rule_top_cap), 1},
    {"rule_stair_cap", offsetof(fls_cuda_opts, rule_stair_cap), 0},
    {"rule_cf", offsetof(fls_cuda_opts, rule_cf), 0},
    {"rule_path", offsetof(fls_cuda_opts, rule_path), 0},
    {"rule_keys", offsetof(fls_cuda_opts, rule_keys), 0},
    {"rule_pdl", offsetof(fls_cuda_opts, rule_pdl), 0},
    {"rule_list_draw", offsetof(fls_cuda_opts, rule_list_draw), 0},
    {"logits_warps", offsetof(fls_cuda_opts, logits_warps), 0},
    {"no_skip", offsetof(fls_cuda_opts, no_skip), 0},
    {"tile_b", offsetof(fls_cuda_opts, tile_b), 0},
    {"wg_epi_warps", offsetof(fls_cuda_opts, wg_epi_warps), 0},
};

/* NAME=VALUE into g_base_opts; 0, or -1 after a message. */
static int bench_set_cuda_opt(const char *spec)
{
    const char *eq = strchr(spec, '=');
    char *end = NULL;
    const long long v = eq ? strtoll(eq + 1, &end, 10) : 0;
    for (size_t i = 0; eq && end != eq + 1 && !*end && i < sizeof k_cuda_opts / sizeof k_cuda_opts[0]; i++)
        if (strlen(k_cuda_opts[i].name) == (size_t)(eq - spec) &&
            !strncmp(spec, k_cuda_opts[i].name, eq - spec)) {
            char *field = (char *)&g_base_opts + k_cuda_opts[i].off;
            if (k_cuda_opts[i].is64)
                *(int64_t *)field = v;
            else
                *(int *)field = (int)v;
            return 0;
        }
    fprintf(stderr, "flashsample bench: error: --cuda-opt '%s': expected NAME=INTEGER, NAME one of", spec);
    for (size_t i = 0; i < sizeof k_cuda_opts / sizeof k_cuda_opts[0]; i++)
        fprintf(stderr, " %s", k_cuda_opts[i].name);
    fprintf(stderr, "\n");
    return -1;
}

/* The options of the GPU bench and their values. */
typedef struct bench_opts {
    const char *csv, *shapes_s, *batches_s, *engines_s;
    int quick;
    int profile; /* --profile: one launch per engine, nothing timed (for Nsight) */
    long reps;
    double hscale;
    int64_t shapes[16][2]; /* {D, V} */
    int nshapes;
    int64_t batches[32];
    int nb;
    int want[E_COUNT];
} bench_opts;

/* argv into bo's strings and scalars. -1 to go on, else the exit status
 * (0 after --help, 2 after a message). */
static int bench_parse_argv(int argc, char **argv, bench_opts *bo)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            bench_usage();
            return 0;
        } else if (!strcmp(a, "--quick")) {
            bo->quick = 1;
        } else if (!strcmp(a, "--profile")) {
            bo->profile = 1;
        } else if (!strcmp(a, "--device") && v) {
            i++;
        } else if (!strncmp(a, "--device=", 9)) {
        } else if (!strcmp(a, "--csv") && v) {
            bo->csv = v;
            i++;
        } else if (!strcmp(a, "--hscale") && v) {
            char *end = NULL;
            bo->hscale = strtod(v, &end);
            if (end == v || *end || !(bo->hscale > 0.0 && bo->hscale <= 64.0)) {
                fprintf(stderr, "flashsample bench: error: --hscale must be in (0, 64]\n");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--reps") && v) {
            bo->reps = strtol(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--shapes") && v) {
            bo->shapes_s = v;
            i++;
        } else if (!strcmp(a, "--batches") && v) {
            bo->batches_s = v;
            i++;
        } else if (!strcmp(a, "--engines") && v) {
            bo->engines_s = v;
            i++;
        } else if (!strcmp(a, "--force")) { /* checked by the caller (--csv's guard) */
        } else if (!strcmp(a, "--cuda-opt") && v) {
            if (bench_set_cuda_opt(v) != 0)
                return 2;
            i++;
        } else {
            fprintf(stderr, "flashsample bench: error: unknown or incomplete option '%s' for --device cuda\n",
                    a);
            bench_usage();
            return 2;
        }
    }
    return -1;
}

/* --shapes D:V,... into bo->shapes (default: four LLM heads, one with --quick). 0 or -1 after a message. */
static int bench_parse_shapes(bench_opts *bo)
{
    const int64_t defaults[4][2] = {{4096, 151936}, {8192, 128256}, {2880, 201088}, {2048, 151936}};
    memcpy(bo->shapes, defaults, sizeof defaults);
    bo->nshapes = bo->quick ? 1 : 4;
    if (!bo->shapes_s)
        return 0;
    bo->nshapes = 0;
    const char *p = bo->shapes_s;
    while (*p && bo->nshapes < 16) {
        long long d, v;
        int used = 0;
        if (sscanf(p, "%lld:%lld%n", &d, &v, &used) != 2 || d <= 0 || v <= 0) {
            fprintf(stderr, "flashsample bench: error: bad --shapes '%s' (D:V,D:V)\n", bo->shapes_s);
            return -1;
        }
        bo->shapes[bo->nshapes][0] = d;
        bo->shapes[bo->nshapes][1] = v;
        bo->nshapes++;
        p += used;
        if (*p == ',')
            p++;
    }
    return 0;
}

/* --batches B,... into bo->batches (default: powers of two to 256; four with --quick). 0 or -1. */
static int bench_parse_batches(bench_opts *bo)
{
    const int64_t defaults[9] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    memcpy(bo->batches, defaults, sizeof defaults);
    bo->nb = bo->quick ? 4 : 9;
    if (bo->quick) {
        bo->batches[0] = 1, bo->batches[1] = 16, bo->batches[2] = 64, bo->batches[3] = 256;
    }
    if (bo->batches_s && (bo->nb = parse_list(bo->batches_s, bo->batches, 32)) <= 0) {
        fprintf(stderr, "flashsample bench: error: bad --batches '%s'\n", bo->batches_s);
        return -1;
    }
    for (int i = 0; i < bo->nb; i++)
        if (bo->batches[i] > MAXB) {
            fprintf(stderr, "flashsample bench: error: B <= %d\n", MAXB);
            return -1;
        }
    return 0;
}

/* --engines a,b,... into bo->want (default: every engine but the opt-in
 * rules; else those given plus floor, cublas and cublas_graph). 0 or -1. */
static int bench_parse_engines(bench_opts *bo)
{
    for (int e = 0; e < E_COUNT; e++)
        bo->want[e] = bo->engines_s == NULL && e < E_RULE_FIRST;
    if (!bo->engines_s)
        return 0;
    const char *p = bo->engines_s;
    while (*p) {
        size_t n = strcspn(p, ",");
        int found = 0;
        for (int e = 0; e < E_COUNT; e++)
            if (strlen(engine_names[e]) == n && !strncmp(p, engine_names[e], n))
                bo->want[e] = found = 1;
        if (!found) {
            fprintf(stderr, "flashsample bench: error: unknown engine in --engines '%s'\n", bo->engines_s);
            return -1;
        }
        p += n;
        if (*p == ',')
            p++;
    }
    if (!bo->profile) /* every ratio needs them; a profile run launches the listed ones only */
        bo->want[E_FLOOR] = bo->want[E_CUBLAS] = bo->want[E_GRAPH] = 1;
    return 0;
}

/* Every option checked. -1 to go on, else the exit status. */
static int bench_parse_options(int argc, char **argv, bench_opts *bo)
{
    memset(bo, 0, sizeof *bo);
    bo->reps = 100;
    bo->hscale = 1.0;
    const int rc = bench_parse_argv(argc, argv, bo);
    if (rc >= 0)
        return rc;
    if (bo->reps < 100 && !bo->quick) {
        fprintf(stderr,
                "flashsample bench: error: --reps must be >= 100 (medians of fewer runs are noise)\n");
        return 2;
    }
    if (bo->reps < 1 || bo->reps > 100000) {
        fprintf(stderr, "flashsample bench: error: --reps out of range\n");
        return 2;
    }
    if (bo->profile && !bo->engines_s) {
        fprintf(stderr, "flashsample bench: error: --profile needs --engines\n");
        return 2;
    }
    if (bench_parse_shapes(bo) != 0 || bench_parse_batches(bo) != 0 || bench_parse_engines(bo) != 0)
        return 2;
    return -1;
}

/* The async context of the graph engines on its own stream, and the rows'
 * params in device memory. 0 or 1. */
static int bench_setup_async(bench_ctx *b)
{
    fls_context_config acfg;
    fls_context_config_default(&acfg);
    acfg.engine = FLS_ENGINE_CUDA;
    acfg.async = 1;
    float hT[MAXB];
    uint64_t hS[MAXB], hO[MAXB];
    CK(cudaStreamCreateWithFlags(&b->ast, cudaStreamNonBlocking));
    acfg.stream = b->ast;
    if (fls_context_create(&b->actx, &acfg) != FLS_OK)
        goto fail;
    for (int i = 0; i < MAXB; i++) {
        hT[i] = 0.7f;
        hS[i] = fls_row_seed(1, (uint64_t)i);
        hO[i] = 0;
    }
    CK(cudaMalloc((void **)&b->dT, sizeof hT));
    CK(cudaMalloc((void **)&b->dS, sizeof hS));
    CK(cudaMalloc((void **)&b->dO, sizeof hO));
    CK(cudaMemcpy(b->dT, hT, sizeof hT, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b->dS, hS, sizeof hS, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b->dO, hO, sizeof hO, cudaMemcpyHostToDevice));
    return 0;
fail:
    return 1;
}

/* Timing buffers and events, cuBLAS, the token buffers, the async context
 * (if a graph engine is wanted) and the rows' params. 0 or 1. */
static int bench_setup(bench_ctx *b, const bench_opts *bo)
{
    b->reps = (int)bo->reps;
    b->warm = bo->quick ? 5 : 20;
    b->warm_ms = bo->quick ? 25.0 : 250.0;
    b->st = 0;
    int want_dev = bo->want[E_FUSED_GRAPH] || bo->want[E_RULE_KP_GRAPH];
    for (int e = E_MODS_FIRST; e < E_COUNT; e++)
        want_dev |= bo->want[e];
    b->times = (float *)malloc(sizeof(float) * (size_t)bo->reps);
    b->ev = (cudaEvent_t *)calloc((size_t)bo->reps * 2, sizeof(cudaEvent_t));
    if (!b->times || !b->ev)
        goto fail;
    for (long i = 0; i < 2 * bo->reps; i++)
        CK(cudaEventCreate(&b->ev[i]));
    if (!fls_cublas() || fls_cublas()->create(&b->blas) != CUBLAS_STATUS_SUCCESS)
        goto fail;
    CK(cudaMalloc((void **)&b->sink, 16));
    CK(cudaMalloc((void **)&b->tokens, sizeof(int64_t) * MAXB));
    CK(cudaMalloc((void **)&b->rule_tokens, sizeof(int64_t) * MAXB * 4));
    if (want_dev && bench_setup_async(b) != 0)
        goto fail;
    for (int i = 0; i < MAXB; i++) {
        b->rows[i].temperature = 0.7f;
        b->rows[i].pad_ = 0;
        b->rows[i].seed = fls_row_seed(1234, (uint64_t)i);
        b->rows[i].offset = 0;
    }
    return bench_parse_rule_specs() != 0;
fail:
    return 1;
}

/* Device-to-device copy bandwidth (bytes read + written), for reference. 0 or 1. */
static int bench_copy_bandwidth(double *gbps)
{
    const size_t n = (size_t)1 << 31;
    char *a = NULL, *c = NULL;
    cudaEvent_t e0, e1;
    float ms = 0, best = 1e30f;
    CK(cudaMalloc((void **)&a, n));
    CK(cudaMalloc((void **)&c, n));
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaMemcpy(c, a, n, cudaMemcpyDeviceToDevice);
    for (int i = 0; i < 10; i++) {
        cudaEventRecord(e0);
        cudaMemcpyAsync(c, a, n, cudaMemcpyDeviceToDevice);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        best = ms < best ? ms : best;
    }
    *gbps = 2.0 * (double)n / (best * 1e-3) / 1e9;
    cudaFree(a);
    cudaFree(c);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 0;
fail:
    return 1;
}

/* The mods engines' arrays for maxB rows of the current V. 0 or 1. */
static int bench_alloc_mods(bench_ctx *b, int64_t maxB)
{
    const int64_t S = BENCH_MODS_S, K = BENCH_MODS_K;
    b->mask_ld = (b->V + 31) / 32;
    int32_t *mask = (int32_t *)malloc(4 * (size_t)(maxB * b->mask_ld));
    int32_t *cnt = (int32_t *)malloc(4 * (size_t)(maxB * S));
    int64_t *sid = (int64_t *)malloc(8 * (size_t)(maxB * S)),
            *bid = (int64_t *)malloc(8 * (size_t)(maxB * K));
    float *bv = (float *)malloc(4 * (size_t)(maxB * K));
    int rc = 1;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    if (!mask || !cnt || !sid || !bid || !bv)
        goto fail;
    for (int64_t i = 0; i < maxB * b->mask_ld; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        mask[i] = (int32_t)(uint32_t)(x >> 32);
    }
    for (int64_t r = 0; r < maxB; r++) {
        /* distinct ids in a row: steps 593 and 9973 below V / 256 and V / 16 */
        for (int64_t i = 0; i < S; i++) {
            sid[r * S + i] = (r * 7919 + i * 593) % b->V;
            cnt[r * S + i] = (int32_t)(i % 4);
        }
        for (int64_t i = 0; i < K; i++) {
            bid[r * K + i] = (r * 31 + i * 9973) % b->V;
            bv[r * K + i] = (float)(i % 5) - 2.0f;
        }
    }
    CK(cudaMalloc((void **)&b->mask, 4 * (size_t)(maxB * b->mask_ld)));
    CK(cudaMalloc((void **)&b->seen_counts, 4 * (size_t)(maxB * S)));
    CK(cudaMalloc((void **)&b->seen_ids, 8 * (size_t)(maxB * S)));
    CK(cudaMalloc((void **)&b->bias_ids, 8 * (size_t)(maxB * K)));
    CK(cudaMalloc((void **)&b->bias_values, 4 * (size_t)(maxB * K)));
    CK(cudaMemcpy(b->mask, mask, 4 * (size_t)(maxB * b->mask_ld), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b->seen_counts, cnt, 4 * (size_t)(maxB * S), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b->seen_ids, sid, 8 * (size_t)(maxB * S), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b->bias_ids, bid, 8 * (size_t)(maxB * K), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b->bias_values, bv, 4 * (size_t)(maxB * K), cudaMemcpyHostToDevice));
    rc = 0;
fail:
    free(mask);
    free(cnt);
    free(sid);
    free(bid);
    free(bv);
    return rc;
}

static void bench_free_mods(bench_ctx *b)
{
    cudaFree(b->mask);
    cudaFree(b->seen_counts);
    cudaFree(b->seen_ids);
    cudaFree(b->bias_ids);
    cudaFree(b->bias_values);
    b->mask = b->seen_counts = NULL;
    b->seen_ids = b->bias_ids = NULL;
    b->bias_values = NULL;
}

/* Shape s's W (NROT copies), H (the largest batch) and logits buffer. 0 or 1. */
static int bench_alloc_shape(bench_ctx *b, const bench_opts *bo, int s)
{
    b->D = bo->shapes[s][0];
    b->V = bo->shapes[s][1];
    int64_t maxB = 1;
    for (int i = 0; i < bo->nb; i++)
        maxB = bo->batches[i] > maxB ? bo->batches[i] : maxB;
    for (int r = 0; r < NROT; r++) {
        CK(cudaMalloc((void **)&b->W[r], (size_t)(b->V * b->D) * 2));
        /* logits ~ N(0, ~1.2): |W| <= 2/sqrt(D), |H| <= 1 */
        bench_fill_bf16<<<b->sms * 8, 256>>>(b->W[r], b->V * b->D, 17 + r, 2.0f / sqrtf((float)b->D) * 1.7f);
        CK(cudaGetLastError());
    }
    CK(cudaMalloc((void **)&b->H, (size_t)(maxB * b->D) * 2));
    bench_fill_bf16<<<b->sms, 256>>>(b->H, maxB * b->D, 99, (float)bo->hscale);
    CK(cudaMalloc((void **)&b->logits, (size_t)(maxB * b->V) * 4));
    CK(cudaDeviceSynchronize());
    for (int e = E_MODS_FIRST; e < E_COUNT; e++)
        if (bo->want[e])
            return bench_alloc_mods(b, maxB);
    return 0;
fail:
    return 1;
}

static void bench_free_shape(bench_ctx *b)
{
    for (int r = 0; r < NROT; r++) {
        cudaFree(b->W[r]);
        b->W[r] = NULL;
    }
    cudaFree(b->H);
    cudaFree(b->logits);
    b->H = NULL;
    b->logits = NULL;
    bench_free_mods(b);
}

/* The eager GEMM in a graph, one per rotation. 0 or 1. */
static int bench_capture_gemm_graphs(bench_ctx *b)
{
    for (int r = 0; r < NROT; r++) {
        cudaStream_t cs;
        cudaGraph_t g;
        CK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
        fls_cublas()->set_stream(b->blas, cs);
        bench_gemm(b, r); /* warm (heuristics, workspace) outside the capture */
        CK(cudaStreamSynchronize(cs));
        CK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
        bench_gemm(b, r);
        CK(cudaStreamEndCapture(cs, &g));
        CK(cudaGraphInstantiate(&b->graph[r], g, 0));
        cudaGraphDestroy(g);
        fls_cublas()->set_stream(b->blas, b->st);
        cudaStreamDestroy(cs);
    }
    return 0;
fail:
    return 1;
}

/* The fused call (gk = 0) or the call with top-k 50 + top-p 0.9 (gk = 1) on
 * rotation r through the async context: eager (pass 0), or captured into
 * its graph (pass 1). 0 or 1. */
static int bench_fused_graph_call(bench_ctx *b, int pass, int gk, int r)
{
    const int ge = gk ? E_RULE_KP_GRAPH : E_FUSED_GRAPH;
    fls_matrix W = {b->W[r], FLS_DTYPE_BF16, b->V, b->D, b->D}, H = {b->H, FLS_DTYPE_BF16, b->B, b->D, b->D};
    fls_params p;
    fls_params_default(&p);
    p.params_on_device = 1;
    p.temperature = b->dT;
    p.row_seeds = b->dS;
    p.row_offsets = b->dO;
    if (gk) {
        p.top_k = 50;
        p.top_p = 0.9f;
    }
    fls_outputs o = {gk ? b->rule_tokens : b->tokens, NULL, NULL};
    fls_status es;
    cudaGraph_t g;
    if (pass == 0) {
        es = fls_sample_fused(b->actx, &W, &H, &p, &o);
        if (es == FLS_OK)
            es = fls_context_sync(b->actx);
    } else {
        CK(cudaStreamBeginCapture(b->ast, cudaStreamCaptureModeThreadLocal));
        es = fls_sample_fused(b->actx, &W, &H, &p, &o);
        CK(cudaStreamEndCapture(b->ast, &g));
        if (es == FLS_OK)
            CK(cudaGraphInstantiate(gk ? &b->rgraph[r] : &b->fgraph[r], g, 0));
        cudaGraphDestroy(g);
    }
    if (es != FLS_OK) {
        fprintf(stderr, "bench: %s (%s) at B=%lld: %s\n", engine_names[ge], pass ? "capture" : "eager",
                (long long)b->B, fls_status_string(es));
        goto fail;
    }
    return 0;
fail:
    return 1;
}

/* The fused call (and the call with top-k 50 + top-p 0.9) in a graph, one
 * per rotation: every eager call first (they size the workspace, which a
 * capture must not grow and a later growth would free under the graphs),
 * then the captures. 0 or 1. */
static int bench_capture_fused_graphs(bench_ctx *b, const int *want)
{
    for (int pass = 0; pass < 2; pass++)
        for (int gk = 0; gk < 2; gk++) {
            if (!want[gk ? E_RULE_KP_GRAPH : E_FUSED_GRAPH])
                continue;
            for (int r = 0; r < NROT; r++)
                if (bench_fused_graph_call(b, pass, gk, r) != 0)
                    return 1;
        }
    return 0;
}

static void bench_destroy_graphs(bench_ctx *b, const int *want)
{
    for (int r = 0; r < NROT; r++) {
        cudaGraphExecDestroy(b->graph[r]);
        if (want[E_FUSED_GRAPH])
            cudaGraphExecDestroy(b->fgraph[r]);
        if (want[E_RULE_KP_GRAPH])
            cudaGraphExecDestroy(b->rgraph[r]);
    }
}

/* Times every wanted engine and the dispatcher's pick fe at batch b->B
 * into med and mn (-1: not timed). 0 or 1. */
static int bench_time_engines(bench_ctx *b, const int *want, int fe, double *med, double *mn)
{
    for (int e = 0; e < E_COUNT; e++) {
        med[e] = mn[e] = -1.0;
        if (!(want[e] || e == fe) || (e == E_WGMMA_N64 && b->B <= 64))
            continue;
        if (bench_time(b, e, &med[e], &mn[e])) {
            fprintf(stderr, "bench: engine %s failed at B=%lld: %s\n", engine_names[e], (long long)b->B,
                    cudaGetErrorString(cudaGetLastError()));
            return 1;
        }
        /* queued calls report their status here (a graph's: its context's);
         * the GEMM-only engines leave garbage by design, and their status is
         * dropped so that it is not reported by the next engine's sync */
        const int gemm_only = e == E_WGMMA_GEMM || e == E_CHUNK_GEMM;
        const fls_status qs = e == E_RULE_KP_GRAPH || e == E_FUSED_GRAPH ? fls_context_sync(b->actx)
                              : e > E_GRAPH                              ? fls_context_sync(b->ctx)
                                                                         : FLS_OK;
        if (qs != FLS_OK && !gemm_only) {
            fprintf(stderr, "bench: engine %s at B=%lld: %s\n", engine_names[e], (long long)b->B,
                    fls_status_string(qs));
            return 1;
        }
    }
    return 0;
}

/* Token agreement between the GPU paths (same noise, same seeds): the rows
 * where five paths give one token. 0 or 1. */
static int bench_token_agreement(bench_ctx *b, int *agree)
{
    int64_t tk[5][MAXB];
    const int eng3[5] = {E_WGMMA, E_CHUNKED, E_UGUMBEL, E_CHUNKED_NS, E_CHUNKED_CAP5};
    for (int k = 0; k < 5; k++) {
        fls_status st = bench_sample(b, eng3[k], 0, 0, 1);
        if (st != FLS_OK) {
            fprintf(stderr, "bench: %s: %s\n", engine_names[eng3[k]], fls_status_string(st));
            goto fail;
        }
        CK(cudaMemcpy(tk[k], b->tokens, sizeof(int64_t) * (size_t)b->B, cudaMemcpyDeviceToHost));
    }
    *agree = 0;
    for (int64_t i = 0; i < b->B; i++)
        *agree +=
            tk[0][i] == tk[1][i] && tk[0][i] == tk[2][i] && tk[0][i] == tk[3][i] && tk[0][i] == tk[4][i];
    return 0;
fail:
    return 1;
}

/* One batch's line of the table, and the rule engines' lines. */
static void bench_print_batch(const bench_ctx *b, const double *med, int fe, int agree)
{
    const double cub = med[E_CUBLAS] < med[E_GRAPH] ? med[E_CUBLAS] : med[E_GRAPH];
    const double flops = 2.0 * (double)b->B * (double)b->V * (double)b->D;
    /* -1.000: not timed (--engines) */
    printf("%5lld %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f "
           "%9.3f %9.3f "
           "| %8.3f %8.3f %8.3f %8.1f %6s %5d/%-3lld\n",
           (long long)b->B, med[E_FLOOR], med[E_CUBLAS], med[E_GRAPH], med[E_WGMMA], med[E_CHUNKED],
           med[E_CHUNKED_CAP5], med[E_CHUNKED_NS], med[E_CHUNK_GEMM], med[E_LOGITS], med[E_LOGITS_NS],
           med[E_UGUMBEL], med[E_UMULT], med[E_GROUPED], med[E_GROUPED_CHUNKED], med[fe], med[fe] / cub,
           med[E_GROUPED] > 0 ? med[E_GROUPED] / cub : -1.0, med[fe] / med[E_FLOOR],
           flops / (med[fe] * 1e-3) / 1e12, fe == E_WGMMA ? "wgmma" : "chunk", agree, (long long)b->B);
    for (int e = E_RULE_FIRST; e < E_COUNT; e++) {
        if (med[e] < 0)
            continue;
        printf("      %-14s %9.3f ms  %6.3fx fused  %6.3fx cublas", engine_names[e], med[e], med[e] / med[fe],
               med[e] / cub);
        /* the mods engines against their own baseline: the same call without them */
        const int base = e == E_MODS_LOGITS ? E_LOGITS : e > E_FUSED_DEV ? E_FUSED_DEV : -1;
        if (base >= 0 && med[base] > 0)
            printf("  %6.3fx %s", med[e] / med[base], engine_names[base]);
        printf("\n");
    }
}

/* One batch's CSV rows: every engine timed, then the dispatcher's pick as "fused". */
static void bench_csv_batch(FILE *fp, const bench_ctx *b, const double *med, const double *mn, int fe,
                            const char *date, const char *gpu)
{
    const double flops = 2.0 * (double)b->B * (double)b->V * (double)b->D;
    const double wbytes = (double)b->V * (double)b->D * 2 + (double)b->B * (double)b->D * 2;
    for (int e = 0; e <= E_COUNT; e++) {
        int ee = e == E_COUNT ? fe : e;
        const char *name = e == E_COUNT ? "fused" : engine_names[e];
        if (med[ee] < 0)
            continue;
        double bytes = wbytes;
        if (ee == E_FLOOR)
            bytes = (double)b->V * (double)b->D * 2;
        else if (ee == E_LOGITS || ee == E_LOGITS_NS)
            bytes = (double)b->B * (double)b->V * 4;
        else if (ee == E_CUBLAS || ee == E_GRAPH || ee == E_UGUMBEL || ee == E_UMULT)
            bytes += (double)b->B * (double)b->V * 4;
        fprintf(fp, "cuda,%s,bf16,%lld,%lld,%lld,%.5f,%.1f,%.2f,%.5f,%d,%s,%s\n", name, (long long)b->B,
                (long long)b->V, (long long)b->D, med[ee], bytes / (med[ee] * 1e-3) / 1e9,
                (ee == E_FLOOR || ee == E_LOGITS || ee == E_LOGITS_NS) ? 0.0
                                                                       : flops / (med[ee] * 1e-3) / 1e12,
                mn[ee], b->reps, date, gpu);
    }
    fflush(fp);
}

/* Batch b->B of the current shape: the graphs, the timings, the agreement,
 * the table's lines and the CSV's rows. 0 or 1. */
static int bench_run_batch(bench_ctx *b, const int *want, FILE *fp, const char *date, const char *gpu)
{
    double med[E_COUNT], mn[E_COUNT];
    if (bench_capture_gemm_graphs(b) != 0 || bench_capture_fused_graphs(b, want) != 0)
        return 1;
    fls_cuda_path ap = fls_cuda_auto_path(b->B, b->V, b->D, FLS_DTYPE_BF16, FLS_DTYPE_BF16);
    const int fe = ap == FLS_CUDA_PATH_WGMMA ? E_WGMMA : E_CHUNKED;
    if (bench_time_engines(b, want, fe, med, mn) != 0)
        return 1;
    bench_destroy_graphs(b, want);
    int agree = 0;
    if (bench_token_agreement(b, &agree) != 0)
        return 1;
    bench_print_batch(b, med, fe, agree);
    if (fp)
        bench_csv_batch(fp, b, med, mn, fe, date, gpu);
    return 0;
}

/* --profile: each engine of bo->engines_s once at batch b->B (in engine
 * order; the listed ones only), synchronised. 0 or 1. */
static int bench_profile_batch(bench_ctx *b, const int *listed)
{
    if (bench_capture_gemm_graphs(b) != 0 || bench_capture_fused_graphs(b, listed) != 0)
        return 1;
    for (int e = 0; e < E_COUNT; e++) {
        if (!listed[e])
            continue;
        if (bench_enqueue(b, e, 0, 0) || cudaStreamSynchronize(b->st) != cudaSuccess) {
            fprintf(stderr, "bench: engine %s failed at B=%lld: %s\n", engine_names[e], (long long)b->B,
                    cudaGetErrorString(cudaGetLastError()));
            return 1;
        }
        printf("profile: %s at B = %lld, D = %lld, V = %lld: one launch\n", engine_names[e], (long long)b->B,
               (long long)b->D, (long long)b->V);
    }
    bench_destroy_graphs(b, listed);
    return 0;
}

/* Shape s: its inputs, the table's header, every batch. 0 or 1. */
static int bench_run_shape(bench_ctx *b, const bench_opts *bo, int s, FILE *fp, const char *date,
                           const char *gpu)
{
    if (bench_alloc_shape(b, bo, s) != 0)
        return 1;
    printf("\nD = %lld, V = %lld (W %.3f GB)\n", (long long)b->D, (long long)b->V, b->V * b->D * 2e-9);
    printf("%5s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s | %8s %8s %8s %8s %6s %8s\n", "B",
           "floor", "cublas", "graph", "f_wgmma", "f_chunk", "f_cap5", "f_noskip", "c_gemms", "l_samp",
           "l_noskip", "u_gumbel", "u_multi", "grouped", "g_chunk", "fused", "f/cublas", "g/cublas",
           "f/floor", "TFLOP/s", "path", "agree");
    for (int bi = 0; bi < bo->nb; bi++) {
        b->B = bo->batches[bi];
        if (bo->profile) {
            if (bench_profile_batch(b, bo->want) != 0)
                return 1;
            continue;
        }
        if (bench_run_batch(b, bo->want, fp, date, gpu) != 0)
            return 1;
    }
    bench_free_shape(b);
    return 0;
}

/* The CSV's temporary file (csv.tmp.PID) with the header and the copy
 * bandwidth row; NULL after a message. */
static FILE *bench_open_csv(const char *csv, char *tmp, size_t cap, double copy_gbps, const char *date,
                            const char *gpu)
{
    snprintf(tmp, cap, "%s.tmp.%d", csv, (int)getpid());
    FILE *fp = fopen(tmp, "w");
    if (!fp) {
        fprintf(stderr, "flashsample bench: error: cannot write '%s'\n", tmp);
        return NULL;
    }
    fprintf(fp, "device,engine,dtype,B,V,D,median_ms,gbps,tflops,min_ms,reps,date,gpu\n");
    fprintf(fp, "cuda,copy,bf16,0,0,0,0,%.1f,0,0,10,%s,%s\n", copy_gbps, date, gpu);
    return fp;
}

/* Everything the bench holds on the device and the host. */
static void bench_release(bench_ctx *b, long reps)
{
    for (int r = 0; r < NROT; r++)
        cudaFree(b->W[r]);
    cudaFree(b->H);
    cudaFree(b->logits);
    cudaFree(b->tokens);
    cudaFree(b->rule_tokens);
    cudaFree(b->sink);
    if (b->ev)
        for (long i = 0; i < 2 * reps; i++)
            if (b->ev[i])
                cudaEventDestroy(b->ev[i]);
    free(b->ev);
    free(b->times);
    if (b->blas)
        fls_cublas()->destroy(b->blas);
    fls_context_destroy(b->ctx);
    fls_context_destroy(b->actx);
    if (b->ast)
        cudaStreamDestroy(b->ast);
    cudaFree(b->dT);
    cudaFree(b->dS);
    cudaFree(b->dO);
}

/* The CUDA context, the GPU's name (commas dropped, for the CSV) and SM count. 0 or 1. */
static int bench_create_context(bench_ctx *b, char *gpu, size_t cap)
{
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    cfg.engine = FLS_ENGINE_CUDA;
    fls_status fst = fls_context_create(&b->ctx, &cfg);
    if (fst != FLS_OK) {
        fprintf(stderr, "flashsample bench: error: cannot create the CUDA engine: %s\n",
                fls_status_string(fst));
        return 1;
    }
    fls_cuda_device_info(b->ctx, gpu, cap, &b->sms);
    for (char *c = gpu; *c; c++)
        if (*c == ',')
            *c = ' ';
    return 0;
}

extern "C" int fls_tool_bench_cuda(int argc, char **argv)
{
    bench_opts bo;
    int rc = bench_parse_options(argc, argv, &bo);
    if (rc >= 0)
        return rc;

    bench_ctx b;
    memset(&b, 0, sizeof b);
    FILE *fp = NULL;
    char tmp[4096] = "", gpu[256] = "", date[32];
    double copy_gbps = 0;
    {
        time_t now = time(NULL);
        struct tm tmv;
        gmtime_r(&now, &tmv);
        strftime(date, sizeof date, "%Y-%m-%d", &tmv);
    }
    if (bench_create_context(&b, gpu, sizeof gpu) != 0)
        return 1;
    rc = 1;
    if (bench_setup(&b, &bo) != 0 || bench_copy_bandwidth(&copy_gbps) != 0)
        goto fail;
    if (bo.csv && !(fp = bench_open_csv(bo.csv, tmp, sizeof tmp, copy_gbps, date, gpu)))
        goto fail;
    printf("GPU benchmark on %s (%d SMs), %s; device-to-device copy %.0f GB/s (read + write)\n", gpu, b.sms,
           date, copy_gbps);
    printf("bf16, T = 0.7, H scale %g, median of %d runs (ms); ratios: fused / cuBLAS best, fused / floor\n",
           bo.hscale, b.reps);
    for (int s = 0; s < bo.nshapes; s++)
        if (bench_run_shape(&b, &bo, s, fp, date, gpu) != 0)
            goto fail;
    if (fp) {
        if (fclose(fp) != 0 || rename(tmp, bo.csv) != 0) {
            fp = NULL;
            fprintf(stderr, "flashsample bench: error: cannot write '%s'\n", bo.csv);
            goto fail;
        }
        fp = NULL;
        printf("\nwrote %s\n", bo.csv);
    }
    rc = 0;
fail:
    if (fp) {
        fclose(fp);
        remove(tmp);
    }
    bench_release(&b, bo.reps);
    return rc;
}
