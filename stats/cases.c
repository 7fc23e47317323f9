/*
 * cases.c — how each goodness-of-fit case of the audit (the one list:
 * case_table.c) is sampled and tested; its inputs are case_inputs.c, its
 * calls to the engine case_io.c.
 *
 * Every case samples through the public API (fls_sample_logits or
 * fls_sample_fused), many draws per row in one pass (params.draws; draw
 * indices have independent noise), several rows with their own row seeds, and
 * splits long runs into calls at successive row offsets (offsets, like draws,
 * have independent noise) so progress can be shown. The samples of all rows of
 * a group are pooled and tested against the group's exact reference (double)
 * on equal-mass bins; groups (distinct temperatures or H rows) add their chi2
 * and dof. Sample sizes come from fls_stats_design_size at the run's alpha and
 * the dof of the bins the case really has at that size (not the largest dof it
 * could have), so a total-variation error of 0.01 in any one group is caught
 * with probability >= 0.999.
 *
 * Fused inputs: W (V, D) in the case's dtype with W[v][0] = target_v / 4 and
 * small N(0, 0.05) entries elsewhere; H (groups, D) f32 with H[g][0] = 4 and
 * N(0, 1) elsewhere. The reference logits are W h accumulated in double from the
 * exact input values; the engine's fp32 accumulation differs by ~1e-6 relative
 * (~1e-5 nats), which moves probabilities by ~1e-5 relative: 3 orders below the
 * 0.01 TV the tests resolve.
 *
 * Inputs come from gsl_rng_mt19937 seeded with a hash of the case name (the
 * same inputs in every run); sampling seeds come from the options' base seed
 * and the case name, and are logged.
 */
#include "stats/case_internal.h"
#include "stats/fls_cases.h"
#include "stats/fls_stats.h"
#include "stats/fls_tokens.h"

#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Token-samples per API call: ~1 s on two cores, so progress stays live. */
#define CALL_BUDGET 300000000.0

/* (Row, draw) pairs per call for the cases with a rule, without replacement or
 * streaming: their state per (row, draw) is larger than a candidate, and
 * touching it all at once costs more in page faults than it saves in calls. */
#define MAX_CALL_DRAWS 16384

/* The threshold at which a case's tail deficit is designed (nats below the head). */
#define TAIL_DESIGN_T 15.0

/* ---- running a case ---- */

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

typedef struct case_run {
    const fls_audit_case *c;
    size_t index; /* its index in the full list */
    const fls_audit_options *o;
    double alpha; /* the run's per-test level */
    uint64_t input_seed, case_seed;
    double t0;
    fls_audit_row *rows; /* fls_audit_case_tests rows */
    char err[112];       /* what failed, for the error rows */
} case_run;

static void fail(case_run *cr, const char *fmt, fls_status st, long long at)
{
    snprintf(cr->err, sizeof cr->err, fmt, fls_status_string(st), at);
}

/* K_b of group g without replacement (0: off). */
static int64_t group_k(const fls_audit_case *c, int64_t g)
{
    const fls_case_ext *x = c->ext;
    if (!x || x->wr_k < 1)
        return 0;
    return x->wr_rows[g] > 0 ? x->wr_rows[g] : x->wr_k;
}

/* The draws per group: the goodness-of-fit design (TV 0.01, power 0.999) on
 * the case's cells (tokens, or ordered tuples), the tail design at
 * TAIL_DESIGN_T for a case with a tail deficit, and without replacement over
 * tokens the conditional test's (32 equal cells of n_cond pooled transforms,
 * cond_per_draw of them per draw summed over groups). */
static fls_status design_case(case_run *cr, const double *gref, int64_t cells, const double *ref,
                              int64_t cond_per_draw, fls_gof_design *d, int64_t *N)
{
    const fls_audit_case *c = cr->c;
    fls_status st = fls_stats_design(gref, c->groups, cells, cr->alpha, d);
    if (st != FLS_OK)
        return st;
    *N = d->N;
    if (c->tail_deficit > 0.0) {
        /* one group (the deep cases): the exact binomial design */
        double m = fls_stats_tail_mass(ref, c->V, TAIL_DESIGN_T);
        int64_t n = fls_stats_tail_sample_size(m, c->tail_deficit, cr->alpha, FLS_STATS_POWER);
        if (n > *N)
            *N = n;
    }
    if (cond_per_draw > 0) {
        int64_t n = fls_stats_sample_size(FLS_STATS_MAX_BINS - 1, cr->alpha / FLS_STATS_CHI2_KAPPA,
                                          FLS_STATS_TV, FLS_STATS_POWER);
        const int64_t floor_n = (int64_t)(FLS_STATS_MIN_EXPECTED * FLS_STATS_MAX_BINS);
        n = n > floor_n ? n : floor_n;
        n = ceil_div(n, cond_per_draw);
        if (n > *N)
            *N = n;
    }
    return FLS_OK;
}

