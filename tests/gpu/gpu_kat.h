/*
 * gpu_kat.h — the GPU suite's known-answer helpers (tests/gpu/gpu_kat.cu).
 * Host arrays in, host arrays out.
 */
#ifndef FLS_GPU_KAT_H
#define FLS_GPU_KAT_H

#include "flashsample.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Philox blocks through cuRAND's device API: out[4 i + j] = word j of
 * curand_Philox4x32_10(c_i, k_i). c: 4 n words, k: 2 n words. */
fls_status fls_cuda_philox_blocks(const uint32_t *c, const uint32_t *k, int64_t n, uint32_t *out);
/* fls_gumbel on the device for n (seed, offset, draw, token) tuples. */
fls_status fls_cuda_gumbel(const uint64_t *seed, const uint64_t *offset, const uint32_t *draw,
                           const uint64_t *token, int64_t n, float *out);
/* fls_gumbel_from_bits on the device (the kernels' version) for n 64-bit words. */
fls_status fls_cuda_gumbel_bits(const uint64_t *bits, int64_t n, float *out);

/* Streams and CUDA graphs for the async test (0 on success). */
int fls_kat_stream_create(void **st);
void fls_kat_stream_destroy(void *st);
int fls_kat_stream_sync(void *st);
int fls_kat_capture_begin(void *st);
int fls_kat_capture_end(void *st, void **exec);
int fls_kat_graph_launch(void *exec, void *st);
void fls_kat_graph_destroy(void *exec);

#ifdef __cplusplus
}
#endif

#endif /* FLS_GPU_KAT_H */
