/*
 * cli_audit.h — `flashsample audit --logits L.npy --tokens tokens.npy`: the
 * audit of external tokens (cmd_audit_tokens.c), dispatched from cmd_audit.c.
 */
#ifndef FLS_CLI_AUDIT_H
#define FLS_CLI_AUDIT_H

#include "stats/fls_tokens.h"
#include "tools/cli_rules.h"

/* Exit status of both audits (`--quick|--full` and `--logits --tokens`):
 * CLI_OK (0) every tested row passed (rows not tested are listed as such and
 * never count as passes), CLI_FAIL (1) a tested row failed or the audit could
 * not run, CLI_USAGE (2) bad usage or input, CLI_AUDIT_UNTESTED (3) no row
 * tested anything: an audit that tested nothing is not a success. */
enum { CLI_AUDIT_UNTESTED = 3 };

/* The exit status of an audit's rows (CLI_OK, CLI_FAIL or
 * CLI_AUDIT_UNTESTED), with its summary line ("7 tests: 5 passed, 0 failed,
 * 2 not tested, 0.12 s: ...") on stdout and, when nothing was tested, a
 * message on stderr. */
int cli_audit_verdict(const fls_audit_row *rows, size_t n, double seconds, int digits);
/* The run's counts and verdict in JSON (no braces): "verdict": ..., "passed":
 * ..., "failed": ..., "untested": ... */
void cli_audit_json_tally(FILE *fp, const fls_audit_row *rows, size_t n);

typedef struct audit_ext_opts {
    const char *logits, *tokens, *temperature, *temperature_rows, *json, *report, *seed;
    int pairs_rows;
    cli_rule_opts rule;
} audit_ext_opts;

/* Exit status: 0 every tested row passed, 1 a test failed, 2 bad usage or
 * input, 3 nothing was tested (CLI_AUDIT_UNTESTED). */
int cli_audit_external(const audit_ext_opts *o);

#endif /* FLS_CLI_AUDIT_H */
