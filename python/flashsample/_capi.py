"""ctypes mirror of lib/include/flashsample.h (the one public C API) and the library loader.

Every struct here mirrors the header field for field. The growing structs (fls_context_config,
fls_params, fls_counters) are always filled by the library's *_default function (see
`new_config`, `new_params`, `new_counters`), never by hand, so struct_size is right.
"""

from __future__ import annotations

import ctypes
import os
import sys
from ctypes import (
    POINTER,
    Structure,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int64,
    c_size_t,
    c_uint16,
    c_uint64,
    c_void_p,
)

# ---- constants (lib/include/flashsample.h) -------------------------------------------------------------

HEADER_VERSION = (0, 4, 0)  # FLS_VERSION_MAJOR/MINOR/PATCH of the header mirrored here

FLS_OK = 0
STATUS_NAMES = {
    0: "FLS_OK",
    -1: "FLS_ERR_NULL",
    -2: "FLS_ERR_ALIGN",
    -3: "FLS_ERR_SIZE",
    -4: "FLS_ERR_SHAPE",
    -5: "FLS_ERR_DTYPE",
    -6: "FLS_ERR_TEMPERATURE",
    -7: "FLS_ERR_NAN",
    -8: "FLS_ERR_ALL_MASKED",
    -9: "FLS_ERR_PARAM",
    -10: "FLS_ERR_POINTER",
    -11: "FLS_ERR_UNSUPPORTED",
    -12: "FLS_ERR_NO_DEVICE",
    -13: "FLS_ERR_OUT_OF_MEMORY",
    -14: "FLS_ERR_CUDA",
    -15: "FLS_ERR_IO",
    -16: "FLS_ERR_FORMAT",
    -17: "FLS_ERR_INTERNAL",
}

DTYPE_F32, DTYPE_F16, DTYPE_BF16 = 0, 1, 2
ENGINE_CPU, ENGINE_CUDA = 0, 1
SIMD_AUTO, SIMD_PORTABLE, SIMD_AVX2, SIMD_AVX512, SIMD_AMX = 0, 1, 2, 3, 4
METHOD_FUSED, METHOD_UNFUSED_GUMBEL, METHOD_UNFUSED_MULTINOMIAL, METHOD_GROUPED = 0, 1, 2, 3
NOISE_PER_TOKEN, NOISE_MIN_FIRST = 0, 1
GROUP_SIZE_DEFAULT = 128

# C enums are int-sized on every ABI this library builds for.
c_enum = c_int


# ---- structs -----------------------------------------------------------------------------------


class fls_context_config(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("engine", c_enum),
        ("threads", c_int),
        ("simd", c_enum),
        ("tile_v", c_int64),
        ("device", c_int),
        ("stream", c_void_p),
        ("workspace_bytes", c_size_t),
        # ---- since 0.2 ----
        ("async_", c_int),  # `async` in C (a Python keyword)
    ]


class fls_matrix(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("dtype", c_enum),
        ("rows", c_int64),
        ("cols", c_int64),
        ("ld", c_int64),
    ]


class fls_params(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("method", c_enum),
        ("temperature", POINTER(c_float)),
        ("temperature_value", c_float),
        ("row_seeds", POINTER(c_uint64)),
        ("seed", c_uint64),
        ("row_offsets", POINTER(c_uint64)),
        ("offset", c_uint64),
        ("draws", c_int64),
        ("first_draw", c_int64),
        ("top_k", c_int64),
        ("top_p", c_float),
        ("min_p", c_float),
        ("without_replacement_k", c_int64),
        # ---- since 0.2 ----
        ("row_top_k", POINTER(c_int64)),
        ("row_top_p", POINTER(c_float)),
        ("row_min_p", POINTER(c_float)),
        ("row_without_replacement_k", POINTER(c_int64)),
        ("filter", c_char_p),
        ("filter_value", c_double),
        ("row_filter_value", POINTER(c_double)),
        ("group_size", c_int64),
        ("params_on_device", c_int),
        # ---- since 0.3 ----
        ("noise", c_enum),
        # ---- since 0.4 (masks, bias and penalties; docs/RULES.md) ----
        ("allowed_bitmask", POINTER(ctypes.c_int32)),
        ("bitmask_ld", c_int64),
        ("bitmask_rows", POINTER(ctypes.c_uint8)),
        ("logit_bias_ids", POINTER(c_int64)),
        ("logit_bias_values", POINTER(c_float)),
        ("logit_bias_k", c_int64),
        ("seen_ids", POINTER(c_int64)),
        ("seen_counts", POINTER(ctypes.c_int32)),
        ("seen_k", c_int64),
        ("repetition_penalty", c_float),
        ("presence_penalty", c_float),
        ("frequency_penalty", c_float),
        ("row_repetition_penalty", POINTER(c_float)),
        ("row_presence_penalty", POINTER(c_float)),
        ("row_frequency_penalty", POINTER(c_float)),
    ]


