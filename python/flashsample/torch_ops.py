"""torch custom ops: ``flashsample::sample_logits`` and ``flashsample::sample_fused``.

Registered with ``torch.library.custom_op`` and a fake (meta) implementation, so a model that
samples through them compiles with ``torch.compile(fullgraph=True)`` and can be captured in a
``torch.cuda.CUDAGraph``. torch is optional: this module imports without it (``available()``
says whether it can be used), and registers the ops when torch is already imported, else on
the first call (or ``register()``); ``import flashsample`` never imports torch.

    from flashsample import torch_ops
    tokens, logprobs = torch_ops.sample_logits(logits, temperature=0.7, row_seeds=seeds,
                                               row_offsets=step, top_k=50, return_logprobs=True)

Every per-row value the op reads is a tensor on the logits' device (temperature, row seeds,
row offsets, the penalties, the mask, bias and seen arrays): the Python wrappers below turn
scalars into such tensors (``torch.full``), so a captured graph reads the values the tensors hold
at each replay. Under ``torch.compile`` and graph capture give ``row_seeds`` as a tensor
(without it the wrappers derive fls_row_seed(seed, b) on the host, which neither traces nor
captures). Scalars of the rule family (top_k, top_p, min_p, without_replacement_k) are
baked into the op call, as the C API's rule values are.

CUDA tensors: the op runs on torch's current stream. The C context takes its stream at creation
(fls_context_config.stream), so one asynchronous context is kept per (device, stream handle)
and called with ``params_on_device=True``; outside a capture the op synchronizes the context
afterwards (``Context.sync``) so that an error is raised where the call was made. CPU tensors
go through the CPU engine (a shared context), with the same tokens for the same inputs.

Tokens are int64 (B, draws), or (B, draws, K) with ``without_replacement_k = K``; logprobs are
float32 of the same shape when ``return_logprobs`` is set, else an empty (0,) tensor.
"""

import sys
import threading
from typing import Optional, Tuple

import numpy as np

from . import _core

__all__ = ["available", "register", "sample_logits", "sample_fused", "context_for"]

torch = None  # imported by register()
_registered = False
_register_lock = threading.Lock()


def available() -> bool:
    """Whether torch can be imported (the ops need it)."""
    try:
        import torch as _t  # noqa: F401
    except ImportError:
        return False
    return True


_contexts = {}
_contexts_lock = threading.Lock()


def context_for(device, stream: Optional[int] = None) -> "_core.Context":
    """The asynchronous CUDA context of (device, stream handle) the ops use (created once), or
    the shared CPU context for a CPU device."""
    if device.type != "cuda":
        return _core.default_context()
    index = device.index if device.index is not None else torch.cuda.current_device()
    if stream is None:
        stream = int(torch.cuda.current_stream(index).cuda_stream)
    key = (index, int(stream))
    with _contexts_lock:
        ctx = _contexts.get(key)
        if ctx is None:
            ctx = _core.Context(
                engine="cuda",
                device=index,
                stream=int(stream) if stream else None,
                asynchronous=True,
            )
            _contexts[key] = ctx
        return ctx


def _out_shape(rows: int, draws: int, without_replacement_k: int) -> tuple:
    if without_replacement_k > 0:
        return (rows, draws, without_replacement_k)
    return (rows, draws)


def _host(t, unsigned: bool = False):
    """A CPU tensor as numpy (bf16 as its raw bits; int64 seeds and offsets as the uint64 bits the
    C API reads), None as None."""
    if t is None:
        return None
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    if t.dtype == torch.bool:
        return t.numpy().astype(np.uint8)
    a = t.numpy()
    return a.view(np.uint64) if unsigned and a.dtype == np.int64 else a


_MOD_NAMES = (
    "allowed_bitmask",
    "bitmask_rows",
    "logit_bias_ids",
    "logit_bias_values",
    "seen_ids",
    "seen_counts",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
)


