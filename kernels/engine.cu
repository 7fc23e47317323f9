/*
 * engine.cu — the CUDA engine's host side: context, workspace, dispatch of
 * the three methods, cuBLAS, and the device-memory helpers of internal.h.
 *
 * Loading: the CUDA runtime is linked statically (it opens the driver only
 * at the first CUDA call) and cuBLAS is opened with dlopen when a CUDA
 * context is created (fls_cublas), so a program that never creates a CUDA
 * context loads neither, and an installed library needs no CUDA path.
 *
 * A call uploads the resolved rows, runs the main kernel(s) and a finalize
 * kernel, then reads back one status word (NaN seen, all-masked row): the C
 * API returns a status, so each call synchronises its stream once. Error
 * marks are "epoch" words (== the call's counter), so nothing is cleared
 * between calls, and the finalize kernel writes no output when one is set.
 */
#include "common.cuh"
#include "fls_cuda.h"
#include "fls_dtype.h"
#include "registry.h"
#include "rules.cuh"
#include "stair.h"
#include "topc.h"

extern "C" {
#include "cpu_kernels.h"
#include "cpu_rules.h"
}

#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- cuBLAS, opened on first use ---- */

static fls_cublas_api g_cublas;
static int g_cublas_ok;
static pthread_once_t g_cublas_once = PTHREAD_ONCE_INIT;

static void fls_cublas_open(void)
{
    char name[64];
    snprintf(name, sizeof name, "libcublas.so.%d", CUBLAS_VER_MAJOR);
    const char *env = getenv("FLS_CUBLAS_PATH");
    const char *dirs[] = {"/usr/local/cuda/lib64/", "/usr/local/cuda/targets/x86_64-linux/lib/"};
    void *h = env && env[0] ? dlopen(env, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h)
        h = dlopen(name, RTLD_NOW | RTLD_LOCAL); /* the loader's path: LD_LIBRARY_PATH, ld.so.conf */
    const char *home = getenv("CUDA_HOME");
    if (!h && home && home[0]) {
        char path[4096];
        snprintf(path, sizeof path, "%s/lib64/%s", home, name);
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    for (size_t i = 0; !h && i < sizeof dirs / sizeof dirs[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s%s", dirs[i], name);
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!h)
        return;
    g_cublas.create = (cublasStatus_t(*)(cublasHandle_t *))dlsym(h, "cublasCreate_v2");
    g_cublas.destroy = (cublasStatus_t(*)(cublasHandle_t))dlsym(h, "cublasDestroy_v2");
    g_cublas.set_stream = (cublasStatus_t(*)(cublasHandle_t, cudaStream_t))dlsym(h, "cublasSetStream_v2");
    g_cublas.gemm_ex = (fls_cublas_gemm_ex_fn)dlsym(h, "cublasGemmEx");
    g_cublas_ok = g_cublas.create && g_cublas.destroy && g_cublas.set_stream && g_cublas.gemm_ex;
    /* the handle stays open for the life of the process */
}

extern "C" const fls_cublas_api *fls_cublas(void)
{
    pthread_once(&g_cublas_once, fls_cublas_open);
    return g_cublas_ok ? &g_cublas : NULL;
}

struct fls_cuda_state {
    int device;
    int sm_count;
    cudaStream_t stream;
    const fls_cublas_api *blas_api;
    cublasHandle_t blas;
    char *ws; /* growable workspace */
    size_t ws_bytes;
    unsigned *flags;    /* [0..1] status (epoch, code), [2] NaN mark, [3] temperature-overflow
                           mark, [4, 4 + flags_rows) finite marks per row */
    int64_t flags_rows; /* capacity of the finite marks */
    unsigned epoch;
    unsigned long long *gthr; /* [gthr_rows * FLS_GTHR_DRAWS]: the wgmma kernel's shared row
                                 thresholds (fls_ws.gthr), zero when allocated */
    int64_t gthr_rows;
    unsigned tepoch;               /* the last wgmma pass's tag in gthr */
    float *gbound;                 /* [2 FLS_GB_N + FLS_GB2_N]: the Gumbel bound tables (up, lo, then the top
                                      bucket's up2), device */
    fls_cuda_opts dev;             /* the options of the public entry points: zero (the production
                                      defaults) unless a test or bench sets them (fls_cuda_set_dev_opts) */
    int async;                     /* fls_context_config.async */
    unsigned *sticky;              /* [1]: the first error code of the calls since the last sync */
    uint64_t rule_matmul_calls[3]; /* fused rule calls: cuBLAS, wgmma + tables, wgmma + statistics pass */
    uint64_t rule_list_draw_calls; /* rule calls whose list kernel drew the rows (ldraw) */
    uint64_t rule_key_calls;       /* rule calls whose matmul kept the keys (wkeys) */
    uint64_t rule_pdl_calls;       /* rule calls whose later kernels were programmatic dependents */
    int select_bpm[FLS_FKMAX + 1]; /* [K]: the select pass's resident blocks a multiprocessor (0: not
                                      asked yet; fls_rule_select_blocks_per_sm) */
    char name[256];
};

static fls_status fls_from_cuda(cudaError_t e)
{
    if (e == cudaSuccess)
        return FLS_OK;
    (void)cudaGetLastError(); /* a non-sticky error must not fail the next call */
    if (e == cudaErrorMemoryAllocation)
        return FLS_ERR_OUT_OF_MEMORY;
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorNoKernelImageForDevice)
        return FLS_ERR_NO_DEVICE;
    return FLS_ERR_CUDA;
}

static fls_status fls_from_blas(cublasStatus_t s)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return FLS_OK;
    if (s == CUBLAS_STATUS_ALLOC_FAILED)
        return FLS_ERR_OUT_OF_MEMORY;
    return FLS_ERR_CUDA;
}

extern "C" int fls_cuda_built_impl(void)
{
    return 1;
}

extern "C" int fls_cuda_available_impl(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    for (int d = 0; d < n; d++) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) == cudaSuccess && major >= 9)
            return 1;
    }
    return 0;
}

