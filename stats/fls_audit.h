/*
 * fls_audit.h — the goodness-of-fit audit of flashsample (stats/).
 *
 * fls_audit_run draws samples through the public API (fls_sample_logits,
 * fls_sample_fused and the streaming API) for a fixed list of cases (flat, Zipf,
 * peaked, heavy-tailed, masked logits; per-row temperature; T = 0; the rule
 * family, without replacement, the grouped method, chunked and sharded
 * streams: fls_cases.h) and tests each against the exact
 * categorical with Pearson chi-square on equal-mass bins, at a per-test level
 * from the family-wise false-failure budget of the run (see fls_stats.h). Seeds
 * are fixed and logged, so every row is reproducible.
 */
#ifndef FLS_AUDIT_H
#define FLS_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#include "flashsample.h"
#include "stats/fls_cases.h"
#include "stats/fls_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Adds this audit's tests to a run's family: one part, "audit <mode> on <engine>". */
fls_status fls_audit_family_add(const fls_audit_options *o, fls_stats_family *family);

/* Runs the cases of the run (fls_audit_run_count(o->full, o->engine)), one
 * row per test (fls_audit_run_tests rows), at the family's alpha (o->family,
 * or the audit's own family when NULL); *rows is malloc'ed (caller frees).
 * Failed tests are rows with pass = 0; a case that could not sample (or ran
 * out of memory) is reported as error rows (status != FLS_OK, pass = 0) and
 * the other cases still run; rows that tested nothing are marked untested
 * (fls_audit_mark_untested: pass = 0, not a failure). Returns an error status only if the run could
 * not start (bad options, no context, no memory for the rows, or a family
 * smaller than this audit). */
fls_status fls_audit_run(const fls_audit_options *o, fls_audit_row **rows, size_t *n_rows);

/* Marks the rows of a case's run that tested nothing as not tested: its tail
 * rows in which neither a deficit nor an excess could show
 * (fls_audit_tail_untested, fls_tokens.h); the goodness-of-fit rows always
 * test (a sample outside the support fails them). fls_audit_run does it for
 * every case; a caller of fls_audit_run_case does it on the case's rows.
 * Returns how many rows it marked. */
size_t fls_audit_mark_untested(fls_audit_row *rows, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* FLS_AUDIT_H */
