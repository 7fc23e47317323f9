"""The streaming API (fls_stream_*): chunked feeds equal the one-shot call, merge, serialization,
skip with norm bounds, progress, errors."""

import numpy as np
import pytest

import flashsample as fs

from conftest import logits

B, V = 3, 1000


def chunks(rng, V, n):
    cuts = np.sort(rng.choice(np.arange(1, V), size=n - 1, replace=False))
    edges = [0] + list(cuts) + [V]
    parts = [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]
    order = rng.permutation(len(parts))
    return [parts[i] for i in order]


@pytest.mark.parametrize("method,extra", [("fused", {}), ("grouped", {"group_size": 64})])
def test_chunked_feed_equals_one_shot(ctx, rng, method, extra):
    L = logits(rng, B, V)
    kw = dict(temperature=0.8, seed=5, offset=3, draws=4, method=method, **extra)
    one = ctx.sample_logits(L, return_logsumexp=True, return_logprobs=True, **kw)
    with ctx.stream(B, V, **kw) as st:
        for a, b in chunks(rng, V, 7):
            st.feed_logits(L[:, a:b], a)  # column slices: row-strided views, no copy
        assert st.progress() == fs.Progress(V, 0, 7, 0)
        got = st.finalize(return_logsumexp=True, return_logprobs=True)
    assert (got.tokens == one.tokens).all()
    np.testing.assert_allclose(got.logsumexp, one.logsumexp, rtol=1e-6)
    np.testing.assert_allclose(got.logprobs, one.logprobs, rtol=1e-5, atol=1e-6)


def test_per_row_params_and_first_draw(ctx, rng):
    L = logits(rng, B, V)
    kw = dict(
        temperature=[0.5, 0.0, 1.5],
        row_seeds=[1, 2, 3],
        row_offsets=[0, 9, 4],
        draws=2,
        first_draw=5,
    )
    one = ctx.sample_logits(L, **kw).tokens
    st = fs.Stream(ctx, B, V, **kw)
    st.feed_logits(L[:, 500:], 500)
    st.feed_logits(L[:, :500], 0)
    assert (st.finalize().tokens == one).all()
    st.close()


def test_feed_fused_equals_sample_fused(ctx, rng):
    D = 12
    W = rng.standard_normal((V, D)).astype(np.float32)
    H = rng.standard_normal((B, D)).astype(np.float32)
    for method in ("fused", "grouped"):
        one = ctx.sample_fused(W, H, seed=2, draws=3, method=method).tokens
        st = ctx.stream(B, V, seed=2, draws=3, method=method)
        for a, b in chunks(rng, V, 5):
            st.feed_fused(W[a:b], H, a)
        assert (st.finalize().tokens == one).all(), method
    bits = fs.to_bf16(W)
    one = ctx.sample_fused(bits, H, weights_dtype="bf16", seed=2).tokens
    st = ctx.stream(B, V, seed=2)
    st.feed_fused(bits[:400], H, 0, weights_dtype="bf16")
    st.feed_fused(bits[400:], H, 400, weights_dtype="bf16")
    assert (st.finalize().tokens == one).all()


@pytest.mark.parametrize("method", ["fused", "grouped"])
def test_shards_merge_and_serialize(ctx, rng, method):
    L = logits(rng, B, V)
    kw = dict(seed=9, draws=3, method=method, group_size=32)
    one = ctx.sample_logits(L, return_logsumexp=True, **kw)
    edges = [0, 250, 333, 700, V]  # 333 and 700 split groups of 32: pending partials
    states = []
    for a, b in zip(edges[:-1], edges[1:]):
        s = ctx.stream(B, V, **kw)
        s.feed_logits(L[:, a:b], a)
        states.append(s)
    blobs = [s.serialize() for s in states]
    assert all(isinstance(x, bytes) and len(x) > 0 for x in blobs)
    # rank 2's view: its own state, the others' bytes in any order
    merged = states[2]
    for i in (3, 0, 1):
        merged.merge_bytes(blobs[i])
    got = merged.finalize(return_logsumexp=True)
    assert (got.tokens == one.tokens).all()
    np.testing.assert_allclose(got.logsumexp, one.logsumexp, rtol=1e-6)
    # states merged directly
    a = ctx.stream(B, V, **kw)
    for i in (1, 0, 3, 2):
        b = fs.Stream.deserialize(ctx, blobs[i], B, V, **kw)
        a.merge(b)
    assert (a.finalize().tokens == one.tokens).all()


def test_serialize_round_trip_continues(ctx, rng):
    L = logits(rng, B, V)
    kw = dict(seed=4, draws=2)
    one = ctx.sample_logits(L, **kw).tokens
    st = ctx.stream(B, V, **kw)
    st.feed_logits(L[:, :600], 0)
    data = st.serialize()
    st.close()
    again = fs.Stream.deserialize(ctx, data, B, V, **kw)
    assert again.progress().tokens_fed == 600
    assert again.serialize() == data
    again.feed_logits(L[:, 600:], 600)
    assert (again.finalize().tokens == one).all()