extern "C" fls_status fls_cuda_context_init(fls_context_t *ctx)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
        (void)cudaGetLastError();
        return FLS_ERR_NO_DEVICE;
    }
    const int dev = ctx->config.device;
    if (dev < 0 || dev >= n)
        return FLS_ERR_NO_DEVICE;
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
        return fls_from_cuda(cudaGetLastError());
    if (prop.major < 9) /* the kernels are built for sm_90 only */
        return FLS_ERR_NO_DEVICE;
    cudaError_t e = cudaSetDevice(dev);
    if (e != cudaSuccess)
        return fls_from_cuda(e);
    fls_cuda_state *s = (fls_cuda_state *)calloc(1, sizeof *s);
    if (!s)
        return FLS_ERR_OUT_OF_MEMORY;
    s->device = dev;
    s->sm_count = prop.multiProcessorCount;
    s->stream = (cudaStream_t)ctx->config.stream;
    memcpy(s->name, prop.name, sizeof s->name - 1);
    s->name[sizeof s->name - 1] = 0;
    s->blas_api = fls_cublas();
    if (!s->blas_api) { /* no libcublas.so where the loader or CUDA_HOME can find it */
        free(s);
        return FLS_ERR_CUDA;
    }
    fls_status st = fls_from_blas(s->blas_api->create(&s->blas));
    if (st == FLS_OK)
        st = fls_from_blas(s->blas_api->set_stream(s->blas, s->stream));
    if (st != FLS_OK) {
        if (s->blas)
            s->blas_api->destroy(s->blas);
        free(s);
        return st;
    }
    /* the bound table of fls_gumbel_bound.h, built on the host with the
     * contract's own transform (the unit test checks this very table) */
    float table[2 * FLS_GB_N + FLS_GB2_N];
    fls_gumbel_bound_table(table, table + FLS_GB_N);
    fls_gumbel_bound_top(table + 2 * FLS_GB_N);
    cudaError_t te = cudaMalloc((void **)&s->gbound, sizeof table);
    if (te == cudaSuccess)
        te = cudaMemcpy(s->gbound, table, sizeof table, cudaMemcpyHostToDevice);
    if (te != cudaSuccess) {
        cudaFree(s->gbound);
        s->blas_api->destroy(s->blas);
        free(s);
        return fls_from_cuda(te);
    }
    te = cudaMalloc((void **)&s->sticky, sizeof(unsigned));
    if (te == cudaSuccess)
        te = cudaMemset(s->sticky, 0, sizeof(unsigned));
    if (te != cudaSuccess) {
        cudaFree(s->sticky);
        cudaFree(s->gbound);
        s->blas_api->destroy(s->blas);
        free(s);
        return fls_from_cuda(te);
    }
    s->async = ctx->config.async != 0;
    ctx->cuda = s;
    return FLS_OK;
}

extern "C" void fls_cuda_context_fini(fls_context_t *ctx)
{
    if (!ctx || !ctx->cuda)
        return;
    fls_cuda_state *s = ctx->cuda;
    cudaSetDevice(s->device);
    if (s->stream)
        cudaStreamSynchronize(s->stream);
    else
        cudaDeviceSynchronize();
    cudaFree(s->ws);
    cudaFree(s->flags);
    cudaFree(s->gthr);
    cudaFree(s->gbound);
    cudaFree(s->sticky);
    s->blas_api->destroy(s->blas);
    free(s);
    ctx->cuda = NULL;
}

extern "C" fls_status fls_cuda_check_device_pointer(const void *p)
{
    cudaPointerAttributes at;
    cudaError_t e = cudaPointerGetAttributes(&at, p);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) ? FLS_ERR_NO_DEVICE
                                                                            : FLS_ERR_POINTER;
    }
    return (at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged) ? FLS_OK : FLS_ERR_POINTER;
}

extern "C" fls_status fls_cuda_malloc(void **p, size_t bytes)
{
    if (!p)
        return FLS_ERR_NULL;
    *p = NULL;
    if (bytes == 0)
        return FLS_ERR_SIZE;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
        (void)cudaGetLastError();
        return FLS_ERR_NO_DEVICE;
    }
    return fls_from_cuda(cudaMalloc(p, bytes));
}

extern "C" void fls_cuda_free(void *p)
{
    if (p)
        cudaFree(p);
}

extern "C" fls_status fls_cuda_memcpy(void *dst, const void *src, size_t bytes, int to_device)
{
    if (!dst || !src)
        return FLS_ERR_NULL;
    if (bytes == 0)
        return FLS_OK;
    return fls_from_cuda(
        cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));
}

/* Whether the context's stream is being captured into a CUDA graph (the
 * streaming API's synchronous copies must not run then). */
extern "C" int fls_cuda_capturing(const fls_context_t *ctx)
{
    if (!ctx || !ctx->cuda || !ctx->cuda->stream)
        return 0;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(ctx->cuda->stream, &cs) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return cs != cudaStreamCaptureStatusNone;
}

extern "C" fls_status fls_cuda_memcpy2d(void *dst, size_t dpitch, const void *src, size_t spitch,
                                        size_t width, size_t rows, int to_device)
{
    if (!dst || !src)
        return FLS_ERR_NULL;
    if (width == 0 || rows == 0)
        return FLS_OK;
    return fls_from_cuda(cudaMemcpy2D(dst, dpitch, src, spitch, width, rows,
                                      to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));
}

extern "C" void fls_cuda_opts_default(fls_cuda_opts *o)
{
    memset(o, 0, sizeof *o);
}

extern "C" fls_status fls_cuda_set_dev_opts(fls_context_t *ctx, const fls_cuda_opts *opts)
{
    if (!ctx || !ctx->cuda)
        return FLS_ERR_NO_DEVICE;
    if (opts)
        ctx->cuda->dev = *opts;
    else
        fls_cuda_opts_default(&ctx->cuda->dev);
    return FLS_OK;
}

