/*
 * test_mods.c — the allowed-token bitmask, the sparse logit bias and the
 * repetition / presence / frequency penalties (docs/RULES.md, "Masks, bias
 * and penalties"). The key property: a call with them gives the tokens,
 * logsumexp and logprobs, bit for bit, of a plain call on logits this test
 * changes itself by the documented formula, on every path that takes them
 * (fused and from-logits, the flat method with and without rules, the
 * exact second pass from kept and from recomputed logits, the unfused
 * methods, the grouped method, several threads). Also: every bad value is
 * FLS_ERR_PARAM (or FLS_ERR_ALIGN), writes nothing and is named by
 * fls_params_explain; a row with nothing allowed is FLS_ERR_ALL_MASKED;
 * streams refuse them; a caller of an older fls_params never sees them.
 */
#include "tests/unit/common.h"
#include "lib/front/internal.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    USE_MASK = 1,
    USE_BIAS = 2,
    USE_PEN = 4,
    USE_MASK_ROWS = 8, /* bitmask_rows: some rows unmasked */
    USE_ROW_PEN = 16,  /* per-row penalty arrays */
};

#define MAXB 5

/* The inputs of one call, owned by the test. */
typedef struct mods_data {
    int32_t *mask;
    int64_t ld;       /* the words' row stride */
    int64_t ld_param; /* bitmask_ld: ld, or 0 where ld is ceil(V / 32) */
    uint8_t rows[MAXB];
    int64_t *bias_ids;
    float *bias_vals;
    int64_t K;
    int64_t *seen_ids;
    int32_t *seen_counts;
    int64_t S;
    float rep[MAXB], pres[MAXB], freq[MAXB];
} mods_data;

/* n distinct ids in [0, V) (n <= V), padded with -1 at random places. */
static void distinct_ids(int64_t *ids, int64_t n, int64_t V, uint64_t *rs)
{
    for (int64_t i = 0; i < n; i++) {
        if (trng_int(rs, 0, 5) == 0) {
            ids[i] = -1;
            continue;
        }
        for (;;) {
            const int64_t v = trng_int(rs, 0, V - 1);
            int64_t j = 0;
            while (j < i && ids[j] != v)
                j++;
            if (j == i) {
                ids[i] = v;
                break;
            }
        }
    }
}

static void mods_make(mods_data *m, unsigned what, int64_t B, int64_t V, uint64_t *rs)
{
    memset(m, 0, sizeof *m);
    const int64_t words = (V + 31) / 32;
    m->ld = trng_int(rs, 0, 1) ? words : words + 3;
    m->ld_param = m->ld == words && trng_int(rs, 0, 1) ? 0 : m->ld;
    m->mask = malloc((size_t)(B * m->ld) * sizeof *m->mask);
    for (int64_t i = 0; i < B * m->ld; i++) {
        /* about 3 in 4 tokens allowed; bits past V random (ignored) */
        uint32_t w = (uint32_t)trng_next(rs) | (uint32_t)trng_next(rs);
        m->mask[i] = (int32_t)w;
    }
    for (int64_t b = 0; b < B; b++)
        m->rows[b] = (uint8_t)(b % 3 != 1);
    m->K = V < 8 ? V : 8;
    m->S = V < 10 ? V : 10;
    m->bias_ids = malloc((size_t)(B * m->K) * sizeof *m->bias_ids);
    m->bias_vals = malloc((size_t)(B * m->K) * sizeof *m->bias_vals);
    m->seen_ids = malloc((size_t)(B * m->S) * sizeof *m->seen_ids);
    m->seen_counts = malloc((size_t)(B * m->S) * sizeof *m->seen_counts);
    for (int64_t b = 0; b < B; b++) {
        distinct_ids(m->bias_ids + b * m->K, m->K, V, rs);
        distinct_ids(m->seen_ids + b * m->S, m->S, V, rs);
        /* some seen ids biased too */
        if (m->K > 1 && m->S > 1 && trng_int(rs, 0, 1)) {
            const int64_t v = m->seen_ids[b * m->S + 1];
            int64_t i = 1;
            while (i < m->K && m->bias_ids[b * m->K + i] != v)
                i++;
            if (i == m->K) /* not listed twice */
                m->bias_ids[b * m->K] = v;
        }
        for (int64_t i = 0; i < m->K; i++)
            m->bias_vals[b * m->K + i] = trng_float(rs) * 8.0f;
        for (int64_t i = 0; i < m->S; i++)
            m->seen_counts[b * m->S + i] = (int32_t)trng_int(rs, 0, 4);
        const float reps[] = {1.0f, 1.3f, 0.8f, 2.0f};
        m->rep[b] = reps[trng_int(rs, 0, 3)];
        m->pres[b] = trng_float(rs) * 2.0f;
        m->freq[b] = trng_float(rs);
    }
    (void)what;
}

static void mods_free(mods_data *m)
{
    free(m->mask);
    free(m->bias_ids);
    free(m->bias_vals);
    free(m->seen_ids);
    free(m->seen_counts);
}

