/*
 * case_io.c — how a case's tokens are drawn through the public API, from host
 * or device memory (the CUDA engine): one fls_sample_logits / fls_sample_fused
 * call per batch, or the streaming API (random chunkings in random orders;
 * shards serialized, deserialized and merged).
 */
#include "stats/case_internal.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <stdlib.h>
#include <string.h>

static fls_status upload(const fls_matrix *m, void **dev)
{
    size_t bytes = (size_t)(m->rows * m->ld) * fls_dtype_size(m->dtype);
    fls_status st = fls_device_malloc(dev, bytes);
    if (st == FLS_OK)
        st = fls_device_upload(*dev, m->data, bytes);
    return st;
}

fls_status case_io_prepare(case_io *io)
{
    if (!io->cuda)
        return FLS_OK;
    if (io->fused) {
        fls_status st = upload(&io->W, &io->dW);
        return st == FLS_OK ? upload(&io->H, &io->dH) : st;
    }
    return upload(&io->L, &io->dL);
}

void case_io_release(case_io *io)
{
    if (!io->cuda)
        return;
    fls_device_free(io->dL);
    fls_device_free(io->dW);
    fls_device_free(io->dH);
    fls_device_free(io->dtok);
}

/* ---- the streaming API: random chunkings, random orders, shards through bytes ---- */

/* Feeds tokens [v0, v0 + n) of the case's input to a stream. */
static fls_status stream_feed(case_io *io, fls_stream_t *s, int64_t v0, int64_t n)
{
    /* the CUDA engine's streams take device memory */
    if (io->fused) {
        const size_t es = fls_dtype_size(io->W.dtype);
        fls_matrix Wc = {(const char *)(io->cuda ? io->dW : io->W.data) + (size_t)(v0 * io->W.ld) * es,
                         io->W.dtype, n, io->W.cols, io->W.ld};
        fls_matrix H = io->H;
        if (io->cuda)
            H.data = io->dH;
        return fls_stream_feed_fused(s, &Wc, &H, v0);
    }
    fls_matrix Lc = {(const float *)(io->cuda ? io->dL : io->L.data) + v0, FLS_DTYPE_F32, io->L.rows, n,
                     io->L.ld};
    return fls_stream_feed_logits(s, &Lc, v0);
}

/* Cuts [a, b) into k nonempty random pieces: cut[0] = a < cut[1] < ... < cut[k] = b
 * (k <= b - a). */
static void random_cuts(gsl_rng *r, int64_t a, int64_t b, int k, int64_t *cut)
{
    cut[0] = a;
    cut[k] = b;
    for (int j = 1; j < k; j++) {
        int64_t x;
        int dup;
        do { /* distinct interior points, sorted below */
            x = a + 1 + (int64_t)gsl_rng_uniform_int(r, (unsigned long)(b - a - 1));
            dup = 0;
            for (int i = 1; i < j; i++)
                dup |= cut[i] == x;
        } while (dup);
        cut[j] = x;
    }
    for (int j = 1; j < k; j++) /* insertion sort of the interior */
        for (int i = j; i > 1 && cut[i - 1] > cut[i]; i--) {
            int64_t t = cut[i];
            cut[i] = cut[i - 1];
            cut[i - 1] = t;
        }
}

#define MAX_PIECES 16

/* One batch of draws through fls_stream_*: FLS_IO_STREAM feeds the vocabulary
 * in io->pieces random chunks in a random order; FLS_IO_SHARDS cuts it into
 * io->pieces random shards, feeds each to a state of its own in 1-3 random
 * chunks (random order), serializes every state, deserializes the bytes
 * into new states and merges them in a random order. Then finalize. */