/* W and H fit the tensor-core kernel's operand rules. */
static bool fls_wgmma_eligible(const fls_matrix *W, const fls_matrix *H)
{
    if (W->dtype != H->dtype || (W->dtype != FLS_DTYPE_BF16 && W->dtype != FLS_DTYPE_F16))
        return false;
    if (((uintptr_t)W->data) % 16 || ((uintptr_t)H->data) % 16 || W->ld % 8 || H->ld % 8 || W->cols % 8)
        return false;
    if (W->cols > (1 << 30) || W->rows >= ((int64_t)1 << 31) - 128 || H->rows > (1 << 30))
        return false;
    return true;
}

/* Dispatcher (docs/GPU.md; docs/PERF.md GPU v8). Measured 2026-11-29 on an
 * H200 (bf16, T = 0.7, one draw, median of 100; the per-shape table is in
 * docs/PERF.md): the warp-specialised wgmma kernel beats the cuBLAS-chunked
 * path and the stream kernel at every benchmarked shape and B <= 256 (since
 * v8 also D = 8192, B = 256: 1.011 vs 1.083 ms in the final v8 table). Above
 * B = 256 nothing is measured; there the chunked path (cuBLAS at its best
 * with large B) stays at D >= 6144, split between the measured 4096 and
 * 8192. (The mma.sync and small-batch streaming kernels of earlier
 * versions won nowhere and were removed; docs/PERF.md keeps their numbers.) */
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

static size_t fls_align256(size_t x)
{
    return (x + 255) & ~(size_t)255;
}

static fls_status fls_ensure_ws(fls_cuda_state *s, size_t bytes)
{
    if (bytes <= s->ws_bytes)
        return FLS_OK;
    cudaError_t e = s->stream ? cudaStreamSynchronize(s->stream) : cudaDeviceSynchronize();
    if (e != cudaSuccess)
        return fls_from_cuda(e);
    cudaFree(s->ws);
    s->ws = NULL;
    s->ws_bytes = 0;
    e = cudaMalloc((void **)&s->ws, bytes);
    if (e != cudaSuccess) {
        s->ws = NULL;
        return fls_from_cuda(e);
    }
    s->ws_bytes = bytes;
    return FLS_OK;
}

static fls_status fls_ensure_flags(fls_cuda_state *s, int64_t B)
{
    if (B <= s->flags_rows && s->epoch != 0xffffffffu)
        return FLS_OK;
    cudaError_t e = s->stream ? cudaStreamSynchronize(s->stream) : cudaDeviceSynchronize();
    if (e != cudaSuccess)
        return fls_from_cuda(e);
    cudaFree(s->flags);
    s->flags = NULL;
    s->flags_rows = 0;
    int64_t cap = B < 1024 ? 1024 : B;
    /* [0..1] status, [2] NaN mark, [3] temperature-overflow mark,
     * [4, 4 + cap) finite marks */
    e = cudaMalloc((void **)&s->flags, (size_t)(cap + 4) * sizeof(unsigned));
    if (e == cudaSuccess)
        e = cudaMemset(s->flags, 0, (size_t)(cap + 4) * sizeof(unsigned));
    if (e != cudaSuccess) {
        cudaFree(s->flags);
        s->flags = NULL;
        return fls_from_cuda(e);
    }
    s->flags_rows = cap;
    s->epoch = 1; /* marks are 0 now; host epochs start at 2 (1: a call captured in a graph) */
    return FLS_OK;
}

/* The wgmma kernel's shared row thresholds (fls_ws.gthr) for B rows, zeroed
 * when (re)allocated and when the pass tag would wrap; NULL (no sharing,
 * the same tokens) above FLS_GTHR_MAX_ROWS rows. */
#define FLS_GTHR_MAX_ROWS 65536
static size_t fls_gthr_bytes(int64_t rows)
{
    return (size_t)rows * FLS_GTHR_DRAWS * sizeof(unsigned long long);
}

static fls_status fls_ensure_gthr(fls_cuda_state *s, int64_t B, unsigned long long **out)
{
    *out = NULL;
    if (B > FLS_GTHR_MAX_ROWS)
        return FLS_OK;
    cudaError_t e;
    if (B > s->gthr_rows) {
        e = s->stream ? cudaStreamSynchronize(s->stream) : cudaDeviceSynchronize();
        if (e != cudaSuccess)
            return fls_from_cuda(e);
        cudaFree(s->gthr);
        s->gthr = NULL;
        s->gthr_rows = 0;
        const int64_t cap = B < 1024 ? 1024 : B;
        e = cudaMalloc((void **)&s->gthr, fls_gthr_bytes(cap));
        if (e == cudaSuccess)
            e = cudaMemset(s->gthr, 0, fls_gthr_bytes(cap));
        if (e != cudaSuccess) {
            cudaFree(s->gthr);
            s->gthr = NULL;
            return fls_from_cuda(e);
        }
        s->gthr_rows = cap;
        s->tepoch = 1; /* tags start at 2 (1: a call captured in a graph) */
    }
    if (s->tepoch == 0xffffffffu) {
        e = cudaMemsetAsync(s->gthr, 0, fls_gthr_bytes(s->gthr_rows), s->stream);
        if (e != cudaSuccess)
            return fls_from_cuda(e);
        s->tepoch = 1;
    }
    *out = s->gthr;
    return FLS_OK;
}

