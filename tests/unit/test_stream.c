/*
 * test_stream.c — streaming sampling (lib/front/stream.c): any chunking and order
 * of the vocabulary, merged states (threads, shards), serialized states and
 * early finalization give the one-shot call's tokens, for the flat method
 * and the grouped one, from logits and fused; bad input changes nothing;
 * a corrupted byte string is a format error, never a crash.
 */
#include "tests/unit/common.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { SB = 3, SV = 5001, SD = 24, DRAWS = 4 };

static fls_params stream_params(fls_method method, int64_t g)
{
    fls_params p;
    fls_params_default(&p);
    p.method = method;
    p.group_size = g;
    p.draws = DRAWS;
    p.seed = 11;
    p.offset = 3;
    p.temperature_value = 0.8f;
    return p;
}

static float *rand_logits(uint64_t seed)
{
    uint64_t rng = seed;
    float *l = malloc(sizeof(float) * SB * SV);
    for (int64_t i = 0; i < SB * SV; i++)
        l[i] = trng_int(&rng, 0, 20) == 0 ? -INFINITY : (trng_float(&rng) - 0.5f) * 8.0f;
    return l;
}

/* the one-shot tokens and logsumexp */
static void one_shot(fls_context_t *ctx, const float *l, const fls_params *p, int64_t *tok, float *lse)
{
    fls_matrix L = {l, FLS_DTYPE_F32, SB, SV, SV};
    fls_outputs o = {tok, lse, NULL};
    cr_assert_eq(fls_sample_logits(ctx, &L, p, &o), FLS_OK);
}

/* feeds [a, b) of l in random chunks, in random order */
static void feed_range(fls_stream_t *s, const float *l, int64_t a, int64_t b, uint64_t *rng)
{
    int64_t cuts[64], nc = 0;
    cuts[nc++] = a;
    while (cuts[nc - 1] < b && nc < 60) {
        int64_t step = trng_int(rng, 1, (b - a) / 8 + 1);
        cuts[nc] = cuts[nc - 1] + step < b ? cuts[nc - 1] + step : b;
        nc++;
    }
    if (cuts[nc - 1] < b)
        cuts[nc++] = b;
    int order[64];
    for (int i = 0; i < nc - 1; i++)
        order[i] = i;
    for (int i = nc - 2; i > 0; i--) {
        int j = (int)trng_int(rng, 0, i), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = 0; i < nc - 1; i++) {
        const int64_t c0 = cuts[order[i]], c1 = cuts[order[i] + 1];
        fls_matrix L = {l + c0, FLS_DTYPE_F32, SB, c1 - c0, SV};
        cr_assert_eq(fls_stream_feed_logits(s, &L, c0), FLS_OK);
    }
}

static void check_same(const fls_stream_t *s, const int64_t *tok, const float *lse, const char *what)
{
    int64_t t[SB * DRAWS];
    float l[SB];
    fls_outputs o = {t, l, NULL};
    cr_assert_eq(fls_stream_finalize(s, &o), FLS_OK, "%s", what);
    cr_assert_eq(memcmp(t, tok, sizeof t), 0, "%s: tokens differ from the one-shot call", what);
    for (int b = 0; b < SB; b++)
        cr_assert(fabsf(l[b] - lse[b]) <= 1e-5f * (1.0f + fabsf(lse[b])), "%s: logsumexp", what);
}

Test(stream, any_chunking_and_order, .timeout = 60)
{
    float *l = rand_logits(1);
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 0);
    const struct {
        fls_method m;
        int64_t g;
    } cfg[] = {
        {FLS_METHOD_FUSED, 0}, {FLS_METHOD_GROUPED, 2}, {FLS_METHOD_GROUPED, 64}, {FLS_METHOD_GROUPED, 1024}};
    uint64_t rng = 9;
    for (int c = 0; c < 4; c++) {
        fls_params p = stream_params(cfg[c].m, cfg[c].g);
        int64_t tok[SB * DRAWS];
        float lse[SB];
        one_shot(ctx, l, &p, tok, lse);
        for (int rep = 0; rep < 5; rep++) {
            fls_stream_t *s = NULL;
            cr_assert_eq(fls_stream_create(&s, ctx, SB, SV, &p), FLS_OK);
            feed_range(s, l, 0, SV, &rng);
            check_same(s, tok, lse, "random chunks");
            fls_stream_destroy(s);
        }
    }
    free(l);
    fls_context_destroy(ctx);
}

