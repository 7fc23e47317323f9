/*
 * flashsample audit --logits L.npy --tokens tokens.npy — the audit of tokens
 * drawn by any sampler (stats/fls_tokens.h, docs/AUDIT.md) against the exact
 * distribution of the logits at their temperatures, under the rule family's
 * flags (docs/RULES.md): fls_audit_tokens with the rule in
 * fls_tokens_options.rule (the fls_params the flags fill), so the reference
 * is the rule's exact pmf (stats/rules.c, written from the definitions), a
 * truncating rule adds the boundary test and tuples without replacement
 * (B, N, K) the conditional (Plackett-Luce) and whole-tuple tests.
 *
 * Around the call: the inputs are read and checked (a bad one is exit 2 with
 * the file, row and column), the table and the power statement printed, and
 * the figures' data computed here (the fractional histogram of the global
 * test's transform and the tail-mass curve, from the same exact pmf) for
 * --json and --report.
 *
 * Exit status: 0 every tested row passes (rows not tested are listed as
 * "untested", never counted as passes), 1 a tested row fails, 2 bad usage or
 * input (including a report that cannot be made), 3 nothing was tested
 * (cli_audit.h).
 */
#include "tools/cli.h"
#include "tools/cli_audit.h"
#include "tools/cli_rules.h"
#include "stats/fls_tokens.h"

#include "variants/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define TAIL_POINTS 61                 /* t = 0, 0.5, ..., 30 nats */
#define Z999        3.2905267314918945 /* two-sided 0.999 normal quantile */

/* ---- python with matplotlib, for --report ---- */

/* Runs argv (argv[0] a path), stdout and stderr to the tool's stderr when
 * show, else to /dev/null. Returns the exit status, or -1. */
static int run_quiet(char *const *argv, int show)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (!show) {
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    } else {
        posix_spawn_file_actions_adddup2(&fa, 2, 1);
    }
    pid_t pid;
    fflush(NULL);
    int e = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e != 0)
        return -1;
    int status;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int executable(const char *p)
{
    return access(p, X_OK) == 0;
}

/* The python3 to run the report with: $FLASHSAMPLE_PYTHON, else the first of
 * /usr/bin/python3 and the python3 on PATH that imports matplotlib. */
static int find_python(char *out, size_t cap)
{
    const char *env = getenv("FLASHSAMPLE_PYTHON");
    char cands[8][512];
    int n = 0;
    if (env && *env)
        snprintf(cands[n++], sizeof cands[0], "%s", env);
    else {
        snprintf(cands[n++], sizeof cands[0], "/usr/bin/python3");
        const char *path = getenv("PATH");
        for (const char *p = path ? path : ""; *p && n < 8;) {
            size_t len = strcspn(p, ":");
            if (len > 0 && len < 480)
                snprintf(cands[n++], sizeof cands[0], "%.*s/python3", (int)len, p);
            p += len + (p[len] == ':');
        }
    }
    int found_any = 0;
    for (int k = 0; k < n; k++) {
        if (!executable(cands[k]))
            continue;
        found_any = 1;
        char *argv[] = {cands[k], "-c", "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot",
                        NULL};
        if (run_quiet(argv, 0) == 0) {
            snprintf(out, cap, "%.500s", cands[k]);
            return 0;
        }
    }
    if (env && *env)
        cli_error("--report: FLASHSAMPLE_PYTHON=%s %s", env,
                  found_any ? "cannot import matplotlib (install it there, e.g. python3-matplotlib)"
                            : "is not an executable file");
    else
        cli_error(
            "--report needs a python3 with matplotlib for its figures and none was found (tried "
            "/usr/bin/python3 and python3 on PATH): install python3-matplotlib (bash tools/setup-deps.sh), "
            "or set FLASHSAMPLE_PYTHON; the audit without --report needs no python");
    return -1;
}

/* tools/audit_report.py: $FLASHSAMPLE_AUDIT_REPORT, else next to the
 * executable (the build copies it there), else the source tree's. */
static int find_script(char *out, size_t cap)
{
    const char *env = getenv("FLASHSAMPLE_AUDIT_REPORT");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        if (access(out, R_OK) == 0)
            return 0;
        cli_error("--report: FLASHSAMPLE_AUDIT_REPORT=%s cannot be read", env);
        return -1;
    }
    char exe[1024];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(out, cap, "%s/audit_report.py", exe);
            if (access(out, R_OK) == 0)
                return 0;
        }
    }
#ifdef FLS_TOOLS_SOURCE_DIR
    snprintf(out, cap, "%s/audit_report.py", FLS_TOOLS_SOURCE_DIR);
    if (access(out, R_OK) == 0)
        return 0;
#endif
    cli_error(
        "--report: tools/audit_report.py was not found next to the executable or in the source tree; set "
        "FLASHSAMPLE_AUDIT_REPORT to its path");
    return -1;
}

