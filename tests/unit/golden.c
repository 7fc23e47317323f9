/*
 * golden.c — the CPU engine's tokens over every rule, method and dtype,
 * against a committed file (tests/golden_tokens.txt), so that a change that
 * should not move a single token (a reorganisation, a refactor of a rule's
 * planning) is checked token for token.
 *
 *   unit_golden FILE            compare (exit 0: identical, 1: a line differs)
 *   unit_golden --write FILE    write FILE anew (only when tokens are meant to change)
 *
 * Inputs are deterministic (a 64-bit LCG, no library code), logits are
 * multiples of 1/8 in part of the cases so that ties at rule boundaries
 * occur, and every case samples several draws of several rows.
 */
#include "flashsample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GB 5   /* rows */
#define GV 777 /* tokens: no multiple of any tile */
#define GD 24  /* hidden size */
#define GN 6   /* draws */
#define GK 3   /* without replacement */

static uint64_t g_lcg;

static double next_unit(void)
{
    g_lcg = g_lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_lcg >> 11) / 9007199254740992.0;
}

static float next_normal(void)
{
    const double u = next_unit(), w = next_unit();
    return (float)(sqrt(-2.0 * log(u > 0.0 ? u : 1e-300)) * cos(6.283185307179586 * w));
}

typedef struct golden_inputs {
    float w32[GV * GD], h32[GB * GD], logits[GB * GV];
    uint16_t w16[GV * GD], wb16[GV * GD];
} golden_inputs;

static void make_inputs(golden_inputs *in)
{
    g_lcg = 20261202;
    for (int i = 0; i < GV * GD; i++) {
        in->w32[i] = 0.2f * next_normal();
        in->w16[i] = fls_f32_to_f16(in->w32[i]);
        in->wb16[i] = fls_f32_to_bf16(in->w32[i]);
    }
    for (int i = 0; i < GB * GD; i++)
        in->h32[i] = next_normal();
    /* logits: rows 0-2 Gaussian, rows 3-4 on a grid of 1/8 (ties everywhere) */
    for (int b = 0; b < GB; b++)
        for (int v = 0; v < GV; v++) {
            const float z = 2.0f * next_normal();
            in->logits[b * GV + v] = b < 3 ? z : floorf(z * 8.0f) / 8.0f;
        }
    in->logits[1 * GV + 5] = -INFINITY; /* masked tokens */
    in->logits[1 * GV + 700] = -INFINITY;
}

typedef struct golden_rule {
    const char *name;
    float min_p, top_p;
    int64_t top_k, K;
    const char *filter;
    double filter_value;
    int per_row; /* the rule values as per-row arrays */
} golden_rule;

static const golden_rule k_rules[] = {
    {"none", 0.0f, 1.0f, 0, 0, NULL, 0.0, 0},
    {"min-p=0.05", 0.05f, 1.0f, 0, 0, NULL, 0.0, 0},
    {"top-k=10", 0.0f, 1.0f, 10, 0, NULL, 0.0, 0},
    {"top-p=0.9", 0.0f, 0.9f, 0, 0, NULL, 0.0, 0},
    {"top-p=0.999", 0.0f, 0.999f, 0, 0, NULL, 0.0, 0},
    {"top-nsigma=1", 0.0f, 1.0f, 0, 0, "top-nsigma", 1.0, 0},
    {"top-k=50,top-p=0.8", 0.0f, 0.8f, 50, 0, NULL, 0.0, 0},
    {"all", 0.02f, 0.95f, 40, 0, "top-nsigma", 2.0, 0},
    {"wr=3", 0.0f, 1.0f, 0, GK, NULL, 0.0, 0},
    {"wr=3,min-p=0.1", 0.1f, 1.0f, 0, GK, NULL, 0.0, 0},
    {"wr=3,top-k=5,top-p=0.9", 0.0f, 0.9f, 5, GK, NULL, 0.0, 0},
    {"per-row", 0.0f, 1.0f, 0, GK, "top-nsigma", 0.0, 1},
    {"epsilon=0.002", 0.0f, 1.0f, 0, 0, "epsilon", 0.002, 0},
    {"top-k=50,top-p=0.95,epsilon=0.01", 0.0f, 0.95f, 50, 0, "epsilon", 0.01, 0},
    {"wr=3,epsilon=0.001", 0.0f, 1.0f, 0, GK, "epsilon", 0.001, 0},
};

static const float k_temps[] = {1.0f, 0.7f, 0.0f};

typedef struct golden_call {
    fls_context_t *ctx;
    const golden_inputs *in;
    FILE *out;
} golden_call;

