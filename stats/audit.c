/*
 * audit.c — fls_audit_run: every case of the run (quick or full, on one
 * engine), one row per test, at the level of the run's family. A failed test
 * is a row with pass = 0; a case that could not sample is reported as error
 * rows and the run goes on; a row that could test nothing (a tail in which no
 * deficit or excess can show) is marked not tested; only a failure to start
 * (context, memory) is an error status.
 */
#include "stats/fls_audit.h"
#include "stats/fls_cases.h"
#include "stats/fls_stats.h"
#include "stats/fls_tokens.h"

#include <stdio.h>
#include <stdlib.h>

fls_status fls_audit_family_add(const fls_audit_options *o, fls_stats_family *f)
{
    if (!o || !f)
        return FLS_ERR_NULL;
    char name[96];
    snprintf(name, sizeof name, "audit %s on %s (%zu cases)",
             o->full == FLS_AUDIT_FULL_CI ? "full-ci"
             : o->full                    ? "full"
                                          : "quick",
             o->engine == FLS_ENGINE_CUDA ? "cuda" : "cpu", fls_audit_run_count(o->full, o->engine));
    return fls_stats_family_add(f, name, fls_audit_run_tests(o->full, o->engine));
}

size_t fls_audit_mark_untested(fls_audit_row *rows, size_t n)
{
    size_t marked = 0;
    for (size_t k = 0; rows && k < n; k++)
        marked += (size_t)fls_audit_tail_untested(&rows[k]);
    return marked;
}

fls_status fls_audit_run(const fls_audit_options *o, fls_audit_row **rows, size_t *n_rows)
{
    if (!o || !rows || !n_rows)
        return FLS_ERR_NULL;
    *rows = NULL;
    *n_rows = 0;
    if (o->engine != FLS_ENGINE_CPU && o->engine != FLS_ENGINE_CUDA)
        return FLS_ERR_PARAM;
    fls_stats_family own;
    const fls_stats_family *fam = o->family;
    if (!fam) {
        fls_stats_family_init(&own, FLS_STATS_BUDGET);
        fls_status st = fls_audit_family_add(o, &own);
        if (st != FLS_OK)
            return st;
        fam = &own;
    }
    if (fam->size < fls_audit_run_tests(o->full, o->engine))
        return FLS_ERR_PARAM; /* a family that does not hold this audit's tests */
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    cfg.engine = o->engine;
    cfg.threads = o->threads;
    fls_context_t *ctx = NULL;
    fls_status st = fls_context_create(&ctx, &cfg);
    if (st != FLS_OK)
        return st;
    const size_t n_cases = fls_audit_run_count(o->full, o->engine);
    const size_t n = (size_t)fls_audit_run_tests(o->full, o->engine);
    fls_audit_row *out = calloc(n, sizeof *out);
    if (!out) {
        fls_context_destroy(ctx);
        return FLS_ERR_OUT_OF_MEMORY;
    }
    if (o->progress) {
        fprintf(stderr,
                "[audit] %s run, engine %s (%d thread(s), simd %s), base seed %llu, %zu case(s), %zu tests\n",
                o->full == FLS_AUDIT_FULL_CI ? "full-ci"
                : o->full                    ? "full"
                                             : "quick",
                o->engine == FLS_ENGINE_CUDA ? "cuda" : "cpu", fls_context_threads(ctx),
                fls_simd_name(fls_context_simd(ctx)), (unsigned long long)o->seed, n_cases, n);
        fls_stats_family_print(stderr, "[audit] ", fam);
    }
    /* every case runs; one that cannot sample fills its rows as errors */
    size_t r = 0;
    for (size_t k = 0; k < n_cases; k++) {
        size_t i = fls_audit_run_index(o->full, o->engine, k);
        (void)fls_audit_run_case(ctx, o, fam->alpha, i, &out[r]);
        (void)fls_audit_mark_untested(&out[r], (size_t)fls_audit_case_tests(i));
        r += (size_t)fls_audit_case_tests(i);
    }
    fls_context_destroy(ctx);
    *rows = out;
    *n_rows = n;
    return FLS_OK;
}
