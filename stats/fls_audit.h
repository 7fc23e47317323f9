/*
 * fls_audit.h — the goodness-of-fit audit of flashsample (stats/).
 *
 * fls_audit_run draws samples through the public API (fls_sample_logits and
 * fls_sample_fused) for a fixed list of cases (flat, Zipf, peaked, heavy-tailed,
 * masked logits; per-row temperature; T = 0) and tests each against the exact
 * categorical with Pearson chi-square on equal-mass bins, at a per-test level
 * from a family-wise false-failure budget (see fls_stats.h). Seeds are fixed and
 * logged, so every row is reproducible.
 */
#ifndef FLS_AUDIT_H
#define FLS_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#include "flashsample.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fls_audit_row {
    char test[64];  /* case name, e.g. "zipf-fused" */
    char engine[8]; /* "cpu" or "cuda" */
    int64_t V;
    int64_t draws; /* total samples drawn */
    double chi2;
    int dof;
    double p;     /* gsl_cdf_chisq_Q(chi2, dof) */
    double alpha; /* per-test level after family-wise control */
    int pass;     /* p >= alpha */
} fls_audit_row;

typedef struct fls_audit_options {
    int full;          /* 0 = quick (seconds), 1 = full (the whole suite, minutes) */
    fls_engine engine; /* FLS_ENGINE_CPU or FLS_ENGINE_CUDA */
    int threads;       /* CPU threads, 0 = all */
    uint64_t seed;     /* base seed, logged */
    int progress;      /* print progress to stderr */
} fls_audit_options;

void fls_audit_options_default(fls_audit_options *o);

/* Runs the goodness-of-fit cases; *rows is malloc'ed (caller frees). Returns an error status only if
 * sampling itself failed; failed tests are rows with pass = 0. */
fls_status fls_audit_run(const fls_audit_options *o, fls_audit_row **rows, size_t *n_rows);

#ifdef __cplusplus
}
#endif

#endif /* FLS_AUDIT_H */
