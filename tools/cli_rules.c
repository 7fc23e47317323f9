/* cli_rules.c — the rule family's flags, per-row arrays and supports (cli_rules.h). */
#include "tools/cli_rules.h"

#include "variants/registry.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char cli_rule_help[] =
    "rules (docs/RULES.md; applied in vLLM's order min-p, top-k, top-p, then --filter):\n"
    "  --min-p P               keep tokens with p >= P * p_max; P in [0, 1], 0 = off\n"
    "  --top-k K               keep the K most likely tokens (ties at the K-th kept); 0 <= K <= V, 0 = off\n"
    "  --top-p P               keep the smallest head of mass >= P (ties kept); P in (0, 1], 1 = off\n"
    "  --filter NAME=VALUE     a rule of the registry (variants/registry.h) by name, e.g.\n"
    "                          top-nsigma=1.0 (finite, >= 0, 0 = off) or epsilon=0.002 (in [0, 1],\n"
    "                          0 = off); min-p, top-k and top-p are accepted too (the same as their\n"
    "                          own flags)\n"
    "  --without-replacement K K distinct tokens per draw (Gumbel-top-k, Plackett-Luce order),\n"
    "                          1 <= K <= V; tokens are then (B, N, K), -1 past the support's size\n"
    "  --top-k-per-row k.npy   per-row K, int64 (B,); overrides --top-k\n"
    "  --top-p-per-row p.npy   per-row P, float32 (B,); overrides --top-p\n"
    "  --min-p-per-row p.npy   per-row P, float32 (B,); overrides --min-p\n"
    "  --filter-value-per-row v.npy  per-row VALUE of --filter NAME, float64 (B,) (float32 accepted)\n";

int cli_rule_given(const cli_rule_opts *o)
{
    return cli_rule_first_flag(o) != NULL;
}

const char *cli_rule_first_flag(const cli_rule_opts *o)
{
    return o->min_p               ? "--min-p"
           : o->top_k             ? "--top-k"
           : o->top_p             ? "--top-p"
           : o->wr                ? "--without-replacement"
           : o->filter            ? "--filter"
           : o->top_k_rows        ? "--top-k-per-row"
           : o->top_p_rows        ? "--top-p-per-row"
           : o->min_p_rows        ? "--min-p-per-row"
           : o->filter_value_rows ? "--filter-value-per-row"
                                  : NULL;
}

