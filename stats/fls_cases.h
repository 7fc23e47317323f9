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

#include "stats/fls_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* fls_audit_options.full: 0 = quick (seconds), 1 = full (every case of the
 * engine: minutes on the GPU, tens of minutes on two CPU cores: the heavy
 * CPU cases of tiers 4 and 5), FLS_AUDIT_FULL_CI = full without tiers 4 and 5
 * on the CPU (the CI suite's run). */
#define FLS_AUDIT_FULL_CI 2

typedef struct fls_audit_options {
    int full;          /* 0 = quick, 1 = full, FLS_AUDIT_FULL_CI (above) */
    fls_engine engine; /* FLS_ENGINE_CPU or FLS_ENGINE_CUDA */
    int threads;       /* CPU threads, 0 = all */
    uint64_t seed;     /* base seed, logged */
    int progress;      /* print progress to stderr */
    /* The family of the run this audit is part of (declared by the caller,
     * which must have added this audit's tests: fls_audit_family_add). NULL:
     * the audit is a run of its own and declares its family itself. */
    const fls_stats_family *family;
    /* Fault injection for the audit's own tests: a case of this name ("*":
     * every case) fails to sample, so its rows are error rows. NULL in
     * every real run. */
    const char *fault_case;
    /* A mutation of the reference for the audit's own tests: the cases'
     * exact references leave out these parts of their masks, bias and
     * penalties (FLS_AUDIT_OMIT_*; the engine still gets them all), so
     * such a case must fail. 0 in every real run. */
    unsigned omit_mods;
} fls_audit_options;

#define FLS_AUDIT_OMIT_MASK      1u
#define FLS_AUDIT_OMIT_BIAS      2u
#define FLS_AUDIT_OMIT_PENALTIES 4u

void fls_audit_options_default(fls_audit_options *o);

typedef enum fls_case_kind {
    FLS_CASE_GOF = 0,          /* marginal distribution of the sampled token */
    FLS_CASE_PAIRS_OFFSET = 1, /* (token at offset o, token at offset o + 1), same seed */
    FLS_CASE_PAIRS_DRAW = 2,   /* (draw 2k, draw 2k + 1), same seed and offset */
    FLS_CASE_PAIRS_SEED = 3    /* (seed s, seed s + 1) as raw row seeds, same offset */
} fls_case_kind;

typedef enum fls_case_shape {
    FLS_SHAPE_FLAT = 0,   /* all logits equal: scale, or 0.75 when scale is 0 */
    FLS_SHAPE_ZIPF = 1,   /* l = -1.1 log(rank), ranks a random permutation */
    FLS_SHAPE_PEAKED = 2, /* N(0, 1) and one token 12 nats above */
    FLS_SHAPE_HEAVY = 3,  /* a head of 1-3 tokens, the rest 15-25 nats below */
    FLS_SHAPE_MASKED = 4, /* N(0, 1.5) with about 40% of the tokens at -inf */
    FLS_SHAPE_NORMAL = 5, /* N(0, scale) */
    FLS_SHAPE_TIES = 6,   /* N(0, 1) and the maximum repeated at three places (greedy) */
    FLS_SHAPE_COIN = 7,   /* V = 2: {0, -0.85}, p = (0.70, 0.30) */
    FLS_SHAPE_DEEP = 8,   /* a head, 12% of the tokens 10.5-14.5 nats below, the rest scale..30 nats below */
    FLS_SHAPE_TIE_K = 9,  /* N(0, scale) with the ranks k-1, k, k+1 bit-identical (k = the case's top_k[0]) */
    FLS_SHAPE_TIE_P = 10, /* N(0, scale) with three bit-identical tokens straddling the nucleus of top_p[0] */
    FLS_SHAPE_MASKED_GROUPS =
        11, /* N(0, 1.5), every third group (of group_size) masked, 10% more tokens masked */
    FLS_SHAPE_GROUP_DEEP = 12, /* the head's group: its other members 15.2-25 nats below it; every other
                                  group 10.5-14.5 nats below (a deep tail inside one group) */
    FLS_SHAPE_CLASSES = 13     /* five classes of tied tokens: l_v = 1.5, 0.75, 0, -0.6, -1.2 by v % 5 */
} fls_case_shape;

/* How a case's tokens are drawn. */
typedef enum fls_case_io {
    FLS_IO_CALL = 0, /* one fls_sample_logits / fls_sample_fused call per batch of draws */
    FLS_IO_STREAM =
        1, /* fls_stream_*: the vocabulary fed in random chunks in a random order, then finalized */
    FLS_IO_SHARDS = 2 /* fls_stream_*: random shards fed to their own states, serialized, deserialized and
                         merged in a random order (the tensor-parallel exchange), then finalized */
} fls_case_io;

/* A token of a case's lists: an id >= 0, -1 (padding, passed on as is), or
 * FLS_CASE_RANK(k): the token of rank k (0 = the highest) of the case's
 * target logits (case_inputs.c), by decreasing value, lowest index first on
 * ties. */
#define FLS_CASE_RANK(k) (-2 - (int64_t)(k))

/* The masks, logit bias and penalties of a case (fls_params since 0.4;
 * docs/RULES.md), per group; every row of a group gets its group's. The
 * exact reference applies them to the group's raw logits
 * (fls_stats_mods_apply) before the temperature and the rule. */
typedef struct fls_case_mods {
    /* Allowed-token bitmask: groups with mask[g] != 0 are masked, the others
     * are not (bitmask_rows 0 for their rows; NULL when every group is).
     * A masked group disallows the head_cut highest tokens of the target
     * logits (ranks 0 .. head_cut - 1) and each other token with
     * probability drop (mt19937 seeded with the input seed and the group;
     * the first allowed token is kept). ld_pad > 0: bitmask_ld = ceil(V /
     * 32) + ld_pad, the padding words 0; else bitmask_ld 0. */
    int mask[8];
    int head_cut;
    double drop;
    int ld_pad;
    /* Logit bias: bias_k entries, the same ids (FLS_CASE_RANK or ids) in
     * every group, group g's values bias_value[g][i]. */
    int64_t bias_k;
    int64_t bias_id[8];
    float bias_value[8][8];
    /* Seen tokens: seen_k entries, the same ids in every group, group g's
     * counts seen_count[g][i]. */
    int64_t seen_k;
    int64_t seen_id[8];
    int32_t seen_count[8][8];
    /* Penalties per group (repetition 0 is read as 1); through the scalars
     * when every group has the same, else the row_ arrays. */
    float repetition[8], presence[8], frequency[8];
} fls_case_mods;

/* What a case adds to the temperature rule, and its noise scheme (NULL in
 * the table: nothing, the default per-token noise). The pairs cases
 * (FLS_CASE_PAIRS_*) read its noise only. */
typedef struct fls_case_ext {
    /* The rule family, per group: filter[id][g] is the value of the registry
     * filter id (variants/registry.h, FLS_FILTER_<ID>) in group g, 0 = off
     * (read as the filter's off value: top-p's 0 is its 1). The cases pass the
     * three built-ins (min-p, top-k, top-p) through their fls_params fields
     * and any other filter through `filter` (one slot: a case uses at most one
     * filter beyond the built-ins); through the per-row arrays when the case
     * has several groups. */
    double filter[FLS_FILTER_COUNT][8];
    int64_t wr_k;       /* sampling without replacement: K positions per draw (0: off) */
    int64_t wr_rows[8]; /* per group K_b <= wr_k (0: wr_k) */
    int64_t group_size; /* FLS_METHOD_GROUPED */
    fls_case_io io;
    int pieces;      /* FLS_IO_STREAM: chunks per call; FLS_IO_SHARDS: shards per call */
    fls_noise noise; /* fls_params.noise (FLS_NOISE_MIN_FIRST: the flat method, no rule, FLS_IO_CALL) */
    const fls_case_mods *mods; /* masks, bias and penalties (NULL: none); FLS_IO_CALL, not grouped */
} fls_case_ext;

typedef struct fls_audit_case {
    const char *name;
    fls_case_kind kind;
    int fused; /* 0: fls_sample_logits, 1: fls_sample_fused */
    fls_method method;
    fls_case_shape shape;
    double scale; /* FLS_SHAPE_NORMAL: standard deviation; FLS_SHAPE_DEEP: depth where the deep tail starts */
    int64_t V;
    int groups;              /* distinct reference distributions: temperature and (fused) H row */
    float temps[8];          /* temperature of each group */
    int rows_per_group;      /* rows with their own seeds per group (pairs: pairs of rows) */
    fls_dtype w_dtype;       /* fused: dtype of W */
    int64_t D;               /* fused: columns of W and H */
    int tier;                /* 0: every run (quick); 1: full runs; 2: full runs on the CUDA engine only;
                              * 3: every run on the CUDA engine, full runs on the CPU; 4: full runs on the
                              * CPU engine but not the CI suite's (FLS_AUDIT_FULL_CI: minutes each);
                              * 5: every run on the CUDA engine, on the CPU as 4 */
    int tail;                /* runs the tail tests (t = 10, 15, 20, 25) beside the goodness of fit */
    double tail_deficit;     /* > 0: enough draws that the t = 15 test catches this relative deficit */
    const fls_case_ext *ext; /* rules, without replacement, the grouped method's g, streaming, the noise
                              * scheme (or NULL) */
} fls_audit_case;

/* Whether a case runs on the CPU engine only (the multinomial baseline's
 * rule filters; every other case runs on both engines). */
int fls_audit_case_cpu_only(const fls_audit_case *c);
/* Whether a case's goodness of fit is over ordered K-tuples (without
 * replacement at small V: (V + 1)^K <= 4096 cells), else over tokens. */
int fls_audit_case_tuples(const fls_audit_case *c);

/* The full list. */
size_t fls_audit_case_count(void);
const fls_audit_case *fls_audit_case_get(size_t i);
/* Group g's rule as the reference reads it, before fls_stats_rule_center
 * (every filter off for a case without one). */
fls_stats_rule fls_audit_case_rule(const fls_audit_case *c, int g);
/* Whether a filter is on in any group of the case. */
int fls_audit_case_has_rule(const fls_audit_case *c);
/* Whether case i is part of a run of mode full (0/1) on this engine (tiers). */
int fls_audit_case_in_run(size_t i, int full, fls_engine engine);
/* Cases of such a run, and the index in the full list of its k-th ((size_t)-1 if none). */
size_t fls_audit_run_count(int full, fls_engine engine);
size_t fls_audit_run_index(int full, fls_engine engine, size_t k);
/* Chance-failing tests (rows) case i makes: the goodness of fit, the
 * FLS_STATS_N_TAILS tail tests if it has them, and the conditional test of
 * positions 2..K without replacement over tokens ("<case>/pl-cond"). Each is
 * one member of a run's family. */
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
