/*
 * flashsample.h — exact Gumbel-max sampling fused into the LM-head matmul.
 *
 * The whole flow:
 *
 *     fls_context_config cfg;
 *     fls_context_config_default(&cfg);          // CPU engine, all cores
 *     fls_context_t *ctx;
 *     if (fls_context_create(&ctx, &cfg) != FLS_OK) ...;
 *
 *     fls_matrix W = {w, FLS_DTYPE_BF16, V, D, D};   // (V, D), row stride D
 *     fls_matrix H = {h, FLS_DTYPE_F32, B, D, D};    // (B, D)
 *     fls_params p;
 *     fls_params_default(&p);                    // T = 1, seed 0, 1 draw
 *     p.temperature_value = 0.7f;
 *     p.seed = 1234;                             // or p.row_seeds = seeds (B)
 *     int64_t tokens[B];
 *     fls_outputs out = {tokens, NULL, NULL};
 *     fls_status st = fls_sample_fused(ctx, &W, &H, &p, &out);
 *     if (st != FLS_OK) fprintf(stderr, "%s\n", fls_status_string(st));
 *     fls_context_destroy(ctx);
 *
 * Row b samples token v with probability softmax(l_b / T_b)_v, where
 * l_b = W h_b is accumulated in fp32, by Gumbel-max: argmax_v l_bv/T_b + G_bv.
 * The noise G is fixed by docs/NOISE.md: a pure function of (row seed, row
 * offset, draw index, token index), so every engine, tiling, thread count and
 * batch position gives the same token; "exact" and its limits (fp32 keys at
 * very low temperature) are defined in docs/NOISE.md. On the fused path the
 * logits stay on chip, except where docs/GPU.md says they pass through memory
 * (rule calls, fp32 or mixed-dtype W, cuBLAS chunks at large D and B). Every
 * function returns an fls_status; on error no output is written.
 */
#ifndef FLASHSAMPLE_H
#define FLASHSAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "flashsample_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FLS_BUILDING_LIBRARY) && defined(__GNUC__)
#define FLS_API __attribute__((visibility("default")))
#else
#define FLS_API
#endif

#define FLS_VERSION_MAJOR 0
#define FLS_VERSION_MINOR 4
#define FLS_VERSION_PATCH 0

/* A static, human-readable string for every status (also unknown ones). */
FLS_API const char *fls_status_string(fls_status status);

typedef enum fls_dtype { FLS_DTYPE_F32 = 0, FLS_DTYPE_F16 = 1, FLS_DTYPE_BF16 = 2 } fls_dtype;

/* Bytes of one element of dtype, 0 for an unknown dtype. */
FLS_API size_t fls_dtype_size(fls_dtype dtype);
FLS_API const char *fls_dtype_name(fls_dtype dtype);

typedef enum fls_engine {
    FLS_ENGINE_CPU = 0, /* always built; the reference and embedded default */
    FLS_ENGINE_CUDA = 1 /* built when nvcc was found; pointers are device memory */
} fls_engine;

/* CPU SIMD path. AUTO picks AVX-512 where the processor has it (register-
 * tiled kernels for batches above 2), else AVX2, else portable C;
 * forcing a path the processor lacks is FLS_ERR_UNSUPPORTED at context
 * creation. All paths give bit-identical logits and tokens (they share one
 * accumulation order). */
typedef enum fls_simd {
    FLS_SIMD_AUTO = 0,
    FLS_SIMD_PORTABLE = 1,
    FLS_SIMD_AVX2 = 2,   /* AVX2 + FMA + F16C */
    FLS_SIMD_AVX512 = 3, /* AVX-512F/BW/VL */
    /* AVX-512 with bf16 W through AMX tiles (AMX-TILE, AMX-BF16). Its logits
     * are summed in the tile unit's order, not the canonical one, so its
     * tokens agree with the other paths' except at near-ties (docs/CONTRACTS.md);
     * AUTO never picks it. */
    FLS_SIMD_AMX = 4
} fls_simd;

/* Which algorithm computes the tokens. FUSED is the product; the others are
 * the unfused baselines of the paper's comparisons, in every engine. */
