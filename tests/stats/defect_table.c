/*
 * defect_table.c — measures the detection table of docs/AUDIT.md: for every
 * defect of the gallery, the draws the token audit needs to flag it with
 * probability 0.999 (computed from the defect's distribution where it is
 * known, searched on a grid where it is not) and the rate at which it is
 * flagged in R independent replicates at that N and at N / 4; for the exact
 * samplers, how often any test of the audit fails at the level used.
 *
 *   build-S/tests/stats/defect_table [--reps R] [--alpha A]
 *
 * The level is that of one audit run of its own (alpha = 1e-4 / 7, the
 * default of fls_audit_tokens) unless --alpha is given. Seeds are fixed and
 * printed. Not a test (minutes); docs/AUDIT.md records its output.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/stats/defects.h"
#include "stats/fls_stats.h"
#include "stats/fls_tokens.h"
#include "tests/stats/gallery.h"

static double g_alpha;
static int g_reps = 200;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double *probs_of(const gal_data *d, fls_status (*f)(const float *, int64_t, double, double *))
{
    double *p = malloc((size_t)(d->in.B * d->in.V) * sizeof(double));
    for (int64_t b = 0; b < d->in.B; b++)
        f(d->logits + b * d->in.V, d->in.V, (double)d->temps[b], p + b * d->in.V);
    return p;
}

static fls_status exact(const float *l, int64_t V, double T, double *q)
{
    return fls_stats_probs_temperature_f32(l, V, T, q);
}

static fls_status twice(const float *l, int64_t V, double T, double *q)
{
    return fls_stats_probs_temperature_f32(l, V, T * T, q);
}

/* Replicates of sampler f on scenario s at N: how often the named test fails
 * (named NULL: any test). */
static double rate(gal_scenario s, gallery_sampler f, int64_t N, const char *test, int reps, uint64_t seed0)
{
    gal_data d;
    gal_make(s, &d);
    fls_tokens_options o;
    gal_options(s, g_alpha, &o);
    int64_t *tok = malloc((size_t)(d.in.B * N) * sizeof(int64_t));
    fls_audit_row rows[16];
    int hits = 0;
    for (int r = 0; r < reps; r++) {
        if (f(&d.in, N, seed0 + (uint64_t)r, tok) != FLS_OK) {
            fprintf(stderr, "sampler failed\n");
            exit(1);
        }
        size_t n = 0;
        if (fls_audit_tokens(d.in.logits, d.in.B, d.in.V, d.in.V, d.in.temps, 1.0f, tok, N, &o, rows, &n) !=
            FLS_OK) {
            fprintf(stderr, "audit failed\n");
            exit(1);
        }
        hits += fls_audit_rows_flagged(rows, n, test);
    }
    free(tok);
    gal_free(&d);
    return (double)hits / reps;
}

/* ---- the table (N for power 0.999: the power models of gallery.h) ---- */

