/*
 * flashsample audit — the goodness-of-fit audit (stats/fls_audit.h): each
 * case's samples against the exact categorical, Pearson chi-square on
 * equal-mass bins, per-test level from a family-wise budget. Exit status 0
 * only if every test passes.
 */
#include "cli.h"
#include "fls_audit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void audit_help(void)
{
    printf("usage: flashsample audit [--quick | --full] [options]\n"
           "\n"
           "Draws samples through the public API for fixed cases (flat, Zipf, peaked, heavy-tailed,\n"
           "masked, per-row temperature, greedy) and tests each against the exact categorical\n"
           "distribution with Pearson chi-square (GSL). Seeds are fixed and printed.\n"
           "\n"
           "  --quick              a short audit (seconds; the default)\n"
           "  --full               the whole suite (minutes)\n"
           "  --json report.json   write the rows as JSON (atomically)\n"
           "  --device cpu|cuda    engine to audit, default cpu\n"
           "  --seed S             base seed (uint64); default: the audit's fixed seed\n"
           "  --threads K          CPU threads, 0 = all cores (default)\n"
           "  --simd PATH          CPU SIMD path: auto (the default; the only one the audit can\n"
           "                       use until the audit runner takes a path)\n"
           "\n"
           "exit status: 0 every test passed, 1 a test failed or the audit could not run, 2 usage error\n");
}

/* JSON number; chi2 and p can be inf or NaN only if something is badly
 * wrong, and JSON has no literal for them: write null. */
static void json_num(FILE *fp, double v)
{
    if (isfinite(v))
        fprintf(fp, "%.17g", v);
    else
        fputs("null", fp);
}

static void json_str(FILE *fp, const char *s, size_t max)
{
    fputc('"', fp);
    for (size_t i = 0; i < max && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(fp, "\\%c", c);
        else if (c < 0x20)
            fprintf(fp, "\\u%04x", c);
        else
            fputc(c, fp);
    }
    fputc('"', fp);
}

static void write_json(FILE *fp, const fls_audit_options *ao, const fls_audit_row *rows, size_t n,
                       int all_pass, double seconds)
{
    char date[32];
    cli_utc_date(date);
    fprintf(fp, "{\n  \"tool\": \"flashsample audit\",\n  \"version\": \"%d.%d.%d\",\n", FLS_VERSION_MAJOR,
            FLS_VERSION_MINOR, FLS_VERSION_PATCH);
    fprintf(fp, "  \"date\": \"%s\",\n  \"mode\": \"%s\",\n  \"device\": \"%s\",\n  \"seed\": %llu,\n", date,
            ao->full ? "full" : "quick", ao->engine == FLS_ENGINE_CUDA ? "cuda" : "cpu",
            (unsigned long long)ao->seed);
    fprintf(fp, "  \"threads\": %d,\n  \"seconds\": ", ao->threads);
    json_num(fp, seconds);
    fprintf(fp, ",\n  \"tests\": %zu,\n  \"all_pass\": %s,\n  \"rows\": [", n, all_pass ? "true" : "false");
    for (size_t i = 0; i < n; i++) {
        const fls_audit_row *r = &rows[i];
        fprintf(fp, "%s\n    {\"test\": ", i ? "," : "");
        json_str(fp, r->test, sizeof r->test);
        fputs(", \"engine\": ", fp);
        json_str(fp, r->engine, sizeof r->engine);
        fprintf(fp, ", \"V\": %lld, \"draws\": %lld, \"chi2\": ", (long long)r->V, (long long)r->draws);
        json_num(fp, r->chi2);
        fprintf(fp, ", \"dof\": %d, \"p\": ", r->dof);
        json_num(fp, r->p);
        fputs(", \"alpha\": ", fp);
        json_num(fp, r->alpha);
        fprintf(fp, ", \"pass\": %s}", r->pass ? "true" : "false");
    }
    fprintf(fp, "%s]\n}\n", n ? "\n  " : "");
}

