/*
 * api.c — the public entry points: status strings, defaults, contexts, and
 * the validation that every request passes before an engine sees it.
 * Rule (docs/CONTRACTS.md, Errors): bad input gets a clear status and changes nothing,
 * so every check here happens before any output is touched.
 */
#include "lib/front/internal.h"
#include "lib/base/fls_dtype.h"
#include "lib/base/fls_noise.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *fls_status_string(fls_status status)
{
    switch (status) {
    case FLS_OK:
        return "success";
    case FLS_ERR_NULL:
        return "a required pointer is NULL";
    case FLS_ERR_ALIGN:
        return "a pointer is not aligned to its element size";
    case FLS_ERR_SIZE:
        return "a size is zero, negative or too large";
    case FLS_ERR_SHAPE:
        return "shapes or row strides do not match";
    case FLS_ERR_DTYPE:
        return "unsupported dtype";
    case FLS_ERR_TEMPERATURE:
        return "temperature must be finite and >= 0, large enough that tempered logits stay finite and "
               "that the deciding keys l / T + G stay below 2^12 in magnitude (fp32 key resolution, "
               "docs/NOISE.md; T = 0 is the exact argmax)";
    case FLS_ERR_NAN:
        return "NaN or +inf in an input or a computed logit";
    case FLS_ERR_ALL_MASKED:
        return "a row has every logit at -inf: nothing can be sampled";
    case FLS_ERR_PARAM:
        return "a sampling parameter is out of range";
    case FLS_ERR_POINTER:
        return "host memory where device memory is expected (or the reverse)";
    case FLS_ERR_UNSUPPORTED:
        return "not supported by this build or engine yet";
    case FLS_ERR_NO_DEVICE:
        return "no usable CUDA device (or the library was built without the CUDA engine)";
    case FLS_ERR_OUT_OF_MEMORY:
        return "out of memory";
    case FLS_ERR_CUDA:
        return "a CUDA, cuBLAS or cuRAND call failed";
    case FLS_ERR_IO:
        return "a file could not be read or written";
    case FLS_ERR_FORMAT:
        return "malformed file";
    case FLS_ERR_INTERNAL:
        return "internal error (a bug: please report it)";
    }
    return "unknown status code";
}

size_t fls_dtype_size(fls_dtype dtype)
{
    return fls_dtype_bytes(dtype);
}

const char *fls_dtype_name(fls_dtype dtype)
{
    switch (dtype) {
    case FLS_DTYPE_F32:
        return "f32";
    case FLS_DTYPE_F16:
        return "f16";
    case FLS_DTYPE_BF16:
        return "bf16";
    }
    return "unknown";
}

const char *fls_simd_name(fls_simd simd)
{
    switch (simd) {
    case FLS_SIMD_AUTO:
        return "auto";
    case FLS_SIMD_PORTABLE:
        return "portable";
    case FLS_SIMD_AVX2:
        return "avx2";
    case FLS_SIMD_AVX512:
        return "avx512";
    case FLS_SIMD_AMX:
        return "amx";
    }
    return "unknown";
}

uint64_t fls_row_seed(uint64_t seed, uint64_t row)
{
    return fls_row_seed_derive(seed, row);
}

void fls_context_config_default(fls_context_config *config)
{
    if (!config)
        return;
    memset(config, 0, sizeof *config);
    config->struct_size = sizeof *config;
    config->engine = FLS_ENGINE_CPU;
    config->threads = 0;
    config->simd = FLS_SIMD_AUTO;
}

void fls_params_default(fls_params *params)
{
    if (!params)
        return;
    memset(params, 0, sizeof *params);
    params->struct_size = sizeof *params;
    params->method = FLS_METHOD_FUSED;
    params->temperature_value = 1.0f;
    params->draws = 1;
    params->top_p = 1.0f;
    params->repetition_penalty = 1.0f;
}

/* The sizes of the first versions of the growing structs (the fields up to
 * and including the last one of version 0.1). */
#define FLS_CONFIG_V1_SIZE (offsetof(fls_context_config, workspace_bytes) + sizeof(size_t))
#define FLS_PARAMS_V1_SIZE (offsetof(fls_params, without_replacement_k) + sizeof(int64_t))

/* The caller's params in this version's layout (later fields at their
 * defaults); FLS_ERR_PARAM for a size this library does not know. */
static fls_status params_upgrade(const fls_params *in, fls_params *p)
{
    fls_params_default(p);
    if (!in)
        return FLS_OK;
    if (in->struct_size < FLS_PARAMS_V1_SIZE || in->struct_size > sizeof *p)
        return FLS_ERR_PARAM;
    memcpy(p, in, in->struct_size);
    p->struct_size = sizeof *p;
    return FLS_OK;
}

static int online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > 256 ? 256 : (int)n);
}

fls_status fls_context_create(fls_context_t **ctx, const fls_context_config *config)
{
    if (!ctx)
        return FLS_ERR_NULL;
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    if (config) {
        /* the caller's version of the struct: its fields, then our defaults */
        if (config->struct_size < FLS_CONFIG_V1_SIZE || config->struct_size > sizeof cfg)
            return FLS_ERR_PARAM;
        memcpy(&cfg, config, config->struct_size);
        cfg.struct_size = sizeof cfg;
    }
    if (cfg.engine != FLS_ENGINE_CPU && cfg.engine != FLS_ENGINE_CUDA)
        return FLS_ERR_PARAM;
    if (cfg.threads < 0 || cfg.threads > 1024 || cfg.tile_v < 0 || cfg.tile_v > ((int64_t)1 << 32))
        return FLS_ERR_PARAM;
    if (cfg.simd < FLS_SIMD_AUTO || cfg.simd > FLS_SIMD_AMX)
        return FLS_ERR_PARAM;
    fls_simd simd = cfg.simd == FLS_SIMD_AUTO ? fls_cpu_best_simd() : cfg.simd;
    if (!fls_cpu_simd_supported(simd))
        return FLS_ERR_UNSUPPORTED;

    fls_context_t *c = calloc(1, sizeof *c);
    if (!c)
        return FLS_ERR_OUT_OF_MEMORY;
    c->config = cfg;
    c->engine = cfg.engine;
    c->threads = cfg.threads ? cfg.threads : online_cores();
    c->simd = simd;
    if (cfg.engine == FLS_ENGINE_CUDA) {
        fls_status st = fls_cuda_context_init(c);
        if (st != FLS_OK) {
            free(c);
            return st;
        }
    }
    *ctx = c;
    return FLS_OK;
}

