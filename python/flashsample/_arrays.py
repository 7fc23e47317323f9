"""Array adapters: numpy arrays (CPU engine), torch tensors and any object with
__cuda_array_interface__ (CUDA engine), turned into fls_matrix views without copying.

Every mismatch (dtype, shape, strides, alignment, device) is refused here, before the C call, with
a FlashSampleError subclass carrying the status the library would have returned.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from . import _capi
from ._errors import FlashSampleTypeError, FlashSampleValueError

ERR_ALIGN, ERR_SHAPE, ERR_DTYPE, ERR_POINTER, ERR_SIZE = -2, -4, -5, -10, -3

_DTYPE_NAMES = {
    "f32": _capi.DTYPE_F32,
    "float32": _capi.DTYPE_F32,
    "fp32": _capi.DTYPE_F32,
    "f16": _capi.DTYPE_F16,
    "float16": _capi.DTYPE_F16,
    "fp16": _capi.DTYPE_F16,
    "half": _capi.DTYPE_F16,
    "bf16": _capi.DTYPE_BF16,
    "bfloat16": _capi.DTYPE_BF16,
}
DTYPE_LABEL = {_capi.DTYPE_F32: "f32", _capi.DTYPE_F16: "f16", _capi.DTYPE_BF16: "bf16"}


def parse_dtype(dtype: Any, fn: str) -> Optional[int]:
    """None, "f32" | "f16" | "bf16" (and aliases), a numpy float32/float16 dtype -> the fls_dtype."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        key = dtype.lower()
        if key in _DTYPE_NAMES:
            return _DTYPE_NAMES[key]
    else:
        try:
            npd = np.dtype(dtype)
        except TypeError:
            npd = None
        if npd == np.float32:
            return _capi.DTYPE_F32
        if npd == np.float16:
            return _capi.DTYPE_F16
        if npd is not None and npd.name == "bfloat16":
            return _capi.DTYPE_BF16
    raise FlashSampleTypeError(
        ERR_DTYPE, fn, "dtype=%r: expected 'f32', 'f16' or 'bf16'" % (dtype,)
    )


@dataclass
class View:
    """One matrix argument: an fls_matrix and what keeps its memory alive."""

    name: str
    matrix: _capi.fls_matrix
    device: str  # "cpu" or "cuda"
    device_index: int
    kind: str  # "numpy", "torch" or "cai"
    owner: Any
    cai_stream: Optional[int] = None  # the producer's stream (__cuda_array_interface__ v3)
    squeezed: bool = False  # a 1-D input taken as one row

    @property
    def rows(self) -> int:
        return int(self.matrix.rows)

    @property
    def cols(self) -> int:
        return int(self.matrix.cols)


def _is_torch_tensor(x: Any) -> bool:
    t = type(x)
    return t.__module__.startswith("torch") and hasattr(x, "data_ptr") and hasattr(x, "is_cuda")


def _np_code(arr: np.ndarray, want: Optional[int], fn: str, name: str) -> int:
    dt = arr.dtype
    if dt == np.float32:
        code = _capi.DTYPE_F32
    elif dt == np.float16:
        code = _capi.DTYPE_F16
    elif dt.name == "bfloat16" and dt.itemsize == 2:  # ml_dtypes.bfloat16
        code = _capi.DTYPE_BF16
    elif dt in (np.uint16, np.int16):
        if want == _capi.DTYPE_BF16:
            return _capi.DTYPE_BF16
        raise FlashSampleTypeError(
            ERR_DTYPE,
            fn,
            "%s is %s: 16-bit integers are taken only as raw bf16 bits, with dtype='bf16'"
            % (name, dt.name),
        )
    elif dt == np.float64:
        raise FlashSampleTypeError(
            ERR_DTYPE,
            fn,
            "%s is float64, which the library does not read: pass %s.astype(np.float32) "
            "(or float16, or bf16 bits with dtype='bf16')" % (name, name),
        )
    else:
        raise FlashSampleTypeError(
            ERR_DTYPE,
            fn,
            "%s has dtype %s; expected float32, float16, or uint16 bf16 bits with dtype='bf16'"
            % (name, dt),
        )
    if want is not None and want != code:
        if want == _capi.DTYPE_BF16:
            raise FlashSampleTypeError(
                ERR_DTYPE,
                fn,
                "%s is %s but dtype='bf16': pass the raw bf16 bits as a uint16 array "
                "(flashsample.to_bf16(x) converts with round to nearest even)" % (name, dt.name),
            )
        raise FlashSampleTypeError(
            ERR_DTYPE,
            fn,
            "%s is %s but dtype=%r was asked for; convert the array (no silent conversion)"
            % (name, dt.name, DTYPE_LABEL[want]),
        )
    return code