/* A strict decimal (finite double). */
static int parse_double(const char *opt, const char *s, double *out)
{
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (!*s || *s == ' ' || end == s || *end) {
        cli_error("%s: expected a number, got '%s'", opt, s);
        return -1;
    }
    if (!isfinite(v) || errno == ERANGE) {
        cli_error("%s: '%s' is not a finite number in double range", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int check_min_p(const char *opt, double v)
{
    if (fls_min_p_valid(v))
        return 0;
    cli_error("%s: %g is out of range: min-p is in [0, 1] (0 = off)", opt, v);
    return -1;
}

static int check_top_p(const char *opt, double v)
{
    if (fls_top_p_valid(v))
        return 0;
    cli_error("%s: %g is out of range: top-p is in (0, 1] (1 = off)", opt, v);
    return -1;
}

/* Whether a registry rule has a field of its own in fls_params (min_p,
 * top_k, top_p); any other goes through fls_params.filter. */
static int own_field(int id)
{
    return id == FLS_FILTER_MIN_P || id == FLS_FILTER_TOP_K || id == FLS_FILTER_TOP_P;
}

static void list_filters(char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < FLS_FILTER_COUNT && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? ", " : "", fls_filters[i].name);
}

int cli_rule_parse(const cli_rule_opts *o, cli_rule *r)
{
    memset(r, 0, sizeof *r);
    r->top_p = 1.0f;
    r->filter_id = -1;
    r->opts = o;
    if (o->min_p) {
        float v;
        if (cli_parse_float("--min-p", o->min_p, &v) != 0 || check_min_p("--min-p", v) != 0)
            return CLI_USAGE;
        r->min_p = v;
    }
    if (o->top_p) {
        float v;
        if (cli_parse_float("--top-p", o->top_p, &v) != 0 || check_top_p("--top-p", v) != 0)
            return CLI_USAGE;
        r->top_p = v;
    }
    if (o->top_k) {
        int64_t k;
        if (cli_parse_i64("--top-k", o->top_k, 0, INT64_MAX, &k) != 0)
            return CLI_USAGE;
        r->top_k = k;
    }
    if (o->wr) {
        int64_t k;
        if (cli_parse_i64("--without-replacement", o->wr, 0, ((int64_t)1 << 33) - 2, &k) != 0)
            return CLI_USAGE;
        r->wr_k = k;
    }
    if (o->filter) {
        const char *eq = strchr(o->filter, '=');
        size_t nlen = eq ? (size_t)(eq - o->filter) : strlen(o->filter);
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(nlen < 63 ? nlen : 63), o->filter);
        int id = nlen < 63 ? fls_filter_lookup(name) : -1;
        if (id < 0) {
            char names[256];
            list_filters(names, sizeof names);
            cli_error("--filter: unknown rule '%s' (the registry has: %s); write --filter NAME=VALUE", name,
                      names);
            return CLI_USAGE;
        }
        const char *own = id == FLS_FILTER_MIN_P   ? o->min_p
                          : id == FLS_FILTER_TOP_K ? o->top_k
                          : id == FLS_FILTER_TOP_P ? o->top_p
                                                   : NULL;
        if (own) {
            cli_error("--filter %s and --%s both set %s: give one", o->filter, name, name);
            return CLI_USAGE;
        }
        if (!eq && !(!own_field(id) && o->filter_value_rows)) {
            cli_error("--filter %s: expected NAME=VALUE (e.g. %s=%s; VALUE %s)", o->filter, name,
                      fls_filters[id].integer ? "50" : "0.9", fls_filters[id].range);
            return CLI_USAGE;
        }
        if (eq) {
            char opt[96];
            snprintf(opt, sizeof opt, "--filter %s", name);
            if (fls_filters[id].integer) {
                int64_t k;
                if (cli_parse_i64(opt, eq + 1, 0, INT64_MAX, &k) != 0)
                    return CLI_USAGE;
                r->top_k = k;
            } else {
                double v;
                if (parse_double(opt, eq + 1, &v) != 0)
                    return CLI_USAGE;
                if (!fls_filter_valid(id, v)) {
                    cli_error("%s=%s is out of range: %s is %s", opt, eq + 1, name, fls_filters[id].range);
                    return CLI_USAGE;
                }
                if (id == FLS_FILTER_MIN_P)
                    r->min_p = (float)v;
                else if (id == FLS_FILTER_TOP_P)
                    r->top_p = (float)v;
                else
                    r->filter_value = v;
            }
        }
        if (!own_field(id)) {
            r->filter = fls_filters[id].name;
            r->filter_id = id;
        }
    }
    if (o->filter_value_rows && r->filter_id < 0) {
        cli_error("--filter-value-per-row needs --filter NAME to say which registry rule it sets (min-p, "
                  "top-k and top-p have --min-p-per-row, --top-k-per-row, --top-p-per-row)");
        return CLI_USAGE;
    }
    return CLI_OK;
}

int cli_rule_filters(const cli_rule *r)
{
    return r->top_k != 0 || r->top_p != 1.0f || r->min_p != 0.0f || r->filter_id >= 0 || r->row_top_k ||
           r->row_top_p || r->row_min_p;
}

int cli_load_row_array(const char *opt, const char *path, int64_t B, unsigned allowed, fls_npy_array *arr)
{
    char err[FLS_NPY_ERR_LEN];
    char want[96];
    size_t n = 0;
    want[0] = '\0';
    for (int d = 0; d <= FLS_NPY_DTYPE_LAST; d++)
        if (allowed & (1u << d))
            n +=
                (size_t)snprintf(want + n, sizeof want - n, "%s%s ('%s')", n ? " or " : "",
                                 fls_npy_dtype_name((fls_npy_dtype)d), fls_npy_dtype_descr((fls_npy_dtype)d));
    const unsigned flags = ((allowed & (1u << FLS_NPY_F64)) ? FLS_NPY_ACCEPT_F64 : 0u) |
                           ((allowed & (1u << FLS_NPY_I32)) ? FLS_NPY_ACCEPT_I32 : 0u) |
                           ((allowed & (1u << FLS_NPY_U8)) ? FLS_NPY_ACCEPT_U8 : 0u);
    fls_status st = fls_npy_read_flags(path, flags, arr, err);
    if (st != FLS_OK) {
        cli_error("%s: %s%s%s", opt, err, st == FLS_ERR_DTYPE ? "; expected " : "",
                  st == FLS_ERR_DTYPE ? want : "");
        return -1;
    }
    if (!(allowed & (1u << arr->dtype))) {
        cli_error(
            "%s: %s: dtype is %s ('%s'); expected %s%s", opt, path, fls_npy_dtype_name(arr->dtype),
            fls_npy_dtype_descr(arr->dtype), want,
            (allowed & (1u << FLS_NPY_F32)) && arr->dtype == FLS_NPY_F64   ? " (save x.astype(np.float32))"
            : (allowed & (1u << FLS_NPY_I64)) && arr->dtype != FLS_NPY_I64 ? " (save x.astype(np.int64))"
                                                                           : "");
        fls_npy_free(arr);
        return -1;
    }
    if (arr->ndim != 1 || arr->shape[0] != B) {
        char shape[96];
        size_t k = 0;
        shape[0] = '\0';
        for (int d = 0; d < arr->ndim && k < sizeof shape; d++)
            k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%lld", d ? ", " : "",
                                  (long long)arr->shape[d]);
        cli_error("%s: %s: expected shape (%lld,) (one value per row), got (%s%s)", opt, path, (long long)B,
                  shape, arr->ndim == 1 ? "," : "");
        fls_npy_free(arr);
        return -1;
    }
    return 0;
}

