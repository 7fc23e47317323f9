"""One-shot sampling on the CPU engine: every fls_params field, per-row arrays, dtypes, outputs."""

import numpy as np
import pytest

import flashsample as fs

from conftest import logits


def lse_ref(x):
    m = x.max(axis=1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True)))[:, 0]


def test_basic_shapes_and_determinism(ctx, rng):
    L = logits(rng, 4, 300)
    a = ctx.sample_logits(L, temperature=0.7, seed=3, draws=5)
    assert isinstance(a, fs.Sample)
    assert a.tokens.dtype == np.int64 and a.tokens.shape == (4, 5)
    assert a.logsumexp is None and a.logprobs is None
    assert ((a.tokens >= 0) & (a.tokens < 300)).all()
    b = fs.sample_logits(L, temperature=0.7, seed=3, draws=5)  # the default context
    assert (a.tokens == b.tokens).all()
    c = ctx.sample_logits(L, temperature=0.7, seed=4, draws=5)
    assert (a.tokens != c.tokens).any()


def test_context_properties():
    with fs.Context(threads=1, simd="portable", tile_v=64) as c:
        assert c.engine == "cpu" and c.threads == 1 and c.simd == "portable"
        assert "cpu" in repr(c)
    assert repr(c) == "Context(closed)"


def test_threads_simd_and_tiles_do_not_change_tokens(rng):
    L = logits(rng, 3, 2000)
    ref = None
    for kw in (dict(threads=1, simd="portable"), dict(threads=2), dict(threads=2, tile_v=128)):
        with fs.Context(**kw) as c:
            t = c.sample_logits(L, seed=11, draws=3).tokens
        ref = t if ref is None else ref
        assert (t == ref).all(), kw


def test_logsumexp_and_logprobs(ctx, rng):
    L = logits(rng, 3, 500)
    T = 0.8
    s = ctx.sample_logits(
        L, temperature=T, seed=1, draws=4, return_logsumexp=True, return_logprobs=True
    )
    x = L.astype(np.float64) / np.float32(T)
    np.testing.assert_allclose(s.logsumexp, lse_ref(x), rtol=1e-5)
    expect = np.take_along_axis(L / np.float32(T), s.tokens, axis=1) - s.logsumexp[:, None]
    np.testing.assert_allclose(s.logprobs, expect, rtol=1e-5, atol=1e-5)


def test_greedy(ctx, rng):
    L = logits(rng, 5, 400)
    s = ctx.sample_logits(
        L, temperature=0.0, seed=9, draws=2, return_logsumexp=True, return_logprobs=True
    )
    assert (s.tokens == L.argmax(axis=1)[:, None]).all()
    np.testing.assert_array_equal(s.logsumexp, L.max(axis=1))
    assert (s.logprobs == 0).all()


def test_per_row_temperature(ctx, rng):
    L = logits(rng, 4, 300)
    T = np.array([0.0, 0.5, 1.0, 0.0], dtype=np.float32)
    s = ctx.sample_logits(L, temperature=T, seed=2, draws=3)
    assert (s.tokens[[0, 3]] == L[[0, 3]].argmax(axis=1)[:, None]).all()
    # row b with its own temperature equals the scalar call for that row's temperature
    for b in (1, 2):
        one = ctx.sample_logits(L, temperature=float(T[b]), seed=2, draws=3).tokens
        assert (one[b] == s.tokens[b]).all()
    # a list works too
    assert (ctx.sample_logits(L, temperature=list(T), seed=2, draws=3).tokens == s.tokens).all()


def test_seeds_row_seeds_and_row_seed(ctx, rng):
    L = logits(rng, 4, 300)
    a = ctx.sample_logits(L, seed=77, draws=4).tokens
    seeds = fs.row_seed(77, np.arange(4))
    assert seeds.dtype == np.uint64
    assert int(seeds[2]) == fs.row_seed(77, 2)
    b = ctx.sample_logits(L, row_seeds=seeds, draws=4).tokens
    c = ctx.sample_logits(L, seed=seeds, draws=4).tokens  # an array seed is row_seeds
    assert (a == b).all() and (a == c).all()
    # position independence: row 2's seed on its own gives row 2's tokens
    d = ctx.sample_logits(L[2:3], row_seeds=seeds[2:3], draws=4).tokens
    assert (d[0] == a[2]).all()
    big = ctx.sample_logits(L, seed=2**64 - 1).tokens  # the whole uint64 range
    assert big.shape == (4, 1)