/* --report DIR: an existing folder, or one that can be made. */
static int check_report_dir(const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode)) {
            cli_error("--report %s: exists and is not a folder", dir);
            return -1;
        }
        if (access(dir, W_OK | X_OK) != 0) {
            cli_error("--report %s: cannot write there: %s", dir, strerror(errno));
            return -1;
        }
        return 0;
    }
    char parent[1100];
    snprintf(parent, sizeof parent, "%s", dir);
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/')
        parent[--n] = '\0';
    char *slash = strrchr(parent, '/');
    const char *pd = slash ? (slash == parent ? "/" : (*slash = '\0', parent)) : ".";
    if (stat(pd, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(pd, W_OK | X_OK) != 0) {
        cli_error("--report %s: cannot create the folder (its parent %s is not a writable folder)", dir, pd);
        return -1;
    }
    return 0;
}

/* ---- the figures' data: bins of the transform, the tail curve ---- */

typedef struct curves {
    int K;
    int64_t n;
    double *bin_obs, *bin_exp;  /* K */
    double tail_t[TAIL_POINTS]; /* nats below the head */
    double tail_obs[TAIL_POINTS], tail_exp[TAIL_POINTS], tail_var[TAIL_POINTS];
} curves;

typedef struct pv {
    double p;
    int64_t i;
} pv;