/* Shards: each its own state (its own context: a rank), serialized, sent,
 * deserialized and merged in any order — the --shards simulation. */
Test(stream, shards_merge_and_bytes, .timeout = 60)
{
    float *l = rand_logits(2);
    fls_context_t *ctx = ctx_make(1, FLS_SIMD_AUTO, 0);
    uint64_t rng = 10;
    for (int grouped = 0; grouped < 2; grouped++) {
        fls_params p = stream_params(grouped ? FLS_METHOD_GROUPED : FLS_METHOD_FUSED, 128);
        int64_t tok[SB * DRAWS];
        float lse[SB];
        one_shot(ctx, l, &p, tok, lse);
        for (int shards = 1; shards <= 5; shards++) {
            fls_stream_t *st[5];
            void *bytes[5];
            size_t nb[5];
            for (int r = 0; r < shards; r++) {
                cr_assert_eq(fls_stream_create(&st[r], ctx, SB, SV, &p), FLS_OK);
                /* shard r: a contiguous range, not aligned to groups */
                const int64_t a = SV * r / shards, b = SV * (r + 1) / shards;
                feed_range(st[r], l, a, b, &rng);
                cr_assert_eq(fls_stream_serialize(st[r], NULL, &nb[r]), FLS_OK);
                bytes[r] = malloc(nb[r]);
                cr_assert_eq(fls_stream_serialize(st[r], bytes[r], &nb[r]), FLS_OK);
                fls_stream_destroy(st[r]);
            }
            fls_stream_t *all = NULL;
            for (int i = 0; i < shards; i++) {
                const int r = (i + shards / 2) % shards; /* another order */
                fls_stream_t *x = NULL;
                cr_assert_eq(fls_stream_deserialize(&x, ctx, bytes[r], nb[r]), FLS_OK);
                if (!all)
                    all = x;
                else {
                    cr_assert_eq(fls_stream_merge(all, x), FLS_OK);
                    cr_assert_eq(fls_stream_merge(all, x), FLS_ERR_PARAM, "the same tokens twice");
                    fls_stream_destroy(x);
                }
            }
            check_same(all, tok, lse, grouped ? "grouped shards" : "flat shards");
            fls_stream_destroy(all);
            for (int r = 0; r < shards; r++)
                free(bytes[r]);
        }
    }
    free(l);
    fls_context_destroy(ctx);
}

Test(stream, fused_chunks)
{
    uint64_t rng = 3;
    float *W = malloc(sizeof(float) * SV * SD), *H = malloc(sizeof(float) * SB * SD);
    for (int64_t i = 0; i < SV * SD; i++)
        W[i] = (trng_float(&rng) - 0.5f) * 0.8f;
    for (int64_t i = 0; i < SB * SD; i++)
        H[i] = trng_float(&rng) - 0.5f;
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 0);
    for (int grouped = 0; grouped < 2; grouped++) {
        fls_params p = stream_params(grouped ? FLS_METHOD_GROUPED : FLS_METHOD_FUSED, 256);
        int64_t tok[SB * DRAWS], t2[SB * DRAWS];
        float lse[SB];
        fls_matrix Wm = {W, FLS_DTYPE_F32, SV, SD, SD}, Hm = {H, FLS_DTYPE_F32, SB, SD, SD};
        fls_outputs o = {tok, lse, NULL};
        cr_assert_eq(fls_sample_fused(ctx, &Wm, &Hm, &p, &o), FLS_OK);
        fls_stream_t *s = NULL;
        cr_assert_eq(fls_stream_create(&s, ctx, SB, SV, &p), FLS_OK);
        for (int64_t c0 = SV; c0 > 0;) { /* backwards, 777-row chunks */
            const int64_t a = c0 > 777 ? c0 - 777 : 0;
            fls_matrix Wc = {W + a * SD, FLS_DTYPE_F32, c0 - a, SD, SD};
            cr_assert_eq(fls_stream_feed_fused(s, &Wc, &Hm, a), FLS_OK);
            c0 = a;
        }
        check_same(s, tok, lse, "fused chunks");
        (void)t2;
        fls_stream_destroy(s);
    }
    free(W);
    free(H);
    fls_context_destroy(ctx);
}