def _params(
    device,
    temperature,
    row_seeds,
    row_offsets,
    draws: int,
    top_k: int,
    top_p: float,
    min_p: float,
    without_replacement_k: int,
    mods: tuple,
) -> dict:
    kw = dict(draws=draws, top_k=top_k, top_p=top_p, min_p=min_p)
    if without_replacement_k > 0:
        kw["without_replacement_k"] = without_replacement_k
    per_row = dict(temperature=temperature, row_seeds=row_seeds, row_offsets=row_offsets)
    per_row.update({n: v for n, v in zip(_MOD_NAMES, mods) if v is not None})
    if device.type == "cuda":
        kw.update(per_row)
        kw["params_on_device"] = True
    else:
        kw.update({n: _host(v, n in ("row_seeds", "row_offsets")) for n, v in per_row.items()})
    return kw


def _run(ctx, device, call, shape, return_logprobs):
    res = call()
    if device.type == "cuda":
        if not torch.cuda.is_current_stream_capturing():
            ctx.sync()  # the call's status: raised here, not at a later call
        tokens, logprobs = res.tokens, res.logprobs
    else:
        tokens = torch.from_numpy(np.ascontiguousarray(res.tokens))
        logprobs = torch.from_numpy(np.ascontiguousarray(res.logprobs)) if return_logprobs else None
    if logprobs is None:
        logprobs = torch.empty((0,), dtype=torch.float32, device=device)
    return tokens.reshape(shape), logprobs.reshape(shape if return_logprobs else (0,))


def register() -> None:
    """Imports torch; registers flashsample::sample_logits and flashsample::sample_fused (once)."""
    global torch, _registered
    if _registered:
        return
    with _register_lock:
        if _registered:
            return
        import torch as _torch

        torch = _torch
        _define_ops()
        _registered = True


