/*
 * cli_rules.h — the rule family on the command line (docs/RULES.md): the
 * flags --min-p, --top-k, --top-p, --without-replacement, --filter NAME=VALUE
 * and their per-row arrays, shared by `sample`, `audit` and `bench`.
 *
 * Every value is checked here before the library sees it, so a bad value
 * is a message that names the flag (and the row of a per-row array) and the
 * allowed range; the library's own FLS_ERR_PARAM is explained the same way.
 */
#ifndef FLS_CLI_RULES_H
#define FLS_CLI_RULES_H

#include "tools/cli.h"

#include <stddef.h>
#include <stdint.h>

/* The option strings (NULL = not given). */
typedef struct cli_rule_opts {
    const char *min_p, *top_k, *top_p, *wr, *filter;
    const char *top_k_rows, *top_p_rows, *min_p_rows, *filter_value_rows;
} cli_rule_opts;

/* The option table entries of the rule flags, for a cli_option array. */
#define CLI_RULE_OPTIONS(ro)                                                                                 \
    {"--min-p", &(ro).min_p, NULL}, {"--top-k", &(ro).top_k, NULL}, {"--top-p", &(ro).top_p, NULL},          \
        {"--without-replacement", &(ro).wr, NULL}, {"--filter", &(ro).filter, NULL},                         \
        {"--top-k-per-row", &(ro).top_k_rows, NULL}, {"--top-p-per-row", &(ro).top_p_rows, NULL},            \
        {"--min-p-per-row", &(ro).min_p_rows, NULL},                                                         \
    {                                                                                                        \
        "--filter-value-per-row", &(ro).filter_value_rows, NULL                                              \
    }

/* The --help text of the rule flags (ends with a newline). */
extern const char cli_rule_help[];

typedef struct cli_rule {
    int64_t top_k;      /* 0 = off */
    float top_p;        /* 1 = off */
    float min_p;        /* 0 = off */
    int64_t wr_k;       /* without replacement: K, 0 = off */
    const char *filter; /* a registry rule beyond the three built-ins (static string), or NULL */
    int filter_id;      /* its registry id, -1 = none */
    double filter_value;
    /* per-row arrays (B entries, owned), NULL = not given */
    int64_t *row_top_k;
    float *row_top_p, *row_min_p;
    double *row_filter_value;
    const cli_rule_opts *opts; /* for messages */
} cli_rule;

/* Parses the scalar flags (no file is read). CLI_OK or CLI_USAGE after a
 * message naming the flag and its allowed range. */
int cli_rule_parse(const cli_rule_opts *o, cli_rule *r);
/* Whether any flag of the family was given (filters, without replacement, arrays). */
int cli_rule_given(const cli_rule_opts *o);
/* Whether a filter is active (any row) — without replacement excluded. */
int cli_rule_filters(const cli_rule *r);
/* The first rule flag given (for messages), NULL if none. */
const char *cli_rule_first_flag(const cli_rule_opts *o);
/* Loads the per-row arrays for B rows and checks every value against V
 * (top-k <= V, K <= V). 0, or -1 after a message (CLI_FAIL for a file that
 * cannot be read, CLI_USAGE for a value out of range: *rc says which). */
int cli_rule_load(cli_rule *r, int64_t B, int64_t V, int *rc);
void cli_rule_apply(const cli_rule *r, fls_params *p);
void cli_rule_free(cli_rule *r);
/* "min-p 0.05, top-k 50 (per row), ..." or "none". */
void cli_rule_describe(const cli_rule *r, char *out, size_t cap);
/* After FLS_ERR_PARAM from the library: says which flag (and row) holds a
 * value the library refused and the allowed range; a generic sentence if
 * none is found. */
void cli_rule_explain(const cli_rule *r, int64_t B, int64_t V);

/* Loads a per-row array path (shape (B,)) of one of the allowed dtypes
 * (FLS_NPY_* bits: 1u << dtype). On success *arr holds it. 0 or -1 after a
 * message naming opt. */
int cli_load_row_array(const char *opt, const char *path, int64_t B, unsigned allowed, fls_npy_array *arr);

#endif /* FLS_CLI_RULES_H */
