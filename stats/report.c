/*
 * report.c — printing result rows.
 */
#include "fls_stats.h"

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