def _define_ops() -> None:
    from torch import Tensor  # noqa: F401  (the annotations below)

    @torch.library.custom_op("flashsample::sample_logits", mutates_args=())
    def _sample_logits_op(
        logits: Tensor,
        temperature: Tensor,
        row_seeds: Tensor,
        row_offsets: Tensor,
        draws: int,
        top_k: int,
        top_p: float,
        min_p: float,
        without_replacement_k: int,
        allowed_bitmask: Optional[Tensor],
        bitmask_rows: Optional[Tensor],
        logit_bias_ids: Optional[Tensor],
        logit_bias_values: Optional[Tensor],
        seen_ids: Optional[Tensor],
        seen_counts: Optional[Tensor],
        repetition_penalty: Optional[Tensor],
        presence_penalty: Optional[Tensor],
        frequency_penalty: Optional[Tensor],
        return_logprobs: bool,
    ) -> Tuple[Tensor, Tensor]:
        device = logits.device
        ctx = context_for(device)
        mods = (allowed_bitmask, bitmask_rows, logit_bias_ids, logit_bias_values, seen_ids)
        mods += (seen_counts, repetition_penalty, presence_penalty, frequency_penalty)
        kw = _params(
            device,
            temperature,
            row_seeds,
            row_offsets,
            draws,
            top_k,
            top_p,
            min_p,
            without_replacement_k,
            mods,
        )
        L = logits if device.type == "cuda" else _host(logits)
        dtype = "bf16" if logits.dtype == torch.bfloat16 and device.type != "cuda" else None
        shape = _out_shape(logits.shape[0], draws, without_replacement_k)
        return _run(
            ctx,
            device,
            lambda: ctx.sample_logits(L, dtype=dtype, return_logprobs=return_logprobs, **kw),
            shape,
            return_logprobs,
        )

    @_sample_logits_op.register_fake
    def _(logits, temperature, row_seeds, row_offsets, draws, top_k, top_p, min_p,
          without_replacement_k, allowed_bitmask, bitmask_rows, logit_bias_ids, logit_bias_values,
          seen_ids, seen_counts, repetition_penalty, presence_penalty, frequency_penalty,
          return_logprobs):  # fmt: skip
        shape = _out_shape(logits.shape[0], draws, without_replacement_k)
        tokens = logits.new_empty(shape, dtype=torch.int64)
        logprobs = logits.new_empty(shape if return_logprobs else (0,), dtype=torch.float32)
        return tokens, logprobs

    @torch.library.custom_op("flashsample::sample_fused", mutates_args=())
    def _sample_fused_op(
        weights: Tensor,
        hidden: Tensor,
        temperature: Tensor,
        row_seeds: Tensor,
        row_offsets: Tensor,
        draws: int,
        top_k: int,
        top_p: float,
        min_p: float,
        without_replacement_k: int,
        allowed_bitmask: Optional[Tensor],
        bitmask_rows: Optional[Tensor],
        logit_bias_ids: Optional[Tensor],
        logit_bias_values: Optional[Tensor],
        seen_ids: Optional[Tensor],
        seen_counts: Optional[Tensor],
        repetition_penalty: Optional[Tensor],
        presence_penalty: Optional[Tensor],
        frequency_penalty: Optional[Tensor],
        return_logprobs: bool,
    ) -> Tuple[Tensor, Tensor]:
        device = hidden.device
        ctx = context_for(device)
        mods = (allowed_bitmask, bitmask_rows, logit_bias_ids, logit_bias_values, seen_ids)
        mods += (seen_counts, repetition_penalty, presence_penalty, frequency_penalty)
        kw = _params(
            device,
            temperature,
            row_seeds,
            row_offsets,
            draws,
            top_k,
            top_p,
            min_p,
            without_replacement_k,
            mods,
        )
        if device.type == "cuda":
            W, H, wdt, hdt = weights, hidden, None, None
        else:
            W, H = _host(weights), _host(hidden)
            wdt = "bf16" if weights.dtype == torch.bfloat16 else None
            hdt = "bf16" if hidden.dtype == torch.bfloat16 else None
        shape = _out_shape(hidden.shape[0], draws, without_replacement_k)
        return _run(
            ctx,
            device,
            lambda: ctx.sample_fused(
                W, H, weights_dtype=wdt, hidden_dtype=hdt, return_logprobs=return_logprobs, **kw
            ),
            shape,
            return_logprobs,
        )

    @_sample_fused_op.register_fake
    def _(weights, hidden, temperature, row_seeds, row_offsets, draws, top_k, top_p, min_p,
          without_replacement_k, allowed_bitmask, bitmask_rows, logit_bias_ids, logit_bias_values,
          seen_ids, seen_counts, repetition_penalty, presence_penalty, frequency_penalty,
          return_logprobs):  # fmt: skip
        shape = _out_shape(hidden.shape[0], draws, without_replacement_k)
        tokens = hidden.new_empty(shape, dtype=torch.int64)
        logprobs = hidden.new_empty(shape if return_logprobs else (0,), dtype=torch.float32)
        return tokens, logprobs


# ---- the Python entry points: scalars become per-row tensors on the device ---------------------


def _rows(value, rows: int, device, dtype, default):
    """A per-row tensor (rows,) on device: a tensor as it is, a scalar filled in; None stays None
    where default is None."""
    if value is None:
        if default is None:
            return None
        value = default
    if isinstance(value, torch.Tensor):
        return value
    return torch.full((rows,), value, dtype=dtype, device=device)


def _wrap_args(rows, device, temperature, seed, row_seeds, offset, row_offsets, penalties):
    if row_seeds is None:
        # fls_row_seed(seed, b) as the C API derives it (docs/NOISE.md): the op takes seeds
        seeds = _core.row_seed(int(seed), np.arange(rows, dtype=np.uint64)).view(np.int64)
        row_seeds = torch.from_numpy(seeds.copy()).to(device)
    T = _rows(temperature, rows, device, torch.float32, 1.0)
    offsets = _rows(
        row_offsets if row_offsets is not None else offset, rows, device, torch.int64, 0
    )
    rep, pres, freq = penalties
    rep = None if rep is None or (not isinstance(rep, torch.Tensor) and rep == 1.0) else rep
    pres = None if pres is None or (not isinstance(pres, torch.Tensor) and pres == 0.0) else pres
    freq = None if freq is None or (not isinstance(freq, torch.Tensor) and freq == 0.0) else freq
    pens = tuple(_rows(v, rows, device, torch.float32, None) for v in (rep, pres, freq))
    return T, row_seeds, offsets, pens


