/* cli_mods.c — masks, logit bias and penalties on the command line (cli_mods.h). */
#include "tools/cli_mods.h"

#include "tools/cli_rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char cli_mods_help[] =
    "masks, bias and penalties (docs/RULES.md, \"Masks, bias and penalties\"; applied to the raw\n"
    "logits before temperature and the rules; --method fused, unfused-gumbel or unfused-multinomial,\n"
    "no streaming):\n"
    "  --allowed-bitmask M.npy  allowed tokens, int32 (B, W) with W >= ceil(V / 32) words per row\n"
    "                          (the xgrammar / vLLM layout): bit v % 32 of word v / 32 set = token v\n"
    "                          allowed; the others are masked (-inf)\n"
    "  --bitmask-rows R.npy    which rows use their mask, uint8 or bool (B,): 0 = not masked\n"
    "                          (default: every row)\n"
    "  --logit-bias-ids I.npy  bias ids, int64 (B, K), -1 = padding; with --logit-bias-values\n"
    "  --logit-bias-values X.npy  bias values, float32 (B, K), added to the ids' logits\n"
    "  --seen-ids S.npy        the tokens seen so far, int64 (B, S), -1 = padding\n"
    "  --seen-counts C.npy     their counts in the output so far, int32 (B, S), >= 0 (0: seen in\n"
    "                          the prompt only); default: every count 0\n"
    "  --repetition-penalty R  seen tokens' logits l become l / R (l > 0) or l * R; R > 0, 1 = off\n"
    "  --presence-penalty P    subtracted once from a seen token with a count > 0; 0 = off\n"
    "  --frequency-penalty F   F x count subtracted from a seen token's logit; 0 = off\n"
    "  --repetition-penalty-per-row R.npy, --presence-penalty-per-row P.npy,\n"
    "  --frequency-penalty-per-row F.npy  per-row values, float32 (B,); override the scalar\n"
    "  Values out of range (an id outside [0, V) other than -1, an id twice in a row, a bias\n"
    "  that is not finite, a negative count, R <= 0) are refused before any work with the\n"
    "  library's message (fls_params_explain), naming the row.\n";

const char *cli_mods_first_flag(const cli_mods_opts *o)
{
    return o->bitmask        ? "--allowed-bitmask"
           : o->bitmask_rows ? "--bitmask-rows"
           : o->bias_ids     ? "--logit-bias-ids"
           : o->bias_values  ? "--logit-bias-values"
           : o->seen_ids     ? "--seen-ids"
           : o->seen_counts  ? "--seen-counts"
           : o->rep          ? "--repetition-penalty"
           : o->pres         ? "--presence-penalty"
           : o->freq         ? "--frequency-penalty"
           : o->rep_rows     ? "--repetition-penalty-per-row"
           : o->pres_rows    ? "--presence-penalty-per-row"
           : o->freq_rows    ? "--frequency-penalty-per-row"
                             : NULL;
}

