"""The CUDA engine through the bindings: torch CUDA tensors and __cuda_array_interface__ objects,
zero-copy, on the caller's stream. Skipped without a GPU and a library built with the CUDA engine
(FLASHSAMPLE_CUDA=1 python3 -m pip install ./python; python/gpu-check.sh on a GPU machine)."""

import numpy as np
import pytest

import flashsample as fs

from conftest import logits

if not fs.cuda_available():
    pytest.skip(
        (
            "the CUDA engine tests: the library was built without the CUDA engine (-Dcuda=disabled)"
            if not fs.cuda_built()
            else "the CUDA engine tests: no GPU is present"
        ),
        allow_module_level=True,
    )

torch = pytest.importorskip("torch")


@pytest.fixture
def gctx():
    with fs.Context(engine="cuda") as c:
        yield c


@pytest.fixture
def cctx():
    with fs.Context(engine="cpu", threads=2) as c:
        yield c


def test_torch_logits_give_the_cpu_tokens(gctx, cctx, rng):
    L = logits(rng, 8, 5000)
    kw = dict(temperature=0.7, seed=3, draws=5, offset=2)
    ref = cctx.sample_logits(L, return_logsumexp=True, return_logprobs=True, **kw)
    t = torch.from_numpy(L).cuda()
    g = gctx.sample_logits(t, return_logsumexp=True, return_logprobs=True, **kw)
    assert g.tokens.is_cuda and g.tokens.dtype == torch.int64 and g.tokens.shape == (8, 5)
    assert (g.tokens.cpu().numpy() == ref.tokens).all()
    np.testing.assert_allclose(g.logsumexp.cpu().numpy(), ref.logsumexp, rtol=1e-5)
    np.testing.assert_allclose(g.logprobs.cpu().numpy(), ref.logprobs, rtol=1e-4, atol=1e-4)


def test_16_bit_logits(gctx, cctx, rng):
    """The CUDA engine samples fp32 logits only (kernels/dispatch.cu); 16-bit ones are refused
    with FLS_ERR_DTYPE and a hint. If it learns them, they must give the CPU's tokens."""
    L = logits(rng, 8, 5000)
    kw = dict(temperature=0.7, seed=3, draws=5, offset=2)
    t = torch.from_numpy(L).cuda()
    for dt, conv in ((torch.float16, np.float16), (torch.bfloat16, "bf16")):
        try:
            g = gctx.sample_logits(t.to(dt), return_logsumexp=True, return_logprobs=True, **kw)
        except fs.FlashSampleError as e:
            assert e.status == -5 and "fp32" in str(e)
            continue
        if conv == "bf16":
            bits = t.to(dt).view(torch.int16).cpu().numpy().view(np.uint16)
            cpu = cctx.sample_logits(
                bits, dtype="bf16", return_logsumexp=True, return_logprobs=True, **kw
            )
        else:
            cpu = cctx.sample_logits(
                L.astype(conv), return_logsumexp=True, return_logprobs=True, **kw
            )
        assert (g.tokens.cpu().numpy() == cpu.tokens).all(), dt
        np.testing.assert_allclose(g.logsumexp.cpu().numpy(), cpu.logsumexp, rtol=1e-5)
        np.testing.assert_allclose(g.logprobs.cpu().numpy(), cpu.logprobs, rtol=1e-4, atol=1e-4)


def test_per_row_host_params_and_greedy(gctx, cctx, rng):
    L = logits(rng, 4, 3000)
    kw = dict(
        temperature=[0.0, 0.5, 1.0, 2.0],
        row_seeds=[1, 2, 3, 4],
        row_offsets=[0, 1, 2, 3],
        draws=3,
        first_draw=7,
    )
    g = gctx.sample_logits(torch.from_numpy(L).cuda(), **kw).tokens.cpu().numpy()
    assert (g == cctx.sample_logits(L, **kw).tokens).all()