def test_offsets(ctx, rng):
    L = logits(rng, 3, 300)
    a = ctx.sample_logits(L, seed=5, offset=7, draws=3).tokens
    b = ctx.sample_logits(L, seed=5, row_offsets=[7, 7, 7], draws=3).tokens
    c = ctx.sample_logits(L, seed=5, offset=np.array([7, 8, 7], dtype=np.uint64), draws=3).tokens
    d = ctx.sample_logits(L, seed=5, offset=8, draws=3).tokens
    assert (a == b).all()
    assert (c[[0, 2]] == a[[0, 2]]).all() and (c[1] == d[1]).all()
    assert (a != d).any()


def test_draws_and_first_draw_split_a_run(ctx, rng):
    L = logits(rng, 3, 300)
    whole = ctx.sample_logits(L, seed=4, draws=6).tokens
    first = ctx.sample_logits(L, seed=4, draws=2, first_draw=0).tokens
    rest = ctx.sample_logits(L, seed=4, draws=4, first_draw=2).tokens
    assert (np.concatenate([first, rest], axis=1) == whole).all()


def test_methods(ctx, rng):
    L = logits(rng, 3, 256)
    fused = ctx.sample_logits(L, seed=1, draws=4, method="fused").tokens
    ug = ctx.sample_logits(L, seed=1, draws=4, method="unfused-gumbel").tokens
    assert (fused == ug).all()
    assert (
        ctx.sample_logits(L, seed=1, draws=4, method=fs.METHODS["unfused-gumbel"]).tokens == ug
    ).all()
    mn = ctx.sample_logits(L, seed=1, draws=4, method="unfused_multinomial").tokens
    assert mn.shape == (3, 4) and ((mn >= 0) & (mn < 256)).all()


def test_grouped(ctx, rng):
    L = logits(rng, 3, 1024)
    g = ctx.sample_logits(
        L,
        seed=1,
        draws=5,
        method="grouped",
        group_size=64,
        return_logsumexp=True,
        return_logprobs=True,
    )
    assert g.tokens.shape == (3, 5)
    np.testing.assert_allclose(g.logsumexp, lse_ref(L.astype(np.float64)), rtol=1e-5)
    default = ctx.sample_logits(L, seed=1, method="grouped").tokens
    explicit = ctx.sample_logits(
        L, seed=1, method="grouped", group_size=fs.GROUP_SIZE_DEFAULT
    ).tokens
    assert (default == explicit).all()
    # greedy rows are the argmax under the grouped method too
    t0 = ctx.sample_logits(L, temperature=0, method="grouped", group_size=32).tokens
    assert (t0[:, 0] == L.argmax(axis=1)).all()
    with pytest.raises(fs.FlashSampleError) as e:
        ctx.sample_logits(L, method="grouped", group_size=48)  # not a power of two
    assert e.value.status == -9


def _ranks(L):
    return np.argsort(-L, axis=1, kind="stable")


