"""What the row-normalisation families (RMSNorm, fused add + RMSNorm) share: their key —
``M`` rows and rows of ``N`` (both ordinal), the activation dtype, and the weight dtype,
which is the activation's or fp32 — and how their source digest is taken.  Imports
neither torch nor a GPU runtime."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from importlib import resources

from flyconfigs.errors import InvalidKeyError
from flyconfigs.registry.declarations import KernelDecl, KeyAxis, KeyValue, normalize_key

__all__ = [
    "DTYPES",
    "ELEMENT_BYTES",
    "HIDDEN_SIZE_GRID",
    "KEY_AXES",
    "MAX_INDEX",
    "check_row_key",
    "complete_row_key",
    "pow2_ceil",
    "source_sha256",
    "source_text",
]

DTYPES = ("bf16", "fp16", "fp32")
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
MAX_INDEX = 2**31 - 1
"""The kernels take the row count as a 32-bit int."""
KEY_AXES = (
    KeyAxis("M", int, ordinal=True, minimum=1, maximum=MAX_INDEX),
    KeyAxis("N", int, ordinal=True, minimum=1, maximum=MAX_INDEX),
    KeyAxis("dtype", str, choices=DTYPES),
    KeyAxis("weight_dtype", str, choices=DTYPES),
)
_HIDDEN = "128,256,896,1024,1536,2048,2560,3072,3584,4096,5120,6144,7168,8192,12288,16384"
HIDDEN_SIZE_GRID = (
    f"M={','.join(str(1 << p) for p in range(17))} N={_HIDDEN} dtype=bf16",
    f"M=1,16,256,4096,65536 N={_HIDDEN} dtype=fp16",
    f"M=1,16,256,4096,65536 N={_HIDDEN} dtype=bf16 weight_dtype=fp32",
)
"""The hidden sizes of popular models: bf16 on every power-of-two M to 65536, and fp16
and bf16 with an fp32 weight on five M (both families' ``hidden`` preset)."""


def check_row_key(decl: KernelDecl, key: Mapping[str, object], max_n: int = MAX_INDEX) -> dict[str, KeyValue]:
    """``key`` validated against ``decl``'s axes (see :func:`~flyconfigs.registry.normalize_key`);
    the weight must be the activation dtype or fp32 and the row at most ``max_n`` long (the
    longest row the family's kernel compiles for)."""
    norm = normalize_key(decl, key)
    if norm["weight_dtype"] not in (norm["dtype"], "fp32"):
        raise InvalidKeyError(f"weight_dtype {norm['weight_dtype']!r} must equal dtype {norm['dtype']!r} or be 'fp32'")
    if int(norm["N"]) > max_n:
        raise InvalidKeyError(f"key axis 'N' of {decl.name!r} must be <= {max_n}, got {norm['N']}")
    return norm


def complete_row_key(key: Mapping[str, KeyValue]) -> dict[str, KeyValue]:
    """``key`` with ``weight_dtype`` defaulting to ``dtype``, as a grid may leave it out."""
    out = dict(key)
    if "dtype" in out and "weight_dtype" not in out:
        out["weight_dtype"] = out["dtype"]
    return out


def pow2_ceil(value: int) -> int:
    """The smallest power of two at least ``value`` (1 for ``value`` ≤ 1)."""
    return 1 << max(0, (value - 1).bit_length())


@functools.cache
def source_text(file: str) -> str:
    """A kernel source shipped in ``flyconfigs.kernels``, read once: every compile
    request refers to this one string.  The tuner keeps each request it queued for a
    whole run, so a copy per request (20 kB each) held hundreds of MB for a large grid."""
    return resources.files("flyconfigs.kernels").joinpath(file).read_text(encoding="utf-8")


def source_sha256(file: str) -> str:
    """sha256 of :func:`source_text`, recorded in every artifact."""
    return hashlib.sha256(source_text(file).encode("utf-8")).hexdigest()
