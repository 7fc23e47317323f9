/*
 * cpu_rules.c — the rules of variants/ as the CPU tile engine's function
 * tables (cpu_rules.h), and the exact sort-based reference of the rule
 * family, which decides the rows that the one-pass statistics cannot (the
 * second pass) and is the unfused Gumbel method's rule.
 */
#include "cpu_rules.h"
#include "filters.h"
#include "fls_noise.h"
#include "grouped.h"
#include "registry.h"
#include "stair.h"
#include "temperature.h"
#include "topc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- partial statistics ---- */

cpu_part cpu_part_empty(void)
{
    cpu_part p;
    p.lse = fls_lse_empty();
    p.n = p.mean = p.m2 = 0.0;
    return p;
}

void cpu_part_span(cpu_part *p, const float *x, int64_t n, int moments)
{
    p->lse = fls_lse_span(x, n);
    p->n = p->mean = p->m2 = 0.0;
    if (!moments)
        return;
    double s = 0.0, c = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > -INFINITY) {
            s += x[i];
            c += 1.0;
        }
    if (c == 0.0)
        return;
    const double mean = s / c;
    double m2 = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > -INFINITY)
            m2 += ((double)x[i] - mean) * ((double)x[i] - mean);
    p->n = c;
    p->mean = mean;
    p->m2 = m2;
}

/* Chan et al.'s merge of (count, mean, M2), and the log-sum-exp merge */
void cpu_part_merge(cpu_part *a, const cpu_part *b)
{
    fls_lse_merge(&a->lse, b->lse.m, b->lse.s);
    fls_moments_merge(&a->n, &a->mean, &a->m2, b->n, b->mean, b->m2);
}

/* ---- the temperature rule ---- */

static void temp_cand_init(const cpu_rule_ctx *rc, void *c)
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

static int temp_finalize(const cpu_rule_ctx *rc, int64_t b, void *row, const cpu_part *part,
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
    return FLS_OK;
}

const cpu_rule cpu_rule_temperature = {
    .cand_size = sizeof(fls_cand),
    .cand_init = temp_cand_init,
    .push_span = temp_push_span,
    .cand_merge = temp_merge,
    .finalize = temp_finalize,
};

/* ---- the rule family ---- */

static void fam_cand_init(const cpu_rule_ctx *rc, void *c)
{
    fls_stair_init(c, (int32_t)rc->K, rc->stair_cap);
}

static void fam_row_init(const cpu_rule_ctx *rc, void *r)
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
static int fam_select(const cpu_rule_ctx *rc, int64_t b, float c, double m, double l, const char *cands,
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
        else
            fls_write_draw(px, pv, n, rc->K, greedy, m, l, tok + d * rc->K, lp + d * rc->K);
        for (int64_t j = rr->K; j < rc->K && n > 0; j++) { /* past this row's own K */
            tok[d * rc->K + j] = -1;
            lp[d * rc->K + j] = 0.0f;
        }
    }
    free(pick);
    return status;
}

static int fam_finalize(const cpu_rule_ctx *rc, int64_t b, void *row, const cpu_part *part, const char *cands,
                        int64_t *tok, float *lp, double *lse)
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

static void grp_cand_init(const cpu_rule_ctx *rc, void *c)
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
static void grp_push_tile(const cpu_rule_ctx *rc, char *cands, int64_t d0, int64_t d1, const float *x,
                          int64_t v0, int64_t n, const fls_row_params *rp, cpu_gumbel_fn gumbel,
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

static int grp_finalize(const cpu_rule_ctx *rc, int64_t b, void *row, const cpu_part *part, const char *cands,
                        int64_t *tok, float *lp, double *lse)
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
    return FLS_OK;
}

const cpu_rule cpu_rule_grouped = {
    .cand_size = sizeof(fls_gbest),
    .cand_init = grp_cand_init,
    .cand_merge = grp_merge,
    .finalize = grp_finalize,
    .push_tile = grp_push_tile,
};

/* The capacity of the top list: enough for every top-k up to 1024 and for
 * nuclei of up to 1024 tokens; larger ones take the second pass. */
#define CPU_TOP_CAP 1024

