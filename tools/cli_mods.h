/*
 * cli_mods.h — what a serving engine adds to the logits, on the command line
 * (docs/RULES.md, "Masks, bias and penalties"): --allowed-bitmask,
 * --bitmask-rows, --logit-bias-ids/-values, --seen-ids/-counts and the
 * repetition, presence and frequency penalties with their per-row arrays.
 *
 * The files are checked here for their dtype and shape (naming the flag);
 * their values (ids in range, no id twice in a row, finite bias, counts >= 0,
 * penalties in range) are checked by the library: a refusal prints
 * fls_params_explain's message, before any sampling.
 */
#ifndef FLS_CLI_MODS_H
#define FLS_CLI_MODS_H

#include "tools/cli.h"

#include <stddef.h>
#include <stdint.h>

/* The option strings (NULL = not given). */
typedef struct cli_mods_opts {
    const char *bitmask, *bitmask_rows, *bias_ids, *bias_values, *seen_ids, *seen_counts;
    const char *rep, *pres, *freq, *rep_rows, *pres_rows, *freq_rows;
} cli_mods_opts;

/* The option table entries, for a cli_option array. */
#define CLI_MODS_OPTIONS(mo)                                                                                 \
    {"--allowed-bitmask", &(mo).bitmask, NULL}, {"--bitmask-rows", &(mo).bitmask_rows, NULL},                \
        {"--logit-bias-ids", &(mo).bias_ids, NULL}, {"--logit-bias-values", &(mo).bias_values, NULL},        \
        {"--seen-ids", &(mo).seen_ids, NULL}, {"--seen-counts", &(mo).seen_counts, NULL},                    \
        {"--repetition-penalty", &(mo).rep, NULL}, {"--presence-penalty", &(mo).pres, NULL},                 \
        {"--frequency-penalty", &(mo).freq, NULL}, {"--repetition-penalty-per-row", &(mo).rep_rows, NULL},   \
        {"--presence-penalty-per-row", &(mo).pres_rows, NULL},                                               \
    {                                                                                                        \
        "--frequency-penalty-per-row", &(mo).freq_rows, NULL                                                 \
    }

/* The --help text of these flags (ends with a newline). */
extern const char cli_mods_help[];

typedef struct cli_mods {
    float rep, pres, freq; /* the scalars (1, 0, 0 = off) */
    /* the loaded arrays (owned), NULL = not given */
    int32_t *bitmask;
    int64_t bitmask_ld; /* words per row of the file */
    uint8_t *bitmask_rows;
    int64_t *bias_ids;
    float *bias_values;
    int64_t bias_k;
    int64_t *seen_ids;
    int32_t *seen_counts;
    int64_t seen_k;
    float *row_rep, *row_pres, *row_freq;
    const cli_mods_opts *opts; /* for messages */
} cli_mods;

/* Parses the scalar flags and checks which flags need which (no file is
 * read). CLI_OK or CLI_USAGE after a message. */
int cli_mods_parse(const cli_mods_opts *o, cli_mods *m);
/* The first of these flags given (for messages), NULL if none. */
const char *cli_mods_first_flag(const cli_mods_opts *o);
/* Loads the files for B rows over V tokens (dtype and shape, naming the
 * flag), then has the library check the values (fls_params_explain). CLI_OK,
 * CLI_FAIL (a file cannot be read or has the wrong dtype or shape) or
 * CLI_USAGE (a value the library refuses: its message is printed). */
int cli_mods_load(cli_mods *m, int64_t B, int64_t V);
void cli_mods_apply(const cli_mods *m, fls_params *p);
void cli_mods_free(cli_mods *m);
/* "mask (per row), bias K=2, seen S=3, repetition 1.2" or "none". */
void cli_mods_describe(const cli_mods *m, char *out, size_t cap);
/* The flag that sets the field fls_params_explain's message names, or NULL. */
const char *cli_mods_flag_of(const cli_mods_opts *o, const char *message);

#endif /* FLS_CLI_MODS_H */
