/*
 * family.c — the family of tests of one run and its Bonferroni level.
 *
 * A run declares its family part by part before it runs a test; alpha is
 * budget / size. Nothing here knows which tests exist: the runners (the audit's
 * case list, the token audit, the test suites) declare them.
 */
#include "stats/fls_stats.h"

#include <string.h>

double fls_stats_bonferroni(double budget, int size)
{
    return size > 0 ? budget / (double)size : budget;
}

void fls_stats_family_init(fls_stats_family *f, double budget)
{
    memset(f, 0, sizeof *f);
    f->budget = budget > 0.0 ? budget : FLS_STATS_BUDGET;
    f->alpha = f->budget;
}

fls_status fls_stats_family_add(fls_stats_family *f, const char *name, int tests)
{
    if (!f || !name)
        return FLS_ERR_NULL;
    if (tests < 0 || f->n_parts >= FLS_STATS_FAMILY_MAX_PARTS)
        return FLS_ERR_PARAM;
    fls_stats_family_part *part = &f->parts[f->n_parts++];
    snprintf(part->name, sizeof part->name, "%s", name);
    part->tests = tests;
    f->size += tests;
    f->alpha = fls_stats_bonferroni(f->budget, f->size);
    return FLS_OK;
}

void fls_stats_family_print(FILE *fp, const char *prefix, const fls_stats_family *f)
{
    fprintf(fp, "%sfamily: ", prefix ? prefix : "");
    for (int i = 0; i < f->n_parts; i++)
        fprintf(fp, "%s%s %d", i ? " + " : "", f->parts[i].name, f->parts[i].tests);
    fprintf(fp, " = %d tests; budget %g per run; alpha = %.4g per test (Bonferroni)\n", f->size, f->budget,
            f->alpha);
}
