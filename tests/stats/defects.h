/*
 * defects.h — exact and deliberately wrong samplers for the defect gallery
 * (test_defects.c, in CI) and the detection table (defect_table.c, docs/AUDIT.md).
 *
 * Every sampler draws tokens (B, N) from logits (B, V) at per-row
 * temperatures, as a serving engine would, with a seed; the audit
 * (fls_audit_tokens) then tests them against the exact categorical.
 */
#ifndef FLS_DEFECTS_H
#define FLS_DEFECTS_H

#include <stdint.h>

#include "flashsample.h"

typedef struct gallery_input {
    const float *logits; /* (B, V) */
    int64_t B, V;
    const float *temps; /* B */
} gallery_input;

typedef fls_status (*gallery_sampler)(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens);

typedef struct gallery_entry {
    const char *name;
    const char *what;
    int exact; /* 1: an exact sampler (must not be flagged beyond the false-failure budget) */
    gallery_sampler fn;
} gallery_entry;

/* Exact: our engine (fls_sample_logits, row seeds fls_row_seed(seed, b)). */
fls_status sampler_ours(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens);
/* Exact: Walker's alias on gsl_rng_mt19937 with a 53-bit accept (fls_refsampler), double softmax. */
fls_status sampler_alias(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens);
/* gsl_ran_discrete on mt19937: exact up to its 32-bit uniform (probabilities are multiples of ~2^-32). */
fls_status sampler_gsl_discrete(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens);
/* Gumbel-max with 24-bit uniforms, G = -logf(-logf(u)), u = k 2^-24 in float32
 * (G <= 16.64): simulated exactly with a skip over tokens that cannot win (see
 * defects.c); sampler_gumbel24_literal is the plain loop (O(V) per draw). */
fls_status sampler_gumbel24(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens);
fls_status sampler_gumbel24_literal(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens);
/* fp16 logits before the softmax: l rounded to binary16, then exact sampling. */
fls_status sampler_fp16_logits(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens);
/* Noise reused across draws: every draw of a row uses the same noise (our engine
 * called with the same offset and draw index), so all its draws are one token. */
fls_status sampler_reuse_noise(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens);
/* Seeds that ignore the row: every row gets the same seed (our engine with
 * row_seeds[b] = seed): each row's marginal is exact, rows are dependent. */
fls_status sampler_seed_ignores_row(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens);
/* Temperature misuse: softmax(l * T) instead of softmax(l / T). */
fls_status sampler_temp_times(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens);
/* Temperature applied twice: softmax(l / T^2). */
fls_status sampler_temp_twice(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens);
/* Tail cuts: tokens more than 15 (18) nats below the row's head are never
 * drawn (a truncated candidate list), the rest renormalized. */
fls_status sampler_cut15(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens);
fls_status sampler_cut18(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens);

/* Gumbel-max keys rounded to bf16 (8-bit mantissa), as a kernel that keeps its
 * running maximum in bf16 would: keys tie often and the lowest index wins. */
fls_status sampler_bf16_keys(const gallery_input *in, int64_t N, uint64_t seed, int64_t *tokens);

/* The exact distribution of some defective samplers (double, V entries),
 * for power computations: fp16 logits, temperature misuse, tail cuts. */
fls_status defect_probs_fp16(const float *l, int64_t V, double T, double *q);
fls_status defect_probs_temp_times(const float *l, int64_t V, double T, double *q);
fls_status defect_probs_cut(const float *l, int64_t V, double T, double t0, double *q);

#endif