typedef enum fls_method {
    FLS_METHOD_FUSED = 0,          /* tile-streaming Gumbel-max, logits stay on chip */
    FLS_METHOD_UNFUSED_GUMBEL = 1, /* materialize B x V logits, then Gumbel argmax (same tokens as FUSED) */
    FLS_METHOD_UNFUSED_MULTINOMIAL = 2, /* materialize logits, softmax, inverse-CDF multinomial */
    FLS_METHOD_GROUPED = 3              /* Group-Gumbel-Max (docs/GROUPED.md): a group of group_size tokens by
                                           its log-mass and a group Gumbel, then the token inside it; exact in
                                           distribution, its own noise contract */
} fls_method;

/* The noise scheme (docs/NOISE.md): how the Gumbel noise of each token is
 * made from the row's seed, offset and draw. Both give every token an
 * independent standard Gumbel, so the same distribution of tokens; they
 * give different tokens for the same seed. */
typedef enum fls_noise {
    FLS_NOISE_PER_TOKEN = 0, /* each token from its own Philox bits (the default) */
    FLS_NOISE_MIN_FIRST = 1  /* each 64-token group's smallest exponential first: a token
                                that cannot win needs no Philox block (faster at large B).
                                The flat method without rules (FUSED, UNFUSED_GUMBEL),
                                one-shot calls, V <= 2^32; else FLS_ERR_UNSUPPORTED */
} fls_noise;

typedef struct fls_context fls_context_t; /* opaque */

/* Structs that grow with new versions (fls_context_config, fls_params) start
 * with struct_size, set by their *_default function to the size the caller
 * was compiled with: the library reads that many bytes and gives every later
 * field its default, so a program (or a binding) built against an older
 * header keeps working. Always fill them with the *_default function; a
 * struct_size the library does not know is FLS_ERR_PARAM. */
typedef struct fls_context_config {
    size_t struct_size;     /* sizeof(fls_context_config), set by fls_context_config_default */
    fls_engine engine;      /* default FLS_ENGINE_CPU */
    int threads;            /* CPU threads; 0 = one per online core */
    fls_simd simd;          /* CPU SIMD path; default AUTO */
    int64_t tile_v;         /* vocabulary rows per tile; 0 = engine's choice. Never changes tokens. */
    int device;             /* CUDA device ordinal */
    void *stream;           /* cudaStream_t for the CUDA engine; NULL = default stream */
    size_t workspace_bytes; /* 0 = the engine sizes its workspace itself */
    /* ---- since 0.2 ---- */
    /* CUDA engine, serving mode: a sampling call enqueues its kernels on the
     * context's stream and returns FLS_OK without waiting (input errors the
     * host can see still return at once); the status of the calls since the
     * last fls_context_sync stays in device memory and fls_context_sync
     * returns it. Calls can then be captured in a CUDA graph (docs/GPU.md:
     * warm up with the same shapes first, and pass params_on_device). */
    int async;
} fls_context_config;

FLS_API void fls_context_config_default(fls_context_config *config);
FLS_API fls_status fls_context_create(fls_context_t **ctx, const fls_context_config *config);
FLS_API void fls_context_destroy(fls_context_t *ctx); /* NULL is fine */
/* Engine, threads and SIMD path actually in use (after AUTO is resolved). */
FLS_API fls_engine fls_context_engine(const fls_context_t *ctx);
FLS_API int fls_context_threads(const fls_context_t *ctx);
FLS_API fls_simd fls_context_simd(const fls_context_t *ctx);
FLS_API const char *fls_simd_name(fls_simd simd);
/* Waits for the context's calls (async mode) and returns their status:
 * FLS_OK, or the first error of the calls since the last sync (their
 * outputs were not written). On the CPU engine (always synchronous): FLS_OK. */
FLS_API fls_status fls_context_sync(fls_context_t *ctx);
/* Whether this build has the CUDA engine and a usable GPU is present. */
FLS_API int fls_cuda_available(void);
/* Whether this build has the CUDA engine at all (a GPU may still be absent). */
FLS_API int fls_cuda_built(void);

/* Device buffers for callers of the CUDA engine that have no CUDA code of
 * their own (the command line, the audit, bindings). Memory of the current
 * device; FLS_ERR_NO_DEVICE without the CUDA engine or a GPU. A zero-byte
 * copy is a no-op; fls_device_free(NULL) is fine. */