/* A hash uniform in [0, 1) for the conditional transforms (seed, row, draw, position). */
static double cond_uniform(uint64_t seed, int64_t b, int64_t n, int j)
{
    uint64_t h = case_splitmix64(seed ^ case_splitmix64((uint64_t)b * 0x9E3779B97F4A7C15ull + (uint64_t)j) ^
                                 ((uint64_t)n * 0xD1B54A32D192ED03ull));
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

/* The smallest margin (fls_stats_support.margin, relative) of a rule's
 * decisions a case accepts, after fls_stats_rule_center has moved min-p,
 * top-p and top-n-sigma to the middle of their gaps. The engines decide on
 * float tempered logits, the reference on double ones: from logits at T = 1
 * the floats are the same (only sums differ in order: 1e-11), at other T
 * fl(l / T) is within 2^-24 relative (2e-6); on the fused path the fp32 dot
 * products of these inputs are within ~1e-6 of the double ones (1e-5). */
#define FUSED_MARGIN 1e-5

/* One goodness-of-fit case in the making: its sizes, inputs, references,
 * plan and counts. */
typedef struct gof_run {
    case_run *cr;
    case_io *io;
    const fls_audit_case *c;
    const fls_case_ext *x;
    int64_t V, G, R, B;
    int K, tuples, cond, rule;
    int64_t KW, stride, cells;
    int state; /* a rule, without replacement, the grouped method or streaming: per-(row, draw) state */
    gsl_rng *rng;
    float *target, *L, *Hg, *H, *temps;
    void *W;
    double *ref, *lg, *tref, *start;
    const double *gref; /* the goodness of fit's reference: tref (tuples) or ref */
    uint64_t *seeds, *offsets;
    int64_t *counts, *oor, *ng, *tokens;
    /* the per-row rule values handed to the library */
    int64_t *rk, *rwr;
    float *rmin, *rtop;
    double *rfv;
    int64_t ccount[FLS_STATS_MAX_BINS], cimp, ncond;
    int64_t support[8];
    fls_stats_rule grule[8]; /* the groups' rules, centered (fls_stats_rule_center) */
    double worst_margin;
    int64_t cond_per_draw;
    case_mods mods; /* masks, bias and penalties (all NULL without) */
    /* the plan */
    fls_gof_design design;
    int64_t calls, dpc, per_group;
} gof_run;

static fls_status gof_alloc(gof_run *g)
{
    const int64_t V = g->V, G = g->G, B = g->B, cells = g->cells;
    g->rng = gsl_rng_alloc(gsl_rng_mt19937);
    g->target = malloc((size_t)V * sizeof(float));
    g->temps = malloc((size_t)B * sizeof(float));
    g->ref = malloc((size_t)(G * V) * sizeof(double));
    g->lg = malloc((size_t)V * sizeof(double));
    g->tref = g->tuples ? malloc((size_t)(G * cells) * sizeof(double)) : NULL;
    g->start = g->cond ? malloc((size_t)(G * V) * sizeof(double)) : NULL;
    g->seeds = malloc((size_t)B * sizeof(uint64_t));
    g->offsets = malloc((size_t)B * sizeof(uint64_t));
    g->counts = calloc((size_t)(G * cells), sizeof(int64_t));
    g->oor = calloc((size_t)G, sizeof(int64_t));
    g->ng = calloc((size_t)G, sizeof(int64_t));
    if (g->x) {
        g->rk = malloc((size_t)B * sizeof(int64_t));
        g->rwr = malloc((size_t)B * sizeof(int64_t));
        g->rmin = malloc((size_t)B * sizeof(float));
        g->rtop = malloc((size_t)B * sizeof(float));
        g->rfv = malloc((size_t)B * sizeof(double));
    }
    if (!g->rng || !g->target || !g->temps || !g->ref || !g->lg || !g->seeds || !g->offsets || !g->counts ||
        !g->oor || !g->ng || (g->tuples && !g->tref) || (g->cond && !g->start) ||
        (g->x && (!g->rk || !g->rwr || !g->rmin || !g->rtop || !g->rfv)))
        return FLS_ERR_OUT_OF_MEMORY;
    return FLS_OK;
}

static void gof_free(gof_run *g)
{
    gsl_rng_free(g->rng);
    free(g->target);
    free(g->L);
    free(g->W);
    free(g->Hg);
    free(g->H);
    free(g->temps);
    free(g->ref);
    free(g->tref);
    free(g->start);
    free(g->lg);
    free(g->seeds);
    free(g->offsets);
    free(g->counts);
    free(g->oor);
    free(g->ng);
    free(g->tokens);
    free(g->rk);
    free(g->rwr);
    free(g->rmin);
    free(g->rtop);
    free(g->rfv);
    case_mods_free(&g->mods);
}

/* Group k's rule centered and its exact pmf from the raw logits in g->lg
 * (changed here by the group's masks, bias and penalties first); the
 * margins of its decisions against need (relative). */
static fls_status gof_group_ref(gof_run *g, int64_t k, double need)
{
    const fls_audit_case *c = g->c;
    fls_stats_mods m;
    case_mods_row(&g->mods, k, g->cr->o->omit_mods, &m); /* row k is of group k */
    fls_stats_mods_apply(&m, g->lg, g->V);
    fls_stats_rule r0 = fls_audit_case_rule(c, (int)k);
    fls_stats_support sup;
    fls_status st;
    if ((st = fls_stats_rule_center(g->lg, g->V, c->temps[k], &r0, &g->grule[k])) != FLS_OK ||
        (st = fls_stats_probs_rule(g->lg, g->V, c->temps[k], &g->grule[k], g->ref + k * g->V, &sup)) !=
            FLS_OK)
        return st;
    g->support[k] = c->temps[k] > 0.0f ? sup.size : 1;
    g->worst_margin = g->rule && sup.margin / need < g->worst_margin ? sup.margin / need : g->worst_margin;
    return FLS_OK;
}

/* The inputs of the case and the exact references: the rule's pmf per group
 * (softmax without a rule). */
static fls_status gof_references(gof_run *g)
{
    const fls_audit_case *c = g->c;
    const int64_t V = g->V, G = g->G, B = g->B;
    case_io *io = g->io;
    int64_t tie[3];
    int n_tie = 0;
    fls_status st;
    gsl_rng_set(g->rng, (unsigned long)g->cr->input_seed);
    case_gen_logits(c, g->rng, g->target, tie, &n_tie);
    g->worst_margin = INFINITY;
    snprintf(g->cr->err, sizeof g->cr->err, "the case's masks, bias or penalties");
    if ((st = case_mods_make(c, g->cr->input_seed, g->target, B, &g->mods)) != FLS_OK)
        return st;
    if (!c->fused) {
        if (!(g->L = malloc((size_t)(B * V) * sizeof(float))))
            return FLS_ERR_OUT_OF_MEMORY;
        for (int64_t b = 0; b < B; b++)
            memcpy(g->L + b * V, g->target, (size_t)V * sizeof(float));
        io->L = (fls_matrix){g->L, FLS_DTYPE_F32, B, V, V};
        for (int64_t k = 0; k < G; k++) {
            for (int64_t v = 0; v < V; v++)
                g->lg[v] = (double)g->target[v];
            if ((st = gof_group_ref(g, k, c->temps[k] == 1.0f ? 1e-11 : 2e-6)) != FLS_OK)
                return st;
        }
        return FLS_OK;
    }
    if ((st = case_gen_fused(c, g->rng, g->target, tie, n_tie, &g->W, &g->Hg)) != FLS_OK)
        return st;
    if (!(g->H = malloc((size_t)(B * c->D) * sizeof(float))))
        return FLS_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < B; b++)
        memcpy(g->H + b * c->D, g->Hg + (b % G) * c->D, (size_t)c->D * sizeof(float));
    io->W = (fls_matrix){g->W, c->w_dtype, V, c->D, c->D};
    io->H = (fls_matrix){g->H, FLS_DTYPE_F32, B, c->D, c->D};
    fls_matrix Hm = {g->Hg, FLS_DTYPE_F32, G, c->D, c->D};
    for (int64_t k = 0; k < G; k++)
        if ((st = fls_stats_logits_fused(&io->W, &Hm, k, g->lg)) != FLS_OK ||
            (st = gof_group_ref(g, k, FUSED_MARGIN)) != FLS_OK)
            return st;
    return FLS_OK;
}