def test_params_on_device(gctx, cctx, rng):
    L = logits(rng, 4, 3000)
    T = np.array([0.3, 0.0, 1.0, 1.7], dtype=np.float32)
    S = np.array([9, 8, 7, 2**63 + 1], dtype=np.uint64)
    O = np.array([5, 6, 7, 8], dtype=np.uint64)
    ref = cctx.sample_logits(L, temperature=T, row_seeds=S, row_offsets=O, draws=2).tokens
    g = gctx.sample_logits(
        torch.from_numpy(L).cuda(),
        temperature=torch.from_numpy(T).cuda(),
        row_seeds=torch.from_numpy(S.view(np.int64)).cuda(),
        row_offsets=torch.from_numpy(O.view(np.int64)).cuda(),
        draws=2,
    ).tokens
    assert (g.cpu().numpy() == ref).all()
    bad = torch.tensor([1.0, -1.0, 1.0, 1.0], device="cuda")
    with pytest.raises(fs.FlashSampleError) as e:
        gctx.sample_logits(torch.from_numpy(L).cuda(), temperature=bad)
    assert e.value.status == -6


def test_fused_on_the_gpu(gctx, cctx, rng):
    V, D, B = 4096, 64, 4
    W = (rng.standard_normal((V, D)) / 8).astype(np.float32)
    H = rng.standard_normal((B, D)).astype(np.float32)
    ref = cctx.sample_fused(fs.to_bf16(W), H, weights_dtype="bf16", seed=5, draws=16).tokens
    Wt = torch.from_numpy(W).cuda().to(torch.bfloat16)
    g = gctx.sample_fused(Wt, torch.from_numpy(H).cuda(), seed=5, draws=16).tokens
    # the engines accumulate D-term dot products in different orders: a near-tie may differ
    assert (g.cpu().numpy() == ref).mean() >= 0.95


def test_cupy_and_device_arrays(gctx, cctx, rng):
    cupy = pytest.importorskip("cupy")
    L = logits(rng, 3, 2000)
    ref = cctx.sample_logits(L, seed=1, draws=4, return_logsumexp=True)
    g = gctx.sample_logits(cupy.asarray(L), seed=1, draws=4, return_logsumexp=True)
    assert isinstance(g.tokens, fs.DeviceArray)
    assert (g.tokens.numpy() == ref.tokens).all()
    assert (cupy.asarray(g.tokens).get() == ref.tokens).all()  # zero-copy view for cupy
    np.testing.assert_allclose(np.asarray(g.logsumexp), ref.logsumexp, rtol=1e-5)


def test_caller_stream_is_respected(cctx, rng):
    L = logits(rng, 16, 20000)
    ref = cctx.sample_logits(L, seed=2, draws=2).tokens
    s = torch.cuda.Stream()
    with fs.Context(engine="cuda") as c:  # created on the default stream
        for _ in range(3):
            with torch.cuda.stream(s):
                t = torch.from_numpy(L).pin_memory().cuda(non_blocking=True) * 1.0
                g = c.sample_logits(t, seed=2, draws=2).tokens
            assert (g.cpu().numpy() == ref).all()
    with torch.cuda.stream(s):
        with fs.Context(engine="cuda", stream="torch") as c:  # the current stream, s
            assert c.cuda_stream == s.cuda_stream
            t = torch.from_numpy(L).cuda() * 1.0
            g = c.sample_logits(t, seed=2, draws=2).tokens
        assert (g.cpu().numpy() == ref).all()
    with fs.Context(engine="cuda", stream=s) as c:
        assert c.cuda_stream == s.cuda_stream


def test_asynchronous_context(cctx, rng):
    L = logits(rng, 4, 3000)
    ref = cctx.sample_logits(L, seed=4, draws=3).tokens
    with fs.Context(engine="cuda", asynchronous=True, stream=torch.cuda.Stream()) as c:
        t = torch.from_numpy(L).cuda()
        c.sample_logits(t, seed=4, draws=3)  # warm up
        g = c.sample_logits(t, seed=4, draws=3).tokens
        c.sync()
        assert (g.cpu().numpy() == ref).all()