void fls_context_destroy(fls_context_t *ctx)
{
    if (!ctx)
        return;
    if (ctx->engine == FLS_ENGINE_CUDA)
        fls_cuda_context_fini(ctx);
    free(ctx);
}

fls_engine fls_context_engine(const fls_context_t *ctx)
{
    return ctx ? ctx->engine : FLS_ENGINE_CPU;
}

int fls_context_threads(const fls_context_t *ctx)
{
    return ctx ? ctx->threads : 0;
}

fls_simd fls_context_simd(const fls_context_t *ctx)
{
    return ctx ? ctx->simd : FLS_SIMD_AUTO;
}

int fls_cuda_available(void)
{
    return fls_cuda_available_impl();
}

fls_status fls_context_sync(fls_context_t *ctx)
{
    if (!ctx)
        return FLS_ERR_NULL;
    return ctx->engine == FLS_ENGINE_CUDA ? fls_cuda_sync(ctx) : FLS_OK;
}

int fls_cuda_built(void)
{
    return fls_cuda_built_impl();
}

fls_status fls_device_malloc(void **ptr, size_t bytes)
{
    return fls_cuda_malloc(ptr, bytes);
}

void fls_device_free(void *ptr)
{
    fls_cuda_free(ptr);
}

fls_status fls_device_upload(void *device_dst, const void *host_src, size_t bytes)
{
    return fls_cuda_memcpy(device_dst, host_src, bytes, 1);
}

fls_status fls_device_download(void *host_dst, const void *device_src, size_t bytes)
{
    return fls_cuda_memcpy(host_dst, device_src, bytes, 0);
}

/* ---- validation ---- */

static fls_status check_matrix(const fls_matrix *m)
{
    if (!m || !m->data)
        return FLS_ERR_NULL;
    size_t es = fls_dtype_size(m->dtype);
    if (es == 0)
        return FLS_ERR_DTYPE;
    if (((uintptr_t)m->data) % es != 0)
        return FLS_ERR_ALIGN;
    if (m->rows <= 0 || m->cols <= 0)
        return FLS_ERR_SIZE;
    if (m->ld < m->cols)
        return FLS_ERR_SHAPE;
    /* the last element's byte offset must fit comfortably in int64 */
    const int64_t lim = INT64_MAX / 16;
    if (m->rows > lim / m->ld || (m->rows - 1) * m->ld + m->cols > lim / (int64_t)es)
        return FLS_ERR_SIZE;
    return FLS_OK;
}

static int ptr_aligned(const void *p, size_t a)
{
    return ((uintptr_t)p) % a == 0;
}