int cli_mods_parse(const cli_mods_opts *o, cli_mods *m)
{
    memset(m, 0, sizeof *m);
    m->rep = 1.0f;
    m->opts = o;
    if ((o->rep && cli_parse_float("--repetition-penalty", o->rep, &m->rep) != 0) ||
        (o->pres && cli_parse_float("--presence-penalty", o->pres, &m->pres) != 0) ||
        (o->freq && cli_parse_float("--frequency-penalty", o->freq, &m->freq) != 0))
        return CLI_USAGE;
    if (o->bitmask_rows && !o->bitmask) {
        cli_error("--bitmask-rows selects the rows of --allowed-bitmask: give --allowed-bitmask M.npy too");
        return CLI_USAGE;
    }
    if (!o->bias_ids != !o->bias_values) {
        cli_error("%s needs %s: the bias is (id, value) pairs, one file each",
                  o->bias_ids ? "--logit-bias-ids" : "--logit-bias-values",
                  o->bias_ids ? "--logit-bias-values" : "--logit-bias-ids");
        return CLI_USAGE;
    }
    if (o->seen_counts && !o->seen_ids) {
        cli_error("--seen-counts counts the tokens of --seen-ids: give --seen-ids S.npy too");
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* "(3, 4)" or "(3,)". */
static void shape_text(const fls_npy_array *a, char *out, size_t cap)
{
    size_t k = (size_t)snprintf(out, cap, "(");
    for (int d = 0; d < a->ndim && k < cap; d++)
        k += (size_t)snprintf(out + k, cap - k, "%s%lld", d ? ", " : "", (long long)a->shape[d]);
    if (k < cap)
        snprintf(out + k, cap - k, "%s)", a->ndim == 1 ? "," : "");
}

/* A (B, cols) array of one dtype (a bit of `allowed`); cols from the file,
 * or checked against *cols when it is >= 0. 0 or -1 after a message. */
static int load_rows(const char *opt, const char *path, int64_t B, unsigned allowed, int64_t *cols,
                     fls_npy_array *a)
{
    /* the dtype and the reader's messages as for a per-row array, then the 2-D shape */
    char err[FLS_NPY_ERR_LEN];
    const unsigned flags = ((allowed & (1u << FLS_NPY_I32)) ? FLS_NPY_ACCEPT_I32 : 0u) |
                           ((allowed & (1u << FLS_NPY_U8)) ? FLS_NPY_ACCEPT_U8 : 0u);
    fls_npy_dtype want = FLS_NPY_F32;
    for (int d = 0; d <= FLS_NPY_DTYPE_LAST; d++)
        if (allowed & (1u << d))
            want = (fls_npy_dtype)d;
    fls_status st = fls_npy_read_flags(path, flags, a, err);
    if (st != FLS_OK) {
        if (st == FLS_ERR_DTYPE)
            cli_error("%s: %s; expected %s ('%s')", opt, err, fls_npy_dtype_name(want),
                      fls_npy_dtype_descr(want));
        else
            cli_error("%s: %s", opt, err);
        return -1;
    }
    if (a->dtype != want) {
        cli_error("%s: %s: dtype is %s ('%s'); expected %s ('%s') (save x.astype(np.%s))", opt, path,
                  fls_npy_dtype_name(a->dtype), fls_npy_dtype_descr(a->dtype), fls_npy_dtype_name(want),
                  fls_npy_dtype_descr(want), fls_npy_dtype_name(want));
        fls_npy_free(a);
        return -1;
    }
    if (a->ndim != 2 || a->shape[0] != B || (*cols >= 0 && a->shape[1] != *cols)) {
        char got[96];
        shape_text(a, got, sizeof got);
        if (*cols >= 0)
            cli_error("%s: %s: expected shape (%lld, %lld) (B rows, as its companion file), got %s", opt,
                      path, (long long)B, (long long)*cols, got);
        else
            cli_error("%s: %s: expected a 2-D array with one row per row of the logits: (%lld, K), got %s",
                      opt, path, (long long)B, got);
        fls_npy_free(a);
        return -1;
    }
    *cols = a->shape[1];
    return 0;
}

/* Takes ownership of a loaded array's data. */
static void *take(fls_npy_array *a)
{
    void *d = a->data;
    a->data = NULL;
    fls_npy_free(a);
    return d;
}

/* The first flag whose field fls_params_explain's message names. */
const char *cli_mods_flag_of(const cli_mods_opts *o, const char *message)
{
    static const struct {
        const char *field, *flag, *rows_flag;
    } fields[] = {{"allowed_bitmask", "--allowed-bitmask", NULL},
                  {"bitmask_ld", "--allowed-bitmask", NULL},
                  {"bitmask_rows", "--bitmask-rows", NULL},
                  {"logit_bias_ids", "--logit-bias-ids", NULL},
                  {"logit_bias_values", "--logit-bias-values", NULL},
                  {"seen_ids", "--seen-ids", NULL},
                  {"seen_counts", "--seen-counts", NULL},
                  {"repetition_penalty", "--repetition-penalty", "--repetition-penalty-per-row"},
                  {"presence_penalty", "--presence-penalty", "--presence-penalty-per-row"},
                  {"frequency_penalty", "--frequency-penalty", "--frequency-penalty-per-row"}};
    for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
        const size_t n = strlen(fields[k].field);
        if (strncmp(message, fields[k].field, n) != 0 || (message[n] != ' ' && message[n] != '\0'))
            continue;
        const char *rows = fields[k].rows_flag;
        const int per_row =
            rows && ((k == 7 && o->rep_rows) || (k == 8 && o->pres_rows) || (k == 9 && o->freq_rows));
        return per_row ? rows : fields[k].flag;
    }
    return NULL;
}

int cli_mods_load(cli_mods *m, int64_t B, int64_t V)
{
    const cli_mods_opts *o = m->opts;
    fls_npy_array a;
    if (o->bitmask) {
        int64_t W = -1;
        if (load_rows("--allowed-bitmask", o->bitmask, B, 1u << FLS_NPY_I32, &W, &a) != 0)
            return CLI_FAIL;
        const int64_t need = (V + 31) / 32;
        if (W < need) {
            cli_error("--allowed-bitmask: %s: %lld words per row cover %lld tokens, fewer than V = %lld: "
                      "expected (%lld, W) with W >= ceil(V / 32) = %lld",
                      o->bitmask, (long long)W, (long long)(32 * W), (long long)V, (long long)B,
                      (long long)need);
            fls_npy_free(&a);
            return CLI_FAIL;
        }
        m->bitmask = take(&a);
        m->bitmask_ld = W;
    }
    if (o->bitmask_rows) {
        if (cli_load_row_array("--bitmask-rows", o->bitmask_rows, B, 1u << FLS_NPY_U8, &a) != 0)
            return CLI_FAIL;
        m->bitmask_rows = take(&a);
    }
    if (o->bias_ids) {
        int64_t K = -1;
        if (load_rows("--logit-bias-ids", o->bias_ids, B, 1u << FLS_NPY_I64, &K, &a) != 0)
            return CLI_FAIL;
        m->bias_ids = take(&a);
        if (load_rows("--logit-bias-values", o->bias_values, B, 1u << FLS_NPY_F32, &K, &a) != 0)
            return CLI_FAIL;
        m->bias_values = take(&a);
        m->bias_k = K;
    }
    if (o->seen_ids) {
        int64_t S = -1;
        if (load_rows("--seen-ids", o->seen_ids, B, 1u << FLS_NPY_I64, &S, &a) != 0)
            return CLI_FAIL;
        m->seen_ids = take(&a);
        m->seen_k = S;
        if (o->seen_counts) {
            if (load_rows("--seen-counts", o->seen_counts, B, 1u << FLS_NPY_I32, &S, &a) != 0)
                return CLI_FAIL;
            m->seen_counts = take(&a);
        }
    }
    const char *ropt[3] = {"--repetition-penalty-per-row", "--presence-penalty-per-row",
                           "--frequency-penalty-per-row"};
    const char *rpath[3] = {o->rep_rows, o->pres_rows, o->freq_rows};
    float **rdst[3] = {&m->row_rep, &m->row_pres, &m->row_freq};
    for (int k = 0; k < 3; k++) {
        if (!rpath[k])
            continue;
        if (cli_load_row_array(ropt[k], rpath[k], B, 1u << FLS_NPY_F32, &a) != 0)
            return CLI_FAIL;
        *rdst[k] = take(&a);
    }
    /* the values, as the library checks them (its message names the field and the row) */
    fls_params p;
    fls_params_default(&p);
    cli_mods_apply(m, &p);
    char msg[512];
    if (fls_params_explain(&p, B, V, msg, sizeof msg) != FLS_OK) {
        const char *flag = cli_mods_flag_of(o, msg);
        cli_error("%s%s%s", flag ? flag : "", flag ? ": " : "", msg[0] ? msg : "the library refused a value");
        return CLI_USAGE;
    }
    return CLI_OK;
}

void cli_mods_apply(const cli_mods *m, fls_params *p)
{
    p->allowed_bitmask = m->bitmask;
    p->bitmask_ld = m->bitmask ? m->bitmask_ld : 0;
    p->bitmask_rows = m->bitmask_rows;
    p->logit_bias_ids = m->bias_ids;
    p->logit_bias_values = m->bias_values;
    p->logit_bias_k = m->bias_k;
    p->seen_ids = m->seen_ids;
    p->seen_counts = m->seen_counts;
    p->seen_k = m->seen_k;
    p->repetition_penalty = m->rep;
    p->presence_penalty = m->pres;
    p->frequency_penalty = m->freq;
    p->row_repetition_penalty = m->row_rep;
    p->row_presence_penalty = m->row_pres;
    p->row_frequency_penalty = m->row_freq;
}

void cli_mods_free(cli_mods *m)
{
    free(m->bitmask);
    free(m->bitmask_rows);
    free(m->bias_ids);
    free(m->bias_values);
    free(m->seen_ids);
    free(m->seen_counts);
    free(m->row_rep);
    free(m->row_pres);
    free(m->row_freq);
    const cli_mods_opts *o = m->opts;
    const float rep = m->rep, pres = m->pres, freq = m->freq;
    memset(m, 0, sizeof *m);
    m->opts = o;
    m->rep = rep;
    m->pres = pres;
    m->freq = freq;
}

void cli_mods_describe(const cli_mods *m, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
#define ADD(...)                                                                                             \
    do {                                                                                                     \
        if (n < cap)                                                                                         \
            n += (size_t)snprintf(out + n, cap - n, __VA_ARGS__);                                            \
    } while (0)
    if (m->bitmask)
        ADD("%sallowed-token mask%s", n ? ", " : "", m->bitmask_rows ? " (selected rows)" : "");
    if (m->bias_ids)
        ADD("%slogit bias K=%lld", n ? ", " : "", (long long)m->bias_k);
    if (m->seen_ids)
        ADD("%sseen S=%lld%s", n ? ", " : "", (long long)m->seen_k, m->seen_counts ? " with counts" : "");
    if (m->row_rep)
        ADD("%srepetition per row", n ? ", " : "");
    else if (m->rep != 1.0f)
        ADD("%srepetition %g", n ? ", " : "", (double)m->rep);
    if (m->row_pres)
        ADD("%spresence per row", n ? ", " : "");
    else if (m->pres != 0.0f)
        ADD("%spresence %g", n ? ", " : "", (double)m->pres);
    if (m->row_freq)
        ADD("%sfrequency per row", n ? ", " : "");
    else if (m->freq != 0.0f)
        ADD("%sfrequency %g", n ? ", " : "", (double)m->freq);
    if (n == 0)
        ADD("none");
#undef ADD
}
