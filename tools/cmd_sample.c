/*
 * flashsample sample — sample tokens from .npy files.
 *
 * From logits L (B, V): fls_sample_logits. From weights W (V, D) and hidden
 * states H (B, D): fls_sample_fused (logits never materialized). N draws per
 * row (draw indices 0..N-1 of the noise contract), so tokens.npy is int64
 * (B, N) and the run is reproducible from (seed or row seeds, offset).
 *
 * Without --out the tokens are never held all at once: the draws run in
 * chunks (fls_params.first_draw), each chunk's tokens are added to the
 * counts and dropped, so --counts needs B x V counts, not B x N tokens.
 *
 * Files: every output is checked before any work (it may not name an input,
 * its directory must take files), and its temporary file is created only
 * when the result is ready, then renamed over the target.
 */
#include "tools/cli.h"
#include "tools/cli_mods.h"
#include "tools/cli_rules.h"
#include "tools/cli_stream.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Tokens per call when they are not all kept: 8 MiB of int64, plus the
 * engine's per-(row, draw) states (16 bytes per thread). */
#define SAMPLE_CHUNK_TOKENS ((int64_t)1 << 20)
/* Streaming chunk when --early-finalize or --shards come without --stream-chunk. */
#define SAMPLE_STREAM_CHUNK 4096

static void sample_help(void)
{
    printf("usage: flashsample sample (--logits L.npy | --weights W.npy --hidden H.npy) [options]\n"
           "\n"
           "Samples N tokens per row, exactly from softmax(logits / T) (restricted to the support\n"
           "of the rules below, if any), by Gumbel-max with the noise of docs/NOISE.md\n"
           "(reproducible across engines, threads, batch positions, chunkings and shards).\n"
           "\n"
           "inputs (.npy, C order):\n"
           "  --logits L.npy          logits (B, V), or (V,) for one row; float32 or float16\n"
           "  --weights W.npy         LM-head weights (V, D); float32 or float16\n"
           "  --hidden H.npy          hidden states (B, D), or (D,) for one row; float32 or float16\n"
           "  --weights-dtype DT      store W as f32, f16 or bf16 (converted on load, round to nearest\n"
           "                          even; bf16 has no numpy dtype); default: the file's dtype\n"
           "  (numpy's default float64 is not read: save x.astype(np.float32))\n"
           "sampling:\n"
           "  --temperature T         T >= 0, default 1; 0 is greedy (argmax, lowest index on ties)\n"
           "  --seed S                base seed (uint64), default 0; row b uses fls_row_seed(S, b)\n"
           "  --row-seeds seeds.npy   per-row seeds, uint64 (B,) (int64 >= 0 accepted); overrides --seed\n"
           "  --offset O              decode-step offset (uint64), default 0\n"
           "  --samples N             draws per row, 1 <= N < 2^32, default 1\n"
           "  --method M              fused (default: the flat Gumbel-max), grouped (Group-Gumbel-Max,\n"
           "                          docs/GROUPED.md: its own noise, exact in distribution),\n"
           "                          unfused-gumbel or unfused-multinomial (the baselines that\n"
           "                          materialize the logits)\n"
           "  --group-size G          --method grouped: tokens per group, a power of two in [2, 2^20],\n"
           "                          default %d\n"
           "  --noise SCHEME          how the Gumbel noise is made from the seed (docs/NOISE.md):\n"
           "                          per-token (default) or min-first (each 64-token group's smallest\n"
           "                          exponential first: the same distribution, other tokens); min-first\n"
           "                          takes --method fused or unfused-gumbel, no rule, no streaming\n"
           "%s"
           "%s"
           "streaming (both engines, --method fused or grouped, no rules; the tokens of one call):\n"
           "  --stream-chunk C        feed the vocabulary to the streaming API (fls_stream_*) in\n"
           "                          chunks of C tokens; prints the chunks fed and skipped\n"
           "  --early-finalize        (with --weights/--hidden) before each chunk, bound its logits by\n"
           "                          ||w|| ||h|| (fls_chunk_max_norms, fls_logit_bound) and skip it\n"
           "                          when its noise proves it cannot win; prints the fraction of W\n"
           "                          skipped\n"
           "  --shards N              N contiguous vocabulary shards, each its own state fed in chunks,\n"
           "                          serialized to bytes, read back and merged (as tensor-parallel\n"
           "                          ranks would); the tokens of N = 1\n"
           "  (--early-finalize and --shards without --stream-chunk use chunks of %d tokens)\n"
           "engine:\n"
           "  --device cpu|cuda       default cpu\n"
           "  --threads K             CPU threads, 0 = all cores (default)\n"
           "  --simd PATH             CPU SIMD path: auto (default), portable, avx2 or avx512,\n"
           "                          which give the same tokens, or amx (bf16 W through AMX\n"
           "                          tiles: the same tokens except at near-ties)\n"
           "outputs (checked before any work; written to a temporary name when the result is\n"
           "ready and renamed: a failed or interrupted run leaves nothing):\n"
           "  --out tokens.npy        int64 (B, N); (B, N, K) with --without-replacement K\n"
           "  --counts counts.npy     int64 (B, V): how often each token was drawn in each row (every\n"
           "                          position with --without-replacement; -1 is not counted);\n"
           "                          without --out the draws run in chunks and the B x N tokens are\n"
           "                          never held in memory\n"
           "An output may not name an input (or the other output), through any path or link.\n"
           "A summary of the run and of what was written is printed on stdout; without --out\n"
           "also the first tokens of row 0; with a rule, how many rows took the exact second pass.\n"
           "\n"
           "exit status: 0 success, 1 error (bad input, I/O), 2 usage error\n",
           FLS_GROUP_SIZE_DEFAULT, cli_rule_help, cli_mods_help, SAMPLE_STREAM_CHUNK);
}

typedef struct sample_opts {
    const char *logits, *weights, *hidden, *weights_dtype, *temperature, *seed, *row_seeds, *offset, *samples,
        *device, *threads, *simd, *out, *counts, *method, *group_size, *noise, *stream_chunk, *shards;
    int early;
    cli_rule_opts rule;
    cli_mods_opts mods;
} sample_opts;

static int parse_method(const char *s, fls_method *m)
{
    static const struct {
        const char *name;
        fls_method m;
    } known[] = {{"fused", FLS_METHOD_FUSED},
                 {"grouped", FLS_METHOD_GROUPED},
                 {"unfused-gumbel", FLS_METHOD_UNFUSED_GUMBEL},
                 {"unfused-multinomial", FLS_METHOD_UNFUSED_MULTINOMIAL}};
    *m = FLS_METHOD_FUSED;
    if (!s)
        return 0;
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        if (strcmp(s, known[k].name) == 0) {
            *m = known[k].m;
            return 0;
        }
    cli_error("--method: expected fused, grouped, unfused-gumbel or unfused-multinomial, got '%s'", s);
    return -1;
}