/* Writes why (printf-style) into why[cap] when why is not NULL. */
static fls_status refuse(fls_status st, char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static fls_status refuse(fls_status st, char *why, size_t cap, const char *fmt, ...)
{
    if (why && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* " (row b)" for a per-row array's entry, "" for a scalar. */
static const char *row_of(int per_row, int64_t b, char *buf, size_t cap)
{
    if (!per_row)
        return "";
    snprintf(buf, cap, " (row %lld)", (long long)b);
    return buf;
}

/* The rule family's parameters: every value in range, every array aligned;
 * FLS_ERR_PARAM otherwise (docs/RULES.md), with why (may be NULL) naming the
 * field, the row and the range. */
static fls_status check_rule_params(const fls_params *p, int64_t B, int64_t V, char *why, size_t cap)
{
    char rb[32];
    if ((p->row_top_k && !ptr_aligned(p->row_top_k, sizeof(int64_t))) ||
        (p->row_top_p && !ptr_aligned(p->row_top_p, sizeof(float))) ||
        (p->row_min_p && !ptr_aligned(p->row_min_p, sizeof(float))) ||
        (p->row_without_replacement_k && !ptr_aligned(p->row_without_replacement_k, sizeof(int64_t))) ||
        (p->row_filter_value && !ptr_aligned(p->row_filter_value, sizeof(double))))
        return refuse(FLS_ERR_ALIGN, why, cap, "a per-row rule array is misaligned for its dtype");
    if (p->without_replacement_k < 0 || p->without_replacement_k > V)
        return refuse(FLS_ERR_PARAM, why, cap,
                      "without_replacement_k = %lld is out of range: 0 (off) .. V = %lld",
                      (long long)p->without_replacement_k, (long long)V);
    if (p->row_without_replacement_k && p->without_replacement_k == 0)
        return refuse(FLS_ERR_PARAM, why, cap,
                      "row_without_replacement_k needs without_replacement_k (the largest K of the rows)");
    const int extra = p->filter ? fls_filter_lookup(p->filter) : -1;
    /* `filter` names a registry rule without a field of its own; the three built-ins have theirs */
    if (p->filter && extra < 0)
        return refuse(FLS_ERR_PARAM, why, cap, "filter \"%s\" is no rule of the registry", p->filter);
    if (p->filter && extra <= FLS_FILTER_TOP_P)
        return refuse(FLS_ERR_PARAM, why, cap,
                      "filter \"%s\": set its own field (min_p, top_k, top_p) instead", p->filter);
    if (!p->filter && p->row_filter_value)
        return refuse(FLS_ERR_PARAM, why, cap, "row_filter_value needs filter (the rule it sets)");
    for (int64_t b = 0; b < B; b++) {
        const int64_t k = p->row_top_k ? p->row_top_k[b] : p->top_k;
        const float tp = p->row_top_p ? p->row_top_p[b] : p->top_p;
        const float mp = p->row_min_p ? p->row_min_p[b] : p->min_p;
        if (k < 0 || k > V)
            return refuse(FLS_ERR_PARAM, why, cap, "top_k = %lld%s is out of range: 0 (off) .. V = %lld",
                          (long long)k, row_of(p->row_top_k != NULL, b, rb, sizeof rb), (long long)V);
        if (!fls_top_p_valid(tp))
            return refuse(FLS_ERR_PARAM, why, cap, "top_p = %g%s is out of range: %s", (double)tp,
                          row_of(p->row_top_p != NULL, b, rb, sizeof rb),
                          fls_filters[FLS_FILTER_TOP_P].range);
        if (!fls_min_p_valid(mp))
            return refuse(FLS_ERR_PARAM, why, cap, "min_p = %g%s is out of range: %s", (double)mp,
                          row_of(p->row_min_p != NULL, b, rb, sizeof rb),
                          fls_filters[FLS_FILTER_MIN_P].range);
        const double fv = p->row_filter_value ? p->row_filter_value[b] : p->filter_value;
        if (extra >= 0 && !fls_filter_valid(extra, fv))
            return refuse(FLS_ERR_PARAM, why, cap, "filter_value = %g%s of \"%s\" is out of range: %s", fv,
                          row_of(p->row_filter_value != NULL, b, rb, sizeof rb), p->filter,
                          fls_filters[extra].range);
        if (p->row_without_replacement_k && (p->row_without_replacement_k[b] < 1 ||
                                             p->row_without_replacement_k[b] > p->without_replacement_k))
            return refuse(
                FLS_ERR_PARAM, why, cap,
                "row_without_replacement_k = %lld (row %lld) is out of range: 1 .. without_replacement_k "
                "= %lld",
                (long long)p->row_without_replacement_k[b], (long long)b,
                (long long)p->without_replacement_k);
        if (!p->row_top_k && !p->row_top_p && !p->row_min_p && !p->row_without_replacement_k &&
            !p->row_filter_value)
            break; /* scalars only: one row says it all */
    }
    return FLS_OK;
}

/* ---- masks, bias and penalties (docs/RULES.md) ---- */

/* Whether params use any of them (any field off its default but the
 * bitmask's layout): the engines and methods that do not take them refuse
 * exactly these calls. */
static int mods_present(const fls_params *p)
{
    return p->allowed_bitmask || p->bitmask_rows || p->logit_bias_k != 0 || p->seen_k != 0 ||
           p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f ||
           p->row_repetition_penalty || p->row_presence_penalty || p->row_frequency_penalty;
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The first id listed twice among the n ids (-1 padding aside) of one row,
 * or -1; tmp holds n entries. */
static int64_t repeated_id(const int64_t *ids, int64_t n, int64_t *tmp)
{
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] != -1)
            tmp[m++] = ids[i];
    qsort(tmp, (size_t)m, sizeof *tmp, cmp_i64);
    for (int64_t i = 1; i < m; i++)
        if (tmp[i] == tmp[i - 1])
            return tmp[i];
    return -1;
}

/* Every mask, bias and penalty value in range and every array aligned;
 * FLS_ERR_PARAM (FLS_ERR_ALIGN, FLS_ERR_SIZE) otherwise, with why naming
 * the field, the row and the value. */
static fls_status check_mods(const fls_params *p, int64_t B, int64_t V, char *why, size_t cap)
{
    char rb[32];
    if ((p->allowed_bitmask && !ptr_aligned(p->allowed_bitmask, sizeof(int32_t))) ||
        (p->logit_bias_ids && !ptr_aligned(p->logit_bias_ids, sizeof(int64_t))) ||
        (p->logit_bias_values && !ptr_aligned(p->logit_bias_values, sizeof(float))) ||
        (p->seen_ids && !ptr_aligned(p->seen_ids, sizeof(int64_t))) ||
        (p->seen_counts && !ptr_aligned(p->seen_counts, sizeof(int32_t))) ||
        (p->row_repetition_penalty && !ptr_aligned(p->row_repetition_penalty, sizeof(float))) ||
        (p->row_presence_penalty && !ptr_aligned(p->row_presence_penalty, sizeof(float))) ||
        (p->row_frequency_penalty && !ptr_aligned(p->row_frequency_penalty, sizeof(float))))
        return refuse(FLS_ERR_ALIGN, why, cap, "a mask, bias or penalty array is misaligned for its dtype");
    const int64_t words = (V + 31) / 32;
    if (p->bitmask_ld < 0 || (p->bitmask_ld > 0 && p->bitmask_ld < words))
        return refuse(FLS_ERR_PARAM, why, cap,
                      "bitmask_ld = %lld is out of range: 0 (ceil(V / 32)) or >= ceil(V / 32) = %lld",
                      (long long)p->bitmask_ld, (long long)words);
    if (p->bitmask_rows && !p->allowed_bitmask)
        return refuse(FLS_ERR_PARAM, why, cap, "bitmask_rows needs allowed_bitmask (the masks it selects)");
    if (p->logit_bias_k < 0)
        return refuse(FLS_ERR_PARAM, why, cap, "logit_bias_k = %lld is out of range: >= 0",
                      (long long)p->logit_bias_k);
    if (p->logit_bias_k > 0 && (!p->logit_bias_ids || !p->logit_bias_values))
        return refuse(FLS_ERR_PARAM, why, cap,
                      "logit_bias_k = %lld needs logit_bias_ids and logit_bias_values (one is NULL)",
                      (long long)p->logit_bias_k);
    if (p->seen_k < 0)
        return refuse(FLS_ERR_PARAM, why, cap, "seen_k = %lld is out of range: >= 0", (long long)p->seen_k);
    if (p->seen_k > 0 && !p->seen_ids)
        return refuse(FLS_ERR_PARAM, why, cap, "seen_k = %lld needs seen_ids (it is NULL)",
                      (long long)p->seen_k);
    const int64_t lim = INT64_MAX / 64 / B;
    if (p->logit_bias_k > lim || p->seen_k > lim - p->logit_bias_k || p->bitmask_ld > lim)
        return refuse(FLS_ERR_SIZE, why, cap,
                      "logit_bias_k = %lld, seen_k = %lld, bitmask_ld = %lld: too large",
                      (long long)p->logit_bias_k, (long long)p->seen_k, (long long)p->bitmask_ld);
    const int64_t K = p->logit_bias_k, S = p->seen_k;
    if (p->params_on_device) {
        /* device arrays: the CUDA engine checks their values on the device
         * (the call's status); the scalars are checked here */
        if (!p->row_repetition_penalty && !(isfinite(p->repetition_penalty) && p->repetition_penalty > 0.0f))
            return refuse(FLS_ERR_PARAM, why, cap, "repetition_penalty = %g is out of range: finite and > 0",
                          (double)p->repetition_penalty);
        if (!p->row_presence_penalty && !isfinite(p->presence_penalty))
            return refuse(FLS_ERR_PARAM, why, cap, "presence_penalty = %g is out of range: finite",
                          (double)p->presence_penalty);
        if (!p->row_frequency_penalty && !isfinite(p->frequency_penalty))
            return refuse(FLS_ERR_PARAM, why, cap, "frequency_penalty = %g is out of range: finite",
                          (double)p->frequency_penalty);
        return FLS_OK;
    }
    int64_t *tmp = NULL;
    if (K > 0 || S > 0) {
        tmp = malloc((size_t)(K > S ? K : S) * sizeof *tmp);
        if (!tmp)
            return refuse(FLS_ERR_OUT_OF_MEMORY, why, cap, "no memory to check the bias and seen lists");
    }
    fls_status st = FLS_OK;
    for (int64_t b = 0; b < B && st == FLS_OK; b++) {
        const float r = p->row_repetition_penalty ? p->row_repetition_penalty[b] : p->repetition_penalty;
        const float pr = p->row_presence_penalty ? p->row_presence_penalty[b] : p->presence_penalty;
        const float fr = p->row_frequency_penalty ? p->row_frequency_penalty[b] : p->frequency_penalty;
        if (!(isfinite(r) && r > 0.0f))
            st = refuse(FLS_ERR_PARAM, why, cap, "repetition_penalty = %g%s is out of range: finite and > 0",
                        (double)r, row_of(p->row_repetition_penalty != NULL, b, rb, sizeof rb));
        else if (!isfinite(pr))
            st = refuse(FLS_ERR_PARAM, why, cap, "presence_penalty = %g%s is out of range: finite",
                        (double)pr, row_of(p->row_presence_penalty != NULL, b, rb, sizeof rb));
        else if (!isfinite(fr))
            st = refuse(FLS_ERR_PARAM, why, cap, "frequency_penalty = %g%s is out of range: finite",
                        (double)fr, row_of(p->row_frequency_penalty != NULL, b, rb, sizeof rb));
        for (int64_t i = 0; i < K && st == FLS_OK; i++) {
            const int64_t id = p->logit_bias_ids[b * K + i];
            const float v = p->logit_bias_values[b * K + i];
            if (id != -1 && (id < 0 || id >= V))
                st = refuse(FLS_ERR_PARAM, why, cap,
                            "logit_bias_ids = %lld (row %lld) is out of range: 0 .. V - 1 = %lld, or -1 "
                            "(padding)",
                            (long long)id, (long long)b, (long long)(V - 1));
            else if (id != -1 && !isfinite(v))
                st = refuse(FLS_ERR_PARAM, why, cap,
                            "logit_bias_values = %g (row %lld, token %lld) is out of range: finite",
                            (double)v, (long long)b, (long long)id);
        }
        for (int64_t i = 0; i < S && st == FLS_OK; i++) {
            const int64_t id = p->seen_ids[b * S + i];
            const int32_t c = p->seen_counts ? p->seen_counts[b * S + i] : 0;
            if (id != -1 && (id < 0 || id >= V))
                st = refuse(FLS_ERR_PARAM, why, cap,
                            "seen_ids = %lld (row %lld) is out of range: 0 .. V - 1 = %lld, or -1 (padding)",
                            (long long)id, (long long)b, (long long)(V - 1));
            else if (id != -1 && c < 0)
                st = refuse(FLS_ERR_PARAM, why, cap,
                            "seen_counts = %d (row %lld, token %lld) is out of range: >= 0", (int)c,
                            (long long)b, (long long)id);
        }
        int64_t dup;
        if (st == FLS_OK && K > 0 && (dup = repeated_id(p->logit_bias_ids + b * K, K, tmp)) >= 0)
            st =
                refuse(FLS_ERR_PARAM, why, cap, "logit_bias_ids = %lld (row %lld) is listed twice in the row",
                       (long long)dup, (long long)b);
        if (st == FLS_OK && S > 0 && (dup = repeated_id(p->seen_ids + b * S, S, tmp)) >= 0)
            st = refuse(FLS_ERR_PARAM, why, cap, "seen_ids = %lld (row %lld) is listed twice in the row",
                        (long long)dup, (long long)b);
        if (K == 0 && S == 0 && !p->row_repetition_penalty && !p->row_presence_penalty &&
            !p->row_frequency_penalty)
            break; /* scalars only: one row says it all */
    }
    free(tmp);
    return st;
}

static int cmp_mod(const void *a, const void *b)
{
    const fls_mod_entry *x = a, *y = b;
    return (x->token > y->token) - (x->token < y->token);
}

/* The rows' changes (validated params) into one malloc'ed block: B row
 * headers, then each row's entries sorted by token, a token in both lists
 * merged into one entry. *out NULL when params use none. */
static fls_status resolve_mods(const fls_params *p, int64_t B, int64_t V, const fls_row_mods **out)
{
    *out = NULL;
    if (!mods_present(p))
        return FLS_OK;
    const int64_t K = p->logit_bias_k, S = p->seen_k, per = K + S;
    const int64_t ld = p->bitmask_ld ? p->bitmask_ld : (V + 31) / 32;
    if ((uint64_t)B * (uint64_t)per > (SIZE_MAX - (size_t)B * sizeof(fls_row_mods)) / sizeof(fls_mod_entry))
        return FLS_ERR_SIZE;
    char *block = malloc((size_t)B * sizeof(fls_row_mods) + (size_t)(B * per) * sizeof(fls_mod_entry));
    if (!block)
        return FLS_ERR_OUT_OF_MEMORY;
    fls_row_mods *rows = (fls_row_mods *)block;
    fls_mod_entry *all = (fls_mod_entry *)(block + (size_t)B * sizeof(fls_row_mods));
    for (int64_t b = 0; b < B; b++) {
        fls_mod_entry *e = all + b * per;
        int64_t n = 0;
        for (int64_t i = 0; i < S; i++)
            if (p->seen_ids[b * S + i] != -1)
                e[n++] = (fls_mod_entry){p->seen_ids[b * S + i],
                                         p->seen_counts ? p->seen_counts[b * S + i] : 0, 0, 0.0f, 0};
        for (int64_t i = 0; i < K; i++)
            if (p->logit_bias_ids[b * K + i] != -1)
                e[n++] =
                    (fls_mod_entry){p->logit_bias_ids[b * K + i], -1, 1, p->logit_bias_values[b * K + i], 0};
        qsort(e, (size_t)n, sizeof *e, cmp_mod);
        /* each list holds a token at most once: equal neighbours are one
         * seen entry and one bias entry */
        int64_t m = 0;
        for (int64_t i = 0; i < n; i++) {
            if (m > 0 && e[m - 1].token == e[i].token) {
                if (e[i].seen >= 0)
                    e[m - 1].seen = e[i].seen;
                if (e[i].has_bias) {
                    e[m - 1].has_bias = 1;
                    e[m - 1].bias = e[i].bias;
                }
            } else {
                e[m++] = e[i];
            }
        }
        rows[b].e = e;
        rows[b].n = m;
        rows[b].mask = p->allowed_bitmask && (!p->bitmask_rows || p->bitmask_rows[b])
                           ? p->allowed_bitmask + b * ld
                           : NULL;
        rows[b].repetition = p->row_repetition_penalty ? p->row_repetition_penalty[b] : p->repetition_penalty;
        rows[b].presence = p->row_presence_penalty ? p->row_presence_penalty[b] : p->presence_penalty;
        rows[b].frequency = p->row_frequency_penalty ? p->row_frequency_penalty[b] : p->frequency_penalty;
        rows[b].pad_ = 0;
    }
    *out = rows;
    return FLS_OK;
}

/* The documented order and fp32 operations (docs/RULES.md); every path
 * that samples calls this once on each raw logit it reads, never twice. */
void fls_mods_apply(const fls_row_mods *m, float *x, int64_t v0, int64_t nv)
{
    const int64_t v1 = v0 + nv;
    int64_t lo = 0, hi = m->n;
    while (lo < hi) { /* the first entry at or past v0 */
        const int64_t mid = lo + (hi - lo) / 2;
        if (m->e[mid].token < v0)
            lo = mid + 1;
        else
            hi = mid;
    }
    const float r = m->repetition;
    for (int64_t i = lo; i < m->n && m->e[i].token < v1; i++) {
        const fls_mod_entry *e = &m->e[i];
        float l = x[e->token - v0];
        if (e->seen >= 0) {
            if (r != 1.0f)
                l = l > 0.0f ? l / r : l * r;
            const float fc = m->frequency * (float)e->seen;
            l = l - fc;
            l = l - (e->seen > 0 ? m->presence : 0.0f);
        }
        if (e->has_bias)
            l = l + e->bias;
        x[e->token - v0] = l;
    }
    if (m->mask)
        for (int64_t v = v0; v < v1; v++)
            if (!(((uint32_t)m->mask[v >> 5] >> (v & 31)) & 1u))
                x[v - v0] = -INFINITY;
}

/* The caller's fields as they are (the CUDA engine's input). */
static void raw_mods_of(const fls_params *p, int64_t V, fls_request *req)
{
    memset(&req->raw_mods, 0, sizeof req->raw_mods);
    req->has_raw_mods = mods_present(p);
    if (!req->has_raw_mods)
        return;
    fls_mods_raw *m = &req->raw_mods;
    m->mask = p->allowed_bitmask;
    m->mask_ld = p->bitmask_ld ? p->bitmask_ld : (V + 31) / 32;
    m->mask_rows = p->bitmask_rows;
    m->bias_k = p->logit_bias_k;
    m->bias_ids = m->bias_k ? p->logit_bias_ids : NULL;
    m->bias_values = m->bias_k ? p->logit_bias_values : NULL;
    m->seen_k = p->seen_k;
    m->seen_ids = m->seen_k ? p->seen_ids : NULL;
    m->seen_counts = m->seen_k ? p->seen_counts : NULL;
    m->repetition = p->repetition_penalty;
    m->presence = p->presence_penalty;
    m->frequency = p->frequency_penalty;
    m->row_repetition = p->row_repetition_penalty;
    m->row_presence = p->row_presence_penalty;
    m->row_frequency = p->row_frequency_penalty;
}

/* Whether any row uses a filter or draws more than one token. */
static int rule_active(const fls_params *p, int64_t B)
{
    if (p->without_replacement_k > 0 || p->filter)
        return 1;
    for (int64_t b = 0; b < B; b++) {
        if ((p->row_top_k ? p->row_top_k[b] : p->top_k) != 0 ||
            (p->row_top_p ? p->row_top_p[b] : p->top_p) != 1.0f ||
            (p->row_min_p ? p->row_min_p[b] : p->min_p) != 0.0f)
            return 1;
        if (!p->row_top_k && !p->row_top_p && !p->row_min_p)
            break;
    }
    return 0;
}

/* The rows' rule values (host arrays or scalars) into *rule_out (malloc'ed,
 * B rows; NULL when no rule is active) and the statistics they need. */
static fls_status resolve_rules(const fls_params *p, int64_t B, int64_t K, fls_row_rule **rule_out,
                                unsigned *needs_out)
{
    *rule_out = NULL;
    *needs_out = 0;
    if (!rule_active(p, B))
        return FLS_OK;
    fls_row_rule *rule = malloc((size_t)B * sizeof *rule);
    if (!rule)
        return FLS_ERR_OUT_OF_MEMORY;
    unsigned needs = 0;
    const int extra = p->filter ? fls_filter_lookup(p->filter) : -1;
    for (int64_t b = 0; b < B; b++) {
        fls_row_rule *r = &rule[b];
        for (int id = 0; id < FLS_FILTER_COUNT; id++)
            r->value[id] = fls_filters[id].off;
        /* the public fields of the three built-ins, then `filter` */
        r->value[FLS_FILTER_MIN_P] = p->row_min_p ? p->row_min_p[b] : p->min_p;
        r->value[FLS_FILTER_TOP_K] = (double)(p->row_top_k ? p->row_top_k[b] : p->top_k);
        r->value[FLS_FILTER_TOP_P] = p->row_top_p ? p->row_top_p[b] : p->top_p;
        if (extra >= 0)
            r->value[extra] = p->row_filter_value ? p->row_filter_value[b] : p->filter_value;
        needs |= fls_filter_row_needs(r->value);
        r->K = p->without_replacement_k == 0
                   ? 1
                   : (p->row_without_replacement_k ? p->row_without_replacement_k[b] : K);
    }
    *rule_out = rule;
    *needs_out = needs;
    return FLS_OK;
}

/* What a call checks of params alone, in the calls' order (method, group
 * size, the rule family, draws), with why (may be NULL) in words; the
 * sampling calls and fls_params_explain share it, so they refuse alike. */
static fls_status check_params(const fls_params *p, int64_t B, int64_t V, char *why, size_t cap)
{
    if (p->method < FLS_METHOD_FUSED || p->method > FLS_METHOD_GROUPED)
        return refuse(FLS_ERR_PARAM, why, cap, "method = %d is no fls_method", (int)p->method);
    const int64_t gs = p->group_size ? p->group_size : FLS_GROUP_SIZE_DEFAULT;
    if (p->group_size < 0 || gs < 2 || gs > ((int64_t)1 << 20) || (gs & (gs - 1)))
        return refuse(FLS_ERR_PARAM, why, cap,
                      "group_size = %lld is out of range: a power of two in [2, 2^20], or 0 (the default)",
                      (long long)p->group_size);
    const fls_status rst = check_rule_params(p, B, V, why, cap);
    if (rst != FLS_OK)
        return rst;
    const fls_status mst = check_mods(p, B, V, why, cap);
    if (mst != FLS_OK)
        return mst;
    if (p->noise != FLS_NOISE_PER_TOKEN && p->noise != FLS_NOISE_MIN_FIRST)
        return refuse(FLS_ERR_PARAM, why, cap, "noise = %d is no fls_noise", (int)p->noise);
    if (p->noise == FLS_NOISE_MIN_FIRST) {
        if (p->method != FLS_METHOD_FUSED && p->method != FLS_METHOD_UNFUSED_GUMBEL)
            return refuse(FLS_ERR_UNSUPPORTED, why, cap,
                          "noise = FLS_NOISE_MIN_FIRST takes the flat method (FUSED or UNFUSED_GUMBEL), not "
                          "method = %d",
                          (int)p->method);
        if (rule_active(p, B) || p->without_replacement_k != 0)
            return refuse(FLS_ERR_UNSUPPORTED, why, cap,
                          "noise = FLS_NOISE_MIN_FIRST takes no rule (top-k, top-p, min-p, filter, "
                          "without replacement)");
        if (V > FLS_MF_VOCAB_MAX)
            return refuse(FLS_ERR_SIZE, why, cap, "noise = FLS_NOISE_MIN_FIRST takes V <= 2^32, not %lld",
                          (long long)V);
    }
    if (p->draws < 1 || p->draws > (int64_t)UINT32_MAX || p->first_draw < 0 ||
        p->first_draw > (int64_t)UINT32_MAX - p->draws)
        return refuse(FLS_ERR_SIZE, why, cap,
                      "draws = %lld, first_draw = %lld: need 1 <= draws and first_draw + draws < 2^32",
                      (long long)p->draws, (long long)p->first_draw);
    return FLS_OK;
}

fls_status fls_params_explain(const fls_params *params, int64_t B, int64_t V, char *message, size_t size)
{
    if (message && size)
        message[0] = '\0';
    if (!params)
        return refuse(FLS_ERR_NULL, message, size, "params is NULL");
    if (B < 1 || V < 1)
        return refuse(FLS_ERR_SIZE, message, size, "B = %lld and V = %lld must be at least 1", (long long)B,
                      (long long)V);
    fls_params pv;
    if (params_upgrade(params, &pv) != FLS_OK)
        return refuse(FLS_ERR_PARAM, message, size,
                      "struct_size = %zu is no fls_params layout this library knows (fill it with "
                      "fls_params_default)",
                      params->struct_size);
    const fls_params *p = &pv;
    const fls_status st = check_params(p, B, V, message, size);
    if (st != FLS_OK)
        return st;
    if (!p->params_on_device && !p->temperature &&
        !(isfinite(p->temperature_value) && p->temperature_value >= 0.0f))
        return refuse(FLS_ERR_TEMPERATURE, message, size, "temperature_value = %g: must be finite and >= 0",
                      (double)p->temperature_value);
    if (!p->params_on_device && p->temperature)
        for (int64_t b = 0; b < B; b++)
            if (!(isfinite(p->temperature[b]) && p->temperature[b] >= 0.0f))
                return refuse(FLS_ERR_TEMPERATURE, message, size,
                              "temperature = %g (row %lld): must be finite and >= 0",
                              (double)p->temperature[b], (long long)b);
    return FLS_OK;
}

/* Validates params and outputs for a (B, V) request and resolves the rows.
 * out NULL: a request whose outputs come later (a stream's, checked at
 * finalize). On success *rows_out is a malloc'ed array of B rows (caller
 * frees). */
fls_status fls_resolve_request(const fls_context_t *ctx, const fls_params *params, const fls_outputs *out,
                               int64_t B, int64_t V, fls_request *req, fls_row_params **rows_out)
{
    if (!params || (out && !out->tokens))
        return FLS_ERR_NULL;
    fls_params pv;
    fls_status vst = params_upgrade(params, &pv);
    if (vst != FLS_OK)
        return vst;
    const fls_params *p = &pv;
    if (out &&
        (!ptr_aligned(out->tokens, sizeof(int64_t)) || (out->logsumexp && !ptr_aligned(out->logsumexp, 4)) ||
         (out->logprobs && !ptr_aligned(out->logprobs, 4))))
        return FLS_ERR_ALIGN;
    if ((p->temperature && !ptr_aligned(p->temperature, sizeof(float))) ||
        (p->row_seeds && !ptr_aligned(p->row_seeds, sizeof(uint64_t))) ||
        (p->row_offsets && !ptr_aligned(p->row_offsets, sizeof(uint64_t))))
        return FLS_ERR_ALIGN;
    const fls_status pst = check_params(p, B, V, NULL, 0);
    if (pst != FLS_OK)
        return pst;
    const int64_t gs = p->group_size ? p->group_size : FLS_GROUP_SIZE_DEFAULT;
    if (V >= ((int64_t)1 << 33) - 1)
        return FLS_ERR_SIZE;
    const int64_t K = p->without_replacement_k > 0 ? p->without_replacement_k : 1;
    if (B > INT64_MAX / 16 / p->draws / K)
        return FLS_ERR_SIZE;
    if (K > 1 && p->method == FLS_METHOD_UNFUSED_MULTINOMIAL)
        return FLS_ERR_UNSUPPORTED; /* the multinomial baseline draws one token per draw */
    if (p->method == FLS_METHOD_GROUPED && rule_active(p, B))
        return FLS_ERR_UNSUPPORTED; /* filters need the row's maximum first (docs/GROUPED.md) */
    if (ctx->engine == FLS_ENGINE_CUDA && mods_present(p) && p->logit_bias_k + p->seen_k > FLS_CUDA_MODS_MAX)
        return FLS_ERR_UNSUPPORTED; /* the device sorts a row's lists in shared memory */
    if (out && ctx->engine == FLS_ENGINE_CUDA) {
        fls_status st = fls_cuda_check_device_pointer(out->tokens);
        if (st == FLS_OK && out->logsumexp)
            st = fls_cuda_check_device_pointer(out->logsumexp);
        if (st == FLS_OK && out->logprobs)
            st = fls_cuda_check_device_pointer(out->logprobs);
        if (st != FLS_OK)
            return st;
    }
    if (p->params_on_device) {
        /* the CUDA engine reads (and checks) them on the device */
        if (ctx->engine != FLS_ENGINE_CUDA)
            return FLS_ERR_PARAM;
        fls_status st = FLS_OK;
        if (p->temperature)
            st = fls_cuda_check_device_pointer(p->temperature);
        if (st == FLS_OK && p->row_seeds)
            st = fls_cuda_check_device_pointer(p->row_seeds);
        if (st == FLS_OK && p->row_offsets)
            st = fls_cuda_check_device_pointer(p->row_offsets);
        const void *const mod_arrays[] = {p->allowed_bitmask,
                                          p->bitmask_rows,
                                          p->logit_bias_ids,
                                          p->logit_bias_values,
                                          p->seen_ids,
                                          p->seen_counts,
                                          p->row_repetition_penalty,
                                          p->row_presence_penalty,
                                          p->row_frequency_penalty};
        for (size_t i = 0; i < sizeof mod_arrays / sizeof mod_arrays[0] && st == FLS_OK; i++)
            if (mod_arrays[i])
                st = fls_cuda_check_device_pointer(mod_arrays[i]);
        if (st != FLS_OK)
            return st;
        if (!p->temperature && !(isfinite(p->temperature_value) && p->temperature_value >= 0.0f))
            return FLS_ERR_TEMPERATURE;
        /* a rule's values stay host-side (scalars or host arrays); the CUDA
         * engine takes them in async mode and under capture (docs/GPU.md) */
        fls_row_rule *rule = NULL;
        unsigned needs = 0;
        if (resolve_rules(p, B, K, &rule, &needs) != FLS_OK)
            return FLS_ERR_OUT_OF_MEMORY;
        req->rows = NULL;
        req->batch = B;
        req->vocab = V;
        req->draws = p->draws;
        req->first_draw = (uint32_t)p->first_draw;
        req->method = p->method;
        req->rule = rule;
        req->K = K;
        req->needs = needs;
        req->second_pass_rows = NULL;
        req->group_size = gs;
        req->noise = p->noise;
        req->mods = NULL;
        raw_mods_of(p, V, req);
        req->params_on_device = 1;
        req->dev_temperature = p->temperature;
        req->temperature_value = p->temperature_value == 0.0f ? 0.0f : p->temperature_value;
        req->dev_row_seeds = p->row_seeds;
        req->seed = p->seed;
        req->dev_row_offsets = p->row_offsets;
        req->offset = p->offset;
        *rows_out = NULL;
        return FLS_OK;
    }
    if (!p->temperature && !(isfinite(p->temperature_value) && p->temperature_value >= 0.0f))
        return FLS_ERR_TEMPERATURE;
    if (p->temperature) {
        for (int64_t b = 0; b < B; b++)
            if (!(isfinite(p->temperature[b]) && p->temperature[b] >= 0.0f))
                return FLS_ERR_TEMPERATURE;
    }

    fls_row_params *rows = malloc((size_t)B * sizeof *rows);
    if (!rows)
        return FLS_ERR_OUT_OF_MEMORY;
    fls_row_rule *rule = NULL;
    unsigned needs = 0;
    if (resolve_rules(p, B, K, &rule, &needs) != FLS_OK) {
        free(rows);
        return FLS_ERR_OUT_OF_MEMORY;
    }
    const fls_row_mods *mods = NULL;
    /* the CPU engine applies resolved lists; the CUDA engine sorts them itself */
    const fls_status mst = ctx->engine == FLS_ENGINE_CPU ? resolve_mods(p, B, V, &mods) : FLS_OK;
    if (mst != FLS_OK) {
        free(rows);
        free(rule);
        return mst;
    }
    for (int64_t b = 0; b < B; b++) {
        rows[b].temperature = p->temperature ? p->temperature[b] : p->temperature_value;
        /* -0.0 is greedy too */
        if (rows[b].temperature == 0.0f)
            rows[b].temperature = 0.0f;
        rows[b].pad_ = 0;
        rows[b].seed = p->row_seeds ? p->row_seeds[b] : fls_row_seed(p->seed, (uint64_t)b);
        rows[b].offset = p->row_offsets ? p->row_offsets[b] : p->offset;
    }
    req->rows = rows;
    req->batch = B;
    req->vocab = V;
    req->draws = p->draws;
    req->first_draw = (uint32_t)p->first_draw;
    req->method = p->method;
    req->rule = rule;
    req->K = K;
    req->needs = needs;
    req->second_pass_rows = NULL;
    req->group_size = gs;
    req->noise = p->noise;
    req->mods = mods;
    raw_mods_of(p, V, req);
    req->params_on_device = 0;
    req->dev_temperature = NULL;
    req->dev_row_seeds = NULL;
    req->dev_row_offsets = NULL;
    *rows_out = rows;
    return FLS_OK;
}

static fls_status check_inputs_memory(const fls_context_t *ctx, const fls_matrix *a, const fls_matrix *b)
{
    if (ctx->engine != FLS_ENGINE_CUDA)
        return FLS_OK;
    fls_status st = fls_cuda_check_device_pointer(a->data);
    if (st == FLS_OK && b)
        st = fls_cuda_check_device_pointer(b->data);
    return st;
}

static void count_call(fls_context_t *ctx, const fls_request *req, fls_status st, uint64_t second)
{
    if (st != FLS_OK)
        return;
    ctx->counters.calls++;
    ctx->counters.rows += (uint64_t)req->batch;
    ctx->counters.second_pass_rows += second;
}

void fls_counters_default(fls_counters *counters)
{
    if (!counters)
        return;
    memset(counters, 0, sizeof *counters);
    counters->struct_size = sizeof *counters;
}

fls_status fls_context_counters(const fls_context_t *ctx, fls_counters *counters)
{
    if (!ctx || !counters)
        return FLS_ERR_NULL;
    if (counters->struct_size < sizeof(size_t) + 3 * sizeof(uint64_t) ||
        counters->struct_size > sizeof *counters)
        return FLS_ERR_PARAM;
    fls_counters c = ctx->counters;
    c.struct_size = counters->struct_size;
    memcpy(counters, &c, counters->struct_size);
    return FLS_OK;
}

fls_status fls_sample_fused(fls_context_t *ctx, const fls_matrix *W, const fls_matrix *H,
                            const fls_params *params, const fls_outputs *out)
{
    if (!ctx || !out)
        return FLS_ERR_NULL;
    fls_status st = check_matrix(W);
    if (st == FLS_OK)
        st = check_matrix(H);
    if (st != FLS_OK)
        return st;
    if (W->cols != H->cols)
        return FLS_ERR_SHAPE;
    if ((st = check_inputs_memory(ctx, W, H)) != FLS_OK)
        return st;
    fls_request req;
    fls_row_params *rows = NULL;
    st = fls_resolve_request(ctx, params, out, H->rows, W->rows, &req, &rows);
    if (st != FLS_OK)
        return st;
    uint64_t second = 0;
    req.second_pass_rows = &second;
    if (ctx->engine == FLS_ENGINE_CUDA)
        st = fls_cuda_sample_fused(ctx, W, H, &req, out);
    else
        st = fls_cpu_sample_fused(ctx, W, H, &req, out);
    count_call(ctx, &req, st, second);
    free(rows);
    free((void *)req.rule);
    free((void *)req.mods);
    return st;
}

fls_status fls_sample_logits(fls_context_t *ctx, const fls_matrix *L, const fls_params *params,
                             const fls_outputs *out)
{
    if (!ctx || !out)
        return FLS_ERR_NULL;
    fls_status st = check_matrix(L);
    if (st != FLS_OK)
        return st;
    if ((st = check_inputs_memory(ctx, L, NULL)) != FLS_OK)
        return st;
    fls_request req;
    fls_row_params *rows = NULL;
    st = fls_resolve_request(ctx, params, out, L->rows, L->cols, &req, &rows);
    if (st != FLS_OK)
        return st;
    uint64_t second = 0;
    req.second_pass_rows = &second;
    if (ctx->engine == FLS_ENGINE_CUDA)
        st = fls_cuda_sample_logits(ctx, L, &req, out);
    else
        st = fls_cpu_sample_logits(ctx, L, &req, out);
    count_call(ctx, &req, st, second);
    free(rows);
    free((void *)req.rule);
    free((void *)req.mods);
    return st;
}
