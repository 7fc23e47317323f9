/*
 * common.h — helpers shared by the unit tests: matrices in any dtype with
 * guard-filled padding, exact-valued inputs, guard-filled outputs, and the
 * reference Gumbel-max sampler written straight from docs/NOISE.md.
 *
 * Exact-valued inputs: W entries are a / 16 and H entries c / 8 with small
 * integers a, c, so every product is a multiple of 2^-7 and every partial sum
 * of up to 2^14 terms is exactly representable in fp32. Any accumulation order
 * (tile, SIMD width, thread split, GEMM) then gives the same float logits, and
 * the values are exact in f16 and bf16 too. With a temperature that is a power
 * of two, l / T, l * (1 / T) and fma(l, 1 / T, G) round identically, so the
 * reference token argmax_v fl(l_v / T + G_v) does not depend on how an engine
 * spells the key.
 */
#ifndef FLS_UNIT_COMMON_H
#define FLS_UNIT_COMMON_H

#include "flashsample.h"
#include "lib/base/fls_noise.h"
#include "lib/front/internal.h"

#include <stddef.h>
#include <stdint.h>

/* Guard values: outputs are filled with these before every call, so a stray
 * write on error, or a missing write on success, shows. */
#define GUARD_TOKEN    ((int64_t)0x5A5A5A5A5A5A5A5Aull)
#define GUARD_F32_BITS 0x7FA5A5A5u /* a signalling-NaN pattern no engine produces */

/* A matrix owned by the test: view plus the allocation behind it. */
typedef struct tmat {
    fls_matrix m;
    void *mem;
} tmat;

/* rows x cols values (row-major, leading dimension cols) stored in dtype with
 * row stride ld >= cols; the padding between cols and ld holds NaN, so an
 * engine that reads past cols fails with FLS_ERR_NAN. Values must be exactly
 * representable in dtype (checked). */
tmat tmat_make(fls_dtype dtype, int64_t rows, int64_t cols, int64_t ld, const float *vals);
/* Like tmat_make but rounds to dtype (round to nearest even) instead of
 * requiring exact values. */
tmat tmat_make_rounded(fls_dtype dtype, int64_t rows, int64_t cols, int64_t ld, const float *vals);
void tmat_free(tmat *t);
/* Element (i, j) of t as float. */
float tmat_get(const tmat *t, int64_t i, int64_t j);
/* Overwrite element (i, j) with the raw dtype encoding of x (NaN/inf allowed). */
void tmat_set(tmat *t, int64_t i, int64_t j, float x);

/* Deterministic test data (splitmix64 stream). */
uint64_t trng_next(uint64_t *state);
/* Uniform integer in [lo, hi]. */
int64_t trng_int(uint64_t *state, int64_t lo, int64_t hi);
/* Uniform float in [-1, 1) with 24 random bits. */
float trng_float(uint64_t *state);

/* Exact-valued inputs (see the top of this file). */
float *exact_w(int64_t V, int64_t D, uint64_t seed); /* a / 16, a in [-8, 8] */
float *exact_h(int64_t B, int64_t D, uint64_t seed); /* c / 8,  c in [-8, 8] */
/* Logits L = H W^T in double, checked to be exact in float. */
float *exact_logits(const float *W, const float *H, int64_t V, int64_t B, int64_t D);
/* A copy of x (n values) rounded to dtype and back (round to nearest even). */
float *round_to_dtype(const float *x, int64_t n, fls_dtype dtype);
/* Random floats in [-1, 1) (not exact; for bit-identity between engine paths). */
float *random_floats(int64_t n, uint64_t seed);

/* Logits L = H W^T (B, V) in the CPU engine's one accumulation order, as
 * lib/cpu/cpu_kernels.h documents it: 16 lanes, lane j accumulating the terms
 * d = j (mod 16) with fma in increasing d, then the tree s[j] = a[j] + a[j+8],
 * t[j] = s[j] + s[j+4], u[j] = t[j] + t[j+2], u[0] + u[1]. Every CPU SIMD
 * path, tiling and thread count must produce exactly these floats, so they
 * are a reference for random (inexact) inputs too. */
float *canonical_logits(const tmat *W, const tmat *H);

/* Reference Gumbel-max token of one logit row (float keys fl(l / T + G),
 * lowest index on equal keys; T = 0 is the argmax). -inf entries are skipped;
 * returns -1 when every entry is -inf. */
int64_t ref_token(const float *l, int64_t V, float T, uint64_t seed, uint64_t offset, uint32_t draw);
/* log sum_v exp(l_v / T) in double (max l for T = 0). */
double ref_logsumexp(const float *l, int64_t V, float T);

/* Outputs with guard fill. */
typedef struct tout {
    int64_t *tokens;
    float *logsumexp;
    float *logprobs;
    int64_t B, draws;
    fls_outputs out;
} tout;

tout tout_make(int64_t B, int64_t draws, int with_stats);
void tout_guard(tout *o);
void tout_free(tout *o);
/* 1 if every output element still holds its guard value. */
int tout_untouched(const tout *o);
/* 1 if every output element was written (tokens in [0, V), stats finite). */
int tout_written(const tout *o, int64_t V);

/* A CPU context; asserts on failure. threads/tile 0 = engine's choice. */
fls_context_t *ctx_make(int threads, fls_simd simd, int64_t tile_v);

/* Reference half conversions, written independently of lib/base/half.c:
 * f32 -> f16/bf16 round to nearest even (overflow to inf, NaN stays NaN). */
float ref_f16_to_f32(uint16_t h);
uint16_t ref_f32_to_f16(float x);
float ref_bf16_to_f32(uint16_t h);
uint16_t ref_f32_to_bf16(float x);

/* Bit pattern helpers. */
uint32_t f2u(float x);
float u2f(uint32_t u);

/* Known-answer files (tests/kat_*.txt): one record a line, a name and
 * hexadecimal fields, '#' starts a comment. kat_each reads path (the value
 * of the environment variable env when set and not empty) and calls fn with
 * the fields of every record named `name`, which must have nfields of them;
 * with strict, a record of another name fails the test too. A file that
 * cannot be opened or a malformed record fails the test (the message names
 * the file, the line and env). Returns the number of records read. */
typedef void (*kat_fn)(const uint64_t *f, int n, int line, void *arg);
int kat_each(const char *path, const char *env, const char *name, int nfields, int strict, kat_fn fn,
             void *arg);
/* path, or the value of the environment variable env when set and not empty. */
const char *kat_path(const char *path, const char *env);

/* Scale factor for long sweeps: 1 natively, smaller under valgrind, where the
 * same checks run on a subsample. */
int64_t sweep_scale_shift(void);

#endif /* FLS_UNIT_COMMON_H */