/* logits C[b * ldc + i] = W[v0 + i] . H[b] for i < vn, fp32 accumulation. */
static fls_status fls_gemm_logits(fls_cuda_state *s, const fls_matrix *W, const fls_matrix *H, int64_t v0,
                                  int64_t vn, float *C, int64_t ldc, int force_simt)
{
    const int64_t B = H->rows, D = W->cols;
    const bool blas_ok = !force_simt && W->dtype == H->dtype && vn < INT32_MAX && D < INT32_MAX &&
                         W->ld < INT32_MAX && H->ld < INT32_MAX && ldc < INT32_MAX && B < INT32_MAX;
    if (!blas_ok)
        return fls_from_cuda(fls_launch_simt_logits(W->data, W->dtype, W->ld, H->data, H->dtype, H->ld,
                                                    (int)B, D, v0, vn, C, ldc, s->stream));
    cudaDataType t =
        W->dtype == FLS_DTYPE_BF16 ? CUDA_R_16BF : (W->dtype == FLS_DTYPE_F16 ? CUDA_R_16F : CUDA_R_32F);
    /* fp32 inputs: no TF32 (it would round the inputs and change the logits). */
    cublasComputeType_t ct = W->dtype == FLS_DTYPE_F32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
    const float one = 1.0f, zero = 0.0f;
    const char *a = (const char *)W->data + (size_t)v0 * (size_t)W->ld * fls_dtype_bytes(W->dtype);
    /* column-major view: C^T (vn x B, ld ldc) = op_T(W chunk as D x vn) * H^T (D x B) */
    return fls_from_blas(s->blas_api->gemm_ex(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)vn, (int)B, (int)D,
                                              &one, a, t, (int)W->ld, H->data, t, (int)H->ld, &zero, C,
                                              CUDA_R_32F, (int)ldc, ct, CUBLAS_GEMM_DEFAULT));
}

/* Bump allocator over the workspace (first a sizing pass with base NULL). */
struct fls_carve {
    char *base;
    size_t off;
    template <class T> T *take(size_t n)
    {
        T *p = base ? (T *)(base + off) : NULL;
        off += fls_align256(n * sizeof(T));
        return p;
    }
};

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
    ws.epoch = epoch;
    ws.first_draw = first_draw;
    ws.nent = (int)nent;
    ws.want_lse = want_lse;
    return ws;
}

/* ---- the rule family (kernels/rules.cuh) ---- */

/* The top list's capacity on the GPU: the longest list a row's filter
 * asks for by its value (up to 65536), and at least opts.rule_top_cap
 * (default 256) where a row reads a list that no value bounds (an open
 * list, or its support's log-sum-exp); 0 when the CPU engine keeps none.
 * Any capacity gives the same tokens: a row whose statistics do not decide
 * is decided from its full logits. */