static int by_p(const void *a, const void *b)
{
    const pv *x = a, *y = b;
    if (x->p != y->p)
        return x->p > y->p ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

/* For R rows of logits (row stride V) at their temperatures and N tokens per
 * row: the fractional histogram of the probability integral transform
 * (each sample spreads 1 over [F(v-), F(v)) in K equal bins: the expectation
 * of the randomized transform's histogram given the tokens; each bin expects
 * n / K) and the tail curve: samples more than t nats below their row's
 * head against the exact expectation. The reference is the rule's pmf (rule:
 * the library's parameters, NULL = none); the token of (row r, draw j) is tok[(r N + j) stride] (position 0
 * of a tuple). */
static fls_status make_curves(const float *L, int64_t R, int64_t V, const float *temps, float T,
                              const fls_params *rule, const int64_t *tok, int64_t N, int64_t stride, int K,
                              curves *c)
{
    memset(c, 0, sizeof *c);
    c->K = K;
    c->bin_obs = calloc((size_t)K, sizeof(double));
    c->bin_exp = calloc((size_t)K, sizeof(double));
    double *p = malloc((size_t)V * sizeof *p), *start = malloc((size_t)V * sizeof *start);
    pv *order = malloc((size_t)V * sizeof *order);
    fls_status st = FLS_ERR_OUT_OF_MEMORY;
    if (!c->bin_obs || !c->bin_exp || !p || !start || !order)
        goto done;
    for (int t = 0; t < TAIL_POINTS; t++)
        c->tail_t[t] = 0.5 * t;
    for (int64_t r = 0; r < R; r++) {
        const double Tr = temps ? (double)temps[r] : (double)T;
        fls_stats_rule rr; /* every registry rule, as the audit read it */
        if ((st = fls_stats_rule_from_params(rule, r, &rr)) != FLS_OK ||
            (st = fls_stats_probs_rule_f32(L + r * V, V, Tr, &rr, p, NULL)) != FLS_OK)
            goto done;
        for (int64_t v = 0; v < V; v++) {
            order[v].p = p[v];
            order[v].i = v;
        }
        qsort(order, (size_t)V, sizeof *order, by_p);
        double acc = 0.0;
        for (int64_t k = 0; k < V; k++) {
            start[order[k].i] = acc;
            acc += order[k].p;
        }
        const double pmax = order[0].p;
        /* tail masses at each t: tokens with p < pmax e^-t, walking up from the least likely */
        double mass[TAIL_POINTS];
        for (int t = 0; t < TAIL_POINTS; t++) {
            const double thr = pmax * exp(-c->tail_t[t]);
            double m = 0.0;
            for (int64_t k = V - 1; k >= 0 && order[k].p < thr; k--)
                m += order[k].p;
            mass[t] = m;
        }
        int64_t nr = 0;
        for (int64_t j = 0; j < N; j++) {
            const int64_t v = tok[(r * N + j) * stride];
            if (v < 0 || v >= V || !(p[v] > 0.0))
                continue; /* the audit fails it outright; not drawn here */
            nr++;
            const double a = start[v], b = start[v] + p[v];
            int ja = (int)(a * K), jb = (int)(b * K);
            ja = ja < K ? ja : K - 1;
            jb = jb < K ? jb : K - 1;
            for (int k = ja; k <= jb; k++) {
                const double lo = a > (double)k / K ? a : (double)k / K,
                             hi = b < (double)(k + 1) / K ? b : (double)(k + 1) / K;
                if (hi > lo)
                    c->bin_obs[k] += (hi - lo) / p[v];
            }
            for (int t = 0; t < TAIL_POINTS; t++)
                if (p[v] < pmax * exp(-c->tail_t[t]))
                    c->tail_obs[t] += 1.0;
        }
        c->n += nr;
        for (int t = 0; t < TAIL_POINTS; t++) {
            c->tail_exp[t] += (double)nr * mass[t];
            c->tail_var[t] += (double)nr * mass[t] * (1.0 - mass[t]);
        }
    }
    for (int k = 0; k < K; k++)
        c->bin_exp[k] = (double)c->n / K;
    st = FLS_OK;
done:
    free(p);
    free(start);
    free(order);
    return st;
}

static void curves_free(curves *c)
{
    free(c->bin_obs);
    free(c->bin_exp);
    c->bin_obs = c->bin_exp = NULL;
}

/* ---- one audited group (all tokens, or one position without replacement) ---- */

typedef struct group {
    char name[32];
    fls_tokens_options o;
    int tests;
    size_t row0, nrows;     /* its rows in the table */
    int64_t rows_in, draws; /* rows of logits it audited, samples */
    curves c;
    int done;
} group;

/* The central 0.999 interval of a count with mean mu and variance var:
 * Poisson quantiles (exact, by summing the pmf) below a mean of 200, the
 * normal approximation above. */
static void interval(double mu, double var, double *lo, double *hi)
{
    if (!(mu > 0.0)) {
        *lo = *hi = 0.0;
        return;
    }
    if (mu >= 200.0) {
        const double s = sqrt(var);
        *lo = mu - Z999 * s;
        *hi = mu + Z999 * s;
        return;
    }
    const double tail = (1.0 - FLS_STATS_POWER) / 2.0;
    double pk = exp(-mu), cdf = pk;
    int64_t k = 0;
    *lo = -1.0;
    if (cdf > tail)
        *lo = 0.0;
    while (cdf < 1.0 - tail && k < 100000) {
        k++;
        pk *= mu / (double)k;
        if (*lo < 0.0 && cdf + pk > tail)
            *lo = (double)k;
        cdf += pk;
    }
    if (*lo < 0.0)
        *lo = (double)k;
    *hi = (double)k;
}

static void json_array(FILE *fp, const double *v, int n)
{
    fputc('[', fp);
    for (int i = 0; i < n; i++) {
        if (i)
            fputs(", ", fp);
        cli_json_num(fp, v[i]);
    }
    fputc(']', fp);
}

static void json_row(FILE *fp, const fls_audit_row *r)
{
    fputs("{\"test\": ", fp);
    cli_json_str(fp, r->test, sizeof r->test);
    fputs(", \"kind\": ", fp);
    cli_json_str(fp, r->kind, sizeof r->kind);
    fprintf(fp, ", \"V\": %lld, \"draws\": %lld, \"chi2\": ", (long long)r->V, (long long)r->draws);
    cli_json_num(fp, r->chi2);
    fprintf(fp, ", \"dof\": %d, \"p\": ", r->dof);
    cli_json_num(fp, r->p);
    fputs(", \"alpha\": ", fp);
    cli_json_num(fp, r->alpha);
    fprintf(fp, ", \"pass\": %s, \"verdict\": \"%s\", \"untested\": %s, \"bins\": %d, \"min_mass\": ",
            r->pass ? "true" : "false", fls_audit_verdict_name(fls_audit_row_verdict(r)),
            r->untested ? "true" : "false", r->bins);
    cli_json_num(fp, r->min_mass);
    fputs(", \"tv_caught\": ", fp);
    cli_json_num(fp, r->tv_caught);
    fputs(", \"tail_t\": ", fp);
    cli_json_num(fp, r->tail_t);
    fputs(", \"tail_mass\": ", fp);
    cli_json_num(fp, r->tail_mass);
    fputs(", \"expected\": ", fp);
    cli_json_num(fp, r->expected);
    fputs(", \"observed\": ", fp);
    cli_json_num(fp, r->observed);
    fputs(", \"deficit_caught\": ", fp);
    cli_json_num(fp, r->deficit_caught);
    fputs(", \"excess_caught\": ", fp);
    cli_json_num(fp, r->excess_caught);
    fputs(", \"note\": ", fp);
    cli_json_str(fp, r->note, sizeof r->note);
    fputc('}', fp);
}

typedef struct report_in {
    const audit_ext_opts *o;
    int64_t B, V, N, K;
    char rule[256];
    double alpha;
    int tests, all_pass;
    double seconds;
    const fls_audit_row *rows;
    size_t nrows;
    const group *groups;
    int ngroups;
    char power[8][512];
    int npower;
} report_in;

static void write_json(FILE *fp, const report_in *ri)
{
    char date[32];
    cli_utc_date(date);
    const audit_ext_opts *o = ri->o;
    fprintf(
        fp,
        "{\n  \"tool\": \"flashsample audit\",\n  \"mode\": \"external\",\n  \"version\": \"%d.%d.%d\",\n",
        FLS_VERSION_MAJOR, FLS_VERSION_MINOR, FLS_VERSION_PATCH);
    fprintf(fp, "  \"date\": \"%s\",\n  \"inputs\": {\"logits\": ", date);
    cli_json_str(fp, o->logits, 4096);
    fputs(", \"tokens\": ", fp);
    cli_json_str(fp, o->tokens, 4096);
    fprintf(fp, ", \"B\": %lld, \"V\": %lld, \"N\": %lld, \"K\": %lld, \"temperature\": ", (long long)ri->B,
            (long long)ri->V, (long long)ri->N, (long long)ri->K);
    if (o->temperature_rows) {
        fputs("\"per row: ", fp);
        for (const char *c = o->temperature_rows; *c; c++)
            if (*c != '"' && *c != '\\' && (unsigned char)*c >= 0x20)
                fputc(*c, fp);
        fputc('"', fp);
    } else {
        cli_json_str(fp, o->temperature ? o->temperature : "1", 64);
    }
    fputs(", \"rule\": ", fp);
    cli_json_str(fp, ri->rule, sizeof ri->rule);
    fprintf(fp, "},\n  \"family\": {\"tests\": %d, \"budget\": ", ri->tests);
    cli_json_num(fp, FLS_STATS_BUDGET);
    fputs(", \"alpha\": ", fp);
    cli_json_num(fp, ri->alpha);
    fprintf(fp, "},\n  \"power_level\": ");
    cli_json_num(fp, FLS_STATS_POWER);
    fprintf(fp, ",\n  \"seconds\": ");
    cli_json_num(fp, ri->seconds);
    fprintf(fp, ",\n  \"all_pass\": %s,\n  ", ri->all_pass ? "true" : "false");
    cli_audit_json_tally(fp, ri->rows, ri->nrows);
    fputs(",\n  \"power\": [", fp);
    for (int k = 0; k < ri->npower; k++) {
        fputs(k ? ",\n    " : "\n    ", fp);
        cli_json_str(fp, ri->power[k], sizeof ri->power[k]);
    }
    fprintf(fp, "%s],\n  \"rows\": [", ri->npower ? "\n  " : "");
    for (size_t i = 0; i < ri->nrows; i++) {
        fputs(i ? ",\n    " : "\n    ", fp);
        json_row(fp, &ri->rows[i]);
    }
    fprintf(fp, "\n  ],\n  \"groups\": [");
    int first = 1;
    for (int g = 0; g < ri->ngroups; g++) {
        const group *gr = &ri->groups[g];
        if (!gr->done)
            continue;
        fputs(first ? "\n    " : ",\n    ", fp);
        first = 0;
        const curves *c = &gr->c;
        double lo[TAIL_POINTS], hi[TAIL_POINTS];
        fputs("{\"name\": ", fp);
        cli_json_str(fp, gr->name, sizeof gr->name);
        fprintf(fp, ", \"rows\": %lld, \"draws\": %lld, \"bins\": {\"observed\": ", (long long)gr->rows_in,
                (long long)c->n);
        json_array(fp, c->bin_obs, c->K);
        fputs(", \"expected\": ", fp);
        json_array(fp, c->bin_exp, c->K);
        double blo[64], bhi[64];
        const double q = 1.0 / c->K;
        for (int k = 0; k < c->K && k < 64; k++)
            interval(c->bin_exp[k], (double)c->n * q * (1.0 - q), &blo[k], &bhi[k]);
        fputs(", \"lo\": ", fp);
        json_array(fp, blo, c->K < 64 ? c->K : 64);
        fputs(", \"hi\": ", fp);
        json_array(fp, bhi, c->K < 64 ? c->K : 64);
        for (int t = 0; t < TAIL_POINTS; t++)
            interval(c->tail_exp[t], c->tail_var[t], &lo[t], &hi[t]);
        fputs("}, \"tail\": {\"t\": ", fp);
        json_array(fp, c->tail_t, TAIL_POINTS);
        fputs(", \"observed\": ", fp);
        json_array(fp, c->tail_obs, TAIL_POINTS);
        fputs(", \"expected\": ", fp);
        json_array(fp, c->tail_exp, TAIL_POINTS);
        fputs(", \"lo\": ", fp);
        json_array(fp, lo, TAIL_POINTS);
        fputs(", \"hi\": ", fp);
        json_array(fp, hi, TAIL_POINTS);
        fputs("}}", fp);
    }
    fprintf(fp, "%s]\n}\n", first ? "" : "\n  ");
}

static int write_json_file(const char *path, const report_in *ri)
{
    fls_npy_file f;
    memset(&f, 0, sizeof f);
    if (cli_out_begin(&f, path) != 0)
        return -1;
    write_json(f.fp, ri);
    return cli_out_commit(&f);
}

/* ---- inputs ---- */

/* The first NaN or +inf logit, or a row of all -inf: a message, exit 2. */
static int check_logits(const float *L, int64_t B, int64_t V, const char *path)
{
    for (int64_t b = 0; b < B; b++) {
        int64_t finite = 0;
        for (int64_t v = 0; v < V; v++) {
            const float l = L[b * V + v];
            if (isnan(l) || (isinf(l) && l > 0)) {
                cli_error("--logits %s: %s at row %lld, column %lld%s", path, isnan(l) ? "NaN" : "+inf",
                          (long long)b, (long long)v,
                          isnan(l) ? "" : " (+inf is not a logit; mask a token with -inf)");
                return -1;
            }
            finite += l > -INFINITY;
        }
        if (!finite) {
            cli_error("--logits %s: row %lld has every logit at -inf (no token can be drawn)", path,
                      (long long)b);
            return -1;
        }
    }
    return 0;
}

/* One audit of external tokens: its options, inputs, rule and results. */
typedef struct ext_audit {
    const audit_ext_opts *o;
    float T;
    uint64_t seed;
    cli_rule rule;
    char python[512], script[1100]; /* --report */
    fls_npy_matrix Lm;
    fls_npy_array ta, tra;
    int64_t B, V, N, K; /* K: positions per draw (1 with replacement) */
    const float *L, *temps;
    const int64_t *tok;
    fls_params rp; /* the rule, as the library reads it */
    group groups[1];
    int ngroups;
    fls_stats_family fam;
    double alpha, seconds;
    fls_audit_row *rows;
    size_t nrows;
    char rdesc[256];
} ext_audit;

/* The arguments, checked before any file is read: CLI_OK or CLI_USAGE. */
static int ext_args(ext_audit *ea)
{
    const audit_ext_opts *o = ea->o;
    if (!o->logits || !o->tokens) {
        cli_error("the audit of external tokens needs both --logits L.npy and --tokens tokens.npy");
        return CLI_USAGE;
    }
    if (o->temperature && o->temperature_rows) {
        cli_error("--temperature and --temperature-per-row exclude each other");
        return CLI_USAGE;
    }
    ea->T = 1.0f;
    if ((o->temperature && cli_parse_float("--temperature", o->temperature, &ea->T) != 0) ||
        (o->seed && cli_parse_u64("--seed", o->seed, &ea->seed) != 0) ||
        cli_rule_parse(&o->rule, &ea->rule) != CLI_OK)
        return CLI_USAGE;
    if (ea->T < 0.0f) {
        cli_error("--temperature must be >= 0 (0 is greedy), got %s", o->temperature);
        return CLI_USAGE;
    }
    /* every rule of the registry has its exact pmf in stats/rules.c */
    const char *iopts[7] = {"--logits",        "--tokens",        "--temperature-per-row", "--top-k-per-row",
                            "--top-p-per-row", "--min-p-per-row", "--filter-value-per-row"};
    const char *ipaths[7] = {
        o->logits,          o->tokens,          o->temperature_rows,      o->rule.top_k_rows,
        o->rule.top_p_rows, o->rule.min_p_rows, o->rule.filter_value_rows};
    if (cli_output_names_input("--json", o->json, iopts, ipaths, 7))
        return CLI_USAGE;
    return CLI_OK;
}

/* --tokens: int64, (B, N) or (N,) for one row, (B, N, K) without replacement. 0 or -1 after a message. */
/* Every token in [0, V) (or -1, a position past the support, without
 * replacement): a token out of range is bad input, not a sample the tests
 * could judge, so the audit stops before any test with the first one (row,
 * draw, position, value) and how many there are. 0, or -1 after a message. */
static int ext_check_token_range(const ext_audit *ea)
{
    const int64_t B = ea->B, N = ea->N, K = ea->K, V = ea->V, n = B * N * K;
    const int64_t *t = ea->tok;
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (!((t[i] >= 0 && t[i] < V) || (t[i] == -1 && ea->rule.wr_k > 0)))
            first = bad++ == 0 ? i : first;
    if (bad == 0)
        return 0;
    const int64_t b = first / (N * K), j = (first / K) % N, k = first % K;
    char pos[48] = "";
    if (ea->rule.wr_k > 0)
        snprintf(pos, sizeof pos, ", position %lld", (long long)k);
    cli_error("--tokens %s: %lld token(s) out of range [0, V = %lld)%s; the first at row %lld, draw %lld%s: "
              "%lld. Nothing audited: an index outside the vocabulary is not a sample of it",
              ea->o->tokens, (long long)bad, (long long)V,
              ea->rule.wr_k > 0 ? " (or -1 past the support)" : "", (long long)b, (long long)j, pos,
              (long long)t[first]);
    return -1;
}

static int ext_read_tokens(ext_audit *ea)
{
    const audit_ext_opts *o = ea->o;
    const fls_npy_array *ta = &ea->ta;
    const int64_t B = ea->B, wr_k = ea->rule.wr_k;
    char err[FLS_NPY_ERR_LEN];
    fls_status st;
    if ((st = fls_npy_read(o->tokens, &ea->ta, err)) != FLS_OK) {
        cli_error("--tokens: %s%s", err, st == FLS_ERR_DTYPE ? "; expected int64 ('<i8') token indices" : "");
        return -1;
    }
    if (ta->dtype != FLS_NPY_I64) {
        cli_error(
            "--tokens %s: dtype is %s ('%s'); expected int64 ('<i8') token indices (save x.astype(np.int64))",
            o->tokens, fls_npy_dtype_name(ta->dtype), fls_npy_dtype_descr(ta->dtype));
        return -1;
    }
    ea->K = wr_k > 0 ? wr_k : 1;
    if (ta->ndim == 1 && B == 1 && ea->Lm.ndim == 1 && wr_k == 0) {
        ea->N = ta->shape[0];
    } else if (ta->ndim == 2 && wr_k == 0 && ta->shape[0] == B) {
        ea->N = ta->shape[1];
    } else if (ta->ndim == 3 && wr_k > 0 && ta->shape[0] == B && ta->shape[2] == wr_k) {
        ea->N = ta->shape[1];
    } else {
        char shape[128];
        size_t k = 0;
        shape[0] = '\0';
        for (int d = 0; d < ta->ndim && k < sizeof shape; d++)
            k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%lld", d ? ", " : "",
                                  (long long)ta->shape[d]);
        if (ta->ndim == 3 && wr_k == 0)
            cli_error(
                "--tokens %s: a 3-D array (%s): tokens without replacement need --without-replacement K "
                "(K = %lld here)",
                o->tokens, shape, (long long)ta->shape[2]);
        else if (wr_k > 0)
            cli_error(
                "--tokens %s: expected (B, N, K) = (%lld, N, %lld) with --without-replacement %lld, got (%s)",
                o->tokens, (long long)B, (long long)wr_k, (long long)wr_k, shape);
        else
            cli_error(
                "--tokens %s: expected (B, N) = (%lld, N): one row of draws per row of --logits %s, got (%s)",
                o->tokens, (long long)B, o->logits, shape);
        return -1;
    }
    if (ea->N < 1) {
        cli_error("--tokens %s: no draws (N = 0)", o->tokens);
        return -1;
    }
    ea->tok = ta->data;
    return ext_check_token_range(ea);
}

