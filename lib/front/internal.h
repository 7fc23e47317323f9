/*
 * internal.h — what the front end (lib/front/api.c) and the engines share.
 * Not installed. The front end validates every argument and resolves the
 * per-row parameters; engines receive only valid, resolved requests.
 */
#ifndef FLS_INTERNAL_H
#define FLS_INTERNAL_H

#include "flashsample.h"
#include "variants/grouped.h"
#include "variants/registry.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Parameters of one row, resolved by the front end (host memory). */
typedef struct fls_row_params {
    float temperature; /* >= 0, finite; 0 = greedy */
    uint32_t pad_;
    uint64_t seed;   /* the row seed (given or derived by fls_row_seed) */
    uint64_t offset; /* the row offset */
} fls_row_params;

/* The rule family's parameters of one row (host memory): the value of
 * every filter of variants/registry.h (its "off" value when unused) and the
 * tokens per draw. */
typedef struct fls_row_rule {
    double value[FLS_FILTER_COUNT];
    int64_t K; /* 1 unless sampling without replacement (then <= fls_request.K) */
} fls_row_rule;

/* One token's change in a row (docs/RULES.md, "Masks, bias and
 * penalties"): the penalties when seen >= 0 (seen = its count), then the
 * bias when has_bias. */
typedef struct fls_mod_entry {
    int64_t token;
    int32_t seen; /* the count of occurrences, or -1: not in the seen list */
    int32_t has_bias;
    float bias;
    uint32_t pad_;
} fls_mod_entry;

/* A row's changes to its raw logits, resolved by the front end: n entries
 * sorted by token (each token once), the penalties, and the row's mask
 * words (NULL = no mask). */
typedef struct fls_row_mods {
    const fls_mod_entry *e;
    int64_t n;
    const int32_t *mask;
    float repetition, presence, frequency;
    uint32_t pad_;
} fls_row_mods;

/* The caller's mask, bias and penalty fields of fls_params, unresolved
 * (the CUDA engine's input; docs/RULES.md). */
typedef struct fls_mods_raw {
    const int32_t *mask;
    int64_t mask_ld; /* resolved: ceil(V / 32) when params said 0 */
    const uint8_t *mask_rows;
    const int64_t *bias_ids;
    const float *bias_values;
    int64_t bias_k;
    const int64_t *seen_ids;
    const int32_t *seen_counts;
    int64_t seen_k;
    float repetition, presence, frequency;
    const float *row_repetition, *row_presence, *row_frequency;
} fls_mods_raw;

/* The CUDA engine sorts a row's bias and seen lists in shared memory: at
 * most this many entries (logit_bias_k + seen_k) a row. */
#define FLS_CUDA_MODS_MAX 16384

/* Applies row b's changes to its logits x[0 .. nv) of tokens v0 .. v0 + nv
 * - 1, in the documented order and fp32 operations (lib/front/api.c). */
void fls_mods_apply(const fls_row_mods *m, float *x, int64_t v0, int64_t nv);

/* A validated request. rows has B entries (host memory). */
typedef struct fls_request {
    const fls_row_params *rows;
    int64_t batch; /* B */
    int64_t vocab; /* V */
    int64_t draws; /* >= 1 */
    fls_method method;
    uint32_t first_draw; /* the noise's draw index of tokens[b * draws + 0] */
    /* The rule family: NULL = the plain temperature rule (no filter, one
     * token per draw); else B entries. */
    const fls_row_rule *rule;
    int64_t K;                  /* tokens per draw in the output (1 without replacement off) */
    unsigned needs;             /* FLS_NEED_* of the filters some row uses */
    uint64_t *second_pass_rows; /* the engine adds the rows it decided by a second pass */
    int64_t group_size;         /* FLS_METHOD_GROUPED: tokens per group (a power of two) */
    fls_noise noise;            /* the noise scheme (FLS_NOISE_MIN_FIRST: flat method, no rule) */
    /* Masks, bias and penalties: NULL = none (the logits as computed), else
     * B entries and their lists in one malloc'ed block (host memory, the
     * CPU engine only). */
    const fls_row_mods *mods;
    /* The same changes as the caller gave them, for the CUDA engine (which
     * sorts and checks the lists on the device): has_raw_mods = 0 when
     * params use none. Host arrays, or device arrays with params_on_device. */
    int has_raw_mods;
    fls_mods_raw raw_mods;
    /* params_on_device: rows is NULL and these device arrays (or scalars)
     * give the rows (the CUDA engine packs them on the device) */
    int params_on_device;
    const float *dev_temperature;
    float temperature_value;
    const uint64_t *dev_row_seeds;
    uint64_t seed;
    const uint64_t *dev_row_offsets;
    uint64_t offset;
} fls_request;

