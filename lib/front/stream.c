/*
 * stream.c — streaming (online) sampling: chunks of the vocabulary in any
 * size and order, mergeable and serializable states, and early finalization
 * from logit bounds (the paper's Algorithm I.3; docs/GROUPED.md).
 *
 * A state holds, per row, the log-sum-exp partial of the tokens fed; per
 * (row, draw) the rule's candidate (the flat Gumbel-max's fls_cand, or the
 * grouped method's best group, fls_gbest); the covered token intervals;
 * and, for the grouped method, the groups that chunk boundaries split
 * (their partial log-mass and within-group candidates), which complete when
 * their last token arrives. The same functions as the one-shot engine
 * decide every key (variants/), so the tokens are the one-shot call's.
 */
#include "lib/cpu/cpu_kernels.h"
#include "lib/base/fls_dtype.h"
#include "lib/base/fls_noise.h"
#include "variants/grouped.h"
#include "lib/front/internal.h"
#include "variants/rule.h"
#include "variants/temperature.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STREAM_MAGIC   0x53534C46u /* "FLSS" */
#define STREAM_VERSION 1u

typedef struct interval {
    int64_t a, b; /* [a, b) */
} interval;

/* A group split by chunk boundaries: B lse partials, then B x draws candidates. */
typedef struct pend_group {
    int64_t k, seen;
    fls_lse *lse;
    fls_cand *cand;
} pend_group;

struct fls_stream {
    fls_context_t *ctx;
    fls_cpu_kernels kern;
    int64_t B, V, draws, g;
    int32_t method;
    uint32_t first_draw;
    fls_row_params *rows; /* B */
    fls_lse *lse;         /* B */
    fls_cand *cand;       /* B x draws (flat) */
    fls_gbest *gbest;     /* B x draws (grouped) */
    interval *cov;
    int64_t ncov, capcov;
    pend_group *pend;
    int64_t npend, cappend;
    int64_t tok_fed, tok_skip, chunks_fed, chunks_skip;
    int cuda;        /* a CUDA context's state: chunks are device memory (feed_device) */
    float *dbuf;     /* CUDA: the logits of a fused feed's chunk (device) */
    size_t dbuf_len; /* its floats */
};

/* The serialized header (host byte order: the same build reads it back). */
typedef struct stream_header {
    uint32_t magic, version;
    int64_t B, V, draws, g;
    int32_t method;
    uint32_t first_draw;
    int64_t ncov, npend, tok_fed, tok_skip, chunks_fed, chunks_skip;
} stream_header;

static void pend_free(pend_group *p)
{
    free(p->lse);
    free(p->cand);
    p->lse = NULL;
    p->cand = NULL;
}

void fls_stream_destroy(fls_stream_t *s)
{
    if (!s)
        return;
    for (int64_t i = 0; i < s->npend; i++)
        pend_free(&s->pend[i]);
    free(s->pend);
    free(s->cov);
    free(s->rows);
    free(s->lse);
    free(s->cand);
    free(s->gbest);
    fls_cuda_free(s->dbuf);
    free(s);
}

static int grouped(const fls_stream_t *s)
{
    return s->method == FLS_METHOD_GROUPED;
}

/* A state with B rows, everything empty. */
static fls_stream_t *stream_alloc(fls_context_t *ctx, int64_t B, int64_t V, int64_t draws, int method)
{
    if (B <= 0 || V <= 0 || draws <= 0 || B > ((int64_t)1 << 40) / draws)
        return NULL;
    fls_stream_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->ctx = ctx;
    s->B = B;
    s->V = V;
    s->draws = draws;
    s->method = method;
    s->rows = calloc((size_t)B, sizeof *s->rows);
    s->lse = malloc((size_t)B * sizeof *s->lse);
    if (method == FLS_METHOD_GROUPED)
        s->gbest = malloc((size_t)(B * draws) * sizeof *s->gbest);
    else
        s->cand = malloc((size_t)(B * draws) * sizeof *s->cand);
    if (!s->rows || !s->lse || (!s->gbest && !s->cand)) {
        fls_stream_destroy(s);
        return NULL;
    }
    for (int64_t b = 0; b < B; b++)
        s->lse[b] = fls_lse_empty();
    for (int64_t i = 0; i < B * draws; i++) {
        if (s->gbest)
            s->gbest[i] = fls_gbest_empty();
        else
            s->cand[i] = fls_cand_empty();
    }
    fls_cpu_select_kernels(ctx ? ctx->simd : FLS_SIMD_PORTABLE, &s->kern);
    s->cuda = ctx && ctx->engine == FLS_ENGINE_CUDA;
    return s;
}

fls_status fls_stream_create(fls_stream_t **stream, fls_context_t *ctx, int64_t B, int64_t V,
                             const fls_params *params)
{
    if (!stream || !ctx || !params)
        return FLS_ERR_NULL;
    if (B <= 0 || V <= 0 || V >= ((int64_t)1 << 33) - 1)
        return FLS_ERR_SIZE;
    /* the same validation and resolution as a sampling call; the outputs
     * come at finalize (checked there) */
    fls_request req;
    fls_row_params *rows = NULL;
    fls_status st = fls_resolve_request(ctx, params, NULL, B, V, &req, &rows);
    if (st != FLS_OK)
        return st;
    if (req.params_on_device) { /* the state reads its rows on the host */
        free((void *)req.rule);
        return ctx->engine == FLS_ENGINE_CUDA ? FLS_ERR_UNSUPPORTED : FLS_ERR_PARAM;
    }
    if (req.rule || req.mods || req.has_raw_mods || req.noise != FLS_NOISE_PER_TOKEN ||
        (req.method != FLS_METHOD_FUSED && req.method != FLS_METHOD_GROUPED) ||
        (ctx->engine == FLS_ENGINE_CUDA && req.method == FLS_METHOD_GROUPED && req.group_size > 4096)) {
        free(rows);
        free((void *)req.rule);
        free((void *)req.mods);
        return FLS_ERR_UNSUPPORTED;
    }
    fls_stream_t *s = stream_alloc(ctx, B, V, req.draws, req.method);
    if (!s) {
        free(rows);
        return FLS_ERR_OUT_OF_MEMORY;
    }
    memcpy(s->rows, rows, (size_t)B * sizeof *rows);
    free(rows);
    s->g = req.group_size;
    s->first_draw = req.first_draw;
    *stream = s;
    return FLS_OK;
}