static void mods_set(fls_params *p, const mods_data *m, unsigned what)
{
    if (what & USE_MASK) {
        p->allowed_bitmask = m->mask;
        p->bitmask_ld = m->ld_param;
        if (what & USE_MASK_ROWS)
            p->bitmask_rows = m->rows;
    }
    if (what & USE_BIAS) {
        p->logit_bias_ids = m->bias_ids;
        p->logit_bias_values = m->bias_vals;
        p->logit_bias_k = m->K;
    }
    if (what & USE_PEN) {
        p->seen_ids = m->seen_ids;
        p->seen_counts = m->seen_counts;
        p->seen_k = m->S;
        p->repetition_penalty = m->rep[0];
        p->presence_penalty = m->pres[0];
        p->frequency_penalty = m->freq[0];
        if (what & USE_ROW_PEN) {
            p->row_repetition_penalty = m->rep;
            p->row_presence_penalty = m->pres;
            p->row_frequency_penalty = m->freq;
        }
    }
}

/* The documented change (docs/RULES.md), written from the text: L (B, V)
 * in place. */
static void ref_apply(const fls_params *p, int64_t B, int64_t V, float *L)
{
    const int64_t ld = p->bitmask_ld ? p->bitmask_ld : (V + 31) / 32;
    for (int64_t b = 0; b < B; b++) {
        float *l = L + b * V;
        const float r = p->row_repetition_penalty ? p->row_repetition_penalty[b] : p->repetition_penalty;
        const float pr = p->row_presence_penalty ? p->row_presence_penalty[b] : p->presence_penalty;
        const float fr = p->row_frequency_penalty ? p->row_frequency_penalty[b] : p->frequency_penalty;
        for (int64_t i = 0; i < p->seen_k; i++) {
            const int64_t v = p->seen_ids[b * p->seen_k + i];
            if (v == -1)
                continue;
            const int32_t c = p->seen_counts ? p->seen_counts[b * p->seen_k + i] : 0;
            float x = l[v];
            if (r != 1.0f)
                x = x > 0.0f ? x / r : x * r;
            const float fc = fr * (float)c;
            x = x - fc;
            x = x - (c > 0 ? pr : 0.0f);
            l[v] = x;
        }
        for (int64_t i = 0; i < p->logit_bias_k; i++) {
            const int64_t v = p->logit_bias_ids[b * p->logit_bias_k + i];
            if (v != -1)
                l[v] = l[v] + p->logit_bias_values[b * p->logit_bias_k + i];
        }
        if (p->allowed_bitmask && (!p->bitmask_rows || p->bitmask_rows[b]))
            for (int64_t v = 0; v < V; v++)
                if (!(((uint32_t)p->allowed_bitmask[b * ld + v / 32] >> (v % 32)) & 1u))
                    l[v] = -INFINITY;
    }
}

/* Guard-filled outputs of n tokens and B rows. */
typedef struct outs {
    int64_t tok[MAXB * 3 * 3];
    float lse[MAXB];
    float lp[MAXB * 3 * 3];
    fls_outputs o;
} outs;

static void outs_guard(outs *x)
{
    for (size_t i = 0; i < sizeof x->tok / sizeof x->tok[0]; i++)
        x->tok[i] = GUARD_TOKEN;
    for (size_t i = 0; i < sizeof x->lp / sizeof x->lp[0]; i++)
        x->lp[i] = u2f(GUARD_F32_BITS);
    for (size_t i = 0; i < MAXB; i++)
        x->lse[i] = u2f(GUARD_F32_BITS);
    x->o = (fls_outputs){x->tok, x->lse, x->lp};
}

static int outs_untouched(const outs *x)
{
    for (size_t i = 0; i < sizeof x->tok / sizeof x->tok[0]; i++)
        if (x->tok[i] != GUARD_TOKEN || f2u(x->lp[i]) != GUARD_F32_BITS)
            return 0;
    for (size_t i = 0; i < MAXB; i++)
        if (f2u(x->lse[i]) != GUARD_F32_BITS)
            return 0;
    return 1;
}

static void rule_set(fls_params *p, int rule)
{
    switch (rule) {
    case 1:
        p->top_k = 7;
        break;
    case 2:
        p->top_p = 0.8f;
        break;
    case 3:
        p->min_p = 0.05f;
        break;
    case 4:
        p->top_k = 20;
        p->top_p = 0.9f;
        p->min_p = 0.02f;
        p->filter = "top-nsigma";
        p->filter_value = 1.5;
        break;
    case 5:
        p->without_replacement_k = 3;
        p->top_k = 12;
        break;
    default:
        break;
    }
}
#define NRULES 6

static const unsigned whats[] = {USE_MASK, USE_BIAS, USE_PEN, USE_MASK | USE_BIAS | USE_PEN,
                                 USE_MASK | USE_MASK_ROWS | USE_BIAS | USE_PEN | USE_ROW_PEN};

static void expect_same(fls_status sa, const outs *a, fls_status sb, const outs *b, const char *what)
{
    cr_assert_eq(sa, sb, "%s: status %s, expected %s", what, fls_status_string(sa), fls_status_string(sb));
    cr_assert(memcmp(a->tok, b->tok, sizeof a->tok) == 0, "%s: tokens differ", what);
    cr_assert(memcmp(a->lse, b->lse, sizeof a->lse) == 0, "%s: logsumexp differs", what);
    cr_assert(memcmp(a->lp, b->lp, sizeof a->lp) == 0, "%s: logprobs differ", what);
}