struct fls_cuda_state; /* defined by the CUDA engine */

/* The front end's validation and resolution of params for a (B, V) request
 * (lib/front/api.c): *rows_out (B rows) and req->rule are malloc'ed (caller frees).
 * out NULL: outputs that come later (a stream's finalize checks them). */
fls_status fls_resolve_request(const struct fls_context *ctx, const fls_params *params,
                               const fls_outputs *out, int64_t B, int64_t V, fls_request *req,
                               fls_row_params **rows_out);

/* The CPU engine's developer options: zero in production; tests set them
 * (fls_cpu_set_dev_opts). Every value gives the same tokens. */
typedef struct fls_cpu_opts {
    int no_keep; /* the fused pass keeps no logits for the exact second pass (it recomputes them) */
} fls_cpu_opts;

struct fls_context {
    fls_counters counters;
    fls_context_config config;
    fls_engine engine;
    int threads;                 /* resolved */
    fls_simd simd;               /* resolved */
    struct fls_cuda_state *cuda; /* NULL for the CPU engine */
    fls_cpu_opts cpu_dev;
};

/* Sets the CPU engine's developer options of ctx (NULL: the defaults). */
void fls_cpu_set_dev_opts(fls_context_t *ctx, const fls_cpu_opts *opts);

/* ---- CPU engine (lib/cpu/cpu_engine.c) ---- */
fls_status fls_cpu_sample_fused(const fls_context_t *ctx, const fls_matrix *W, const fls_matrix *H,
                                const fls_request *req, const fls_outputs *out);
fls_status fls_cpu_sample_logits(const fls_context_t *ctx, const fls_matrix *L, const fls_request *req,
                                 const fls_outputs *out);
/* The logits (H->rows, W->rows) of W H^T into out (row stride W->rows),
 * through the fused path's kernels (the same floats). */
fls_status fls_cpu_logits(const fls_context_t *ctx, const fls_matrix *W, const fls_matrix *H, float *out);
/* Best SIMD path this processor supports. */
fls_simd fls_cpu_best_simd(void);
int fls_cpu_simd_supported(fls_simd simd);

/* ---- CUDA engine (kernels/, *.cu; lib/front/cuda_stub.c when built without CUDA) ----
 * W, H, L and the outputs are device pointers; req->rows is host memory. */
fls_status fls_cuda_context_init(fls_context_t *ctx);
void fls_cuda_context_fini(fls_context_t *ctx);
fls_status fls_cuda_sample_fused(fls_context_t *ctx, const fls_matrix *W, const fls_matrix *H,
                                 const fls_request *req, const fls_outputs *out);
fls_status fls_cuda_sample_logits(fls_context_t *ctx, const fls_matrix *L, const fls_request *req,
                                  const fls_outputs *out);
int fls_cuda_available_impl(void);
fls_status fls_cuda_sync(fls_context_t *ctx);
int fls_cuda_built_impl(void); /* 1 in a build with the CUDA engine */
/* FLS_OK if p is device (or managed) memory, FLS_ERR_POINTER if it is host memory. */
fls_status fls_cuda_check_device_pointer(const void *p);
/* Small device-memory helpers behind the public fls_device_* functions
 * (FLS_ERR_NO_DEVICE without the CUDA engine or a GPU). to_device: 1 = host->device, 0 = device->host. */
fls_status fls_cuda_malloc(void **p, size_t bytes);
void fls_cuda_free(void *p);
fls_status fls_cuda_memcpy(void *dst, const void *src, size_t bytes, int to_device);
/* A strided block: rows of width bytes, pitches in bytes. */
fls_status fls_cuda_memcpy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                             size_t rows, int to_device);
/* Streams on the CUDA engine (lib/front/stream.c; kernels/dispatch.cu says what they
 * compute): one chunk's candidates, and the logits of a slice of W. */
fls_status fls_cuda_stream_chunk(fls_context_t *ctx, const float *L, int64_t ldl, int64_t B, int64_t n,
                                 int64_t v0, const fls_row_params *rows, int64_t draws, uint32_t first_draw,
                                 int g, fls_cand *cand, fls_gbest *gbest, fls_lse *lse);
fls_status fls_cuda_chunk_logits(fls_context_t *ctx, const fls_matrix *Wc, const fls_matrix *H, float *C);
/* 1 while the context's stream is being captured into a CUDA graph. */
int fls_cuda_capturing(const fls_context_t *ctx);

#ifdef __cplusplus
}
#endif

#endif /* FLS_INTERNAL_H */
