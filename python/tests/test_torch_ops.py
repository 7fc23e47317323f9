"""The torch custom ops (flashsample.torch_ops): eager calls equal the direct bindings,
torch.compile(fullgraph=True) equals eager, and on a GPU a decode step captured in a
torch.cuda.CUDAGraph replays with the eager tokens. Skipped without torch (the module itself
imports without it: checked
without torch too)."""

import importlib
import subprocess
import sys

import numpy as np
import pytest

import flashsample as fs


def test_module_imports_without_torch():
    """A fresh interpreter where `import torch` fails: the module imports and says so."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import flashsample.torch_ops as t\n"
        "assert not t.available()\n"
        "assert 'flashsample' in sys.modules\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(
    torch is None or not hasattr(getattr(torch, "library", None), "custom_op"),
    reason="torch (>= 2.4, for torch.library.custom_op) is not installed",
)

ops = importlib.import_module("flashsample.torch_ops")  # imports without torch too


def _case(B=4, V=300, D=16, seed=7):
    g = torch.Generator().manual_seed(seed)
    L = torch.randn(B, V, generator=g) * 3
    W = torch.randn(V, D, generator=g)
    H = torch.randn(B, D, generator=g)
    seeds = torch.arange(B, dtype=torch.int64) * 1000 + 17
    offsets = torch.full((B,), 5, dtype=torch.int64)
    allowed = torch.rand(B, V, generator=g) < 0.7
    allowed[:, 0] = True
    words = torch.zeros(B, (V + 31) // 32, dtype=torch.int64)
    for b, v in allowed.nonzero().tolist():
        words[b, v // 32] |= 1 << (v % 32)
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    mods = dict(
        allowed_bitmask=words,
        logit_bias_ids=torch.tensor([[3, -1]] * B, dtype=torch.int64),
        logit_bias_values=torch.tensor([[2.5, 0.0]] * B, dtype=torch.float32),
        seen_ids=torch.tensor([[1, 2, 3]] * B, dtype=torch.int64),
        seen_counts=torch.tensor([[0, 1, 2]] * B, dtype=torch.int32),
        repetition_penalty=torch.linspace(0.8, 1.6, B),
        presence_penalty=0.5,
        frequency_penalty=0.25,
    )
    return L, W, H, seeds, offsets, mods


def _direct(fn, *args, **kw):
    """flashsample's own call with the same values (numpy, the CPU engine)."""
    conv = {}
    for k, v in kw.items():
        if isinstance(v, torch.Tensor):
            v = v.numpy()
            if k in ("row_seeds", "row_offsets"):
                v = v.view(np.uint64)
        conv[k] = v
    return fn(*[a.numpy() for a in args], **conv)


@needs_torch
def test_eager_equals_the_direct_call():
    L, W, H, seeds, offsets, mods = _case()
    kw = dict(temperature=0.8, row_seeds=seeds, row_offsets=offsets, draws=3, top_k=40)
    tok, lp = ops.sample_logits(L, return_logprobs=True, **kw, **mods)
    ref = _direct(fs.sample_logits, L, return_logprobs=True, **kw, **mods)
    assert tok.dtype == torch.int64 and tuple(tok.shape) == (4, 3)
    assert (tok.numpy() == ref.tokens).all()
    assert np.array_equal(lp.numpy(), ref.logprobs)
    tok, lp = ops.sample_fused(W, H, **kw, **mods)
    ref = _direct(fs.sample_fused, W, H, **kw, **mods)
    assert (tok.numpy() == ref.tokens).all() and lp.numel() == 0
    # the seed scalar derives fls_row_seed(seed, b), as the bindings do
    tok, _ = ops.sample_logits(L, seed=9, draws=4)
    assert (tok.numpy() == fs.sample_logits(L.numpy(), seed=9, draws=4).tokens).all()
    # without replacement: (B, draws, K)
    tok, lp = ops.sample_logits(L, without_replacement_k=3, draws=2, return_logprobs=True)
    assert tuple(tok.shape) == (4, 2, 3) and tuple(lp.shape) == (4, 2, 3)