/* Takes ownership of a loaded array's data (an aligned buffer). */
static void *take(fls_npy_array *a)
{
    void *d = a->data;
    a->data = NULL;
    fls_npy_free(a);
    return d;
}

int cli_rule_load(cli_rule *r, int64_t B, int64_t V, int *rc)
{
    const cli_rule_opts *o = r->opts;
    fls_npy_array a;
    *rc = CLI_FAIL;
    if (r->top_k > V) {
        cli_error("%s: %lld is out of range: top-k is 0 (off) to V = %lld, the vocabulary size",
                  o->top_k ? "--top-k" : "--filter top-k", (long long)r->top_k, (long long)V);
        *rc = CLI_USAGE;
        return -1;
    }
    if (r->wr_k > V) {
        cli_error("--without-replacement: %lld is out of range: K is 1 to V = %lld, the vocabulary size",
                  (long long)r->wr_k, (long long)V);
        *rc = CLI_USAGE;
        return -1;
    }
    if (o->top_k_rows) {
        if (cli_load_row_array("--top-k-per-row", o->top_k_rows, B, 1u << FLS_NPY_I64, &a) != 0)
            return -1;
        r->row_top_k = take(&a);
        for (int64_t b = 0; b < B; b++)
            if (r->row_top_k[b] < 0 || r->row_top_k[b] > V) {
                cli_error(
                    "--top-k-per-row: %s: row %lld has %lld, out of range: top-k is 0 (off) to V = %lld",
                    o->top_k_rows, (long long)b, (long long)r->row_top_k[b], (long long)V);
                *rc = CLI_USAGE;
                return -1;
            }
    }
    const char *fopt[2] = {"--top-p-per-row", "--min-p-per-row"};
    const char *fpath[2] = {o->top_p_rows, o->min_p_rows};
    float **fdst[2] = {&r->row_top_p, &r->row_min_p};
    for (int k = 0; k < 2; k++) {
        if (!fpath[k])
            continue;
        if (cli_load_row_array(fopt[k], fpath[k], B, 1u << FLS_NPY_F32, &a) != 0)
            return -1;
        *fdst[k] = take(&a);
        for (int64_t b = 0; b < B; b++) {
            const double v = (*fdst[k])[b];
            if (k == 0 ? !fls_top_p_valid(v) : !fls_min_p_valid(v)) {
                cli_error("%s: %s: row %lld has %g, out of range: %s", fopt[k], fpath[k], (long long)b, v,
                          k == 0 ? "top-p is in (0, 1] (1 = off)" : "min-p is in [0, 1] (0 = off)");
                *rc = CLI_USAGE;
                return -1;
            }
        }
    }
    if (o->filter_value_rows) {
        if (cli_load_row_array("--filter-value-per-row", o->filter_value_rows, B,
                               (1u << FLS_NPY_F64) | (1u << FLS_NPY_F32), &a) != 0)
            return -1;
        double *v = malloc((size_t)B * sizeof *v);
        if (!v) {
            fls_npy_free(&a);
            cli_error("out of memory");
            return -1;
        }
        for (int64_t b = 0; b < B; b++)
            v[b] = a.dtype == FLS_NPY_F64 ? ((const double *)a.data)[b] : (double)((const float *)a.data)[b];
        fls_npy_free(&a);
        r->row_filter_value = v;
        for (int64_t b = 0; b < B; b++)
            if (!fls_filter_valid(r->filter_id, v[b])) {
                cli_error("--filter-value-per-row: %s: row %lld has %g, out of range: %s is %s",
                          o->filter_value_rows, (long long)b, v[b], r->filter,
                          fls_filters[r->filter_id].range);
                *rc = CLI_USAGE;
                return -1;
            }
    }
    *rc = CLI_OK;
    return 0;
}

