"""Errors: refused in Python before the C call (with the status the library would give), or the
library's status as a FlashSampleError carrying fls_status_string."""

import numpy as np
import pytest

import flashsample as fs

from conftest import logits


def raises(status, fn, *a, **kw):
    with pytest.raises(fs.FlashSampleError) as e:
        fn(*a, **kw)
    assert e.value.status == status, str(e.value)
    assert e.value.status_name == fs.status_name(status)
    assert e.value.library_message == fs.status_string(status)
    assert fs.status_string(status) in str(e.value)
    return e.value


@pytest.mark.parametrize(
    "dtype,msg",
    [
        (np.float64, "astype(np.float32)"),
        (np.int32, "int32"),
        (np.uint16, "dtype='bf16'"),
        (np.int64, "int64"),
    ],
)
def test_bad_dtypes_are_refused_in_python(ctx, rng, dtype, msg):
    L = logits(rng, 2, 50).astype(dtype)
    e = raises(-5, ctx.sample_logits, L)
    assert isinstance(e, TypeError) and msg in str(e)


def test_dtype_argument_mismatch(ctx, rng):
    L = logits(rng, 2, 50)
    e = raises(-5, ctx.sample_logits, L, dtype="bf16")
    assert "to_bf16" in str(e)
    raises(-5, ctx.sample_logits, L, dtype="f16")
    raises(-5, ctx.sample_logits, L, dtype="f64")
    raises(-5, ctx.sample_fused, L, L[:1].astype(np.float64))


def test_bad_shapes_and_strides(ctx, rng):
    e = raises(-4, ctx.sample_logits, np.zeros((2, 3, 4), np.float32))
    assert isinstance(e, ValueError) and "2-D" in str(e)
    L = logits(rng, 4, 60)
    e = raises(-4, ctx.sample_logits, L[:, ::2])
    assert "ascontiguousarray" in str(e)
    raises(-4, ctx.sample_logits, np.asfortranarray(L))
    W = logits(rng, 50, 8)
    H = logits(rng, 2, 7)
    e = raises(-4, ctx.sample_fused, W, H)
    assert "D must match" in str(e)
    raises(-4, ctx.sample_logits, L, temperature=[1.0, 1.0])  # per-row array of the wrong length
    raises(-4, ctx.sample_logits, L, top_k=np.ones((4, 1), np.int64))


def test_sizes_from_the_library(ctx):
    raises(-3, ctx.sample_logits, np.zeros((0, 10), np.float32))
    raises(-3, ctx.sample_logits, np.zeros((2, 0), np.float32))


def test_nan_and_masked_rows(ctx, rng):
    L = logits(rng, 3, 40)
    L[1, 17] = np.nan
    e = raises(-7, ctx.sample_logits, L)
    assert "logits[1, 17]" in str(e) and e.function == "fls_sample_logits"
    L[1, 17] = np.inf
    raises(-7, ctx.sample_logits, L)
    L[1, 17] = 0
    L[2] = -np.inf
    e = raises(-8, ctx.sample_logits, L)
    assert "row 2" in str(e)
    W = logits(rng, 40, 4)
    W[3, 1] = np.nan
    raises(-7, ctx.sample_fused, W, logits(rng, 2, 4))


def test_parameter_ranges(ctx, rng):
    L = logits(rng, 3, 40)
    raises(-6, ctx.sample_logits, L, temperature=-1.0)
    raises(-6, ctx.sample_logits, L, temperature=float("nan"))
    raises(-6, ctx.sample_logits, L, temperature=[1.0, -0.5, 1.0])
    raises(-9, ctx.sample_logits, L, top_k=41)
    raises(-9, ctx.sample_logits, L, top_k=-1)
    raises(-9, ctx.sample_logits, L, top_p=0.0)
    raises(-9, ctx.sample_logits, L, min_p=1.5)
    raises(-9, ctx.sample_logits, L, top_p=[1.0, 2.0, 1.0])
    raises(-3, ctx.sample_logits, L, draws=0)  # draws and first_draw are sizes
    raises(-3, ctx.sample_logits, L, first_draw=-1)
    raises(-3, ctx.sample_logits, L, first_draw=2**32 - 1, draws=2)
    raises(-9, ctx.sample_logits, L, without_replacement_k=-2)
    raises(-9, ctx.sample_logits, L, filter="top-nsigma", filter_value=-1.0)
    raises(-9, ctx.sample_logits, L, method="no-such-method")
    e = raises(-9, ctx.sample_logits, L, seed=-1)
    assert isinstance(e, ValueError)
    raises(-9, ctx.sample_logits, L, seed=2**64)
    raises(-9, ctx.sample_logits, L, row_seeds=[1, -2, 3])
    e = raises(-9, ctx.sample_logits, L, top_k=2.5)
    assert isinstance(e, TypeError)
    raises(-5, ctx.sample_logits, L, row_seeds=[1.5, 2.0, 3.0])
    raises(-9, ctx.sample_logits, L, filter=3)
    raises(-9, ctx.sample_logits, L, seed=[1, 2, 3], row_seeds=[1, 2, 3])
    with pytest.raises(TypeError, match="unknown parameter"):
        ctx.sample_logits(L, temprature=0.5)