/* Without replacement: the groups' tuple pmfs, their CDFs for the conditional
 * transforms, and the transforms an exact sampler gives per draw. */
static fls_status gof_tuple_refs(gof_run *g)
{
    fls_status st;
    g->cond_per_draw = 0;
    for (int64_t k = 0; k < g->G; k++) {
        const int64_t kb = group_k(g->c, k);
        if (g->tuples && (st = fls_stats_pl_tuples(g->ref + k * g->V, g->V, (int)g->KW, (int)kb,
                                                   g->tref + k * g->cells)) != FLS_OK)
            return st;
        if (g->cond) {
            if ((st = fls_stats_cdf_start(g->ref + k * g->V, g->V, g->start + k * g->V)) != FLS_OK)
                return st;
            const int64_t kk = kb < g->support[k] ? kb : g->support[k];
            g->cond_per_draw += g->R * (kk - 1);
        }
    }
    g->gref = g->tuples ? g->tref : g->ref;
    return FLS_OK;
}

/* Sample size for the bins the case really has at that size (any one group
 * may carry the whole error), and for its tail design; draws per call, calls;
 * the tokens' buffer. */
static fls_status gof_plan(gof_run *g)
{
    case_run *cr = g->cr;
    int64_t N = 0;
    fls_status st;
    snprintf(cr->err, sizeof cr->err, "the design failed");
    if ((st = design_case(cr, g->gref, g->cells, g->ref, g->cond_per_draw, &g->design, &N)) != FLS_OK)
        return st;
    const int64_t B = g->B, draws_row = ceil_div(N, g->R);
    int64_t dpc = (int64_t)(CALL_BUDGET / ((double)B * (double)g->V));
    if (g->state && dpc * B > MAX_CALL_DRAWS) /* the rule family's and the streams' per-draw state */
        dpc = MAX_CALL_DRAWS / B;
    dpc = dpc < 1 ? 1 : dpc > draws_row ? draws_row : dpc;
    g->calls = ceil_div(draws_row, dpc);
    g->dpc = ceil_div(draws_row, g->calls);
    g->per_group = g->R * g->calls * g->dpc;
    for (int r = 0; r < fls_audit_case_tests(cr->index); r++)
        cr->rows[r].draws = B * g->calls * g->dpc;
    snprintf(cr->err, sizeof cr->err, "out of memory for the tokens");
    if (!(g->tokens = malloc((size_t)(B * g->dpc * g->stride) * sizeof(int64_t))))
        return FLS_ERR_OUT_OF_MEMORY;
    return FLS_OK;
}

/* Row b's temperature, seed and rule values (its group's, centered). */
static void gof_rows(gof_run *g)
{
    for (int64_t b = 0; b < g->B; b++) {
        const int64_t k = b % g->G;
        g->temps[b] = g->c->temps[k];
        g->seeds[b] = fls_row_seed(g->cr->case_seed, (uint64_t)b);
        if (g->x) {
            const fls_stats_rule *r = &g->grule[k];
            g->rmin[b] = (float)r->value[FLS_FILTER_MIN_P];
            g->rk[b] = (int64_t)r->value[FLS_FILTER_TOP_K];
            g->rtop[b] = (float)r->value[FLS_FILTER_TOP_P];
            g->rwr[b] = group_k(g->c, k);
        }
    }
}