/* The sweeps' setup: exact-valued W (V, D) and H (B, D), so the fused
 * product is the raw logits bit for bit, and the raw logits as a matrix. */
typedef struct sweep_in {
    int64_t B, V, D;
    float *Wv, *Hv, *raw;
    tmat W, H, L;
} sweep_in;

static void sweep_make(sweep_in *s, int64_t B, int64_t V, int64_t D, uint64_t wseed, uint64_t hseed)
{
    s->B = B, s->V = V, s->D = D;
    s->Wv = exact_w(V, D, wseed);
    s->Hv = exact_h(B, D, hseed);
    s->raw = exact_logits(s->Wv, s->Hv, V, B, D);
    s->W = tmat_make(FLS_DTYPE_F32, V, D, D, s->Wv);
    s->H = tmat_make(FLS_DTYPE_F32, B, D, D, s->Hv);
    s->L = tmat_make(FLS_DTYPE_F32, B, V, V, s->raw);
}

static void sweep_free(sweep_in *s)
{
    tmat_free(&s->W);
    tmat_free(&s->H);
    tmat_free(&s->L);
    free(s->Wv);
    free(s->Hv);
    free(s->raw);
}

/* The sweeps' contexts: one thread, three, and two threads keeping no
 * logits for the exact second pass (it recomputes them). */
#define NCTX 3
static void sweep_contexts(fls_context_t *ctxs[NCTX])
{
    ctxs[0] = ctx_make(1, FLS_SIMD_AUTO, 256);
    ctxs[1] = ctx_make(3, FLS_SIMD_AUTO, 256);
    ctxs[2] = ctx_make(2, FLS_SIMD_AUTO, 256);
    const fls_cpu_opts no_keep = {1};
    fls_cpu_set_dev_opts(ctxs[2], &no_keep);
}

/* The plain call (params `plain`) on the logits changed by `with`'s inputs
 * (ref_apply), on ctxs[0]: its status, outputs in *ref. `with` must be
 * valid (fls_params_explain). */
static fls_status plain_on_changed(fls_context_t *ctx, const sweep_in *s, const fls_params *plain,
                                   const fls_params *with, outs *ref)
{
    float *changed = malloc((size_t)(s->B * s->V) * sizeof *changed);
    memcpy(changed, s->raw, (size_t)(s->B * s->V) * sizeof *changed);
    ref_apply(with, s->B, s->V, changed);
    tmat Lc = tmat_make_rounded(FLS_DTYPE_F32, s->B, s->V, s->V, changed);
    outs_guard(ref);
    const fls_status st = fls_sample_logits(ctx, &Lc.m, plain, &ref->o);
    tmat_free(&Lc);
    free(changed);
    return st;
}

/* The call with the inputs, from the raw logits and fused, on each of the
 * n contexts: the status and outputs of the reference (sref, ref). */
static void expect_paths(fls_context_t *const *ctxs, int n, const sweep_in *s, const fls_params *with,
                         fls_status sref, const outs *ref, const char *label)
{
    for (int ci = 0; ci < n; ci++) {
        char what[224];
        outs got;
        outs_guard(&got);
        fls_status st = fls_sample_logits(ctxs[ci], &s->L.m, with, &got.o);
        snprintf(what, sizeof what, "logits %s ctx %d", label, ci);
        expect_same(st, &got, sref, ref, what);
        outs_guard(&got);
        st = fls_sample_fused(ctxs[ci], &s->W.m, &s->H.m, with, &got.o);
        memcpy(what, "fused ", 6);
        expect_same(st, &got, sref, ref, what);
    }
}

