/*
 * rule_ref.c — the rule family's exact reference on one materialized row
 * (rule_ref.h), host code shared by the CPU and CUDA engines.
 */
#include "lib/ref/rule_ref.h"
#include "variants/filters.h"
#include "lib/base/fls_noise.h"
#include "variants/registry.h"
#include "variants/stair.h"
#include "variants/temperature.h"
#include "variants/topc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the noise of a span of tokens ---- */

void fls_ref_gumbel_span(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t v0, int64_t n, float *g)
{
    int64_t i = 0;
    if ((v0 & 1) && n > 0) { /* odd first token: the second half of its block */
        g[0] = fls_gumbel(seed, offset, draw, v0);
        i = 1;
    }
    for (; i + 2 <= n; i += 2) { /* one Philox block serves tokens v and v+1 */
        uint32_t c[4], k[2];
        fls_noise_counter(seed, offset, draw, v0 + (uint64_t)i, c, k);
        fls_philox_block r = fls_philox4x32_10(c, k);
        g[i] = fls_gumbel_from_bits(((uint64_t)r.r[1] << 32) | r.r[0]);
        g[i + 1] = fls_gumbel_from_bits(((uint64_t)r.r[3] << 32) | r.r[2]);
    }
    if (i < n)
        g[i] = fls_gumbel(seed, offset, draw, v0 + (uint64_t)i);
}

/* The min-first scheme (fls_gumbel_mf) on a span: one group block per
 * 64-token group the span touches, one token block per pair. */
void fls_ref_gumbel_span_mf(uint64_t seed, uint64_t offset, uint32_t draw, uint64_t v0, int64_t n, float *g)
{
    int64_t i = 0;
    while (i < n) {
        const uint64_t v = v0 + (uint64_t)i, grp = v / FLS_MF_GROUP;
        const fls_mf_group mg = fls_mf_group_of(seed, offset, draw, grp);
        const int64_t left = (int64_t)((grp + 1) * FLS_MF_GROUP - v0); /* the group's end in the span */
        const int64_t end = left < n ? left : n;
        for (; i < end; i++)
            g[i] = fls_mf_noise(&mg, v0 + (uint64_t)i, fls_noise_bits(seed, offset, draw, v0 + (uint64_t)i));
    }
}

/* ---- partial statistics ---- */

fls_row_part fls_row_part_empty(void)
{
    fls_row_part p;
    p.lse = fls_lse_empty();
    p.n = p.mean = p.m2 = 0.0;
    return p;
}

void fls_row_part_span(fls_row_part *p, const float *x, int64_t n, int moments)
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
void fls_row_part_merge(fls_row_part *a, const fls_row_part *b)
{
    fls_lse_merge(&a->lse, b->lse.m, b->lse.s);
    fls_moments_merge(&a->n, &a->mean, &a->m2, b->n, b->mean, b->m2);
}

/* ---- the plan ---- */

/* The capacity of the top list: enough for every list a filter's value
 * asks for up to 1024 and for open lists (nuclei) of up to 1024 tokens;
 * larger ones take the second pass. */
#define FLS_REF_TOP_CAP 1024

void fls_ref_plan(const fls_request *req, int want_lse, fls_ref_ctx *rc)
{
    memset(rc, 0, sizeof *rc);
    rc->req = req;
    rc->K = req->K;
    rc->want_lse = want_lse;
    if (req->method == FLS_METHOD_GROUPED || !req->rule)
        return;
    rc->stair_cap = fls_stair_cap(req->K, req->vocab);
    int any_filter = 0;
    for (int64_t b = 0; b < req->batch && !any_filter; b++)
        any_filter = fls_filter_row_active(req->rule[b].value);
    /* the list also gives the log-sum-exp over a small support in one pass */
    if ((req->needs & FLS_NEED_TOP) || (any_filter && want_lse)) {
        int64_t cap = FLS_REF_TOP_CAP;
        for (int64_t b = 0; b < req->batch; b++) { /* every list a value asks for, decided in one pass */
            int64_t exact;
            FLS_BOOL bounded, open;
            fls_filter_row_list(req->rule[b].value, 65536.0, &exact, &bounded, &open);
            cap = exact > cap ? exact : cap;
        }
        rc->top_cap = cap < req->vocab ? cap : req->vocab;
    }
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
static fls_top_entry *reference_stats(const float *x, int64_t V, const fls_row_part *part, int moments,
                                      fls_filter_stats *st, fls_row_part *own)
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
        fls_row_part_span(own, x, V, moments);
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

int fls_ref_cut(const fls_ref_ctx *rc, int64_t b, const float *x, float *c)
{
    double l;
    return fls_ref_cut_lse(rc, b, x, NULL, c, &l, NULL);
}

int fls_ref_row(const fls_ref_ctx *rc, int64_t b, const float *x, const fls_row_part *part,
                fls_gumbel_span_fn gumbel, int64_t *tok, float *lp, double *lse)
{
    const fls_request *req = rc->req;
    const int64_t V = req->vocab;
    const fls_row_params *rp = &req->rows[b];
    const int greedy = !fls_temperature_noisy(rp->temperature);
    const int64_t K = req->rule ? req->rule[b].K : 1;
    fls_filter_stats st;
    fls_row_part own;
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
        if (fls_write_draw(px, pv, (int32_t)n, rc->K, greedy, st.m, l, tok + d * rc->K, lp + d * rc->K)) {
            r = FLS_ERR_TEMPERATURE; /* beyond the key resolution (rule.h) */
            break;
        }
    }
    free(pk);
done:
    free(all);
    free(g);
    free(px);
    free(pv);
    return r;
}

int fls_ref_cut_lse(const fls_ref_ctx *rc, int64_t b, const float *x, const fls_row_part *part, float *c,
                    double *lse, double *m)
{
    const fls_request *req = rc->req;
    const int greedy = !fls_temperature_noisy(req->rows[b].temperature);
    fls_filter_stats st;
    fls_row_part own;
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
