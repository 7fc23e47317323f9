"""The noise scheme keyword (fls_params.noise, docs/NOISE.md): noise="min-first" gives the command
line's `--noise min-first` tokens, the same on both paths and both flat methods, other tokens than
the default "per-token"; a bad value raises before the C call, and what the library refuses raises
its status with the library's explanation."""

import subprocess

import numpy as np
import pytest

import flashsample as fs

from conftest import logits


def test_the_default_is_per_token(ctx, rng):
    L = logits(rng, 3, 500)
    a = ctx.sample_logits(L, seed=4, draws=8).tokens
    assert (ctx.sample_logits(L, seed=4, draws=8, noise="per-token").tokens == a).all()
    assert fs.NOISES == {"per-token": 0, "min-first": 1}
    assert "noise" in fs.PARAM_NAMES


def test_min_first_paths_and_methods_agree_and_differ_from_per_token(ctx, rng):
    # exact inputs (multiples of 1/16 and 1/8): the fused logits are the materialized ones bit for bit
    B, V, D = 4, 1000, 16
    W = (rng.integers(-8, 9, (V, D)) / 16).astype(np.float32)
    H = (rng.integers(-8, 9, (B, D)) / 8).astype(np.float32)
    L = (H.astype(np.float64) @ W.T.astype(np.float64)).astype(np.float32)
    kw = dict(seed=11, offset=3, draws=16, temperature=np.array([1, 0.5, 0, 2], np.float32))
    mf = ctx.sample_logits(L, noise="min-first", **kw).tokens
    assert mf.shape == (B, 16) and ((mf >= 0) & (mf < V)).all()
    assert (ctx.sample_fused(W, H, noise="min-first", **kw).tokens == mf).all()
    assert (ctx.sample_fused(W, H, noise="min-first", method="unfused-gumbel", **kw).tokens == mf).all()
    assert (ctx.sample_logits(L, noise="MIN_FIRST", **kw).tokens == mf).all()  # spelled as the C enum
    pt = ctx.sample_logits(L, **kw).tokens
    assert (pt[2] == mf[2]).all()  # T = 0: greedy, no noise
    assert (pt != mf).any()


def test_min_first_equals_the_command_line(tool, tmp_path, ctx, rng):
    help_text = subprocess.run([tool, "sample", "--help"], capture_output=True, text=True).stdout
    if "--noise" not in help_text:
        pytest.skip("this flashsample tool has no --noise (an older build)")
    L = logits(rng, 3, 1031)
    np.save(tmp_path / "L.npy", L)
    out = tmp_path / "T.npy"
    r = subprocess.run(
        [tool, "sample", "--logits", str(tmp_path / "L.npy"), "--noise", "min-first", "--seed", "9",
         "--offset", "2", "--temperature", "0.8", "--samples", "12", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    T = np.load(out)
    s = ctx.sample_logits(L, noise="min-first", seed=9, offset=2, temperature=0.8, draws=12)
    assert T.shape == s.tokens.shape == (3, 12)
    assert (T == s.tokens).all()
    assert (T != ctx.sample_logits(L, seed=9, offset=2, temperature=0.8, draws=12).tokens).any()


@pytest.mark.parametrize("bad", ["bogus", "min first", ""])
def test_a_bad_value_raises_before_the_call(ctx, rng, bad):
    L = logits(rng, 2, 50)
    with pytest.raises(fs.FlashSampleValueError) as e:
        ctx.sample_logits(L, noise=bad)
    assert e.value.status_name == "FLS_ERR_PARAM" and isinstance(e.value, ValueError)
    assert "per-token" in str(e.value) and "min-first" in str(e.value)


@pytest.mark.parametrize("bad", [1, 1.0, True])
def test_a_value_not_a_name_raises(ctx, rng, bad):
    with pytest.raises(fs.FlashSampleTypeError) as e:
        ctx.sample_logits(logits(rng, 2, 50), noise=bad)
    assert e.value.status_name == "FLS_ERR_PARAM" and isinstance(e.value, TypeError)


@pytest.mark.parametrize(
    "extra",
    [dict(method="grouped"), dict(method="unfused-multinomial"), dict(top_k=5), dict(top_p=0.9),
     dict(without_replacement_k=2)],
)
def test_what_the_library_refuses_says_why(ctx, rng, extra):
    with pytest.raises(fs.FlashSampleError) as e:
        ctx.sample_logits(logits(rng, 2, 100), noise="min-first", **extra)
    assert e.value.status_name == "FLS_ERR_UNSUPPORTED"
    assert "noise" in e.value.detail  # fls_params_explain's words


def test_streams_refuse_min_first(ctx):
    with pytest.raises(fs.FlashSampleError) as e:
        ctx.stream(2, 100, noise="min-first")
    assert e.value.status_name == "FLS_ERR_UNSUPPORTED"
    with ctx.stream(2, 100, noise="per-token") as st:
        assert st.rows == 2