def test_top_k_min_p_top_p(ctx, rng):
    L = logits(rng, 4, 400, scale=3.0)
    order = _ranks(L)
    t = ctx.sample_logits(L, seed=3, draws=50, top_k=5).tokens
    for b in range(4):
        assert set(t[b]) <= set(order[b, :5])
    t1 = ctx.sample_logits(L, seed=3, draws=5, top_k=1).tokens
    assert (t1 == L.argmax(axis=1)[:, None]).all()
    # min-p: p_v >= p * p_max  <=>  x_v - max >= log p
    mp = 0.2
    t = ctx.sample_logits(L, seed=3, draws=50, min_p=mp).tokens
    x = np.take_along_axis(L, t, axis=1) - L.max(axis=1, keepdims=True)
    assert (x >= np.log(mp) - 1e-6).all()
    # top-p: the smallest head with mass >= p
    p = 0.5
    t = ctx.sample_logits(L, seed=3, draws=50, top_p=p, return_logsumexp=True)
    for b in range(4):
        q = np.exp(L[b, order[b]] - lse_ref(L[b : b + 1].astype(np.float64))[0])
        head = int(np.searchsorted(np.cumsum(q), p) + 1)
        assert set(t.tokens[b]) <= set(order[b, :head])
        # logsumexp is over the support (the head)
        np.testing.assert_allclose(
            t.logsumexp[b], lse_ref(L[b : b + 1, order[b, :head]].astype(np.float64))[0], rtol=1e-5
        )


def test_per_row_rules(ctx, rng):
    L = logits(rng, 4, 400, scale=3.0)
    argmax = L.argmax(axis=1)
    k = np.array([1, 0, 3, 1], dtype=np.int64)
    a = ctx.sample_logits(L, seed=2, draws=20, top_k=k).tokens
    b = ctx.sample_logits(L, seed=2, draws=20, row_top_k=k).tokens
    assert (a == b).all()
    assert (a[[0, 3]] == argmax[[0, 3], None]).all()
    assert (a[1] == ctx.sample_logits(L, seed=2, draws=20).tokens[1]).all()  # 0 = off
    p = np.array([1.0, 1e-6, 1.0, 1e-6], dtype=np.float32)
    t = ctx.sample_logits(L, seed=2, draws=5, top_p=p).tokens
    assert (t[[1, 3]] == argmax[[1, 3], None]).all()
    assert (ctx.sample_logits(L, seed=2, draws=5, row_top_p=p).tokens == t).all()
    m = [0.0, 1.0, 0.0, 1.0]
    t = ctx.sample_logits(L, seed=2, draws=5, min_p=m).tokens
    assert (t[[1, 3]] == argmax[[1, 3], None]).all()
    assert (ctx.sample_logits(L, seed=2, draws=5, row_min_p=m).tokens == t).all()


def test_filter_top_nsigma(ctx, rng):
    L = logits(rng, 3, 500)
    n = 1.0
    t = ctx.sample_logits(L, seed=1, draws=40, filter="top-nsigma", filter_value=n).tokens
    for b in range(3):
        keep = L[b] >= L[b].max() - n * L[b].std()
        assert keep[t[b]].all()
    off = ctx.sample_logits(L, seed=1, draws=40, filter="top-nsigma", filter_value=0.0).tokens
    assert (off == ctx.sample_logits(L, seed=1, draws=40).tokens).all()
    rv = np.array([0.0, n, 0.0])
    a = ctx.sample_logits(L, seed=1, draws=40, filter="top-nsigma", filter_value=rv).tokens
    b = ctx.sample_logits(L, seed=1, draws=40, filter="top-nsigma", row_filter_value=rv).tokens
    assert (a == b).all() and (a[0] == off[0]).all() and (a[1] == t[1]).all()
    with pytest.raises(fs.FlashSampleError) as e:
        ctx.sample_logits(L, filter="no-such-rule", filter_value=1.0)
    assert e.value.status == -9


