/*
 * suite_family.h — the family of the stats suite (meson test --suite stats):
 * one run, one budget. Every executable of the suite declares the same family
 * here and takes its alpha from it; each asserts that its own part is what it
 * really runs.
 */
#ifndef FLS_STATS_SUITE_FAMILY_H
#define FLS_STATS_SUITE_FAMILY_H

#include "stats/fls_audit.h"
#include "stats/fls_stats.h"

/* Chance-failing checks of test_machinery.c (size and power of the tests under
 * the reference sampler). */
#define SUITE_SELFTEST_CHECKS 14

/* The defect gallery (test_defects.c): every test of every audit of an exact
 * sampler (ours and the alias sampler on 5 scenarios: 2 x (7 + 7 + 7 + 8 + 7)),
 * and every defect check (8: each may miss by bad luck, with probability <=
 * alpha by its stated N). */
#define SUITE_GALLERY_EXACT_TESTS 72
#define SUITE_GALLERY_DEFECTS     8

/* The planted mutations of the rule family and of the grouped / streaming
 * samplers (test_mutations.c): every test of every audit of an exact sampler
 * (mutants.c: 18 audits), and every mutation check (10). */
#define SUITE_MUTATION_EXACT_TESTS 144
#define SUITE_MUTATION_DEFECTS     10

/* The audit as the suite runs it: every case of the full list on the CPU
 * engine but the heavy ones (tiers 4 and 5: minutes each on two cores). */
static inline void suite_audit_options(fls_audit_options *o)
{
    fls_audit_options_default(o);
    o->full = FLS_AUDIT_FULL_CI;
    o->engine = FLS_ENGINE_CPU;
}

static inline void suite_family(fls_stats_family *f)
{
    fls_audit_options o;
    suite_audit_options(&o);
    fls_stats_family_init(f, FLS_STATS_BUDGET);
    fls_audit_family_add(&o, f);
    fls_stats_family_add(f, "machinery self-tests", SUITE_SELFTEST_CHECKS);
    fls_stats_family_add(f, "defect gallery", SUITE_GALLERY_EXACT_TESTS + SUITE_GALLERY_DEFECTS);
    fls_stats_family_add(f, "mutations", SUITE_MUTATION_EXACT_TESTS + SUITE_MUTATION_DEFECTS);
}

static inline double suite_alpha(void)
{
    fls_stats_family f;
    suite_family(&f);
    return f.alpha;
}

#endif
