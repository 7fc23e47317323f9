/*
 * fls_cuda.h — internal interface of the CUDA engine for the GPU tests and
 * the benchmark (C-callable; not installed). The public entry points are the
 * ones of lib/internal.h; this adds path control and an enqueue-only call so
 * the benchmark can time kernels with events and no host synchronisation.
 */
#ifndef FLS_CUDA_H
#define FLS_CUDA_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the tokens of FLS_METHOD_FUSED are computed. Every path gives the same
 * tokens whenever the logits are the same floats (noise contract). */
typedef enum fls_cuda_path {
    FLS_CUDA_PATH_AUTO = 0,    /* dispatcher's choice per (B, V, D, dtype) */
    FLS_CUDA_PATH_MMA = 1,     /* one persistent tensor-core kernel, logits stay on chip */
    FLS_CUDA_PATH_CHUNKED = 2, /* cuBLAS (or SIMT) GEMM per vocabulary chunk into an
                                  L2-resident buffer + sampling kernel per chunk */
    FLS_CUDA_PATH_STREAM = 3,  /* small B: one streaming pass over W on tensor cores, H in
                                  shared memory, in-kernel finalize (fused_stream.cu); other
                                  shapes fall back to CHUNKED */
    FLS_CUDA_PATH_WGMMA = 4,   /* one persistent warp-specialised kernel (fused_wgmma.cu):
                                  TMA loads, wgmma products, the sampler in separate warps;
                                  logits stay on chip */
} fls_cuda_path;

typedef struct fls_cuda_opts {
    fls_cuda_path path;        /* FUSED method only */
    int tile_b;                /* MMA path: batch rows per tile (8, 16, 32, 64); WGMMA path:
                                  16, 32, 64, 128; 0 = auto */
    int64_t chunk_v;           /* CHUNKED path: vocabulary rows per chunk (multiple of 1024); 0 = auto */
    int force_simt;            /* CHUNKED / unfused: use the SIMT GEMM instead of cuBLAS */
    int rows_cached;           /* the rows of the previous call are still on the device (benchmark) */
    int no_sync;               /* enqueue only: no status check, return FLS_OK (benchmark) */
    int no_skip;               /* compute every token's key (no bound-based skipping; tests,
                                  benchmark); also FLS_CUDA_NO_SKIP=1 in the environment */
    int gemm_only;             /* CHUNKED / WGMMA path, benchmark only: the GEMMs without the
                                  sampler (outputs are garbage; use with no_sync) */
    int wg_epi_warps;          /* WGMMA path: sampling warps per CTA (0: default: 7 at tile_b
                                  16, 11 at 32 and 128, 15 at 64; 7 or 11 at 32 and 128, 11
                                  or 15 at 64) */
    int stream_no_l2_prefetch; /* STREAM path, benchmark: W loads without the 256-byte L2
                                  prefetch hint (same tokens) */
    int seg_cap5;              /* CHUNKED / from-logits, benchmark: the segment sampler compiled
                                  for 5 blocks per SM (register cap 48; same tokens) */
} fls_cuda_opts;

void fls_cuda_opts_default(fls_cuda_opts *o);

/* fls_cuda_sample_fused / _logits with explicit options. L != NULL selects
 * from-logits sampling (W, H ignored). */
fls_status fls_cuda_run(fls_context_t *ctx, const fls_matrix *W, const fls_matrix *H, const fls_matrix *L,
                        const fls_request *req, const fls_outputs *out, const fls_cuda_opts *opts);

/* 1 when the stream kernel takes B rows of width D (16-bit W and H of one
 * dtype, 16-byte aligned rows are checked per call). */
int fls_cuda_stream_supported(int64_t B, int64_t D);

/* Batch rows per tile the WGMMA path takes by default for B rows (16, 32, 64, 128). */
int fls_cuda_wgmma_tile_n(int64_t B);

/* The path FLS_CUDA_PATH_AUTO picks for this shape (for logs and tests;
 * with draws > 1 a STREAM pick runs CHUNKED). */
fls_cuda_path fls_cuda_auto_path(int64_t B, int64_t V, int64_t D, fls_dtype wd, fls_dtype hd);

/* Philox blocks through cuRAND's device API, for the known-answer test:
 * out[4 i + j] = word j of curand_Philox4x32_10(c_i, k_i). c: 4 n words, k: 2 n words (host). */
fls_status fls_cuda_philox_blocks(const uint32_t *c, const uint32_t *k, int64_t n, uint32_t *out);
/* fls_gumbel on the device for n (seed, offset, draw, token) tuples (host arrays). */
fls_status fls_cuda_gumbel(const uint64_t *seed, const uint64_t *offset, const uint32_t *draw,
                           const uint64_t *token, int64_t n, float *out);

/* fls_gumbel_from_bits on the device (the kernels' version) for n 64-bit words (host arrays). */
fls_status fls_cuda_gumbel_bits(const uint64_t *bits, int64_t n, float *out);

/* Device name and SM count of the context's device (benchmark CSVs). */
fls_status fls_cuda_device_info(const fls_context_t *ctx, char *name, size_t name_len, int *sm_count);

#ifdef __cplusplus
}
#endif

#endif /* FLS_CUDA_H */