/* The inputs: logits, tokens, per-row temperatures and rule arrays, checked. 0 or -1 after a message. */
static int ext_read_inputs(ext_audit *ea)
{
    const audit_ext_opts *o = ea->o;
    char err[FLS_NPY_ERR_LEN];
    fls_status st;
    const fls_dtype f32 = FLS_DTYPE_F32;
    if ((st = fls_npy_read_matrix(o->logits, &f32, &ea->Lm, err)) != FLS_OK) {
        cli_error("--logits: %s%s", err,
                  st == FLS_ERR_DTYPE && strstr(err, "float64") ? " (save x.astype(np.float32))" : "");
        return -1;
    }
    ea->B = ea->Lm.rows;
    ea->V = ea->Lm.cols;
    ea->L = ea->Lm.data;
    if (ext_read_tokens(ea) != 0)
        return -1;
    if (o->temperature_rows) {
        if (cli_load_row_array("--temperature-per-row", o->temperature_rows, ea->B, 1u << FLS_NPY_F32,
                               &ea->tra) != 0)
            return -1;
        ea->temps = ea->tra.data;
        for (int64_t b = 0; b < ea->B; b++)
            if (!(isfinite(ea->temps[b]) && ea->temps[b] >= 0.0f)) {
                cli_error(
                    "--temperature-per-row %s: row %lld has %g; T must be finite and >= 0 (0 is greedy)",
                    o->temperature_rows, (long long)b, (double)ea->temps[b]);
                return -1;
            }
    }
    int lrc;
    if (cli_rule_load(&ea->rule, ea->B, ea->V, &lrc) != 0)
        return -1;
    return check_logits(ea->L, ea->B, ea->V, o->logits);
}