class fls_outputs(Structure):
    _fields_ = [
        ("tokens", c_void_p),  # int64_t *
        ("logsumexp", c_void_p),  # float *
        ("logprobs", c_void_p),  # float *
    ]


class fls_counters(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("calls", c_uint64),
        ("rows", c_uint64),
        ("second_pass_rows", c_uint64),
    ]


# ---- loading -----------------------------------------------------------------------------------

_HERE = os.path.dirname(os.path.abspath(__file__))
LIB_ENV = "FLASHSAMPLE_LIBRARY"  # a path to libflashsample.so that overrides the packaged one


def _candidates():
    env = os.environ.get(LIB_ENV)
    if env:
        return [env]
    found = []
    libdir = os.path.join(_HERE, "_lib")
    if os.path.isdir(libdir):
        for name in sorted(os.listdir(libdir)):
            if name.startswith("libflashsample.so"):
                found.append(os.path.join(libdir, name))
    return found


def _load():
    paths = _candidates()
    if not paths:
        raise ImportError(
            "flashsample: libflashsample.so was not found in the package (%s) and %s is not set; "
            "reinstall with `python3 -m pip install ./python` from the repository root, or set %s "
            "to a built libflashsample.so" % (os.path.join(_HERE, "_lib"), LIB_ENV, LIB_ENV)
        )
    errors = []
    for p in paths:
        try:
            # RTLD_GLOBAL so that libflashsample_nccl (which links libflashsample.so.0 by soname)
            # finds this copy when it is loaded later.
            return ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL), p
        except OSError as e:  # pragma: no cover - depends on the installation
            errors.append("%s: %s" % (p, e))
    raise ImportError("flashsample: cannot load libflashsample: " + "; ".join(errors))


lib, LIB_PATH = _load()

_P = POINTER


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


fls_status_string = _fn("fls_status_string", c_char_p, c_int)
fls_dtype_size = _fn("fls_dtype_size", c_size_t, c_enum)
fls_dtype_name = _fn("fls_dtype_name", c_char_p, c_enum)
fls_context_config_default = _fn("fls_context_config_default", None, c_void_p)
fls_context_create = _fn("fls_context_create", c_int, _P(c_void_p), _P(fls_context_config))
fls_context_destroy = _fn("fls_context_destroy", None, c_void_p)
fls_context_engine = _fn("fls_context_engine", c_enum, c_void_p)
fls_context_threads = _fn("fls_context_threads", c_int, c_void_p)
fls_context_simd = _fn("fls_context_simd", c_enum, c_void_p)
fls_simd_name = _fn("fls_simd_name", c_char_p, c_enum)
fls_context_sync = _fn("fls_context_sync", c_int, c_void_p)
fls_cuda_available = _fn("fls_cuda_available", c_int)
fls_cuda_built = _fn("fls_cuda_built", c_int)
fls_device_malloc = _fn("fls_device_malloc", c_int, _P(c_void_p), c_size_t)
fls_device_free = _fn("fls_device_free", None, c_void_p)
fls_device_upload = _fn("fls_device_upload", c_int, c_void_p, c_void_p, c_size_t)
fls_device_download = _fn("fls_device_download", c_int, c_void_p, c_void_p, c_size_t)
fls_params_default = _fn("fls_params_default", None, c_void_p)
fls_row_seed = _fn("fls_row_seed", c_uint64, c_uint64, c_uint64)
fls_sample_fused = _fn(
    "fls_sample_fused",
    c_int,
    c_void_p,
    _P(fls_matrix),
    _P(fls_matrix),
    _P(fls_params),
    _P(fls_outputs),
)
fls_sample_logits = _fn(
    "fls_sample_logits", c_int, c_void_p, _P(fls_matrix), _P(fls_params), _P(fls_outputs)
)
fls_params_explain = _fn(
    "fls_params_explain", c_int, _P(fls_params), c_int64, c_int64, c_char_p, c_size_t
)
fls_stream_create = _fn(
    "fls_stream_create", c_int, _P(c_void_p), c_void_p, c_int64, c_int64, _P(fls_params)
)
fls_stream_destroy = _fn("fls_stream_destroy", None, c_void_p)
fls_stream_feed_logits = _fn("fls_stream_feed_logits", c_int, c_void_p, _P(fls_matrix), c_int64)
fls_stream_feed_fused = _fn(
    "fls_stream_feed_fused", c_int, c_void_p, _P(fls_matrix), _P(fls_matrix), c_int64
)
fls_stream_skip = _fn("fls_stream_skip", c_int, c_void_p, c_int64, c_int64, _P(c_float), _P(c_int))
fls_stream_merge = _fn("fls_stream_merge", c_int, c_void_p, c_void_p)
fls_stream_finalize = _fn("fls_stream_finalize", c_int, c_void_p, _P(fls_outputs))
fls_stream_progress = _fn(
    "fls_stream_progress",
    c_int,
    c_void_p,
    _P(c_int64),
    _P(c_int64),
    _P(c_int64),
    _P(c_int64),
)
fls_stream_serialize = _fn("fls_stream_serialize", c_int, c_void_p, c_void_p, _P(c_size_t))
fls_stream_deserialize = _fn(
    "fls_stream_deserialize", c_int, _P(c_void_p), c_void_p, c_void_p, c_size_t
)
fls_chunk_max_norms = _fn("fls_chunk_max_norms", c_int, _P(fls_matrix), c_int64, _P(c_float))
fls_logit_bound = _fn("fls_logit_bound", c_float, c_float, c_float, c_int64)
fls_counters_default = _fn("fls_counters_default", None, c_void_p)
fls_context_counters = _fn("fls_context_counters", c_int, c_void_p, _P(fls_counters))
fls_bf16_to_f32 = _fn("fls_bf16_to_f32", c_float, c_uint16)
fls_f32_to_bf16 = _fn("fls_f32_to_bf16", c_uint16, c_float)
fls_f16_to_f32 = _fn("fls_f16_to_f32", c_float, c_uint16)
fls_f32_to_f16 = _fn("fls_f32_to_f16", c_uint16, c_float)