const cpu_rule *cpu_rule_for(const fls_request *req, int want_lse, cpu_rule_ctx *rc)
{
    memset(rc, 0, sizeof *rc);
    rc->req = req;
    rc->K = req->K;
    rc->want_lse = want_lse;
    if (req->method == FLS_METHOD_GROUPED)
        return &cpu_rule_grouped;
    if (!req->rule)
        return &cpu_rule_temperature;
    rc->stair_cap = fls_stair_cap(req->K, req->vocab);
    int any_filter = 0;
    for (int64_t b = 0; b < req->batch && !any_filter; b++)
        any_filter = fls_filter_row_active(req->rule[b].value);
    /* the list also gives the log-sum-exp over a small support in one pass */
    if ((req->needs & FLS_NEED_TOP) || (any_filter && want_lse)) {
        int64_t cap = CPU_TOP_CAP;
        for (int64_t b = 0; b < req->batch; b++) { /* every list a value asks for, decided in one pass */
            int64_t exact;
            FLS_BOOL bounded, open;
            fls_filter_row_list(req->rule[b].value, 65536.0, &exact, &bounded, &open);
            cap = exact > cap ? exact : cap;
        }
        rc->top_cap = cap < req->vocab ? cap : req->vocab;
    }
    return &cpu_rule_family;
}

/* ---- the exact reference on a materialized row ---- */

/* Sorts the n entries into rank order (fls_rank_before: larger x first,
 * lower index on ties) by a stable LSD radix sort on the order-preserving
 * bits of x, the input being in index order: the same order as a
 * comparison sort, in O(n) (the exact second pass sorts whole rows of V).
 * -0 and +0 compare equal, so both get +0's key. tmp: n entries. */
static void rank_sort(fls_top_entry *e, fls_top_entry *tmp, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const float x = e[i].x == 0.0f ? 0.0f : e[i].x;
        e[i].pad_ = ~fls_ord(x); /* ascending pad_ = descending x */
    }
    fls_top_entry *src = e, *dst = tmp;
    for (int shift = 0; shift < 32; shift += 8) {
        int64_t count[257] = {0};
        for (int64_t i = 0; i < n; i++)
            count[((src[i].pad_ >> shift) & 0xffu) + 1]++;
        if (count[((src[0].pad_ >> shift) & 0xffu) + 1] == n)
            continue; /* every key has this byte: the order stands */
        for (int k = 0; k < 256; k++)
            count[k + 1] += count[k];
        for (int64_t i = 0; i < n; i++)
            dst[count[(src[i].pad_ >> shift) & 0xffu]++] = src[i];
        fls_top_entry *t = src;
        src = dst;
        dst = t;
    }
    if (src != e)
        memcpy(e, src, (size_t)n * sizeof *e);
    for (int64_t i = 0; i < n; i++)
        e[i].pad_ = 0;
}

/* the finite tokens of x in rank order, and the statistics over every token */
static fls_top_entry *reference_stats(const float *x, int64_t V, const cpu_part *part, int moments,
                                      fls_filter_stats *st, cpu_part *own)
{
    fls_top_entry *all = malloc((size_t)(V > 0 ? V : 1) * sizeof *all);
    fls_top_entry *tmp = malloc((size_t)(V > 0 ? V : 1) * sizeof *tmp);
    if (!all || !tmp) {
        free(all);
        free(tmp);
        return NULL;
    }
    int64_t n = 0;
    for (int64_t v = 0; v < V; v++)
        if (x[v] > -INFINITY) {
            all[n].x = x[v];
            all[n].pad_ = 0;
            all[n].v = v;
            n++;
        }
    if (n > 0)
        rank_sort(all, tmp, n);
    free(tmp);
    if (!part) {
        cpu_part_span(own, x, V, moments);
        part = own;
    }
    memset(st, 0, sizeof *st);
    st->m = part->lse.m;
    st->lse_m = part->lse.m;
    st->lse_s = part->lse.s;
    st->mom_n = part->n;
    st->mom_mean = part->mean;
    st->mom_m2 = part->m2;
    st->top = all;
    st->ntop = n;
    st->dropped = -INFINITY;
    return all;
}

int cpu_rule_reference_cut(const cpu_rule_ctx *rc, int64_t b, const float *x, float *c)
{
    double l;
    return cpu_rule_reference_cut_lse(rc, b, x, NULL, c, &l, NULL);
}

