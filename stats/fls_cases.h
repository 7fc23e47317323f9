/*
 * fls_cases.h — the goodness-of-fit cases of the audit, one list for
 * fls_audit_run (the command line), tests/stats (CPU) and tests/gpu (CUDA).
 *
 * Layering of stats/ (one direction, no loop): the statistics core
 * (fls_stats.h: reference, binning, chi-square, power, family, reference
 * sampler) knows no case; the case list (this header, cases.c) uses the core;
 * the runner (fls_audit.h, audit.c) uses both.
 */
#ifndef FLS_CASES_H
#define FLS_CASES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fls_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fls_audit_options {
    int full;          /* 0 = quick (seconds), 1 = full (the whole suite, minutes) */
    fls_engine engine; /* FLS_ENGINE_CPU or FLS_ENGINE_CUDA */
    int threads;       /* CPU threads, 0 = all */
    uint64_t seed;     /* base seed, logged */
    int progress;      /* print progress to stderr */
    /* The family of the run this audit is part of (declared by the caller,
     * which must have added this audit's tests: fls_audit_family_add). NULL:
     * the audit is a run of its own and declares its family itself. */
    const fls_stats_family *family;
} fls_audit_options;

void fls_audit_options_default(fls_audit_options *o);

typedef enum fls_case_kind {
    FLS_CASE_GOF = 0,          /* marginal distribution of the sampled token */
    FLS_CASE_PAIRS_OFFSET = 1, /* (token at offset o, token at offset o + 1), same seed */
    FLS_CASE_PAIRS_DRAW = 2,   /* (draw 2k, draw 2k + 1), same seed and offset */
    FLS_CASE_PAIRS_SEED = 3    /* (seed s, seed s + 1) as raw row seeds, same offset */
} fls_case_kind;

typedef enum fls_case_shape {
    FLS_SHAPE_FLAT = 0,   /* all logits equal */
    FLS_SHAPE_ZIPF = 1,   /* l = -1.1 log(rank), ranks a random permutation */
    FLS_SHAPE_PEAKED = 2, /* N(0, 1) and one token 12 nats above */
    FLS_SHAPE_HEAVY = 3,  /* a head of 1-3 tokens, the rest 15-25 nats below */
    FLS_SHAPE_MASKED = 4, /* N(0, 1.5) with about 40% of the tokens at -inf */
    FLS_SHAPE_NORMAL = 5, /* N(0, scale) */
    FLS_SHAPE_TIES = 6,   /* N(0, 1) and the maximum repeated at three places (greedy) */
    FLS_SHAPE_COIN = 7,   /* V = 2: {0, -0.85}, p = (0.70, 0.30) */
    FLS_SHAPE_DEEP = 8    /* a head, 12% of the tokens 10.5-14.5 nats below, the rest scale..30 nats below */
} fls_case_shape;

typedef struct fls_audit_case {
    const char *name;
    fls_case_kind kind;
    int fused; /* 0: fls_sample_logits, 1: fls_sample_fused */
    fls_method method;
    fls_case_shape shape;
    double scale; /* FLS_SHAPE_NORMAL: standard deviation; FLS_SHAPE_DEEP: depth where the deep tail starts */
    int64_t V;
    int groups;          /* distinct reference distributions: temperature and (fused) H row */
    float temps[8];      /* temperature of each group */
    int rows_per_group;  /* rows with their own seeds per group (pairs: pairs of rows) */
    fls_dtype w_dtype;   /* fused: dtype of W */
    int64_t D;           /* fused: columns of W and H */
    int tier;            /* 0: every run (quick); 1: full runs; 2: full runs on the CUDA engine only;
                          * 3: every run on the CUDA engine, full runs on the CPU */
    int tail;            /* runs the tail tests (t = 10, 15, 20, 25) beside the goodness of fit */
    double tail_deficit; /* > 0: enough draws that the t = 15 test catches this relative deficit */
} fls_audit_case;

/* The full list. */
size_t fls_audit_case_count(void);
const fls_audit_case *fls_audit_case_get(size_t i);
/* Whether case i is part of a run of mode full (0/1) on this engine (tiers). */
int fls_audit_case_in_run(size_t i, int full, fls_engine engine);
/* Cases of such a run, and the index in the full list of its k-th ((size_t)-1 if none). */
size_t fls_audit_run_count(int full, fls_engine engine);
size_t fls_audit_run_index(int full, fls_engine engine, size_t k);
/* Chance-failing tests (rows) case i makes: the goodness of fit, and the
 * FLS_STATS_N_TAILS tail tests if it has them. Each is one member of a run's
 * family. */
int fls_audit_case_tests(size_t i);
/* Tests of such a run: what an audit run adds to its family. */
int fls_audit_run_tests(int full, fls_engine engine);

/* Runs case i of the full list on ctx (whose engine must be o->engine) at
 * level alpha (the run's family's) and fills its fls_audit_case_tests(i) rows
 * (test names "<case>" and "<case>/tail<t>"). If sampling fails (or memory
 * runs out) every row of the case is an error row (status set, pass 0) and
 * that status is returned; the other cases of a run are not affected.
 * Progress, the seeds and what each test can see go to stderr when
 * o->progress. */
fls_status fls_audit_run_case(fls_context_t *ctx, const fls_audit_options *o, double alpha, size_t i,
                              fls_audit_row *rows);
#ifdef __cplusplus
}
#endif

#endif /* FLS_CASES_H */
