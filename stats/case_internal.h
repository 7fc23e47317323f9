/*
 * case_internal.h — what the parts of the case list share inside stats/ (not
 * an API): the inputs of a case (case_inputs.c), how its tokens are drawn
 * (case_io.c); the table is case_table.c, the runner cases.c.
 */
#ifndef FLS_CASE_INTERNAL_H
#define FLS_CASE_INTERNAL_H

#include <gsl/gsl_rng.h>
#include <stdint.h>

#include "stats/fls_cases.h"

/* ---- inputs (case_inputs.c) ---- */

/* splitmix64's finalizer (the row-offset spreader of the pairs-offset case, seeds). */
uint64_t case_splitmix64(uint64_t z);
/* FNV-1a of a case's name: its input seed. */
uint64_t case_name_hash(const char *s);
/* Monotonic seconds. */
double case_now(void);
/* The case's target logits (float values, as the logits path receives them).
 * Shapes with planted ties list the tied tokens in tie (at most 3; the fused
 * path copies their rows of W, so their logits are bit-identical there too). */
void case_gen_logits(const fls_audit_case *c, gsl_rng *r, float *l, int64_t *tie, int *n_tie);
/* W (V, D) in the case's dtype and H (groups, D) f32 for the fused path
 * (cases.c's header comment); malloc'ed into *W and *H. */
fls_status case_gen_fused(const fls_audit_case *c, gsl_rng *r, const float *target, const int64_t *tie,
                          int n_tie, void **W, float **H);

/* ---- calling the engine (case_io.c) ---- */

typedef struct case_io {
    fls_context_t *ctx;
    int cuda;
    int fused;
    fls_matrix L, W, H; /* host views */
    void *dL, *dW, *dH; /* device copies (CUDA engine) */
    int64_t *dtok;
    size_t dtok_bytes;
    int fault; /* fls_audit_options.fault_case names this case */
    fls_case_io mode;
    int pieces;        /* stream: chunks; shards: shards */
    gsl_rng *chunking; /* the random chunkings and orders (seeded per call, logged) */
} case_io;

/* The inputs to device memory (CUDA engine; nothing on the CPU). */
fls_status case_io_prepare(case_io *io);
void case_io_release(case_io *io);
/* One batch of draws (B rows, p->draws each) into tokens (host), through one
 * call or the streaming API (io->mode). tokens are filled with the guard -1
 * first: a token the engine fails to write is out of range and fails the
 * test. With fls_audit_options.fault_case naming the case (io->fault) sampling fails. */
fls_status case_io_sample(case_io *io, const fls_params *p, int64_t B, int64_t *tokens);

#endif /* FLS_CASE_INTERNAL_H */
