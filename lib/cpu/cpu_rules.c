/*
 * cpu_rules.c — the rules of variants/ as the CPU tile engine's function
 * tables (cpu_rules.h); the rows that the one-pass statistics cannot
 * decide go to the exact reference of rule_ref.h (the second pass), which
 * is also the unfused Gumbel method's rule.
 */
#include "lib/cpu/cpu_rules.h"
#include "variants/filters.h"
#include "lib/base/fls_noise.h"
#include "variants/grouped.h"
#include "variants/registry.h"
#include "variants/stair.h"
#include "variants/temperature.h"
#include "variants/topc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the temperature rule ---- */

static void temp_cand_init(const fls_ref_ctx *rc, void *c)
{
    (void)rc;
    fls_temperature_init(c);
}

static void temp_push_span(void *c, const float *x, const float *g, float T, int64_t v0, int64_t n,
                           float *scratch)
{
    (void)scratch;
    fls_temperature_push_span(c, x, g, T, v0, n);
}

static void temp_merge(void *a, const void *b)
{
    fls_temperature_merge(a, b);
}

static int temp_finalize(const fls_ref_ctx *rc, int64_t b, void *row, const fls_row_part *part,
                         const char *cands, int64_t *tok, float *lp, double *lse)
{
    (void)row;
    const float T = rc->req->rows[b].temperature;
    *lse = rc->want_lse ? fls_lse_value(part->lse.m, part->lse.s, !fls_temperature_noisy(T)) : 0.0;
    for (int64_t d = 0; d < rc->req->draws; d++) {
        fls_status st = fls_temperature_finalize((const fls_cand *)(cands + (size_t)d * sizeof(fls_cand)), T,
                                                 *lse, &tok[d], &lp[d]);
        if (st != FLS_OK)
            return st;
    }
    /* the key resolution (rule.h): the key of draw 0's winner */
    if (fls_key_refused(fls_temperature_noisy(T), ((const fls_cand *)cands)->key))
        return FLS_ERR_TEMPERATURE;
    return FLS_OK;
}

const cpu_rule cpu_rule_temperature = {
    .cand_size = sizeof(fls_cand),
    .argmax_only = 1,
    .cand_init = temp_cand_init,
    .push_span = temp_push_span,
    .cand_merge = temp_merge,
    .finalize = temp_finalize,
};

/* ---- the rule family ---- */

static void fam_cand_init(const fls_ref_ctx *rc, void *c)
{
    fls_stair_init(c, (int32_t)rc->K, rc->stair_cap);
}

static void fam_row_init(const fls_ref_ctx *rc, void *r)
{
    fls_topc_init(r, rc->top_cap);
}

static void fam_row_push(void *r, const float *x, int64_t v0, int64_t n)
{
    fls_topc_push_span(r, x, v0, n);
}

static void fam_push_span(void *c, const float *x, const float *g, float T, int64_t v0, int64_t n,
                          float *scratch)
{
    const float *key = x;
    if (g) {
        for (int64_t i = 0; i < n; i++)
            scratch[i] = fls_temperature_key(x[i], g[i], T);
        key = scratch;
    }
    fls_stair_push_span(c, x, key, v0, n);
}

static void fam_cand_merge(void *a, const void *b)
{
    fls_stair_merge(a, b);
}

static void fam_row_merge(void *a, const void *b)
{
    fls_topc_merge(a, b);
}

/* Row b's draws from their staircases once the support cutoff c is known:
 * the K best keys with x >= c (fls_stair_select); m the row's max, l its
 * support's log-sum-exp. CPU_RULE_SECOND_PASS when a staircase overflowed. */
