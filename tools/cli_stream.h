/*
 * cli_stream.h — `flashsample sample --stream-chunk C [--early-finalize]
 * [--shards N]`: the vocabulary streamed through the online API
 * (fls_stream_*, docs/GROUPED.md) instead of one call.
 *
 * Shard s of N covers contiguous tokens (V / N of them, the first V % N
 * shards one more) with a state of its own, fed in chunks of the global grid of C tokens (a chunk
 * is [c C, (c + 1) C) cut to the shard); with N > 1 every shard's state is
 * serialized to bytes, read back (fls_stream_deserialize) and merged in
 * shard order, as ranks of a tensor-parallel run would exchange them. The
 * tokens are the one-shot call's, whatever C and N.
 *
 * Early finalization (fused inputs): before a chunk is fed, fls_stream_skip
 * gets, per row, the bound fls_logit_bound(max ||w_v|| over the chunk,
 * ||h_b||, D) and skips the chunk when its noise proves that none of its
 * tokens can win.
 */
#ifndef FLS_CLI_STREAM_H
#define FLS_CLI_STREAM_H

#include "tools/cli.h"

#include <stddef.h>
#include <stdint.h>

typedef struct cli_stream_cfg {
    int64_t chunk; /* C */
    int shards;    /* N >= 1 */
    int early;     /* early finalization (needs W, H, chunk_norms, hnorms) */
    /* Inputs: L (logits), or W and H (fused). */
    const fls_matrix *L, *W, *H;
    const float *chunk_norms; /* ceil(V / C) entries: fls_chunk_max_norms(W, C) */
    const float *hnorms;      /* B entries, >= ||h_b|| */
} cli_stream_cfg;

typedef struct cli_stream_stats {
    int64_t tokens_fed, tokens_skipped, chunks_fed, chunks_skipped;
    int64_t bytes;  /* serialized bytes exchanged (shards > 1) */
    int64_t passes; /* passes over the vocabulary (one per call) */
} cli_stream_stats;

/* One call's worth of draws (params: first_draw, draws; B x V) through the
 * streaming API: tokens (B, draws). Returns FLS_OK or the failing status
 * (*where names the step: "create", "feed", "skip", "serialize", ...). */
fls_status cli_stream_sample(fls_context_t *ctx, const fls_params *p, int64_t B, int64_t V,
                             const cli_stream_cfg *cfg, int64_t *tokens, cli_stream_stats *acc,
                             const char **where);

/* Upper bounds of ||h_b||_2 (rounded up to float) of the B rows of H. */
int cli_row_norms(const fls_matrix *H, float *out);

#endif /* FLS_CLI_STREAM_H */
