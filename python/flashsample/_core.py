"""Contexts, one-shot sampling, streaming states and helpers over the public C API."""

from __future__ import annotations

import ctypes
import operator
import threading
import weakref
from collections import namedtuple
from typing import Any, Optional

import numpy as np

from . import _capi
from ._arrays import (
    View,
    as_view,
    device_mod,
    device_row,
    is_array_like,
    is_device_array,
    mod_array,
    ptr_of,
    row_array,
)
from ._errors import FlashSampleError, FlashSampleTypeError, FlashSampleValueError, check

ERR_SHAPE, ERR_DTYPE, ERR_PARAM, ERR_POINTER = -4, -5, -9, -10
ERR_NAN, ERR_ALL_MASKED, ERR_NO_DEVICE = -7, -8, -12
ERR_SIZE, ERR_TEMPERATURE, ERR_UNSUPPORTED = -3, -6, -11

Sample = namedtuple("Sample", ["tokens", "logsumexp", "logprobs"])
Sample.__doc__ = """What a sampling call returns.

tokens: int64 (B, draws), or (B, draws, K) with without_replacement_k = K (-1 past the support);
logsumexp: float32 (B,) or None (when not asked for); logprobs: float32 like tokens, or None.
On the CUDA engine they are torch tensors on the input's device (for torch inputs), else
DeviceArray objects (device memory with __cuda_array_interface__; .numpy() copies to the host).
"""
Counters = namedtuple("Counters", ["calls", "rows", "second_pass_rows"])
Progress = namedtuple("Progress", ["tokens_fed", "tokens_skipped", "chunks_fed", "chunks_skipped"])

_ENGINES = {"cpu": _capi.ENGINE_CPU, "cuda": _capi.ENGINE_CUDA}
_SIMDS = {
    "auto": _capi.SIMD_AUTO,
    "portable": _capi.SIMD_PORTABLE,
    "avx2": _capi.SIMD_AVX2,
    "avx512": _capi.SIMD_AVX512,
    "amx": _capi.SIMD_AMX,
}
METHODS = {
    "fused": _capi.METHOD_FUSED,
    "unfused-gumbel": _capi.METHOD_UNFUSED_GUMBEL,
    "unfused-multinomial": _capi.METHOD_UNFUSED_MULTINOMIAL,
    "grouped": _capi.METHOD_GROUPED,
}
NOISES = {
    "per-token": _capi.NOISE_PER_TOKEN,
    "min-first": _capi.NOISE_MIN_FIRST,
}
_U64_MAX = (1 << 64) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


# ---- small helpers ------------------------------------------------------------------------------


def _int(value: Any, fn: str, name: str, lo: int = _I64_MIN, hi: int = _I64_MAX) -> int:
    if isinstance(value, bool) or isinstance(value, float):
        raise FlashSampleTypeError(ERR_PARAM, fn, "%s must be an integer, got %r" % (name, value))
    try:
        v = operator.index(value)
    except TypeError:
        raise FlashSampleTypeError(
            ERR_PARAM, fn, "%s must be an integer, got %r" % (name, value)
        ) from None
    if not lo <= v <= hi:
        raise FlashSampleValueError(
            ERR_PARAM, fn, "%s = %d is outside [%d, %d]" % (name, v, lo, hi)
        )
    return v


def _float(value: Any, fn: str, name: str) -> float:
    if isinstance(value, (str, bytes)) or value is None:
        raise FlashSampleTypeError(ERR_PARAM, fn, "%s must be a number, got %r" % (name, value))
    try:
        return float(value)
    except (TypeError, ValueError):
        raise FlashSampleTypeError(
            ERR_PARAM, fn, "%s must be a number, got %r" % (name, value)
        ) from None


def _method(value: Any, fn: str) -> int:
    if isinstance(value, str):
        key = value.lower().replace("_", "-")
        if key in METHODS:
            return METHODS[key]
        raise FlashSampleValueError(
            ERR_PARAM, fn, "method=%r: expected one of %s" % (value, ", ".join(METHODS))
        )
    v = _int(value, fn, "method")
    if v not in METHODS.values():
        raise FlashSampleValueError(ERR_PARAM, fn, "method=%d is not an fls_method" % v)
    return v


def _noise(value: Any, fn: str) -> int:
    if not isinstance(value, str):
        raise FlashSampleTypeError(
            ERR_PARAM, fn, "noise must be one of %s, got %r" % (", ".join(NOISES), value)
        )
    key = value.lower().replace("_", "-")
    if key not in NOISES:
        raise FlashSampleValueError(
            ERR_PARAM, fn, "noise=%r: expected one of %s" % (value, ", ".join(NOISES))
        )
    return NOISES[key]


def status_string(status: int) -> str:
    """fls_status_string(status)."""
    return _capi.fls_status_string(int(status)).decode()


def version() -> str:
    """The version of the C API these bindings mirror (FLS_VERSION_* of lib/include/flashsample.h)."""
    return "%d.%d.%d" % _capi.HEADER_VERSION


def library_path() -> str:
    """The libflashsample.so that was loaded."""
    return _capi.LIB_PATH


def cuda_built() -> bool:
    """fls_cuda_built(): whether the loaded library has the CUDA engine at all."""
    return bool(_capi.fls_cuda_built())


def nccl_available() -> bool:
    """Whether this installation has libflashsample_nccl (Stream.allgather_nccl)."""
    return _capi.nccl_lib() is not None


def cuda_available() -> bool:
    """fls_cuda_available(): the CUDA engine is built and a usable GPU is present."""
    return bool(_capi.fls_cuda_available())


def row_seed(seed: int, row: Any) -> Any:
    """fls_row_seed(seed, row): the seed of row `row` when only a base seed is given. `row` may be
    an int (returns an int) or an array of rows (returns a uint64 array)."""
    s = _int(seed, "row_seed", "seed", 0, _U64_MAX)
    if is_array_like(row):
        rows = np.asarray(row)
        return np.array(
            [_capi.fls_row_seed(s, _int(int(r), "row_seed", "row", 0, _U64_MAX)) for r in rows],
            dtype=np.uint64,
        )
    return int(_capi.fls_row_seed(s, _int(row, "row_seed", "row", 0, _U64_MAX)))


def logit_bound(wnorm: float, hnorm: float, D: int) -> float:
    """fls_logit_bound: an upper bound of every fp32 dot product w.h the engines compute with
    ||w|| <= wnorm, ||h|| <= hnorm over D terms."""
    return float(
        _capi.fls_logit_bound(
            _float(wnorm, "logit_bound", "wnorm"),
            _float(hnorm, "logit_bound", "hnorm"),
            _int(D, "logit_bound", "D"),
        )
    )