static void print_line(FILE *f, const char *what, fls_status st, const int64_t *tok, int64_t n)
{
    fprintf(f, "%s:", what);
    if (st != FLS_OK) {
        fprintf(f, " status %d\n", (int)st);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        fprintf(f, " %lld", (long long)tok[i]);
    fputc('\n', f);
}

/* One call: W of dtype wd (NULL method: from logits), the rule, T. */
static void run_case(const golden_call *gc, const char *src, fls_dtype wd, fls_method method,
                     const golden_rule *r, float T, int64_t group_size)
{
    fls_params p;
    fls_params_default(&p);
    p.method = method;
    p.temperature_value = T;
    p.seed = 4242;
    p.offset = 3;
    p.draws = GN;
    p.min_p = r->min_p;
    p.top_p = r->top_p;
    p.top_k = r->top_k;
    p.without_replacement_k = r->K;
    p.filter = r->filter;
    p.filter_value = r->filter_value;
    p.group_size = group_size;
    int64_t row_k[GB] = {0, 3, 20, 1, 777}, row_wr[GB] = {1, 2, 3, 3, 1};
    float row_p[GB] = {1.0f, 0.5f, 0.9f, 0.99f, 0.7f}, row_mp[GB] = {0.0f, 0.01f, 0.2f, 0.0f, 0.5f};
    double row_f[GB] = {0.0, 1.0, 0.5, 3.0, 1.5};
    if (r->per_row) {
        p.row_top_k = row_k;
        p.row_top_p = row_p;
        p.row_min_p = row_mp;
        p.row_without_replacement_k = row_wr;
        p.row_filter_value = row_f;
    }
    const int64_t K = r->K > 0 ? r->K : 1, n = (int64_t)GB * GN * K;
    int64_t *tok = malloc((size_t)n * sizeof *tok);
    if (!tok) {
        fprintf(stderr, "golden: out of memory\n");
        exit(2);
    }
    for (int64_t i = 0; i < n; i++)
        tok[i] = -7; /* guard: an unwritten entry shows */
    fls_outputs out = {tok, NULL, NULL};
    fls_status st;
    if (!strcmp(src, "logits")) {
        fls_matrix L = {gc->in->logits, FLS_DTYPE_F32, GB, GV, GV};
        st = fls_sample_logits(gc->ctx, &L, &p, &out);
    } else {
        const void *w = wd == FLS_DTYPE_F32   ? (const void *)gc->in->w32
                        : wd == FLS_DTYPE_F16 ? (const void *)gc->in->w16
                                              : (const void *)gc->in->wb16;
        fls_matrix W = {w, wd, GV, GD, GD};
        fls_matrix H = {gc->in->h32, FLS_DTYPE_F32, GB, GD, GD};
        st = fls_sample_fused(gc->ctx, &W, &H, &p, &out);
    }
    static const char *const mnames[] = {"fused", "unfused-gumbel", "multinomial", "grouped"};
    char what[256];
    snprintf(what, sizeof what, "%s %s %s T=%g %s", src, src[0] == 'l' ? "-" : fls_dtype_name(wd),
             mnames[method], (double)T, r->name);
    print_line(gc->out, what, st, tok, n);
    free(tok);
}

/* The streaming API: the flat and grouped methods in uneven chunks. */
static void run_stream(const golden_call *gc, fls_method method, float T)
{
    fls_params p;
    fls_params_default(&p);
    p.method = method;
    p.temperature_value = T;
    p.seed = 99;
    p.draws = GN;
    p.group_size = method == FLS_METHOD_GROUPED ? 16 : 0;
    int64_t tok[GB * GN];
    for (int i = 0; i < GB * GN; i++)
        tok[i] = -7;
    fls_stream_t *s = NULL;
    fls_status st = fls_stream_create(&s, gc->ctx, GB, GV, &p);
    const int64_t cuts[] = {0, 96, 400, 416, GV};
    for (int c = 0; c < 4 && st == FLS_OK; c++) {
        fls_matrix L = {gc->in->logits + cuts[c], FLS_DTYPE_F32, GB, cuts[c + 1] - cuts[c], GV};
        st = fls_stream_feed_logits(s, &L, cuts[c]);
    }
    fls_outputs out = {tok, NULL, NULL};
    if (st == FLS_OK)
        st = fls_stream_finalize(s, &out);
    fls_stream_destroy(s);
    char what[128];
    snprintf(what, sizeof what, "stream %s T=%g", method == FLS_METHOD_GROUPED ? "grouped" : "fused",
             (double)T);
    print_line(gc->out, what, st, tok, GB * GN);
}

static int write_all(FILE *f)
{
    golden_inputs *in = malloc(sizeof *in);
    if (!in)
        return 2;
    make_inputs(in);
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    cfg.threads = 2;
    fls_context_t *ctx = NULL;
    if (fls_context_create(&ctx, &cfg) != FLS_OK) {
        free(in);
        return 2;
    }
    golden_call gc = {ctx, in, f};
    const size_t nr = sizeof k_rules / sizeof k_rules[0];
    for (size_t t = 0; t < sizeof k_temps / sizeof k_temps[0]; t++) {
        for (size_t r = 0; r < nr; r++) {
            run_case(&gc, "logits", FLS_DTYPE_F32, FLS_METHOD_FUSED, &k_rules[r], k_temps[t], 0);
            run_case(&gc, "fused", FLS_DTYPE_F32, FLS_METHOD_FUSED, &k_rules[r], k_temps[t], 0);
            run_case(&gc, "fused", FLS_DTYPE_F16, FLS_METHOD_FUSED, &k_rules[r], k_temps[t], 0);
            run_case(&gc, "fused", FLS_DTYPE_BF16, FLS_METHOD_FUSED, &k_rules[r], k_temps[t], 0);
            run_case(&gc, "fused", FLS_DTYPE_BF16, FLS_METHOD_UNFUSED_GUMBEL, &k_rules[r], k_temps[t], 0);
            run_case(&gc, "fused", FLS_DTYPE_BF16, FLS_METHOD_UNFUSED_MULTINOMIAL, &k_rules[r], k_temps[t],
                     0);
            run_case(&gc, "logits", FLS_DTYPE_F32, FLS_METHOD_UNFUSED_MULTINOMIAL, &k_rules[r], k_temps[t],
                     0);
        }
        run_case(&gc, "fused", FLS_DTYPE_BF16, FLS_METHOD_GROUPED, &k_rules[0], k_temps[t], 16);
        run_case(&gc, "logits", FLS_DTYPE_F32, FLS_METHOD_GROUPED, &k_rules[0], k_temps[t], 64);
        run_stream(&gc, FLS_METHOD_FUSED, k_temps[t]);
        run_stream(&gc, FLS_METHOD_GROUPED, k_temps[t]);
    }
    fls_context_destroy(ctx);
    free(in);
    return 0;
}

int main(int argc, char **argv)
{
    const int write = argc == 3 && !strcmp(argv[1], "--write");
    if (!(argc == 2 || write)) {
        fprintf(stderr, "usage: %s GOLDEN_FILE | --write GOLDEN_FILE\n", argv[0]);
        return 2;
    }
    const char *path = argv[argc - 1];
    if (write) {
        FILE *f = fopen(path, "w");
        if (!f) {
            perror(path);
            return 2;
        }
        const int rc = write_all(f);
        return fclose(f) == 0 ? rc : 2;
    }
    char *now = NULL;
    size_t now_len = 0;
    FILE *m = open_memstream(&now, &now_len);
    if (!m)
        return 2;
    int rc = write_all(m);
    fclose(m);
    FILE *g = fopen(path, "r");
    if (!g) {
        perror(path);
        free(now);
        return 2;
    }
    /* line by line: the first differing case, and how many differ */
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0, differ = 0, golden_lines = 0;
    const char *cur = now;
    while (getline(&line, &cap, g) > 0) {
        lineno++;
        golden_lines++;
        const char *nl = cur ? strchr(cur, '\n') : NULL;
        const size_t len = nl ? (size_t)(nl - cur + 1) : 0;
        if (!nl || strlen(line) != len || memcmp(line, cur, len) != 0) {
            if (differ++ == 0) {
                fprintf(stderr, "golden: line %ld differs\n  golden: %s", lineno, line);
                fprintf(stderr, "  now:    %.*s\n", nl ? (int)(nl - cur) : 0, nl ? cur : "");
            }
        }
        cur = nl ? nl + 1 : NULL;
    }
    if (cur && *cur) {
        differ++;
        fprintf(stderr, "golden: the engine printed more lines than %s holds\n", path);
    }
    free(line);
    fclose(g);
    free(now);
    if (rc != 0)
        return rc;
    if (differ) {
        fprintf(stderr, "golden: %ld of %ld cases differ from %s\n", differ, golden_lines, path);
        return 1;
    }
    printf("golden: %ld cases, every token identical to %s\n", golden_lines, path);
    return 0;
}