static int fam_select(const fls_ref_ctx *rc, int64_t b, float c, double m, double l, const char *cands,
                      int64_t *tok, float *lp)
{
    const fls_request *req = rc->req;
    const fls_row_rule *rr = &req->rule[b];
    const int greedy = !fls_temperature_noisy(req->rows[b].temperature);
    const size_t cs = fls_stair_bytes(rc->stair_cap);
    int32_t *pick = malloc((size_t)rc->K * (sizeof(int32_t) + sizeof(float) + sizeof(int64_t)));
    if (!pick)
        return FLS_ERR_OUT_OF_MEMORY;
    float *px = (float *)(pick + rc->K);
    int64_t *pv = (int64_t *)(px + rc->K);
    int status = FLS_OK;
    for (int64_t d = 0; d < req->draws && status == FLS_OK; d++) {
        const fls_stair *s = (const fls_stair *)(cands + (size_t)d * cs);
        if (s->overflow) {
            status = CPU_RULE_SECOND_PASS;
            break;
        }
        const int32_t n = fls_stair_select(s, c, (int32_t)rr->K, pick);
        const fls_stair_entry *e = fls_stair_entries_c(s);
        for (int32_t j = 0; j < n; j++) {
            px[j] = e[pick[j]].x;
            pv[j] = e[pick[j]].v;
        }
        if (n == 0)
            status = FLS_ERR_ALL_MASKED;
        else if (fls_write_draw(px, pv, n, rc->K, greedy, m, l, tok + d * rc->K, lp + d * rc->K))
            status = FLS_ERR_TEMPERATURE;                  /* beyond the key resolution (rule.h) */
        for (int64_t j = rr->K; j < rc->K && n > 0; j++) { /* past this row's own K */
            tok[d * rc->K + j] = -1;
            lp[d * rc->K + j] = 0.0f;
        }
    }
    free(pick);
    return status;
}

static int fam_finalize(const fls_ref_ctx *rc, int64_t b, void *row, const fls_row_part *part,
                        const char *cands, int64_t *tok, float *lp, double *lse)
{
    const fls_request *req = rc->req;
    const fls_row_rule *rr = &req->rule[b];
    const float T = req->rows[b].temperature;
    const int greedy = !fls_temperature_noisy(T);
    if (part->lse.m == -INFINITY)
        return FLS_ERR_ALL_MASKED;
    fls_filter_stats st;
    memset(&st, 0, sizeof st);
    st.m = part->lse.m;
    st.lse_m = part->lse.m;
    st.lse_s = part->lse.s;
    st.mom_n = part->n;
    st.mom_mean = part->mean;
    st.mom_m2 = part->m2;
    st.dropped = -INFINITY;
    if (row) {
        fls_topc *t = row;
        fls_topc_sort(t);
        st.top = fls_topc_entries(t);
        st.ntop = t->n;
        st.dropped = t->dropped;
    } else {
        st.dropped = INFINITY; /* no list kept: nothing is known beyond m and the moments */
    }
    float c;
    if (fls_filter_chain(&st, rr->value, &c) != FLS_CUT_OK)
        return CPU_RULE_SECOND_PASS;
    double l = 0.0;
    if (rc->want_lse && !greedy && fls_support_lse(&st, c, greedy, &l) != FLS_CUT_OK)
        return CPU_RULE_SECOND_PASS;
    if (greedy)
        l = st.m;
    *lse = l;
    return fam_select(rc, b, c, st.m, l, cands, tok, lp);
}

const cpu_rule cpu_rule_family = {
    .needs_part = 1,
    .cand_init = fam_cand_init,
    .row_init = fam_row_init,
    .row_push = fam_row_push,
    .push_span = fam_push_span,
    .cand_merge = fam_cand_merge,
    .row_merge = fam_row_merge,
    .finalize = fam_finalize,
};

/* ---- the grouped method ---- */

static void grp_cand_init(const fls_ref_ctx *rc, void *c)
{
    (void)rc;
    *(fls_gbest *)c = fls_gbest_empty();
}

static void grp_merge(void *a, const void *b)
{
    fls_gbest_merge(a, b);
}

/* A tile of whole groups (v0 a multiple of g): each group's log-mass once,
 * then per draw its key; the token noise only for a group that beats the
 * (row, draw)'s best so far. */
