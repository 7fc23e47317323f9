/*
 * gpu_kat.cu — known-answer kernels of the GPU suite (test build only, not
 * in the library): cuRAND's device Philox and the kernels' own Gumbel
 * transform (common.cuh's fls_gumbel_dev) on given inputs, so the suite can
 * compare them bit for bit with the host's noise contract (lib/base/fls_noise.h).
 */
#include "kernels/common.cuh"
#include "tests/gpu/gpu_kat.h"

static fls_status fls_from_cuda(cudaError_t e)
{
    if (e == cudaSuccess)
        return FLS_OK;
    (void)cudaGetLastError();
    return e == cudaErrorMemoryAllocation ? FLS_ERR_OUT_OF_MEMORY : FLS_ERR_CUDA;
}

__global__ void fls_philox_kat_kernel(const uint32_t *c, const uint32_t *k, int64_t n, uint32_t *out)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    uint4 r = curand_Philox4x32_10(make_uint4(c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3]),
                                   make_uint2(k[2 * i], k[2 * i + 1]));
    out[4 * i] = r.x;
    out[4 * i + 1] = r.y;
    out[4 * i + 2] = r.z;
    out[4 * i + 3] = r.w;
}

__global__ void fls_gumbel_kat_kernel(const uint64_t *seed, const uint64_t *off, const uint32_t *draw,
                                      const uint64_t *tok, int64_t n, float *out)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    uint4 r = fls_philox_pair(seed[i], off[i], draw[i], tok[i]);
    uint64_t bits = (tok[i] & 1) ? ((uint64_t)r.w << 32) | r.z : ((uint64_t)r.y << 32) | r.x;
    out[i] = fls_gumbel_dev(bits); /* the kernels' version, checked against the host's */
}

extern "C" fls_status fls_cuda_philox_blocks(const uint32_t *c, const uint32_t *k, int64_t n, uint32_t *out)
{
    if (n <= 0)
        return FLS_ERR_SIZE;
    uint32_t *d = NULL;
    size_t bc = (size_t)n * 16, bk = (size_t)n * 8;
    cudaError_t e = cudaMalloc((void **)&d, bc * 2 + bk);
    if (e != cudaSuccess)
        return fls_from_cuda(e);
    uint32_t *dc = d, *dk = d + 4 * n, *dout = d + 6 * n;
    e = cudaMemcpy(dc, c, bc, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(dk, k, bk, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        fls_philox_kat_kernel<<<(unsigned)((n + 255) / 256), 256>>>(dc, dk, n, dout);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaMemcpy(out, dout, bc, cudaMemcpyDeviceToHost);
    cudaFree(d);
    return fls_from_cuda(e);
}

extern "C" fls_status fls_cuda_gumbel(const uint64_t *seed, const uint64_t *offset, const uint32_t *draw,
                                      const uint64_t *token, int64_t n, float *out)
{
    if (n <= 0)
        return FLS_ERR_SIZE;
    char *d = NULL;
    size_t b8 = (size_t)n * 8, b4 = (size_t)n * 4;
    cudaError_t e = cudaMalloc((void **)&d, 3 * b8 + 2 * b4);
    if (e != cudaSuccess)
        return fls_from_cuda(e);
    uint64_t *ds = (uint64_t *)d, *doff = (uint64_t *)(d + b8), *dt = (uint64_t *)(d + 2 * b8);
    uint32_t *dd = (uint32_t *)(d + 3 * b8);
    float *dout = (float *)(d + 3 * b8 + b4);
    e = cudaMemcpy(ds, seed, b8, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(doff, offset, b8, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(dt, token, b8, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(dd, draw, b4, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        fls_gumbel_kat_kernel<<<(unsigned)((n + 255) / 256), 256>>>(ds, doff, dd, dt, n, dout);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaMemcpy(out, dout, b4, cudaMemcpyDeviceToHost);
    cudaFree(d);
    return fls_from_cuda(e);
}

__global__ void fls_gumbel_bits_kernel(const uint64_t *bits, int64_t n, float *out)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = fls_gumbel_dev(bits[i]);
}

extern "C" fls_status fls_cuda_gumbel_bits(const uint64_t *bits, int64_t n, float *out)
{
    if (n <= 0)
        return FLS_ERR_SIZE;
    char *d = NULL;
    cudaError_t e = cudaMalloc((void **)&d, (size_t)n * 12);
    if (e != cudaSuccess)
        return fls_from_cuda(e);
    e = cudaMemcpy(d, bits, (size_t)n * 8, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        fls_gumbel_bits_kernel<<<(unsigned)((n + 255) / 256), 256>>>((const uint64_t *)d, n,
                                                                     (float *)(d + n * 8));
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaMemcpy(out, d + n * 8, (size_t)n * 4, cudaMemcpyDeviceToHost);
    cudaFree(d);
    return fls_from_cuda(e);
}

/* ---- streams and graphs for the async / graph-capture test (C callers) ---- */

extern "C" int fls_kat_stream_create(void **st)
{
    return cudaStreamCreateWithFlags((cudaStream_t *)st, cudaStreamNonBlocking) == cudaSuccess ? 0 : -1;
}

extern "C" void fls_kat_stream_destroy(void *st)
{
    cudaStreamDestroy((cudaStream_t)st);
}

extern "C" int fls_kat_stream_sync(void *st)
{
    return cudaStreamSynchronize((cudaStream_t)st) == cudaSuccess ? 0 : -1;
}

extern "C" int fls_kat_capture_begin(void *st)
{
    return cudaStreamBeginCapture((cudaStream_t)st, cudaStreamCaptureModeThreadLocal) == cudaSuccess ? 0 : -1;
}

/* Ends the capture and instantiates the graph (*exec); 0 on success. */
extern "C" int fls_kat_capture_end(void *st, void **exec)
{
    cudaGraph_t g;
    if (cudaStreamEndCapture((cudaStream_t)st, &g) != cudaSuccess)
        return -1;
    cudaGraphExec_t e;
    const cudaError_t r = cudaGraphInstantiate(&e, g, 0);
    cudaGraphDestroy(g);
    if (r != cudaSuccess)
        return -1;
    *exec = (void *)e;
    return 0;
}

extern "C" int fls_kat_graph_launch(void *exec, void *st)
{
    return cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)st) == cudaSuccess ? 0 : -1;
}

extern "C" void fls_kat_graph_destroy(void *exec)
{
    cudaGraphExecDestroy((cudaGraphExec_t)exec);
}
