/*
 * flashsample audit — the goodness-of-fit audit (stats/fls_audit.h): each
 * case's samples against the exact categorical, Pearson chi-square on
 * equal-mass bins, per-test level from a family-wise budget. Exit status 0
 * only if every tested row passes (rows not tested are said, never counted as
 * passes), 1 if one fails, 3 if nothing was tested (cli_audit.h).
 */
#include "tools/cli.h"
#include "tools/cli_audit.h"
#include "stats/fls_audit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void audit_help(void)
{
    printf("usage: flashsample audit [--quick | --full] [options]\n"
           "       flashsample audit --logits L.npy --tokens tokens.npy [--temperature T | "
           "--temperature-per-row "
           "T.npy]\n"
           "                         [rule flags] [--json FILE] [--report DIR]\n"
           "\n"
           "Draws samples through the public API for fixed cases (flat, Zipf, peaked, heavy-tailed,\n"
           "masked, per-row temperature, greedy) and tests each against the exact categorical\n"
           "distribution with Pearson chi-square (GSL). Seeds are fixed and printed.\n"
           "\n"
           "With --logits and --tokens, audits tokens drawn by any sampler (docs/AUDIT.md): the\n"
           "global goodness of fit of every row at once, the deep-tail mass 10, 15, 20 and 25 nats\n"
           "below each row's head, independence of draws (and of rows, with --pairs-rows) and ties,\n"
           "at one family-wise false-failure budget; prints the table and what N draws can catch.\n"
           "  --logits L.npy       the logits the sampler drew from, (B, V) float32 or float16\n"
           "  --tokens tokens.npy  its tokens, int64 (B, N); (B, N, K) with --without-replacement K\n"
           "  --temperature T      the temperature it used (default 1; 0 = greedy)\n"
           "  --temperature-per-row T.npy  per-row temperatures, float32 (B,)\n"
           "  --pairs-rows         also test rows 2i and 2i+1 for independence (only for rows drawn\n"
           "                       independently, e.g. different requests)\n"
           "  --report DIR         also write DIR/report.md with figures (observed vs expected per\n"
           "                       bin with 0.999 intervals, the tail-mass curve, every p-value) by\n"
           "                       tools/audit_report.py; needs a python3 with matplotlib\n"
           "                       (FLASHSAMPLE_PYTHON chooses one)\n"
           "  the rule flags below: the reference is the rule's exact distribution; a truncating\n"
           "  rule adds a boundary test (the class at the cutoff against its mass, a sample just\n"
           "  outside fails), tuples without replacement the conditional (pl-cond) and whole-tuple\n"
           "  (pl-tuples) tests of Plackett-Luce\n"
           "%s"
           "  (exit status here as below: 0, 1, 2 bad usage or input, 3)\n"
           "\n"
           "  --quick              a short audit (the default; about two minutes on 2 cores)\n"
           "  --full               the whole suite (every case at its full draws: far longer)\n"
           "  --json report.json   write the rows as JSON (atomically)\n"
           "  --device cpu|cuda    engine to audit, default cpu\n"
           "  --seed S             base seed (uint64); default: the audit's fixed seed\n"
           "  --threads K          CPU threads, 0 = all cores (default)\n"
           "  --simd PATH          CPU SIMD path: auto, the library's choice (the audit runs no\n"
           "                       other path)\n"
           "\n"
           "A row whose test could not test anything with these inputs (one draw per row: no pairs;\n"
           "no tied logits; no row cut by the rule; a tail where no deficit or excess can show) is\n"
           "reported \"untested\" (JSON verdict \"untested\"): never a pass, never a failure.\n"
           "\n"
           "exit status: 0 every tested row passed (rows not tested are listed, not counted as passes),\n"
           "             1 a tested row failed or the audit could not run, 2 usage error,\n"
           "             3 nothing was tested (every row untested): not a success\n",
           cli_rule_help);
}

int cli_audit_verdict(const fls_audit_row *rows, size_t n, double seconds, int digits)
{
    fls_audit_tally t;
    fls_audit_tally_rows(rows, n, &t);
    char line[160];
    fls_audit_tally_format(&t, line, sizeof line);
    const fls_audit_verdict v = fls_audit_tally_verdict(&t);
    printf("%s, %.*f s: %s", line, digits, seconds,
           v == FLS_AUDIT_FAIL       ? "FAILED"
           : v == FLS_AUDIT_UNTESTED ? "NOTHING TESTED"
           : t.untested              ? "every tested row passed"
                                     : "all pass");
    if (v != FLS_AUDIT_UNTESTED && t.untested)
        printf(" (%zu not tested: not counted as passes)", t.untested);
    printf("\n");
    if (v == FLS_AUDIT_UNTESTED) {
        cli_error("nothing was tested: %s (exit status %d)",
                  n ? "no row could test anything with these inputs" : "the audit has no rows",
                  CLI_AUDIT_UNTESTED);
        return CLI_AUDIT_UNTESTED;
    }
    return v == FLS_AUDIT_PASS ? CLI_OK : CLI_FAIL;
}