static void row(const char *defect, const char *scen, const char *test, const char *n_how, int64_t N,
                double r1, double r4, const char *invisible)
{
    printf("| %s | %s | %s | %lld (%s) | %.3f | %.3f | %s |\n", defect, scen, test, (long long)N, n_how, r1,
           r4, invisible);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    g_alpha = 0.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            g_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--alpha") && i + 1 < argc)
            g_alpha = atof(argv[++i]);
    }
    fls_tokens_options od;
    fls_tokens_options_default(&od);
    if (!(g_alpha > 0.0))
        g_alpha = FLS_STATS_BUDGET / fls_tokens_test_count(&od);
    const double t0 = now_s();
    printf(
        "detection table: alpha %.4g per test (one audit run: budget 1e-4 over %d tests), %d replicates per "
        "entry, power target %.3f\n\n",
        g_alpha, fls_tokens_test_count(&od), g_reps, FLS_STATS_POWER);

    /* the deep scenario: tail masses, the 24-bit sampler's deficit */
    gal_data d;
    gal_make(GAL_DEEP, &d);
    double *p = probs_of(&d, exact);
    const double m15 = fls_stats_tail_mass(p, d.in.V, 15.0);
    const double m18 = fls_stats_tail_mass(p, d.in.V, 18.0);
    int64_t *tok = malloc((size_t)(d.in.B * 20000000) * sizeof(int64_t));
    const int64_t big = 20000000;
    sampler_gumbel24(&d.in, big, 99, tok);
    int64_t k24 = 0;
    uint8_t *in = malloc((size_t)d.in.V);
    fls_stats_tail_set(p, d.in.V, 15.0, in);
    for (int64_t i = 0; i < d.in.B * big; i++)
        k24 += in[tok[i]];
    const double r24 = 1.0 - (double)k24 / (m15 * (double)(d.in.B * big));
    const double r24_se = sqrt((double)k24) / (m15 * (double)(d.in.B * big));
    printf("deep scenario: mass beyond 15 nats %.4g, beyond 18 nats %.4g; 24-bit Gumbel sampler: %lld of "
           "%lld draws beyond 15 nats (expected %.0f): deficit %.3f +- %.3f (seed 99)\n",
           m15, m18, (long long)k24, (long long)(d.in.B * big), m15 * (double)(d.in.B * big), r24, r24_se);
    /* the thinning of the 24-bit simulation checked against the literal loop where
     * both are cheap: V = 16, a head and 15 tokens 8.5-12.5 nats below it (all of
     * them past SHALLOW, so every one goes through the thinning) */
    {
        float l16[16], t16[1] = {1.0f};
        for (int v = 0; v < 16; v++)
            l16[v] = v == 3 ? 0.0f : (float)-(8.5 + 4.0 * gal_u((uint64_t)v, 4242));
        gallery_input g16 = {l16, 1, 16, t16};
        double p16[16];
        fls_stats_probs_temperature_f32(l16, 16, 1.0, p16);
        uint8_t in16[16];
        const double m10 = fls_stats_tail_set(p16, 16, 10.0, in16);
        const int64_t n = 10000000;
        int64_t *t2 = malloc((size_t)n * sizeof(int64_t)), kl = 0, ks = 0;
        sampler_gumbel24_literal(&g16, n, 5, t2);
        for (int64_t i = 0; i < n; i++)
            kl += in16[t2[i]];
        sampler_gumbel24(&g16, n, 6, t2);
        for (int64_t i = 0; i < n; i++)
            ks += in16[t2[i]];
        printf(
            "24-bit sampler, literal loop vs skip simulation (V 16, 15 tokens 8.5-12.5 nats below the head, "
            "%lld draws each): beyond 10 nats literal %lld, skip %lld (exact mass %.4g: expected %.0f); "
            "literal = skip: p %.3g (exact binomial, conditional on the total)\n",
            (long long)n, (long long)kl, (long long)ks, m10, m10 * (double)n,
            fls_stats_binom_test(kl, kl + ks, 0.5));
        free(t2);
    }
    free(in);
    free(tok);

    printf("\n| defect | scenario | test that sees it | N per row for power 0.999 | flagged at N | flagged "
           "at N/4 "
           "| what stays invisible |\n|---|---|---|---|---|---|---|\n");
    const int reps = g_reps;
    {
        fls_stats_cell_alt t = gal_tail_alt(m15, r24 - 2.0 * r24_se, g_alpha, d.in.B);
        int64_t N = fls_stats_smallest_n(fls_stats_cell_alt_power, &t, FLS_STATS_POWER, GAL_MIN_N);
        row("Gumbel noise from 24-bit uniforms (G <= 16.64)", "deep", "tail15",
            "exact binomial, measured deficit", N, rate(GAL_DEEP, sampler_gumbel24, N, "tail15", reps, 1000),
            rate(GAL_DEEP, sampler_gumbel24, N / 4, "tail15", reps, 2000),
            "rows with no mass beyond ~16 nats (24-bit uniforms lose < 2% at 15 nats, 10% at 16)");
        fls_stats_cell_alt c15 = gal_tail_alt(m15, 1.0, g_alpha, d.in.B);
        N = fls_stats_smallest_n(fls_stats_cell_alt_power, &c15, FLS_STATS_POWER, GAL_MIN_N);
        row("tokens > 15 nats below the head dropped", "deep", "tail15", "exact binomial", N,
            rate(GAL_DEEP, sampler_cut15, N, "tail15", reps, 3000),
            rate(GAL_DEEP, sampler_cut15, N / 4, "tail15", reps, 4000),
            "a cut below a row's deepest tokens removes nothing");
        fls_stats_cell_alt c17 = gal_tail_alt(m15, m18 / m15, g_alpha, d.in.B);
        N = fls_stats_smallest_n(fls_stats_cell_alt_power, &c17, FLS_STATS_POWER, GAL_MIN_N);
        row("tokens > 18 nats below the head dropped", "deep", "tail15", "exact binomial", N,
            rate(GAL_DEEP, sampler_cut18, N, "tail15", reps, 5000),
            rate(GAL_DEEP, sampler_cut18, N / 4, "tail15", reps, 6000),
            "cuts at 20+ nats (mass ~1e-7 here: ~1e7 draws per tail sample)");
    }
    free(p);
    gal_free(&d);

    const struct {
        gal_scenario s;
        const char *name;
        gallery_sampler f;
        fls_status (*q)(const float *, int64_t, double, double *);
        const char *invisible;
    } cells[3] = {
        {GAL_FP16, "fp16 logits before the softmax", sampler_fp16_logits, defect_probs_fp16,
         "rounding errors inside a bin (tokens < 1/32 of the mass) average out"},
        {GAL_TEMP, "softmax(l * T) for softmax(l / T), T = 0.7", sampler_temp_times, defect_probs_temp_times,
         "nothing at T far from 1; at T = 1 the defect does not exist"},
        {GAL_TEMP, "softmax(l / T^2), T = 0.7", sampler_temp_twice, twice, "as above"},
    };
    for (int i = 0; i < 3; i++) {
        gal_make(cells[i].s, &d);
        double *pp = probs_of(&d, exact), *q = probs_of(&d, cells[i].q);
        gal_cells_ctx c = {pp, q, d.in.B, d.in.V, g_alpha};
        int64_t N = fls_stats_smallest_n(gal_cells_power, &c, FLS_STATS_POWER, GAL_MIN_N);
        char how[96];
        double tv = 0.0;
        for (int64_t b = 0; b < d.in.B; b++)
            tv += fls_stats_tv(pp + b * d.in.V, q + b * d.in.V, d.in.V) / (double)d.in.B;
        snprintf(how, sizeof how, "noncentral chi-square, TV %.2g", tv);
        row(cells[i].name, gal_scenario_name[cells[i].s], "gof", how, N,
            rate(cells[i].s, cells[i].f, N, "gof", reps, 7000 + 100 * (uint64_t)i),
            rate(cells[i].s, cells[i].f, N / 4 > 0 ? N / 4 : 1, "gof", reps, 8000 + 100 * (uint64_t)i),
            cells[i].invisible);
        free(pp);
        free(q);
        gal_free(&d);
    }
    {
        gal_make(GAL_PAIRS, &d);
        double *pp = probs_of(&d, exact);
        gal_same_ctx c = {pp, d.in.V, d.in.B, g_alpha};
        int64_t N = 2 * fls_stats_smallest_n(gal_same_power, &c, FLS_STATS_POWER, GAL_MIN_N);
        row("noise reused across draws (every draw the same token)", "pairs", "pairs-draws",
            "noncentral chi-square", N, rate(GAL_PAIRS, sampler_reuse_noise, N, "pairs-draws", reps, 9000),
            rate(GAL_PAIRS, sampler_reuse_noise, N / 4 > 2 ? N / 4 : 2, "pairs-draws", reps, 9100),
            "reuse between draws the test does not pair (e.g. draw 0 and 2)");
        gal_same_ctx c2 = {pp, d.in.V, d.in.B / 2, g_alpha};
        N = fls_stats_smallest_n(gal_same_power, &c2, FLS_STATS_POWER, GAL_MIN_N);
        row("one seed for every row (identical rows)", "pairs", "pairs-rows", "noncentral chi-square", N,
            rate(GAL_PAIRS, sampler_seed_ignores_row, N, "pairs-rows", reps, 9200),
            rate(GAL_PAIRS, sampler_seed_ignores_row, N / 4 > 1 ? N / 4 : 1, "pairs-rows", reps, 9300),
            "every marginal is exact: only a caller who says which rows are independent can see it");
        free(pp);
        gal_free(&d);
    }
    {
        /* no closed form: the smallest N of a grid flagged in every replicate */
        const int64_t grid[8] = {250, 500, 1000, 2000, 4000, 8000, 16000, 32000};
        int64_t N = grid[7];
        double r1 = 0.0;
        for (int i = 0; i < 8; i++) {
            double r = rate(GAL_TIES, sampler_bf16_keys, grid[i], "ties", reps, 9400 + 10 * (uint64_t)i);
            if (r >= 1.0) {
                N = grid[i];
                r1 = r;
                break;
            }
        }
        row("Gumbel keys rounded to bf16 (ties to the lowest index)", "ties", "ties",
            "grid, first N flagged in every replicate", N, r1,
            rate(GAL_TIES, sampler_bf16_keys, N / 4, "ties", reps, 9500), "ties between unequal logits");
    }
    printf("\nexact samplers, any test of the audit failing (false failures; expected <= 7 alpha = %.2g per "
           "audit):\n\n"
           "| sampler | scenario | N per row | audits failed |\n|---|---|---|---|\n",
           7 * g_alpha);
    const int64_t n_exact[GAL_N_SCENARIOS] = {200000, 1000000, 20000, 20000, 20000};
    for (int s = 0; s < GAL_N_SCENARIOS; s++) {
        int r_ours = s == GAL_DEEP || s == GAL_FP16 ? reps / 10 : reps;
        double a = rate((gal_scenario)s, sampler_alias, n_exact[s], NULL, reps, 11000 + 100 * (uint64_t)s);
        double o = rate((gal_scenario)s, sampler_ours, n_exact[s], NULL, r_ours, 12000 + 100 * (uint64_t)s);
        printf("| alias (mt19937, 53-bit) | %s | %lld | %.0f of %d |\n", gal_scenario_name[s],
               (long long)n_exact[s], a * reps, reps);
        printf("| ours (fls_sample_logits) | %s | %lld | %.0f of %d |\n", gal_scenario_name[s],
               (long long)n_exact[s], o * r_ours, r_ours);
        fflush(stdout);
    }
    printf("\n%.0f s\n", now_s() - t0);
    return 0;
}