FLS_API fls_status fls_device_malloc(void **ptr, size_t bytes);
FLS_API void fls_device_free(void *ptr);
FLS_API fls_status fls_device_upload(void *device_dst, const void *host_src, size_t bytes);
FLS_API fls_status fls_device_download(void *host_dst, const void *device_src, size_t bytes);

/* A row-major matrix view: element (i, j) is at data + (i * ld + j) * size(dtype).
 * ld >= cols. data must be aligned to the dtype's size. */
typedef struct fls_matrix {
    const void *data;
    fls_dtype dtype;
    int64_t rows;
    int64_t cols;
    int64_t ld;
} fls_matrix;

/* Sampling parameters. Fill with fls_params_default, then set what you need.
 * Reserved fields must stay at their defaults until implemented: a
 * non-default value returns FLS_ERR_UNSUPPORTED, never a silent default. */
typedef struct fls_params {
    size_t struct_size; /* sizeof(fls_params), set by fls_params_default */
    fls_method method;  /* default FLS_METHOD_FUSED */
    /* Temperature per row: temperature[b] if the array is given (B entries),
     * else temperature_value for every row. T = 0 is greedy (exact argmax,
     * lowest index on ties). T < 0, NaN or inf is FLS_ERR_TEMPERATURE. */
    const float *temperature;
    float temperature_value; /* default 1 */
    /* Seeds: row_seeds[b] if given (B entries), else fls_row_seed(seed, b). */
    const uint64_t *row_seeds;
    uint64_t seed; /* default 0 */
    /* Offsets (the decode step): row_offsets[b] if given, else offset. */
    const uint64_t *row_offsets;
    uint64_t offset; /* default 0 */
    /* Independent draws per row, sharing one pass over W: draw indices
     * first_draw .. first_draw + draws - 1 of the noise contract; tokens[b *
     * draws + j] is draw first_draw + j. A long run can be split into calls
     * of consecutive draw ranges and gives the tokens of one call. */
    int64_t draws;      /* default 1; 1 <= draws, first_draw + draws < 2^32 */
    int64_t first_draw; /* default 0 */
    /* The rule family (docs/RULES.md), applied to the tempered logits in
     * vLLM's order: min-p, top-k, top-p, then `filter`; the token is the
     * Gumbel-max over what survives (the same noise: a token that survives
     * every filter is exactly the unfiltered token). Each has a per-row
     * array (B entries, overriding the scalar when given). Out of range
     * (k < 0 or k > V, p outside its interval, NaN) is FLS_ERR_PARAM. */
    int64_t top_k; /* >= 0; 0 = off */
    float top_p;   /* in (0, 1]; 1 = off */
    float min_p;   /* in [0, 1]; 0 = off */
    /* Sampling without replacement (Gumbel-top-k, Plackett-Luce): K >= 1
     * tokens per draw, the K largest keys over the filtered support, in
     * order; tokens and logprobs are then (B, draws, K), positions beyond
     * the support's size are -1 (logprob 0). 0 = off (one token). */
    int64_t without_replacement_k;
    /* ---- since 0.2 ---- */
    const int64_t *row_top_k;
    const float *row_top_p;
    const float *row_min_p;
    /* per-row K_b <= without_replacement_k (positions past K_b are -1) */
    const int64_t *row_without_replacement_k;
    /* A rule of the registry (variants/registry.h) by name, e.g.
     * "top-nsigma", applied after top-p with filter_value (or
     * row_filter_value[b]); NULL = none. An unknown name is FLS_ERR_PARAM. */
    const char *filter;
    double filter_value;
    const double *row_filter_value;
    /* FLS_METHOD_GROUPED: tokens per group, a power of two in [2, 2^20];
     * 0 = the library's default (FLS_GROUP_SIZE_DEFAULT). */
    int64_t group_size;
    /* CUDA engine: temperature, row_seeds and row_offsets are device
     * pointers (B entries each where given), read by the kernels, so a call
     * captured in a CUDA graph samples with the values they hold at each
     * replay. A bad temperature is then reported by the call's status
     * (FLS_ERR_TEMPERATURE, nothing written). Not for the CPU engine. The
     * rule values (top_k, top_p, min_p, filter, without_replacement_k and
     * their row_ arrays) stay host memory; with a rule such a call needs an
     * async context, and a capture needs one value for every row
     * (docs/GPU.md). */
    int params_on_device;
    /* ---- since 0.3 ---- */
    fls_noise noise; /* default FLS_NOISE_PER_TOKEN */
    /* ---- since 0.4 ---- */
    /* What a serving engine adds to the logits (docs/RULES.md, "Masks, bias
     * and penalties"). For row b and token v with the engine's fp32 logit l,
     * in this order and with these fp32 operations, before temperature and
     * the rules (which, like logsumexp and logprobs, see the result):
     *   1. v in the row's seen list with count c (penalties r, p, f):
     *        if r != 1: l = l > 0 ? l / r : l * r;
     *        l = (l - f * (float)c) - (c > 0 ? p : 0);
     *   2. v in the row's bias list with value beta: l = l + beta;
     *   3. v disallowed by the row's mask: l = -inf.
     * A row left with no finite logit is FLS_ERR_ALL_MASKED. Both engines,
     * every method, with every rule and without replacement; streams
     * refuse them with FLS_ERR_UNSUPPORTED, and so does the CUDA engine for
     * a row with more than 16384 seen + bias entries. Out-of-range values are
     * FLS_ERR_PARAM (fls_params_explain names the field and the row; with
     * params_on_device the CUDA engine checks the arrays on the device and
     * the call's status says FLS_ERR_PARAM, nothing written). The arrays
     * are host memory, or device memory with params_on_device on the CUDA
     * engine (read at the call, or at each replay of a captured graph).
     * On the CUDA engine the fused methods apply them in the wgmma
     * kernel's epilogue, on each tile's logits in shared memory (docs/GPU.md).
     *
     * Allowed-token bitmask (the xgrammar / vLLM layout): int32 words, row
     * b's word w at allowed_bitmask[b * ld + w], ld = bitmask_ld (0 means
     * ceil(V / 32), else >= ceil(V / 32)); bit v % 32 of word v / 32 set =
     * token v allowed; bits of v >= V are ignored. NULL = no mask.
     * bitmask_rows (B bytes, optional): row b is masked only where
     * bitmask_rows[b] != 0 (NULL = every row). */
    const int32_t *allowed_bitmask;
    int64_t bitmask_ld;
    const uint8_t *bitmask_rows;
    /* Sparse logit bias: logit_bias_k = K (id, value) pairs per row at
     * [b * K + i]; id -1 is padding (skipped), other ids in [0, V), each at
     * most once per row; values finite. */
    const int64_t *logit_bias_ids;
    const float *logit_bias_values;
    int64_t logit_bias_k;
    /* The tokens seen so far: seen_k = S ids per row at [b * S + i] (-1 is
     * padding; others in [0, V), each at most once per row) and for each its
     * count >= 0 of occurrences in the output (0: seen only in the prompt);
     * seen_counts NULL = every count 0. */
    const int64_t *seen_ids;
    const int32_t *seen_counts;
    int64_t seen_k;
    /* Penalties of the seen tokens: repetition r (finite, > 0; 1 = off),
     * presence and frequency (finite; 0 = off); a row_ array (B entries)
     * overrides its scalar. */
    float repetition_penalty; /* default 1 */
    float presence_penalty;   /* default 0 */
    float frequency_penalty;  /* default 0 */
    const float *row_repetition_penalty;
    const float *row_presence_penalty;
    const float *row_frequency_penalty;
} fls_params;