static void grp_push_tile(const fls_ref_ctx *rc, char *cands, int64_t d0, int64_t d1, const float *x,
                          int64_t v0, int64_t n, const fls_row_params *rp, fls_gumbel_span_fn gumbel,
                          float *scratch)
{
    const int64_t g = rc->req->group_size;
    const int greedy = !fls_temperature_noisy(rp->temperature);
    const uint64_t gk = fls_group_key(rp->seed);
    fls_gbest *best = (fls_gbest *)cands;
    for (int64_t i0 = 0; i0 < n; i0 += g) {
        const int64_t ng = n - i0 < g ? n - i0 : g, k = (v0 + i0) / g;
        const double L = fls_group_lse(x + i0, ng, greedy);
        if (L == -INFINITY)
            continue; /* a fully masked group has no mass */
        for (int64_t d = d0; d < d1; d++) {
            const uint32_t draw = rc->req->first_draw + (uint32_t)d;
            const double key = greedy ? L : L + (double)fls_group_gumbel(gk, rp->offset, draw, (uint64_t)k);
            if (!fls_gbest_beats(key, k, &best[d]))
                continue;
            /* the within-group sample: the flat contract's token noise */
            fls_cand c = fls_cand_empty();
            if (!greedy)
                gumbel(rp->seed, rp->offset, draw, (uint64_t)(v0 + i0), ng, scratch);
            fls_temperature_push_span(&c, x + i0, greedy ? NULL : scratch, rp->temperature, v0 + i0, ng);
            best[d].gkey = key;
            best[d].group = k;
            best[d].tok = c.idx;
            best[d].x = c.x;
        }
    }
}

static int grp_finalize(const fls_ref_ctx *rc, int64_t b, void *row, const fls_row_part *part,
                        const char *cands, int64_t *tok, float *lp, double *lse)
{
    (void)row;
    const float T = rc->req->rows[b].temperature;
    *lse = rc->want_lse ? fls_lse_value(part->lse.m, part->lse.s, !fls_temperature_noisy(T)) : 0.0;
    for (int64_t d = 0; d < rc->req->draws; d++) {
        const fls_gbest *g = (const fls_gbest *)cands + d;
        if (g->group < 0)
            return FLS_ERR_ALL_MASKED;
        tok[d] = g->tok;
        lp[d] = fls_temperature_noisy(T) ? (float)((double)g->x - *lse) : 0.0f;
    }
    /* the key resolution (rule.h): the group key of draw 0's winner */
    if (fls_key_refused(fls_temperature_noisy(T), ((const fls_gbest *)cands)->gkey))
        return FLS_ERR_TEMPERATURE;
    return FLS_OK;
}

const cpu_rule cpu_rule_grouped = {
    .cand_size = sizeof(fls_gbest),
    .cand_init = grp_cand_init,
    .cand_merge = grp_merge,
    .finalize = grp_finalize,
    .push_tile = grp_push_tile,
};

const cpu_rule *cpu_rule_for(const fls_request *req, int want_lse, fls_ref_ctx *rc)
{
    fls_ref_plan(req, want_lse, rc);
    if (req->method == FLS_METHOD_GROUPED)
        return &cpu_rule_grouped;
    if (!req->rule)
        return &cpu_rule_temperature;
    return &cpu_rule_family;
}

int cpu_rule_second_pass_row(const fls_ref_ctx *rc, int64_t b, const float *x, const fls_row_part *part,
                             const char *cands, fls_gumbel_span_fn gumbel, int64_t *tok, float *lp,
                             double *lse)
{
    const fls_request *req = rc->req;
    if (!cands || !req->rule)
        return fls_ref_row(rc, b, x, part, gumbel, tok, lp, lse);
    float c;
    double l, m;
    int r = fls_ref_cut_lse(rc, b, x, part, &c, &l, &m);
    if (r == FLS_OK) {
        r = fam_select(rc, b, c, m, l, cands, tok, lp);
        if (r == FLS_OK)
            *lse = l;
    }
    if (r == CPU_RULE_SECOND_PASS) /* a staircase overflowed: every key again */
        return fls_ref_row(rc, b, x, part, gumbel, tok, lp, lse);
    return r;
}