static fls_status io_stream(case_io *io, const fls_params *p, int64_t B, const fls_outputs *out)
{
    const int64_t V = io->fused ? io->W.rows : io->L.cols;
    int k = io->pieces < 1 ? 1 : io->pieces > MAX_PIECES ? MAX_PIECES : io->pieces;
    k = k > V ? (int)V : k;
    int64_t cut[MAX_PIECES + 1];
    int order[MAX_PIECES];
    random_cuts(io->chunking, 0, V, k, cut);
    for (int j = 0; j < k; j++)
        order[j] = j;
    gsl_ran_shuffle(io->chunking, order, (size_t)k, sizeof(int));
    fls_status st = FLS_OK;
    if (io->mode == FLS_IO_STREAM) {
        fls_stream_t *s = NULL;
        if ((st = fls_stream_create(&s, io->ctx, B, V, p)) != FLS_OK)
            return st;
        for (int j = 0; j < k && st == FLS_OK; j++)
            st = stream_feed(io, s, cut[order[j]], cut[order[j] + 1] - cut[order[j]]);
        if (st == FLS_OK)
            st = fls_stream_finalize(s, out);
        fls_stream_destroy(s);
        return st;
    }
    fls_stream_t *shard[MAX_PIECES] = {0};
    for (int j = 0; j < k && st == FLS_OK; j++) {
        fls_stream_t *s = NULL;
        if ((st = fls_stream_create(&s, io->ctx, B, V, p)) != FLS_OK)
            break;
        const int64_t a = cut[j], b = cut[j + 1];
        int sub = 1 + (int)gsl_rng_uniform_int(io->chunking, 3);
        sub = sub > b - a ? (int)(b - a) : sub;
        int64_t sc[4];
        int so[3] = {0, 1, 2};
        random_cuts(io->chunking, a, b, sub, sc);
        gsl_ran_shuffle(io->chunking, so, (size_t)sub, sizeof(int));
        for (int q = 0; q < sub && st == FLS_OK; q++)
            st = stream_feed(io, s, sc[so[q]], sc[so[q] + 1] - sc[so[q]]);
        /* through bytes: serialize, destroy, deserialize */
        size_t bytes = 0;
        void *buf = NULL;
        if (st == FLS_OK && (st = fls_stream_serialize(s, NULL, &bytes)) == FLS_OK) {
            if (!(buf = malloc(bytes)))
                st = FLS_ERR_OUT_OF_MEMORY;
            else if ((st = fls_stream_serialize(s, buf, &bytes)) == FLS_OK)
                st = fls_stream_deserialize(&shard[j], io->ctx, buf, bytes);
        }
        free(buf);
        fls_stream_destroy(s);
    }
    for (int j = 1; j < k && st == FLS_OK; j++)
        st = fls_stream_merge(shard[order[0]], shard[order[j]]);
    if (st == FLS_OK)
        st = fls_stream_finalize(shard[order[0]], out);
    for (int j = 0; j < k; j++)
        fls_stream_destroy(shard[j]);
    return st;
}

/* Fault injection for the tests of the audit itself: with fls_audit_options.fault_case set
 * to a case's name (or "*": every case), that case's sampling fails
 * (FLS_ERR_INTERNAL), as a broken engine would. */
fls_status case_io_sample(case_io *io, const fls_params *p, int64_t B, int64_t *tokens)
{
    const size_t n = (size_t)(B * p->draws * (p->without_replacement_k > 0 ? p->without_replacement_k : 1));
    if (io->fault)
        return FLS_ERR_INTERNAL;
    for (size_t i = 0; i < n; i++)
        tokens[i] = -1;
    if (!io->cuda) {
        fls_outputs out = {tokens, NULL, NULL};
        if (io->mode != FLS_IO_CALL)
            return io_stream(io, p, B, &out);
        return io->fused ? fls_sample_fused(io->ctx, &io->W, &io->H, p, &out)
                         : fls_sample_logits(io->ctx, &io->L, p, &out);
    }
    fls_status st = FLS_OK;
    if (io->dtok_bytes < n * sizeof(int64_t)) {
        fls_device_free(io->dtok);
        io->dtok = NULL;
        io->dtok_bytes = 0;
        st = fls_device_malloc((void **)&io->dtok, n * sizeof(int64_t));
        if (st != FLS_OK)
            return st;
        io->dtok_bytes = n * sizeof(int64_t);
    }
    st = fls_device_upload(io->dtok, tokens, n * sizeof(int64_t)); /* the guard, on the device too */
    if (st != FLS_OK)
        return st;
    fls_outputs out = {io->dtok, NULL, NULL};
    if (io->mode != FLS_IO_CALL) {
        st = io_stream(io, p, B, &out);
    } else if (io->fused) {
        fls_matrix W = io->W, H = io->H;
        W.data = io->dW;
        H.data = io->dH;
        st = fls_sample_fused(io->ctx, &W, &H, p, &out);
    } else {
        fls_matrix L = io->L;
        L.data = io->dL;
        st = fls_sample_logits(io->ctx, &L, p, &out);
    }
    if (st == FLS_OK)
        st = fls_device_download(tokens, io->dtok, n * sizeof(int64_t));
    return st;
}