/* The groups' rules into the library's parameters, from the registry: the
 * three built-ins through their own fields, any other filter that is on in
 * some group through `filter` with filter_value (one group) or
 * row_filter_value (several groups: the per-row arrays). fls_params has one
 * `filter`: FLS_ERR_PARAM for a case with two filters beyond the built-ins. */
static fls_status gof_rule_params(gof_run *g, fls_params *p)
{
    int extra = -1;
    for (int id = 0; id < FLS_FILTER_COUNT; id++) {
        if (id == FLS_FILTER_MIN_P || id == FLS_FILTER_TOP_K || id == FLS_FILTER_TOP_P)
            continue; /* fields of their own */
        int on = 0;
        for (int64_t k = 0; k < g->G; k++)
            on |= g->grule[k].value[id] != fls_filters[id].off;
        if (!on)
            continue;
        if (extra >= 0) {
            snprintf(g->cr->err, sizeof g->cr->err, "two filters beyond the built-ins (%s, %s): one slot",
                     fls_filters[extra].name, fls_filters[id].name);
            return FLS_ERR_PARAM;
        }
        extra = id;
    }
    for (int64_t b = 0; b < g->B; b++)
        g->rfv[b] = extra >= 0 ? g->grule[b % g->G].value[extra] : 0.0;
    if (g->G > 1) { /* per-row parameters */
        p->row_min_p = g->rmin;
        p->row_top_k = g->rk;
        p->row_top_p = g->rtop;
        if (extra >= 0) {
            p->filter = fls_filters[extra].name;
            p->row_filter_value = g->rfv;
        }
    } else {
        p->min_p = g->rmin[0];
        p->top_k = g->rk[0];
        p->top_p = g->rtop[0];
        if (extra >= 0) {
            p->filter = fls_filters[extra].name;
            p->filter_value = g->rfv[0];
        }
    }
    return FLS_OK;
}

/* The call's parameters: method, draws, seeds, temperatures, the rule,
 * without replacement, the grouped method's g, the noise scheme. */
static fls_status gof_params(gof_run *g, fls_params *p)
{
    const fls_audit_case *c = g->c;
    fls_params_default(p);
    p->method = c->method;
    p->draws = g->dpc;
    p->row_seeds = g->seeds;
    p->row_offsets = g->offsets;
    if (g->G > 1)
        p->temperature = g->temps; /* per-row temperatures */
    else
        p->temperature_value = c->temps[0];
    if (!g->x)
        return FLS_OK;
    p->group_size = g->x->group_size;
    p->noise = g->x->noise;
    case_mods_params(&g->mods, p);
    fls_status st;
    if (g->rule && (st = gof_rule_params(g, p)) != FLS_OK)
        return st;
    if (g->KW > 0) {
        p->without_replacement_k = g->KW;
        int per_row = 0;
        for (int64_t k = 0; k < g->G; k++)
            per_row |= group_k(c, k) != g->KW;
        if (per_row)
            p->row_without_replacement_k = g->rwr;
    }
    return FLS_OK;
}

/* The case's plan, seeds, rules and references on stderr. */
static void gof_log(const gof_run *g)
{
    const fls_audit_case *c = g->c;
    const case_run *cr = g->cr;
    const case_io *io = g->io;
    const int64_t V = g->V, G = g->G, B = g->B;
    fprintf(
        stderr,
        "[audit] %s: %s%s%s%s, V %lld, %lld group(s) x %lld rows, N %lld per group (alpha %.3g; gof design "
        "N %lld on %lld %s: %d bins, dof %d + %d exact)"
        ", %lld call(s) x %lld draws/row, input seed 0x%016llx, case seed 0x%016llx"
        " (row b: seed fls_row_seed(case seed, b), offset = call index)\n",
        c->name, c->fused ? "fls_sample_fused" : "fls_sample_logits",
        c->method == FLS_METHOD_GROUPED ? " grouped" : "",
        g->x && g->x->noise == FLS_NOISE_MIN_FIRST ? " (min-first noise)" : "",
        io->mode == FLS_IO_STREAM   ? " through fls_stream (random chunks, random order)"
        : io->mode == FLS_IO_SHARDS ? " through fls_stream shards (bytes, merged in a random order)"
                                    : "",
        (long long)V, (long long)G, (long long)g->R, (long long)g->per_group, cr->alpha,
        (long long)g->design.N, (long long)g->cells, g->tuples ? "tuple cells" : "tokens", g->design.bins,
        g->design.dof, g->design.n_exact, (long long)g->calls, (long long)g->dpc,
        (unsigned long long)cr->input_seed, (unsigned long long)cr->case_seed);
    if (g->x && (g->rule || g->KW > 0 || g->x->group_size))
        for (int64_t k = 0; k < G; k++) {
            char desc[256];
            fls_stats_rule_describe(&g->grule[k], desc, sizeof desc);
            fprintf(
                stderr,
                "[audit]   group %lld rule: %s; without replacement K %lld, group size %lld: support %lld "
                "tokens (margins >= %.3g x safe)\n",
                (long long)k, desc, (long long)group_k(c, k), (long long)g->x->group_size,
                (long long)g->support[k], g->worst_margin);
        }
    if (g->mods.rep) {
        const case_mods *m = &g->mods;
        for (int64_t k = 0; k < G; k++) {
            fprintf(stderr, "[audit]   group %lld mods: mask %s", (long long)k,
                    !m->mask || (m->rows && !m->rows[k]) ? "off" : "on");
            if (m->mask)
                fprintf(stderr, " (bitmask_ld %lld)", (long long)m->ld_param);
            fprintf(stderr, "; bias");
            for (int64_t i = 0; i < m->K; i++)
                fprintf(stderr, " %lld:%+g", (long long)m->bias_ids[k * m->K + i],
                        (double)m->bias_values[k * m->K + i]);
            fprintf(stderr, "; seen");
            for (int64_t i = 0; i < m->S; i++)
                fprintf(stderr, " %lld:%d", (long long)m->seen_ids[k * m->S + i],
                        (int)m->seen_counts[k * m->S + i]);
            fprintf(stderr, "; r %g presence %g frequency %g%s%s\n", (double)m->rep[k], (double)m->pres[k],
                    (double)m->freq[k], m->row_pen ? " (row_ arrays)" : "",
                    cr->o->omit_mods ? " [the reference omits some: a mutation]" : "");
        }
    }
    if (io->mode != FLS_IO_CALL)
        fprintf(stderr, "[audit]   %d %s per call, cut and ordered by mt19937 seeded with case seed ^ call\n",
                io->pieces, io->mode == FLS_IO_STREAM ? "chunks" : "shards");
    if (B <= 16) {
        fprintf(stderr, "[audit]   row seeds:");
        for (int64_t b = 0; b < B; b++)
            fprintf(stderr, " 0x%016llx", (unsigned long long)g->seeds[b]);
        fprintf(stderr, "\n");
    }
    for (int64_t k = 0; k < G; k++) {
        const double *p = g->ref + k * V;
        double pmax = 0.0;
        int64_t masked = 0;
        for (int64_t v = 0; v < V; v++) {
            pmax = p[v] > pmax ? p[v] : pmax;
            masked += p[v] == 0.0;
        }
        fprintf(stderr, "[audit]   group %lld: T %g, max p %.4g, %lld zero-probability tokens; mass below",
                (long long)k, (double)c->temps[k], pmax, (long long)masked);
        for (int t = 0; t < FLS_STATS_N_TAILS; t++)
            fprintf(stderr, " %g nats %.3g%s", fls_stats_tail_t[t],
                    fls_stats_tail_mass(p, V, fls_stats_tail_t[t]), t + 1 < FLS_STATS_N_TAILS ? "," : "\n");
    }
}