def test_parameter_errors_name_the_parameter_and_its_range(ctx, rng):
    """A value the library refuses is named in the error, with its row and range
    (fls_params_explain), as the command line does."""
    L = logits(rng, 3, 40)
    W = rng.standard_normal((40, 8)).astype(np.float32)
    H = rng.standard_normal((3, 8)).astype(np.float32)
    cases = [
        (dict(top_p=0.0), ["top_p = 0", "(0, 1]"]),
        (dict(min_p=1.5), ["min_p = 1.5", "[0, 1]"]),
        (dict(top_k=41), ["top_k = 41", "V = 40"]),
        (dict(top_p=[1.0, 2.0, 1.0]), ["top_p = 2", "row 1"]),
        (dict(filter="top-nsigma", filter_value=-1.0), ["filter_value = -1", "top-nsigma", ">= 0"]),
        (dict(filter="epsilon", filter_value=[0.1, 0.2, 1.5]), ["filter_value = 1.5", "row 2", "epsilon"]),
        (dict(filter="no-such-rule"), ["no-such-rule", "registry"]),
        (dict(temperature=[1.0, -0.5, 1.0]), ["temperature = -0.5", "row 1"]),
        (dict(draws=0), ["draws = 0"]),
        (dict(without_replacement_k=41), ["without_replacement_k = 41"]),
    ]
    for kw, words in cases:
        for call in (lambda: ctx.sample_logits(L, **kw), lambda: ctx.sample_fused(W, H, **kw)):
            with pytest.raises(fs.FlashSampleError) as e:
                call()
            for w in words:
                assert w in str(e.value), (kw, str(e.value))


def test_unsupported_combinations(ctx, rng):
    L = logits(rng, 2, 256)
    raises(-11, ctx.sample_logits, L, method="grouped", top_k=5)
    raises(-11, ctx.sample_logits, L, method="unfused-multinomial", without_replacement_k=2)
    raises(-10, ctx.sample_logits, L, params_on_device=True)  # device params need the CUDA engine


def test_engine_and_device_mismatch(ctx, rng):
    class FakeDevice:
        """An object with __cuda_array_interface__ (device memory) but no GPU behind it."""

        __cuda_array_interface__ = {
            "shape": (2, 8),
            "typestr": "<f4",
            "data": (256, False),
            "strides": None,
            "version": 3,
            "stream": None,
        }

    e = raises(-10, ctx.sample_logits, FakeDevice())
    assert "engine is cpu" in str(e)
    raises(-10, fs.chunk_max_norms, FakeDevice(), 4)


def test_cuda_context_without_a_gpu():
    if fs.cuda_available():
        pytest.skip("a GPU is present")
    e = raises(-12, fs.Context, engine="cuda")
    assert e.function == "fls_context_create"
    with pytest.raises(fs.FlashSampleError) as ei:
        fs.DeviceArray((4,), np.int64)
    assert ei.value.status == -12


def test_bad_context_arguments():
    raises(-9, fs.Context, engine="tpu")
    raises(-9, fs.Context, simd="sse9")
    raises(-9, fs.Context, threads=-1)


def test_closed_context(rng):
    c = fs.Context(threads=1)
    c.close()
    c.close()  # idempotent
    raises(-1, c.sample_logits, logits(rng, 1, 10))
    raises(-1, c.counters)


def test_no_output_on_error(ctx, rng):
    """The library writes nothing on error; the bindings return nothing (they raise)."""
    L = logits(rng, 2, 30)
    L[0, 0] = np.nan
    with pytest.raises(fs.FlashSampleError):
        ctx.sample_logits(L, return_logsumexp=True)
    c = ctx.counters()
    assert c.calls == 0 and c.rows == 0
