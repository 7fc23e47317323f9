/*
 * report.c — printing result rows, and error rows.
 */
#include "stats/fls_stats.h"

#include <math.h>
#include <string.h>

void fls_audit_print_header(FILE *f)
{
    fprintf(f, "%-28s %-6s %8s %10s %12s %5s %10s %10s %-4s  %s\n", "test", "engine", "V", "draws", "chi2",
            "dof", "p", "alpha", "pass", "what it sees");
}

/* "r" as a percentage, or "none" */
static void pct(char *buf, size_t n, double r)
{
    if (isfinite(r))
        snprintf(buf, n, "%.3g%%", 100.0 * r);
    else
        snprintf(buf, n, "none");
}

void fls_audit_print_row(FILE *f, const fls_audit_row *r)
{
    char sees[200] = "";
    if (r->status != FLS_OK) {
        snprintf(sees, sizeof sees, "ERROR %s: %s", fls_status_string(r->status), r->note);
    } else if (!strcmp(r->kind, "tail")) {
        char d[32], e[32];
        pct(d, sizeof d, r->deficit_caught);
        pct(e, sizeof e, r->excess_caught);
        snprintf(sees, sizeof sees,
                 "mass %.3g below %g nats: expected %.4g, observed %.0f; deficit >= %s, excess >= %s",
                 r->tail_mass, r->tail_t, r->expected, r->observed, d, e);
    } else if (!strcmp(r->kind, "gof") || !strcmp(r->kind, "pairs")) {
        snprintf(sees, sizeof sees, "%d bins, smallest mass %.3g; TV >= %.3g caught", r->bins, r->min_mass,
                 r->tv_caught);
    } else if (r->kind[0]) {
        snprintf(sees, sizeof sees, "%s", r->note);
    }
    fprintf(f, "%-28s %-6s %8lld %10lld %12.4f %5d %10.4g %10.3g %-4s  %s\n", r->test, r->engine,
            (long long)r->V, (long long)r->draws, r->chi2, r->dof, r->p, r->alpha, r->pass ? "pass" : "FAIL",
            sees);
}

void fls_audit_row_error(fls_audit_row *row, fls_status st, const char *what)
{
    row->status = st == FLS_OK ? FLS_ERR_INTERNAL : st;
    row->pass = 0;
    row->p = NAN;
    row->chi2 = NAN;
    snprintf(row->kind, sizeof row->kind, "error");
    snprintf(row->note, sizeof row->note, "%s", what ? what : "");
}