void cli_audit_json_tally(FILE *fp, const fls_audit_row *rows, size_t n)
{
    fls_audit_tally t;
    fls_audit_tally_rows(rows, n, &t);
    fprintf(fp, "\"verdict\": \"%s\", \"passed\": %zu, \"failed\": %zu, \"untested\": %zu",
            fls_audit_verdict_name(fls_audit_tally_verdict(&t)), t.passed, t.failed, t.untested);
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
    cli_json_num(fp, seconds);
    fprintf(fp, ",\n  \"tests\": %zu,\n  \"all_pass\": %s,\n  ", n, all_pass ? "true" : "false");
    cli_audit_json_tally(fp, rows, n);
    fputs(",\n  \"rows\": [", fp);
    for (size_t i = 0; i < n; i++) {
        const fls_audit_row *r = &rows[i];
        fprintf(fp, "%s\n    {\"test\": ", i ? "," : "");
        cli_json_str(fp, r->test, sizeof r->test);
        fputs(", \"engine\": ", fp);
        cli_json_str(fp, r->engine, sizeof r->engine);
        fprintf(fp, ", \"V\": %lld, \"draws\": %lld, \"chi2\": ", (long long)r->V, (long long)r->draws);
        cli_json_num(fp, r->chi2);
        fprintf(fp, ", \"dof\": %d, \"p\": ", r->dof);
        cli_json_num(fp, r->p);
        fputs(", \"alpha\": ", fp);
        cli_json_num(fp, r->alpha);
        fprintf(fp, ", \"pass\": %s, \"verdict\": \"%s\", \"note\": ", r->pass ? "true" : "false",
                fls_audit_verdict_name(fls_audit_row_verdict(r)));
        cli_json_str(fp, r->note, sizeof r->note);
        fputc('}', fp);
    }
    fprintf(fp, "%s]\n}\n", n ? "\n  " : "");
}

int cli_audit(int argc, char **argv)
{
    const char *json = NULL, *device = NULL, *seed = NULL, *threads = NULL, *simd_s = NULL;
    int quick = 0, full = 0, help;
    audit_ext_opts eo;
    memset(&eo, 0, sizeof eo);
    const cli_option opts[] = {{"--quick", NULL, &quick},
                               {"--full", NULL, &full},
                               {"--json", &json, NULL},
                               {"--device", &device, NULL},
                               {"--seed", &seed, NULL},
                               {"--threads", &threads, NULL},
                               {"--simd", &simd_s, NULL},
                               {"--logits", &eo.logits, NULL},
                               {"--tokens", &eo.tokens, NULL},
                               {"--temperature", &eo.temperature, NULL},
                               {"--temperature-per-row", &eo.temperature_rows, NULL},
                               {"--report", &eo.report, NULL},
                               {"--pairs-rows", NULL, &eo.pairs_rows},
                               CLI_RULE_OPTIONS(eo.rule),
                               {NULL, NULL, NULL}};
    if (cli_parse(argc, argv, opts, &help) != CLI_OK)
        return CLI_USAGE;
    if (help) {
        audit_help();
        return CLI_OK;
    }
    if (eo.logits || eo.tokens) {
        const char *own = quick     ? "--quick"
                          : full    ? "--full"
                          : device  ? "--device"
                          : threads ? "--threads"
                          : simd_s  ? "--simd"
                                    : NULL;
        if (own) {
            cli_error(
                "%s applies to the audit of our own engines, not to external tokens (--logits/--tokens)",
                own);
            return CLI_USAGE;
        }
        eo.json = json;
        eo.seed = seed;
        return cli_audit_external(&eo);
    }
    {
        const char *ext = eo.temperature        ? "--temperature"
                          : eo.temperature_rows ? "--temperature-per-row"
                          : eo.report           ? "--report"
                          : eo.pairs_rows       ? "--pairs-rows"
                                                : cli_rule_first_flag(&eo.rule);
        if (ext) {
            cli_error(
                "%s applies to the audit of external tokens: give --logits L.npy and --tokens tokens.npy",
                ext);
            return CLI_USAGE;
        }
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
    if (cli_parse_only)
        return CLI_OK;
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

    printf("%-28s %-6s %10s %12s %12s %6s %11s %11s  %s\n", "test", "engine", "V", "draws", "chi2", "dof",
           "p", "alpha", "result");
    for (size_t i = 0; i < n; i++) {
        const fls_audit_row *r = &rows[i];
        const fls_audit_verdict v = fls_audit_row_verdict(r);
        printf("%-28.64s %-6.8s %10lld %12lld %12.3f %6d %11.3e %11.3e  %s", r->test, r->engine,
               (long long)r->V, (long long)r->draws, r->chi2, r->dof, r->p, r->alpha,
               v == FLS_AUDIT_PASS       ? "pass"
               : v == FLS_AUDIT_UNTESTED ? "untested"
                                         : "FAIL");
        if (v == FLS_AUDIT_UNTESTED)
            printf("  (not tested: %s)", r->note);
        printf("\n");
    }
    int rc = cli_audit_verdict(rows, n, seconds, 1);
    int all_pass = rc == CLI_OK;
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