def chunk_max_norms(weights: Any, chunk: int, dtype: Any = None) -> np.ndarray:
    """fls_chunk_max_norms: out[c] >= ||w_v||_2 for every row v of chunk c (chunks of `chunk`
    rows of W (V, D), a host array). Returns float32 (ceil(V / chunk),)."""
    fn = "chunk_max_norms"
    W = as_view(weights, "weights", fn, dtype)
    if W.device != "cpu":
        raise FlashSampleValueError(ERR_POINTER, fn, "weights must be a host (numpy) array")
    c = _int(chunk, fn, "chunk")
    if c <= 0:
        raise FlashSampleValueError(-3, fn, "chunk must be >= 1, got %d" % c)
    out = np.zeros(((W.rows + c - 1) // c,), dtype=np.float32)
    check(_capi.fls_chunk_max_norms(ctypes.byref(W.matrix), c, ptr_of(out, ctypes.c_float)), fn)
    return out


# ---- bf16 bits (numpy has no bf16) ---------------------------------------------------------------


def to_bf16(x: Any) -> np.ndarray:
    """float32 values -> their bf16 bits as uint16 (round to nearest even; NaN stays NaN), the
    conversion of fls_f32_to_bf16 and of `flashsample sample --weights-dtype bf16`."""
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    u = a.view(np.uint32)
    rounded = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    out = rounded.astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():
        out[nan] = ((u[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return out


def from_bf16(bits: Any) -> np.ndarray:
    """bf16 bits (uint16) -> float32 (exact)."""
    b = np.ascontiguousarray(np.asarray(bits))
    if b.dtype not in (np.uint16, np.int16):
        raise FlashSampleTypeError(ERR_DTYPE, "from_bf16", "expected uint16 bits, got %s" % b.dtype)
    return (b.view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


# ---- parameters ---------------------------------------------------------------------------------

# name -> (fls_params scalar field, per-row field, numpy dtype, ctype, kind)
_ROW_PARAMS = {
    "temperature": ("temperature_value", "temperature", np.float32, ctypes.c_float, "float"),
    "seed": ("seed", "row_seeds", np.uint64, ctypes.c_uint64, "u64"),
    "offset": ("offset", "row_offsets", np.uint64, ctypes.c_uint64, "u64"),
    "top_k": ("top_k", "row_top_k", np.int64, ctypes.c_int64, "i64"),
    "top_p": ("top_p", "row_top_p", np.float32, ctypes.c_float, "float"),
    "min_p": ("min_p", "row_min_p", np.float32, ctypes.c_float, "float"),
    "filter_value": ("filter_value", "row_filter_value", np.float64, ctypes.c_double, "float"),
    # penalties of the seen tokens (fls_params 0.4; docs/RULES.md, "Masks, bias and penalties")
    "repetition_penalty": (
        "repetition_penalty",
        "row_repetition_penalty",
        np.float32,
        ctypes.c_float,
        "float",
    ),
    "presence_penalty": (
        "presence_penalty",
        "row_presence_penalty",
        np.float32,
        ctypes.c_float,
        "float",
    ),
    "frequency_penalty": (
        "frequency_penalty",
        "row_frequency_penalty",
        np.float32,
        ctypes.c_float,
        "float",
    ),
}
# explicit per-row keyword -> the parameter it belongs to
_ROW_ALIASES = {
    "row_seeds": "seed",
    "row_offsets": "offset",
    "row_top_k": "top_k",
    "row_top_p": "top_p",
    "row_min_p": "min_p",
    "row_filter_value": "filter_value",
    "row_repetition_penalty": "repetition_penalty",
    "row_presence_penalty": "presence_penalty",
    "row_frequency_penalty": "frequency_penalty",
}
# the mask, bias and seen arrays (fls_params 0.4): name -> (fls_params field, kind, ctype, companion)
_MOD_ARRAYS = {
    "allowed_bitmask": ("allowed_bitmask", "i32", ctypes.c_int32, None),
    "bitmask_rows": ("bitmask_rows", "u8", ctypes.c_uint8, "allowed_bitmask"),
    "logit_bias_ids": ("logit_bias_ids", "i64", ctypes.c_int64, "logit_bias_values"),
    "logit_bias_values": ("logit_bias_values", "f32", ctypes.c_float, "logit_bias_ids"),
    "seen_ids": ("seen_ids", "i64", ctypes.c_int64, None),
    "seen_counts": ("seen_counts", "i32", ctypes.c_int32, "seen_ids"),
}
PARAM_NAMES = (
    tuple(_ROW_PARAMS)
    + tuple(_ROW_ALIASES)
    + (
        "method",
        "noise",
        "draws",
        "first_draw",
        "group_size",
        "without_replacement_k",
        "row_without_replacement_k",
        "filter",
        "params_on_device",
    )
    + tuple(_MOD_ARRAYS)
)
# the per-row fields that fls_params.params_on_device puts in device memory (with the arrays of
# _MOD_ARRAYS: the CUDA engine reads masks, bias and penalties from device memory then)
_DEVICE_ROWS = {
    "temperature": "f32",
    "seed": "u64",
    "offset": "u64",
    "repetition_penalty": "f32",
    "presence_penalty": "f32",
    "frequency_penalty": "f32",
}


class _Params:
    """A filled fls_params and the host arrays it points to (kept alive with it)."""

    def __init__(self, fn: str, rows: int, kw: dict, vocab: Optional[int] = None):
        unknown = sorted(set(kw) - set(PARAM_NAMES))
        if unknown:
            raise TypeError(
                "%s: unknown parameter(s) %s; the parameters are %s"
                % (fn, ", ".join(unknown), ", ".join(PARAM_NAMES))
            )
        p = _capi.new_params()
        keep = []
        self.device_views = []  # (kind, device index, owner) of device parameter arrays
        pod = kw.get("params_on_device")
        row_values = {}
        for name in _DEVICE_ROWS:
            v = kw.get(name)
            alias = [a for a, t in _ROW_ALIASES.items() if t == name]
            if alias and kw.get(alias[0]) is not None:
                v = kw[alias[0]]
            if v is not None and is_array_like(v):
                row_values[name] = v
        on_dev = [n for n, v in row_values.items() if is_device_array(v)]
        on_dev += [n for n in _MOD_ARRAYS if kw.get(n) is not None and is_device_array(kw[n])]
        if pod is None:
            pod = bool(on_dev)
        elif not pod and on_dev:
            raise FlashSampleValueError(
                ERR_POINTER,
                fn,
                "%s is device memory but params_on_device=False: per-row "
                "parameters are host arrays unless params_on_device=True" % on_dev[0],
            )
        self.on_device = bool(pod)
        if self.on_device:
            p.params_on_device = 1
        for alias, target in _ROW_ALIASES.items():
            if alias in kw and kw[alias] is not None:
                if target in kw and is_array_like(kw[target]):
                    raise FlashSampleValueError(
                        ERR_PARAM,
                        fn,
                        "give per-row values once: %s or an array %s" % (alias, target),
                    )
                if not is_array_like(kw[alias]):
                    raise FlashSampleTypeError(
                        ERR_PARAM, fn, "%s must be an array with one entry per row" % alias
                    )
        for name, (field, row_field, npd, ctype, kind) in _ROW_PARAMS.items():
            value = kw.get(name)
            alias = [a for a, t in _ROW_ALIASES.items() if t == name]
            row_value = kw.get(alias[0]) if alias else None
            if value is not None and is_array_like(value):
                row_value, value = value, None
            if row_value is not None and self.on_device and name in _DEVICE_ROWS:
                ptr, owner, kind, dev = device_row(
                    row_value, rows, _DEVICE_ROWS[name], fn, alias[0] if alias else name
                )
                keep.append(owner)
                self.device_views.append((kind, dev, owner))
                setattr(p, row_field, ctypes.cast(ctypes.c_void_p(ptr), ctypes.POINTER(ctype)))
            elif row_value is not None:
                arr = row_array(row_value, rows, npd, fn, alias[0] if alias else name)
                keep.append(arr)
                setattr(p, row_field, ptr_of(arr, ctype))
            if value is not None:
                if kind == "float":
                    setattr(p, field, _float(value, fn, name))
                elif kind == "u64":
                    setattr(p, field, _int(value, fn, name, 0, _U64_MAX))
                else:
                    setattr(p, field, _int(value, fn, name))
        if kw.get("method") is not None:
            p.method = _method(kw["method"], fn)
        if kw.get("noise") is not None:
            p.noise = _noise(kw["noise"], fn)
        for name in ("draws", "first_draw", "group_size"):
            if kw.get(name) is not None:
                setattr(p, name, _int(kw[name], fn, name))
        K = kw.get("without_replacement_k")
        rowK = kw.get("row_without_replacement_k")
        if K is not None and is_array_like(K):
            if rowK is not None:
                raise FlashSampleValueError(
                    ERR_PARAM, fn, "give per-row K once: row_without_replacement_k or an array"
                )
            rowK, K = K, None
        if rowK is not None:
            arr = row_array(rowK, rows, np.int64, fn, "row_without_replacement_k")
            keep.append(arr)
            p.row_without_replacement_k = ptr_of(arr, ctypes.c_int64)
            if K is None:  # the output's K: the largest row's
                K = int(arr.max()) if arr.size else 0
        if K is not None:
            p.without_replacement_k = _int(K, fn, "without_replacement_k")
        flt = kw.get("filter")
        if flt is not None:
            if not isinstance(flt, str):
                raise FlashSampleTypeError(
                    ERR_PARAM,
                    fn,
                    "filter must be a rule's name (e.g. 'top-nsigma'), got %r" % (flt,),
                )
            b = flt.encode()
            keep.append(b)
            p.filter = b
        self.mods = self._mods(fn, rows, kw, p, keep, vocab)
        self.p = p
        self.keep = keep
        self.draws = int(p.draws)
        self.K = int(p.without_replacement_k)

    def _mods(self, fn: str, rows: int, kw: dict, p: Any, keep: list, vocab: Optional[int]) -> list:
        """The mask, bias and seen arrays into p (host arrays, or device pointers with
        params_on_device); the names given, in _MOD_ARRAYS order."""
        given = [n for n in _MOD_ARRAYS if kw.get(n) is not None]
        for n in given:
            companion = _MOD_ARRAYS[n][3]
            if companion and kw.get(companion) is None and n != "logit_bias_ids":
                raise FlashSampleValueError(
                    ERR_PARAM,
                    fn,
                    "%s needs %s (%s)"
                    % (
                        n,
                        companion,
                        {
                            "bitmask_rows": "the masks it selects",
                            "logit_bias_values": "the ids the values are for",
                            "seen_counts": "the tokens it counts",
                        }[n],
                    ),
                )
            if n == "logit_bias_ids" and kw.get("logit_bias_values") is None:
                raise FlashSampleValueError(
                    ERR_PARAM, fn, "logit_bias_ids needs logit_bias_values (one value per id)"
                )
        cols = {}
        for n in given:
            field, kind, ctype, companion = _MOD_ARRAYS[n]
            want_cols = 0 if n == "bitmask_rows" else cols.get(companion)
            if self.on_device:
                ptr, owner, vkind, dev, c = device_mod(kw[n], rows, kind, fn, n, want_cols)
                keep.append(owner)
                self.device_views.append((vkind, dev, owner))
                setattr(p, field, ctypes.cast(ctypes.c_void_p(ptr), ctypes.POINTER(ctype)))
            else:
                arr, c = mod_array(kw[n], rows, kind, fn, n, want_cols)
                keep.append(arr)
                setattr(p, field, ptr_of(arr, ctype))
            cols[n] = c
        if "allowed_bitmask" in cols:
            W = cols["allowed_bitmask"]
            if vocab is not None and W < (vocab + 31) // 32:
                raise FlashSampleValueError(
                    ERR_SHAPE,
                    fn,
                    "allowed_bitmask has %d words per row: fewer than ceil(V / 32) = %d for V = %d"
                    % (W, (vocab + 31) // 32, vocab),
                )
            p.bitmask_ld = W
        if "logit_bias_ids" in cols:
            p.logit_bias_k = cols["logit_bias_ids"]
        if "seen_ids" in cols:
            p.seen_k = cols["seen_ids"]
        return given

    def has_mods(self) -> bool:
        """Whether a mask, bias or penalty is off its default (the engine changes the logits)."""
        p = self.p
        return bool(
            self.mods
            or p.repetition_penalty != 1.0
            or p.presence_penalty != 0.0
            or p.frequency_penalty != 0.0
            or p.row_repetition_penalty
            or p.row_presence_penalty
            or p.row_frequency_penalty
        )

    def token_shape(self, rows: int) -> tuple:
        if self.K > 0:
            return (rows, max(self.draws, 0), self.K)
        return (rows, max(self.draws, 0))


# ---- device memory without torch -----------------------------------------------------------------


class DeviceArray:
    """Device memory from fls_device_malloc (the CUDA engine's outputs when the inputs are not
    torch tensors). Exposes __cuda_array_interface__ (so cupy.asarray(x) and
    torch.as_tensor(x, device='cuda') view it without a copy); .numpy() copies to the host."""

    def __init__(self, shape: tuple, dtype: Any, stream: Optional[int] = None):
        self.stream = stream  # where it is written (serving mode); None: ready
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self._ptr = ctypes.c_void_p()
        check(_capi.fls_device_malloc(ctypes.byref(self._ptr), max(self.nbytes, 1)), "DeviceArray")

    @property
    def ptr(self) -> int:
        return int(self._ptr.value or 0)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
            "stream": self.stream,
        }

    def numpy(self) -> np.ndarray:
        out = np.empty(self.shape, dtype=self.dtype)
        if self.nbytes:
            check(_capi.fls_device_download(out.ctypes.data, self.ptr, self.nbytes), "numpy")
        return out

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self) -> str:
        return "DeviceArray(shape=%s, dtype=%s)" % (self.shape, self.dtype)

    def __del__(self):
        p = getattr(self, "_ptr", None)
        if p is not None and p.value:
            _capi.fls_device_free(p)
            self._ptr = ctypes.c_void_p()


# ---- the driver API, only to wait for a __cuda_array_interface__ producer's stream --------------

_libcuda = None


def _cu_stream_synchronize(stream: int) -> None:
    global _libcuda
    if _libcuda is None:
        _libcuda = ctypes.CDLL("libcuda.so.1")
        _libcuda.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
        _libcuda.cuStreamSynchronize.restype = ctypes.c_int
    r = _libcuda.cuStreamSynchronize(ctypes.c_void_p(stream))
    if r != 0:
        raise FlashSampleError(
            -14, "cuStreamSynchronize", "waiting for the producer's stream: " "CUresult %d" % r
        )


# ---- contexts -----------------------------------------------------------------------------------


def _stream_handle(stream: Any, device: int) -> int:
    if stream is None:
        return 0
    if isinstance(stream, str):
        if stream not in ("auto", "torch"):
            raise FlashSampleValueError(
                ERR_PARAM,
                "Context",
                "stream=%r: expected None, 'auto', 'torch', an int "
                "cudaStream_t, a torch.cuda.Stream or an object with .ptr" % stream,
            )
        try:
            import torch
        except ImportError:
            if stream == "torch":
                raise
            return 0
        if not torch.cuda.is_available():
            return 0
        return int(torch.cuda.current_stream(device).cuda_stream)
    for attr in ("cuda_stream", "ptr", "handle"):
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    return _int(stream, "Context", "stream", 0, _U64_MAX)


class Context:
    """An fls_context: an engine with its threads, SIMD path and workspace.

    Context(engine="cpu", threads=0, simd="auto", tile_v=0, device=0, stream="auto",
    workspace_bytes=0). threads: CPU threads (0 = one per online core); simd: "auto",
    "portable", "avx2" or "avx512" (they give the same tokens), or "amx" (bf16 W through AMX tiles:
    the same tokens except at near-ties; never the "auto" choice); tile_v: vocabulary rows per
    tile (0 = the engine's choice; never changes tokens). CUDA engine: device (ordinal) and stream:
    "auto" (the default: torch's current stream on that device when torch is installed, else the
    default stream), None (the default stream), a torch.cuda.Stream, an object with .ptr (cupy)
    or an int cudaStream_t. Each call with torch tensors first makes the context's stream wait for
    the caller's current torch stream (and a __cuda_array_interface__ producer's stream is
    synchronized); the library synchronizes its stream before a call returns, so the outputs are
    ready. asynchronous=True (fls_context_config.async, serving mode): calls enqueue and return;
    errors surface at Context.sync(); the caller's torch stream waits for the context's after
    each call, and DeviceArray outputs name the context's stream in __cuda_array_interface__.
    """

    def __init__(
        self,
        engine: str = "cpu",
        threads: int = 0,
        simd: str = "auto",
        tile_v: int = 0,
        device: int = 0,
        stream: Any = "auto",
        workspace_bytes: int = 0,
        asynchronous: bool = False,
    ):
        fn = "Context"
        self._ptr = ctypes.c_void_p()
        # one call at a time on a context (the C API does not promise concurrent calls on one)
        self._lock = threading.RLock()
        self._streams = weakref.WeakSet()
        cfg = _capi.new_config()
        if isinstance(engine, str) and engine.lower() in _ENGINES:
            cfg.engine = _ENGINES[engine.lower()]
        elif engine in (_capi.ENGINE_CPU, _capi.ENGINE_CUDA) and not isinstance(engine, bool):
            cfg.engine = int(engine)
        else:
            raise FlashSampleValueError(
                ERR_PARAM, fn, "engine=%r: expected 'cpu' or 'cuda'" % (engine,)
            )
        if isinstance(simd, str) and simd.lower() in _SIMDS:
            cfg.simd = _SIMDS[simd.lower()]
        else:
            raise FlashSampleValueError(
                ERR_PARAM, fn, "simd=%r: expected one of %s" % (simd, ", ".join(_SIMDS))
            )
        cfg.threads = _int(threads, fn, "threads", 0, 1 << 30)
        cfg.tile_v = _int(tile_v, fn, "tile_v", 0)
        cfg.device = _int(device, fn, "device", 0, 1 << 30)
        cfg.workspace_bytes = _int(workspace_bytes, fn, "workspace_bytes", 0, _U64_MAX)
        self._stream = 0
        self.asynchronous = bool(asynchronous)
        cfg.async_ = 1 if asynchronous else 0
        if cfg.engine == _capi.ENGINE_CUDA:
            self._stream = _stream_handle(stream, cfg.device)
            cfg.stream = ctypes.c_void_p(self._stream or None)
        check(
            _capi.fls_context_create(ctypes.byref(self._ptr), ctypes.byref(cfg)),
            "fls_context_create",
            "engine %s" % ("cuda" if cfg.engine else "cpu"),
        )
        self.device = int(cfg.device)
        self.tile_v = int(cfg.tile_v)

    def _call(self, f, *args):
        with self._lock:
            return f(*args)

    # -- lifetime
    def close(self) -> None:
        """Destroys the context (and every streaming state made on it). Idempotent."""
        for s in list(self._streams):
            s.close()
        if self._ptr.value:
            _capi.fls_context_destroy(self._ptr)
            self._ptr = ctypes.c_void_p()

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def _handle(self, fn: str) -> ctypes.c_void_p:
        if not self._ptr.value:
            raise FlashSampleValueError(-1, fn, "the context is closed")
        return self._ptr

    # -- properties
    @property
    def engine(self) -> str:
        return "cuda" if _capi.fls_context_engine(self._handle("engine")) else "cpu"

    @property
    def threads(self) -> int:
        return int(_capi.fls_context_threads(self._handle("threads")))

    @property
    def simd(self) -> str:
        return _capi.fls_simd_name(_capi.fls_context_simd(self._handle("simd"))).decode()

    @property
    def cuda_stream(self) -> int:
        """The cudaStream_t the context was created with (0 = the default stream)."""
        return self._stream

    def sync(self) -> None:
        """fls_context_sync: waits for the calls of a serving-mode (asynchronous) context and raises
        the first error since the last sync (FlashSampleError; those calls wrote nothing). On the
        CPU engine and in synchronous mode it returns at once."""
        check(_capi.fls_context_sync(self._handle("sync")), "fls_context_sync")

    def counters(self) -> Counters:
        """fls_context_counters: successful calls, rows sampled, rows that took the exact second
        pass of the rule family."""
        c = _capi.new_counters()
        check(
            _capi.fls_context_counters(self._handle("counters"), ctypes.byref(c)),
            "fls_context_counters",
        )
        return Counters(int(c.calls), int(c.rows), int(c.second_pass_rows))

    def __repr__(self) -> str:
        if not self._ptr.value:
            return "Context(closed)"
        return "Context(engine=%r, threads=%d, simd=%r)" % (self.engine, self.threads, self.simd)

    # -- device checks and stream ordering
    def _check_views(self, fn: str, views: list) -> None:
        eng = self.engine
        for v in views:
            if eng == "cpu" and v.device != "cpu":
                raise FlashSampleValueError(
                    ERR_POINTER,
                    fn,
                    "%s is device memory but the context's engine is cpu: "
                    "create Context(engine='cuda') or pass a numpy array" % v.name,
                )
            if eng == "cuda":
                if v.device != "cuda":
                    raise FlashSampleValueError(
                        ERR_POINTER,
                        fn,
                        "%s is host memory but the context's engine is cuda: pass "
                        "a torch CUDA tensor or an object with __cuda_array_interface__" % v.name,
                    )
                if v.kind == "torch" and v.device_index != self.device:
                    raise FlashSampleValueError(
                        ERR_POINTER,
                        fn,
                        "%s is on cuda:%d but the context is on device %d"
                        % (v.name, v.device_index, self.device),
                    )

    def _torch_streams(self):
        """(the caller's current torch stream, the context's) when they differ, else None."""
        import torch

        cur = torch.cuda.current_stream(self.device)
        if int(cur.cuda_stream) == self._stream:
            return None
        if self._stream == 0:
            mine = torch.cuda.default_stream(self.device)
        else:
            mine = torch.cuda.ExternalStream(self._stream, device=self.device)
        return cur, mine

    def _order_after_callers(self, views: list) -> None:
        if self.engine != "cuda":
            return
        if any(v.kind == "torch" for v in views):
            pair = self._torch_streams()
            if pair is not None:
                pair[1].wait_stream(pair[0])
        for v in views:
            s = v.cai_stream
            if v.kind == "cai" and s not in (None, 0) and s != self._stream:
                if not (self._stream == 0 and s == 1):  # 1: the legacy default stream
                    _cu_stream_synchronize(s)

    def _order_callers_after(self, views: list) -> None:
        """Serving mode: the caller's torch stream waits for the context's work (the outputs)."""
        if self.engine == "cuda" and self.asynchronous and any(v.kind == "torch" for v in views):
            pair = self._torch_streams()
            if pair is not None:
                pair[0].wait_stream(pair[1])

    def _alloc(self, like: View, shape: tuple, dtype: Any) -> tuple:
        """(array, pointer) of a fresh output on the context's engine."""
        n = int(np.prod(shape, dtype=np.int64))
        if self.engine == "cpu":
            # never a NULL pointer, even for an empty output: the library validates the request
            buf = np.empty((max(n, 1),), dtype=dtype)
            return buf[:n].reshape(shape), buf.ctypes.data
        if like.kind == "torch":
            import torch

            tdt = {np.int64: torch.int64, np.float32: torch.float32}[dtype]
            t = torch.empty(shape, dtype=tdt, device="cuda:%d" % self.device)
            return t, (t.data_ptr() or None)
        stream = (self._stream or 1) if self.asynchronous else None
        d = DeviceArray(shape, dtype, stream)
        return d, (d.ptr or None)

    def _outputs(self, fn: str, like: View, prm: _Params, rows: int, lse: bool, lp: bool):
        shape = prm.token_shape(rows)
        tokens, tp = self._alloc(like, shape, np.int64)
        logsumexp = logprobs = None
        lsp = lpp = None
        if lse:
            logsumexp, lsp = self._alloc(like, (rows,), np.float32)
        if lp:
            logprobs, lpp = self._alloc(like, shape, np.float32)
        out = _capi.fls_outputs(tp, lsp, lpp)
        return out, Sample(tokens, logsumexp, logprobs)

    # -- sampling
    def sample_logits(
        self,
        logits: Any,
        *,
        dtype: Any = None,
        return_logsumexp: bool = False,
        return_logprobs: bool = False,
        **params: Any,
    ) -> Sample:
        """fls_sample_logits: sample from materialized logits (B, V) (-inf masks a token).

        logits: float32/float16 (numpy on the CPU engine; torch CUDA tensor or
        __cuda_array_interface__ on the CUDA engine), bf16 as uint16 bits with dtype='bf16'. A 1-D
        array is one row. Parameters (all keyword; every field of fls_params):
          temperature (float or per-row array), seed (int, or per-row array = row_seeds),
          row_seeds, offset (int or per-row array = row_offsets), row_offsets, draws, first_draw,
          method ('fused', 'unfused-gumbel', 'unfused-multinomial', 'grouped'), group_size,
          noise ('per-token', the default, or 'min-first': docs/NOISE.md; the same distribution,
          other tokens; min-first takes the methods 'fused' and 'unfused-gumbel' without rules),
          top_k, top_p, min_p (scalar or per-row array; or row_top_k, row_top_p, row_min_p),
          without_replacement_k (K; tokens become (B, draws, K)), row_without_replacement_k,
          filter (a registry rule's name, e.g. 'top-nsigma'), filter_value (scalar or per-row
          array = row_filter_value), row_filter_value, params_on_device (CUDA engine:
          temperature, row_seeds and row_offsets are device arrays — float32, uint64/int64 — read
          by the kernels; default: True when one of them is device memory).
          Masks, bias and penalties (docs/RULES.md, "Masks, bias and penalties"; applied to the
          raw fp32 logits before temperature and the rules; every method, not streams):
          allowed_bitmask (int32 or uint32 words (B, W), W >= ceil(V / 32): bit v % 32 of
          word v // 32 set = token v allowed), bitmask_rows (bool or
          uint8 (B,): which rows use their mask), logit_bias_ids (int64 (B, K), -1 = padding) with
          logit_bias_values (float32 (B, K)), seen_ids (int64 (B, S), -1 = padding) with
          seen_counts (int32 (B, S), optional: 0 = seen in the prompt only), repetition_penalty,
          presence_penalty, frequency_penalty (scalar or per-row array; or
          row_repetition_penalty, row_presence_penalty, row_frequency_penalty). Host arrays
          unless params_on_device=True, where they too are device arrays (CUDA engine) of exactly
          those dtypes. A shape or dtype that does not fit is a ValueError naming the keyword;
          values out of range (an id outside [0, V) other than -1, an id twice in a row, a bias
          that is not finite, a negative count, a repetition penalty <= 0) are the library's
          FLS_ERR_PARAM with its explanation (fls_params_explain).
        Returns Sample(tokens, logsumexp, logprobs) (the last two None unless asked for).
        """
        fn = "sample_logits"
        L = as_view(logits, "logits", fn, dtype)
        self._check_views(fn, [L])
        prm = _Params(fn, L.rows, params, L.cols)
        out, res = self._outputs(fn, L, prm, L.rows, return_logsumexp, return_logprobs)
        views = [L] + self._param_views(fn, prm)
        self._order_after_callers(views)
        st = self._call(
            _capi.fls_sample_logits,
            self._handle(fn),
            ctypes.byref(L.matrix),
            ctypes.byref(prm.p),
            ctypes.byref(out),
        )
        self._order_callers_after(views)
        if st != 0:
            where = (
                "" if prm.has_mods() else _locate(st, L)
            )  # the raw logits are not the sampled ones
            raise FlashSampleError(
                st, "fls_sample_logits", where or _explain(st, prm, L.rows, L.cols)
            )
        return res

    def sample_fused(
        self,
        weights: Any,
        hidden: Any,
        *,
        weights_dtype: Any = None,
        hidden_dtype: Any = None,
        return_logsumexp: bool = False,
        return_logprobs: bool = False,
        **params: Any,
    ) -> Sample:
        """fls_sample_fused: logits = hidden @ weights.T, sampled tile by tile (never stored).

        weights: (V, D), hidden: (B, D) (1-D = one row); float32/float16, bf16 as uint16 bits with
        weights_dtype / hidden_dtype = 'bf16' (they need not match). Parameters and return value
        as sample_logits.
        """
        fn = "sample_fused"
        W = as_view(weights, "weights", fn, weights_dtype)
        H = as_view(hidden, "hidden", fn, hidden_dtype)
        self._check_views(fn, [W, H])
        if W.cols != H.cols:
            raise FlashSampleValueError(
                ERR_SHAPE,
                fn,
                "weights is (V=%d, D=%d) but hidden is (B=%d, D=%d): D must match"
                % (W.rows, W.cols, H.rows, H.cols),
            )
        prm = _Params(fn, H.rows, params, W.rows)
        out, res = self._outputs(fn, H, prm, H.rows, return_logsumexp, return_logprobs)
        views = [W, H] + self._param_views(fn, prm)
        self._order_after_callers(views)
        st = self._call(
            _capi.fls_sample_fused,
            self._handle(fn),
            ctypes.byref(W.matrix),
            ctypes.byref(H.matrix),
            ctypes.byref(prm.p),
            ctypes.byref(out),
        )
        self._order_callers_after(views)
        check(st, "fls_sample_fused", _explain(st, prm, H.rows, W.rows))
        return res

    def _param_views(self, fn: str, prm: "_Params") -> list:
        """Device parameter arrays (params_on_device) as Views for the device and stream checks."""
        if not prm.on_device:
            return []
        if self.engine != "cuda":
            raise FlashSampleValueError(
                ERR_POINTER,
                fn,
                "params_on_device is for the CUDA engine; on the cpu engine "
                "per-row parameters are host arrays",
            )
        views = []
        for kind, dev, owner in prm.device_views:
            if kind == "torch" and dev != self.device:
                raise FlashSampleValueError(
                    ERR_POINTER,
                    fn,
                    "a per-row parameter is on cuda:%d but the context is on "
                    "device %d" % (dev, self.device),
                )
            cai = getattr(owner, "__cuda_array_interface__", None) if kind == "cai" else None
            views.append(
                View(
                    "params",
                    _capi.fls_matrix(),
                    "cuda",
                    dev,
                    kind,
                    owner,
                    cai_stream=cai.get("stream") if cai else None,
                )
            )
        return views

    def stream(self, rows: int, vocab: int, **params: Any) -> "Stream":
        """A streaming state (fls_stream_create) for `rows` rows over `vocab` tokens."""
        return Stream(self, rows, vocab, **params)


def _explain(status: int, prm: "_Params", rows: int, vocab: int) -> str:
    """Which parameter a refused call got wrong, and its range, in the library's words
    (fls_params_explain), for the statuses that a parameter causes; "" otherwise."""
    if status not in (ERR_PARAM, ERR_TEMPERATURE, ERR_SIZE, ERR_UNSUPPORTED, ERR_ALL_MASKED):
        return ""
    p = prm.p
    if prm.on_device:
        # fls_params_explain reads the mask, bias and penalty arrays: in device memory it cannot,
        # so it explains the rest (the kernels report those values through the call's status)
        p = type(p).from_buffer_copy(p)
        for name in list(_MOD_ARRAYS) + [
            "row_repetition_penalty",
            "row_presence_penalty",
            "row_frequency_penalty",
        ]:
            setattr(p, _MOD_ARRAYS[name][0] if name in _MOD_ARRAYS else name, None)
        p.bitmask_ld = p.logit_bias_k = p.seen_k = 0
    buf = ctypes.create_string_buffer(512)
    _capi.fls_params_explain(ctypes.byref(p), int(rows), int(vocab), buf, len(buf))
    msg = buf.value.decode("utf-8", "replace")
    if status == ERR_ALL_MASKED:
        return (
            "a row has no finite logit left after allowed_bitmask, the logit bias and the "
            "penalties"
            if prm.has_mods()
            else ""
        )
    if status == ERR_UNSUPPORTED and prm.has_mods() and not msg:
        return (
            "masks, logit bias and penalties: streams take none; on the CUDA engine a row takes at "
            "most 16384 seen + bias entries, and a rule with params_on_device needs an async context"
        )
    return msg


def _locate(status: int, L: View) -> str:
    """Which row (and column) a NaN or an all-masked row is, for host logits; what a dtype the
    CUDA engine refuses needs."""
    if status == ERR_DTYPE and L.device == "cuda" and L.matrix.dtype != _capi.DTYPE_F32:
        return "the CUDA engine samples fp32 logits only: pass logits.float()"
    if L.kind != "numpy" or status not in (ERR_NAN, ERR_ALL_MASKED):
        return ""
    a = np.asarray(L.owner)
    if a.ndim == 1:
        a = a[None, :]
    if L.matrix.dtype == _capi.DTYPE_BF16:
        a = from_bf16(a)
    a = a.astype(np.float32)
    if status == ERR_NAN:
        bad = np.isnan(a) | (a == np.inf)
        if bad.any():
            r, c = np.argwhere(bad)[0]
            return "logits[%d, %d] is %s" % (r, c, a[r, c])
        return ""
    rows = np.where(np.all(a == -np.inf, axis=1))[0]
    return "row %d of logits is all -inf" % rows[0] if rows.size else ""


# ---- streaming ----------------------------------------------------------------------------------


class _NoView:
    """Stands for "no input seen" where an output's kind follows an input's (a DeviceArray)."""

    kind = "cai"


class Stream:
    """An fls_stream: the online sampler (docs/GROUPED.md, Algorithm I.3), on either engine.

    Stream(ctx, rows, vocab, **params) with the sampling parameters of Context.sample_logits
    that streaming supports (temperature, seed/row_seeds, offset/row_offsets, draws, first_draw,
    method 'fused' or 'grouped', group_size). Feed chunks of the vocabulary in any size and order
    (feed_logits, feed_fused), skip chunks with a logit bound (skip), merge states of disjoint
    tokens (merge, merge_bytes), then finalize: the tokens of the one-shot call.
    On a CUDA context the chunks are device memory (torch CUDA tensors or
    __cuda_array_interface__ objects, logits float32) and finalize's outputs are device arrays
    like the sampling calls' (torch tensors when the chunks were); the state itself stays in
    host memory (serialize, merge and deserialize work across engines).
    """

    def __init__(self, ctx: Context, rows: int, vocab: int, **params: Any):
        fn = "Stream"
        self._ptr = ctypes.c_void_p()
        self.ctx = ctx
        self.rows = _int(rows, fn, "rows")
        self.vocab = _int(vocab, fn, "vocab")
        prm = _Params(fn, max(self.rows, 0), params)
        self.draws = prm.draws
        self._params = params
        check(
            _capi.fls_stream_create(
                ctypes.byref(self._ptr), ctx._handle(fn), self.rows, self.vocab, ctypes.byref(prm.p)
            ),
            "fls_stream_create",
        )
        ctx._streams.add(self)

    @classmethod
    def deserialize(cls, ctx: Context, data: bytes, rows: int, vocab: int, **params: Any):
        """A state from fls_stream_serialize's bytes (same build and architecture).

        The C API gives no way to read a state's rows and draws, which finalize needs to size its
        outputs, so the caller names the request (rows, vocab and the parameters it was created
        with): the bytes are merged into a fresh state of that request, which the library refuses
        (FLS_ERR_PARAM) unless the request is the same. The result continues where the serialized
        state stopped."""
        s = cls(ctx, rows, vocab, **params)
        try:
            s.merge_bytes(data)
        except BaseException:
            s.close()
            raise
        return s

    def _handle(self, fn: str) -> ctypes.c_void_p:
        if not self._ptr.value:
            raise FlashSampleValueError(-1, fn, "the streaming state is closed")
        return self._ptr

    def close(self) -> None:
        if self._ptr.value:
            _capi.fls_stream_destroy(self._ptr)
            self._ptr = ctypes.c_void_p()

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover
            pass

    def _rows_match(self, fn: str, v: View) -> None:
        if v.rows != self.rows:
            raise FlashSampleValueError(
                ERR_SHAPE, fn, "%s has %d rows but the state has %d" % (v.name, v.rows, self.rows)
            )

    def feed_logits(self, logits: Any, v0: int, dtype: Any = None) -> None:
        """fls_stream_feed_logits: logits (B, n) of tokens v0 .. v0 + n - 1 (host memory)."""
        fn = "feed_logits"
        L = as_view(logits, "logits", fn, dtype)
        self.ctx._check_views(fn, [L])
        self._rows_match(fn, L)
        self._like = L
        self.ctx._order_after_callers([L])
        st = self.ctx._call(
            _capi.fls_stream_feed_logits,
            self._handle(fn),
            ctypes.byref(L.matrix),
            _int(v0, fn, "v0"),
        )
        if st != 0:
            raise FlashSampleError(st, "fls_stream_feed_logits", _locate(st, L))

    def feed_fused(
        self,
        weights_chunk: Any,
        hidden: Any,
        v0: int,
        weights_dtype: Any = None,
        hidden_dtype: Any = None,
    ) -> None:
        """fls_stream_feed_fused: rows v0 .. v0 + n - 1 of W (the (n, D) slice) against H (B, D)."""
        fn = "feed_fused"
        W = as_view(weights_chunk, "weights_chunk", fn, weights_dtype)
        H = as_view(hidden, "hidden", fn, hidden_dtype)
        self.ctx._check_views(fn, [W, H])
        self._rows_match(fn, H)
        if W.cols != H.cols:
            raise FlashSampleValueError(
                ERR_SHAPE, fn, "weights_chunk has D=%d but hidden has D=%d" % (W.cols, H.cols)
            )
        self._like = H
        self.ctx._order_after_callers([W, H])
        check(
            self.ctx._call(
                _capi.fls_stream_feed_fused,
                self._handle(fn),
                ctypes.byref(W.matrix),
                ctypes.byref(H.matrix),
                _int(v0, fn, "v0"),
            ),
            "fls_stream_feed_fused",
        )

    def skip(self, v0: int, n: int, upper: Any) -> bool:
        """fls_stream_skip: chunk v0 .. v0 + n - 1 not fed, upper[b] >= every logit of row b in it
        (a float for every row, or a (B,) array). True when the chunk provably holds no row's token
        (it then counts as done); False changes nothing."""
        fn = "skip"
        if is_array_like(upper):
            up = row_array(upper, self.rows, np.float32, fn, "upper")
        else:
            up = np.full((self.rows,), _float(upper, fn, "upper"), dtype=np.float32)
        skipped = ctypes.c_int(0)
        check(
            self.ctx._call(
                _capi.fls_stream_skip,
                self._handle(fn),
                _int(v0, fn, "v0"),
                _int(n, fn, "n"),
                ptr_of(up, ctypes.c_float),
                ctypes.byref(skipped),
            ),
            "fls_stream_skip",
        )
        return bool(skipped.value)

    def merge(self, other: "Stream") -> None:
        """fls_stream_merge: self += other (same request, disjoint tokens)."""
        if not isinstance(other, Stream):
            raise TypeError("merge: expected a Stream, got %s" % type(other).__name__)
        check(
            _capi.fls_stream_merge(self._handle("merge"), other._handle("merge")),
            "fls_stream_merge",
        )

    def merge_bytes(self, data: bytes) -> None:
        """Merges a serialized state (another shard's or rank's) into this one."""
        fn = "merge_bytes"
        buf = bytes(data)
        tmp = ctypes.c_void_p()
        check(
            _capi.fls_stream_deserialize(ctypes.byref(tmp), self.ctx._handle(fn), buf, len(buf)),
            "fls_stream_deserialize",
        )
        try:
            check(_capi.fls_stream_merge(self._handle(fn), tmp), "fls_stream_merge")
        finally:
            _capi.fls_stream_destroy(tmp)

    def serialize(self) -> bytes:
        """fls_stream_serialize: the state as checked bytes (same build and architecture)."""
        fn = "serialize"
        n = ctypes.c_size_t(0)
        check(
            _capi.fls_stream_serialize(self._handle(fn), None, ctypes.byref(n)),
            "fls_stream_serialize",
        )
        buf = ctypes.create_string_buffer(max(n.value, 1))
        check(
            _capi.fls_stream_serialize(self._handle(fn), buf, ctypes.byref(n)),
            "fls_stream_serialize",
        )
        return buf.raw[: n.value]

    def progress(self) -> Progress:
        """fls_stream_progress: tokens fed, tokens skipped, chunks fed, chunks skipped."""
        v = [ctypes.c_int64(0) for _ in range(4)]
        check(
            _capi.fls_stream_progress(self._handle("progress"), *[ctypes.byref(x) for x in v]),
            "fls_stream_progress",
        )
        return Progress(*[int(x.value) for x in v])

    def allgather_nccl(self, comm: Any, cuda_stream: Any = None) -> tuple:
        """fls_stream_allgather_nccl (lib/include/flashsample_nccl.h): every rank of the NCCL communicator
        calls it with its state over its vocabulary shard; returns (merged Stream, bytes sent),
        the merged state the same on every rank. comm: an ncclComm_t as an int, or an object
        with .comm / .ptr (cupy's NcclCommunicator); cuda_stream: None (the default stream), an
        int cudaStream_t, a torch.cuda.Stream or an object with .ptr. Needs libflashsample_nccl
        (built with FLASHSAMPLE_CUDA=1 where NCCL is found): FLS_ERR_UNSUPPORTED without it."""
        fn = "allgather_nccl"
        lib = _capi.nccl_lib()
        if lib is None:
            raise FlashSampleError(
                -11,
                fn,
                "this installation has no libflashsample_nccl (build with "
                "FLASHSAMPLE_CUDA=1 on a machine with NCCL, or set FLASHSAMPLE_NCCL_LIBRARY)",
            )
        c = comm
        for attr in ("comm", "ptr", "handle"):
            if hasattr(c, attr):
                c = getattr(c, attr)
                break
        c = _int(c, fn, "comm", 0, _U64_MAX)
        s = _stream_handle(cuda_stream, self.ctx.device) if cuda_stream is not None else 0
        merged = ctypes.c_void_p()
        sent = ctypes.c_size_t(0)
        check(
            lib.fls_stream_allgather_nccl(
                self._handle(fn),
                self.ctx._handle(fn),
                ctypes.c_void_p(c),
                ctypes.c_void_p(s or None),
                ctypes.byref(merged),
                ctypes.byref(sent),
            ),
            "fls_stream_allgather_nccl",
        )
        out = Stream.__new__(Stream)
        out._ptr = merged
        out.ctx, out.rows, out.vocab, out.draws = self.ctx, self.rows, self.vocab, self.draws
        out._params = self._params
        self.ctx._streams.add(out)
        return out, int(sent.value)

    def finalize(self, return_logsumexp: bool = False, return_logprobs: bool = False) -> Sample:
        """fls_stream_finalize (every token fed or skipped): the one-shot call's outputs."""
        fn = "finalize"
        shape = (self.rows, self.draws)
        if self.ctx.engine == "cuda":
            # device outputs, of the kind of the chunks fed (DeviceArray when none was)
            like = getattr(self, "_like", None) or _NoView
            tokens, tp = self.ctx._alloc(like, shape, np.int64)
            lse = lsp = lp = lpp = None
            if return_logsumexp:
                lse, lsp = self.ctx._alloc(like, (self.rows,), np.float32)
            if return_logprobs:
                lp, lpp = self.ctx._alloc(like, shape, np.float32)
            out = _capi.fls_outputs(tp, lsp, lpp)
        else:
            tokens = np.empty(shape, dtype=np.int64)
            lse = np.empty((self.rows,), dtype=np.float32) if return_logsumexp else None
            lp = np.empty(shape, dtype=np.float32) if return_logprobs else None
            out = _capi.fls_outputs(
                tokens.ctypes.data if tokens.size else None,
                lse.ctypes.data if lse is not None and lse.size else None,
                lp.ctypes.data if lp is not None and lp.size else None,
            )
        check(
            self.ctx._call(_capi.fls_stream_finalize, self._handle(fn), ctypes.byref(out)),
            "fls_stream_finalize",
        )
        return Sample(tokens, lse, lp)


# ---- module-level convenience (a shared CPU context) --------------------------------------------

_default = None
_default_lock = threading.Lock()


def default_context() -> Context:
    """A CPU context with every core, created on first use and shared by the module functions."""
    global _default
    with _default_lock:
        if _default is None or not _default._ptr.value:
            _default = Context()
        return _default


def sample_logits(logits: Any, *, context: Optional[Context] = None, **kw: Any) -> Sample:
    """Context.sample_logits on `context` (default: default_context())."""
    return (context or default_context()).sample_logits(logits, **kw)


def sample_fused(
    weights: Any, hidden: Any, *, context: Optional[Context] = None, **kw: Any
) -> Sample:
    """Context.sample_fused on `context` (default: default_context())."""
    return (context or default_context()).sample_fused(weights, hidden, **kw)
