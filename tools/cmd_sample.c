/*
 * flashsample sample — sample tokens from .npy files.
 *
 * From logits L (B, V): fls_sample_logits. From weights W (V, D) and hidden
 * states H (B, D): fls_sample_fused (logits never materialized). N draws per
 * row share one pass (draw index 0..N-1 of the noise contract), so tokens.npy
 * is int64 (B, N) and the run is reproducible from (seed or row seeds, offset).
 */
#include "cli.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void sample_help(void)
{
    printf("usage: flashsample sample (--logits L.npy | --weights W.npy --hidden H.npy) [options]\n"
           "\n"
           "Samples N tokens per row, exactly from softmax(logits / T), by Gumbel-max with the\n"
           "noise of docs/NOISE.md (reproducible across engines, threads and batch positions).\n"
           "\n"
           "inputs (.npy, float32 or float16, C order):\n"
           "  --logits L.npy          logits (B, V), or (V,) for one row\n"
           "  --weights W.npy         LM-head weights (V, D)\n"
           "  --hidden H.npy          hidden states (B, D), or (D,) for one row\n"
           "  --weights-dtype DT      store W as f32, f16 or bf16 (converted on load, round to nearest\n"
           "                          even; bf16 has no numpy dtype); default: the file's dtype\n"
           "sampling:\n"
           "  --temperature T         T >= 0, default 1; 0 is greedy (argmax, lowest index on ties)\n"
           "  --seed S                base seed (uint64), default 0; row b uses fls_row_seed(S, b)\n"
           "  --row-seeds seeds.npy   per-row seeds, uint64 (B,) (int64 >= 0 accepted); overrides --seed\n"
           "  --offset O              decode-step offset (uint64), default 0\n"
           "  --samples N             draws per row, 1 <= N < 2^32, default 1\n"
           "engine:\n"
           "  --device cpu|cuda       default cpu\n"
           "  --threads K             CPU threads, 0 = all cores (default)\n"
           "outputs (written to a temporary name and renamed: a failed run writes nothing):\n"
           "  --out tokens.npy        int64 (B, N)\n"
           "  --counts counts.npy     int64 (B, V): how often each token was drawn in each row\n"
           "Without --out a short summary is printed on stdout.\n"
           "\n"
           "exit status: 0 success, 1 error (bad input, I/O), 2 usage error\n");
}

typedef struct sample_opts {
    const char *logits, *weights, *hidden, *weights_dtype, *temperature, *seed, *row_seeds, *offset, *samples,
        *device, *threads, *out, *counts;
} sample_opts;

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