/* The draws of call `call` into the counts (tokens or tuples) and, without
 * replacement over tokens, the conditional transforms' cells. */
static void gof_count(gof_run *g, int64_t call)
{
    const int64_t V = g->V, dpc = g->dpc, K = g->K;
    for (int64_t b = 0; b < g->B; b++) {
        const int64_t k = b % g->G;
        for (int64_t d = 0; d < dpc; d++) {
            const int64_t *tup = g->tokens + (b * dpc + d) * g->stride;
            if (g->tuples) {
                const int64_t cl = fls_stats_pl_cell(tup, V, (int)g->KW);
                if (cl < 0)
                    g->oor[k]++;
                else {
                    g->counts[k * g->cells + cl]++;
                    g->ng[k]++;
                }
                continue;
            }
            int64_t t = tup[0];
            if (t < 0 || t >= V)
                g->oor[k]++;
            else {
                g->counts[k * V + t]++;
                g->ng[k]++;
            }
            if (!g->cond)
                continue;
            double U[8], u[8];
            const int kk = (int)(g->KW < 8 ? g->KW : 8);
            for (int j = 0; j < kk; j++)
                U[j] = cond_uniform(g->cr->case_seed, b, call * dpc + d, j);
            int set = g->KW <= 8 ? fls_stats_pl_transform(g->ref + k * V, g->start + k * V, V, g->support[k],
                                                          tup, kk, (int)group_k(g->c, k), U, u)
                                 : -1;
            if (set < 0) {
                g->cimp++;
                continue;
            }
            for (int j = 1; j < kk; j++)
                if (u[j] >= 0.0) {
                    int cc = (int)(u[j] * K);
                    g->ccount[cc < K ? cc : K - 1]++;
                    g->ncond++;
                }
        }
    }
}

/* Every call of the case: row offsets = the call's index. */
static fls_status gof_sample(gof_run *g, const fls_params *p)
{
    case_run *cr = g->cr;
    double last = case_now();
    for (int64_t call = 0; call < g->calls; call++) {
        for (int64_t b = 0; b < g->B; b++)
            g->offsets[b] = (uint64_t)call;
        if (g->io->chunking)
            gsl_rng_set(g->io->chunking, (unsigned long)(cr->case_seed ^ (uint64_t)call));
        fls_status st = case_io_sample(g->io, p, g->B, g->tokens);
        if (st != FLS_OK) {
            fail(cr, "sampling failed (%s) at call %lld", st, (long long)call);
            if (cr->o->progress)
                fprintf(stderr, "[audit] %s: %s\n", g->c->name, cr->err);
            return st;
        }
        gof_count(g, call);
        if (cr->o->progress && case_now() - last > 10.0) {
            last = case_now();
            fprintf(stderr, "[audit] %s: call %lld/%lld, %.0f s\n", g->c->name, (long long)call + 1,
                    (long long)g->calls, last - cr->t0);
        }
    }
    return FLS_OK;
}