static int parse_noise(const char *s, fls_noise *n)
{
    *n = FLS_NOISE_PER_TOKEN;
    if (!s || strcmp(s, "per-token") == 0)
        return 0;
    if (strcmp(s, "min-first") == 0) {
        *n = FLS_NOISE_MIN_FIRST;
        return 0;
    }
    cli_error("--noise: expected per-token or min-first, got '%s'", s);
    return -1;
}

static const char *method_name(fls_method m)
{
    return m == FLS_METHOD_GROUPED               ? "grouped"
           : m == FLS_METHOD_UNFUSED_GUMBEL      ? "unfused-gumbel"
           : m == FLS_METHOD_UNFUSED_MULTINOMIAL ? "unfused-multinomial"
                                                 : "fused";
}

static int parse_wdtype(const char *s, fls_dtype *dt)
{
    if (strcmp(s, "f32") == 0 || strcmp(s, "float32") == 0)
        *dt = FLS_DTYPE_F32;
    else if (strcmp(s, "f16") == 0 || strcmp(s, "float16") == 0)
        *dt = FLS_DTYPE_F16;
    else if (strcmp(s, "bf16") == 0 || strcmp(s, "bfloat16") == 0)
        *dt = FLS_DTYPE_BF16;
    else {
        cli_error("--weights-dtype: expected f32, f16 or bf16, got '%s'", s);
        return -1;
    }
    return 0;
}

/* An input that could not be read; dtype errors say what this input takes
 * (the reader's message says what the file holds). */
static void input_error(const char *opt, fls_status st, const char *err)
{
    const char *hint = "";
    if (st == FLS_ERR_DTYPE && strstr(err, "float64"))
        hint = " (numpy's default float64: save x.astype(np.float32))";
    cli_error("%s: %s%s", opt, err, hint);
}

/* Loads seeds.npy as B uint64 values. */
static int load_row_seeds(const char *path, int64_t B, uint64_t **seeds)
{
    char err[FLS_NPY_ERR_LEN];
    fls_npy_array a;
    fls_status st = fls_npy_read(path, &a, err);
    if (st != FLS_OK) {
        if (st == FLS_ERR_DTYPE)
            cli_error("--row-seeds: %s; expected uint64 ('<u8') or int64 >= 0 ('<i8')", err);
        else
            cli_error("--row-seeds: %s", err);
        return -1;
    }
    if (a.dtype != FLS_NPY_U64 && a.dtype != FLS_NPY_I64) {
        cli_error("--row-seeds: %s: dtype is %s ('%s'); expected uint64 ('<u8') or int64 >= 0 ('<i8')", path,
                  fls_npy_dtype_name(a.dtype), fls_npy_dtype_descr(a.dtype));
        fls_npy_free(&a);
        return -1;
    }
    if (a.ndim != 1 || a.shape[0] != B) {
        cli_error("--row-seeds: %s: expected shape (%lld,) (one seed per row), got %d-D with %lld entries",
                  path, (long long)B, a.ndim, (long long)a.count);
        fls_npy_free(&a);
        return -1;
    }
    if (a.dtype == FLS_NPY_I64) {
        const int64_t *v = a.data;
        for (int64_t b = 0; b < B; b++)
            if (v[b] < 0) {
                cli_error("--row-seeds: %s: seed of row %lld is negative (%lld)", path, (long long)b,
                          (long long)v[b]);
                fls_npy_free(&a);
                return -1;
            }
    }
    *seeds = a.data; /* int64 >= 0 and uint64 share the bit pattern */
    return 0;
}

static int copy_to_device(const void *host, size_t bytes, void **dev, const char *what)
{
    fls_status st = fls_device_malloc(dev, bytes);
    if (st == FLS_OK)
        st = fls_device_upload(*dev, host, bytes);
    if (st != FLS_OK) {
        cli_error("--device cuda: cannot place %s on the GPU (%zu bytes): %s", what, bytes,
                  fls_status_string(st));
        return -1;
    }
    return 0;
}

/* Whether two output paths name one file: the same directory (by device and
 * inode) and the same last component. Either may not exist yet. */
