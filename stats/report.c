/*
 * report.c — printing result rows, error rows, rows not tested, and the
 * verdicts (pass, fail, not tested) of rows and of runs.
 */
#include "stats/fls_stats.h"
#include "stats/fls_tokens.h"

#include <math.h>
#include <string.h>

void fls_audit_print_header(FILE *f)
{
    fprintf(f, "%-28s %-6s %8s %10s %12s %5s %10s %10s %-8s  %s\n", "test", "engine", "V", "draws", "chi2",
            "dof", "p", "alpha", "result", "what it sees");
}

/* "r" as a percentage, or "none" */
static void pct(char *buf, size_t n, double r)
{
    if (isfinite(r))
        snprintf(buf, n, "%.3g%%", 100.0 * r);
    else
        snprintf(buf, n, "none");
}

fls_audit_verdict fls_audit_row_verdict(const fls_audit_row *row)
{
    if (row->status != FLS_OK)
        return FLS_AUDIT_FAIL;
    if (row->untested)
        return FLS_AUDIT_UNTESTED;
    return row->pass ? FLS_AUDIT_PASS : FLS_AUDIT_FAIL;
}

const char *fls_audit_verdict_name(fls_audit_verdict v)
{
    switch (v) {
    case FLS_AUDIT_PASS:
        return "pass";
    case FLS_AUDIT_UNTESTED:
        return "untested";
    default:
        return "fail";
    }
}

void fls_audit_print_row(FILE *f, const fls_audit_row *r)
{
    char sees[200] = "";
    const fls_audit_verdict v = fls_audit_row_verdict(r);
    if (r->status != FLS_OK) {
        snprintf(sees, sizeof sees, "ERROR %s: %s", fls_status_string(r->status), r->note);
    } else if (v == FLS_AUDIT_UNTESTED) {
        snprintf(sees, sizeof sees, "not tested: %s", r->note);
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
    /* a chi-square p-value is kappa times the tail probability (and Bonferroni
     * over its components), capped at 1: shown as such, not as a certainty */
    char pv[16];
    if ((!strcmp(r->kind, "gof") || !strcmp(r->kind, "pairs")) && r->p >= 1.0)
        snprintf(pv, sizeof pv, "1 (cap)");
    else
        snprintf(pv, sizeof pv, "%.4g", r->p);
    fprintf(f, "%-28s %-6s %8lld %10lld %12.4f %5d %10s %10.3g %-8s  %s\n", r->test, r->engine,
            (long long)r->V, (long long)r->draws, r->chi2, r->dof, pv, r->alpha,
            v == FLS_AUDIT_PASS       ? "pass"
            : v == FLS_AUDIT_UNTESTED ? "untested"
                                      : "FAIL",
            sees);
}

void fls_audit_row_error(fls_audit_row *row, fls_status st, const char *what)
{
    row->status = st == FLS_OK ? FLS_ERR_INTERNAL : st;
    row->pass = 0;
    row->untested = 0;
    row->p = NAN;
    row->chi2 = NAN;
    snprintf(row->kind, sizeof row->kind, "error");
    snprintf(row->note, sizeof row->note, "%s", what ? what : "");
}

void fls_audit_row_untested(fls_audit_row *row, const char *why)
{
    row->untested = 1;
    row->pass = 0;
    row->p = NAN;
    snprintf(row->note, sizeof row->note, "%s", why ? why : "");
}

int fls_audit_tail_untested(fls_audit_row *row)
{
    if (!row || row->status != FLS_OK || strcmp(row->kind, "tail") != 0 || !row->pass ||
        isfinite(row->deficit_caught) || isfinite(row->excess_caught))
        return 0;
    char why[112];
    if (!(row->tail_mass > 0.0))
        snprintf(why, sizeof why, "no token more than %g nats below its row's head", row->tail_t);
    else
        snprintf(why, sizeof why, "mass %.3g below %g nats, %.3g expected: no deficit or excess can show",
                 row->tail_mass, row->tail_t, row->expected);
    fls_audit_row_untested(row, why);
    return 1;
}

void fls_audit_tally_rows(const fls_audit_row *rows, size_t n, fls_audit_tally *t)
{
    memset(t, 0, sizeof *t);
    for (size_t k = 0; rows && k < n; k++) {
        switch (fls_audit_row_verdict(&rows[k])) {
        case FLS_AUDIT_PASS:
            t->passed++;
            break;
        case FLS_AUDIT_UNTESTED:
            t->untested++;
            break;
        default:
            t->failed++;
            break;
        }
        t->tests++;
    }
}

fls_audit_verdict fls_audit_tally_verdict(const fls_audit_tally *t)
{
    if (t->failed > 0)
        return FLS_AUDIT_FAIL;
    return t->passed > 0 ? FLS_AUDIT_PASS : FLS_AUDIT_UNTESTED;
}

void fls_audit_tally_format(const fls_audit_tally *t, char *buf, size_t cap)
{
    snprintf(buf, cap, "%zu test%s: %zu passed, %zu failed, %zu not tested", t->tests,
             t->tests == 1 ? "" : "s", t->passed, t->failed, t->untested);
}