/* The goodness of fit (over tokens, or over ordered tuples): row 0. */
static fls_status gof_test(gof_run *g)
{
    case_run *cr = g->cr;
    fls_bins bins = {0};
    fls_gof gof;
    fls_status st;
    fls_gof_init(&gof);
    for (int64_t k = 0; k < g->G; k++) {
        if ((st = fls_bins_build(&bins, g->gref + k * g->cells, g->cells, g->per_group, g->K)) != FLS_OK)
            return st;
        st = fls_gof_add_counts(&gof, &bins, g->counts + k * g->cells, g->oor[k]);
        fls_bins_free(&bins);
        if (st != FLS_OK)
            return st;
    }
    fls_gof_design seen;
    if ((st = fls_stats_design_at(g->gref, g->G, g->cells, cr->alpha, g->per_group, &seen)) != FLS_OK)
        return st;
    fls_audit_row *row = &cr->rows[0];
    snprintf(row->kind, sizeof row->kind, "gof");
    row->chi2 = gof.impossible ? INFINITY : gof.chi2;
    row->dof = gof.dof + gof.n_exact;
    row->p = gof.p;
    row->pass = fls_gof_pass(&gof, cr->alpha);
    row->bins = gof.bins;
    row->min_mass = gof.min_mass;
    row->tv_caught = seen.tv;
    snprintf(row->note, sizeof row->note, "%s%s%s", g->tuples ? "ordered tuples: " : "",
             gof.dof ? "chi-square" : "",
             gof.n_exact ? (gof.dof ? " + exact binomial" : "exact binomial")
             : gof.dof   ? ""
                         : "impossible set only");
    if (cr->o->progress && gof.impossible)
        fprintf(stderr, "[audit] %s: %lld sample(s) on zero-probability or out-of-range %s\n", g->c->name,
                (long long)gof.impossible, g->tuples ? "tuples" : "tokens");
    return FLS_OK;
}

/* The tail tests: rows 1 .. FLS_STATS_N_TAILS. */
static fls_status gof_tails(gof_run *g)
{
    case_run *cr = g->cr;
    int64_t oor_all = 0;
    for (int64_t k = 0; k < g->G; k++)
        oor_all += g->oor[k];
    for (int t = 0; t < FLS_STATS_N_TAILS; t++) {
        fls_tail_result tr;
        fls_status st =
            fls_stats_tail_test(g->ref, g->counts, g->ng, g->G, g->V, fls_stats_tail_t[t], cr->alpha, &tr);
        if (st != FLS_OK)
            return st;
        fls_audit_row *row = &cr->rows[1 + t];
        snprintf(row->kind, sizeof row->kind, "tail");
        row->tail_t = tr.t;
        row->tail_mass = tr.mass;
        row->expected = tr.expected;
        row->observed = (double)tr.observed;
        row->deficit_caught = tr.deficit;
        row->excess_caught = tr.excess;
        double var = tr.expected * (1.0 - tr.mass);
        row->chi2 = var > 0.0 ? (tr.observed - tr.expected) * (tr.observed - tr.expected) / var : 0.0;
        row->dof = 1;
        row->p = oor_all ? 0.0 : tr.p;
        row->pass = !oor_all && tr.p >= cr->alpha;
        snprintf(row->note, sizeof row->note, "exact %s%s", g->G > 1 ? "sum of binomials" : "binomial",
                 tr.bonferroni ? " (Bonferroni over groups)" : "");
    }
    return FLS_OK;
}

/* Without replacement over tokens: positions 2..K given the ones before (the last row). */
static fls_status gof_cond_test(gof_run *g)
{
    case_run *cr = g->cr;
    fls_audit_row *row = &cr->rows[1 + (g->c->tail ? FLS_STATS_N_TAILS : 0)];
    snprintf(row->kind, sizeof row->kind, "pl");
    fls_status st = fls_audit_equal_cells(g->ccount, g->K, g->cimp, cr->alpha, row);
    if (st != FLS_OK)
        return st;
    snprintf(row->note, sizeof row->note, "%lld conditional transforms (positions 2..K); %lld impossible",
             (long long)g->ncond, (long long)g->cimp);
    return FLS_OK;
}

static fls_status gof_steps(gof_run *g)
{
    case_run *cr = g->cr;
    fls_status st;
    snprintf(cr->err, sizeof cr->err, "out of memory preparing the case");
    if ((st = gof_alloc(g)) != FLS_OK)
        return st;
    if (g->G > 8) {
        snprintf(cr->err, sizeof cr->err, "more than 8 groups");
        return FLS_ERR_PARAM;
    }
    if ((st = gof_references(g)) != FLS_OK)
        return st;
    if (g->worst_margin < 1.0) {
        snprintf(cr->err, sizeof cr->err,
                 "a decision of the rule is %.2g x the smallest safe margin from its threshold",
                 g->worst_margin);
        return FLS_ERR_INTERNAL;
    }
    if ((st = gof_tuple_refs(g)) != FLS_OK || (st = gof_plan(g)) != FLS_OK)
        return st;
    gof_rows(g);
    fls_params p;
    if ((st = gof_params(g, &p)) != FLS_OK)
        return st;
    if (cr->o->progress)
        gof_log(g);
    snprintf(cr->err, sizeof cr->err, "device memory");
    if ((st = case_io_prepare(g->io)) != FLS_OK)
        return st;
    if ((st = gof_sample(g, &p)) != FLS_OK)
        return st;
    snprintf(cr->err, sizeof cr->err, "the test failed to run");
    if ((st = gof_test(g)) != FLS_OK || (g->c->tail && (st = gof_tails(g)) != FLS_OK) ||
        (g->cond && (st = gof_cond_test(g)) != FLS_OK))
        return st;
    return FLS_OK;
}