/* Why params are refused for a (B, V) request, in words: checks what the
 * sampling calls check of params alone (method, group size, draws, host
 * temperatures, every rule, mask, bias and penalty value and per-row array
 * against its range) and writes the first problem, naming the field, the
 * row and the allowed range, into message (size bytes, NUL-terminated; ""
 * when params are fine). It takes no context, so it cannot say what one
 * engine refuses (FLS_ERR_UNSUPPORTED), nor check arrays in device memory.
 * Returns the status the check gives (FLS_OK, FLS_ERR_PARAM, ...). Call it
 * after a sampling call returned FLS_ERR_PARAM to say which value is wrong. */
FLS_API fls_status fls_params_explain(const fls_params *params, int64_t B, int64_t V, char *message,
                                      size_t size);

/* The grouped method's default group size (docs/GROUPED.md says why). */
#define FLS_GROUP_SIZE_DEFAULT 128

FLS_API void fls_params_default(fls_params *params);

/* The row seed used when params.row_seeds is NULL (docs/NOISE.md). */
FLS_API uint64_t fls_row_seed(uint64_t seed, uint64_t row);

/* Outputs. tokens is required: int64 (B, draws), or (B, draws, K) with
 * without_replacement_k = K, row-major. The others are optional (NULL = not
 * computed), computed in the same pass:
 *   logsumexp (B): log sum_v exp(l_bv / T_b) over the final support of the
 *                  rule (every finite token without filters; for T = 0:
 *                  max_v l_bv, the limit of T log-sum-exp);
 *   logprobs (B, draws) or (B, draws, K): log-probability of each sampled
 *                  token under the rule, l_b,tok / T_b - logsumexp_b (0 for
 *                  T = 0); without replacement, position j's probability
 *                  given positions 0..j-1 (their sum is the log-probability
 *                  of the ordered tuple).
 * For the CUDA engine these are device pointers. On the CPU engine they are
 * bit-identical for any thread count at a given tile_v (partials merge in
 * tile order); across tile sizes and engines they agree to double rounding. */