/* The audit: one call, the rule in the options; then the report's curves. 0 or -1 after a message. */
static int ext_run(ext_audit *ea)
{
    const audit_ext_opts *o = ea->o;
    const int64_t B = ea->B, V = ea->V, N = ea->N, K = ea->K;
    fls_params_default(&ea->rp);
    cli_rule_apply(&ea->rule, &ea->rp);
    group *gr = &ea->groups[ea->ngroups++];
    snprintf(gr->name, sizeof gr->name, "tokens");
    fls_tokens_options_default(&gr->o);
    if (o->seed)
        gr->o.seed = ea->seed;
    gr->o.pairs_rows = o->pairs_rows;
    gr->o.name = gr->name;
    gr->o.rule = cli_rule_given(&o->rule) ? &ea->rp : NULL;
    gr->tests = fls_tokens_test_count(&gr->o);
    fls_stats_family_init(&ea->fam, FLS_STATS_BUDGET);
    fls_stats_family_add(&ea->fam, "external tokens", gr->tests);
    ea->alpha = ea->fam.alpha;
    gr->o.alpha = ea->alpha;
    if (!(ea->rows = calloc((size_t)gr->tests, sizeof *ea->rows))) {
        cli_error("out of memory");
        return -1;
    }
    cli_rule_describe(&ea->rule, ea->rdesc, sizeof ea->rdesc);
    printf("flashsample audit: external tokens %s (B=%lld rows, N=%lld draws per row) against the exact "
           "distribution of %s (V=%lld)\n",
           o->tokens, (long long)B, (long long)N, o->logits, (long long)V);
    if (K > 1)
        printf("tuples without replacement: K=%lld positions per draw (the global, tail, pairs and tie tests "
               "look "
               "at position 1; pl-cond at positions 2..K given the earlier ones)\n",
               (long long)K);
    if (ea->temps)
        printf("temperature per row from %s; rule: %s\n", o->temperature_rows, ea->rdesc);
    else
        printf("temperature %g; rule: %s\n", (double)ea->T, ea->rdesc);
    fls_stats_family_print(stdout, "", &ea->fam);
    fflush(stdout);

    double t0 = cli_now();
    cli_progress("auditing %lld x %lld tokens", (long long)B, (long long)(N * K));
    fls_status st =
        fls_audit_tokens(ea->L, B, V, V, ea->temps, ea->T, ea->tok, N, &gr->o, ea->rows, &ea->nrows);
    if (st != FLS_OK) {
        if (st == FLS_ERR_PARAM)
            cli_rule_explain(&ea->rule, B, V);
        else
            cli_error("the audit could not run: %s", fls_status_string(st));
        return -1;
    }
    gr->row0 = 0;
    gr->nrows = ea->nrows;
    gr->rows_in = B;
    gr->draws = B * N;
    /* the figures' data, at the global test's bins (position 1 of a tuple) */
    cli_progress("the report's curves");
    const int Kb = ea->rows[0].bins > 1 ? ea->rows[0].bins : 2;
    if ((st = make_curves(ea->L, B, V, ea->temps, ea->T, &ea->rp, ea->tok, N, K, Kb, &gr->c)) != FLS_OK) {
        cli_error("the report's curves could not be computed: %s", fls_status_string(st));
        return -1;
    }
    gr->done = 1;
    cli_progress_done();
    ea->seconds = cli_now() - t0;
    return 0;
}

