/*
 * engine.cuh — the CUDA engine's host side, shared by its files (not
 * installed):
 *   context.cu   the context, cuBLAS (opened with dlopen on first use), the
 *                workspace and the device-memory helpers of internal.h;
 *   dispatch.cu  the dispatcher: which path computes a call's tokens (the
 *                wgmma kernel, cuBLAS chunks, the unfused baselines, the
 *                grouped method), the plain calls and a stream's chunks;
 *   rule_plan.cu the rule family's calls: their plan (sizes, paths, the
 *                statistics the rows' descriptors ask for) as named steps,
 *                and the passes of kernels/rules.cu that carry it out.
 *
 * A call uploads the resolved rows, runs the main kernel(s) and a finalize
 * kernel, then reads back one status word (NaN seen, all-masked row): the C
 * API returns a status, so each call synchronises its stream once. Error
 * marks are "epoch" words (== the call's counter), so nothing is cleared
 * between calls, and the finalize kernel writes no output when one is set.
 */
#ifndef FLS_ENGINE_CUH
#define FLS_ENGINE_CUH

#include "kernels/common.cuh"
#include "kernels/fls_cuda.h"
#include "lib/base/fls_dtype.h"
#include "kernels/rules.cuh"

#include <cublas_v2.h>
#include <stddef.h>
#include <stdint.h>

struct fls_cuda_state {
    int device;
    int sm_count;
    cudaStream_t stream;
    const fls_cublas_api *blas_api;
    cublasHandle_t blas;
    char *ws; /* growable workspace */
    size_t ws_bytes;
    unsigned *flags;    /* [0..1] status (epoch, code), [2] NaN mark, [3] temperature-overflow
                           mark, [4, 4 + flags_rows) finite marks per row, then as many
                           shallow marks (common.cuh, fls_key_marks) */
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

fls_status fls_from_cuda(cudaError_t e);
fls_status fls_from_blas(cublasStatus_t s);

/* W and H fit the tensor-core kernel's operand rules. */
bool fls_wgmma_eligible(const fls_matrix *W, const fls_matrix *H);

/* The workspace holds at least bytes (synchronises and reallocates when it grows). */
fls_status fls_ensure_ws(fls_cuda_state *s, size_t bytes);
/* The status word and B rows' finite marks, zero under a fresh epoch. */
fls_status fls_ensure_flags(fls_cuda_state *s, int64_t B);

/* The wgmma kernel's shared row thresholds (fls_ws.gthr): at most this many rows. */
#define FLS_GTHR_MAX_ROWS 65536
size_t fls_gthr_bytes(int64_t rows);
fls_status fls_ensure_gthr(fls_cuda_state *s, int64_t B, unsigned long long **out);

/* logits C[b * ldc + i] = W[v0 + i] . H[b] for i < vn, fp32 accumulation. */
fls_status fls_gemm_logits(fls_cuda_state *s, const fls_matrix *W, const fls_matrix *H, int64_t v0,
                           int64_t vn, float *C, int64_t ldc, int force_simt);

static inline size_t fls_align256(size_t x)
{
    return (x + 255) & ~(size_t)255;
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

/* A call's masks, bias and penalties (mods.cu): fls_mods_take carves their
 * buffers (both carve passes), fls_mods_stage_run copies host arrays, sorts
 * and checks the lists on the device (flag: FLS_ERR_PARAM) and fills dev. */
struct fls_mods_stage {
    fls_mods_dev dev;
    unsigned *flag; /* NULL: the call has none */
    uint32_t *up_mask;
    uint8_t *up_rows;
    int64_t *up_bias_ids, *up_seen_ids;
    float *up_bias_values, *up_pen;
    int32_t *up_seen_counts;
    fls_mod_dev *e;
    int *n;
    float *pen;
    int prep;
};
void fls_mods_take(fls_carve &c, const fls_request *req, fls_mods_stage *m);
/* slots > 0: the lists for the wgmma launch with these slots (fls_mods_dev::slots) */
fls_status fls_mods_stage_run(const fls_request *req, fls_mods_stage *m, int64_t slots, cudaStream_t st);
/* Rows b0 .. b0 + nb - 1 of logits src (column 0 = token v0, vn columns)
 * changed into dst (may be src). */
cudaError_t fls_launch_mods_apply(const float *src, int64_t lds, float *dst, int64_t ldd, int64_t b0,
                                  int64_t nb, int64_t v0, int64_t vn, const fls_mods_dev &m, cudaStream_t st);

/* A call with rules (req->rule): rule_plan.cu. */
fls_status fls_cuda_rules(fls_context_t *ctx, const fls_matrix *W, const fls_matrix *H, const fls_matrix *L,
                          const fls_request *req, const fls_outputs *out, const fls_cuda_opts &opts,
                          bool capturing);

#endif /* FLS_ENGINE_CUH */