@needs_torch
def test_fake_gives_the_shapes():
    L, W, H, seeds, offsets, mods = _case()
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fL = mode.from_tensor(L)
        fH, fW = mode.from_tensor(H), mode.from_tensor(W)
        fs_, fo = mode.from_tensor(seeds), mode.from_tensor(offsets)
        tok, lp = ops.sample_logits(
            fL, row_seeds=fs_, row_offsets=fo, draws=5, return_logprobs=True
        )
        assert tuple(tok.shape) == (4, 5) and tok.dtype == torch.int64
        assert tuple(lp.shape) == (4, 5) and lp.dtype == torch.float32
        tok, lp = ops.sample_fused(fW, fH, row_seeds=fs_, row_offsets=fo, without_replacement_k=2)
        assert tuple(tok.shape) == (4, 1, 2) and tuple(lp.shape) == (0,)


@needs_torch
def test_compile_fullgraph_equals_eager():
    L, W, H, seeds, offsets, mods = _case()

    def step(logits, weights, hidden, seeds, offsets, rep):
        a, lp = ops.sample_logits(
            logits * 1.0,
            temperature=0.7,
            row_seeds=seeds,
            row_offsets=offsets,
            draws=2,
            top_k=25,
            repetition_penalty=rep,
            seen_ids=mods["seen_ids"],
            allowed_bitmask=mods["allowed_bitmask"],
            return_logprobs=True,
        )
        b, _ = ops.sample_fused(weights, hidden, row_seeds=seeds, row_offsets=offsets + 1)
        return a, lp, b

    rep = mods["repetition_penalty"]
    want = step(L, W, H, seeds, offsets, rep)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    got = compiled(L, W, H, seeds, offsets, rep)
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    # other values through the same compiled graph
    got = compiled(L, W, H, seeds + 1, offsets + 3, rep * 1.1)
    want = step(L, W, H, seeds + 1, offsets + 3, rep * 1.1)
    for g, w in zip(got, want):
        assert torch.equal(g, w)


@needs_torch
def test_errors_come_from_the_op():
    L, W, H, seeds, offsets, mods = _case()
    with pytest.raises(fs.FlashSampleError) as e:
        ops.sample_logits(
            L,
            row_seeds=seeds,
            logit_bias_ids=torch.tensor([[999, -1]] * 4),
            logit_bias_values=torch.ones(4, 2),
        )
    assert e.value.status == -9 and "logit_bias_ids = 999" in str(e.value)


# ---- CUDA: one decode step captured in a CUDA graph ------------------------------------------


@needs_torch
def test_cuda_graph_decode_step_replays_the_eager_tokens():
    if not torch.cuda.is_available() or not fs.cuda_available():
        pytest.skip("a GPU and the CUDA engine are needed")
    dev = torch.device("cuda")
    B, V, D = 8, 4096, 256
    g = torch.Generator().manual_seed(3)
    W = (torch.randn(V, D, generator=g) / 16).to(dev, torch.bfloat16)
    H = torch.randn(B, D, generator=g).to(dev, torch.bfloat16)
    L0, _, _, seeds, offsets, mods = _case(B=B, V=V, D=D)
    state = dict(
        hidden=H.clone(),
        temperature=torch.full((B,), 0.8, device=dev),
        row_seeds=seeds.to(dev),
        row_offsets=offsets.to(dev),
        allowed_bitmask=mods["allowed_bitmask"].to(dev),
        logit_bias_ids=mods["logit_bias_ids"].to(dev),
        logit_bias_values=mods["logit_bias_values"].to(dev),
        seen_ids=mods["seen_ids"].to(dev),
        seen_counts=mods["seen_counts"].to(dev),
        repetition_penalty=mods["repetition_penalty"].to(dev),
        presence_penalty=torch.full((B,), 0.5, device=dev),
        frequency_penalty=torch.full((B,), 0.25, device=dev),
    )

    def step():
        s = dict(state)
        return ops.sample_fused(W, s.pop("hidden"), top_k=50, **s)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # eager first: the context and its workspace exist before the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            out_tokens, _ = step()
    torch.cuda.synchronize()
    for k in range(4):
        # the next decode step's values, written into the captured tensors
        state["row_offsets"].add_(1)
        state["hidden"].copy_(torch.randn(B, D, generator=g).to(dev, torch.bfloat16))
        state["temperature"].fill_(0.5 + 0.2 * k)
        state["repetition_penalty"].mul_(1.05)
        state["seen_counts"].add_(1)
        graph.replay()
        torch.cuda.synchronize()
        with torch.cuda.stream(s):
            want, _ = step()
        torch.cuda.synchronize()
        assert torch.equal(out_tokens, want), k
