/*
 * fls_cuda.h — internal interface of the CUDA engine for the GPU tests and
 * the benchmark (C-callable; not installed). The public entry points are the
 * ones of lib/front/internal.h; this adds path control and an enqueue-only call so
 * the benchmark can time kernels with events and no host synchronisation.
 */
#ifndef FLS_CUDA_H
#define FLS_CUDA_H

#include "lib/front/internal.h"

#ifdef __cplusplus
#include <cublas_v2.h>
extern "C" {
#endif

/* How the tokens of FLS_METHOD_FUSED are computed. Every path gives the same
 * tokens whenever the logits are the same floats (noise contract). */
typedef enum fls_cuda_path {
    FLS_CUDA_PATH_AUTO = 0,    /* dispatcher's choice per (B, V, D, dtype) */
    FLS_CUDA_PATH_CHUNKED = 2, /* cuBLAS (or SIMT) GEMM per vocabulary chunk into an
                                  L2-resident buffer + sampling kernel per chunk */
    FLS_CUDA_PATH_WGMMA = 4,   /* one persistent warp-specialised kernel (fused_wgmma.cu):
                                  TMA loads, wgmma products, the sampler in separate warps;
                                  logits stay on chip */
} fls_cuda_path;

typedef struct fls_cuda_opts {
    fls_cuda_path path; /* FUSED method only */
    int tile_b;         /* WGMMA path: batch rows per tile (16, 32, 64, 128); 0 = auto */
    int64_t chunk_v;    /* CHUNKED path: vocabulary rows per chunk (multiple of 1024); 0 = auto */
    int force_simt;     /* CHUNKED / unfused: use the SIMT GEMM instead of cuBLAS */
    int rows_cached;    /* the rows of the previous call are still on the device (benchmark) */
    int no_sync;        /* enqueue only: no status check, return FLS_OK (benchmark) */
    int no_skip;        /* compute every token's key (no bound-based skipping; tests,
                           benchmark) */
    int gemm_only;      /* CHUNKED / WGMMA path, benchmark only: the GEMMs without the
                           sampler (outputs are garbage; use with no_sync) */
    int wg_epi_warps;   /* WGMMA path: sampling warps per CTA (0: default: 7 at tile_b
                           16, 11 at 32 and 128, 15 at 64; 7 or 11 at 32 and 128, 11
                           or 15 at 64) */
    int seg_cap5;       /* CHUNKED / from-logits, benchmark: the segment sampler compiled
                           for 5 blocks per SM (register cap 48; same tokens) */
    int rule_matmul;    /* fused rule calls: the matmul before the rule passes (fls_rule_matmul) */
    /* The rule family's experiments and test forcings: 0 is the production
     * choice for each; every value gives the same tokens. */
    int64_t rule_top_cap; /* the top list's capacity where a row's list is open (0: 256) */
    int rule_stair_cap;   /* > 0: the staircases' capacity, and the staircase path (overflows) */
    int rule_cf;          /* sub-chunks a chunk on the threshold-first path: 1, 2, 4, 8, 16 (0: the
                             fewest whose select pass fits in one wave) */
    int rule_path;        /* fls_rule_path */
    int rule_keys;        /* < 0: the matmul never keeps the keys (the select pass runs) */
    int rule_pdl;         /* < 0: plain launches; > 0: programmatic dependents everywhere */
    int rule_list_draw;   /* < 0: the list kernel never draws (the select and final kernels run) */
    int logits_warps;     /* the rule matmul's epilogue warps at tile 64: 11 or 15 (0: 15 where it
                             keeps the keys, else 11) */
} fls_cuda_opts;

/* Which rule path a call takes (fls_cuda_opts.rule_path). AUTO: the
 * threshold-first path where its limits allow (K <= FLS_FKMAX, a top list
 * of at most FLS_FTOP, ...), else the staircases. */
typedef enum fls_rule_path {
    FLS_RULE_PATH_AUTO = 0,
    FLS_RULE_PATH_STAIR = 1,       /* the staircase path (tests) */
    FLS_RULE_PATH_STAIR_GLOBAL = 2 /* the staircase path with its states in global memory (tests) */
} fls_rule_path;

/* The matmul of a fused rule call (docs/GPU.md). AUTO: the wgmma kernel
 * with its 64-token tables on the threshold-first path at B <= 64 where
 * the wgmma path applies, cuBLAS otherwise. Where the tables cannot serve
 * (the row's sum or moments are needed: top-p without an earlier cut,
 * logsumexp / logprobs, top-n-sigma) the wgmma logits go through the
 * statistics pass. WGMMA_STATS (tests): the wgmma logits through the
 * statistics pass always, so that the tables' fold can be compared with it
 * bit for bit. */
typedef enum fls_rule_matmul {
    FLS_RULE_MATMUL_AUTO = 0,
    FLS_RULE_MATMUL_CUBLAS = 1,
    FLS_RULE_MATMUL_WGMMA = 2,
    FLS_RULE_MATMUL_WGMMA_STATS = 3
} fls_rule_matmul;

void fls_cuda_opts_default(fls_cuda_opts *o);
/* The options of the context's public calls (fls_sample_fused / _logits):
 * tests and benches force a path or an experiment with them; NULL restores
 * the defaults. FLS_ERR_NO_DEVICE for a context without the CUDA engine. */
fls_status fls_cuda_set_dev_opts(fls_context_t *ctx, const fls_cuda_opts *opts);

/* The context's fused rule calls by matmul (tests): [0] cuBLAS, [1] the wgmma
 * kernel with its tables (no statistics pass), [2] the wgmma kernel, then the
 * statistics pass. */
void fls_cuda_rule_matmul_counts(const fls_context_t *ctx, uint64_t counts[3]);
/* The context's rule calls whose list kernel drew the rows (every row bounded
 * by a list its filter's value sizes, no log-sum-exp asked; the select and
 * final kernels skipped; opts.rule_list_draw < 0 turns it off). Tests. */
uint64_t fls_cuda_rule_list_draws(const fls_context_t *ctx);
/* The context's rule calls whose matmul kept the K best keys of each CTA
 * (rows without filters, no log-sum-exp asked, the wgmma kernel with its
 * tables; the select pass skipped; opts.rule_keys < 0 turns it off). Tests. */
uint64_t fls_cuda_rule_matmul_keys(const fls_context_t *ctx);
/* The context's rule calls on the threshold-first path whose kernels after
 * the row kernel were launched as programmatic dependents (the default,
 * except where the matmul kept the keys; opts.rule_pdl -1 / 1: never /
 * always, the same tokens). Tests. */
uint64_t fls_cuda_rule_pdl(const fls_context_t *ctx);

/* fls_cuda_sample_fused / _logits with explicit options. L != NULL selects
 * from-logits sampling (W, H ignored). */
fls_status fls_cuda_run(fls_context_t *ctx, const fls_matrix *W, const fls_matrix *H, const fls_matrix *L,
                        const fls_request *req, const fls_outputs *out, const fls_cuda_opts *opts);

/* Batch rows per tile the WGMMA path takes by default for B rows (16, 32, 64, 128). */
int fls_cuda_wgmma_tile_n(int64_t B);

/* The path FLS_CUDA_PATH_AUTO picks for this shape (for logs and tests). */
fls_cuda_path fls_cuda_auto_path(int64_t B, int64_t V, int64_t D, fls_dtype wd, fls_dtype hd);

#ifdef __cplusplus
/* The few cuBLAS functions the engine (and the benchmark's baselines) use,
 * from libcublas opened with dlopen on first use: the soname of the
 * toolkit's major version through the loader's path, then $CUDA_HOME/lib64,
 * /usr/local/cuda/lib64; FLS_CUBLAS_PATH names the file explicitly. */
typedef cublasStatus_t (*fls_cublas_gemm_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                                int, int, const void *, const void *, cudaDataType, int,
                                                const void *, cudaDataType, int, const void *, void *,
                                                cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
typedef struct fls_cublas_api {
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    fls_cublas_gemm_ex_fn gemm_ex;
} fls_cublas_api;
/* NULL when libcublas cannot be opened. */
const fls_cublas_api *fls_cublas(void);
#endif

/* Device name and SM count of the context's device (benchmark CSVs). */
fls_status fls_cuda_device_info(const fls_context_t *ctx, char *name, size_t name_len, int *sm_count);

#ifdef __cplusplus
}
#endif

#endif /* FLS_CUDA_H */