/* The power statement of the tests that have one, into ri->power and stdout. */
static void ext_power(const ext_audit *ea, report_in *ri)
{
    const fls_audit_row *rows = ea->rows, *gof = &rows[0];
    printf("\npower (probability %.3g at alpha %.3g per test):\n", FLS_STATS_POWER, ea->alpha);
    char *s = ri->power[ri->npower++];
    snprintf(s, sizeof ri->power[0],
             "with these %lld draws, a total-variation error >= %.3g in these %d bins (equal bins of the "
             "probability integral transform, each %.3g of the mass) would be caught with probability %.3g",
             (long long)ea->groups[0].draws, gof->tv_caught, gof->bins, gof->min_mass, FLS_STATS_POWER);
    printf("  %s\n", s);
    for (size_t i = 0; i < ea->nrows && ri->npower < 8; i++) {
        const fls_audit_row *r = &rows[i];
        s = ri->power[ri->npower];
        if (!strcmp(r->kind, "tail") && r->tail_t == 15.0) {
            if (isfinite(r->deficit_caught))
                snprintf(s, sizeof ri->power[0],
                         "the mass more than 15 nats below the head (%.3g of the draws): a relative deficit "
                         ">= %.3g or excess >= %.3g of it would be caught with probability %.3g",
                         r->tail_mass, r->deficit_caught, r->excess_caught, FLS_STATS_POWER);
            else
                snprintf(s, sizeof ri->power[0],
                         "the mass more than 15 nats below the head (%.3g of the draws) is too small for any "
                         "deficit to show at this N%s",
                         r->tail_mass,
                         isfinite(r->excess_caught) ? "; only an excess would"
                                                    : "; nor an excess: tail15 is not tested");
        } else if (strstr(r->test, "/pl-cond") && r->kind[0] != 'e' && !r->untested) {
            snprintf(
                s, sizeof ri->power[0],
                "positions 2..K given the earlier ones (pl-cond): a total-variation error >= %.3g in its "
                "%d bins would be caught with probability %.3g",
                r->tv_caught, r->bins, FLS_STATS_POWER);
        } else {
            continue;
        }
        printf("  %s\n", s);
        ri->npower++;
    }
    if (gof->tv_caught > FLS_STATS_TV) {
        int64_t need = fls_tokens_draws_needed(ea->B, ea->alpha);
        printf("  to catch a TV of %g in 32 bins, draw at least %lld per row (%lld in all)\n", FLS_STATS_TV,
               (long long)need, (long long)(need * ea->B));
    }
}