def test_device_errors(gctx, cctx, rng):
    L = logits(rng, 2, 100)
    with pytest.raises(fs.FlashSampleError) as e:
        gctx.sample_logits(L)  # host memory on the CUDA engine
    assert e.value.status == -10
    with pytest.raises(fs.FlashSampleError) as e:
        gctx.sample_logits(torch.from_numpy(L))  # a CPU tensor
    assert e.value.status == -10
    with pytest.raises(fs.FlashSampleError) as e:
        cctx.sample_logits(torch.from_numpy(L).cuda())  # device memory on the CPU engine
    assert e.value.status == -10
    with pytest.raises(fs.FlashSampleError) as e:
        gctx.sample_logits(torch.from_numpy(L).cuda().double())
    assert e.value.status == -5
    with pytest.raises(fs.FlashSampleError) as e:
        gctx.sample_logits(torch.from_numpy(L).cuda()[:, ::2])
    assert e.value.status == -4
    bad = torch.from_numpy(L).cuda()
    bad[1, 5] = float("nan")
    with pytest.raises(fs.FlashSampleError) as e:
        gctx.sample_logits(bad)
    assert e.value.status == -7


def test_nccl_world_of_one(cctx, rng):
    """Stream.allgather_nccl with one rank: the merged state finalizes to the one-shot tokens."""
    if not fs.nccl_available():
        pytest.skip("no libflashsample_nccl in this installation")
    nccl = pytest.importorskip("cupy.cuda.nccl")
    comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
    L = logits(rng, 3, 2000)
    for method in ("fused", "grouped"):
        kw = dict(seed=7, draws=2, method=method, group_size=64)
        one = cctx.sample_logits(L, **kw).tokens
        st = cctx.stream(3, 2000, **kw)
        st.feed_logits(L[:, 1000:], 1000)
        st.feed_logits(L[:, :1000], 0)
        merged, sent = st.allgather_nccl(comm)
        assert sent > 0
        assert (merged.finalize().tokens == one).all()


def test_streams_on_the_cuda_engine(gctx, cctx, rng):
    """Stream on a CUDA context: torch chunks in any order give the one-shot call's tokens (and
    its logsumexp / logprobs to rounding), as torch outputs; a state serialized on the GPU is
    finished on the CPU engine with the same tokens; bf16 fused feeds."""
    B, V = 4, 5003
    L = torch.from_numpy(logits(rng, B, V)).cuda()
    for method in ("fused", "grouped"):
        kw = dict(temperature=0.7, seed=3, draws=3, method=method, group_size=64)
        one = gctx.sample_logits(L, return_logsumexp=True, return_logprobs=True, **kw)
        for chunk in (777, 1024, V):
            st = gctx.stream(B, V, **kw)
            cuts = list(range(0, V, chunk))
            for v0 in cuts[::-1]:
                st.feed_logits(L[:, v0 : v0 + chunk], v0)
            r = st.finalize(return_logsumexp=True, return_logprobs=True)
            assert isinstance(r.tokens, torch.Tensor) and r.tokens.is_cuda
            assert torch.equal(r.tokens, one.tokens), (method, chunk)
            assert float((r.logsumexp - one.logsumexp).abs().max()) <= 1e-5
            assert float((r.logprobs - one.logprobs).abs().max()) <= 1e-5
        st = gctx.stream(B, V, **kw)
        st.feed_logits(L[:, :2000], 0)
        cs = fs.Stream.deserialize(cctx, st.serialize(), B, V, **kw)
        cs.feed_logits(np.ascontiguousarray(L[:, 2000:].cpu().numpy()), 2000)
        assert (cs.finalize().tokens == one.tokens.cpu().numpy()).all()
    W = (torch.randn(V, 64, device="cuda") / 8).to(torch.bfloat16)
    H = torch.randn(B, 64, device="cuda").to(torch.bfloat16)
    one = gctx.sample_fused(W, H, temperature=0.8, seed=9).tokens
    st = gctx.stream(B, V, temperature=0.8, seed=9)
    for v0 in range(0, V, 1000):
        st.feed_fused(W[v0 : v0 + 1000], H, v0)
    assert int((st.finalize().tokens == one).sum()) >= B - 1  # cuBLAS vs wgmma rounding