static int same_file(const char *a, const char *b)
{
    if (strcmp(a, b) == 0)
        return 1;
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    const char *ba = strrchr(a, '/'), *bb = strrchr(b, '/');
    const char *na = ba ? ba + 1 : a, *nb = bb ? bb + 1 : b;
    if (strcmp(na, nb) != 0)
        return 0;
    char da[4096], db[4096];
    snprintf(da, sizeof da, "%.*s", ba ? (int)(ba - a) + 1 : 1, ba ? a : ".");
    snprintf(db, sizeof db, "%.*s", bb ? (int)(bb - b) + 1 : 1, bb ? b : ".");
    return stat(da, &sa) == 0 && stat(db, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* ---- where did a NaN, +inf or all -inf row come from? ---- */

static float elem_f32(const void *data, fls_dtype dt, size_t i)
{
    if (dt == FLS_DTYPE_F32)
        return ((const float *)data)[i];
    uint16_t h = ((const uint16_t *)data)[i];
    return dt == FLS_DTYPE_F16 ? fls_f16_to_f32(h) : fls_bf16_to_f32(h);
}

/* Appends the first (row, column) that explains st for the logits L (f32,
 * B x V) at temperature T; "" if none is found. */
static void locate_logits(const float *L, int64_t B, int64_t V, float T, fls_status st, char *out, size_t cap)
{
    out[0] = '\0';
    for (int64_t b = 0; b < B; b++) {
        const float *row = L + (size_t)(b * V);
        int64_t finite_or_pos = 0;
        for (int64_t v = 0; v < V; v++) {
            float l = row[v];
            if (st == FLS_ERR_NAN && (isnan(l) || (isinf(l) && l > 0))) {
                snprintf(out, cap, ": %s at row %lld, column %lld%s", isnan(l) ? "NaN" : "+inf", (long long)b,
                         (long long)v, isnan(l) ? "" : " (+inf is not a logit; mask a token with -inf)");
                return;
            }
            if (st == FLS_ERR_TEMPERATURE && T > 0.0f && isfinite(l) && !isfinite(l / T)) {
                snprintf(out, cap, ": row %lld, column %lld: %g / T (T = %g) overflows float32", (long long)b,
                         (long long)v, (double)l, (double)T);
                return;
            }
            finite_or_pos += !(isinf(l) && l < 0);
        }
        if (st == FLS_ERR_ALL_MASKED && finite_or_pos == 0) {
            snprintf(out, cap, ": row %lld has every logit at -inf", (long long)b);
            return;
        }
    }
}

/* The same for the fused path: a non-finite value in H or W, else a logit
 * W h recomputed here (sequential float sum, and in double) that is NaN,
 * +inf, overflows, or a row of -inf. The engine sums in another order, so
 * the recomputation may miss a borderline overflow: then nothing is said. */
static void locate_fused(const fls_npy_matrix *W, const fls_npy_matrix *H, const char *wpath,
                         const char *hpath, float T, fls_status st, char *out, size_t cap)
{
    out[0] = '\0';
    const int64_t V = W->rows, D = W->cols, B = H->rows;
    for (int64_t b = 0; b < B; b++)
        for (int64_t d = 0; d < D; d++) {
            float x = elem_f32(H->data, H->dtype, (size_t)(b * D + d));
            if (!isfinite(x)) {
                snprintf(out, cap, ": --hidden %s has %s at row %lld, column %lld", hpath,
                         isnan(x) ? "NaN"
                         : x > 0  ? "+inf"
                                  : "-inf",
                         (long long)b, (long long)d);
                return;
            }
        }
    for (int64_t v = 0; v < V; v++)
        for (int64_t d = 0; d < D; d++) {
            float x = elem_f32(W->data, W->dtype, (size_t)(v * D + d));
            if (!isfinite(x)) {
                snprintf(out, cap, ": --weights %s has %s at row %lld (token %lld), column %lld", wpath,
                         isnan(x) ? "NaN"
                         : x > 0  ? "+inf"
                                  : "-inf",
                         (long long)v, (long long)v, (long long)d);
                return;
            }
        }
    if ((double)B * (double)V * (double)D > 2e10) {
        snprintf(out, cap, " (W and H are finite; the logits are too many to recompute here)");
        return;
    }
    for (int64_t b = 0; b < B; b++) {
        int64_t masked = 0;
        for (int64_t v = 0; v < V; v++) {
            float s = 0.0f;
            double sd = 0.0;
            for (int64_t d = 0; d < D; d++) {
                float w = elem_f32(W->data, W->dtype, (size_t)(v * D + d)),
                      h = elem_f32(H->data, H->dtype, (size_t)(b * D + d));
                s += w * h;
                sd += (double)w * (double)h;
            }
            int over = !isfinite(s) || fabs(sd) > FLT_MAX;
            if (st == FLS_ERR_NAN && over && !(sd < 0 && !isnan(s))) {
                snprintf(out, cap,
                         ": row %lld, token %lld: the logit W[%lld] . H[%lld] (%.6g) overflows float32",
                         (long long)b, (long long)v, (long long)v, (long long)b, sd);
                return;
            }
            if (st == FLS_ERR_TEMPERATURE && T > 0.0f && !over && !isfinite(s / T)) {
                snprintf(out, cap, ": row %lld, token %lld: the logit %g / T (T = %g) overflows float32",
                         (long long)b, (long long)v, (double)s, (double)T);
                return;
            }
            masked += over && sd < 0;
        }
        if (st == FLS_ERR_ALL_MASKED && masked == V) {
            snprintf(out, cap, ": every logit of row %lld overflows to -inf", (long long)b);
            return;
        }
    }
}

/* Why the library refused a call, for the message after "sampling failed: ". */
static void explain_unsupported(fls_engine engine, fls_method method, const cli_rule *rule, int streaming)
{
    if (engine == FLS_ENGINE_CUDA && (cli_rule_filters(rule) || rule->wr_k > 0) &&
        method == FLS_METHOD_UNFUSED_MULTINOMIAL)
        cli_error(
            "the CUDA engine runs the rule family with the Gumbel methods (docs/RULES.md): use --method "
            "fused or unfused-gumbel, or --device cpu for the multinomial baseline's filters");
    else if (engine == FLS_ENGINE_CUDA && streaming && method == FLS_METHOD_GROUPED)
        cli_error(
            "streaming on the GPU takes group sizes up to 4096 (--group-size): use --device cpu for larger "
            "groups");
    else
        cli_error("sampling failed: %s (--method %s%s)", fls_status_string(FLS_ERR_UNSUPPORTED),
                  method_name(method), cli_rule_filters(rule) || rule->wr_k > 0 ? " with a rule" : "");
}

/* ---- one run of `sample`: its options, inputs, buffers and results ---- */

typedef struct sample_run {
    sample_opts o;
    /* the options' values */
    fls_dtype wdtype;
    float temperature;
    uint64_t seed, offset;
    int64_t draws, threads, group_size, stream_chunk, shards;
    fls_engine engine;
    fls_simd simd;
    fls_method method;
    fls_noise noise;
    cli_rule rule;
    cli_mods mods;
    int rules, streaming, has_mods;
    /* the inputs: L (B, V), or W (V, D) and H (B, D) */
    fls_npy_matrix W, H, L;
    uint64_t *row_seeds;
    int64_t B, V, D;
    /* the tokens of one chunk of draws (K per draw), the counts */
    int64_t K, chunk;
    size_t ntok;
    int64_t *tokens, *counts;
    /* the engine and what it reads and writes */
    fls_context_t *ctx;
    fls_params p;
    fls_matrix mW, mH, mL;
    fls_outputs out;
    void *dW, *dH, *dL, *dtok;
    /* streaming */
    cli_stream_cfg scfg;
    cli_stream_stats sst;
    float *chunk_norms, *hnorms;
    /* results */
    int64_t row0[16], nrow0;
    double elapsed;
    fls_npy_file fout, fcounts;
} sample_run;

/* The option table into s->o, then --help. CLI_OK (*help set or not) or CLI_USAGE. */
static int sample_parse_args(int argc, char **argv, sample_run *s, int *help)
{
    sample_opts *o = &s->o;
    const cli_option opts[] = {{"--logits", &o->logits, NULL},
                               {"--weights", &o->weights, NULL},
                               {"--hidden", &o->hidden, NULL},
                               {"--weights-dtype", &o->weights_dtype, NULL},
                               {"--temperature", &o->temperature, NULL},
                               {"--seed", &o->seed, NULL},
                               {"--row-seeds", &o->row_seeds, NULL},
                               {"--offset", &o->offset, NULL},
                               {"--samples", &o->samples, NULL},
                               {"--device", &o->device, NULL},
                               {"--threads", &o->threads, NULL},
                               {"--simd", &o->simd, NULL},
                               {"--out", &o->out, NULL},
                               {"--counts", &o->counts, NULL},
                               {"--method", &o->method, NULL},
                               {"--group-size", &o->group_size, NULL},
                               {"--noise", &o->noise, NULL},
                               {"--stream-chunk", &o->stream_chunk, NULL},
                               {"--early-finalize", NULL, &o->early},
                               {"--shards", &o->shards, NULL},
                               CLI_RULE_OPTIONS(o->rule),
                               CLI_MODS_OPTIONS(o->mods),
                               {NULL, NULL, NULL}};
    return cli_parse(argc, argv, opts, help);
}

/* Which inputs were given: --logits, or --weights with --hidden. CLI_OK or CLI_USAGE. */
static int sample_check_input_options(const sample_opts *o)
{
    if (o->logits && (o->weights || o->hidden)) {
        cli_error("--logits cannot be combined with %s: give either --logits L.npy, or --weights W.npy "
                  "with --hidden H.npy",
                  o->weights && o->hidden ? "--weights and --hidden"
                  : o->weights            ? "--weights"
                                          : "--hidden");
        return CLI_USAGE;
    }
    if (!o->logits && !(o->weights && o->hidden)) {
        cli_error(o->weights  ? "--weights needs --hidden"
                  : o->hidden ? "--hidden needs --weights"
                              : "an input is required: --logits L.npy, or "
                                "--weights W.npy with --hidden H.npy");
        return CLI_USAGE;
    }
    if (o->weights_dtype && !o->weights) {
        cli_error("--weights-dtype applies to --weights only");
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* The option strings into their values (defaults where not given). CLI_OK or CLI_USAGE. */
static int sample_parse_values(sample_run *s)
{
    const sample_opts *o = &s->o;
    s->wdtype = FLS_DTYPE_F32;
    s->temperature = 1.0f;
    s->seed = s->offset = 0;
    s->draws = 1;
    s->threads = s->group_size = s->stream_chunk = 0;
    s->shards = 1;
    if ((o->weights_dtype && parse_wdtype(o->weights_dtype, &s->wdtype) != 0) ||
        (o->temperature && cli_parse_float("--temperature", o->temperature, &s->temperature) != 0) ||
        (o->seed && cli_parse_u64("--seed", o->seed, &s->seed) != 0) ||
        (o->offset && cli_parse_u64("--offset", o->offset, &s->offset) != 0) ||
        (o->samples && cli_parse_i64("--samples", o->samples, 1, (int64_t)UINT32_MAX, &s->draws) != 0) ||
        (o->threads && cli_parse_i64("--threads", o->threads, 0, 1024, &s->threads) != 0) ||
        (o->group_size &&
         cli_parse_i64("--group-size", o->group_size, 2, (int64_t)1 << 20, &s->group_size) != 0) ||
        (o->stream_chunk && cli_parse_i64("--stream-chunk", o->stream_chunk, 1, ((int64_t)1 << 33) - 2,
                                          &s->stream_chunk) != 0) ||
        (o->shards && cli_parse_i64("--shards", o->shards, 1, 65536, &s->shards) != 0) ||
        cli_parse_device(o->device, &s->engine) != 0 || cli_parse_simd(o->simd, &s->simd) != 0 ||
        parse_method(o->method, &s->method) != 0 || parse_noise(o->noise, &s->noise) != 0 ||
        cli_rule_parse(&o->rule, &s->rule) != CLI_OK || cli_mods_parse(&o->mods, &s->mods) != CLI_OK)
        return CLI_USAGE;
    s->has_mods = cli_mods_first_flag(&o->mods) != NULL;
    return CLI_OK;
}

/* --noise min-first: what the library takes it with (fls_noise), said before
 * any work. CLI_OK or CLI_USAGE. */
static int sample_check_noise(const sample_run *s)
{
    const sample_opts *o = &s->o;
    if (s->noise != FLS_NOISE_MIN_FIRST)
        return CLI_OK;
    if (s->method != FLS_METHOD_FUSED && s->method != FLS_METHOD_UNFUSED_GUMBEL) {
        cli_error("--noise min-first takes --method fused or unfused-gumbel (the flat Gumbel-max), not %s",
                  method_name(s->method));
        return CLI_USAGE;
    }
    if (s->rules) {
        cli_error("--noise min-first takes no rule (%s): use --noise per-token",
                  cli_rule_first_flag(&o->rule));
        return CLI_USAGE;
    }
    if (o->stream_chunk || o->shards || o->early) {
        cli_error("--noise min-first is for one-shot calls: %s streams; use --noise per-token",
                  o->stream_chunk ? "--stream-chunk"
                  : o->shards     ? "--shards"
                                  : "--early-finalize");
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* The values that do not go together: temperature, --simd, the method's
 * options, the noise scheme and the rules. CLI_OK or CLI_USAGE. */
static int sample_check_method(sample_run *s)
{
    const sample_opts *o = &s->o;
    if (s->temperature < 0.0f) {
        cli_error("--temperature must be >= 0 (0 is greedy), got %s", o->temperature);
        return CLI_USAGE;
    }
    if (s->engine == FLS_ENGINE_CUDA && o->simd) {
        cli_error("--simd chooses the CPU engine's SIMD path; it does not apply to --device cuda");
        return CLI_USAGE;
    }
    if (o->group_size && s->method != FLS_METHOD_GROUPED) {
        cli_error("--group-size applies to --method grouped only");
        return CLI_USAGE;
    }
    if (s->group_size && (s->group_size & (s->group_size - 1))) {
        cli_error("--group-size: %lld is not a power of two (allowed: 2, 4, 8, ..., 2^20)",
                  (long long)s->group_size);
        return CLI_USAGE;
    }
    s->rules = cli_rule_given(&o->rule);
    if (s->method == FLS_METHOD_GROUPED && s->rules) {
        cli_error("--method grouped takes no rule (%s): filters need the row's maximum before a group can be "
                  "judged (docs/GROUPED.md); use --method fused",
                  cli_rule_first_flag(&o->rule));
        return CLI_USAGE;
    }
    if (s->method == FLS_METHOD_UNFUSED_MULTINOMIAL && s->rule.wr_k > 0) {
        cli_error(
            "--without-replacement: the unfused multinomial baseline draws one token per draw; use --method "
            "fused or unfused-gumbel");
        return CLI_USAGE;
    }
    return sample_check_noise(s);
}

/* --stream-chunk, --shards, --early-finalize: what they take, and the
 * default chunk. CLI_OK or CLI_USAGE. */
static int sample_check_streaming(sample_run *s)
{
    const sample_opts *o = &s->o;
    s->streaming = o->stream_chunk || o->shards || o->early;
    if (!s->streaming)
        return CLI_OK;
    const char *flag = o->stream_chunk ? "--stream-chunk" : o->shards ? "--shards" : "--early-finalize";
    if (s->method != FLS_METHOD_FUSED && s->method != FLS_METHOD_GROUPED) {
        cli_error("%s: streaming supports --method fused and grouped only, not %s", flag,
                  method_name(s->method));
        return CLI_USAGE;
    }
    if (s->rules) {
        cli_error("%s: streaming takes no rule (%s): the streaming API samples the temperature rule (flat or "
                  "grouped) without filters or --without-replacement",
                  flag, cli_rule_first_flag(&o->rule));
        return CLI_USAGE;
    }
    if (s->has_mods) {
        cli_error("%s: streaming takes no mask, logit bias or penalty (%s): the streaming API refuses them "
                  "(docs/RULES.md); drop the streaming flags",
                  flag, cli_mods_first_flag(&o->mods));
        return CLI_USAGE;
    }
    if (o->early && !o->weights) {
        cli_error("--early-finalize bounds the logits by ||w|| ||h||: it needs --weights and --hidden "
                  "(materialized --logits are fed whole)");
        return CLI_USAGE;
    }
    if (!s->stream_chunk)
        s->stream_chunk = SAMPLE_STREAM_CHUNK;
    return CLI_OK;
}

/* The outputs may not name each other or an input. CLI_OK or CLI_USAGE. */
static int sample_check_output_names(const sample_opts *o)
{
    if (o->out && o->counts && same_file(o->out, o->counts)) {
        cli_error("--out and --counts name the same file '%s'", o->out);
        return CLI_USAGE;
    }
    const cli_mods_opts *m = &o->mods;
    const char *iopts[] = {"--logits",
                           "--weights",
                           "--hidden",
                           "--row-seeds",
                           "--top-k-per-row",
                           "--top-p-per-row",
                           "--min-p-per-row",
                           "--filter-value-per-row",
                           "--allowed-bitmask",
                           "--bitmask-rows",
                           "--logit-bias-ids",
                           "--logit-bias-values",
                           "--seen-ids",
                           "--seen-counts",
                           "--repetition-penalty-per-row",
                           "--presence-penalty-per-row",
                           "--frequency-penalty-per-row"};
    const char *ipaths[] = {
        o->logits,          o->weights,         o->hidden,          o->row_seeds,
        o->rule.top_k_rows, o->rule.top_p_rows, o->rule.min_p_rows, o->rule.filter_value_rows,
        m->bitmask,         m->bitmask_rows,    m->bias_ids,        m->bias_values,
        m->seen_ids,        m->seen_counts,     m->rep_rows,        m->pres_rows,
        m->freq_rows};
    const int n = (int)(sizeof ipaths / sizeof ipaths[0]);
    if (cli_output_names_input("--out", o->out, iopts, ipaths, n) ||
        cli_output_names_input("--counts", o->counts, iopts, ipaths, n))
        return CLI_USAGE;
    return CLI_OK;
}

/* Every argument, checked before anything is read or written. CLI_OK or CLI_USAGE. */
static int sample_check_args(sample_run *s)
{
    int rc = sample_check_input_options(&s->o);
    if (rc == CLI_OK)
        rc = sample_parse_values(s);
    if (rc == CLI_OK)
        rc = sample_check_method(s);
    if (rc == CLI_OK)
        rc = sample_check_streaming(s);
    if (rc == CLI_OK)
        rc = sample_check_output_names(&s->o);
    return rc;
}

/* Before any work: the outputs can be created, the engine exists. CLI_OK or CLI_FAIL. */
static int sample_check_environment(const sample_run *s)
{
    const sample_opts *o = &s->o;
    if ((o->out && cli_out_check("--out", o->out) != 0) ||
        (o->counts && cli_out_check("--counts", o->counts) != 0))
        return CLI_FAIL;
    if (s->engine == FLS_ENGINE_CUDA && !fls_cuda_available()) {
        cli_error("--device cuda: %s; use --device cpu",
                  fls_cuda_built() ? "this flashsample has the CUDA engine but no usable GPU was found"
                                   : "this flashsample was built without the CUDA engine");
        return CLI_FAIL;
    }
    return CLI_OK;
}

/* Reads --logits into s->L (f32), or --weights and --hidden into s->W and
 * s->H; sets B, V (and D). CLI_OK or CLI_FAIL. */
static int sample_load_matrices(sample_run *s)
{
    const sample_opts *o = &s->o;
    char err[FLS_NPY_ERR_LEN];
    fls_status st;
    if (o->logits) {
        /* f16 logits are widened to f32 on load: exact, so the tokens are those of the f16 values. */
        const fls_dtype f32 = FLS_DTYPE_F32;
        cli_progress("loading %s", o->logits);
        if ((st = fls_npy_read_matrix(o->logits, &f32, &s->L, err)) != FLS_OK) {
            input_error("--logits", st, err);
            return CLI_FAIL;
        }
        s->B = s->L.rows;
        s->V = s->L.cols;
        return CLI_OK;
    }
    cli_progress("loading %s", o->weights);
    if ((st = fls_npy_read_matrix(o->weights, o->weights_dtype ? &s->wdtype : NULL, &s->W, err)) != FLS_OK) {
        input_error("--weights", st, err);
        return CLI_FAIL;
    }
    cli_progress("loading %s", o->hidden);
    if ((st = fls_npy_read_matrix(o->hidden, NULL, &s->H, err)) != FLS_OK) {
        input_error("--hidden", st, err);
        return CLI_FAIL;
    }
    /* A 1-D W would silently read as a single vocabulary row: require the (V, D) matrix. */
    if (s->W.ndim != 2) {
        cli_error("--weights: %s: expected a 2-D array (V, D), got a 1-D array", o->weights);
        return CLI_FAIL;
    }
    s->V = s->W.rows;
    s->D = s->W.cols;
    s->B = s->H.rows;
    if (s->H.cols != s->D) {
        cli_error("shape mismatch: --weights %s is (V=%lld, D=%lld) but --hidden %s is (B=%lld, D=%lld); "
                  "H must be (B, %lld)",
                  o->weights, (long long)s->V, (long long)s->D, o->hidden, (long long)s->H.rows,
                  (long long)s->H.cols, (long long)s->D);
        return CLI_FAIL;
    }
    return CLI_OK;
}

/* The inputs: the matrices, the row seeds, the rules' per-row arrays; then
 * the checks that need B and V. CLI_OK, or the exit status. */
static int sample_load_inputs(sample_run *s)
{
    if (sample_load_matrices(s) != CLI_OK)
        return CLI_FAIL;
    if (s->o.row_seeds && load_row_seeds(s->o.row_seeds, s->B, &s->row_seeds) != 0)
        return CLI_FAIL;
    int lrc;
    if (cli_rule_load(&s->rule, s->B, s->V, &lrc) != 0)
        return lrc;
    if (s->has_mods && (lrc = cli_mods_load(&s->mods, s->B, s->V)) != CLI_OK)
        return lrc;
    if (s->shards > s->V) {
        cli_error("--shards %lld: more shards than the V = %lld tokens of the vocabulary",
                  (long long)s->shards, (long long)s->V);
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* The tokens of one chunk of draws and the counts, on the host. With --out
 * every token is kept (the file is B x N x K); otherwise the draws run in
 * chunks of about SAMPLE_CHUNK_TOKENS tokens. CLI_OK or CLI_FAIL. */
static int sample_alloc_buffers(sample_run *s)
{
    const sample_opts *o = &s->o;
    const int64_t B = s->B, V = s->V, K = s->rule.wr_k > 0 ? s->rule.wr_k : 1;
    s->K = K;
    s->chunk = s->draws;
    if (!o->out) {
        int64_t per_row = SAMPLE_CHUNK_TOKENS / B / K;
        s->chunk = per_row < 1 ? 1 : per_row < s->draws ? per_row : s->draws;
    }
    if ((uint64_t)B > SIZE_MAX / 8 / (uint64_t)s->chunk / (uint64_t)K ||
        (o->counts && (uint64_t)B > SIZE_MAX / 8 / (uint64_t)V)) {
        cli_error("output too large for this machine's address space: B=%lld x N=%lld%s tokens%s",
                  (long long)B, (long long)s->draws, K > 1 ? " x K" : "",
                  o->counts ? " or B x V counts" : "");
        return CLI_FAIL;
    }
    s->ntok = (size_t)B * (size_t)s->chunk * (size_t)K;
    char why[192];
    if (!fls_npy_memory_fits(s->ntok * sizeof *s->tokens, why, sizeof why)) {
        cli_error("the tokens do not fit in memory: B=%lld x N=%lld%s int64 tokens, %s%s", (long long)B,
                  (long long)s->chunk, K > 1 ? " x K" : "", why,
                  o->out ? "; --out holds every token: without --out, --counts needs far less" : "");
        return CLI_FAIL;
    }
    s->tokens = malloc(s->ntok * sizeof *s->tokens);
    if (!s->tokens) {
        cli_error("out of memory for %zu tokens (%.1f GiB)%s", s->ntok, (double)s->ntok * 8.0 / 1073741824.0,
                  o->out ? "; --out holds every token: without --out, --counts needs far less" : "");
        return CLI_FAIL;
    }
    if (o->counts) {
        if (!fls_npy_memory_fits((size_t)B * (size_t)V * sizeof *s->counts, why, sizeof why)) {
            cli_error("--counts: the B x V = %lld x %lld counts do not fit in memory: %s", (long long)B,
                      (long long)V, why);
            return CLI_FAIL;
        }
        s->counts = calloc((size_t)B * (size_t)V, sizeof *s->counts);
        if (!s->counts) {
            cli_error("out of memory for the counts (%lld x %lld)", (long long)B, (long long)V);
            return CLI_FAIL;
        }
    }
    return CLI_OK;
}

/* The context, the call's params and the matrices it reads (copied to the
 * GPU for the CUDA engine, with the tokens' buffer). CLI_OK or CLI_FAIL. */
static int sample_setup_engine(sample_run *s)
{
    if (cli_context_create(&s->ctx, s->engine, (int)s->threads, s->simd) != 0)
        return CLI_FAIL;

    fls_params *p = &s->p;
    fls_params_default(p);
    p->method = s->method;
    p->group_size = s->group_size;
    p->noise = s->noise;
    p->temperature_value = s->temperature;
    p->seed = s->seed;
    p->row_seeds = s->row_seeds;
    p->offset = s->offset;
    cli_rule_apply(&s->rule, p);
    cli_mods_apply(&s->mods, p);

    const fls_npy_matrix *W = &s->W, *H = &s->H, *L = &s->L;
    s->mW = (fls_matrix){W->data, W->dtype, W->rows, W->cols, W->cols};
    s->mH = (fls_matrix){H->data, H->dtype, H->rows, H->cols, H->cols};
    s->mL = (fls_matrix){L->data, L->dtype, L->rows, L->cols, L->cols};
    s->out = (fls_outputs){s->tokens, NULL, NULL};
    if (s->engine != FLS_ENGINE_CUDA)
        return CLI_OK;
    const int64_t B = s->B, V = s->V, D = s->D;
    cli_progress("copying inputs to the GPU");
    if (s->o.logits) {
        if (copy_to_device(L->data, (size_t)(B * V) * fls_dtype_size(L->dtype), &s->dL, "the logits") != 0)
            return CLI_FAIL;
        s->mL.data = s->dL;
    } else {
        if (copy_to_device(W->data, (size_t)(V * D) * fls_dtype_size(W->dtype), &s->dW, "W") != 0 ||
            copy_to_device(H->data, (size_t)(B * D) * fls_dtype_size(H->dtype), &s->dH, "H") != 0)
            return CLI_FAIL;
        s->mW.data = s->dW;
        s->mH.data = s->dH;
    }
    fls_status st = fls_device_malloc(&s->dtok, s->ntok * sizeof *s->tokens);
    if (st != FLS_OK) {
        cli_error("--device cuda: cannot allocate the tokens on the GPU: %s", fls_status_string(st));
        return CLI_FAIL;
    }
    s->out.tokens = s->dtok;
    return CLI_OK;
}

/* Streaming: the configuration, and the norm bounds once per W and H for
 * --early-finalize. CLI_OK or CLI_FAIL. */
static int sample_setup_streaming(sample_run *s)
{
    memset(&s->scfg, 0, sizeof s->scfg);
    memset(&s->sst, 0, sizeof s->sst);
    if (!s->streaming)
        return CLI_OK;
    const sample_opts *o = &s->o;
    cli_stream_cfg *scfg = &s->scfg;
    scfg->chunk = s->stream_chunk;
    scfg->shards = (int)s->shards;
    scfg->early = o->early;
    scfg->L = o->logits ? &s->mL : NULL;
    scfg->W = o->logits ? NULL : &s->mW;
    scfg->H = o->logits ? NULL : &s->mH;
    if (!o->early)
        return CLI_OK;
    const int64_t nchunks = (s->V + s->stream_chunk - 1) / s->stream_chunk;
    s->chunk_norms = malloc((size_t)nchunks * sizeof *s->chunk_norms);
    s->hnorms = malloc((size_t)s->B * sizeof *s->hnorms);
    if (!s->chunk_norms || !s->hnorms) {
        cli_error("out of memory for the norm bounds");
        return CLI_FAIL;
    }
    cli_progress("norms of W's chunks and of H's rows");
    /* from the host copies (on the CUDA engine mW and mH are device memory) */
    const fls_matrix hW = {s->W.data, s->W.dtype, s->W.rows, s->W.cols, s->W.cols};
    const fls_matrix hH = {s->H.data, s->H.dtype, s->H.rows, s->H.cols, s->H.cols};
    fls_status st = fls_chunk_max_norms(&hW, s->stream_chunk, s->chunk_norms);
    if (st != FLS_OK) {
        cli_error("fls_chunk_max_norms failed: %s", fls_status_string(st));
        return CLI_FAIL;
    }
    if (cli_row_norms(&hH, s->hnorms) != 0) {
        cli_error("--hidden %s: a row's norm overflows float32 (or is not finite)", o->hidden);
        return CLI_FAIL;
    }
    scfg->chunk_norms = s->chunk_norms;
    scfg->hnorms = s->hnorms;
    return CLI_OK;
}

/* Says why a chunk's call failed with st (where: the streaming step, or NULL). */
static void sample_explain_failure(const sample_run *s, fls_status st, const char *where)
{
    if (st == FLS_ERR_PARAM && !s->streaming) {
        char msg[512];
        if (s->has_mods && fls_params_explain(&s->p, s->B, s->V, msg, sizeof msg) != FLS_OK && msg[0]) {
            const char *flag = cli_mods_flag_of(&s->o.mods, msg);
            cli_error("%s%s%s", flag ? flag : "", flag ? ": " : "", msg);
            return;
        }
        cli_rule_explain(&s->rule, s->B, s->V);
        return;
    }
    if (s->has_mods && st != FLS_ERR_UNSUPPORTED) {
        /* the raw inputs do not say where: the changed logits are the engine's */
        cli_error("sampling failed: %s%s", fls_status_string(st),
                  st == FLS_ERR_ALL_MASKED ? " (a row has no finite logit left after --allowed-bitmask, the "
                                             "logit bias and the penalties)"
                  : st == FLS_ERR_NAN || st == FLS_ERR_TEMPERATURE
                      ? " (in the logits after the logit bias and the penalties, which are checked too)"
                      : "");
        return;
    }
    if (st == FLS_ERR_UNSUPPORTED) {
        if (s->has_mods && s->engine == FLS_ENGINE_CUDA) {
            cli_error("sampling failed: %s: this CUDA engine does not take %s (masks, logit bias and "
                      "penalties); use --device cpu",
                      fls_status_string(st), cli_mods_first_flag(&s->o.mods));
            return;
        }
        explain_unsupported(s->engine, s->method, &s->rule, s->streaming);
        return;
    }
    char where_txt[512];
    if (s->o.logits)
        locate_logits(s->L.data, s->B, s->V, s->temperature, st, where_txt, sizeof where_txt);
    else
        locate_fused(&s->W, &s->H, s->o.weights, s->o.hidden, s->temperature, st, where_txt,
                     sizeof where_txt);
    if (s->streaming && !where_txt[0] && where)
        snprintf(where_txt, sizeof where_txt, " (in %s)", where);
    cli_error("sampling failed: %s%s", fls_status_string(st), where_txt);
}

/* One chunk's n draws per row into s->tokens (host memory), timed into
 * s->elapsed. CLI_OK or CLI_FAIL after a message. */
static int sample_draw_chunk(sample_run *s, int64_t n)
{
    const char *where = NULL;
    fls_status st;
    double t0 = cli_now();
    if (s->streaming)
        st = cli_stream_sample(s->ctx, &s->p, s->B, s->V, &s->scfg, s->out.tokens, &s->sst, &where);
    else
        st = s->o.logits ? fls_sample_logits(s->ctx, &s->mL, &s->p, &s->out)
                         : fls_sample_fused(s->ctx, &s->mW, &s->mH, &s->p, &s->out);
    s->elapsed += cli_now() - t0;
    if (st == FLS_OK && s->engine == FLS_ENGINE_CUDA)
        st = fls_device_download(s->tokens, s->dtok, (size_t)(s->B * n * s->K) * sizeof *s->tokens);
    if (st != FLS_OK) {
        sample_explain_failure(s, st, where);
        return CLI_FAIL;
    }
    return CLI_OK;
}

/* Checks a chunk's tokens, keeps row 0's first ones and adds them all to the
 * counts. CLI_OK or CLI_FAIL. */
static int sample_tally_chunk(sample_run *s, int64_t n)
{
    const int64_t B = s->B, V = s->V, K = s->K;
    const int64_t *tokens = s->tokens;
    const size_t nt = (size_t)(B * n * K);
    for (size_t i = 0; i < nt; i++)
        if (tokens[i] < (K > 1 ? -1 : 0) || tokens[i] >= V) {
            cli_error("internal error: token %lld out of range [0, %lld) (please report)",
                      (long long)tokens[i], (long long)V);
            return CLI_FAIL;
        }
    for (int64_t k = 0; k < n * K && s->nrow0 < 16; k++)
        s->row0[s->nrow0++] = tokens[k];
    if (s->counts)
        for (int64_t b = 0; b < B; b++)
            for (int64_t k = 0; k < n * K; k++) {
                const int64_t t = tokens[b * n * K + k];
                if (t >= 0)
                    s->counts[b * V + t]++;
            }
    return CLI_OK;
}

/* The draws 0..N-1 in chunks of s->chunk. CLI_OK or CLI_FAIL. */
static int sample_run_draws(sample_run *s)
{
    const int64_t B = s->B, V = s->V, draws = s->draws;
    s->nrow0 = 0;
    s->elapsed = 0.0;
    for (int64_t first = 0; first < draws; first += s->chunk) {
        const int64_t n = draws - first < s->chunk ? draws - first : s->chunk;
        s->p.first_draw = first;
        s->p.draws = n;
        if (n == draws)
            cli_progress("sampling B=%lld V=%lld N=%lld", (long long)B, (long long)V, (long long)draws);
        else
            cli_progress("sampling B=%lld V=%lld: draws %lld-%lld of %lld", (long long)B, (long long)V,
                         (long long)first, (long long)(first + n - 1), (long long)draws);
        if (sample_draw_chunk(s, n) != CLI_OK || sample_tally_chunk(s, n) != CLI_OK)
            return CLI_FAIL;
    }
    cli_progress_done();
    return CLI_OK;
}

/* The result is ready: only now the temporary files, then the renames. CLI_OK or CLI_FAIL. */
static int sample_write_outputs(sample_run *s)
{
    const sample_opts *o = &s->o;
    const int64_t tshape[3] = {s->B, s->draws, s->K}, cshape[2] = {s->B, s->V};
    if (o->out &&
        (cli_out_begin(&s->fout, o->out) != 0 ||
         cli_out_write_npy(&s->fout, FLS_NPY_I64, s->rule.wr_k > 0 ? 3 : 2, tshape, s->tokens) != 0))
        return CLI_FAIL;
    if (o->counts && (cli_out_begin(&s->fcounts, o->counts) != 0 ||
                      cli_out_write_npy(&s->fcounts, FLS_NPY_I64, 2, cshape, s->counts) != 0))
        return CLI_FAIL;
    if (o->out && cli_out_commit(&s->fout) != 0)
        return CLI_FAIL;
    if (o->counts && cli_out_commit(&s->fcounts) != 0)
        return CLI_FAIL;
    return CLI_OK;
}

/* The summary: inputs, temperature, seeds, engine and time; the method and
 * rule; the exact second passes. */
static void sample_report_run(const sample_run *s)
{
    const sample_opts *o = &s->o;
    const int64_t B = s->B, draws = s->draws;
    char edesc[96], rdesc[256];
    cli_engine_desc(s->ctx, edesc, sizeof edesc);
    cli_rule_describe(&s->rule, rdesc, sizeof rdesc);
    if (o->logits)
        printf("sampled %lld row%s, V=%lld, %lld draw%s per row from logits (%s)", (long long)B,
               B == 1 ? "" : "s", (long long)s->V, (long long)draws, draws == 1 ? "" : "s",
               fls_npy_dtype_name(s->L.file_dtype));
    else
        printf("sampled %lld row%s, V=%lld, D=%lld, %lld draw%s per row, fused (W %s, H %s)", (long long)B,
               B == 1 ? "" : "s", (long long)s->V, (long long)s->D, (long long)draws, draws == 1 ? "" : "s",
               fls_dtype_name(s->W.dtype), fls_dtype_name(s->H.dtype));
    printf("; T=%g, ", (double)s->temperature);
    if (o->row_seeds)
        printf("row seeds from %s", o->row_seeds);
    else
        printf("seed %llu", (unsigned long long)s->seed);
    printf(", offset %llu; engine %s, %.3f ms\n", (unsigned long long)s->offset, edesc, s->elapsed * 1e3);
    if (s->method != FLS_METHOD_FUSED || s->rules) {
        printf("method %s", method_name(s->method));
        if (s->method == FLS_METHOD_GROUPED)
            printf(" (group size %lld)", (long long)(s->group_size ? s->group_size : FLS_GROUP_SIZE_DEFAULT));
        printf("; rule: %s\n", rdesc);
    }
    if (s->noise == FLS_NOISE_MIN_FIRST)
        printf("noise min-first (docs/NOISE.md)\n");
    if (s->has_mods) {
        char mdesc[256];
        cli_mods_describe(&s->mods, mdesc, sizeof mdesc);
        printf("logits changed by: %s\n", mdesc);
    }
    if (s->rules) {
        fls_counters c;
        fls_counters_default(&c);
        if (fls_context_counters(s->ctx, &c) == FLS_OK)
            printf("exact second pass: %llu of %llu row%s sampled (%llu call%s) took it\n",
                   (unsigned long long)c.second_pass_rows, (unsigned long long)c.rows, c.rows == 1 ? "" : "s",
                   (unsigned long long)c.calls, c.calls == 1 ? "" : "s");
    }
}

/* The streaming statistics: chunks fed and skipped, W skipped, bytes exchanged. */
static void sample_report_streaming(const sample_run *s)
{
    const cli_stream_stats *sst = &s->sst;
    const int64_t shards = s->shards;
    const double total = (double)s->V * (double)(sst->passes ? sst->passes : 1);
    printf("streamed: chunks of %lld tokens, %lld shard%s, %lld pass%s over V: %lld chunk%s fed, %lld "
           "skipped\n",
           (long long)s->stream_chunk, (long long)shards, shards == 1 ? "" : "s", (long long)sst->passes,
           sst->passes == 1 ? "" : "es", (long long)sst->chunks_fed, sst->chunks_fed == 1 ? "" : "s",
           (long long)sst->chunks_skipped);
    if (s->o.early)
        printf("early finalization: %lld of %.0f tokens skipped: %.2f%% of W skipped\n",
               (long long)sst->tokens_skipped, total, 100.0 * (double)sst->tokens_skipped / total);
    if (shards > 1)
        printf("shards: %lld serialized bytes exchanged (%.1f per row and draw)\n", (long long)sst->bytes,
               (double)sst->bytes / ((double)s->B * (double)s->draws));
}

/* What was written (--out, --counts), or row 0's first tokens without --out. */
static void sample_report_outputs(const sample_run *s)
{
    const sample_opts *o = &s->o;
    const int64_t B = s->B, V = s->V, K = s->K, draws = s->draws;
    if (o->out) {
        if (s->rule.wr_k > 0)
            printf(
                "wrote %s: int64 (%lld, %lld, %lld), the tokens of %lld row%s x %lld draw%s x %lld positions "
                "(-1 past the support)\n",
                o->out, (long long)B, (long long)draws, (long long)K, (long long)B, B == 1 ? "" : "s",
                (long long)draws, draws == 1 ? "" : "s", (long long)K);
        else
            printf("wrote %s: int64 (%lld, %lld), the tokens of %lld row%s x %lld draw%s\n", o->out,
                   (long long)B, (long long)draws, (long long)B, B == 1 ? "" : "s", (long long)draws,
                   draws == 1 ? "" : "s");
    }
    if (o->counts) {
        if (s->rule.wr_k > 0)
            printf("wrote %s: int64 (%lld, %lld), the count of each of V=%lld tokens in each row over every "
                   "position (rows sum to at most %lld)\n",
                   o->counts, (long long)B, (long long)V, (long long)V, (long long)(draws * K));
        else
            printf(
                "wrote %s: int64 (%lld, %lld), the count of each of V=%lld tokens in each row (rows sum to "
                "%lld)\n",
                o->counts, (long long)B, (long long)V, (long long)V, (long long)draws);
    }
    if (!o->out) {
        printf("row 0 tokens:");
        for (int64_t k = 0; k < s->nrow0; k++)
            printf(" %lld", (long long)s->row0[k]);
        printf("%s\n", s->nrow0 < draws * K ? " ..." : "");
    }
}

/* Everything a run holds, released (an output not committed is removed). */
static void sample_release(sample_run *s)
{
    cli_progress_done();
    cli_out_abort(&s->fout);
    cli_out_abort(&s->fcounts);
    fls_device_free(s->dW);
    fls_device_free(s->dH);
    fls_device_free(s->dL);
    fls_device_free(s->dtok);
    fls_context_destroy(s->ctx);
    fls_npy_matrix_free(&s->W);
    fls_npy_matrix_free(&s->H);
    fls_npy_matrix_free(&s->L);
    cli_rule_free(&s->rule);
    cli_mods_free(&s->mods);
    free(s->row_seeds);
    free(s->tokens);
    free(s->counts);
    free(s->chunk_norms);
    free(s->hnorms);
}

/* Loads, samples, writes and reports; the arguments are checked. Returns
 * the exit status. */
static int sample_execute(sample_run *s)
{
    int rc = sample_load_inputs(s);
    if (rc == CLI_OK)
        rc = sample_alloc_buffers(s);
    if (rc == CLI_OK)
        rc = sample_setup_engine(s);
    if (rc == CLI_OK)
        rc = sample_setup_streaming(s);
    if (rc == CLI_OK)
        rc = sample_run_draws(s);
    if (rc == CLI_OK)
        rc = sample_write_outputs(s);
    if (rc == CLI_OK) {
        sample_report_run(s);
        if (s->streaming)
            sample_report_streaming(s);
        sample_report_outputs(s);
    }
    sample_release(s);
    return rc;
}

int cli_sample(int argc, char **argv)
{
    sample_run run;
    sample_run *s = &run;
    memset(s, 0, sizeof *s);
    int help;
    if (sample_parse_args(argc, argv, s, &help) != CLI_OK)
        return CLI_USAGE;
    if (help) {
        sample_help();
        return CLI_OK;
    }
    int rc = sample_check_args(s);
    if (rc != CLI_OK)
        return rc;
    if (cli_parse_only)
        return CLI_OK;
    rc = sample_check_environment(s);
    if (rc != CLI_OK)
        return rc;
    return sample_execute(s);
}