/* Early finalization: peaked rows, the head's chunk fed first, the others
 * offered with bounds; skipped chunks change no token. Exact bounds (the
 * chunk's own max) and norm bounds (fls_chunk_max_norms, fls_logit_bound). */
Test(stream, early_finalization, .timeout = 60)
{
    uint64_t rng = 4;
    enum { V = 20000, D = 16, C = 1024 };
    float *W = malloc(sizeof(float) * V * D), *H = malloc(sizeof(float) * SB * D);
    for (int64_t i = 0; i < V * D; i++)
        W[i] = (trng_float(&rng) - 0.5f) * 0.25f;
    for (int64_t i = 0; i < SB * D; i++)
        H[i] = trng_float(&rng) - 0.5f;
    for (int64_t k = 0; k < D; k++) /* token 5 aligned with every row: a peak */
        W[5 * D + k] = H[0 * D + k] * 8.0f + H[1 * D + k] * 8.0f + H[2 * D + k] * 8.0f;
    fls_context_t *ctx = ctx_make(2, FLS_SIMD_AUTO, 0);
    float norms[V / C + 1], hn[SB];
    fls_matrix Wm = {W, FLS_DTYPE_F32, V, D, D}, Hm = {H, FLS_DTYPE_F32, SB, D, D};
    cr_assert_eq(fls_chunk_max_norms(&Wm, C, norms), FLS_OK);
    for (int b = 0; b < SB; b++) {
        double s = 0;
        for (int k = 0; k < D; k++)
            s += (double)H[b * D + k] * H[b * D + k];
        hn[b] = nextafterf((float)sqrt(s), INFINITY);
    }
    for (int grouped = 0; grouped < 2; grouped++) {
        fls_params p = stream_params(grouped ? FLS_METHOD_GROUPED : FLS_METHOD_FUSED, 128);
        p.temperature_value = 0.3f;
        int64_t tok[SB * DRAWS];
        fls_outputs o = {tok, NULL, NULL};
        cr_assert_eq(fls_sample_fused(ctx, &Wm, &Hm, &p, &o), FLS_OK);
        fls_stream_t *s = NULL;
        cr_assert_eq(fls_stream_create(&s, ctx, SB, V, &p), FLS_OK);
        fls_matrix W0 = {W, FLS_DTYPE_F32, C, D, D};
        cr_assert_eq(fls_stream_feed_fused(s, &W0, &Hm, 0), FLS_OK);
        int64_t skipped_chunks = 0;
        for (int64_t c = 1; c * C < V; c++) {
            float up[SB];
            for (int b = 0; b < SB; b++)
                up[b] = fls_logit_bound(norms[c], hn[b], D);
            int sk = 0;
            const int64_t n = V - c * C < C ? V - c * C : C;
            cr_assert_eq(fls_stream_skip(s, c * C, n, up, &sk), FLS_OK);
            if (!sk) {
                fls_matrix Wc = {W + c * C * D, FLS_DTYPE_F32, n, D, D};
                cr_assert_eq(fls_stream_feed_fused(s, &Wc, &Hm, c * C), FLS_OK);
            }
            skipped_chunks += sk;
        }
        int64_t t[SB * DRAWS], tf, ts, cf, cs;
        float lse[SB];
        fls_outputs ol = {t, lse, NULL};
        cr_assert_eq(fls_stream_progress(s, &tf, &ts, &cf, &cs), FLS_OK);
        cr_assert_eq(tf + ts, V);
        cr_assert_eq(cs, skipped_chunks);
        cr_assert(skipped_chunks > 0, "a peak 8 norms above the rest lets some chunk be skipped (grouped %d)",
                  grouped);
        if (ts > 0)
            cr_assert_eq(fls_stream_finalize(s, &ol), FLS_ERR_UNSUPPORTED, "logsumexp after a skip");
        ol.logsumexp = NULL;
        cr_assert_eq(fls_stream_finalize(s, &ol), FLS_OK);
        cr_assert_eq(memcmp(t, tok, sizeof t), 0, "tokens with skipped chunks (grouped %d)", grouped);
        fls_stream_destroy(s);
    }
    free(W);
    free(H);
    fls_context_destroy(ctx);
}