/* ---- coverage ---- */

/* Whether [a, b) overlaps a covered interval. */
static int cov_overlaps(const fls_stream_t *s, int64_t a, int64_t b)
{
    for (int64_t i = 0; i < s->ncov; i++)
        if (a < s->cov[i].b && s->cov[i].a < b)
            return 1;
    return 0;
}

/* Adds [a, b) (disjoint from the rest), keeping the list sorted and merged. */
static fls_status cov_add(fls_stream_t *s, int64_t a, int64_t b)
{
    if (s->ncov == s->capcov) {
        int64_t cap = s->capcov ? 2 * s->capcov : 16;
        interval *c = realloc(s->cov, (size_t)cap * sizeof *c);
        if (!c)
            return FLS_ERR_OUT_OF_MEMORY;
        s->cov = c;
        s->capcov = cap;
    }
    int64_t i = s->ncov;
    while (i > 0 && s->cov[i - 1].a > a) {
        s->cov[i] = s->cov[i - 1];
        i--;
    }
    s->cov[i].a = a;
    s->cov[i].b = b;
    s->ncov++;
    /* merge touching neighbours */
    int64_t w = 0;
    for (int64_t r = 1; r < s->ncov; r++) {
        if (s->cov[r].a == s->cov[w].b)
            s->cov[w].b = s->cov[r].b;
        else
            s->cov[++w] = s->cov[r];
    }
    s->ncov = w + 1;
    return FLS_OK;
}

/* Room for the coverage list to take one more interval (so an update that
 * has passed its checks cannot fail half-way). */
static fls_status cov_reserve(fls_stream_t *s)
{
    if (s->ncov < s->capcov)
        return FLS_OK;
    int64_t cap = s->capcov ? 2 * s->capcov : 16;
    interval *c = realloc(s->cov, (size_t)cap * sizeof *c);
    if (!c)
        return FLS_ERR_OUT_OF_MEMORY;
    s->cov = c;
    s->capcov = cap;
    return FLS_OK;
}

/* ---- the grouped method's groups ---- */

static int64_t group_len(const fls_stream_t *s, int64_t k)
{
    return s->V - k * s->g < s->g ? s->V - k * s->g : s->g;
}

/* A complete group k with log-mass L into the (row b, draw) candidates, its
 * within-group candidate given (or computed from x, the group's tempered
 * logits, when wc is NULL: only when the group can win). */
static void group_offer(fls_stream_t *s, int64_t b, int64_t k, double L, const fls_cand *wc, const float *x,
                        float *noise)
{
    const fls_row_params *rp = &s->rows[b];
    const int greedy = !fls_temperature_noisy(rp->temperature);
    const uint64_t gk = fls_group_key(rp->seed);
    const int64_t n = group_len(s, k);
    if (L == -INFINITY)
        return;
    for (int64_t d = 0; d < s->draws; d++) {
        const uint32_t draw = s->first_draw + (uint32_t)d;
        const double key = greedy ? L : L + (double)fls_group_gumbel(gk, rp->offset, draw, (uint64_t)k);
        fls_gbest *best = &s->gbest[b * s->draws + d];
        if (!fls_gbest_beats(key, k, best))
            continue;
        fls_cand c;
        if (wc) {
            c = wc[d];
        } else {
            c = fls_cand_empty();
            if (!greedy)
                s->kern.gumbel(rp->seed, rp->offset, draw, (uint64_t)(k * s->g), n, noise);
            fls_temperature_push_span(&c, x, greedy ? NULL : noise, rp->temperature, k * s->g, n);
        }
        best->gkey = key;
        best->group = k;
        best->tok = c.idx;
        best->x = c.x;
    }
}

static pend_group *pend_find(fls_stream_t *s, int64_t k)
{
    for (int64_t i = 0; i < s->npend; i++)
        if (s->pend[i].k == k)
            return &s->pend[i];
    return NULL;
}