/* (a) with the inputs == plain on the changed logits, bit for bit */
Test(mods, exact_against_changed_logits)
{
    fls_context_t *ctxs[NCTX];
    sweep_contexts(ctxs);
    /* valgrind: a subsample (seed 0 has the smallest V, seed 2 second passes on every context) */
    const int64_t seeds[] = {0, 2, 1, 3, 4};
    const int64_t nseeds = sweep_scale_shift() > 0 ? 2 : 5;
    int64_t ok_calls = 0, calls = 0;
    for (int64_t si = 0; si < nseeds; si++) {
        const int64_t seed = seeds[si];
        uint64_t rs = 0x9E37u + (uint64_t)seed * 7919u;
        const int64_t B = trng_int(&rs, 1, MAXB);
        const int64_t V = seed == 0 ? 33 : trng_int(&rs, 40, 3000);
        sweep_in in;
        sweep_make(&in, B, V, 24, 11 + (uint64_t)seed, 13 + (uint64_t)seed);
        float temps[MAXB];
        const float tset[] = {0.0f, 0.7f, 1.0f, 1.5f, 0.25f};
        for (int64_t b = 0; b < B; b++)
            temps[b] = tset[(b + seed) % 5];
        for (size_t wi = 0; wi < sizeof whats / sizeof whats[0]; wi++) {
            mods_data m;
            mods_make(&m, whats[wi], B, V, &rs);
            for (int rule = 0; rule < NRULES; rule++) {
                for (int method = 0; method < 4; method++) {
                    if (method == FLS_METHOD_UNFUSED_MULTINOMIAL && rule == 5)
                        continue; /* one token per draw */
                    if (method == FLS_METHOD_GROUPED && rule != 0)
                        continue; /* the grouped method takes no rule */
                    fls_params plain;
                    fls_params_default(&plain);
                    plain.method = (fls_method)method;
                    plain.temperature = temps;
                    plain.seed = 100 + (uint64_t)seed;
                    plain.draws = 1 + seed % 3;
                    rule_set(&plain, rule);
                    if (rule == 0 && method != FLS_METHOD_UNFUSED_MULTINOMIAL &&
                        method != FLS_METHOD_GROUPED && seed % 2)
                        plain.noise = FLS_NOISE_MIN_FIRST;
                    fls_params with = plain;
                    mods_set(&with, &m, whats[wi]);
                    outs ref;
                    const fls_status sref = plain_on_changed(ctxs[0], &in, &plain, &with, &ref);
                    calls++;
                    ok_calls += sref == FLS_OK;
                    char label[160];
                    snprintf(label, sizeof label, "seed %lld B %lld V %lld what %u rule %d method %d",
                             (long long)seed, (long long)B, (long long)V, whats[wi], rule, method);
                    expect_paths(ctxs, NCTX, &in, &with, sref, &ref, label);
                }
            }
            mods_free(&m);
        }
        sweep_free(&in);
    }
    /* the exact second pass ran, from kept and from recomputed logits */
    for (size_t ci = 0; ci < NCTX; ci++) {
        fls_counters cnt;
        fls_counters_default(&cnt);
        cr_assert_eq(fls_context_counters(ctxs[ci], &cnt), FLS_OK);
        cr_assert_gt(cnt.second_pass_rows, 0, "context %zu took no second pass", ci);
    }
    /* the comparison is about sampled rows, not refusals */
    cr_assert_gt(ok_calls, calls * 3 / 4, "%lld of %lld calls sampled", (long long)ok_calls,
                 (long long)calls);
    for (int ci = 0; ci < NCTX; ci++)
        fls_context_destroy(ctxs[ci]);
}

/* ---- fuzzing the inputs ---- */

/* One random set of inputs (and the buffers behind it) for B rows of V
 * tokens, off the valid range now and then. */
typedef struct fuzz_in {
    int32_t *mask;
    uint8_t rows[MAXB];
    int64_t *bias_ids, *seen_ids;
    float *bias_vals;
    int32_t *seen_counts;
    float rep[MAXB], pres[MAXB], freq[MAXB];
} fuzz_in;

/* ids of one row's list: padding, distinct ids, now and then a duplicate or
 * an id out of range */
static void fuzz_ids(int64_t *ids, int64_t n, int64_t V, uint64_t *rs)
{
    distinct_ids(ids, n < V ? n : V, V, rs);
    for (int64_t i = V; i < n; i++)
        ids[i] = -1;
    if (n >= 2 && trng_int(rs, 0, 15) == 0)
        ids[n - 1] = ids[0] == -1 ? trng_int(rs, 0, V - 1) : ids[0]; /* a duplicate (or a fresh id) */
    if (n >= 1 && trng_int(rs, 0, 40) == 0)
        ids[trng_int(rs, 0, n - 1)] = trng_int(rs, 0, 1) ? V : -2;
}

static float fuzz_bias(uint64_t *rs)
{
    static const float edge[] = {1e30f, -1e30f, 3e38f, -3e38f, 88.0f, -1000.0f, 0.0f, -0.0f, 1e-45f};
    const int64_t k = trng_int(rs, 0, 40);
    if (k == 0)
        return NAN;
    if (k == 1)
        return INFINITY;
    if (k < 10)
        return edge[k - 1];
    return trng_float(rs) * 10.0f;
}

static float fuzz_rep(uint64_t *rs)
{
    static const float v[] = {1.0f,   1.0f,
                              1.3f,   0.5f,
                              2.0f,   1e-45f /* just above 0 */,
                              1e-30f, 1.0000001f,
                              3e38f,  0.0f /* refused */,
                              -1.0f /* refused */};
    if (trng_int(rs, 0, 60) == 0)
        return NAN;
    return v[trng_int(rs, 0, 10)];
}

static float fuzz_pen(uint64_t *rs)
{
    static const float v[] = {0.0f, 0.0f, 0.5f, -2.0f, 1e30f, -1e-45f, 7.25f};
    if (trng_int(rs, 0, 60) == 0)
        return trng_int(rs, 0, 1) ? INFINITY : NAN;
    return v[trng_int(rs, 0, 6)];
}