def test_without_replacement(ctx, rng):
    L = logits(rng, 3, 300)
    s = ctx.sample_logits(L, seed=6, draws=4, without_replacement_k=5, return_logprobs=True)
    assert s.tokens.shape == (3, 4, 5) and s.logprobs.shape == (3, 4, 5)
    for b in range(3):
        for d in range(4):
            assert len(set(s.tokens[b, d])) == 5
    # position 0 is the with-replacement token (the same noise)
    one = ctx.sample_logits(L, seed=6, draws=4).tokens
    assert (s.tokens[:, :, 0] == one).all()
    # past the support: -1 with logprob 0
    s2 = ctx.sample_logits(
        L, seed=6, draws=2, top_k=2, without_replacement_k=4, return_logprobs=True
    )
    assert (s2.tokens[:, :, 2:] == -1).all() and (s2.logprobs[:, :, 2:] == 0).all()
    assert (s2.tokens[:, :, :2] >= 0).all()
    # per-row K_b: the output has the largest K, rows past their K_b are -1
    kb = np.array([1, 3, 2], dtype=np.int64)
    s3 = ctx.sample_logits(L, seed=6, draws=2, row_without_replacement_k=kb)
    assert s3.tokens.shape == (3, 2, 3)
    assert (s3.tokens[0, :, 1:] == -1).all() and (s3.tokens[2, :, 2:] == -1).all()
    assert (s3.tokens[1] >= 0).all()
    s4 = ctx.sample_logits(L, seed=6, draws=2, without_replacement_k=kb)  # an array K
    assert (s4.tokens == s3.tokens).all()
    s5 = ctx.sample_logits(
        L, seed=6, draws=2, without_replacement_k=4, row_without_replacement_k=kb
    )
    assert s5.tokens.shape == (3, 2, 4) and (s5.tokens[:, :, 3] == -1).all()


def test_masks(ctx, rng):
    L = logits(rng, 2, 100)
    L[:, ::2] = -np.inf
    t = ctx.sample_logits(L, seed=1, draws=50).tokens
    assert (t % 2 == 1).all()


def test_dtypes_f16_and_bf16(ctx, rng):
    L32 = logits(rng, 3, 300)
    L16 = L32.astype(np.float16)
    a = ctx.sample_logits(L16, seed=1, draws=4).tokens
    b = ctx.sample_logits(L16.astype(np.float32), seed=1, draws=4).tokens
    assert (a == b).all()
    assert (ctx.sample_logits(L16, dtype="f16", seed=1, draws=4).tokens == a).all()
    bits = fs.to_bf16(L32)
    assert bits.dtype == np.uint16
    c = ctx.sample_logits(bits, dtype="bf16", seed=1, draws=4).tokens
    d = ctx.sample_logits(fs.from_bf16(bits), seed=1, draws=4).tokens
    assert (c == d).all()
    assert (
        ctx.sample_logits(bits.view(np.int16), dtype="bfloat16", seed=1, draws=4).tokens == c
    ).all()


def test_bf16_conversion_matches_the_library():
    from flashsample import _capi

    vals = np.array(
        [
            0.0,
            -0.0,
            1.0,
            1.00390625,
            1.01171875,
            3.4e38,
            -3.4e38,
            np.inf,
            -np.inf,
            np.nan,
            1e-40,
            -1e-45,
            65504.0,
            1.0 + 2**-8,
            1.0 + 3 * 2**-8,
        ],
        dtype=np.float32,
    )
    vals = np.concatenate(
        [vals, np.random.default_rng(1).standard_normal(200).astype(np.float32) * 1e3]
    )
    bits = fs.to_bf16(vals)
    for v, b in zip(vals, bits):
        assert int(b) == _capi.fls_f32_to_bf16(float(v)), v
        back = fs.from_bf16(np.array([b], dtype=np.uint16))[0]
        c = _capi.fls_bf16_to_f32(int(b))
        assert (np.isnan(back) and np.isnan(c)) or back == c


def test_row_strided_view_is_zero_copy(ctx, rng):
    big = logits(rng, 4, 512)
    view = big[:, :300]  # rows 512 apart: ld = 512
    assert not view.flags.c_contiguous
    a = ctx.sample_logits(view, seed=8, draws=3).tokens
    b = ctx.sample_logits(np.ascontiguousarray(view), seed=8, draws=3).tokens
    assert (a == b).all()


def test_one_row_1d(ctx, rng):
    L = logits(rng, 1, 300)
    a = ctx.sample_logits(L[0], seed=2, draws=3).tokens
    assert a.shape == (1, 3)
    assert (a == ctx.sample_logits(L, seed=2, draws=3).tokens).all()


