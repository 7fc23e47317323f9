/*
 * audit.c — fls_audit_run: every case of the list (quick or full) on one
 * engine, one row each, at the level of the run's family. A failed test is a
 * row with pass = 0; only a failure to sample (or to allocate) is an error
 * status.
 */
#include "fls_audit.h"
#include "fls_cases.h"
#include "fls_stats.h"

#include <stdio.h>
#include <stdlib.h>

fls_status fls_audit_family_add(const fls_audit_options *o, fls_stats_family *f)
{
    if (!o || !f)
        return FLS_ERR_NULL;
    char name[96];
    snprintf(name, sizeof name, "audit %s on %s (%zu cases)", o->full ? "full" : "quick",
             o->engine == FLS_ENGINE_CUDA ? "cuda" : "cpu", fls_audit_mode_count(o->full));
    return fls_stats_family_add(f, name, fls_audit_mode_tests(o->full));
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
    if (fam->size < fls_audit_mode_tests(o->full))
        return FLS_ERR_PARAM; /* a family that does not hold this audit's tests */
    fls_context_config cfg;
    fls_context_config_default(&cfg);
    cfg.engine = o->engine;
    cfg.threads = o->threads;
    fls_context_t *ctx = NULL;
    fls_status st = fls_context_create(&ctx, &cfg);
    if (st != FLS_OK)
        return st;
    const size_t n = fls_audit_mode_count(o->full);
    fls_audit_row *out = calloc(n, sizeof *out);
    if (!out) {
        fls_context_destroy(ctx);
        return FLS_ERR_OUT_OF_MEMORY;
    }
    if (o->progress) {
        fprintf(stderr, "[audit] %s run, engine %s (%d thread(s), simd %s), base seed %llu, %zu case(s)\n",
                o->full ? "full" : "quick", o->engine == FLS_ENGINE_CUDA ? "cuda" : "cpu",
                fls_context_threads(ctx), fls_simd_name(fls_context_simd(ctx)), (unsigned long long)o->seed,
                n);
        fls_stats_family_print(stderr, "[audit] ", fam);
    }
    for (size_t k = 0; k < n && st == FLS_OK; k++)
        st = fls_audit_run_case(ctx, o, fam->alpha, fls_audit_case_index(o->full, k), &out[k]);
    fls_context_destroy(ctx);
    if (st != FLS_OK) {
        free(out);
        return st;
    }
    *rows = out;
    *n_rows = n;
    return FLS_OK;
}
