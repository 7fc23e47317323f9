/* cli_stream.c — sampling through the streaming API, in chunks and shards (cli_stream.h). */
#include "tools/cli_stream.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int cli_row_norms(const fls_matrix *H, float *out)
{
    const size_t es = fls_dtype_size(H->dtype);
    for (int64_t b = 0; b < H->rows; b++) {
        const unsigned char *row = (const unsigned char *)H->data + (size_t)(b * H->ld) * es;
        double s = 0.0;
        for (int64_t d = 0; d < H->cols; d++) {
            float x;
            if (H->dtype == FLS_DTYPE_F32)
                memcpy(&x, row + (size_t)d * 4, 4);
            else {
                uint16_t h;
                memcpy(&h, row + (size_t)d * 2, 2);
                x = H->dtype == FLS_DTYPE_F16 ? fls_f16_to_f32(h) : fls_bf16_to_f32(h);
            }
            s += (double)x * (double)x;
        }
        /* every product of two floats is exact in double and the sum's relative
         * error is below D 2^-53: a margin of 2^-30 covers any D < 2^23 */
        const double r = sqrt(s) * (1.0 + 0x1p-30);
        float f = (float)r;
        if ((double)f < r)
            f = nextafterf(f, INFINITY);
        if (!isfinite(f))
            return -1;
        out[b] = f;
    }
    return 0;
}

/* Feeds (or skips) tokens [lo, hi) into st in chunks of the global grid. */
static fls_status feed_range(fls_stream_t *st, const cli_stream_cfg *cfg, int64_t B, int64_t lo, int64_t hi,
                             float *upper, const char **where)
{
    const int64_t C = cfg->chunk;
    for (int64_t a = lo; a < hi;) {
        const int64_t c = a / C, e = (c + 1) * C < hi ? (c + 1) * C : hi, n = e - a;
        fls_status s;
        if (cfg->early) {
            const int64_t D = cfg->W->cols;
            for (int64_t b = 0; b < B; b++)
                upper[b] = fls_logit_bound(cfg->chunk_norms[c], cfg->hnorms[b], D);
            int skipped = 0;
            if ((s = fls_stream_skip(st, a, n, upper, &skipped)) != FLS_OK) {
                *where = "fls_stream_skip";
                return s;
            }
            if (skipped) {
                a = e;
                continue;
            }
        }
        if (cfg->L) {
            const size_t es = fls_dtype_size(cfg->L->dtype);
            fls_matrix Lc = {(const unsigned char *)cfg->L->data + (size_t)a * es, cfg->L->dtype, B, n,
                             cfg->L->ld};
            s = fls_stream_feed_logits(st, &Lc, a);
            *where = "fls_stream_feed_logits";
        } else {
            const size_t es = fls_dtype_size(cfg->W->dtype);
            fls_matrix Wc = {(const unsigned char *)cfg->W->data + (size_t)(a * cfg->W->ld) * es,
                             cfg->W->dtype, n, cfg->W->cols, cfg->W->ld};
            s = fls_stream_feed_fused(st, &Wc, cfg->H, a);
            *where = "fls_stream_feed_fused";
        }
        if (s != FLS_OK)
            return s;
        a = e;
    }
    return FLS_OK;
}

static void add_progress(const fls_stream_t *st, cli_stream_stats *acc)
{
    int64_t tf = 0, ts = 0, cf = 0, cs = 0;
    if (fls_stream_progress(st, &tf, &ts, &cf, &cs) == FLS_OK) {
        acc->tokens_fed += tf;
        acc->tokens_skipped += ts;
        acc->chunks_fed += cf;
        acc->chunks_skipped += cs;
    }
}

fls_status cli_stream_sample(fls_context_t *ctx, const fls_params *p, int64_t B, int64_t V,
                             const cli_stream_cfg *cfg, int64_t *tokens, cli_stream_stats *acc,
                             const char **where)
{
    const int N = cfg->shards;
    fls_status s = FLS_OK;
    fls_stream_t *merged = NULL;
    void *buf = NULL;
    float *upper = malloc((size_t)B * sizeof *upper);
    if (!upper) {
        *where = "memory";
        return FLS_ERR_OUT_OF_MEMORY;
    }
    for (int k = 0; k < N; k++) {
        /* V / N tokens each, the first V % N shards one more */
        const int64_t q = V / N, rem = V % N;
        const int64_t lo = q * k + (k < rem ? k : rem), hi = lo + q + (k < rem ? 1 : 0);
        fls_stream_t *st = NULL;
        if ((s = fls_stream_create(&st, ctx, B, V, p)) != FLS_OK) {
            *where = "fls_stream_create";
            goto done;
        }
        s = feed_range(st, cfg, B, lo, hi, upper, where);
        if (s == FLS_OK)
            add_progress(st, acc);
        if (s == FLS_OK && N > 1) {
            /* a rank's state crosses the wire as bytes */
            size_t bytes = 0;
            fls_stream_t *back = NULL;
            s = fls_stream_serialize(st, NULL, &bytes);
            if (s == FLS_OK) {
                void *nb = realloc(buf, bytes ? bytes : 1);
                s = nb ? FLS_OK : FLS_ERR_OUT_OF_MEMORY;
                if (nb)
                    buf = nb;
            }
            if (s == FLS_OK)
                s = fls_stream_serialize(st, buf, &bytes);
            *where = "fls_stream_serialize";
            if (s == FLS_OK) {
                acc->bytes += (int64_t)bytes;
                s = fls_stream_deserialize(&back, ctx, buf, bytes);
                *where = "fls_stream_deserialize";
            }
            fls_stream_destroy(st);
            st = back;
        }
        if (s != FLS_OK) {
            fls_stream_destroy(st);
            goto done;
        }
        if (!merged) {
            merged = st;
        } else {
            s = fls_stream_merge(merged, st);
            fls_stream_destroy(st);
            if (s != FLS_OK) {
                *where = "fls_stream_merge";
                goto done;
            }
        }
    }
    fls_outputs out = {tokens, NULL, NULL};
    s = fls_stream_finalize(merged, &out);
    *where = "fls_stream_finalize";
    acc->passes++;
done:
    fls_stream_destroy(merged);
    free(buf);
    free(upper);
    return s;
}