/* Random inputs into p (on top of p's rule, method and temperatures). */
static void fuzz_make(fuzz_in *f, fls_params *p, int64_t B, int64_t V, uint64_t *rs)
{
    memset(f, 0, sizeof *f);
    const int64_t words = (V + 31) / 32;
    if (trng_int(rs, 0, 1)) { /* a mask */
        const int64_t ld = words + (trng_int(rs, 0, 2) ? 0 : trng_int(rs, 1, 2));
        const int dens = (int)trng_int(rs, 0, 3);
        f->mask = malloc((size_t)(B * ld) * sizeof *f->mask);
        for (int64_t b = 0; b < B; b++) {
            const int none = trng_int(rs, 0, 7) == 0; /* an all-masked row */
            for (int64_t w = 0; w < ld; w++) {
                uint32_t x = (uint32_t)trng_next(rs);
                x = dens == 0   ? 0xFFFFFFFFu
                    : dens == 1 ? x
                    : dens == 2 ? x | (uint32_t)trng_next(rs)
                                : x & (uint32_t)trng_next(rs) & (uint32_t)trng_next(rs);
                f->mask[b * ld + w] = (int32_t)(none && w < words ? 0u : x);
            }
        }
        p->allowed_bitmask = f->mask;
        p->bitmask_ld = ld == words && trng_int(rs, 0, 1) ? 0 : ld;
        if (trng_int(rs, 0, 30) == 0)
            p->bitmask_ld = words - 1; /* refused (0 when words is 1: valid) */
        if (trng_int(rs, 0, 2) == 0) {
            for (int64_t b = 0; b < B; b++)
                f->rows[b] = (uint8_t)trng_int(rs, 0, 1);
            p->bitmask_rows = f->rows;
        }
    }
    if (trng_int(rs, 0, 1)) { /* a bias list */
        const int64_t K = trng_int(rs, 0, 6);
        f->bias_ids = malloc((size_t)(B * K + 1) * sizeof *f->bias_ids);
        f->bias_vals = malloc((size_t)(B * K + 1) * sizeof *f->bias_vals);
        for (int64_t b = 0; b < B; b++) {
            fuzz_ids(f->bias_ids + b * K, K, V, rs);
            for (int64_t i = 0; i < K; i++)
                f->bias_vals[b * K + i] = fuzz_bias(rs);
        }
        p->logit_bias_ids = f->bias_ids;
        p->logit_bias_values = f->bias_vals;
        p->logit_bias_k = K;
    }
    if (trng_int(rs, 0, 1)) { /* a seen list */
        const int64_t S = trng_int(rs, 0, 6);
        f->seen_ids = malloc((size_t)(B * S + 1) * sizeof *f->seen_ids);
        f->seen_counts = malloc((size_t)(B * S + 1) * sizeof *f->seen_counts);
        for (int64_t b = 0; b < B; b++) {
            fuzz_ids(f->seen_ids + b * S, S, V, rs);
            for (int64_t i = 0; i < S; i++) {
                const int64_t k = trng_int(rs, 0, 50);
                f->seen_counts[b * S + i] = k == 0   ? -1
                                            : k == 1 ? INT32_MAX
                                            : k < 5  ? 1000000
                                                     : (int32_t)trng_int(rs, 0, 5);
            }
        }
        p->seen_ids = f->seen_ids;
        p->seen_counts = trng_int(rs, 0, 3) ? f->seen_counts : NULL;
        p->seen_k = S;
    }
    if (trng_int(rs, 0, 1)) { /* penalties */
        p->repetition_penalty = fuzz_rep(rs);
        p->presence_penalty = fuzz_pen(rs);
        p->frequency_penalty = fuzz_pen(rs);
        for (int64_t b = 0; b < B; b++) {
            f->rep[b] = fuzz_rep(rs);
            f->pres[b] = fuzz_pen(rs);
            f->freq[b] = fuzz_pen(rs);
        }
        if (trng_int(rs, 0, 2) == 0)
            p->row_repetition_penalty = f->rep;
        if (trng_int(rs, 0, 2) == 0)
            p->row_presence_penalty = f->pres;
        if (trng_int(rs, 0, 2) == 0)
            p->row_frequency_penalty = f->freq;
    }
}

static void fuzz_free(fuzz_in *f)
{
    free(f->mask);
    free(f->bias_ids);
    free(f->bias_vals);
    free(f->seen_ids);
    free(f->seen_counts);
}

/* (e) random B, V, masks (all-masked rows too), bias and seen lists (padding,
 * duplicates, ids out of range, huge and non-finite values, counts from -1
 * to INT32_MAX), penalties (r just above 0, 0, NaN, huge), rules, methods
 * and temperatures: every call either is refused as fls_params_explain
 * says, or fails as the plain call on the changed logits does (all masked,
 * a NaN or +inf, a tempered overflow), writing nothing, or gives that
 * call's tokens, logsumexp and logprobs bit for bit, from the logits and
 * fused. Seed fixed (printed); fewer iterations under valgrind. */
