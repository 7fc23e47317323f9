/*
 * quickstart.c — the whole flow of the C API in one program that compiles and
 * runs as is: a small random LM head W (V, D) in bf16, hidden states H (B, D)
 * in f32, four draws per row at temperature 0.7 with per-request seeds, then
 * the same rows with min-p and top-k, then from materialized logits.
 *
 * Build against an installed flashsample (README, "Installing"):
 *     cc quickstart.c $(pkg-config --cflags --libs flashsample) -o quickstart
 * In this tree the tests build and run it (meson test quickstart).
 */
#include <flashsample.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { B = 3, V = 1000, D = 64, DRAWS = 4 };

/* A small deterministic generator for the example's inputs (xorshift64*). */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float rand_unit(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 2685821657736338717ull) >> 40) / 16777216.0f - 0.5f;
}

static int check(fls_status st, const char *what)
{
    if (st != FLS_OK) {
        fprintf(stderr, "quickstart: %s: %s\n", what, fls_status_string(st));
        return 1;
    }
    return 0;
}

int main(void)
{
    uint16_t *w = malloc(sizeof(uint16_t) * V * D); /* bf16 weights */
    float *h = malloc(sizeof(float) * B * D);
    float *logits = malloc(sizeof(float) * B * V);
    if (!w || !h || !logits) {
        fprintf(stderr, "quickstart: out of memory\n");
        return 1;
    }
    for (int i = 0; i < V * D; i++)
        w[i] = fls_f32_to_bf16(rand_unit());
    for (int i = 0; i < B * D; i++)
        h[i] = 4.0f * rand_unit();

    fls_context_config cfg;
    fls_context_config_default(&cfg); /* the CPU engine, all cores */
    fls_context_t *ctx = NULL;
    int bad = check(fls_context_create(&ctx, &cfg), "fls_context_create");

    fls_matrix W = {w, FLS_DTYPE_BF16, V, D, D}; /* (V, D), row stride D */
    fls_matrix H = {h, FLS_DTYPE_F32, B, D, D};  /* (B, D) */
    const uint64_t seeds[B] = {11, 22, 33};      /* per request: the token does not depend on the batch */

    fls_params p;
    fls_params_default(&p);
    p.temperature_value = 0.7f;
    p.row_seeds = seeds;
    p.offset = 5;    /* the decode step */
    p.draws = DRAWS; /* independent samples per row, one pass over W */
    int64_t tokens[B * DRAWS];
    float lse[B], logprobs[B * DRAWS];
    fls_outputs out = {tokens, lse, logprobs}; /* lse and logprobs are optional (NULL) */
    if (!bad)
        bad = check(fls_sample_fused(ctx, &W, &H, &p, &out), "fls_sample_fused");
    for (int b = 0; b < B && !bad; b++) {
        printf("row %d (logsumexp %.3f):", b, lse[b]);
        for (int j = 0; j < DRAWS; j++)
            printf(" %lld (logprob %.2f)", (long long)tokens[b * DRAWS + j], logprobs[b * DRAWS + j]);
        printf("\n");
    }

    /* rules (docs/RULES.md): min-p, top-k, top-p and the registry's filters, by name */
    p.min_p = 0.05f;
    p.top_k = 50;
    p.filter = "epsilon";
    p.filter_value = 0.001;
    if (!bad)
        bad = check(fls_sample_fused(ctx, &W, &H, &p, &out), "fls_sample_fused with rules");
    if (!bad)
        printf("with min-p 0.05, top-k 50, epsilon 0.001: row 0 draws %lld %lld %lld %lld\n",
               (long long)tokens[0], (long long)tokens[1], (long long)tokens[2], (long long)tokens[3]);

    /* from materialized logits: the same noise, so the same token for the same floats */
    for (int b = 0; b < B; b++)
        for (int v = 0; v < V; v++)
            logits[b * V + v] = 2.0f * rand_unit();
    logits[0 * V + 7] = -INFINITY; /* -inf masks a token */
    fls_matrix L = {logits, FLS_DTYPE_F32, B, V, V};
    fls_params_default(&p);
    p.seed = 1234; /* one seed for the batch: row b uses fls_row_seed(1234, b) */
    fls_outputs lout = {tokens, NULL, NULL};
    if (!bad)
        bad = check(fls_sample_logits(ctx, &L, &p, &lout), "fls_sample_logits");
    if (!bad)
        printf("from logits: %lld %lld %lld\n", (long long)tokens[0], (long long)tokens[1],
               (long long)tokens[2]);

    /* bad input is an error that writes nothing */
    p.temperature_value = -1.0f;
    const fls_status st = fls_sample_logits(ctx, &L, &p, &lout);
    printf("a negative temperature: %s\n", fls_status_string(st));
    bad |= st != FLS_ERR_TEMPERATURE;

    fls_context_destroy(ctx);
    free(w);
    free(h);
    free(logits);
    return bad;
}