def _matrix_from(
    ptr: int,
    code: int,
    shape: tuple,
    strides_bytes: Optional[tuple],
    itemsize: int,
    fn: str,
    name: str,
) -> tuple:
    """shape/strides (bytes; None = C-contiguous) -> (fls_matrix, squeezed)."""
    squeezed = False
    if len(shape) == 1:
        shape = (1, shape[0])
        strides_bytes = None if strides_bytes is None else (shape[1] * itemsize, strides_bytes[0])
        squeezed = True
    if len(shape) != 2:
        raise FlashSampleValueError(
            ERR_SHAPE,
            fn,
            "%s must be 2-D (rows, cols) or 1-D (one row), got shape %s" % (name, tuple(shape)),
        )
    rows, cols = int(shape[0]), int(shape[1])
    if rows == 0 or cols == 0:
        raise FlashSampleValueError(
            ERR_SIZE,
            fn,
            "%s is empty: shape %s" % (name, (rows, cols) if not squeezed else (cols,)),
        )
    if strides_bytes is None:
        ld = cols
    else:
        rs, cs = int(strides_bytes[0]), int(strides_bytes[1])
        if cols > 1 and cs != itemsize:
            raise FlashSampleValueError(
                ERR_SHAPE,
                fn,
                "%s is not contiguous along its rows (column stride %d bytes, element %d bytes): "
                "pass a C-ordered array (np.ascontiguousarray / .contiguous())"
                % (name, cs, itemsize),
            )
        if rows <= 1:
            ld = cols
        else:
            if rs <= 0 or rs % itemsize != 0 or rs // itemsize < cols:
                raise FlashSampleValueError(
                    ERR_SHAPE,
                    fn,
                    "%s has a row stride of %d bytes, which is not a positive multiple of its "
                    "element size %d covering %d columns: pass a C-ordered array "
                    "(np.ascontiguousarray / .contiguous())" % (name, rs, itemsize, cols),
                )
            ld = rs // itemsize
    if ptr % itemsize != 0:
        raise FlashSampleValueError(
            ERR_ALIGN,
            fn,
            "%s's data is not aligned to its element size (%d bytes)" % (name, itemsize),
        )
    m = _capi.fls_matrix(ctypes.c_void_p(ptr), code, rows, cols, max(int(ld), 1))
    return m, squeezed


def as_view(x: Any, name: str, fn: str, dtype: Any = None) -> View:
    """Any supported array -> View (zero-copy)."""
    want = parse_dtype(dtype, fn)
    if _is_torch_tensor(x):
        return _torch_view(x, name, fn, want)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None and not isinstance(x, np.ndarray):
        return _cai_view(x, cai, name, fn, want)
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    code = _np_code(x, want, fn, name)
    ptr = x.ctypes.data if x.size else 0
    m, sq = _matrix_from(ptr, code, x.shape, x.strides, x.dtype.itemsize, fn, name)
    return View(name, m, "cpu", -1, "numpy", x, squeezed=sq)


def _torch_view(t: Any, name: str, fn: str, want: Optional[int]) -> View:
    import torch

    t = t.detach()
    tmap = {torch.float32: _capi.DTYPE_F32, torch.float16: _capi.DTYPE_F16}
    tmap[torch.bfloat16] = _capi.DTYPE_BF16
    if t.dtype in tmap:
        code = tmap[t.dtype]
        if want is not None and want != code:
            raise FlashSampleTypeError(
                ERR_DTYPE,
                fn,
                "%s is %s but dtype=%r was asked for" % (name, t.dtype, DTYPE_LABEL[want]),
            )
    elif t.dtype in (torch.int16, getattr(torch, "uint16", torch.int16)) and want == 2:
        code = _capi.DTYPE_BF16
    elif t.dtype == torch.float64:
        raise FlashSampleTypeError(
            ERR_DTYPE,
            fn,
            "%s is torch.float64, which the library does not read: pass "
            "%s.float() (or .half() or .bfloat16())" % (name, name),
        )
    else:
        raise FlashSampleTypeError(
            ERR_DTYPE,
            fn,
            "%s has dtype %s; expected torch.float32, float16 or bfloat16" % (name, t.dtype),
        )
    if not t.is_cuda:
        if t.device.type != "cpu":
            raise FlashSampleValueError(
                ERR_POINTER,
                fn,
                "%s is on %s; expected a CUDA tensor or host memory" % (name, t.device),
            )
        # Host tensor: the numpy view of the same memory (bf16 as its raw bits).
        arr = t.view(torch.int16).numpy().view(np.uint16) if code == 2 else t.numpy()
        v = as_view(arr, name, fn, "bf16" if code == 2 else None)
        v.owner = (t, arr)
        return v
    itemsize = t.element_size()
    strides = tuple(s * itemsize for s in t.stride())
    m, sq = _matrix_from(t.data_ptr(), code, tuple(t.shape), strides, itemsize, fn, name)
    return View(name, m, "cuda", t.device.index or 0, "torch", t, squeezed=sq)