Test(mods, fuzz_against_changed_logits, .timeout = 120)
{
    const uint64_t seed = 0x35F022ull;
    const int64_t iters = 1000 >> sweep_scale_shift();
    printf("mods fuzz: seed 0x%llx, %lld iterations\n", (unsigned long long)seed, (long long)iters);
    fls_context_t *ctxs[NCTX];
    sweep_contexts(ctxs);
    uint64_t rs = seed;
    int64_t ok = 0, refused = 0, failed = 0;
    for (int64_t it = 0; it < iters; it++) {
        const int64_t B = trng_int(&rs, 1, MAXB);
        const int64_t V = trng_int(&rs, 0, 3) ? trng_int(&rs, 1, 80) : trng_int(&rs, 81, 1500);
        sweep_in in;
        sweep_make(&in, B, V, 8, 1000 + (uint64_t)it, 2000 + (uint64_t)it);
        float temps[MAXB];
        const float tset[] = {0.0f, 0.7f, 1.0f, 1.5f, 0.25f, 1e-3f};
        for (int64_t b = 0; b < B; b++)
            temps[b] = tset[trng_int(&rs, 0, 5)];
        fls_params plain;
        fls_params_default(&plain);
        plain.method = (fls_method)trng_int(&rs, 0, 3);
        const int rule = plain.method == FLS_METHOD_GROUPED ? 0 : (int)trng_int(&rs, 0, NRULES - 1);
        if (!(plain.method == FLS_METHOD_UNFUSED_MULTINOMIAL && rule == 5))
            rule_set(&plain, rule);
        if (trng_int(&rs, 0, 1))
            plain.temperature = temps;
        else
            plain.temperature_value = temps[0];
        plain.seed = seed + (uint64_t)it;
        plain.draws = trng_int(&rs, 1, 3);
        if (plain.method != FLS_METHOD_UNFUSED_MULTINOMIAL && plain.method != FLS_METHOD_GROUPED &&
            !plain.without_replacement_k && !plain.top_k && plain.top_p == 1.0f && plain.min_p == 0.0f &&
            !plain.filter && trng_int(&rs, 0, 1))
            plain.noise = FLS_NOISE_MIN_FIRST;
        fls_params with = plain;
        fuzz_in f;
        fuzz_make(&f, &with, B, V, &rs);
        char label[200], msg[256];
        snprintf(label, sizeof label, "iteration %lld (B %lld V %lld method %d rule %d)", (long long)it,
                 (long long)B, (long long)V, (int)plain.method, rule);
        const fls_status sx = fls_params_explain(&with, B, V, msg, sizeof msg);
        if (sx != FLS_OK) {
            /* refused before any work: nothing written, on every path */
            outs none;
            outs_guard(&none);
            expect_paths(ctxs, 1, &in, &with, sx, &none, label);
            refused++;
        } else {
            outs ref;
            const fls_status sref = plain_on_changed(ctxs[0], &in, &plain, &with, &ref);
            if (sref != FLS_OK)
                cr_assert(outs_untouched(&ref), "%s: the plain call wrote on %s", label,
                          fls_status_string(sref));
            expect_paths(ctxs, it % 4 == 0 ? NCTX : 1, &in, &with, sref, &ref, label);
            ok += sref == FLS_OK;
            failed += sref != FLS_OK;
        }
        fuzz_free(&f);
        sweep_free(&in);
    }
    printf("mods fuzz: %lld sampled, %lld refused by fls_params_explain, %lld failed as the plain call\n",
           (long long)ok, (long long)refused, (long long)failed);
    cr_assert_gt(ok, iters / 3, "too few calls sampled: %lld of %lld", (long long)ok, (long long)iters);
    cr_assert_gt(refused + failed, 0);
    for (int ci = 0; ci < NCTX; ci++)
        fls_context_destroy(ctxs[ci]);
}

/* The inputs move tokens: a bias of +1000 on one token makes it the token
 * of every row and draw, and the mask takes it away again. */
Test(mods, bias_and_mask_decide)
{
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 0);
    const int64_t B = 3, V = 500;
    float *raw = random_floats(B * V, 5);
    tmat L = tmat_make(FLS_DTYPE_F32, B, V, V, raw);
    int64_t ids[3] = {17, 260, 499};
    float vals[3] = {1000.0f, 1000.0f, 1000.0f};
    fls_params p;
    fls_params_default(&p);
    p.draws = 3;
    p.logit_bias_ids = ids;
    p.logit_bias_values = vals;
    p.logit_bias_k = 1;
    outs o;
    outs_guard(&o);
    cr_assert_eq(fls_sample_logits(ctx, &L.m, &p, &o.o), FLS_OK);
    for (int64_t b = 0; b < B; b++)
        for (int64_t d = 0; d < 3; d++)
            cr_assert_eq(o.tok[b * 3 + d], ids[b]);
    const int64_t words = (V + 31) / 32;
    int32_t *mask = malloc((size_t)(B * words) * sizeof *mask);
    memset(mask, 0xff, (size_t)(B * words) * sizeof *mask);
    for (int64_t b = 0; b < B; b++)
        mask[b * words + ids[b] / 32] &= (int32_t) ~(1u << (ids[b] % 32));
    p.allowed_bitmask = mask;
    outs_guard(&o);
    cr_assert_eq(fls_sample_logits(ctx, &L.m, &p, &o.o), FLS_OK);
    for (int64_t b = 0; b < B; b++)
        for (int64_t d = 0; d < 3; d++)
            cr_assert_neq(o.tok[b * 3 + d], ids[b]);
    free(mask);
    tmat_free(&L);
    free(raw);
    fls_context_destroy(ctx);
}