static int64_t fls_rule_top_cap(const fls_request *req, const cpu_rule_ctx *rc, int want_lse,
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
                                      cpu_part *part)
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
static fls_status fls_rule_second_row(cudaStream_t str, const fls_rule_dev &d, const cpu_rule_ctx *rc,
                                      int64_t i, float **xp, int *code)
{
    const int64_t b = d.r0 + i;
    if (!*xp && !(*xp = (float *)malloc((size_t)d.V * sizeof(float))))
        return FLS_ERR_OUT_OF_MEMORY;
    float *x = *xp;
    cpu_part part;
    fls_status st = fls_rule_row_inputs(str, d, i, rc->req->rows[b].temperature, x, &part);
    if (st != FLS_OK)
        return st;
    float c;
    double l;
    /* without the device's sum (need_s off), the host's own statistics of the row */
    const int r = cpu_rule_reference_cut_lse(rc, b, x, d.need_s ? &part : NULL, &c, &l, NULL);
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
 * wgmma kernel at B <= 64 where the dispatcher picks the wgmma path. */
static int fls_rule_matmul_of(const fls_cuda_opts &opts, int64_t B, int64_t V, const fls_matrix *W,
                              const fls_matrix *H)
{
    if (opts.rule_matmul != FLS_RULE_MATMUL_AUTO)
        return opts.rule_matmul;
    return B <= 64 && fls_cuda_auto_path(B, V, W->cols, W->dtype, H->dtype) == FLS_CUDA_PATH_WGMMA
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

/*
 * The rule family on the CUDA engine: the one-pass statistics of
 * kernels/rules.cu over the caller's fp32 logits (L) or over blocks of rows
 * whose logits cuBLAS computes into the workspace (W, H); rows the
 * statistics leave undecided, and rows whose staircase overflowed, are
 * finished exactly on the host with the CPU engine's code. Outputs are
 * staged and written only when every row succeeded. Synchronous, except a
 * call of one block of rows on the threshold-first path in async mode,
 * which only queues (its status in the sticky word; rows for the host are
 * FLS_ERR_UNSUPPORTED there).
 */
static fls_status fls_cuda_rules(fls_context_t *ctx, const fls_matrix *W, const fls_matrix *H,
                                 const fls_matrix *L, const fls_request *req, const fls_outputs *out,
                                 const fls_cuda_opts &opts, bool capturing)
{
    fls_cuda_state *s = ctx->cuda;
    const int64_t B = req->batch, V = req->vocab, draws = req->draws, K = req->K;
    const int want_lse = out->logsumexp != NULL || out->logprobs != NULL;
    cpu_rule_ctx rc;
    (void)cpu_rule_for(req, want_lse, &rc);
    fls_cpu_kernels ck;
    fls_cpu_select_kernels(ctx->simd, &ck);
    const int64_t top_cap = fls_rule_top_cap(req, &rc, want_lse, opts);
    /* a staircase capacity of the options forces the staircase path (tests:
     * overflows; any capacity gives the same tokens) */
    const int32_t stair_cap = opts.rule_stair_cap > 0 ? opts.rule_stair_cap : rc.stair_cap;
    /* rows per block: fused calls hold a block's logits (at most 512 MiB) */
    int64_t nb = B;
    if (!L) {
        nb = ((int64_t)512 << 20) / (4 * V);
        nb = nb < 1 ? 1 : (nb > B ? B : nb);
    }
    /* the threshold-first path (rules.cuh) unless a limit or a test forces the staircases */
    /* chunks of cf x FLS_FCK tokens: the fewest sub-chunks a chunk whose
     * (chunks x rows) blocks of the select pass fit in one wave of its
     * resident blocks, asked once per context and K (docs/PERF.md v22: the
     * rule before, at least 8 blocks a multiprocessor where the kernel's
     * registers allow 3 to 5, ran min-p at B = 16 in 1.8 waves; 8 where
     * the query fails or K takes the staircase path) */
    int64_t bpm = 8;
    if (K >= 1 && K <= FLS_FKMAX) {
        if (s->select_bpm[K] == 0)
            s->select_bpm[K] = fls_rule_select_blocks_per_sm(K);
        bpm = s->select_bpm[K] > 0 ? s->select_bpm[K] : 8;
    }
    int64_t cf = 1;
    while (cf < 16 && (V + cf * FLS_FCK - 1) / (cf * FLS_FCK) * nb > bpm * s->sm_count)
        cf *= 2;
    /* the options may force 1, 2, 4, 8 or 16 sub-chunks a chunk (the same tokens) */
    if (opts.rule_cf == 1 || opts.rule_cf == 2 || opts.rule_cf == 4 || opts.rule_cf == 8 ||
        opts.rule_cf == 16)
        cf = opts.rule_cf;
    const int64_t nchunk = (V + cf * FLS_FCK - 1) / (cf * FLS_FCK);
    /* group maxima: at least 4 per entry of the top list where the groups allow */
    int gsz = FLS_FCK;
    while (gsz > 64 && nchunk * cf * FLS_FCK / gsz < 4 * top_cap)
        gsz /= 2;
    const int64_t M = nchunk * cf * FLS_FCK / gsz;
    const int fast = opts.rule_stair_cap <= 0 && opts.rule_path == FLS_RULE_PATH_AUTO && K <= FLS_FKMAX &&
                     top_cap <= FLS_FTOP && V < ((int64_t)1 << 32) - 1 && M <= 4096 &&
                     (size_t)(nb * draws * nchunk * K) * sizeof(fls_stair_entry) <= ((size_t)256 << 20);
    const size_t topb = top_cap > 0 && !fast ? fls_topc_bytes(top_cap) : 0, sb = fls_stair_bytes(stair_cap);
    /* the parts of a row (threshold first: its chunks) and the draws of a pass */
    int64_t P = nchunk, S = 0, nd = draws;
    if (!fast) {
        /* about 8192 warps a block, at least 1024 tokens a part, multiples of 64 */
        const int64_t Pmax = (V + 1023) / 1024;
        P = (8192 + nb - 1) / nb;
        P = P > Pmax ? Pmax : P;
        P = P < 1 ? 1 : P;
        S = (V + P - 1) / P;
        S = (S + 63) / 64 * 64;
        P = (V + S - 1) / S;
        /* the state of a block, the lists at most 256 MiB: fewer parts otherwise */
        while (P > 1 && (size_t)(nb * P) * topb > ((size_t)256 << 20)) {
            S *= 2;
            P = (V + S - 1) / S;
        }
        nd = ((int64_t)256 << 20) / (int64_t)((size_t)(nb * P) * sb);
        /* a warp's states in shared memory: about 24 KB of staircases */
        const int64_t nd_smem =
            (int64_t)(((size_t)24 << 10) > topb + sb ? (((size_t)24 << 10) - topb) / sb : 1);
        nd = nd > nd_smem ? nd_smem : nd;
        nd = nd < 1 ? 1 : (nd > draws ? draws : nd);
    }

    /* rows in device arrays (params_on_device) or a capture: the queued
     * path only (no host step), in async mode; a capture replays the rule
     * values it saw, so they must be one value for every row */
    const int dev_rows = req->params_on_device;
    if (dev_rows || capturing) {
        if (!(fast && nb == B && B <= 4096 && (s->async || opts.no_sync || capturing)))
            return FLS_ERR_UNSUPPORTED;
        for (int64_t b = 1; b < B && capturing; b++)
            if (memcmp(&req->rule[b], &req->rule[0], sizeof(fls_row_rule)) != 0)
                return FLS_ERR_UNSUPPORTED;
    }
    /* the matmul: the wgmma kernel with its 64-token tables for one block of
     * rows on the threshold-first path (fls_rule_matmul_of), else cuBLAS */
    const int mm = L ? FLS_RULE_MATMUL_CUBLAS : fls_rule_matmul_of(opts, B, V, W, H);
    const int wg = fast && nb == B && mm != FLS_RULE_MATMUL_CUBLAS && !opts.force_simt &&
                   fls_wgmma_eligible(W, H) &&
                   fls_wgmma_m64(V) * 4 <= (96 << 10); /* the row kernel holds a row's table */
    const int64_t m64 = wg ? fls_wgmma_m64(V) : 0;
    fls_row_params *rows_d = NULL;
    fls_row_rule *rule_d = NULL;
    unsigned *tflag = NULL;
    float *g64 = NULL, *gab = NULL;
    double *gmo = NULL;
    /* the moments as tables of the matmul where a filter needs them */
    const int moments = (req->needs & FLS_NEED_MOMENTS) != 0;
    /* rows without filters (the support: every finite token) and no
     * log-sum-exp asked: the matmul keeps each CTA's K best keys per (row,
     * draw) and the select pass is not run (opts.rule_keys < 0, tests: run
     * anyway) */
    int wkeys = wg && mm == FLS_RULE_MATMUL_WGMMA && !want_lse && K <= FLS_WG_KMAX &&
                draws <= fls_wgmma_key_draws(B) && opts.rule_keys >= 0;
    for (int64_t b = 0; b < B && wkeys; b++)
        wkeys = !fls_filter_row_active(req->rule[b].value);
    const int64_t slots = wkeys ? fls_wgmma_logits_slots(B, V, s->sm_count) : 0;
    /* entries per (row, draw) of the chunks' (or the CTAs') picks */
    const int64_t nsel = slots > nchunk ? slots : nchunk;
    fls_rule_dev d;
    memset(&d, 0, sizeof d);
    float *buf = NULL;
    for (int pass = 0; pass < 2; pass++) {
        fls_carve c = {pass ? s->ws : NULL, 0};
        /* rows and rules adjacent: one upload */
        char *up = c.take<char>((size_t)B * (sizeof(fls_row_params) + sizeof(fls_row_rule)));
        rows_d = (fls_row_params *)up;
        rule_d = up ? (fls_row_rule *)(up + (size_t)B * sizeof(fls_row_params)) : NULL;
        d.part = c.take<fls_rpart>((size_t)(nb * P));
        d.top = topb ? c.take<char>((size_t)(nb * P) * topb) : NULL;
        d.stair = fast ? NULL : c.take<char>((size_t)(nb * P * nd) * sb);
        d.cut = c.take<float>((size_t)B);
        d.lse = c.take<double>((size_t)B);
        d.code = c.take<int>((size_t)B);
        if (!fast) { /* the staircases' picks */
            d.pick = c.take<int32_t>((size_t)(nb * nd * K));
            d.px = c.take<float>((size_t)(nb * nd * K));
            d.pv = c.take<int64_t>((size_t)(nb * nd * K));
        }
        d.tok = c.take<int64_t>((size_t)(B * draws * K));
        d.lp = c.take<float>((size_t)(B * draws * K));
        d.lsedev = c.take<int>((size_t)B);
        if (fast) {
            d.gmax = top_cap > 0 ? c.take<float>((size_t)(nb * M)) : NULL;
            d.thr = c.take<float>((size_t)nb);
            d.ccount = c.take<unsigned>((size_t)nb);
            d.cand = top_cap > 0 ? c.take<unsigned long long>((size_t)nb * FLS_FCCAP) : NULL;
            d.sel = c.take<fls_stair_entry>((size_t)(nb * draws * nsel * K));
            d.lsep = c.take<double>((size_t)(nb * nchunk));
            d.nsup = c.take<int>((size_t)nb);
        }
        buf = L ? NULL : c.take<float>((size_t)(nb * V));
        tflag = dev_rows ? c.take<unsigned>(1) : NULL;
        g64 = wg ? c.take<float>((size_t)(nb * m64)) : NULL;
        gab = wg ? c.take<float>((size_t)(nb * m64)) : NULL;
        gmo = wg && moments ? c.take<double>((size_t)(nb * m64) * 3) : NULL;
        if (pass == 0) {
            if (capturing && c.off > s->ws_bytes)
                return FLS_ERR_UNSUPPORTED; /* capture never allocates: one eager call first */
            fls_status st = fls_ensure_ws(s, c.off);
            if (st != FLS_OK)
                return st;
        }
    }
    cudaStream_t str = s->stream;
    fls_status st = FLS_OK;
    /* the rows' parameters and rules in one host buffer (upload_rows) */
    const size_t rb = (size_t)B * sizeof(fls_row_params), ub = (size_t)B * sizeof(fls_row_rule);
    char *hup = dev_rows ? NULL : (char *)malloc(rb + ub);
    if (!dev_rows && !hup)
        return FLS_ERR_OUT_OF_MEMORY;
    if (hup) {
        memcpy(hup, req->rows, rb);
        memcpy(hup + rb, req->rule, ub);
    }
    int uploaded = 0;
    d.V = V;
    d.Pw = (int)P;
    d.S = S;
    d.top_cap = top_cap;
    d.stair_cap = stair_cap;
    d.nd = (int)nd;
    d.nchunk = (int)nchunk;
    d.cf = (int)cf;
    d.gsz = gsz;
    d.M = (int)M;
    d.P = (int)P;
    if (!fast) {
        /* shared-memory mode when a warp's states fit: 8 warps a block, merged in the block */
        const size_t wb = fls_rule_warp_bytes(d, 1);
        int64_t rw = (int64_t)(FLS_RSMEM_MAX / wb);
        rw = rw > 8 ? 8 : rw;
        /* FLS_RULE_PATH_STAIR_GLOBAL (tests): the global-memory path of lists too large for shared memory */
        d.smem = rw >= 1 && opts.rule_path != FLS_RULE_PATH_STAIR_GLOBAL;
        d.rw = d.smem ? (int)rw : 4;
        d.P = d.smem ? (int)((P + rw - 1) / rw) : (int)P;
    }
    d.K = K;
    d.moments = moments;
    /* the row's sum of exp(x - m): for logsumexp / logprobs, and for the
     * filters that read it (fls_filter_row_needs_sum). On the
     * threshold-first path a filter that needs its support's sum after an
     * earlier cut reads it from the list, except in a row with fewer finite
     * tokens than its list: the list then holds every finite token, and the
     * list kernel sums them there. */
    d.need_s = want_lse;
    for (int64_t b = 0; b < B && !d.need_s; b++)
        d.need_s = fls_filter_row_needs_sum(req->rule[b].value, fast);
    /* the matmul's tables: the passes read only the groups that reach their
     * threshold, and (gfold) they replace the statistics pass where no sum
     * is needed (maxima, and the moments in gmo: the matmul then reads the
     * rows' temperatures, uploaded before it) */
    if (wg) {
        d.g64 = g64;
        d.gab = gab;
        d.m64 = m64;
        d.gfold = mm == FLS_RULE_MATMUL_WGMMA && !d.need_s;
        d.gmo = d.gfold && moments ? gmo : NULL;
    }
    d.wkeys = wkeys;
    d.nsel = wkeys ? (int)slots : (int)nchunk;
    s->rule_key_calls += wkeys != 0;
    /* the kernels after the row kernel start as programmatic dependents
     * (each one's launch overlaps the end of the one before it; every such
     * kernel waits for it before reading anything): measured faster on the
     * select and list chains, slower where the final kernel follows the row
     * kernel directly (the matmul's keys), so not there. opts.rule_pdl
     * -1 / 1: never / always (A/B, tests) */
    d.pdl = opts.rule_pdl < 0 ? 0 : opts.rule_pdl > 0 ? 1 : !wkeys;
    s->rule_pdl_calls += d.pdl != 0;
    if (!L)
        s->rule_matmul_calls[!wg ? 0 : d.gfold ? 1 : 2]++;
    /* every row bounded by a list that a filter's value sizes (so its
     * support lies within its top list) and no log-sum-exp asked: the list
     * kernel draws the rows and the select and final kernels are not
     * launched (opts.rule_list_draw < 0, tests: launched anyway) */
    d.ldraw = fast && !want_lse && opts.rule_list_draw >= 0;
    for (int64_t b = 0; b < B && d.ldraw; b++) {
        const double k = fls_filter_row_bound(req->rule[b].value);
        d.ldraw = k >= 0.0 && k <= (double)top_cap;
    }
    s->rule_list_draw_calls += d.ldraw != 0;
    d.gup = opts.no_skip ? NULL : s->gbound;
    d.want_lse = want_lse;
    d.first_draw = req->first_draw;
    d.draws = draws;
    d.rows = rows_d;
    d.rule = rule_d;

    /* one block of rows on the threshold-first path: the outputs are
     * committed on the device when every row is decided, so the call
     * synchronises once (fls_rule_launch_commit) */
    const int commit = fast && nb == B && B <= 4096;
    /* such a call in async mode returns once queued: the commit kernel
     * records its error (or a row only the host can decide) in the sticky
     * word that fls_context_sync reads; other rule calls stay synchronous */
    const int queue_only = commit && (s->async || opts.no_sync || capturing);
    int committed = 0;
    int *code = (int *)malloc((size_t)B * sizeof(int));
    /* host rows for the rows the host decides, allocated at the first */
    float *x = NULL;
    int64_t *htok = NULL;
    float *hlp = NULL;
    if (!code)
        st = FLS_ERR_OUT_OF_MEMORY;
    uint64_t redone = 0;
    /* the rows' parameters and rules to the device, once: after the first
     * block's matmul is queued (its staging then overlaps the matmul), or
     * before it where the matmul reads the temperatures (gmo) */
    auto upload_rows = [&]() -> fls_status {
        fls_status su;
        if (dev_rows) {
            /* the rows packed from the device arrays (a temperature out
             * of range raises tflag: the commit writes nothing); the
             * rule values from the host, or in a capture from the
             * kernel's argument */
            fls_ws pws;
            memset(&pws, 0, sizeof pws);
            pws.tempflag = tflag;
            pws.epoch = 1;
            cudaError_t ce = cudaMemsetAsync(tflag, 0, sizeof(unsigned), str);
            if (ce == cudaSuccess)
                ce = fls_launch_pack_rows((int)B, req->dev_temperature, req->temperature_value,
                                          req->dev_row_seeds, req->seed, req->dev_row_offsets, req->offset,
                                          rows_d, pws, str);
            if (ce == cudaSuccess && capturing)
                ce = fls_rule_launch_fill(rule_d, (int)B, req->rule[0], str);
            su = fls_from_cuda(ce);
            if (su == FLS_OK && !capturing)
                su = fls_rule_up(str, rule_d, req->rule, ub);
        } else {
            su = fls_rule_up(str, rows_d, hup, rb + ub);
        }
        uploaded = 1;
        return su;
    };
    for (int64_t r0 = 0; r0 < B && st == FLS_OK; r0 += nb) {
        const int64_t nbc = B - r0 < nb ? B - r0 : nb;
        d.nb = (int)nbc;
        d.r0 = (int)r0;
        if (L) {
            d.L = (const float *)L->data + (size_t)r0 * L->ld;
            d.ldl = L->ld;
        } else {
            fls_matrix Hb = *H;
            Hb.data = (const char *)H->data + (size_t)r0 * H->ld * fls_dtype_bytes(H->dtype);
            Hb.rows = nbc;
            if (wg) {
                fls_wg_rule_extra ex;
                memset(&ex, 0, sizeof ex);
                ex.gmo = d.gmo ? gmo : NULL;
                ex.rows = rows_d;
                ex.rule = rule_d;
                ex.keys = wkeys ? (int)K : 0;
                ex.draws = (int)draws;
                ex.first_draw = req->first_draw;
                ex.gup = d.gup;
                ex.sel = d.sel;
                ex.kst = K;
                ex.warps = opts.logits_warps;
                if ((ex.gmo || ex.keys) && !uploaded) /* the matmul reads the rows */
                    st = upload_rows();
                if (st == FLS_OK)
                    st = fls_from_cuda(fls_launch_wgmma_logits(W->data, W->ld, Hb.data, Hb.ld, W->dtype,
                                                               (int)nbc, V, W->cols, buf, V, g64, gab, &ex,
                                                               s->sm_count, str));
            } else {
                st = fls_gemm_logits(s, W, &Hb, 0, V, buf, V, opts.force_simt);
            }
            d.L = buf;
            d.ldl = V;
        }
        d.vec = (uintptr_t)d.L % 16 == 0 && d.ldl % 4 == 0;
        if (!uploaded && st == FLS_OK)
            st = upload_rows();
        if (fast) {
            /* decide, select, one download of the codes; rows the host
             * decides are selected again (the others give the same picks) */
            if (st == FLS_OK)
                st = fls_from_cuda(fls_rule_launch_fast_decide(d, str));
            for (int round = 0; st == FLS_OK; round++) {
                /* with ldraw the list kernel drew every row it decided; the
                 * rows the host decided are selected in round 1 */
                if (round == 1)
                    d.pdl = 0; /* after the host's copies: plain launches */
                if (round == 1 && d.wkeys) {
                    /* the rows the host decided: the select pass's picks */
                    d.wkeys = 0;
                    d.nsel = d.nchunk;
                }
                if (!(d.ldraw && round == 0))
                    st = fls_from_cuda(fls_rule_launch_fast_select(d, str));
                if (st == FLS_OK && commit)
                    st = fls_from_cuda(fls_rule_launch_commit(
                        d.code, (int)B, d.tok, d.lp, d.lse, B * draws * K, out->tokens, out->logprobs,
                        out->logsumexp, queue_only ? s->sticky : NULL, tflag, d.pdl, str));
                if (st != FLS_OK || queue_only)
                    break;
                st = fls_rule_down(str, code + r0, d.code + r0, (size_t)nbc * sizeof(int));
                int again = 0;
                for (int64_t i = 0; i < nbc && st == FLS_OK && round == 0; i++)
                    if (code[r0 + i] == FLS_RC_SECOND) {
                        st = fls_rule_second_row(str, d, &rc, i, &x, code);
                        redone++;
                        again = 1;
                    }
                if (!again)
                    break;
            }
            /* committed on the device: queued, or every row decided */
            committed = commit && st == FLS_OK;
            for (int64_t b = 0; b < B && committed && !queue_only; b++)
                committed = code[b] == FLS_RC_OK;
            continue;
        }
        for (int64_t db = 0; db < draws && st == FLS_OK; db += nd) {
            d.nd = (int)(draws - db < nd ? draws - db : nd);
            d.draw0 = (uint32_t)db;
            st = fls_from_cuda(fls_rule_launch_fold(d, db == 0, str));
            if (st == FLS_OK && db == 0) {
                /* the rows the statistics left undecided: their full row, on the host */
                st = fls_rule_down(str, code + r0, d.code + r0, (size_t)nbc * sizeof(int));
                for (int64_t i = 0; i < nbc && st == FLS_OK; i++)
                    if (code[r0 + i] == FLS_RC_SECOND) {
                        st = fls_rule_second_row(str, d, &rc, i, &x, code);
                        redone++;
                    }
            }
            if (st == FLS_OK)
                st = fls_from_cuda(fls_rule_launch_select(d, str));
        }
        /* rows whose staircase overflowed: the CPU engine's exact reference */
        if (st == FLS_OK)
            st = fls_rule_down(str, code + r0, d.code + r0, (size_t)nbc * sizeof(int));
        for (int64_t i = 0; i < nbc && st == FLS_OK; i++) {
            const int64_t b = r0 + i;
            if (code[b] != FLS_RC_OVERFLOW)
                continue;
            code[b] = FLS_RC_OK;
            if (!x)
                x = (float *)malloc((size_t)V * sizeof(float));
            if (!htok)
                htok = (int64_t *)malloc((size_t)(draws * K) * sizeof(int64_t));
            if (!hlp)
                hlp = (float *)malloc((size_t)(draws * K) * sizeof(float));
            if (!x || !htok || !hlp) {
                st = FLS_ERR_OUT_OF_MEMORY;
                break;
            }
            cpu_part part;
            st = fls_rule_row_inputs(str, d, i, req->rows[b].temperature, x, &part);
            if (st != FLS_OK)
                break;
            double l;
            const int r = cpu_rule_reference_row(&rc, b, x, &part, ck.gumbel, htok, hlp, &l);
            if (r != FLS_OK) {
                st = (fls_status)r;
                break;
            }
            st = fls_rule_up(str, d.tok + (size_t)(b * draws * K), htok,
                             (size_t)(draws * K) * sizeof(int64_t));
            if (st == FLS_OK)
                st = fls_rule_up(str, d.lp + (size_t)(b * draws * K), hlp,
                                 (size_t)(draws * K) * sizeof(float));
            if (st == FLS_OK)
                st = fls_rule_up(str, d.lse + b, &l, sizeof l);
            redone++;
        }
    }
    /* the CPU engine's order: a NaN, then an overflow of l / T, then an empty row */
    if (st == FLS_OK && !queue_only) {
        const int order[3] = {FLS_RC_NAN, FLS_RC_TEMP, FLS_RC_ALL_MASKED};
        const fls_status as[3] = {FLS_ERR_NAN, FLS_ERR_TEMPERATURE, FLS_ERR_ALL_MASKED};
        for (int k = 0; k < 3 && st == FLS_OK; k++)
            for (int64_t b = 0; b < B; b++)
                if (code[b] == order[k]) {
                    st = as[k];
                    break;
                }
    }
    if (st == FLS_OK && !committed) {
        cudaError_t ce = cudaMemcpyAsync(out->tokens, d.tok, (size_t)(B * draws * K) * sizeof(int64_t),
                                         cudaMemcpyDeviceToDevice, str);
        if (ce == cudaSuccess && out->logprobs)
            ce = cudaMemcpyAsync(out->logprobs, d.lp, (size_t)(B * draws * K) * sizeof(float),
                                 cudaMemcpyDeviceToDevice, str);
        if (ce == cudaSuccess && out->logsumexp)
            ce = fls_rule_launch_to_float(d.lse, out->logsumexp, B, str);
        if (ce == cudaSuccess)
            ce = cudaStreamSynchronize(str);
        if (ce != cudaSuccess)
            st = fls_from_cuda(ce);
    }
    if (req->second_pass_rows)
        *req->second_pass_rows += redone;
    free(hup);
    free(code);
    free(x);
    free(htok);
    free(hlp);
    return st;
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
    int64_t ldbuf = 0;
    for (int pass = 0; pass < 2; pass++) {
        fls_carve c = {pass ? s->ws : NULL, 0};
        rows_d = c.take<fls_row_params>((size_t)B);
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
        ce = cudaMemsetAsync(s->flags, 0, (size_t)(4 + B) * sizeof(unsigned), str);
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
    ws.sticky = s->sticky;
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
    } else if (kind == K_UNFUSED_GUMBEL || kind == K_MULTINOMIAL) {
        st = fls_gemm_logits(s, W, H, 0, V, buf, ldbuf, opts.force_simt);
        if (st != FLS_OK)
            return st;
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
                                        opts.wg_epi_warps, !opts.gemm_only, rows_d, ws, s->sm_count, str);
        } else if (kind == K_CHUNKED) {
            ce = cudaSuccess;
            for (int64_t c0 = 0; c0 < V && ce == cudaSuccess; c0 += chunk_v) {
                int64_t vn = V - c0 < chunk_v ? V - c0 : chunk_v;
                st = fls_gemm_logits(s, W, H, c0, vn, buf, ldbuf, opts.force_simt);
                if (st != FLS_OK)
                    return st;
                if (opts.gemm_only)
                    continue;
                ce = fls_launch_segments(buf, ldbuf, (int)B, vn, (uint64_t)c0, (int)(c0 / seg), rows_d, ws,
                                         s->sm_count, opts.seg_cap5, str);
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
                                             : FLS_OK;
}

/*
 * One chunk of a stream (lib/stream.c) on the device: the segment sampler of
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
