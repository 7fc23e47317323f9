/*
 * gallery.h — the scenarios of the defect gallery (logits that expose each
 * defect) and the power of the token audit against a defect whose exact
 * distribution is known. Shared by test_defects.c (CI) and defect_table.c
 * (the detection table of docs/AUDIT.md). Header-only (static functions).
 */
#ifndef FLS_GALLERY_H
#define FLS_GALLERY_H

#include <gsl/gsl_cdf.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/stats/defects.h"
#include "stats/fls_stats.h"
#include "stats/fls_tokens.h"

/* A deterministic uniform from an integer (no RNG state: the logits are fixed). */
static double gal_u(uint64_t i, uint64_t salt)
{
    uint64_t z = i * 0x9E3779B97F4A7C15ull + salt;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

typedef enum gal_scenario {
    GAL_DEEP =
        0, /* B = 2 identical rows, V = 4096: head, 12% at 10.5-14.5 nats, the rest 17-19 (75%) and 19-30 */
    GAL_FP16 = 1,  /* B = 4 rows, V = 256: 24 tokens at logits ~40 (fp16 spacing 1/32), the rest 6-16 below */
    GAL_TEMP = 2,  /* B = 4 rows, V = 1024: N(0, 2) logits at T = 0.7 */
    GAL_PAIRS = 3, /* B = 8 identical rows, V = 64: N(0, 1) logits at T = 1 */
    GAL_TIES = 4,  /* B = 2 rows, V = 64: 4 classes of 16 tokens with bit-identical logits near 40 */
    GAL_N_SCENARIOS
} gal_scenario;

static const char *const gal_scenario_name[GAL_N_SCENARIOS] = {"deep", "fp16", "temp", "pairs", "ties"};

typedef struct gal_data {
    float *logits, *temps;
    gallery_input in;
} gal_data;

static void gal_make(gal_scenario s, gal_data *d)
{
    int64_t B = 0, V = 0;
    switch (s) {
    case GAL_DEEP:
        B = 2, V = 4096;
        break;
    case GAL_FP16:
        B = 4, V = 64;
        break;
    case GAL_TEMP:
        B = 4, V = 1024;
        break;
    case GAL_PAIRS:
        B = 8, V = 64;
        break;
    case GAL_TIES:
        B = 2, V = 64;
        break;
    default:
        break;
    }
    d->logits = malloc((size_t)(B * V) * sizeof(float));
    d->temps = malloc((size_t)B * sizeof(float));
    for (int64_t b = 0; b < B; b++) {
        float *l = d->logits + b * V;
        d->temps[b] = s == GAL_TEMP ? 0.7f : 1.0f;
        for (int64_t v = 0; v < V; v++) {
            const uint64_t rowkey = s == GAL_DEEP || s == GAL_PAIRS ? 0 : (uint64_t)b; /* identical rows */
            double u = gal_u((uint64_t)v, 1000 * (uint64_t)s + rowkey),
                   w = gal_u((uint64_t)v, 77777 + rowkey);
            switch (s) {
            case GAL_DEEP:
                l[v] = (float)-(w < 0.12                 ? 10.5 + 4.0 * u
                                : w < 0.12 + 0.88 * 0.75 ? 17.0 + 2.0 * u
                                                         : 19.0 + 11.0 * u);
                break;
            case GAL_FP16:
                l[v] = (float)(v < 24 ? 40.0 + 3.0 * (u - 0.5) : 34.0 - 10.0 * u);
                break;
            case GAL_TEMP:
            case GAL_PAIRS: {
                /* Box-Muller from two hashes */
                double z = sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * w);
                l[v] = (float)(s == GAL_TEMP ? 2.0 * z : z);
                break;
            }
            case GAL_TIES:
                l[v] = (float)(40.0 - 0.5 * (double)(v % 4) + 0.3 * gal_u((uint64_t)(v % 4), 99 + rowkey));
                break;
            default:
                break;
            }
        }
        if (s == GAL_DEEP)
            l[V / 5] = 0.0f;
    }
    d->in.logits = d->logits;
    d->in.B = B;
    d->in.V = V;
    d->in.temps = d->temps;
}

static void gal_free(gal_data *d)
{
    free(d->logits);
    free(d->temps);
}

/* Audit options per scenario: the pairs scenario says its rows are independent. */
static void gal_options(gal_scenario s, double alpha, fls_tokens_options *o)
{
    fls_tokens_options_default(o);
    o->alpha = alpha;
    o->pairs_rows = s == GAL_PAIRS;
    o->name = gal_scenario_name[s];
}

/* ---- power of the audit against a known defective distribution ----
 * (the global test's cells and power, the audit's cell counts and the
 * smallest-N search are fls_stats_gof_cells, fls_stats_cells_power,
 * fls_stats_equal_cells_for, fls_stats_pair_side and fls_stats_smallest_n) */

/* The stated N's search starts here (fls_stats_smallest_n's lo): below 16 draws
 * per row the noncentral chi-square model of a few pairs or cells is not
 * trusted, so no stated N is smaller. */
#define GAL_MIN_N 16

static double gal_overlap(double a0, double a1, double b0, double b1)
{
    double lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0.0;
}

/* Cells of a pairs test (K x K) when both members of a pair are always the same
 * token (reused noise; rows with one seed and identical logits). */
static void gal_pair_cells_same(const double *p, int64_t V, int K, double *Q)
{
    double *start = malloc((size_t)V * sizeof(double));
    (void)fls_stats_cdf_start(p, V, start);
    memset(Q, 0, (size_t)(K * K) * sizeof(double));
    for (int64_t v = 0; v < V; v++) {
        if (!(p[v] > 0.0))
            continue;
        for (int x = 0; x < K; x++) {
            double ox = gal_overlap(start[v], start[v] + p[v], (double)x / K, (double)(x + 1) / K);
            if (ox <= 0.0)
                continue;
            for (int y = 0; y < K; y++)
                Q[x * K + y] +=
                    ox * gal_overlap(start[v], start[v] + p[v], (double)y / K, (double)(y + 1) / K) / p[v];
        }
    }
    free(start);
}

/* The power models of the stated N (fls_stats_smallest_n): a tail test's exact
 * binomial (fls_stats_cell_alt_power: mass m, the defect keeping a fraction
 * 1 - r of it), the global test against known wrong probabilities q, and a
 * pairs test whose pairs are always one token. */
static inline fls_stats_cell_alt gal_tail_alt(double m, double r, double alpha, int64_t B)
{
    fls_stats_cell_alt a = {m, m * (1.0 - r), alpha, B};
    return a;
}

typedef struct gal_cells_ctx {
    const double *p, *q;
    int64_t B, V;
    double alpha;
} gal_cells_ctx;

static double gal_cells_power(const void *c, int64_t N)
{
    const gal_cells_ctx *x = c;
    const int K = fls_stats_equal_cells_for(x->B * N);
    double Q[FLS_STATS_MAX_BINS];
    (void)fls_stats_gof_cells(x->p, x->q, x->B, x->V, K, Q);
    return fls_stats_cells_power(Q, K, x->B * N, x->alpha);
}

typedef struct gal_same_ctx {
    const double *p;
    int64_t V, pairs_per_n;
    double alpha;
} gal_same_ctx;

static double gal_same_power(const void *c, int64_t N)
{
    const gal_same_ctx *x = c;
    const int64_t pairs = x->pairs_per_n * N;
    const int K = fls_stats_pair_side(pairs);
    double Q[64];
    gal_pair_cells_same(x->p, x->V, K, Q);
    return fls_stats_cells_power(Q, K * K, pairs, x->alpha);
}

#endif