# ---- filling the growing structs through the library -------------------------------------------

# The *_default functions write the library's sizeof: they get a buffer with room to spare, so a
# library newer than this mirror cannot write past it; the struct is then handed to the library
# with this mirror's size (the library accepts the sizes of older headers).
_SLACK = 1024


def default_struct_size(cls, default_fn):
    """The struct_size that the library's *_default function writes (its sizeof)."""
    buf = ctypes.create_string_buffer(ctypes.sizeof(cls) + _SLACK)
    default_fn(buf)
    return c_size_t.from_buffer(buf).value


def _filled(cls, default_fn):
    buf = ctypes.create_string_buffer(ctypes.sizeof(cls) + _SLACK)
    default_fn(buf)
    s = cls.from_buffer_copy(buf.raw[: ctypes.sizeof(cls)])
    s.struct_size = ctypes.sizeof(cls)
    return s


def new_config():
    return _filled(fls_context_config, fls_context_config_default)


def new_params():
    return _filled(fls_params, fls_params_default)


def new_counters():
    return _filled(fls_counters, fls_counters_default)


def check_layout():
    """Raises ImportError when the loaded library's structs are smaller than this mirror's (an
    older library: it would refuse them). A larger library size is fine (it reads our prefix)."""
    for cls, fn in (
        (fls_context_config, fls_context_config_default),
        (fls_params, fls_params_default),
        (fls_counters, fls_counters_default),
    ):
        size = default_struct_size(cls, fn)
        if size < ctypes.sizeof(cls):
            raise ImportError(
                "flashsample: %s loaded from %s is older than these bindings: sizeof(%s) is %d "
                "there, %d here"
                % (os.path.basename(LIB_PATH), LIB_PATH, cls.__name__, size, ctypes.sizeof(cls))
            )


if sys.byteorder != "little":  # pragma: no cover
    raise ImportError("flashsample: the bindings assume a little-endian machine")
check_layout()


# ---- libflashsample_nccl (optional: built with the CUDA engine where NCCL is found) -------------

NCCL_LIB_ENV = "FLASHSAMPLE_NCCL_LIBRARY"
_nccl = None


def nccl_lib():
    """The loaded libflashsample_nccl, or None when this installation has none."""
    global _nccl
    if _nccl is None:
        paths = []
        if os.environ.get(NCCL_LIB_ENV):
            paths.append(os.environ[NCCL_LIB_ENV])
        libdir = os.path.join(_HERE, "_lib")
        if os.path.isdir(libdir):
            paths += [
                os.path.join(libdir, n)
                for n in sorted(os.listdir(libdir))
                if n.startswith("libflashsample_nccl.so")
            ]
        for p in paths:
            try:
                lib_ = ctypes.CDLL(p)
            except OSError:
                continue
            f = lib_.fls_stream_allgather_nccl
            f.restype = c_int
            f.argtypes = [
                c_void_p,
                c_void_p,
                c_void_p,
                c_void_p,
                POINTER(c_void_p),
                POINTER(c_size_t),
            ]
            _nccl = lib_
            break
        else:
            _nccl = False
    return _nccl or None
