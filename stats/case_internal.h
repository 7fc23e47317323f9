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

/* The masks, bias and penalties of a case (fls_case_mods) resolved into
 * fls_params' per-row layout for B rows (row b: group b % groups). */
typedef struct case_mods {
    int64_t B, ld, ld_param; /* ld: the words' row stride; ld_param: bitmask_ld */
    int32_t *mask;           /* B * ld words, NULL: no mask */
    uint8_t *rows;           /* bitmask_rows, NULL: every row masked */
    int64_t K, S;
    int64_t *bias_ids, *seen_ids; /* B * K, B * S (ranks resolved to ids) */
    float *bias_values;
    int32_t *seen_counts;
    float *rep, *pres, *freq; /* B */
    int row_pen;              /* the groups' penalties differ: the row_ arrays */
} case_mods;

/* Resolves c->ext->mods against the target logits (ranks by decreasing
 * value, lowest index first on ties); the masks' random drops from mt19937
 * seeded with input_seed and the group. *m is zeroed first (no mods: all
 * NULL). FLS_ERR_OUT_OF_MEMORY, or FLS_ERR_PARAM for a rank or id outside V. */
fls_status case_mods_make(const fls_audit_case *c, uint64_t input_seed, const float *target, int64_t B,
                          case_mods *m);
void case_mods_free(case_mods *m);
/* Row b's changes as the reference reads them, less the parts in omit
 * (FLS_AUDIT_OMIT_*). */
void case_mods_row(const case_mods *m, int64_t b, unsigned omit, fls_stats_mods *out);
/* The changes into the call's parameters (host arrays). */
void case_mods_params(const case_mods *m, fls_params *p);

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