/* The table, the power and the verdict on stdout; ri filled for the JSON. The exit status of the
 * verdict (CLI_OK every tested row passed, CLI_FAIL, CLI_AUDIT_UNTESTED nothing tested). */
static int ext_print(const ext_audit *ea, report_in *ri)
{
    printf("\n");
    fls_audit_print_header(stdout);
    int joint = 0, capped = 0;
    for (size_t i = 0; i < ea->nrows; i++) {
        const fls_audit_row *r = &ea->rows[i];
        fls_audit_print_row(stdout, r);
        joint |= !r->untested && (!strcmp(r->kind, "pairs") || !strcmp(r->kind, "ties"));
        capped |= (!strcmp(r->kind, "gof") || !strcmp(r->kind, "pairs")) && r->p >= 1.0;
    }
    if (joint)
        printf("\nreading the table: pairs-* and ties test the joint law of two draws (or rows, or tied\n"
               "tokens) built from the exact marginal, so a wrong marginal alone (a temperature error, a\n"
               "wrong rule) fails them too, not only dependent draws; gof and the tails test the marginal:\n"
               "read the joint rows as evidence of dependence only when those pass.\n");
    if (capped)
        printf("%sp shown as 1 (cap): a chi-square p-value is %.2f times its tail probability (the\n"
               "calibration factor of docs/STATS.md) and Bonferroni over its bin groups, capped at 1.\n",
               joint ? "" : "\n", FLS_STATS_CHI2_KAPPA);
    memset(ri, 0, sizeof *ri);
    ext_power(ea, ri);
    printf("\n");
    const int verdict = cli_audit_verdict(ea->rows, ea->nrows, ea->seconds, 2);
    const int all_pass = verdict == CLI_OK;
    ri->o = ea->o;
    ri->B = ea->B;
    ri->V = ea->V;
    ri->N = ea->N;
    ri->K = ea->K;
    snprintf(ri->rule, sizeof ri->rule, "%s", ea->rdesc);
    ri->alpha = ea->alpha;
    ri->tests = ea->fam.size;
    ri->all_pass = all_pass;
    ri->seconds = ea->seconds;
    ri->rows = ea->rows;
    ri->nrows = ea->nrows;
    ri->groups = ea->groups;
    ri->ngroups = ea->ngroups;
    return verdict;
}