def test_fused_equals_logits_when_the_logits_are_the_same_floats(ctx, rng):
    # D = 1: every logit is one fp32 product, the same in numpy and in the library
    V, B = 700, 3
    W = rng.standard_normal((V, 1)).astype(np.float32)
    H = (2 * rng.standard_normal((B, 1))).astype(np.float32)
    L = (H @ W.T).astype(np.float32)
    kw = dict(seed=12, draws=4, temperature=0.9, return_logsumexp=True, return_logprobs=True)
    f = ctx.sample_fused(W, H, **kw)
    g = ctx.sample_logits(L, **kw)
    assert (f.tokens == g.tokens).all()
    np.testing.assert_allclose(f.logsumexp, g.logsumexp, rtol=1e-6)
    np.testing.assert_allclose(f.logprobs, g.logprobs, rtol=1e-5, atol=1e-6)
    assert (fs.sample_fused(W, H, **kw).tokens == f.tokens).all()


def test_fused_dtypes_and_rules(ctx, rng):
    V, D, B = 600, 16, 3
    W = rng.standard_normal((V, D)).astype(np.float32)
    H = rng.standard_normal((B, D)).astype(np.float32)
    a = ctx.sample_fused(fs.to_bf16(W), H, weights_dtype="bf16", seed=1, draws=3).tokens
    b = ctx.sample_fused(fs.from_bf16(fs.to_bf16(W)), H, seed=1, draws=3).tokens
    assert (a == b).all()
    c = ctx.sample_fused(W.astype(np.float16), H.astype(np.float16), seed=1, draws=3).tokens
    assert c.shape == (3, 3)
    s = ctx.sample_fused(W, H, seed=1, draws=2, top_k=3, without_replacement_k=3, method="fused")
    assert s.tokens.shape == (3, 2, 3)
    g = ctx.sample_fused(W, H, seed=1, draws=2, method="grouped", group_size=32).tokens
    assert g.shape == (3, 2)
    u = ctx.sample_fused(W, H, seed=1, draws=3, method="unfused-gumbel").tokens
    assert (u == ctx.sample_fused(W, H, seed=1, draws=3).tokens).all()


def test_counters(ctx, rng):
    c0 = ctx.counters()
    assert c0 == fs.Counters(0, 0, 0)
    L = logits(rng, 3, 200)
    ctx.sample_logits(L, seed=1)
    ctx.sample_logits(L[:2], seed=1, draws=3)
    c1 = ctx.counters()
    assert c1.calls == 2 and c1.rows == 5 and c1.second_pass_rows == 0
    # a flat row with top-p 0.9 over 4096 tokens: a nucleus larger than the kept list
    flat = (0.01 * rng.standard_normal((2, 4096))).astype(np.float32)
    ctx.sample_logits(flat, seed=1, top_p=0.9)
    c2 = ctx.counters()
    assert c2.calls == 3 and c2.second_pass_rows >= 1
    with pytest.raises(fs.FlashSampleError):
        ctx.sample_logits(L, temperature=-1.0)
    assert ctx.counters().calls == 3  # failed calls are not counted


def test_version_and_cuda_queries():
    assert fs.version() == "%d.%d.%d" % fs.HEADER_VERSION
    assert fs.__version__ == fs.version()
    assert isinstance(fs.cuda_built(), bool) and isinstance(fs.cuda_available(), bool)
    if not fs.cuda_built():
        assert not fs.cuda_available()
    assert fs.library_path().endswith(".so.0") or ".so" in fs.library_path()
    assert fs.status_string(0) == "success"
    assert fs.status_name(-7) == "FLS_ERR_NAN"


def test_logit_bound_and_chunk_norms(rng):
    W = rng.standard_normal((1000, 8)).astype(np.float32)
    norms = fs.chunk_max_norms(W, 256)
    assert norms.shape == (4,) and norms.dtype == np.float32
    true = np.linalg.norm(W.astype(np.float64), axis=1)
    for c in range(4):
        assert norms[c] >= true[c * 256 : (c + 1) * 256].max() * (1 - 1e-6)
    h = rng.standard_normal(8).astype(np.float32)
    bound = fs.logit_bound(float(norms.max()), float(np.linalg.norm(h)), 8)
    assert bound >= np.abs(W @ h).max()
