"""flashsample: exact Gumbel-max sampling fused into the LM-head matmul (Python bindings).

The bindings are ctypes over libflashsample's public C API (lib/include/flashsample.h), shipped inside
this package. Quick start::

    import numpy as np, flashsample as fs
    L = np.random.randn(4, 1000).astype(np.float32)
    s = fs.sample_logits(L, temperature=0.7, seed=3, draws=5)      # s.tokens: int64 (4, 5)
    with fs.Context(threads=2) as ctx:
        s = ctx.sample_fused(W, H, top_p=0.9, return_logprobs=True)

    r = fs.audit_tokens(L, my_tokens, temperature=0.7)  # any sampler's tokens: r.passed, r.rows

See python/README.md for every parameter, the CUDA engine, the streaming API and the audit.
"""

from ._audit import AuditResult, AuditRow, FlashSampleAuditError, audit_tokens
from ._capi import GROUP_SIZE_DEFAULT, HEADER_VERSION
from ._core import (
    METHODS,
    NOISES,
    PARAM_NAMES,
    Context,
    Counters,
    DeviceArray,
    Progress,
    Sample,
    Stream,
    chunk_max_norms,
    cuda_available,
    cuda_built,
    default_context,
    from_bf16,
    library_path,
    logit_bound,
    nccl_available,
    row_seed,
    sample_fused,
    sample_logits,
    status_string,
    to_bf16,
    version,
)
from ._errors import (
    FlashSampleError,
    FlashSampleTypeError,
    FlashSampleValueError,
    status_name,
)

__version__ = "0.4.0"

__all__ = [
    "AuditResult",
    "AuditRow",
    "Context",
    "Counters",
    "DeviceArray",
    "FlashSampleAuditError",
    "FlashSampleError",
    "FlashSampleTypeError",
    "FlashSampleValueError",
    "GROUP_SIZE_DEFAULT",
    "HEADER_VERSION",
    "METHODS",
    "NOISES",
    "PARAM_NAMES",
    "Progress",
    "Sample",
    "Stream",
    "audit_tokens",
    "chunk_max_norms",
    "cuda_available",
    "cuda_built",
    "default_context",
    "from_bf16",
    "library_path",
    "logit_bound",
    "nccl_available",
    "row_seed",
    "sample_fused",
    "sample_logits",
    "status_name",
    "status_string",
    "to_bf16",
    "version",
]