_TYPESTR = {"<f4": _capi.DTYPE_F32, "<f2": _capi.DTYPE_F16}


def _cai_view(x: Any, cai: dict, name: str, fn: str, want: Optional[int]) -> View:
    typestr = cai.get("typestr", "")
    if typestr in _TYPESTR:
        code = _TYPESTR[typestr]
        if want is not None and want != code:
            raise FlashSampleTypeError(
                ERR_DTYPE,
                fn,
                "%s has typestr %s but dtype=%r was asked for" % (name, typestr, DTYPE_LABEL[want]),
            )
    elif typestr in ("<u2", "<i2", "<V2") and want == _capi.DTYPE_BF16:
        code = _capi.DTYPE_BF16
    else:
        raise FlashSampleTypeError(
            ERR_DTYPE,
            fn,
            "%s has typestr %r; expected '<f4', '<f2', or 16-bit bf16 bits with dtype='bf16'"
            % (name, typestr),
        )
    ptr = int(cai["data"][0] or 0)
    itemsize = 2 if code != _capi.DTYPE_F32 else 4
    m, sq = _matrix_from(ptr, code, tuple(cai["shape"]), cai.get("strides"), itemsize, fn, name)
    stream = cai.get("stream")
    return View(name, m, "cuda", -1, "cai", x, cai_stream=stream, squeezed=sq)


# ---- per-row parameter arrays (host memory, converted: they are small) --------------------------


def row_array(value: Any, rows: int, np_dtype: Any, fn: str, name: str) -> np.ndarray:
    """A per-row parameter array: (rows,), converted to np_dtype (host memory)."""
    if _is_torch_tensor(value):
        value = value.detach().cpu().numpy()
    elif hasattr(value, "__cuda_array_interface__") and not isinstance(value, np.ndarray):
        if hasattr(value, "get"):  # cupy
            value = value.get()
        else:
            raise FlashSampleValueError(
                ERR_POINTER, fn, "%s: per-row parameters are host arrays (numpy or a list)" % name
            )
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.shape[0] != rows:
        raise FlashSampleValueError(
            ERR_SHAPE,
            fn,
            "%s must have one entry per row: shape (%d,), got %s" % (name, rows, arr.shape),
        )
    target = np.dtype(np_dtype)
    if target.kind in "iu":
        if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "b"):
            raise FlashSampleTypeError(
                ERR_DTYPE, fn, "%s must hold integers, got dtype %s" % (name, arr.dtype)
            )
        if target.kind == "u" and arr.dtype.kind == "i" and arr.size and arr.min() < 0:
            raise FlashSampleValueError(
                -9,
                fn,
                "%s must be >= 0 (uint64), row %d is %d"
                % (name, int(np.argmin(arr)), int(arr.min())),
            )
    elif arr.dtype.kind not in "fiub":
        raise FlashSampleTypeError(
            ERR_DTYPE, fn, "%s must hold numbers, got dtype %s" % (name, arr.dtype)
        )
    return np.ascontiguousarray(arr, dtype=target)


def is_array_like(value: Any) -> bool:
    """A per-row array (anything with at least one dimension), as opposed to a scalar."""
    if isinstance(value, (str, bytes)):
        return False
    if isinstance(value, (list, tuple)):
        return True
    ndim = getattr(value, "ndim", None)
    if ndim is not None:
        return int(ndim) > 0
    return False


def ptr_of(arr: Optional[np.ndarray], ctype: Any) -> Any:
    if arr is None:
        return None
    return arr.ctypes.data_as(ctypes.POINTER(ctype))


def is_device_array(value: Any) -> bool:
    if _is_torch_tensor(value):
        return bool(value.is_cuda)
    return hasattr(value, "__cuda_array_interface__") and not isinstance(value, np.ndarray)


