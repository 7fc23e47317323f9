/*
 * flashsample_nccl.h — tensor-parallel sampling over NCCL (an optional
 * library, libflashsample_nccl, built where NCCL is found).
 *
 * Each rank samples its vocabulary shard with the global token indices into
 * a streaming state (fls_stream_feed_logits / _fused with v0 = the shard's
 * first token); fls_stream_allgather_nccl then exchanges the states (a few
 * bytes per row: the candidates and log-sum-exp partials, never the logits)
 * and merges them in rank order into a new state, the same on every rank,
 * which finalizes to the same tokens without a broadcast — the tokens of
 * one rank holding the whole vocabulary (docs/GROUPED.md, "Tensor parallel").
 */
#ifndef FLASHSAMPLE_NCCL_H
#define FLASHSAMPLE_NCCL_H

#include "flashsample.h"

#ifdef __cplusplus
extern "C" {
#endif

/* comm: an ncclComm_t of the ranks; cuda_stream: a cudaStream_t (NULL: the
 * default stream). Collective: every rank calls it with a state of the same
 * (B, V, params) over disjoint tokens; *merged (on ctx, a CPU context) is the
 * union (destroy it with fls_stream_destroy). *bytes_sent (optional): the
 * bytes this rank contributed (its serialized state, padded to the largest
 * rank's), beside 8 bytes of size. */
FLS_API fls_status fls_stream_allgather_nccl(const fls_stream_t *state, fls_context_t *ctx, void *comm,
                                             void *cuda_stream, fls_stream_t **merged, size_t *bytes_sent);

#ifdef __cplusplus
}
#endif

#endif /* FLASHSAMPLE_NCCL_H */