int cpu_rule_reference_row(const cpu_rule_ctx *rc, int64_t b, const float *x, const cpu_part *part,
                           cpu_gumbel_fn gumbel, int64_t *tok, float *lp, double *lse)
{
    const fls_request *req = rc->req;
    const int64_t V = req->vocab;
    const fls_row_params *rp = &req->rows[b];
    const int greedy = !fls_temperature_noisy(rp->temperature);
    const int64_t K = req->rule ? req->rule[b].K : 1;
    fls_filter_stats st;
    cpu_part own;
    fls_top_entry *all = reference_stats(x, V, part, 1, &st, &own);
    if (!all)
        return FLS_ERR_OUT_OF_MEMORY;
    int r = FLS_OK;
    float c = -INFINITY;
    double l = 0.0;
    float *g = NULL, *px = NULL;
    int64_t *pv = NULL;
    if (st.m == -INFINITY) {
        r = FLS_ERR_ALL_MASKED;
        goto done;
    }
    if (req->rule && fls_filter_chain(&st, req->rule[b].value, &c) != FLS_CUT_OK) {
        r = FLS_ERR_INTERNAL;
        goto done;
    }
    if (greedy)
        l = st.m;
    else if (fls_support_lse(&st, c, 0, &l) != FLS_CUT_OK) {
        r = FLS_ERR_INTERNAL;
        goto done;
    }
    *lse = l;
    int64_t ns = 0; /* the support: the first ns tokens of the rank order */
    while (ns < st.ntop && st.top[ns].x >= c)
        ns++;
    g = greedy ? NULL : malloc((size_t)V * sizeof(float));
    px = malloc((size_t)K * sizeof(float));
    pv = malloc((size_t)K * sizeof(int64_t));
    float *pk = malloc((size_t)K * sizeof(float));
    if ((!greedy && !g) || !px || !pv || !pk) {
        free(pk);
        r = FLS_ERR_OUT_OF_MEMORY;
        goto done;
    }
    for (int64_t d = 0; d < req->draws; d++) {
        if (g)
            gumbel(rp->seed, rp->offset, req->first_draw + (uint32_t)d, 0, V, g);
        /* the K best keys of the support, best first (insertion into K slots) */
        int64_t n = 0;
        for (int64_t i = 0; i < ns; i++) {
            const int64_t v = st.top[i].v;
            const float key = fls_temperature_key(st.top[i].x, g ? g[v] : 0.0f, rp->temperature);
            int64_t q = n < K ? n++ : K;
            if (q == K) {
                if (!fls_key_beats(key, v, pk[K - 1], pv[K - 1]))
                    continue;
                q = K - 1;
            }
            while (q > 0 && fls_key_beats(key, v, pk[q - 1], pv[q - 1])) {
                pk[q] = pk[q - 1];
                px[q] = px[q - 1];
                pv[q] = pv[q - 1];
                q--;
            }
            pk[q] = key;
            px[q] = st.top[i].x;
            pv[q] = v;
        }
        fls_write_draw(px, pv, (int32_t)n, rc->K, greedy, st.m, l, tok + d * rc->K, lp + d * rc->K);
    }
    free(pk);
done:
    free(all);
    free(g);
    free(px);
    free(pv);
    return r;
}

int cpu_rule_reference_cut_lse(const cpu_rule_ctx *rc, int64_t b, const float *x, const cpu_part *part,
                               float *c, double *lse, double *m)
{
    const fls_request *req = rc->req;
    const int greedy = !fls_temperature_noisy(req->rows[b].temperature);
    fls_filter_stats st;
    cpu_part own;
    fls_top_entry *all = reference_stats(x, req->vocab, part, 1, &st, &own);
    if (!all)
        return FLS_ERR_OUT_OF_MEMORY;
    double l = 0.0;
    int r = FLS_OK;
    *c = -INFINITY;
    if (st.m == -INFINITY)
        r = FLS_ERR_ALL_MASKED;
    else if (req->rule && fls_filter_chain(&st, req->rule[b].value, c) != FLS_CUT_OK)
        r = FLS_ERR_INTERNAL; /* complete statistics always decide */
    else if (!greedy && fls_support_lse(&st, *c, 0, &l) != FLS_CUT_OK)
        r = FLS_ERR_INTERNAL;
    else if (greedy)
        l = st.m;
    *lse = l;
    if (m)
        *m = st.m;
    free(all);
    return r;
}

int cpu_rule_second_pass_row(const cpu_rule_ctx *rc, int64_t b, const float *x, const cpu_part *part,
                             const char *cands, cpu_gumbel_fn gumbel, int64_t *tok, float *lp, double *lse)
{
    const fls_request *req = rc->req;
    if (!cands || !req->rule)
        return cpu_rule_reference_row(rc, b, x, part, gumbel, tok, lp, lse);
    float c;
    double l, m;
    int r = cpu_rule_reference_cut_lse(rc, b, x, part, &c, &l, &m);
    if (r == FLS_OK) {
        r = fam_select(rc, b, c, m, l, cands, tok, lp);
        if (r == FLS_OK)
            *lse = l;
    }
    if (r == CPU_RULE_SECOND_PASS) /* a staircase overflowed: every key again */
        return cpu_rule_reference_row(rc, b, x, part, gumbel, tok, lp, lse);
    return r;
}