def device_row(value: Any, rows: int, want: str, fn: str, name: str) -> tuple:
    """A per-row parameter in device memory (fls_params.params_on_device): (pointer, owner, view
    kind, device index or -1). want: "f32" or "u64" (torch int64 / '<i8' accepted for u64)."""
    ok = {"f32": ("<f4",), "u64": ("<u8", "<i8")}[want]
    if _is_torch_tensor(value):
        import torch

        t = value.detach()
        tok = {"f32": (torch.float32,), "u64": (torch.int64, getattr(torch, "uint64", torch.int64))}
        if not t.is_cuda:
            raise FlashSampleValueError(
                ERR_POINTER,
                fn,
                "%s: params_on_device needs a CUDA tensor, got one on %s" % (name, t.device),
            )
        if t.dtype not in tok[want]:
            raise FlashSampleTypeError(
                ERR_DTYPE,
                fn,
                "%s has dtype %s; expected %s"
                % (name, t.dtype, "float32" if want == "f32" else "int64 or uint64"),
            )
        if tuple(t.shape) != (rows,) or (rows > 1 and t.stride(0) != 1):
            raise FlashSampleValueError(
                ERR_SHAPE,
                fn,
                "%s must be a contiguous (%d,) tensor, got shape %s" % (name, rows, tuple(t.shape)),
            )
        return t.data_ptr(), t, "torch", t.device.index or 0
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is None or isinstance(value, np.ndarray):
        raise FlashSampleValueError(
            ERR_POINTER,
            fn,
            "%s: params_on_device needs device memory (a torch CUDA tensor or "
            "__cuda_array_interface__), got %s" % (name, type(value).__name__),
        )
    if cai.get("typestr") not in ok:
        raise FlashSampleTypeError(
            ERR_DTYPE, fn, "%s has typestr %r; expected %s" % (name, cai.get("typestr"), ok)
        )
    itemsize = 4 if want == "f32" else 8
    strides = cai.get("strides")
    if tuple(cai["shape"]) != (rows,) or (
        strides is not None and rows > 1 and strides[0] != itemsize
    ):
        raise FlashSampleValueError(
            ERR_SHAPE,
            fn,
            "%s must be a contiguous (%d,) array, got shape %s" % (name, rows, tuple(cai["shape"])),
        )
    return int(cai["data"][0] or 0), value, "cai", -1


# ---- mask, bias and penalty arrays (fls_params 0.4; docs/RULES.md) ------------------------------

# kind -> (numpy dtype, accepted torch dtype names, __cuda_array_interface__ typestrs, label)
_MOD_KINDS = {
    "i32": (np.int32, ("int32",), ("<i4", "<u4"), "int32"),
    "i64": (np.int64, ("int64",), ("<i8",), "int64"),
    "f32": (np.float32, ("float32",), ("<f4",), "float32"),
    "u8": (np.uint8, ("uint8", "bool"), ("|u1", "<u1", "|b1"), "uint8 or bool"),
}


def mod_array(value: Any, rows: int, kind: str, fn: str, name: str, cols: Optional[int] = None):
    """A host mask/bias/penalty array: (rows, cols) (cols=None: any; a 1-D array is one row when
    rows == 1), or (rows,) for kind 'u8' with cols=0. Returns (array, cols). ValueError naming
    `name` for a shape or dtype that does not fit (values are the library's to check)."""
    if _is_torch_tensor(value):
        if value.is_cuda:
            raise FlashSampleValueError(
                ERR_POINTER,
                fn,
                "%s is device memory but params_on_device=False: mask, bias and penalty arrays "
                "are host arrays unless params_on_device=True" % name,
            )
        value = value.detach().numpy()
    elif hasattr(value, "__cuda_array_interface__") and not isinstance(value, np.ndarray):
        raise FlashSampleValueError(
            ERR_POINTER,
            fn,
            "%s is device memory but params_on_device=False: mask, bias and penalty arrays are "
            "host arrays unless params_on_device=True" % name,
        )
    arr = np.asarray(value)
    npd, _, _, label = _MOD_KINDS[kind]
    if cols == 0:
        if arr.ndim != 1 or arr.shape[0] != rows:
            raise FlashSampleValueError(
                ERR_SHAPE,
                fn,
                "%s must have one entry per row: shape (%d,), got %s" % (name, rows, arr.shape),
            )
    else:
        if arr.ndim == 1 and rows == 1:
            arr = arr[None, :]
        if arr.ndim != 2 or arr.shape[0] != rows or (cols is not None and arr.shape[1] != cols):
            want = "(%d, %s)" % (rows, "K" if cols is None else cols)
            raise FlashSampleValueError(
                ERR_SHAPE,
                fn,
                "%s must be %s (one row per row of the logits%s), got shape %s"
                % (name, want, "" if cols is None else ", as its companion array", arr.shape),
            )
    if kind == "i32" and name == "allowed_bitmask":
        # the bits as they are: int32 words, or uint32 viewed as int32
        if arr.dtype not in (np.int32, np.uint32):
            raise FlashSampleValueError(
                ERR_DTYPE,
                fn,
                "%s must be int32 (or uint32) words, got dtype %s" % (name, arr.dtype),
            )
        return np.ascontiguousarray(arr).view(np.int32), arr.shape[1]
    if kind in ("i32", "i64"):
        if arr.dtype.kind not in "iu":
            raise FlashSampleValueError(
                ERR_DTYPE, fn, "%s must hold integers (%s), got dtype %s" % (name, label, arr.dtype)
            )
        if kind == "i32" and arr.size and (arr.max() > 2**31 - 1 or arr.min() < -(2**31)):
            raise FlashSampleValueError(
                ERR_DTYPE, fn, "%s does not fit int32 (max %d)" % (name, int(arr.max()))
            )
        if kind == "i64" and arr.dtype == np.uint64 and arr.size and arr.max() > 2**63 - 1:
            raise FlashSampleValueError(ERR_DTYPE, fn, "%s does not fit int64" % name)
    elif kind == "f32":
        if arr.dtype.kind not in "fiu":
            raise FlashSampleValueError(
                ERR_DTYPE, fn, "%s must hold numbers (float32), got dtype %s" % (name, arr.dtype)
            )
    elif kind == "u8":
        if arr.dtype.kind not in "biu":
            raise FlashSampleValueError(
                ERR_DTYPE, fn, "%s must be bool or uint8, got dtype %s" % (name, arr.dtype)
            )
        arr = arr != 0
    out = np.ascontiguousarray(arr, dtype=npd)
    return out, (out.shape[1] if out.ndim == 2 else 0)