/* A new pending group k (empty partials). */
static pend_group *pend_new(fls_stream_t *s, int64_t k)
{
    if (s->npend == s->cappend) {
        int64_t cap = s->cappend ? 2 * s->cappend : 8;
        pend_group *p = realloc(s->pend, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        s->pend = p;
        s->cappend = cap;
    }
    pend_group *p = &s->pend[s->npend];
    p->k = k;
    p->seen = 0;
    p->lse = malloc((size_t)s->B * sizeof *p->lse);
    p->cand = malloc((size_t)(s->B * s->draws) * sizeof *p->cand);
    if (!p->lse || !p->cand) {
        pend_free(p);
        return NULL;
    }
    for (int64_t b = 0; b < s->B; b++)
        p->lse[b] = fls_lse_empty();
    for (int64_t i = 0; i < s->B * s->draws; i++)
        p->cand[i] = fls_cand_empty();
    s->npend++;
    return p;
}

/* A pending group whose last token has arrived: offered, then removed. */
static void pend_complete(fls_stream_t *s, pend_group *p)
{
    for (int64_t b = 0; b < s->B; b++) {
        const int greedy = !fls_temperature_noisy(s->rows[b].temperature);
        group_offer(s, b, p->k, fls_lse_value(p->lse[b].m, p->lse[b].s, greedy), p->cand + b * s->draws, NULL,
                    NULL);
    }
    pend_free(p);
    *p = s->pend[--s->npend];
}

/* ---- feeding ---- */

/* The tempered logits x (B, n) of tokens v0.. into the state (checked). */
static fls_status feed_tempered(fls_stream_t *s, const float *x, int64_t v0, int64_t n, float *noise)
{
    const int64_t B = s->B;
    if (!grouped(s)) {
        for (int64_t b = 0; b < B; b++) {
            const fls_row_params *rp = &s->rows[b];
            const float *xb = x + b * n;
            fls_lse part = fls_lse_span(xb, n);
            fls_lse_merge(&s->lse[b], part.m, part.s);
            for (int64_t d = 0; d < s->draws; d++) {
                const int noisy = fls_temperature_noisy(rp->temperature);
                if (noisy)
                    s->kern.gumbel(rp->seed, rp->offset, s->first_draw + (uint32_t)d, (uint64_t)v0, n, noise);
                fls_temperature_push_span(&s->cand[b * s->draws + d], xb, noisy ? noise : NULL,
                                          rp->temperature, v0, n);
            }
        }
        return FLS_OK;
    }
    const int64_t g = s->g;
    /* every split group this chunk touches gets its pending state first, so
     * nothing below can fail half-way */
    for (int64_t k = v0 / g; k * g < v0 + n; k++) {
        const int64_t a = k * g, e = a + group_len(s, k);
        const int whole = v0 <= a && e <= v0 + n;
        if (!whole && !pend_find(s, k) && !pend_new(s, k))
            return FLS_ERR_OUT_OF_MEMORY;
    }
    for (int64_t b = 0; b < B; b++) {
        fls_lse part = fls_lse_span(x + b * n, n);
        fls_lse_merge(&s->lse[b], part.m, part.s);
    }
    for (int64_t k = v0 / g; k * g < v0 + n; k++) {
        const int64_t a = k * g, e = a + group_len(s, k);
        const int64_t pa = a > v0 ? a : v0, pb = e < v0 + n ? e : v0 + n;
        if (v0 <= a && e <= v0 + n) { /* a whole group in this chunk */
            for (int64_t b = 0; b < B; b++) {
                const int greedy = !fls_temperature_noisy(s->rows[b].temperature);
                const float *xg = x + b * n + (a - v0);
                group_offer(s, b, k, fls_group_lse(xg, e - a, greedy), NULL, xg, noise);
            }
            continue;
        }
        pend_group *p = pend_find(s, k);
        for (int64_t b = 0; b < B; b++) {
            const fls_row_params *rp = &s->rows[b];
            const int noisy = fls_temperature_noisy(rp->temperature);
            const float *xp = x + b * n + (pa - v0);
            fls_lse part = fls_lse_span(xp, pb - pa);
            fls_lse_merge(&p->lse[b], part.m, part.s);
            for (int64_t d = 0; d < s->draws; d++) {
                if (noisy)
                    s->kern.gumbel(rp->seed, rp->offset, s->first_draw + (uint32_t)d, (uint64_t)pa, pb - pa,
                                   noise);
                fls_temperature_push_span(&p->cand[b * s->draws + d], xp, noisy ? noise : NULL,
                                          rp->temperature, pa, pb - pa);
            }
        }
        p->seen += pb - pa;
        if (p->seen == e - a)
            pend_complete(s, p);
    }
    return FLS_OK;
}

static fls_status check_chunk(fls_stream_t *s, int64_t v0, int64_t n)
{
    if (v0 < 0 || n <= 0 || v0 > s->V - n)
        return FLS_ERR_SIZE;
    if (cov_overlaps(s, v0, v0 + n))
        return FLS_ERR_PARAM; /* a token fed (or skipped) twice */
    return cov_reserve(s);
}

/* Float logits (B, n, row stride ld) of tokens v0..: tempered and checked,
 * then fed; the state is unchanged on error. */
/* Logits x (B, n) tempered in place and checked (a NaN, an l / T overflow). */
static fls_status temper_check(const fls_stream_t *s, float *x, int64_t n)
{
    int nan = 0, ovf = 0;
    for (int64_t b = 0; b < s->B; b++) {
        const float T = s->rows[b].temperature;
        for (int64_t i = 0; i < n; i++) {
            const float l = x[b * n + i];
            nan |= fls_bad_logit(l);
            const float t = fls_temper(l, T);
            ovf |= fls_temper_overflows(l, t);
            x[b * n + i] = t;
        }
    }
    return nan ? FLS_ERR_NAN : ovf ? FLS_ERR_TEMPERATURE : FLS_OK;
}

static fls_status feed_f32(fls_stream_t *s, float *x, int64_t v0, int64_t n)
{
    fls_status st0 = temper_check(s, x, n);
    if (st0 != FLS_OK)
        return st0;
    float *noise = malloc((size_t)n * sizeof(float));
    if (!noise)
        return FLS_ERR_OUT_OF_MEMORY;
    const int64_t npend = s->npend;
    fls_status st = feed_tempered(s, x, v0, n, noise);
    free(noise);
    if (st != FLS_OK) {
        /* only the pending groups made for this chunk can have been added */
        while (s->npend > npend)
            pend_free(&s->pend[--s->npend]);
        return st;
    }
    (void)cov_add(s, v0, v0 + n); /* cannot fail: reserved */
    s->tok_fed += n;
    s->chunks_fed++;
    return FLS_OK;
}

/* A chunk of n tokens from v0 may be fed: checked against the coverage, and
 * its B x n float buffer allocated (the caller frees it). */
static fls_status chunk_begin(fls_stream_t *s, int64_t v0, int64_t n, float **x)
{
    fls_status st = check_chunk(s, v0, n);
    if (st != FLS_OK)
        return st;
    if ((uint64_t)s->B * (uint64_t)n > SIZE_MAX / sizeof(float))
        return FLS_ERR_SIZE;
    *x = malloc((size_t)(s->B * n) * sizeof(float));
    return *x ? FLS_OK : FLS_ERR_OUT_OF_MEMORY;
}

/* ---- chunks in device memory (a CUDA context's state) ----
 * The chunk [v0, v0 + n) splits into a middle that the device samples (its
 * first token even, for Philox pairs; for the grouped method whole groups)
 * and at most two short edges, downloaded and fed here like host logits:
 * the keys are the same floats either way (the noise contract), so the
 * tokens are the one-shot call's whatever the chunking. */

/* The pending groups the edge [a, b) touches, made now (nothing fails later). */
static fls_status pend_prepare(fls_stream_t *s, int64_t a, int64_t b)
{
    if (!grouped(s) || a >= b)
        return FLS_OK;
    for (int64_t k = a / s->g; k * s->g < b; k++) {
        const int64_t ga = k * s->g, ge = ga + group_len(s, k);
        if (!(a <= ga && ge <= b) && !pend_find(s, k) && !pend_new(s, k))
            return FLS_ERR_OUT_OF_MEMORY;
    }
    return FLS_OK;
}

/* Logits L (B, n, row stride ld, fp32, device memory) of tokens v0..
 * (check_chunk has passed). */
static fls_status feed_device(fls_stream_t *s, const float *L, int64_t ld, int64_t v0, int64_t n)
{
    fls_status st = FLS_OK;
    const int64_t B = s->B, end = v0 + n, A = grouped(s) ? s->g : 2;
    int64_t a = (v0 + A - 1) / A * A;
    if (a > end)
        a = end;
    int64_t b = end == s->V ? end : end / A * A;
    if (b < a)
        b = a;
    const int64_t nh = a - v0, nt = end - b, nm = b - a;
    if ((uint64_t)B * (uint64_t)(nh + nt + 1) > SIZE_MAX / sizeof(float) ||
        (uint64_t)B * (uint64_t)s->draws > SIZE_MAX / sizeof(fls_gbest))
        return FLS_ERR_SIZE;
    float *xh = malloc((size_t)(B * (nh + nt) + 1) * sizeof(float));
    float *noise = malloc((size_t)(nh > nt ? nh : nt) * sizeof(float) + 1);
    fls_lse *lse = malloc((size_t)B * sizeof *lse);
    fls_cand *cand = grouped(s) ? NULL : malloc((size_t)(B * s->draws) * sizeof *cand);
    fls_gbest *gb = grouped(s) ? malloc((size_t)(B * s->draws) * sizeof *gb) : NULL;
    float *xt = xh ? xh + B * nh : NULL;
    const int64_t npend = s->npend;
    if (!xh || !noise || !lse || (grouped(s) ? !gb : !cand)) {
        st = FLS_ERR_OUT_OF_MEMORY;
        goto done;
    }
    /* the edges' logits, then the middle on the device; every check before
     * the state changes */
    if (nh)
        st = fls_cuda_memcpy2d(xh, (size_t)nh * sizeof(float), L, (size_t)ld * sizeof(float),
                               (size_t)nh * sizeof(float), (size_t)B, 0);
    if (st == FLS_OK && nt)
        st = fls_cuda_memcpy2d(xt, (size_t)nt * sizeof(float), L + (b - v0), (size_t)ld * sizeof(float),
                               (size_t)nt * sizeof(float), (size_t)B, 0);
    if (st == FLS_OK && nh)
        st = temper_check(s, xh, nh);
    if (st == FLS_OK && nt)
        st = temper_check(s, xt, nt);
    if (st == FLS_OK && nm)
        st = fls_cuda_stream_chunk(s->ctx, L + (a - v0), ld, B, nm, a, s->rows, s->draws, s->first_draw,
                                   grouped(s) ? (int)s->g : 0, cand, gb, lse);
    if (st == FLS_OK)
        st = pend_prepare(s, v0, a);
    if (st == FLS_OK)
        st = pend_prepare(s, b, end);
    if (st != FLS_OK) {
        while (s->npend > npend)
            pend_free(&s->pend[--s->npend]);
        goto done;
    }
    if (nm) {
        for (int64_t r = 0; r < B; r++)
            fls_lse_merge(&s->lse[r], lse[r].m, lse[r].s);
        for (int64_t i = 0; i < B * s->draws; i++) {
            if (grouped(s))
                fls_gbest_merge(&s->gbest[i], &gb[i]);
            else
                fls_cand_merge(&s->cand[i], &cand[i]);
        }
    }
    /* the edges cannot fail now: their pending groups exist */
    if (nh)
        (void)feed_tempered(s, xh, v0, nh, noise);
    if (nt)
        (void)feed_tempered(s, xt, b, nt, noise);
    (void)cov_add(s, v0, end); /* cannot fail: reserved */
    s->tok_fed += n;
    s->chunks_fed++;
done:
    free(xh);
    free(noise);
    free(lse);
    free(cand);
    free(gb);
    return st;
}

fls_status fls_stream_feed_logits(fls_stream_t *s, const fls_matrix *L, int64_t v0)
{
    if (!s || !L || !L->data)
        return FLS_ERR_NULL;
    const size_t es = fls_dtype_bytes(L->dtype);
    if (es == 0)
        return FLS_ERR_DTYPE;
    if ((uintptr_t)L->data % es)
        return FLS_ERR_ALIGN;
    if (L->rows != s->B || L->cols <= 0 || L->ld < L->cols)
        return L->rows != s->B ? FLS_ERR_SHAPE : FLS_ERR_SIZE;
    const int64_t n = L->cols;
    if (s->cuda) {
        if (fls_cuda_capturing(s->ctx))
            return FLS_ERR_UNSUPPORTED; /* synchronous copies: not inside a CUDA-graph capture */
        if (L->dtype != FLS_DTYPE_F32)
            return FLS_ERR_DTYPE; /* from-logits on the GPU takes fp32 logits */
        if (fls_cuda_check_device_pointer(L->data) != FLS_OK)
            return FLS_ERR_POINTER;
        const fls_status st = check_chunk(s, v0, n);
        return st == FLS_OK ? feed_device(s, (const float *)L->data, L->ld, v0, n) : st;
    }
    float *x;
    fls_status st = chunk_begin(s, v0, n, &x);
    if (st != FLS_OK)
        return st;
    for (int64_t b = 0; b < s->B; b++)
        s->kern.convert((const char *)L->data + (size_t)(b * L->ld) * es, L->dtype, n, x + b * n, n);
    st = feed_f32(s, x, v0, n);
    free(x);
    return st;
}

fls_status fls_stream_feed_fused(fls_stream_t *s, const fls_matrix *Wc, const fls_matrix *H, int64_t v0)
{
    if (!s || !Wc || !H || !Wc->data || !H->data)
        return FLS_ERR_NULL;
    const size_t ew = fls_dtype_bytes(Wc->dtype), eh = fls_dtype_bytes(H->dtype);
    if (ew == 0 || eh == 0)
        return FLS_ERR_DTYPE;
    if ((uintptr_t)Wc->data % ew || (uintptr_t)H->data % eh)
        return FLS_ERR_ALIGN;
    if (Wc->rows <= 0 || Wc->cols <= 0 || Wc->ld < Wc->cols || H->ld < H->cols)
        return FLS_ERR_SIZE;
    if (H->rows != s->B || Wc->cols != H->cols)
        return FLS_ERR_SHAPE;
    const int64_t n = Wc->rows;
    if (s->cuda) {
        if (fls_cuda_capturing(s->ctx))
            return FLS_ERR_UNSUPPORTED; /* synchronous copies: not inside a CUDA-graph capture */
        if (fls_cuda_check_device_pointer(Wc->data) != FLS_OK ||
            fls_cuda_check_device_pointer(H->data) != FLS_OK)
            return FLS_ERR_POINTER;
        fls_status st = check_chunk(s, v0, n);
        if (st != FLS_OK)
            return st;
        if ((uint64_t)s->B * (uint64_t)n > SIZE_MAX / sizeof(float))
            return FLS_ERR_SIZE;
        const size_t len = (size_t)(s->B * n);
        if (len > s->dbuf_len) { /* the chunk's logits on the device, kept for the next feed */
            void *p = NULL;
            st = fls_cuda_malloc(&p, len * sizeof(float));
            if (st != FLS_OK)
                return st;
            fls_cuda_free(s->dbuf);
            s->dbuf = p;
            s->dbuf_len = len;
        }
        st = fls_cuda_chunk_logits(s->ctx, Wc, H, s->dbuf);
        return st == FLS_OK ? feed_device(s, s->dbuf, n, v0, n) : st;
    }
    float *x;
    fls_status st = chunk_begin(s, v0, n, &x);
    if (st != FLS_OK)
        return st;
    st = fls_cpu_logits(s->ctx, Wc, H, x); /* the fused path's kernels: the same floats */
    if (st == FLS_OK)
        st = feed_f32(s, x, v0, n);
    free(x);
    return st;
}

/* ---- early finalization ---- */

fls_status fls_stream_skip(fls_stream_t *s, int64_t v0, int64_t n, const float *upper, int *skipped)
{
    if (!s || !upper || !skipped)
        return FLS_ERR_NULL;
    *skipped = 0;
    fls_status st = check_chunk(s, v0, n);
    if (st != FLS_OK)
        return st;
    for (int64_t b = 0; b < s->B; b++)
        if (upper[b] != upper[b])
            return FLS_ERR_NAN;
    if (grouped(s) && (v0 % s->g != 0 || ((v0 + n) % s->g != 0 && v0 + n != s->V)))
        return FLS_OK; /* only whole groups can be skipped */
    float *noise = malloc((size_t)n * sizeof(float));
    if (!noise)
        return FLS_ERR_OUT_OF_MEMORY;
    int can_win = 0;
    for (int64_t b = 0; b < s->B && !can_win; b++) {
        const fls_row_params *rp = &s->rows[b];
        const float T = rp->temperature;
        const int noisy = fls_temperature_noisy(T);
        /* y >= every tempered logit of the chunk: division is monotone */
        const float y = fls_temper(upper[b], T);
        for (int64_t d = 0; d < s->draws && !can_win; d++) {
            const uint32_t draw = s->first_draw + (uint32_t)d;
            if (!grouped(s)) {
                const fls_cand *c = &s->cand[b * s->draws + d];
                float gmax = 0.0f;
                if (noisy) {
                    s->kern.gumbel(rp->seed, rp->offset, draw, (uint64_t)v0, n, noise);
                    gmax = -INFINITY;
                    for (int64_t i = 0; i < n; i++)
                        gmax = noise[i] > gmax ? noise[i] : gmax;
                }
                /* key_v = fl(x_v + G_v) <= fl(y + G_max) (monotone rounding) */
                const float kb = noisy ? FLS_FADD(y, gmax) : y;
                can_win = c->idx < 0 || !(kb < c->key);
            } else {
                const fls_gbest *gb = &s->gbest[b * s->draws + d];
                const uint64_t gk = fls_group_key(rp->seed);
                for (int64_t k = v0 / s->g; k * s->g < v0 + n && !can_win; k++) {
                    /* L_k <= y + log(n_k), plus the rounding of a double sum */
                    const double n_k = (double)group_len(s, k);
                    const double Lb =
                        noisy ? (double)y + log(n_k) + 1e-9 * (1.0 + fabs((double)y)) : (double)y;
                    const double kb =
                        noisy ? Lb + (double)fls_group_gumbel(gk, rp->offset, draw, (uint64_t)k) : Lb;
                    can_win = gb->group < 0 || !(kb < gb->gkey);
                }
            }
        }
    }
    free(noise);
    if (can_win)
        return FLS_OK;
    (void)cov_add(s, v0, v0 + n);
    s->tok_skip += n;
    s->chunks_skip++;
    *skipped = 1;
    return FLS_OK;
}

/* ---- merge, finalize, progress ---- */

static int same_request(const fls_stream_t *a, const fls_stream_t *b)
{
    return a->B == b->B && a->V == b->V && a->draws == b->draws && a->g == b->g && a->method == b->method &&
           a->first_draw == b->first_draw && memcmp(a->rows, b->rows, (size_t)a->B * sizeof *a->rows) == 0;
}

fls_status fls_stream_merge(fls_stream_t *dst, const fls_stream_t *src)
{
    if (!dst || !src)
        return FLS_ERR_NULL;
    if (dst == src || !same_request(dst, src))
        return FLS_ERR_PARAM;
    for (int64_t i = 0; i < src->ncov; i++)
        if (cov_overlaps(dst, src->cov[i].a, src->cov[i].b))
            return FLS_ERR_PARAM; /* the two states share tokens */
    /* room first, so the merge cannot fail half-way */
    if (dst->capcov < dst->ncov + src->ncov) {
        interval *c = realloc(dst->cov, (size_t)(dst->ncov + src->ncov) * sizeof *c);
        if (!c)
            return FLS_ERR_OUT_OF_MEMORY;
        dst->cov = c;
        dst->capcov = dst->ncov + src->ncov;
    }
    const int64_t npend0 = dst->npend;
    for (int64_t i = 0; i < src->npend; i++)
        if (!pend_find(dst, src->pend[i].k) && !pend_new(dst, src->pend[i].k)) {
            while (dst->npend > npend0)
                pend_free(&dst->pend[--dst->npend]);
            return FLS_ERR_OUT_OF_MEMORY;
        }
    for (int64_t i = 0; i < src->ncov; i++)
        (void)cov_add(dst, src->cov[i].a, src->cov[i].b);
    for (int64_t b = 0; b < dst->B; b++)
        fls_lse_merge(&dst->lse[b], src->lse[b].m, src->lse[b].s);
    for (int64_t i = 0; i < dst->B * dst->draws; i++) {
        if (grouped(dst))
            fls_gbest_merge(&dst->gbest[i], &src->gbest[i]);
        else
            fls_cand_merge(&dst->cand[i], &src->cand[i]);
    }
    for (int64_t i = 0; i < src->npend; i++) {
        const pend_group *q = &src->pend[i];
        pend_group *p = pend_find(dst, q->k);
        for (int64_t b = 0; b < dst->B; b++)
            fls_lse_merge(&p->lse[b], q->lse[b].m, q->lse[b].s);
        for (int64_t j = 0; j < dst->B * dst->draws; j++)
            fls_cand_merge(&p->cand[j], &q->cand[j]);
        p->seen += q->seen;
        if (p->seen == group_len(dst, p->k))
            pend_complete(dst, p);
    }
    dst->tok_fed += src->tok_fed;
    dst->tok_skip += src->tok_skip;
    dst->chunks_fed += src->chunks_fed;
    dst->chunks_skip += src->chunks_skip;
    return FLS_OK;
}

/* The outputs into host arrays (checked first). */
static fls_status finalize_host(const fls_stream_t *s, const fls_outputs *out)
{
    for (int64_t i = 0; i < s->B * s->draws; i++)
        if (grouped(s) ? s->gbest[i].group < 0 : s->cand[i].idx < 0)
            return FLS_ERR_ALL_MASKED;
    /* the key resolution (rule.h): the key of each row's draw-0 winner */
    for (int64_t b = 0; b < s->B; b++) {
        const int64_t i = b * s->draws;
        if (fls_key_refused(fls_temperature_noisy(s->rows[b].temperature),
                            grouped(s) ? s->gbest[i].gkey : (double)s->cand[i].key))
            return FLS_ERR_TEMPERATURE;
    }
    for (int64_t b = 0; b < s->B; b++) {
        const float T = s->rows[b].temperature;
        const int noisy = fls_temperature_noisy(T);
        const double lse = fls_lse_value(s->lse[b].m, s->lse[b].s, !noisy);
        if (out->logsumexp)
            out->logsumexp[b] = (float)lse;
        for (int64_t d = 0; d < s->draws; d++) {
            const int64_t i = b * s->draws + d;
            const int64_t tok = grouped(s) ? s->gbest[i].tok : s->cand[i].idx;
            const float x = grouped(s) ? s->gbest[i].x : s->cand[i].x;
            out->tokens[i] = tok;
            if (out->logprobs)
                out->logprobs[i] = noisy ? (float)((double)x - lse) : 0.0f;
        }
    }
    return FLS_OK;
}

fls_status fls_stream_finalize(const fls_stream_t *s, const fls_outputs *out)
{
    if (!s || !out || !out->tokens)
        return FLS_ERR_NULL;
    if (s->tok_fed + s->tok_skip != s->V || s->npend != 0)
        return FLS_ERR_SIZE; /* tokens not fed yet */
    if (s->tok_skip > 0 && (out->logsumexp || out->logprobs))
        return FLS_ERR_UNSUPPORTED; /* a skipped chunk's mass is unknown */
    if (!s->cuda)
        return finalize_host(s, out);
    /* a CUDA context's outputs are device memory: computed here, then copied
     * (synchronously: not inside a CUDA-graph capture) */
    if (fls_cuda_capturing(s->ctx))
        return FLS_ERR_UNSUPPORTED;
    const void *dev[3] = {out->tokens, out->logsumexp, out->logprobs};
    for (int i = 0; i < 3; i++)
        if (dev[i] && fls_cuda_check_device_pointer(dev[i]) != FLS_OK)
            return FLS_ERR_POINTER;
    const size_t nd = (size_t)(s->B * s->draws);
    fls_outputs h = {malloc(nd * sizeof(int64_t)),
                     out->logsumexp ? malloc((size_t)s->B * sizeof(float)) : NULL,
                     out->logprobs ? malloc(nd * sizeof(float)) : NULL};
    fls_status st = FLS_ERR_OUT_OF_MEMORY;
    if (h.tokens && (!out->logsumexp || h.logsumexp) && (!out->logprobs || h.logprobs))
        st = finalize_host(s, &h);
    if (st == FLS_OK)
        st = fls_cuda_memcpy(out->tokens, h.tokens, nd * sizeof(int64_t), 1);
    if (st == FLS_OK && out->logsumexp)
        st = fls_cuda_memcpy(out->logsumexp, h.logsumexp, (size_t)s->B * sizeof(float), 1);
    if (st == FLS_OK && out->logprobs)
        st = fls_cuda_memcpy(out->logprobs, h.logprobs, nd * sizeof(float), 1);
    free(h.tokens);
    free(h.logsumexp);
    free(h.logprobs);
    return st;
}

fls_status fls_stream_progress(const fls_stream_t *s, int64_t *tokens_fed, int64_t *tokens_skipped,
                               int64_t *chunks_fed, int64_t *chunks_skipped)
{
    if (!s)
        return FLS_ERR_NULL;
    if (tokens_fed)
        *tokens_fed = s->tok_fed;
    if (tokens_skipped)
        *tokens_skipped = s->tok_skip;
    if (chunks_fed)
        *chunks_fed = s->chunks_fed;
    if (chunks_skipped)
        *chunks_skipped = s->chunks_skip;
    return FLS_OK;
}

/* ---- bytes ---- */

static size_t cand_bytes(const fls_stream_t *s)
{
    return (size_t)(s->B * s->draws) * (grouped(s) ? sizeof(fls_gbest) : sizeof(fls_cand));
}

static size_t pend_bytes(const fls_stream_t *s)
{
    return 2 * sizeof(int64_t) + (size_t)s->B * sizeof(fls_lse) +
           (size_t)(s->B * s->draws) * sizeof(fls_cand);
}

fls_status fls_stream_serialize(const fls_stream_t *s, void *buf, size_t *bytes)
{
    if (!s || !bytes)
        return FLS_ERR_NULL;
    const size_t need = sizeof(stream_header) + (size_t)s->B * (sizeof(fls_row_params) + sizeof(fls_lse)) +
                        cand_bytes(s) + (size_t)s->ncov * sizeof(interval) + (size_t)s->npend * pend_bytes(s);
    if (!buf) {
        *bytes = need;
        return FLS_OK;
    }
    if (*bytes < need)
        return FLS_ERR_SIZE;
    stream_header h;
    memset(&h, 0, sizeof h);
    h.magic = STREAM_MAGIC;
    h.version = STREAM_VERSION;
    h.B = s->B;
    h.V = s->V;
    h.draws = s->draws;
    h.g = s->g;
    h.method = s->method;
    h.first_draw = s->first_draw;
    h.ncov = s->ncov;
    h.npend = s->npend;
    h.tok_fed = s->tok_fed;
    h.tok_skip = s->tok_skip;
    h.chunks_fed = s->chunks_fed;
    h.chunks_skip = s->chunks_skip;
    char *p = buf;
#define PUT(src, n)                                                                                          \
    do {                                                                                                     \
        memcpy(p, (src), (n));                                                                               \
        p += (n);                                                                                            \
    } while (0)
    PUT(&h, sizeof h);
    PUT(s->rows, (size_t)s->B * sizeof(fls_row_params));
    PUT(s->lse, (size_t)s->B * sizeof(fls_lse));
    PUT(grouped(s) ? (const void *)s->gbest : (const void *)s->cand, cand_bytes(s));
    if (s->ncov)
        PUT(s->cov, (size_t)s->ncov * sizeof(interval));
    for (int64_t i = 0; i < s->npend; i++) {
        PUT(&s->pend[i].k, sizeof(int64_t));
        PUT(&s->pend[i].seen, sizeof(int64_t));
        PUT(s->pend[i].lse, (size_t)s->B * sizeof(fls_lse));
        PUT(s->pend[i].cand, (size_t)(s->B * s->draws) * sizeof(fls_cand));
    }
#undef PUT
    *bytes = need;
    return FLS_OK;
}

/* Reads a state written by fls_stream_serialize; every field is checked
 * (FLS_ERR_FORMAT for anything a valid state cannot hold). */
fls_status fls_stream_deserialize(fls_stream_t **stream, fls_context_t *ctx, const void *buf, size_t bytes)
{
    if (!stream || !ctx || !buf)
        return FLS_ERR_NULL;
    stream_header h;
    if (bytes < sizeof h)
        return FLS_ERR_FORMAT;
    memcpy(&h, buf, sizeof h);
    if (h.magic != STREAM_MAGIC || h.version != STREAM_VERSION)
        return FLS_ERR_FORMAT;
    if (h.B <= 0 || h.V <= 0 || h.V >= ((int64_t)1 << 33) - 1 || h.draws <= 0 ||
        h.draws > (int64_t)UINT32_MAX || h.B > ((int64_t)1 << 30) || h.draws > ((int64_t)1 << 40) / h.B ||
        (h.method != FLS_METHOD_FUSED && h.method != FLS_METHOD_GROUPED) || h.g < 2 ||
        h.g > ((int64_t)1 << 20) || (h.g & (h.g - 1)) || h.ncov < 0 || h.ncov > h.V || h.npend < 0 ||
        h.npend > h.V / 2 + 1 || h.tok_fed < 0 || h.tok_skip < 0 || h.tok_fed > h.V - h.tok_skip ||
        h.chunks_fed < 0 || h.chunks_skip < 0 || (uint64_t)h.first_draw + (uint64_t)h.draws > UINT32_MAX)
        return FLS_ERR_FORMAT;
    /* the size the header promises, checked against the buffer before anything
     * is allocated: a corrupted count must not become a huge allocation */
    const uint64_t Bd = (uint64_t)h.B * (uint64_t)h.draws; /* <= 2^40: checked above */
    const uint64_t cand = Bd * (h.method == FLS_METHOD_GROUPED ? sizeof(fls_gbest) : sizeof(fls_cand));
    const uint64_t pend = 2 * sizeof(int64_t) + (uint64_t)h.B * sizeof(fls_lse) + Bd * sizeof(fls_cand);
    uint64_t need = sizeof h + (uint64_t)h.B * (sizeof(fls_row_params) + sizeof(fls_lse)) + cand;
    if (need > bytes || (uint64_t)h.ncov > (bytes - need) / sizeof(interval))
        return FLS_ERR_FORMAT;
    need += (uint64_t)h.ncov * sizeof(interval);
    if ((uint64_t)h.npend > (bytes - need) / pend || need + (uint64_t)h.npend * pend != bytes)
        return FLS_ERR_FORMAT;
    fls_stream_t *s = stream_alloc(ctx, h.B, h.V, h.draws, h.method);
    if (!s)
        return FLS_ERR_OUT_OF_MEMORY;
    s->g = h.g;
    s->first_draw = h.first_draw;
    const char *p = (const char *)buf + sizeof h;
#define GET(dst, n)                                                                                          \
    do {                                                                                                     \
        memcpy((dst), p, (n));                                                                               \
        p += (n);                                                                                            \
    } while (0)
    GET(s->rows, (size_t)s->B * sizeof(fls_row_params));
    GET(s->lse, (size_t)s->B * sizeof(fls_lse));
    GET(grouped(s) ? (void *)s->gbest : (void *)s->cand, cand_bytes(s));
    fls_status st = FLS_OK;
    for (int64_t b = 0; b < s->B && st == FLS_OK; b++)
        if (!(s->rows[b].temperature >= 0.0f && s->rows[b].temperature < INFINITY))
            st = FLS_ERR_FORMAT;
    int64_t covered = 0;
    for (int64_t i = 0; i < h.ncov && st == FLS_OK; i++) {
        interval iv;
        GET(&iv, sizeof iv);
        if (iv.a < 0 || iv.b <= iv.a || iv.b > s->V || (s->ncov && iv.a <= s->cov[s->ncov - 1].b - 1))
            st = FLS_ERR_FORMAT;
        else if ((st = cov_reserve(s)) == FLS_OK)
            s->cov[s->ncov++] = iv, covered += iv.b - iv.a;
    }
    if (st == FLS_OK && covered != h.tok_fed + h.tok_skip)
        st = FLS_ERR_FORMAT;
    for (int64_t i = 0; i < h.npend && st == FLS_OK; i++) {
        int64_t k, seen;
        GET(&k, sizeof k);
        GET(&seen, sizeof seen);
        pend_group *q;
        if (!grouped(s) || k < 0 || k * s->g >= s->V || seen <= 0 || seen >= group_len(s, k) ||
            pend_find(s, k))
            st = FLS_ERR_FORMAT;
        else if (!(q = pend_new(s, k)))
            st = FLS_ERR_OUT_OF_MEMORY;
        else {
            q->seen = seen;
            GET(q->lse, (size_t)s->B * sizeof(fls_lse));
            GET(q->cand, (size_t)(s->B * s->draws) * sizeof(fls_cand));
        }
    }
#undef GET
    /* candidates must name tokens of this vocabulary */
    for (int64_t i = 0; i < s->B * s->draws && st == FLS_OK; i++) {
        const int64_t t = grouped(s) ? s->gbest[i].tok : s->cand[i].idx;
        if (t < -1 || t >= s->V)
            st = FLS_ERR_FORMAT;
    }
    if (st != FLS_OK) {
        fls_stream_destroy(s);
        return st;
    }
    s->tok_fed = h.tok_fed;
    s->tok_skip = h.tok_skip;
    s->chunks_fed = h.chunks_fed;
    s->chunks_skip = h.chunks_skip;
    *stream = s;
    return FLS_OK;
}

/* ---- norm bounds ---- */

fls_status fls_chunk_max_norms(const fls_matrix *W, int64_t chunk, float *out)
{
    if (!W || !W->data || !out)
        return FLS_ERR_NULL;
    const size_t es = fls_dtype_bytes(W->dtype);
    if (es == 0)
        return FLS_ERR_DTYPE;
    if (W->rows <= 0 || W->cols <= 0 || W->ld < W->cols || chunk <= 0)
        return FLS_ERR_SIZE;
    float *row = malloc((size_t)W->cols * sizeof(float));
    if (!row)
        return FLS_ERR_OUT_OF_MEMORY;
    for (int64_t c = 0; c * chunk < W->rows; c++) {
        double mx = 0.0;
        for (int64_t v = c * chunk; v < W->rows && v < (c + 1) * chunk; v++) {
            fls_convert_row((const char *)W->data + (size_t)(v * W->ld) * es, W->dtype, W->cols, row,
                            W->cols);
            double s = 0.0;
            for (int64_t i = 0; i < W->cols; i++)
                s += (double)row[i] * (double)row[i];
            mx = s > mx ? s : mx;
        }
        /* sqrt in double (relative error 2^-53), rounded up to float */
        const double r = sqrt(mx) * (1.0 + 0x1p-50);
        float f = (float)r;
        if ((double)f < r)
            f = nextafterf(f, INFINITY);
        out[c] = f;
    }
    free(row);
    return FLS_OK;
}

float fls_logit_bound(float wnorm, float hnorm, int64_t D)
{
    /* |fl(w . h)| <= (1 + gamma_D) ||w|| ||h||, gamma_D = D u / (1 - D u),
     * u = 2^-24, for any order of a D-term fp32 sum of exact products */
    const double u = 0x1p-24, Du = (double)D * u;
    if (!(Du < 0.5) || !(wnorm >= 0.0f) || !(hnorm >= 0.0f))
        return INFINITY;
    const double r = (double)wnorm * (double)hnorm * (1.0 + 2.0 * Du / (1.0 - Du)) * (1.0 + 0x1p-50);
    float f = (float)r;
    if ((double)f < r)
        f = nextafterf(f, INFINITY);
    return f;
}
