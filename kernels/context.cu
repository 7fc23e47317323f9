/*
 * context.cu — the CUDA engine's context, cuBLAS, workspace and device
 * memory helpers (engine.cuh).
 *
 * Loading: the CUDA runtime is linked statically (it opens the driver only
 * at the first CUDA call) and cuBLAS is opened with dlopen when a CUDA
 * context is created (fls_cublas), so a program that never creates a CUDA
 * context loads neither, and an installed library needs no CUDA path.
 * FLS_CUBLAS_PATH (a documented user setting, docs/GPU.md) names the
 * library file explicitly.
 */
#include "kernels/engine.cuh"
#include "lib/base/fls_gumbel_bound.h"

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

fls_status fls_from_cuda(cudaError_t e)
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

fls_status fls_from_blas(cublasStatus_t s)
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

fls_status fls_ensure_ws(fls_cuda_state *s, size_t bytes)
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

fls_status fls_ensure_flags(fls_cuda_state *s, int64_t B)
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
     * [4, 4 + cap) finite marks, [4 + cap, 4 + 2 cap) shallow marks */
    e = cudaMalloc((void **)&s->flags, (size_t)(2 * cap + 4) * sizeof(unsigned));
    if (e == cudaSuccess)
        e = cudaMemset(s->flags, 0, (size_t)(2 * cap + 4) * sizeof(unsigned));
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
size_t fls_gthr_bytes(int64_t rows)
{
    return (size_t)rows * FLS_GTHR_DRAWS * sizeof(unsigned long long);
}

fls_status fls_ensure_gthr(fls_cuda_state *s, int64_t B, unsigned long long **out)
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
fls_status fls_gemm_logits(fls_cuda_state *s, const fls_matrix *W, const fls_matrix *H, int64_t v0,
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