def test_deserialize_checks_the_request_and_the_bytes(ctx, rng):
    L = logits(rng, B, V)
    st = ctx.stream(B, V, seed=4)
    st.feed_logits(L[:, :100], 0)
    data = st.serialize()
    with pytest.raises(fs.FlashSampleError) as e:  # another seed: another request
        fs.Stream.deserialize(ctx, data, B, V, seed=5)
    assert e.value.status == -9
    with pytest.raises(fs.FlashSampleError) as e:  # another B
        fs.Stream.deserialize(ctx, data, B + 1, V, seed=4)
    assert e.value.status == -9
    bad = bytearray(data)
    bad[0] ^= 0xFF  # the header
    with pytest.raises(fs.FlashSampleError) as e:
        fs.Stream.deserialize(ctx, bytes(bad), B, V, seed=4)
    assert e.value.status == -16  # FLS_ERR_FORMAT
    with pytest.raises(fs.FlashSampleError) as e:
        fs.Stream.deserialize(ctx, data[:10], B, V, seed=4)
    assert e.value.status == -16


def test_stream_errors(ctx, rng):
    L = logits(rng, B, V)
    st = ctx.stream(B, V, seed=1)
    st.feed_logits(L[:, :100], 0)
    with pytest.raises(fs.FlashSampleError) as e:  # fed twice
        st.feed_logits(L[:, 50:150], 50)
    assert e.value.status == -9
    with pytest.raises(fs.FlashSampleError) as e:  # not every token yet
        st.finalize()
    with pytest.raises(fs.FlashSampleError) as e:
        st.feed_logits(L[:2, 100:200], 100)
    assert e.value.status == -4 and "rows" in str(e.value)
    bad = L[:, 100:200].copy()
    bad[1, 3] = np.nan
    with pytest.raises(fs.FlashSampleError) as e:
        st.feed_logits(bad, 100)
    assert e.value.status == -7 and "logits[1, 3]" in str(e.value)
    assert st.progress().tokens_fed == 100  # unchanged by the failures
    with pytest.raises(fs.FlashSampleError) as e:  # rules are not streamed
        ctx.stream(B, V, top_k=3)
    assert e.value.status == -11
    other = ctx.stream(B, V, seed=2)
    with pytest.raises(fs.FlashSampleError) as e:
        st.merge(other)
    assert e.value.status == -9
    with pytest.raises(fs.FlashSampleError):
        st.feed_logits(L[:, :10].astype(np.float64), 0)
    ctx.close()  # closes its states too
    with pytest.raises(fs.FlashSampleError) as e:
        st.progress()
    assert e.value.status == -1


def test_skip_with_norm_bounds(ctx, rng):
    # Peaked rows: the head is a few large logits in the first chunk; the rest cannot win.
    D, chunk = 16, 256
    W = (0.05 * rng.standard_normal((V, D))).astype(np.float32)
    H = rng.standard_normal((B, D)).astype(np.float32)
    W[:8] = 3.0 * H[0] / np.linalg.norm(H[0]) * 4  # tokens 0..7 have large logits for row 0
    W[8:16] = 3.0 * H[1] / np.linalg.norm(H[1]) * 4
    W[16:24] = 3.0 * H[2] / np.linalg.norm(H[2]) * 4
    kw = dict(seed=3, draws=2, temperature=0.5)
    one = ctx.sample_fused(W, H, **kw).tokens
    norms = fs.chunk_max_norms(W, chunk)
    hn = np.linalg.norm(H.astype(np.float64), axis=1)
    st = ctx.stream(B, V, **kw)
    skipped = 0
    for c, v0 in enumerate(range(0, V, chunk)):
        n = min(chunk, V - v0)
        if c > 0:
            upper = np.array(
                [fs.logit_bound(float(norms[c]), float(h), D) for h in hn], dtype=np.float32
            )
            if st.skip(v0, n, upper):
                skipped += 1
                continue
        st.feed_fused(W[v0 : v0 + n], H, v0)
    assert skipped >= 1
    p = st.progress()
    assert p.chunks_skipped == skipped and p.tokens_fed + p.tokens_skipped == V
    assert (st.finalize().tokens == one).all()
    with pytest.raises(fs.FlashSampleError) as e:  # the skipped mass is unknown
        st.finalize(return_logsumexp=True)
    assert e.value.status == -11
    # a bound that is too low is the caller's promise; a huge one never skips
    st2 = ctx.stream(B, V, **kw)
    st2.feed_fused(W[:256], H, 0)
    assert st2.skip(256, 256, 1e30) is False
    assert st2.progress().tokens_skipped == 0


def test_nccl_is_optional(ctx):
    st = ctx.stream(2, 10)
    if fs.nccl_available():
        pytest.skip("libflashsample_nccl is installed (needs ranks to test)")
    with pytest.raises(fs.FlashSampleError) as e:
        st.allgather_nccl(0)
    assert e.value.status == -11