def sample_logits(
    logits: "torch.Tensor",
    *,
    temperature=1.0,
    seed: int = 0,
    row_seeds: Optional["torch.Tensor"] = None,
    offset: int = 0,
    row_offsets: Optional["torch.Tensor"] = None,
    draws: int = 1,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    without_replacement_k: int = 0,
    allowed_bitmask: Optional["torch.Tensor"] = None,
    bitmask_rows: Optional["torch.Tensor"] = None,
    logit_bias_ids: Optional["torch.Tensor"] = None,
    logit_bias_values: Optional["torch.Tensor"] = None,
    seen_ids: Optional["torch.Tensor"] = None,
    seen_counts: Optional["torch.Tensor"] = None,
    repetition_penalty=1.0,
    presence_penalty=0.0,
    frequency_penalty=0.0,
    return_logprobs: bool = False,
) -> Tuple["torch.Tensor", "torch.Tensor"]:
    """torch.ops.flashsample.sample_logits on logits (B, V): (tokens, logprobs). Keywords as
    flashsample.sample_logits; temperature, the seeds, the offsets and the penalties may be
    scalars or (B,) tensors (float32; int64 seeds and offsets). A captured graph reads tensors at
    each replay; scalars are fixed at capture."""
    register()
    rows = logits.shape[0]
    T, seeds, offsets, pens = _wrap_args(
        rows,
        logits.device,
        temperature,
        seed,
        row_seeds,
        offset,
        row_offsets,
        (repetition_penalty, presence_penalty, frequency_penalty),
    )
    return torch.ops.flashsample.sample_logits(
        logits, T, seeds, offsets, draws, top_k, top_p, min_p, without_replacement_k,
        allowed_bitmask, bitmask_rows, logit_bias_ids, logit_bias_values, seen_ids, seen_counts,
        *pens, return_logprobs,
    )  # fmt: skip


def sample_fused(
    weights: "torch.Tensor",
    hidden: "torch.Tensor",
    *,
    temperature=1.0,
    seed: int = 0,
    row_seeds: Optional["torch.Tensor"] = None,
    offset: int = 0,
    row_offsets: Optional["torch.Tensor"] = None,
    draws: int = 1,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    without_replacement_k: int = 0,
    allowed_bitmask: Optional["torch.Tensor"] = None,
    bitmask_rows: Optional["torch.Tensor"] = None,
    logit_bias_ids: Optional["torch.Tensor"] = None,
    logit_bias_values: Optional["torch.Tensor"] = None,
    seen_ids: Optional["torch.Tensor"] = None,
    seen_counts: Optional["torch.Tensor"] = None,
    repetition_penalty=1.0,
    presence_penalty=0.0,
    frequency_penalty=0.0,
    return_logprobs: bool = False,
) -> Tuple["torch.Tensor", "torch.Tensor"]:
    """torch.ops.flashsample.sample_fused on weights (V, D) and hidden (B, D): (tokens,
    logprobs); keywords as sample_logits."""
    register()
    rows = hidden.shape[0]
    T, seeds, offsets, pens = _wrap_args(
        rows,
        hidden.device,
        temperature,
        seed,
        row_seeds,
        offset,
        row_offsets,
        (repetition_penalty, presence_penalty, frequency_penalty),
    )
    return torch.ops.flashsample.sample_fused(
        weights, hidden, T, seeds, offsets, draws, top_k, top_p, min_p, without_replacement_k,
        allowed_bitmask, bitmask_rows, logit_bias_ids, logit_bias_values, seen_ids, seen_counts,
        *pens, return_logprobs,
    )  # fmt: skip


# torch is there already: register now, so the ops exist before any compile traces a call
if sys.modules.get("torch") is not None:
    register()