int cli_audit(int argc, char **argv)
{
    const char *json = NULL, *device = NULL, *seed = NULL, *threads = NULL, *simd_s = NULL;
    int quick = 0, full = 0, help;
    const cli_option opts[] = {{"--quick", NULL, &quick}, {"--full", NULL, &full},
                               {"--json", &json, NULL},   {"--device", &device, NULL},
                               {"--seed", &seed, NULL},   {"--threads", &threads, NULL},
                               {"--simd", &simd_s, NULL}, {NULL, NULL, NULL}};
    if (cli_parse(argc, argv, opts, &help) != CLI_OK)
        return CLI_USAGE;
    if (help) {
        audit_help();
        return CLI_OK;
    }
    if (quick && full) {
        cli_error("--quick and --full exclude each other");
        return CLI_USAGE;
    }
    fls_audit_options ao;
    fls_audit_options_default(&ao);
    ao.full = full;
    int64_t th = 0;
    if (cli_parse_device(device, &ao.engine) != 0 || (seed && cli_parse_u64("--seed", seed, &ao.seed) != 0) ||
        (threads && cli_parse_i64("--threads", threads, 0, 1024, &th) != 0))
        return CLI_USAGE;
    fls_simd simd;
    if (cli_parse_simd(simd_s, &simd) != 0)
        return CLI_USAGE;
    if (simd != FLS_SIMD_AUTO) {
        /* The audit creates its contexts in stats/ (fls_audit_options has no SIMD field yet). */
        cli_error("--simd %s: the audit runs the automatic path only (its runner cannot choose one yet)",
                  simd_s);
        return CLI_USAGE;
    }
    ao.threads = (int)th;
    ao.progress = cli_progress_enabled();
    if (ao.engine == FLS_ENGINE_CUDA && !fls_cuda_available()) {
        cli_error("--device cuda: %s; use --device cpu",
                  fls_cuda_built() ? "this flashsample has the CUDA engine but no usable GPU was found"
                                   : "this flashsample was built without the CUDA engine");
        return CLI_FAIL;
    }

    /* The report's file is created only when the report is ready. */
    fls_npy_file fj;
    memset(&fj, 0, sizeof fj);
    if (json && cli_out_check("--json", json) != 0)
        return CLI_FAIL;

    printf("flashsample audit: %s, device %s, seed %llu, ", full ? "full" : "quick",
           ao.engine == FLS_ENGINE_CUDA ? "cuda" : "cpu", (unsigned long long)ao.seed);
    if (ao.threads)
        printf("%d threads\n", ao.threads);
    else
        printf("all cores\n");
    fflush(stdout);
    fls_audit_row *rows = NULL;
    size_t n = 0;
    double t0 = cli_now();
    fls_status st = fls_audit_run(&ao, &rows, &n);
    double seconds = cli_now() - t0;
    cli_progress_done();
    if (st != FLS_OK) {
        cli_error("the audit could not run: %s", fls_status_string(st));
        free(rows);
        return CLI_FAIL;
    }

    size_t failed = 0;
    printf("%-28s %-6s %10s %12s %12s %6s %11s %11s  %s\n", "test", "engine", "V", "draws", "chi2", "dof",
           "p", "alpha", "result");
    for (size_t i = 0; i < n; i++) {
        const fls_audit_row *r = &rows[i];
        failed += !r->pass;
        printf("%-28.64s %-6.8s %10lld %12lld %12.3f %6d %11.3e %11.3e  %s\n", r->test, r->engine,
               (long long)r->V, (long long)r->draws, r->chi2, r->dof, r->p, r->alpha,
               r->pass ? "pass" : "FAIL");
    }
    int all_pass = n > 0 && failed == 0;
    if (n == 0)
        printf("no tests ran\n");
    else
        printf("%zu test%s, %zu failed, %.1f s: %s\n", n, n == 1 ? "" : "s", failed, seconds,
               all_pass ? "all pass" : "FAILED");

    int rc = all_pass ? CLI_OK : CLI_FAIL;
    if (json) {
        if (cli_out_begin(&fj, json) != 0) {
            rc = CLI_FAIL;
        } else {
            write_json(fj.fp, &ao, rows, n, all_pass, seconds);
            if (cli_out_commit(&fj) != 0)
                rc = CLI_FAIL;
        }
    }
    free(rows);
    return rc;
}