/* --json and --report. 0 or -1 after a message. */
static int ext_outputs(ext_audit *ea, const report_in *ri)
{
    const audit_ext_opts *o = ea->o;
    if (o->json && write_json_file(o->json, ri) != 0)
        return -1;
    if (o->report) {
        if (mkdir(o->report, 0777) != 0 && errno != EEXIST) {
            cli_error("--report %s: cannot create the folder: %s", o->report, strerror(errno));
            return -1;
        }
        char jp[1200];
        snprintf(jp, sizeof jp, "%s/audit.json", o->report);
        if (write_json_file(jp, ri) != 0)
            return -1;
        char *argv[] = {ea->python, ea->script, jp, (char *)o->report, NULL};
        int prc = run_quiet(argv, 1);
        if (prc != 0) {
            cli_error("--report: %s %s failed (exit %d); the JSON is in %s", ea->python, ea->script, prc, jp);
            return -1;
        }
        printf("wrote %s/report.md and its figures (%s/*.png)\n", o->report, o->report);
    }
    if (o->json)
        printf("wrote %s\n", o->json);
    return 0;
}

int cli_audit_external(const audit_ext_opts *o)
{
    ext_audit *ea = calloc(1, sizeof *ea);
    if (!ea) {
        cli_error("out of memory");
        return CLI_USAGE;
    }
    ea->o = o;
    int rc = ext_args(ea);
    if (rc != CLI_OK || cli_parse_only) {
        free(ea);
        return rc;
    }
    rc = CLI_USAGE;
    if ((o->json && cli_out_check("--json", o->json) != 0) ||
        (o->report && (check_report_dir(o->report) != 0 || find_python(ea->python, sizeof ea->python) != 0 ||
                       find_script(ea->script, sizeof ea->script) != 0))) {
        free(ea);
        return CLI_USAGE;
    }
    report_in ri;
    if (ext_read_inputs(ea) == 0 && ext_run(ea) == 0) {
        const int verdict = ext_print(ea, &ri);
        if (ext_outputs(ea, &ri) == 0)
            rc = verdict;
    }
    cli_progress_done();
    for (int g = 0; g < ea->ngroups; g++)
        curves_free(&ea->groups[g].c);
    fls_npy_matrix_free(&ea->Lm);
    fls_npy_free(&ea->ta);
    fls_npy_free(&ea->tra);
    cli_rule_free(&ea->rule);
    free(ea->rows);
    free(ea);
    return rc;
}