/* (c) a row with nothing allowed (or only -inf allowed) */
Test(mods, all_masked)
{
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 0);
    const int64_t B = 3, V = 70, words = 3;
    float *raw = random_floats(B * V, 9);
    raw[1 * V + 5] = -INFINITY;
    tmat L = tmat_make(FLS_DTYPE_F32, B, V, V, raw);
    int32_t mask[3 * 3];
    memset(mask, 0xff, sizeof mask);
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t w = 0; w < words; w++)
            mask[1 * words + w] = 0;
        if (pass == 1)
            mask[1 * words + 0] = 1 << 5; /* only a -inf token */
        for (int method = 0; method < 3; method++) {
            for (int rule = 0; rule < NRULES; rule++) {
                if (method == FLS_METHOD_UNFUSED_MULTINOMIAL && rule == 5)
                    continue;
                fls_params p;
                fls_params_default(&p);
                p.method = (fls_method)method;
                rule_set(&p, rule);
                p.allowed_bitmask = mask;
                outs o;
                outs_guard(&o);
                const fls_status st = fls_sample_logits(ctx, &L.m, &p, &o.o);
                cr_assert_eq(st, FLS_ERR_ALL_MASKED, "pass %d method %d rule %d: %s", pass, method, rule,
                             fls_status_string(st));
                cr_assert(outs_untouched(&o));
                /* the row left unmasked samples again */
                const uint8_t rows[3] = {1, 0, 1};
                p.bitmask_rows = rows;
                outs_guard(&o);
                cr_assert_eq(fls_sample_logits(ctx, &L.m, &p, &o.o), FLS_OK);
            }
        }
    }
    tmat_free(&L);
    free(raw);
    fls_context_destroy(ctx);
}

/* (b) every bad value: its status, nothing written, the field named */
Test(mods, errors)
{
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 0);
    const int64_t B = 3, V = 100, K = 4, S = 4, words = 4;
    sweep_in in;
    sweep_make(&in, B, V, 8, 1, 2);
    for (int c = 0; c < 27; c++) {
        /* a valid base: every input in use */
        int32_t mask[3 * 5 + 1];
        memset(mask, 0xff, sizeof mask);
        uint8_t mrows[3] = {1, 1, 1};
        int64_t bid[3 * 4 + 1] = {1, 2, -1, 3, 4, -1, -1, 5, 6, 7, 8, 9, 0};
        float bval[3 * 4 + 1] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0};
        int64_t sid[3 * 4] = {2, 3, -1, -1, 10, 11, 12, 13, -1, 4, 5, 6};
        int32_t scnt[3 * 4] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
        float rrep[3] = {1.2f, 1.0f, 0.9f};
        fls_params p;
        fls_params_default(&p);
        p.allowed_bitmask = mask;
        p.bitmask_ld = 0;
        p.bitmask_rows = mrows;
        p.logit_bias_ids = bid;
        p.logit_bias_values = bval;
        p.logit_bias_k = K;
        p.seen_ids = sid;
        p.seen_counts = scnt;
        p.seen_k = S;
        p.repetition_penalty = 1.1f;
        p.presence_penalty = 0.5f;
        p.frequency_penalty = 0.25f;
        p.row_repetition_penalty = rrep;
        outs o;
        outs_guard(&o);
        cr_assert_eq(fls_sample_logits(ctx, &in.L.m, &p, &o.o), FLS_OK, "base of case %d", c);
        fls_status want = FLS_ERR_PARAM;
        const char *field = NULL, *row = NULL;
        switch (c) {
        case 0:
            bid[1 * K + 1] = V, field = "logit_bias_ids", row = "(row 1";
            break;
        case 1:
            bid[1 * K + 1] = -2, field = "logit_bias_ids", row = "(row 1";
            break;
        case 2:
            bid[1 * K + 2] = 4, field = "logit_bias_ids", row = "(row 1"; /* 4 twice */
            break;
        case 3:
            bval[2 * K + 0] = NAN, field = "logit_bias_values", row = "(row 2";
            break;
        case 4:
            bval[2 * K + 3] = -INFINITY, field = "logit_bias_values", row = "(row 2";
            break;
        case 5:
            sid[2 * S + 0] = V, field = "seen_ids", row = "(row 2";
            break;
        case 6:
            sid[1 * S + 3] = 10, field = "seen_ids", row = "(row 1"; /* 10 twice */
            break;
        case 7:
            scnt[1 * S + 2] = -1, field = "seen_counts", row = "(row 1";
            break;
        case 8:
            p.row_repetition_penalty = NULL, p.repetition_penalty = 0.0f, field = "repetition_penalty";
            break;
        case 9:
            p.row_repetition_penalty = NULL, p.repetition_penalty = -1.0f, field = "repetition_penalty";
            break;
        case 10:
            p.row_repetition_penalty = NULL, p.repetition_penalty = NAN, field = "repetition_penalty";
            break;
        case 11:
            rrep[1] = INFINITY, field = "repetition_penalty", row = "(row 1";
            break;
        case 12:
            rrep[2] = 0.0f, field = "repetition_penalty", row = "(row 2";
            break;
        case 13:
            p.presence_penalty = NAN, field = "presence_penalty";
            break;
        case 14:
            p.frequency_penalty = INFINITY, field = "frequency_penalty";
            break;
        case 15: {
            static float rf[3] = {0.0f, NAN, 0.0f};
            p.row_frequency_penalty = rf, field = "frequency_penalty", row = "(row 1";
            break;
        }
        case 16:
            p.bitmask_ld = words - 1, field = "bitmask_ld";
            break;
        case 17:
            p.bitmask_ld = -1, field = "bitmask_ld";
            break;
        case 18:
            p.logit_bias_k = -1, field = "logit_bias_k";
            break;
        case 19:
            p.seen_k = -1, field = "seen_k";
            break;
        case 20:
            p.logit_bias_ids = NULL, field = "logit_bias_k";
            break;
        case 21:
            p.logit_bias_values = NULL, field = "logit_bias_k";
            break;
        case 22:
            p.seen_ids = NULL, field = "seen_k";
            break;
        case 23:
            p.allowed_bitmask = NULL, field = "bitmask_rows";
            break;
        case 24:
            p.logit_bias_ids = (const int64_t *)((const char *)bid + 4), want = FLS_ERR_ALIGN;
            break;
        case 25:
            p.allowed_bitmask = (const int32_t *)((const char *)mask + 2), want = FLS_ERR_ALIGN;
            break;
        case 26:
            p.seen_counts = (const int32_t *)((const char *)scnt + 1), want = FLS_ERR_ALIGN;
            break;
        }
        outs_guard(&o);
        fls_status st = fls_sample_logits(ctx, &in.L.m, &p, &o.o);
        cr_assert_eq(st, want, "case %d: logits gave %s", c, fls_status_string(st));
        cr_assert(outs_untouched(&o), "case %d: logits wrote", c);
        outs_guard(&o);
        st = fls_sample_fused(ctx, &in.W.m, &in.H.m, &p, &o.o);
        cr_assert_eq(st, want, "case %d: fused gave %s", c, fls_status_string(st));
        cr_assert(outs_untouched(&o), "case %d: fused wrote", c);
        char msg[512];
        st = fls_params_explain(&p, B, V, msg, sizeof msg);
        cr_assert_eq(st, want, "case %d: explain gave %s (%s)", c, fls_status_string(st), msg);
        cr_assert(msg[0] != '\0', "case %d: no explanation", c);
        if (field)
            cr_assert(strstr(msg, field), "case %d: \"%s\" does not name %s", c, msg, field);
        if (row)
            cr_assert(strstr(msg, row), "case %d: \"%s\" does not name %s", c, msg, row);
    }
    sweep_free(&in);
    fls_context_destroy(ctx);
}