Test(stream, bad_input_changes_nothing)
{
    float *l = rand_logits(5);
    fls_context_t *ctx = ctx_make(1, FLS_SIMD_AUTO, 0);
    fls_params p = stream_params(FLS_METHOD_GROUPED, 64);
    int64_t tok[SB * DRAWS];
    float lse[SB];
    one_shot(ctx, l, &p, tok, lse);
    fls_stream_t *s = NULL;
    cr_assert_eq(fls_stream_create(&s, ctx, SB, SV, &p), FLS_OK);
    fls_matrix L1 = {l, FLS_DTYPE_F32, SB, 100, SV};
    cr_assert_eq(fls_stream_feed_logits(s, &L1, 0), FLS_OK);
    cr_assert_eq(fls_stream_feed_logits(s, &L1, 0), FLS_ERR_PARAM, "fed twice");
    fls_matrix L2 = {l + 50, FLS_DTYPE_F32, SB, 100, SV};
    cr_assert_eq(fls_stream_feed_logits(s, &L2, 50), FLS_ERR_PARAM, "overlapping");
    cr_assert_eq(fls_stream_feed_logits(s, &L2, SV - 50), FLS_ERR_SIZE, "past V");
    int64_t t[SB * DRAWS];
    fls_outputs o = {t, NULL, NULL};
    cr_assert_eq(fls_stream_finalize(s, &o), FLS_ERR_SIZE, "finalize before every token");
    /* a NaN in a chunk: an error, and the chunk can then be fed clean */
    float *bad = malloc(sizeof(float) * SB * 300);
    for (int b = 0; b < SB; b++)
        memcpy(bad + b * 300, l + b * SV + 100, 300 * sizeof(float));
    bad[1 * 300 + 7] = NAN;
    fls_matrix Lb = {bad, FLS_DTYPE_F32, SB, 300, 300};
    cr_assert_eq(fls_stream_feed_logits(s, &Lb, 100), FLS_ERR_NAN);
    fls_matrix Lr = {l + 100, FLS_DTYPE_F32, SB, SV - 100, SV};
    cr_assert_eq(fls_stream_feed_logits(s, &Lr, 100), FLS_OK);
    check_same(s, tok, lse, "after refused chunks");
    /* a byte string that is not a state */
    size_t n = 0;
    cr_assert_eq(fls_stream_serialize(s, NULL, &n), FLS_OK);
    unsigned char *bytes = malloc(n);
    cr_assert_eq(fls_stream_serialize(s, bytes, &n), FLS_OK);
    fls_stream_t *x = NULL;
    cr_assert_eq(fls_stream_deserialize(&x, ctx, bytes, n - 1), FLS_ERR_FORMAT, "truncated");
    for (size_t i = 0; i < 72 && i < n; i++) { /* every header byte flipped */
        bytes[i] ^= 0x5a;
        fls_status st = fls_stream_deserialize(&x, ctx, bytes, n);
        if (st == FLS_OK)
            fls_stream_destroy(x);
        bytes[i] ^= 0x5a;
    }
    cr_assert_eq(fls_stream_deserialize(&x, ctx, bytes, n), FLS_OK);
    check_same(x, tok, lse, "after deserialize");
    fls_stream_destroy(x);
    free(bytes);
    free(bad);
    fls_stream_destroy(s);
    /* rules the streaming API does not take */
    fls_params q = stream_params(FLS_METHOD_FUSED, 0);
    q.top_k = 5;
    cr_assert_eq(fls_stream_create(&s, ctx, SB, SV, &q), FLS_ERR_UNSUPPORTED);
    free(l);
    fls_context_destroy(ctx);
}
