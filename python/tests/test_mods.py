"""Masks, logit bias and penalties through the bindings (fls_params 0.4; docs/RULES.md, "Masks,
bias and penalties").

A call with them is, bit for bit, the plain call on logits changed in numpy with the documented
fp32 operations (each one rounded to float32, no fused multiply-add); shapes and dtypes are
refused with a ValueError naming the keyword, values with the library's explanation. The GPU
tests at the end skip without the CUDA engine and a GPU."""

import numpy as np
import pytest

import flashsample as fs

from conftest import logits

F = np.float32


def bitmask(allowed):
    """int32 words (B, ceil(V / 32)) from a bool (B, V) array: bit v % 32 of word v // 32."""
    B, V = allowed.shape
    W = (V + 31) // 32
    words = np.zeros((B, W), np.uint32)
    for b, v in zip(*np.nonzero(allowed)):
        words[b, v // 32] |= np.uint32(1) << np.uint32(v % 32)
    return words.view(np.int32)


def per_row(x, B):
    a = np.asarray(x, F)
    return np.broadcast_to(a, (B,)) if a.ndim == 0 else a


def modify(
    L,
    allowed_bitmask=None,
    bitmask_rows=None,
    logit_bias_ids=None,
    logit_bias_values=None,
    seen_ids=None,
    seen_counts=None,
    repetition_penalty=1.0,
    presence_penalty=0.0,
    frequency_penalty=0.0,
):
    """docs/RULES.md's operations, one float32 rounding each: penalties of the seen tokens, then
    the bias, then the mask."""
    L = np.array(L, F, order="C")
    B, V = L.shape
    r, p, f = (per_row(x, B) for x in (repetition_penalty, presence_penalty, frequency_penalty))
    for b in range(B):
        if seen_ids is not None:
            for i, v in enumerate(seen_ids[b]):
                if v == -1:
                    continue
                c = int(seen_counts[b][i]) if seen_counts is not None else 0
                l = F(L[b, v])
                if r[b] != F(1):
                    l = F(l / r[b]) if l > 0 else F(l * r[b])
                fc = F(f[b] * F(c))
                l = F(l - fc)
                l = F(l - (p[b] if c > 0 else F(0)))
                L[b, v] = l
        if logit_bias_ids is not None:
            for v, beta in zip(logit_bias_ids[b], logit_bias_values[b]):
                if v != -1:
                    L[b, v] = F(L[b, v] + F(beta))
        if allowed_bitmask is not None and (bitmask_rows is None or bitmask_rows[b]):
            words = np.asarray(allowed_bitmask[b]).view(np.uint32)
            for v in range(V):
                if not (int(words[v // 32]) >> (v % 32)) & 1:
                    L[b, v] = -np.inf
    return L


def mods_case(rng, B, V, S=6, K=4):
    """Every kind at once: a mask (one row unmasked), bias with padding, seen lists with counts
    (zero counts too) and per-row penalties."""
    allowed = rng.random((B, V)) < 0.6
    allowed[:, 0] = True
    seen = np.full((B, S), -1, np.int64)
    counts = np.zeros((B, S), np.int32)
    ids = np.full((B, K), -1, np.int64)
    vals = np.zeros((B, K), F)
    for b in range(B):
        s = rng.choice(V, size=S - 1, replace=False)  # the last slot stays padding
        seen[b, : S - 1] = s
        counts[b, : S - 1] = rng.integers(0, 4, size=S - 1)
        k = rng.choice(V, size=K - 1, replace=False)
        ids[b, 1:] = k  # padding first: -1 ends nothing
        vals[b, 1:] = rng.normal(0, 2, size=K - 1).astype(F)
    return dict(
        allowed_bitmask=bitmask(allowed),
        bitmask_rows=(np.arange(B) % 3 != 1),
        logit_bias_ids=ids,
        logit_bias_values=vals,
        seen_ids=seen,
        seen_counts=counts,
        repetition_penalty=rng.uniform(0.5, 2.0, size=B).astype(F),
        presence_penalty=F(0.75),
        frequency_penalty=rng.uniform(-0.5, 0.5, size=B).astype(F),
    )


@pytest.mark.parametrize(
    "rule",
    [
        dict(),
        dict(top_k=20),
        dict(top_p=0.8, min_p=0.02),
        dict(without_replacement_k=3),
        dict(method="unfused-gumbel"),
        dict(method="unfused-multinomial"),
        dict(noise="min-first"),
        dict(method="grouped"),
    ],
)
def test_logits_equal_the_changed_logits(ctx, rng, rule):
    B, V = 6, 300
    L = logits(rng, B, V, scale=3.0)
    mods = mods_case(rng, B, V)
    kw = dict(temperature=0.8, seed=11, offset=3, draws=5, **rule)
    got = ctx.sample_logits(L, return_logsumexp=True, return_logprobs=True, **mods, **kw)
    want = ctx.sample_logits(modify(L, **mods), return_logsumexp=True, return_logprobs=True, **kw)
    assert (got.tokens == want.tokens).all()
    assert np.array_equal(got.logsumexp, want.logsumexp)
    assert np.array_equal(got.logprobs, want.logprobs)


def test_fused_equals_the_changed_logits(ctx, rng):
    """Logits that are exact in fp32 whatever the summation order (small integers times 1/4), so
    the fused product is known here bit for bit."""
    B, V, D = 4, 200, 8
    Wt = (rng.integers(-4, 5, size=(V, D)) * 0.25).astype(F)
    H = rng.integers(-4, 5, size=(B, D)).astype(F)
    L = np.ascontiguousarray((H.astype(np.float64) @ Wt.T.astype(np.float64)).astype(F))
    mods = mods_case(rng, B, V)
    kw = dict(temperature=0.9, seed=5, draws=4, top_k=30)
    got = ctx.sample_fused(Wt, H, return_logprobs=True, **mods, **kw)
    want = ctx.sample_logits(modify(L, **mods), return_logprobs=True, **kw)
    assert (got.tokens == want.tokens).all()
    assert np.array_equal(got.logprobs, want.logprobs)
    # the module-level function takes them too
    again = fs.sample_fused(Wt, H, **mods, **kw)
    assert (again.tokens == got.tokens).all()


def test_mask_bias_and_scalar_penalties(ctx, rng):
    B, V = 3, 100
    L = logits(rng, B, V)
    keep = [0, 31, 99]  # bit 31: the int32 word's sign bit
    allowed = np.zeros((B, V), bool)
    allowed[np.arange(B), keep] = True
    out = fs.sample_logits(L, allowed_bitmask=bitmask(allowed), draws=16, temperature=3.0)
    assert (out.tokens == np.array(keep)[:, None]).all()
    # uint32 words and a padded row stride (W > ceil(V / 32)) are the same mask
    wide = np.zeros((B, 7), np.uint32)
    wide[:, :4] = bitmask(allowed).view(np.uint32)
    out = ctx.sample_logits(L, allowed_bitmask=wide, draws=16, temperature=3.0)
    assert (out.tokens == np.array(keep)[:, None]).all()
    # a bias of +1000 always wins (the noise is at most 45.1)
    ids = np.array([[7, -1], [-1, 50], [3, 4]], np.int64)
    vals = np.array([[1000, 0], [0, 1000], [-1000, 1000]], F)
    out = ctx.sample_logits(L, logit_bias_ids=ids, logit_bias_values=vals, draws=16)
    assert (out.tokens == np.array([7, 50, 4])[:, None]).all()
    # scalar penalties, lists as input, one row as a 1-D array
    seen = [[1, 2, 3], [4, -1, 5], [-1, -1, -1]]
    cnt = [[0, 1, 2], [3, 0, 1], [0, 0, 0]]
    for r, p, f in ((1.3, 0.0, 0.0), (1.0, 0.5, 0.0), (0.8, -0.25, 0.7)):
        kw = dict(seed=2, draws=8)
        mods = dict(
            seen_ids=seen,
            seen_counts=cnt,
            repetition_penalty=r,
            presence_penalty=p,
            frequency_penalty=f,
        )
        got = ctx.sample_logits(L, **mods, **kw)
        ref = modify(
            L,
            seen_ids=np.array(seen),
            seen_counts=np.array(cnt),
            repetition_penalty=r,
            presence_penalty=p,
            frequency_penalty=f,
        )
        assert (got.tokens == ctx.sample_logits(ref, **kw).tokens).all()
    one = ctx.sample_logits(
        L[0], seen_ids=np.array([1, 2]), repetition_penalty=2.0, seed=4, draws=8
    )
    ref = modify(L[:1], seen_ids=np.array([[1, 2]]), repetition_penalty=2.0)
    assert (one.tokens == ctx.sample_logits(ref[0], seed=4, draws=8).tokens).all()
    # row_ aliases for the per-row penalties
    rr = np.array([1.5, 1.0, 0.5], F)
    a = ctx.sample_logits(L, seen_ids=seen, row_repetition_penalty=rr, draws=8)
    b = ctx.sample_logits(L, seen_ids=seen, repetition_penalty=rr, draws=8)
    assert (a.tokens == b.tokens).all()


def test_shape_and_dtype_errors_name_the_keyword(ctx, rng):
    B, V = 3, 70
    L = logits(rng, B, V)
    ok = bitmask(np.ones((B, V), bool))
    ids = np.zeros((B, 2), np.int64)
    vals = np.zeros((B, 2), F)
    bad = [
        (dict(allowed_bitmask=ok.astype(np.int64)), "allowed_bitmask must be int32"),
        (dict(allowed_bitmask=ok[:, :2]), "allowed_bitmask has 2 words per row"),
        (dict(allowed_bitmask=ok[:2]), "allowed_bitmask must be (3, K)"),
        (dict(allowed_bitmask=ok, bitmask_rows=[1, 0]), "bitmask_rows must have one entry per row"),
        (dict(allowed_bitmask=ok, bitmask_rows=[0.5, 1, 1]), "bitmask_rows must be bool or uint8"),
        (dict(bitmask_rows=[1, 1, 1]), "bitmask_rows needs allowed_bitmask"),
        (dict(logit_bias_ids=ids), "logit_bias_ids needs logit_bias_values"),
        (dict(logit_bias_values=vals), "logit_bias_values needs logit_bias_ids"),
        (
            dict(logit_bias_ids=ids, logit_bias_values=vals[:, :1]),
            "logit_bias_values must be (3, 2)",
        ),
        (dict(logit_bias_ids=vals, logit_bias_values=vals), "logit_bias_ids must hold integers"),
        (
            dict(logit_bias_ids=ids, logit_bias_values=ids.astype(str)),
            "logit_bias_values must hold numbers",
        ),
        (dict(seen_counts=[[1], [1], [1]]), "seen_counts needs seen_ids"),
        (dict(seen_ids=ids, seen_counts=np.zeros((B, 3), np.int32)), "seen_counts must be (3, 2)"),
        (dict(seen_ids=ids, seen_counts=np.full((B, 2), 2**40)), "seen_counts does not fit int32"),
        (dict(seen_ids=np.zeros((B, 2, 1), np.int64)), "seen_ids must be (3, K)"),
        (dict(repetition_penalty=[1.0, 2.0]), "row_repetition_penalty must have one entry per row"),
        (
            dict(presence_penalty=np.ones((B, 1))),
            "row_presence_penalty must have one entry per row",
        ),
    ]
    for kw, want in bad:
        with pytest.raises(ValueError, match=want.replace("(", r"\(").replace(")", r"\)")):
            ctx.sample_logits(L, **kw)


def test_values_out_of_range_give_the_library_explanation(ctx, rng):
    B, V = 2, 40
    L = logits(rng, B, V)
    ids = np.array([[3, -1], [7, 40]], np.int64)
    vals = np.ones((B, 2), F)
    cases = [
        (
            dict(logit_bias_ids=ids, logit_bias_values=vals),
            "logit_bias_ids = 40 (row 1) is out of range",
        ),
        (dict(logit_bias_ids=[[3, 3], [1, 2]], logit_bias_values=vals), "listed twice"),
        (
            dict(logit_bias_ids=[[3, 4], [1, 2]], logit_bias_values=[[1, np.inf], [0, 0]]),
            "logit_bias_values = inf (row 0, token 4)",
        ),
        (
            dict(seen_ids=[[1, 2], [3, -1]], seen_counts=[[0, -1], [0, 0]]),
            "seen_counts = -1 (row 0, token 2)",
        ),
        (dict(seen_ids=[[1, -5], [3, -1]]), "seen_ids = -5 (row 0)"),
        (dict(repetition_penalty=0.0), "repetition_penalty = 0 is out of range"),
        (dict(repetition_penalty=[1.0, -2.0]), "repetition_penalty = -2 (row 1)"),
        (dict(frequency_penalty=np.nan), "frequency_penalty = nan"),
    ]
    for kw, want in cases:
        with pytest.raises(fs.FlashSampleError) as e:
            ctx.sample_logits(L, **kw)
        assert e.value.status == -9, (kw, e.value)
        assert want in str(e.value), (kw, str(e.value))
    # a mask that leaves a row nothing, and what the library does not take
    with pytest.raises(fs.FlashSampleError) as e:
        ctx.sample_logits(L, allowed_bitmask=np.array([[-1, -1], [0, 0]], np.int32))
    assert e.value.status == -8 and "no finite logit left" in str(e.value)
    with pytest.raises(fs.FlashSampleError) as e:
        ctx.stream(B, V, repetition_penalty=1.5)
    assert e.value.status == -11
    # params_on_device is the CUDA engine's: host arrays with it are refused, and so is the cpu engine
    with pytest.raises(ValueError, match="params_on_device needs device memory"):
        ctx.sample_logits(L, seen_ids=[[1], [2]], params_on_device=True)
    # a bias of +inf after the bias: NaN/inf checks see the changed logits
    with pytest.raises(fs.FlashSampleError) as e:
        ctx.sample_logits(
            L, logit_bias_ids=[[1], [2]], logit_bias_values=[[3e38], [0]], temperature=1e-3
        )
    assert e.value.status in (-6, -7)


# ---- the CUDA engine (host arrays, and device arrays with params_on_device=True) ----------------


def _gpu():
    if not fs.cuda_available():
        pytest.skip("the CUDA engine: %s" % ("no GPU" if fs.cuda_built() else "not built"))
    return pytest.importorskip("torch")


@pytest.mark.parametrize("on_device", [False, True])
def test_cuda_engine_gives_the_cpu_tokens(ctx, rng, on_device):
    torch = _gpu()
    B, V = 8, 5000
    L = logits(rng, B, V, scale=3.0)
    mods = mods_case(rng, B, V, S=16, K=8)
    # a rule with device arrays takes an async context (docs/GPU.md): the host arrays carry it
    kw = dict(temperature=0.7, seed=3, draws=5, offset=2, **({} if on_device else dict(top_k=50)))
    want = ctx.sample_logits(L, return_logprobs=True, **mods, **kw)
    if on_device:
        dev = {
            k: torch.from_numpy(np.ascontiguousarray(np.asarray(v))).cuda()
            for k, v in mods.items()
            if np.ndim(v) > 0
        }
        dev.update({k: float(v) for k, v in mods.items() if np.ndim(v) == 0})
        args = dict(dev, **kw, params_on_device=True)
    else:
        args = dict(mods, **kw)
    with fs.Context(engine="cuda") as g:
        got = g.sample_logits(torch.from_numpy(L).cuda(), return_logprobs=True, **args)
        assert (got.tokens.cpu().numpy() == want.tokens).all()
        np.testing.assert_allclose(got.logprobs.cpu().numpy(), want.logprobs, rtol=1e-4, atol=1e-4)
