"""The bindings give the tokens of the command line (`flashsample sample`) on the same inputs.

The tool: $FLASHSAMPLE_TOOL, else a built build*/tools/flashsample of this checkout; without one
these tests skip, saying why (python/run-tests.sh builds it)."""

import subprocess

import numpy as np
import pytest

import flashsample as fs

from conftest import logits


def run_cli(tool, tmp_path, args):
    out = tmp_path / "T.npy"
    if out.exists():
        out.unlink()
    r = subprocess.run(
        [tool, "sample"] + [str(a) for a in args] + ["--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, "flashsample sample failed:\n" + r.stdout + r.stderr
    return np.load(out)


@pytest.fixture(scope="module")
def cli_help(tool):
    return subprocess.run([tool, "sample", "--help"], capture_output=True, text=True).stdout


def need(cli_help, flag):
    if flag not in cli_help:
        pytest.skip("this flashsample tool has no %s (an older build)" % flag)


def test_the_documented_command(tool, tmp_path, ctx, rng):
    L = logits(rng, 4, 1000)
    np.save(tmp_path / "L.npy", L)
    T = run_cli(
        tool,
        tmp_path,
        ["--logits", tmp_path / "L.npy", "--temperature", "0.7", "--seed", "3", "--samples", "5"],
    )
    s = ctx.sample_logits(L, temperature=0.7, seed=3, draws=5)
    assert T.dtype == np.int64 and T.shape == s.tokens.shape == (4, 5)
    assert (T == s.tokens).all()


def test_f16_row_seeds_offset_and_greedy(tool, tmp_path, ctx, rng):
    L = logits(rng, 3, 777).astype(np.float16)
    seeds = np.array([5, 2**63 + 7, 123456789], dtype=np.uint64)
    np.save(tmp_path / "L.npy", L)
    np.save(tmp_path / "S.npy", seeds)
    T = run_cli(
        tool,
        tmp_path,
        [
            "--logits",
            tmp_path / "L.npy",
            "--row-seeds",
            tmp_path / "S.npy",
            "--offset",
            "41",
            "--samples",
            "6",
            "--temperature",
            "1.3",
        ],
    )
    s = ctx.sample_logits(L, row_seeds=seeds, offset=41, draws=6, temperature=1.3)
    assert (T == s.tokens).all()
    T0 = run_cli(tool, tmp_path, ["--logits", tmp_path / "L.npy", "--temperature", "0"])
    assert (T0 == ctx.sample_logits(L, temperature=0).tokens).all()


def test_fused_bf16_weights(tool, tmp_path, ctx, rng):
    V, D, B = 900, 32, 3
    W = rng.standard_normal((V, D)).astype(np.float32)
    H = rng.standard_normal((B, D)).astype(np.float32)
    np.save(tmp_path / "W.npy", W)
    np.save(tmp_path / "H.npy", H)
    T = run_cli(
        tool,
        tmp_path,
        [
            "--weights",
            tmp_path / "W.npy",
            "--hidden",
            tmp_path / "H.npy",
            "--weights-dtype",
            "bf16",
            "--seed",
            "8",
            "--samples",
            "4",
        ],
    )
    s = ctx.sample_fused(fs.to_bf16(W), H, weights_dtype="bf16", seed=8, draws=4)
    assert (T == s.tokens).all()
    T32 = run_cli(
        tool,
        tmp_path,
        [
            "--weights",
            tmp_path / "W.npy",
            "--hidden",
            tmp_path / "H.npy",
            "--seed",
            "8",
            "--samples",
            "4",
        ],
    )
    assert (T32 == ctx.sample_fused(W, H, seed=8, draws=4).tokens).all()


def test_rules_and_per_row_arrays(tool, tmp_path, ctx, rng, cli_help):
    need(cli_help, "--top-k")
    L = logits(rng, 4, 600, scale=3.0)
    np.save(tmp_path / "L.npy", L)
    base = ["--logits", tmp_path / "L.npy", "--seed", "2", "--samples", "8"]
    T = run_cli(
        tool,
        tmp_path,
        base + ["--min-p", "0.01", "--top-k", "50", "--top-p", "0.9", "--filter", "top-nsigma=1.5"],
    )
    s = ctx.sample_logits(
        L, seed=2, draws=8, min_p=0.01, top_k=50, top_p=0.9, filter="top-nsigma", filter_value=1.5
    )
    assert (T == s.tokens).all()
    k = np.array([1, 5, 0, 20], dtype=np.int64)
    p = np.array([0.5, 1.0, 0.8, 0.95], dtype=np.float32)
    np.save(tmp_path / "k.npy", k)
    np.save(tmp_path / "p.npy", p)
    T = run_cli(
        tool,
        tmp_path,
        base + ["--top-k-per-row", tmp_path / "k.npy", "--top-p-per-row", tmp_path / "p.npy"],
    )
    assert (T == ctx.sample_logits(L, seed=2, draws=8, top_k=k, top_p=p).tokens).all()


def test_without_replacement(tool, tmp_path, ctx, rng, cli_help):
    need(cli_help, "--without-replacement")
    L = logits(rng, 3, 400)
    np.save(tmp_path / "L.npy", L)
    T = run_cli(
        tool,
        tmp_path,
        [
            "--logits",
            tmp_path / "L.npy",
            "--seed",
            "4",
            "--samples",
            "3",
            "--without-replacement",
            "4",
            "--top-k",
            "3",
        ],
    )
    s = ctx.sample_logits(L, seed=4, draws=3, without_replacement_k=4, top_k=3)
    assert T.shape == s.tokens.shape == (3, 3, 4)
    assert (T == s.tokens).all()


@pytest.mark.parametrize("method", ["grouped", "unfused-gumbel", "unfused-multinomial"])
def test_methods(tool, tmp_path, ctx, rng, cli_help, method):
    need(cli_help, "--method")
    L = logits(rng, 3, 1024)
    np.save(tmp_path / "L.npy", L)
    args = ["--logits", tmp_path / "L.npy", "--seed", "6", "--samples", "5", "--method", method]
    kw = dict(seed=6, draws=5, method=method)
    if method == "grouped":
        args += ["--group-size", "64"]
        kw["group_size"] = 64
    T = run_cli(tool, tmp_path, args)
    assert (T == ctx.sample_logits(L, **kw).tokens).all()


def test_streamed_and_sharded(tool, tmp_path, ctx, rng, cli_help):
    need(cli_help, "--shards")
    L = logits(rng, 2, 1500)
    np.save(tmp_path / "L.npy", L)
    T = run_cli(
        tool,
        tmp_path,
        [
            "--logits",
            tmp_path / "L.npy",
            "--seed",
            "1",
            "--samples",
            "3",
            "--stream-chunk",
            "200",
            "--shards",
            "3",
        ],
    )
    st = ctx.stream(2, 1500, seed=1, draws=3)
    for v0 in range(0, 1500, 128):
        st.feed_logits(L[:, v0 : v0 + 128], v0)
    assert (T == st.finalize().tokens).all()