typedef struct fls_outputs {
    int64_t *tokens;
    float *logsumexp;
    float *logprobs;
} fls_outputs;

/* Fused LM-head + sampling. W is (V, D), H is (B, D): W.cols == H.cols == D.
 * V < 2^33 - 1. Any dtype for W and H (they need not match); fp32 accumulation.
 * A NaN logit is FLS_ERR_NAN (nothing written). */
FLS_API fls_status fls_sample_fused(fls_context_t *ctx, const fls_matrix *W, const fls_matrix *H,
                                    const fls_params *params, const fls_outputs *out);

/* Sampling from materialized logits L (B, V), with the same noise: gives the
 * fused path's token whenever the logits are the same floats. -inf masks a
 * token; NaN is FLS_ERR_NAN; a row of all -inf is FLS_ERR_ALL_MASKED. */
FLS_API fls_status fls_sample_logits(fls_context_t *ctx, const fls_matrix *L, const fls_params *params,
                                     const fls_outputs *out);

/*
 * Streaming (online) sampling (docs/GROUPED.md; the paper's Algorithm I.3):
 * feed the vocabulary in chunks of any size and order — materialized logits
 * or rows of W with H — merge states (threads, shards, ranks), finalize.
 * The token is the one-shot call's (fls_sample_logits / fls_sample_fused
 * with the same params), whatever the chunking: FLS_METHOD_FUSED (the flat
 * Gumbel-max, temperature rule) or FLS_METHOD_GROUPED. The state is O(B x
 * draws) plus the groups split by chunk boundaries, and serializes to bytes.
 * Filters, without replacement, masks, logit bias and penalties are
 * FLS_ERR_UNSUPPORTED here.
 *
 * On a CUDA context the chunks (L, Wc, H) and the outputs are device memory
 * (L fp32; params_on_device is not taken); the state stays in host memory
 * (O(B x draws)) and each feed samples its chunk on the device with the
 * from-logits segment sampler (a fused feed computes the chunk's B x n
 * logits with cuBLAS first, as the chunked path does), then merges the
 * chunk's candidates into the state; feeds are synchronous (so
 * FLS_ERR_UNSUPPORTED while the context's stream is being captured into a
 * CUDA graph). The token is
 * the one-shot CUDA call's whenever the logits are the same floats. The
 * grouped method on the GPU takes group sizes up to 4096.
 *
 * Early finalization: given an upper bound on the logits of a chunk not yet
 * fed (fls_logit_bound from row norms, or your own), fls_stream_skip draws
 * that chunk's noise (no matmul) and, when no token of it can beat any row's
 * leader, marks it done without its logits: the token is still the full
 * pass's. (A skipped chunk's mass is unknown, so logsumexp / logprobs are
 * then FLS_ERR_UNSUPPORTED at finalize.)
 */
typedef struct fls_stream fls_stream_t; /* opaque */