void cli_rule_apply(const cli_rule *r, fls_params *p)
{
    p->top_k = r->top_k;
    p->top_p = r->top_p;
    p->min_p = r->min_p;
    p->without_replacement_k = r->wr_k;
    p->row_top_k = r->row_top_k;
    p->row_top_p = r->row_top_p;
    p->row_min_p = r->row_min_p;
    p->filter = r->filter;
    p->filter_value = r->filter_value;
    p->row_filter_value = r->row_filter_value;
}

void cli_rule_free(cli_rule *r)
{
    free(r->row_top_k);
    free(r->row_top_p);
    free(r->row_min_p);
    free(r->row_filter_value);
    r->row_top_k = NULL;
    r->row_top_p = r->row_min_p = NULL;
    r->row_filter_value = NULL;
}

void cli_rule_describe(const cli_rule *r, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
#define ADD(...)                                                                                             \
    do {                                                                                                     \
        if (n < cap)                                                                                         \
            n += (size_t)snprintf(out + n, cap - n, __VA_ARGS__);                                            \
    } while (0)
    if (r->row_min_p)
        ADD("%smin-p per row", n ? ", " : "");
    else if (r->min_p != 0.0f)
        ADD("%smin-p %g", n ? ", " : "", (double)r->min_p);
    if (r->row_top_k)
        ADD("%stop-k per row", n ? ", " : "");
    else if (r->top_k != 0)
        ADD("%stop-k %lld", n ? ", " : "", (long long)r->top_k);
    if (r->row_top_p)
        ADD("%stop-p per row", n ? ", " : "");
    else if (r->top_p != 1.0f)
        ADD("%stop-p %g", n ? ", " : "", (double)r->top_p);
    if (r->filter && r->row_filter_value)
        ADD("%s%s per row", n ? ", " : "", r->filter);
    else if (r->filter)
        ADD("%s%s %g", n ? ", " : "", r->filter, r->filter_value);
    if (r->wr_k > 0)
        ADD("%swithout replacement K=%lld", n ? ", " : "", (long long)r->wr_k);
    if (n == 0)
        ADD("none");
#undef ADD
}

void cli_rule_explain(const cli_rule *r, int64_t B, int64_t V)
{
    const cli_rule_opts *o = r->opts;
    if (r->top_k > V) {
        cli_error("%s %lld exceeds V = %lld: top-k is 0 (off) to V",
                  o && o->top_k ? "--top-k" : "--filter top-k", (long long)r->top_k, (long long)V);
        return;
    }
    if (r->wr_k > V) {
        cli_error("--without-replacement %lld exceeds V = %lld: K is 1 to V", (long long)r->wr_k,
                  (long long)V);
        return;
    }
    for (int64_t b = 0; b < B; b++) {
        if (r->row_top_k && (r->row_top_k[b] < 0 || r->row_top_k[b] > V)) {
            cli_error("--top-k-per-row: row %lld has %lld: top-k is 0 (off) to V = %lld", (long long)b,
                      (long long)r->row_top_k[b], (long long)V);
            return;
        }
        if (r->row_top_p && !fls_top_p_valid(r->row_top_p[b])) {
            cli_error("--top-p-per-row: row %lld has %g: top-p is in (0, 1]", (long long)b,
                      (double)r->row_top_p[b]);
            return;
        }
        if (r->row_min_p && !fls_min_p_valid(r->row_min_p[b])) {
            cli_error("--min-p-per-row: row %lld has %g: min-p is in [0, 1]", (long long)b,
                      (double)r->row_min_p[b]);
            return;
        }
        if (r->row_filter_value && !fls_filter_valid(r->filter_id, r->row_filter_value[b])) {
            cli_error("--filter-value-per-row: row %lld has %g: %s is %s", (long long)b,
                      r->row_filter_value[b], r->filter, fls_filters[r->filter_id].range);
            return;
        }
    }
    cli_error(
        "the library refused a rule parameter (%s): min-p is in [0, 1], top-k in 0..V (V = %lld), top-p in "
        "(0, 1], --without-replacement K in 1..V, --filter VALUE as the registry says",
        fls_status_string(FLS_ERR_PARAM), (long long)V);
}