/* (d) what refuses them, engine-independently: streams. The CUDA engine's
 * refusal needs a GPU. */
Test(mods, refused)
{
    fls_context_t *ctx = ctx_make(1, FLS_SIMD_AUTO, 0);
    const int64_t B = 2, V = 64;
    float *raw = random_floats(B * V, 4);
    tmat L = tmat_make(FLS_DTYPE_F32, B, V, V, raw);
    int32_t mask[4] = {-1, -1, -1, -1};
    int64_t ids[2] = {3, -1};
    float vals[2] = {1.0f, 0.0f};
    for (int k = 0; k < 4; k++) {
        fls_params p;
        fls_params_default(&p);
        if (k == 0)
            p.allowed_bitmask = mask;
        else if (k == 1)
            p.logit_bias_ids = ids, p.logit_bias_values = vals, p.logit_bias_k = 1;
        else if (k == 2)
            p.presence_penalty = 0.5f;
        else
            p.seen_ids = ids, p.seen_k = 1;
        fls_stream_t *s = NULL;
        cr_assert_eq(fls_stream_create(&s, ctx, B, V, &p), FLS_ERR_UNSUPPORTED, "stream, input %d", k);
        cr_assert_null(s);
    }
    tmat_free(&L);
    free(raw);
    fls_context_destroy(ctx);
    if (!fls_cuda_available())
        cr_skip("no GPU: the CUDA engine's refusal is not run here");
}

/* A caller built against 0.3's fls_params: whatever follows its struct
 * is never read, the call is the plain one. */
Test(mods, older_struct_size)
{
    fls_context_t *ctx = ctx_make(1, FLS_SIMD_AUTO, 0);
    const int64_t B = 2, V = 300;
    float *raw = random_floats(B * V, 8);
    tmat L = tmat_make(FLS_DTYPE_F32, B, V, V, raw);
    fls_params p;
    fls_params_default(&p);
    p.draws = 2;
    p.top_k = 30;
    outs ref;
    outs_guard(&ref);
    cr_assert_eq(fls_sample_logits(ctx, &L.m, &p, &ref.o), FLS_OK);
    fls_params old;
    memset(&old, 0xA5, sizeof old); /* garbage where 0.4's fields are */
    memcpy(&old, &p, offsetof(fls_params, allowed_bitmask));
    old.struct_size = offsetof(fls_params, noise) + sizeof(fls_noise);
    outs got;
    outs_guard(&got);
    cr_assert_eq(fls_sample_logits(ctx, &L.m, &old, &got.o), FLS_OK);
    expect_same(FLS_OK, &got, FLS_OK, &ref, "0.3 layout");
    /* neutral values of the new fields change nothing either */
    int64_t none[2] = {-1, -1};
    float zero[2] = {0.0f, 0.0f};
    p.logit_bias_ids = none, p.logit_bias_values = zero, p.logit_bias_k = 1;
    p.seen_ids = none, p.seen_k = 1;
    outs_guard(&got);
    cr_assert_eq(fls_sample_logits(ctx, &L.m, &p, &got.o), FLS_OK);
    expect_same(FLS_OK, &got, FLS_OK, &ref, "padding only");
    tmat_free(&L);
    free(raw);
    fls_context_destroy(ctx);
}