static fls_status run_gof(case_run *cr, case_io *io)
{
    gof_run g;
    memset(&g, 0, sizeof g);
    g.cr = cr;
    g.io = io;
    g.c = cr->c;
    g.x = g.c->ext;
    g.V = g.c->V;
    g.G = g.c->groups;
    g.R = g.c->rows_per_group;
    g.B = g.G * g.R;
    g.K = FLS_STATS_MAX_BINS;
    g.tuples = fls_audit_case_tuples(g.c);
    g.KW = g.x && g.x->wr_k > 0 ? g.x->wr_k : 0;
    g.stride = g.KW > 0 ? g.KW : 1;
    g.cond = g.KW >= 2 && !g.tuples;
    g.cells = g.tuples ? fls_stats_pl_cells(g.V, (int)g.KW) : g.V;
    g.rule = fls_audit_case_has_rule(g.c);
    /* the noise scheme alone adds no state: such a case is planned as one without ext */
    g.state = g.x && (g.rule || g.KW > 0 || g.x->group_size || g.x->io != FLS_IO_CALL);
    fls_status st = gof_steps(&g);
    gof_free(&g);
    return st;
}

static fls_status run_pairs(case_run *cr, case_io *io)
{
    const fls_audit_case *c = cr->c;
    const int64_t V = c->V, M = c->rows_per_group, V2 = V * V;
    const int K = FLS_STATS_MAX_BINS;
    const int per_row = c->kind == FLS_CASE_PAIRS_DRAW; /* pairs inside a row, else across two rows */
    const fls_noise noise = c->ext ? c->ext->noise : FLS_NOISE_PER_TOKEN; /* all a pairs case reads of ext */
    const int64_t B = per_row ? M : 2 * M;
    fls_status st = FLS_ERR_OUT_OF_MEMORY;
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    float *target = malloc((size_t)V * sizeof(float)), *L = malloc((size_t)(B * V) * sizeof(float));
    double *p1 = malloc((size_t)V * sizeof(double)), *ref = malloc((size_t)V2 * sizeof(double));
    uint64_t *seeds = malloc((size_t)B * sizeof(uint64_t)), *offsets = malloc((size_t)B * sizeof(uint64_t));
    int64_t *counts = calloc((size_t)V2, sizeof(int64_t)), *tokens = NULL, oor = 0;
    fls_bins bins = {0};
    snprintf(cr->err, sizeof cr->err, "out of memory preparing the case");
    if (!rng || !target || !L || !p1 || !ref || !seeds || !offsets || !counts)
        goto done;
    gsl_rng_set(rng, (unsigned long)cr->input_seed);
    int64_t tie[3];
    int n_tie = 0;
    case_gen_logits(c, rng, target, tie, &n_tie);
    for (int64_t b = 0; b < B; b++)
        memcpy(L + b * V, target, (size_t)V * sizeof(float));
    io->L = (fls_matrix){L, FLS_DTYPE_F32, B, V, V};
    if ((st = fls_stats_probs_temperature_f32(target, V, c->temps[0], p1)) != FLS_OK)
        goto done;
    fls_stats_product(p1, V, p1, V, ref);

    fls_gof_design design;
    snprintf(cr->err, sizeof cr->err, "the design failed");
    if ((st = fls_stats_design(ref, 1, V2, cr->alpha, &design)) != FLS_OK)
        goto done;
    const int64_t N = design.N;
    const int64_t d = ceil_div(N, M); /* pairs per row pair */
    const int64_t draws = per_row ? 2 * d : d;
    cr->rows[0].draws = B * draws;
    st = FLS_ERR_OUT_OF_MEMORY;
    if (!(tokens = malloc((size_t)(B * draws) * sizeof(int64_t))))
        goto done;
    for (int64_t i = 0; i < M; i++) {
        if (c->kind == FLS_CASE_PAIRS_OFFSET) {
            /* one seed, offsets o and o + 1, o spread over all 64 bits */
            uint64_t s = fls_row_seed(cr->case_seed, (uint64_t)i);
            uint64_t o = case_splitmix64(cr->case_seed ^ (0x5bd1e995ull * (uint64_t)(i + 1)));
            seeds[2 * i] = seeds[2 * i + 1] = s;
            offsets[2 * i] = o;
            offsets[2 * i + 1] = o + 1;
        } else if (c->kind == FLS_CASE_PAIRS_SEED) {
            /* raw consecutive seeds, as a user numbering requests would pass them */
            seeds[2 * i] = cr->case_seed + 2 * (uint64_t)i;
            seeds[2 * i + 1] = cr->case_seed + 2 * (uint64_t)i + 1;
            offsets[2 * i] = offsets[2 * i + 1] = 0;
        } else {
            seeds[i] = fls_row_seed(cr->case_seed, (uint64_t)i);
            offsets[i] = 0;
        }
    }
    if (cr->o->progress)
        fprintf(
            stderr,
            "[audit] %s: V %lld, %lld pairs (%lld row pairs x %lld; %d bins), %s%s, input seed 0x%016llx, "
            "case seed 0x%016llx\n",
            c->name, (long long)V, (long long)(M * d), (long long)M, (long long)d, design.bins,
            c->kind == FLS_CASE_PAIRS_OFFSET
                ? "rows 2i, 2i+1: seed fls_row_seed(case seed, i), offsets o_i, o_i + 1 with o_i "
                  "= case_splitmix64(case seed ^ 0x5bd1e995 (i + 1))"
            : c->kind == FLS_CASE_PAIRS_SEED
                ? "rows 2i, 2i+1: raw seeds case seed + 2i, + 2i + 1, offset 0"
                : "row i: seed fls_row_seed(case seed, i), pairs of draws (2k, 2k+1)",
            noise == FLS_NOISE_MIN_FIRST ? ", min-first noise" : "", (unsigned long long)cr->input_seed,
            (unsigned long long)cr->case_seed);
    snprintf(cr->err, sizeof cr->err, "device memory");
    if ((st = case_io_prepare(io)) != FLS_OK)
        goto done;
    fls_params p;
    fls_params_default(&p);
    p.draws = draws;
    p.row_seeds = seeds;
    p.row_offsets = offsets;
    p.temperature_value = c->temps[0];
    p.noise = noise;
    if ((st = case_io_sample(io, &p, B, tokens)) != FLS_OK) {
        snprintf(cr->err, sizeof cr->err, "sampling failed (%s)", fls_status_string(st));
        goto done;
    }
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < d; k++) {
            int64_t x = per_row ? tokens[i * draws + 2 * k] : tokens[(2 * i) * draws + k];
            int64_t y = per_row ? tokens[i * draws + 2 * k + 1] : tokens[(2 * i + 1) * draws + k];
            if (x < 0 || x >= V || y < 0 || y >= V)
                oor++;
            else
                counts[x * V + y]++;
        }
    snprintf(cr->err, sizeof cr->err, "the test failed to run");
    if ((st = fls_bins_build(&bins, ref, V2, M * d, K)) != FLS_OK)
        goto done;
    fls_gof gof;
    fls_gof_init(&gof);
    if ((st = fls_gof_add_counts(&gof, &bins, counts, oor)) != FLS_OK)
        goto done;
    fls_gof_design seen;
    if ((st = fls_stats_design_at(ref, 1, V2, cr->alpha, M * d, &seen)) != FLS_OK)
        goto done;
    fls_audit_row *row = &cr->rows[0];
    snprintf(row->kind, sizeof row->kind, "pairs");
    row->chi2 = gof.impossible ? INFINITY : gof.chi2;
    row->dof = gof.dof + gof.n_exact;
    row->p = gof.p;
    row->pass = fls_gof_pass(&gof, cr->alpha);
    row->bins = gof.bins;
    row->min_mass = gof.min_mass;
    row->tv_caught = seen.tv;
    snprintf(row->note, sizeof row->note, "pairs against p x p");