/* A state for B rows over V tokens with params (seeds, offsets, T, draws,
 * method, group_size) resolved now; ctx (CPU or CUDA engine) must outlive it. */
FLS_API fls_status fls_stream_create(fls_stream_t **stream, fls_context_t *ctx, int64_t B, int64_t V,
                                     const fls_params *params);
FLS_API void fls_stream_destroy(fls_stream_t *stream);
/* Logits L (B, n) of tokens v0 .. v0 + n - 1. A token fed twice is FLS_ERR_PARAM;
 * a NaN is FLS_ERR_NAN (the state is unchanged on any error). */
FLS_API fls_status fls_stream_feed_logits(fls_stream_t *stream, const fls_matrix *L, int64_t v0);
/* Rows v0 .. v0 + Wc->rows - 1 of W (Wc is that (n, D) slice) against H (B, D). */
FLS_API fls_status fls_stream_feed_fused(fls_stream_t *stream, const fls_matrix *Wc, const fls_matrix *H,
                                         int64_t v0);
/* Chunk v0 .. v0 + n - 1 not fed: upper[b] >= every logit l_bv of the chunk.
 * *skipped = 1 when the chunk cannot hold any row's token (then it counts
 * as done), else 0 and nothing changes. */
FLS_API fls_status fls_stream_skip(fls_stream_t *stream, int64_t v0, int64_t n, const float *upper,
                                   int *skipped);
/* dst += src: two states of the same (B, V, params) over disjoint tokens. */
FLS_API fls_status fls_stream_merge(fls_stream_t *dst, const fls_stream_t *src);
/* Tokens fed + skipped == V: the outputs, as fls_sample_logits. */
FLS_API fls_status fls_stream_finalize(const fls_stream_t *stream, const fls_outputs *out);
/* Progress: tokens fed, tokens skipped, chunks fed, chunks skipped. */
FLS_API fls_status fls_stream_progress(const fls_stream_t *stream, int64_t *tokens_fed,
                                       int64_t *tokens_skipped, int64_t *chunks_fed, int64_t *chunks_skipped);
/* Bytes: *bytes = the size of the serialized state (call with buf = NULL
 * first); a state from fls_stream_deserialize continues where it stopped. */
FLS_API fls_status fls_stream_serialize(const fls_stream_t *stream, void *buf, size_t *bytes);
FLS_API fls_status fls_stream_deserialize(fls_stream_t **stream, fls_context_t *ctx, const void *buf,
                                          size_t bytes);

/* Norm bounds for early finalization: out[c] >= ||w_v||_2 for every row v
 * of chunk c (chunks of `chunk` rows of W), computed once per W. */
FLS_API fls_status fls_chunk_max_norms(const fls_matrix *W, int64_t chunk, float *out);
/* An upper bound of every fp32 dot product w . h the engines compute with
 * ||w|| <= wnorm, ||h|| <= hnorm over D terms (Cauchy-Schwarz plus the
 * worst-case rounding of a D-term fp32 sum). */
FLS_API float fls_logit_bound(float wnorm, float hnorm, int64_t D);

/* What a context has done, for the rule family's cost model: a filter
 * decides in one pass over W unless the statistics kept during the pass
 * cannot decide it (a nucleus larger than the kept list, top-k beyond it, a
 * staircase over capacity); such rows take an exact second pass over their
 * logits (the same noise, the same token). Fill struct_size first (or call
 * fls_counters_default). */
typedef struct fls_counters {
    size_t struct_size;
    uint64_t calls;            /* successful sampling calls */
    uint64_t rows;             /* rows sampled */
    uint64_t second_pass_rows; /* rows that took the exact second pass */
} fls_counters;

FLS_API void fls_counters_default(fls_counters *counters);
FLS_API fls_status fls_context_counters(const fls_context_t *ctx, fls_counters *counters);

/* bf16/f16 <-> f32 helpers (round to nearest even; NaN stays NaN). */
FLS_API float fls_bf16_to_f32(uint16_t x);
FLS_API uint16_t fls_f32_to_bf16(float x);
FLS_API float fls_f16_to_f32(uint16_t x);
FLS_API uint16_t fls_f32_to_f16(float x);

#ifdef __cplusplus
}
#endif

#endif /* FLASHSAMPLE_H */
