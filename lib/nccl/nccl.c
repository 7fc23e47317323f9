/*
 * nccl.c — the tensor-parallel exchange of streaming states over NCCL
 * (flashsample_nccl.h): two all-gathers (the sizes, then the padded
 * states), a deserialize and a merge in rank order.
 */
#include "flashsample_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

static fls_status from_cuda(cudaError_t e)
{
    if (e == cudaSuccess)
        return FLS_OK;
    (void)cudaGetLastError();
    return e == cudaErrorMemoryAllocation ? FLS_ERR_OUT_OF_MEMORY : FLS_ERR_CUDA;
}

fls_status fls_stream_allgather_nccl(const fls_stream_t *state, fls_context_t *ctx, void *comm_,
                                     void *cuda_stream, fls_stream_t **merged_out, size_t *bytes_sent)
{
    if (!state || !ctx || !comm_ || !merged_out)
        return FLS_ERR_NULL;
    ncclComm_t comm = (ncclComm_t)comm_;
    cudaStream_t st = (cudaStream_t)cuda_stream;
    int nranks = 0, rank = 0;
    if (ncclCommCount(comm, &nranks) != ncclSuccess || ncclCommUserRank(comm, &rank) != ncclSuccess ||
        nranks < 1)
        return FLS_ERR_CUDA;
    size_t n = 0;
    fls_status s = fls_stream_serialize(state, NULL, &n);
    if (s != FLS_OK)
        return s;
    unsigned char *host = NULL, *all = NULL;
    int64_t *dsz = NULL, *sizes = NULL;
    unsigned char *dbuf = NULL;
    fls_stream_t *merged = NULL;
    sizes = malloc((size_t)nranks * sizeof *sizes);
    if (!sizes)
        return FLS_ERR_OUT_OF_MEMORY;
    /* 1: every rank's size */
    s = from_cuda(cudaMalloc((void **)&dsz, (size_t)(nranks + 1) * sizeof(int64_t)));
    const int64_t mine = (int64_t)n;
    if (s == FLS_OK)
        s = from_cuda(cudaMemcpyAsync(dsz + nranks, &mine, sizeof mine, cudaMemcpyHostToDevice, st));
    if (s == FLS_OK && ncclAllGather(dsz + nranks, dsz, sizeof(int64_t), ncclChar, comm, st) != ncclSuccess)
        s = FLS_ERR_CUDA;
    if (s == FLS_OK)
        s = from_cuda(
            cudaMemcpyAsync(sizes, dsz, (size_t)nranks * sizeof(int64_t), cudaMemcpyDeviceToHost, st));
    if (s == FLS_OK)
        s = from_cuda(cudaStreamSynchronize(st));
    int64_t M = 0;
    for (int r = 0; s == FLS_OK && r < nranks; r++)
        M = sizes[r] > M ? sizes[r] : M;
    /* 2: the states, padded to the largest */
    if (s == FLS_OK) {
        host = calloc((size_t)M, 1);
        all = malloc((size_t)M * (size_t)nranks);
        if (!host || !all)
            s = FLS_ERR_OUT_OF_MEMORY;
    }
    if (s == FLS_OK)
        s = fls_stream_serialize(state, host, &n);
    if (s == FLS_OK)
        s = from_cuda(cudaMalloc((void **)&dbuf, (size_t)M * (size_t)(nranks + 1)));
    if (s == FLS_OK)
        s = from_cuda(
            cudaMemcpyAsync(dbuf + (size_t)M * (size_t)nranks, host, (size_t)M, cudaMemcpyHostToDevice, st));
    if (s == FLS_OK &&
        ncclAllGather(dbuf + (size_t)M * (size_t)nranks, dbuf, (size_t)M, ncclChar, comm, st) != ncclSuccess)
        s = FLS_ERR_CUDA;
    if (s == FLS_OK)
        s = from_cuda(cudaMemcpyAsync(all, dbuf, (size_t)M * (size_t)nranks, cudaMemcpyDeviceToHost, st));
    if (s == FLS_OK)
        s = from_cuda(cudaStreamSynchronize(st));
    /* 3: every rank merges the same states in the same order */
    for (int r = 0; s == FLS_OK && r < nranks; r++) {
        fls_stream_t *x = NULL;
        s = fls_stream_deserialize(&x, ctx, all + (size_t)M * (size_t)r, (size_t)sizes[r]);
        if (s != FLS_OK)
            break;
        if (!merged) {
            merged = x;
        } else {
            s = fls_stream_merge(merged, x);
            fls_stream_destroy(x);
        }
    }
    if (s == FLS_OK) {
        *merged_out = merged; /* every rank's tokens, merged in rank order */
        merged = NULL;
        if (bytes_sent)
            *bytes_sent = (size_t)M;
    }
    fls_stream_destroy(merged);
    cudaFree(dsz);
    cudaFree(dbuf);
    free(host);
    free(all);
    free(sizes);
    return s;
}