/* Loads seeds.npy as B uint64 values. */
static int load_row_seeds(const char *path, int64_t B, uint64_t **seeds)
{
    char err[FLS_NPY_ERR_LEN];
    fls_npy_array a;
    if (fls_npy_read(path, &a, err) != FLS_OK) {
        cli_error("--row-seeds: %s", err);
        return -1;
    }
    if (a.dtype != FLS_NPY_U8 && a.dtype != FLS_NPY_I8) {
        cli_error("--row-seeds: %s: dtype %s; expected uint64 (or int64 >= 0)", path,
                  fls_npy_dtype_name(a.dtype));
        fls_npy_free(&a);
        return -1;
    }
    if (a.ndim != 1 || a.shape[0] != B) {
        cli_error("--row-seeds: %s: expected shape (%lld,) (one seed per row), got %d-D with %lld entries",
                  path, (long long)B, a.ndim, (long long)a.count);
        fls_npy_free(&a);
        return -1;
    }
    if (a.dtype == FLS_NPY_I8) {
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

static const char *input_desc(const fls_npy_matrix *m)
{
    return fls_dtype_name(m->dtype);
}

static int copy_to_device(const void *host, size_t bytes, void **dev, const char *what)
{
    fls_status st = fls_cuda_malloc(dev, bytes);
    if (st == FLS_OK)
        st = fls_cuda_memcpy(*dev, host, bytes, 1);
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
    const char *ba = strrchr(a, '/'), *bb = strrchr(b, '/');
    const char *na = ba ? ba + 1 : a, *nb = bb ? bb + 1 : b;
    if (strcmp(na, nb) != 0)
        return 0;
    char da[4096], db[4096];
    snprintf(da, sizeof da, "%.*s", ba ? (int)(ba - a) + 1 : 1, ba ? a : ".");
    snprintf(db, sizeof db, "%.*s", bb ? (int)(bb - b) + 1 : 1, bb ? b : ".");
    struct stat sa, sb;
    return stat(da, &sa) == 0 && stat(db, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int cli_sample(int argc, char **argv)
{
    sample_opts o;
    memset(&o, 0, sizeof o);
    const cli_option opts[] = {
        {"--logits", &o.logits, NULL},           {"--weights", &o.weights, NULL},
        {"--hidden", &o.hidden, NULL},           {"--weights-dtype", &o.weights_dtype, NULL},
        {"--temperature", &o.temperature, NULL}, {"--seed", &o.seed, NULL},
        {"--row-seeds", &o.row_seeds, NULL},     {"--offset", &o.offset, NULL},
        {"--samples", &o.samples, NULL},         {"--device", &o.device, NULL},
        {"--threads", &o.threads, NULL},         {"--out", &o.out, NULL},
        {"--counts", &o.counts, NULL},           {NULL, NULL, NULL}};
    int help;
    if (cli_parse(argc, argv, opts, &help) != CLI_OK)
        return CLI_USAGE;
    if (help) {
        sample_help();
        return CLI_OK;
    }

    /* ---- arguments: all checked before anything is read or written ---- */
    if (o.logits && (o.weights || o.hidden)) {
        cli_error("give either --logits or --weights and --hidden, not both");
        return CLI_USAGE;
    }
    if (!o.logits && !(o.weights && o.hidden)) {
        cli_error(o.weights  ? "--weights needs --hidden"
                  : o.hidden ? "--hidden needs --weights"
                             : "an input is required: --logits L.npy, or "
                               "--weights W.npy with --hidden H.npy");
        return CLI_USAGE;
    }
    if (o.weights_dtype && !o.weights) {
        cli_error("--weights-dtype applies to --weights only");
        return CLI_USAGE;
    }
    fls_dtype wdtype = FLS_DTYPE_F32;
    float temperature = 1.0f;
    uint64_t seed = 0, offset = 0;
    int64_t draws = 1, threads = 0;
    fls_engine engine;
    if ((o.weights_dtype && parse_wdtype(o.weights_dtype, &wdtype) != 0) ||
        (o.temperature && cli_parse_float("--temperature", o.temperature, &temperature) != 0) ||
        (o.seed && cli_parse_u64("--seed", o.seed, &seed) != 0) ||
        (o.offset && cli_parse_u64("--offset", o.offset, &offset) != 0) ||
        (o.samples && cli_parse_i64("--samples", o.samples, 1, (int64_t)UINT32_MAX, &draws) != 0) ||
        (o.threads && cli_parse_i64("--threads", o.threads, 0, 1024, &threads) != 0) ||
        cli_parse_device(o.device, &engine) != 0)
        return CLI_USAGE;
    if (temperature < 0.0f) {
        cli_error("--temperature must be >= 0 (0 is greedy), got %s", o.temperature);
        return CLI_USAGE;
    }
    if (o.out && o.counts && same_file(o.out, o.counts)) {
        cli_error("--out and --counts name the same file '%s'", o.out);
        return CLI_USAGE;
    }
    if (engine == FLS_ENGINE_CUDA && !fls_cuda_available()) {
        cli_error("--device cuda: the CUDA engine is not available (this flashsample was built without it, "
                  "or no usable GPU was found); use --device cpu");
        return CLI_FAIL;
    }

    int rc = CLI_FAIL;
    char err[FLS_NPY_ERR_LEN];
    fls_npy_file fout, fcounts;
    memset(&fout, 0, sizeof fout);
    memset(&fcounts, 0, sizeof fcounts);
    fls_npy_matrix W, H, L;
    memset(&W, 0, sizeof W);
    memset(&H, 0, sizeof H);
    memset(&L, 0, sizeof L);
    uint64_t *row_seeds = NULL;
    int64_t *tokens = NULL, *counts = NULL;
    fls_context_t *ctx = NULL;
    void *dW = NULL, *dH = NULL, *dL = NULL, *dtok = NULL;

    /* Open the outputs first: an unwritable path fails before the long part. */
    if (o.out && cli_out_begin(&fout, o.out) != 0)
        goto done;
    if (o.counts && cli_out_begin(&fcounts, o.counts) != 0)
        goto done;

    int64_t B, V, D = 0;
    if (o.logits) {
        /* f16 logits are widened to f32 on load: exact, so the tokens are those of the f16 values. */
        const fls_dtype f32 = FLS_DTYPE_F32;
        cli_progress("loading %s", o.logits);
        if (fls_npy_read_matrix(o.logits, &f32, &L, err) != FLS_OK) {
            cli_error("--logits: %s", err);
            goto done;
        }
        B = L.rows;
        V = L.cols;
    } else {
        cli_progress("loading %s", o.weights);
        if (fls_npy_read_matrix(o.weights, o.weights_dtype ? &wdtype : NULL, &W, err) != FLS_OK) {
            cli_error("--weights: %s", err);
            goto done;
        }
        cli_progress("loading %s", o.hidden);
        if (fls_npy_read_matrix(o.hidden, NULL, &H, err) != FLS_OK) {
            cli_error("--hidden: %s", err);
            goto done;
        }
        /* A 1-D W would silently read as a single vocabulary row: require the (V, D) matrix. */
        if (W.ndim != 2) {
            cli_error("--weights: %s: expected a 2-D array (V, D), got a 1-D array", o.weights);
            goto done;
        }
        V = W.rows;
        D = W.cols;
        B = H.rows;
        if (H.cols != D) {
            cli_error("shape mismatch: --weights %s is (V=%lld, D=%lld) but --hidden %s is (B=%lld, D=%lld); "
                      "H must be (B, %lld)",
                      o.weights, (long long)V, (long long)D, o.hidden, (long long)H.rows, (long long)H.cols,
                      (long long)D);
            goto done;
        }
    }
    if (o.row_seeds && load_row_seeds(o.row_seeds, B, &row_seeds) != 0)
        goto done;

    if ((uint64_t)B > SIZE_MAX / 8 / (uint64_t)draws ||
        (o.counts && (uint64_t)B > SIZE_MAX / 8 / (uint64_t)V)) {
        cli_error("output too large: B=%lld, N=%lld, V=%lld", (long long)B, (long long)draws, (long long)V);
        goto done;
    }
    size_t ntok = (size_t)B * (size_t)draws;
    tokens = malloc(ntok * sizeof *tokens);
    if (!tokens) {
        cli_error("out of memory for %zu tokens", ntok);
        goto done;
    }

    fls_context_config cfg;
    fls_context_config_default(&cfg);
    cfg.engine = engine;
    cfg.threads = (int)threads;
    fls_status st = fls_context_create(&ctx, &cfg);
    if (st != FLS_OK) {
        cli_error("cannot create the %s engine: %s", engine == FLS_ENGINE_CUDA ? "CUDA" : "CPU",
                  fls_status_string(st));
        goto done;
    }

    fls_params p;
    fls_params_default(&p);
    p.temperature_value = temperature;
    p.seed = seed;
    p.row_seeds = row_seeds;
    p.offset = offset;
    p.draws = draws;

    fls_matrix mW = {W.data, W.dtype, W.rows, W.cols, W.cols};
    fls_matrix mH = {H.data, H.dtype, H.rows, H.cols, H.cols};
    fls_matrix mL = {L.data, L.dtype, L.rows, L.cols, L.cols};
    fls_outputs out = {tokens, NULL, NULL};
    if (engine == FLS_ENGINE_CUDA) {
        cli_progress("copying inputs to the GPU");
        if (o.logits) {
            if (copy_to_device(L.data, (size_t)(B * V) * fls_dtype_size(L.dtype), &dL, "the logits") != 0)
                goto done;
            mL.data = dL;
        } else {
            if (copy_to_device(W.data, (size_t)(V * D) * fls_dtype_size(W.dtype), &dW, "W") != 0 ||
                copy_to_device(H.data, (size_t)(B * D) * fls_dtype_size(H.dtype), &dH, "H") != 0)
                goto done;
            mW.data = dW;
            mH.data = dH;
        }
        if ((st = fls_cuda_malloc(&dtok, ntok * sizeof *tokens)) != FLS_OK) {
            cli_error("--device cuda: cannot allocate the tokens on the GPU: %s", fls_status_string(st));
            goto done;
        }
        out.tokens = dtok;
    }

    cli_progress("sampling B=%lld V=%lld N=%lld", (long long)B, (long long)V, (long long)draws);
    double t0 = cli_now();
    st = o.logits ? fls_sample_logits(ctx, &mL, &p, &out) : fls_sample_fused(ctx, &mW, &mH, &p, &out);
    double elapsed = cli_now() - t0;
    if (st == FLS_OK && engine == FLS_ENGINE_CUDA)
        st = fls_cuda_memcpy(tokens, dtok, ntok * sizeof *tokens, 0);
    cli_progress_done();
    if (st != FLS_OK) {
        cli_error("sampling failed: %s", fls_status_string(st));
        goto done;
    }
    for (size_t i = 0; i < ntok; i++)
        if (tokens[i] < 0 || tokens[i] >= V) {
            cli_error("internal error: token %lld out of range [0, %lld) (please report)",
                      (long long)tokens[i], (long long)V);
            goto done;
        }

    if (o.counts) {
        counts = calloc((size_t)B * (size_t)V, sizeof *counts);
        if (!counts) {
            cli_error("out of memory for the counts (%lld x %lld)", (long long)B, (long long)V);
            goto done;
        }
        for (int64_t b = 0; b < B; b++)
            for (int64_t n = 0; n < draws; n++)
                counts[b * V + tokens[b * draws + n]]++;
    }

    /* Write everything to the temporary files, then rename them all. */
    const int64_t tshape[2] = {B, draws}, cshape[2] = {B, V};
    if (o.out && cli_out_write_npy(&fout, FLS_NPY_I8, 2, tshape, tokens) != 0)
        goto done;
    if (o.counts && cli_out_write_npy(&fcounts, FLS_NPY_I8, 2, cshape, counts) != 0)
        goto done;
    if (o.out && cli_out_commit(&fout) != 0)
        goto done;
    if (o.counts && cli_out_commit(&fcounts) != 0)
        goto done;

    if (!o.out) {
        if (o.logits)
            printf("sampled %lld row%s, V=%lld, %lld draw%s per row from logits (%s)", (long long)B,
                   B == 1 ? "" : "s", (long long)V, (long long)draws, draws == 1 ? "" : "s", input_desc(&L));
        else
            printf("sampled %lld row%s, V=%lld, D=%lld, %lld draw%s per row, fused (W %s, H %s)",
                   (long long)B, B == 1 ? "" : "s", (long long)V, (long long)D, (long long)draws,
                   draws == 1 ? "" : "s", input_desc(&W), input_desc(&H));
        printf("; T=%g, ", (double)temperature);
        if (o.row_seeds)
            printf("row seeds from %s", o.row_seeds);
        else
            printf("seed %llu", (unsigned long long)seed);
        printf(", offset %llu; %s", (unsigned long long)offset, engine == FLS_ENGINE_CUDA ? "cuda" : "cpu");
        if (engine == FLS_ENGINE_CPU)
            printf(" (%d threads, %s)", fls_context_threads(ctx), fls_simd_name(fls_context_simd(ctx)));
        printf(", %.3f ms\n", elapsed * 1e3);
        int64_t show = draws < 16 ? draws : 16;
        printf("row 0 tokens:");
        for (int64_t n = 0; n < show; n++)
            printf(" %lld", (long long)tokens[n]);
        printf("%s\n", show < draws ? " ..." : "");
    }
    rc = CLI_OK;

done:
    cli_progress_done();
    cli_out_abort(&fout);
    cli_out_abort(&fcounts);
    fls_cuda_free(dW);
    fls_cuda_free(dH);
    fls_cuda_free(dL);
    fls_cuda_free(dtok);
    fls_context_destroy(ctx);
    fls_npy_matrix_free(&W);
    fls_npy_matrix_free(&H);
    fls_npy_matrix_free(&L);
    free(row_seeds);
    free(tokens);
    free(counts);
    return rc;
}
