/*
 * audit.c — fls_audit_run: every case of the list (quick or full) on one
 * engine, one row each. A failed test is a row with pass = 0; only a failure to
 * sample (or to allocate) is an error status.
 */
#include "fls_audit.h"
#include "fls_cases.h"
#include "fls_stats.h"

#include <stdio.h>
#include <stdlib.h>

void fls_audit_options_default(fls_audit_options *o)
{
    o->full = 0;
    o->engine = FLS_ENGINE_CPU;
    o->threads = 0;
    o->seed = 20260301;
    o->progress = 0;
}

void fls_audit_print_header(FILE *f)
{
    fprintf(f, "%-24s %-6s %8s %10s %12s %5s %10s %10s %s\n", "test", "engine", "V", "draws", "chi2", "dof",
            "p", "alpha", "pass");
}

void fls_audit_print_row(FILE *f, const fls_audit_row *r)
{
    fprintf(f, "%-24s %-6s %8lld %10lld %12.4f %5d %10.4g %10.3g %s\n", r->test, r->engine, (long long)r->V,
            (long long)r->draws, r->chi2, r->dof, r->p, r->alpha, r->pass ? "pass" : "FAIL");
}

void fls_audit_print_family(FILE *f)
{
    fls_stats_family fam;
    fls_stats_family_get(&fam);
    fprintf(f,
            "[audit] family: %d cases x %d engines + %d self-tests = %d tests; budget %g per full run; "
            "alpha = %.4g per test (Bonferroni); TV %g caught with power >= %g; bins <= %d, >= %g expected "
            "each\n",
            fam.cases, fam.engines, fam.selftests, fam.size, fam.budget, fam.alpha, FLS_STATS_TV,
            FLS_STATS_POWER, FLS_STATS_MAX_BINS, FLS_STATS_MIN_EXPECTED);
}

fls_status fls_audit_run(const fls_audit_options *o, fls_audit_row **rows, size_t *n_rows)
{
    if (!o || !rows || !n_rows)
        return FLS_ERR_NULL;
    *rows = NULL;
    *n_rows = 0;
    if (o->engine != FLS_ENGINE_CPU && o->engine != FLS_ENGINE_CUDA)
        return FLS_ERR_PARAM;
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
        fls_audit_print_family(stderr);
    }
    for (size_t k = 0; k < n && st == FLS_OK; k++)
        st = fls_audit_run_case(ctx, o, fls_audit_case_index(o->full, k), &out[k]);
    fls_context_destroy(ctx);
    if (st != FLS_OK) {
        free(out);
        return st;
    }
    *rows = out;
    *n_rows = n;
    return FLS_OK;
}
