/*
 * cli_audit.h — `flashsample audit --logits L.npy --tokens tokens.npy`: the
 * audit of external tokens (cmd_audit_tokens.c), dispatched from cmd_audit.c.
 */
#ifndef FLS_CLI_AUDIT_H
#define FLS_CLI_AUDIT_H

#include "tools/cli_rules.h"

typedef struct audit_ext_opts {
    const char *logits, *tokens, *temperature, *temperature_rows, *json, *report, *seed;
    int pairs_rows;
    cli_rule_opts rule;
} audit_ext_opts;

/* Exit status: 0 every test passes, 1 a test fails, 2 bad usage or input. */
int cli_audit_external(const audit_ext_opts *o);

#endif /* FLS_CLI_AUDIT_H */