done:
    fls_bins_free(&bins);
    gsl_rng_free(rng);
    free(target);
    free(L);
    free(p1);
    free(ref);
    free(seeds);
    free(offsets);
    free(counts);
    free(tokens);
    return st;
}

fls_status fls_audit_run_case(fls_context_t *ctx, const fls_audit_options *o, double alpha, size_t i,
                              fls_audit_row *rows)
{
    if (!ctx || !o || !rows)
        return FLS_ERR_NULL;
    if (i >= fls_audit_case_count())
        return FLS_ERR_PARAM;
    const fls_audit_case *c = fls_audit_case_get(i);
    const int n_rows = fls_audit_case_tests(i);
    case_run cr;
    memset(&cr, 0, sizeof cr);
    cr.c = c;
    cr.index = i;
    cr.o = o;
    cr.alpha = alpha;
    cr.input_seed = case_name_hash(c->name);
    cr.case_seed = case_splitmix64(o->seed ^ cr.input_seed);
    cr.t0 = case_now();
    cr.rows = rows;
    case_io io;
    memset(&io, 0, sizeof io);
    io.ctx = ctx;
    io.cuda = fls_context_engine(ctx) == FLS_ENGINE_CUDA;
    io.fused = c->fused;
    const char *fault = o->fault_case;
    io.fault = fault && (!strcmp(fault, c->name) || !strcmp(fault, "*"));
    io.mode = c->ext ? c->ext->io : FLS_IO_CALL;
    io.pieces = c->ext ? c->ext->pieces : 0;
    if (io.mode != FLS_IO_CALL && !(io.chunking = gsl_rng_alloc(gsl_rng_mt19937))) {
        for (int r = 0; r < n_rows; r++)
            fls_audit_row_error(&rows[r], FLS_ERR_OUT_OF_MEMORY, "out of memory");
        return FLS_ERR_OUT_OF_MEMORY;
    }

    for (int r = 0; r < n_rows; r++) {
        fls_audit_row *row = &rows[r];
        memset(row, 0, sizeof *row);
        if (r == 0)
            snprintf(row->test, sizeof row->test, "%s", c->name);
        else if (c->tail && r <= FLS_STATS_N_TAILS)
            snprintf(row->test, sizeof row->test, "%.48s/tail%d", c->name, (int)fls_stats_tail_t[r - 1]);
        else
            snprintf(row->test, sizeof row->test, "%.48s/pl-cond", c->name);
        snprintf(row->engine, sizeof row->engine, "%s", io.cuda ? "cuda" : "cpu");
        row->V = c->V;
        row->alpha = alpha;
        row->p = NAN;
        row->chi2 = NAN;
        row->deficit_caught = row->excess_caught = INFINITY;
        row->tv_caught = INFINITY;
    }
    fls_status st = c->kind == FLS_CASE_GOF ? run_gof(&cr, &io) : run_pairs(&cr, &io);
    case_io_release(&io);
    if (io.chunking)
        gsl_rng_free(io.chunking);
    if (st != FLS_OK) {
        for (int r = 0; r < n_rows; r++)
            fls_audit_row_error(&rows[r], st, cr.err);
        return st;
    }
    if (o->progress) {
        fprintf(stderr, "[audit] %s: %.1f s\n", c->name, case_now() - cr.t0);
        for (int r = 0; r < n_rows; r++)
            fls_audit_print_row(stderr, &rows[r]);
    }
    return FLS_OK;
}