def device_mod(value: Any, rows: int, kind: str, fn: str, name: str, cols: Optional[int] = None):
    """A mask/bias/penalty array in device memory (params_on_device=True): a contiguous torch CUDA
    tensor or __cuda_array_interface__ object of the exact dtype, shaped as mod_array says.
    Returns (pointer, owner, view kind, device index or -1, cols)."""
    _, tnames, typestrs, label = _MOD_KINDS[kind]
    if _is_torch_tensor(value):
        t = value.detach()
        if not t.is_cuda:
            raise FlashSampleValueError(
                ERR_POINTER,
                fn,
                "%s: params_on_device needs a CUDA tensor, got one on %s" % (name, t.device),
            )
        tname = str(t.dtype).replace("torch.", "")
        if tname not in tnames:
            raise FlashSampleValueError(
                ERR_DTYPE, fn, "%s has dtype %s; expected %s" % (name, t.dtype, label)
            )
        shape, contiguous = tuple(t.shape), t.is_contiguous()
        ptr, owner, vkind, dev = t.data_ptr(), t, "torch", t.device.index or 0
    else:
        cai = getattr(value, "__cuda_array_interface__", None)
        if cai is None or isinstance(value, np.ndarray):
            raise FlashSampleValueError(
                ERR_POINTER,
                fn,
                "%s: params_on_device needs device memory (a torch CUDA tensor or "
                "__cuda_array_interface__), got %s" % (name, type(value).__name__),
            )
        if cai.get("typestr") not in typestrs:
            raise FlashSampleValueError(
                ERR_DTYPE,
                fn,
                "%s has typestr %r; expected %s" % (name, cai.get("typestr"), label),
            )
        shape = tuple(cai["shape"])
        itemsize = int(np.dtype(_MOD_KINDS[kind][0]).itemsize)
        strides = cai.get("strides")
        contiguous = strides is None or all(
            s == itemsize * int(np.prod(shape[k + 1 :], dtype=np.int64))
            for k, s in enumerate(strides)
            if shape[k] > 1
        )
        ptr, owner, vkind, dev = int(cai["data"][0] or 0), value, "cai", -1
    if cols == 0:
        ok = shape == (rows,)
    else:
        if len(shape) == 1 and rows == 1:
            shape = (1, shape[0])
        ok = len(shape) == 2 and shape[0] == rows and (cols is None or shape[1] == cols)
    if not ok or not contiguous:
        raise FlashSampleValueError(
            ERR_SHAPE,
            fn,
            "%s must be a contiguous %s array, got shape %s"
            % (name, "(%d,)" % rows if cols == 0 else "(%d, %s)" % (rows, cols or "K"), shape),
        )
    return ptr, owner, vkind, dev, (shape[1] if cols != 0 else 0)
