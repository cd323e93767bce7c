"""What the registry needs to know about a kernel: its key axes and its default.

A kernel family publishes a :class:`KernelDecl` (its name, family version, key axes with
which ones are ordinal, and a default heuristic) through the entry-point group
``flyconfigs.kernels``, or registers one in-process with :func:`register_kernel`.  The
registry never imports a kernel library except through that group.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Protocol, Union, runtime_checkable

from flyconfigs.errors import InvalidKeyError, UnknownKernelError

if TYPE_CHECKING:
    from flyconfigs.registry.device import DeviceQuery

__all__ = [
    "KERNEL_GROUP",
    "KernelDecl",
    "KeyAxis",
    "KeyValue",
    "kernel_declaration",
    "normalize_key",
    "register_kernel",
    "unregister_kernel",
]

KERNEL_GROUP = "flyconfigs.kernels"
KeyValue = Union[int, str]
_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+:-]{0,63}$")


@dataclass(frozen=True)
class KeyAxis:
    """One axis of a kernel's key.

    ``ordinal`` axes (sizes such as ``M``) may be served by the nearest tuned value;
    exact axes (``dtype``) never are.  ``choices`` restricts a string axis.
    """

    name: str
    kind: type[int] | type[str]
    ordinal: bool = False
    choices: tuple[str, ...] | None = None
    minimum: int | None = None


@runtime_checkable
class KernelDecl(Protocol):
    """The registry's view of a kernel family."""

    name: str
    version: int
    key_axes: tuple[KeyAxis, ...]

    def default_config(self, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> dict[str, KeyValue]:
        """The heuristic config for ``key`` on ``device`` (``None`` when unknown)."""
        ...


_REGISTERED: dict[str, KernelDecl] = {}
_LOADED: dict[str, KernelDecl] = {}


def register_kernel(decl: KernelDecl) -> KernelDecl:
    """Declare ``decl`` in this process; it shadows an entry point of the same name."""
    _REGISTERED[decl.name] = decl
    return decl


def unregister_kernel(name: str) -> None:
    """Forget an in-process declaration (tests use this)."""
    _REGISTERED.pop(name, None)


def kernel_declaration(kernel: str | KernelDecl) -> KernelDecl:
    """The declaration of ``kernel`` (a name, or a declaration returned as is).

    Raises :class:`UnknownKernelError` naming the kernels that are declared.
    """
    if not isinstance(kernel, str):
        return kernel
    found = _REGISTERED.get(kernel) or _LOADED.get(kernel)
    if found is not None:
        return found
    for ep in metadata.entry_points(group=KERNEL_GROUP):
        if ep.name == kernel:
            decl = ep.load()
            if not isinstance(decl, KernelDecl):
                raise UnknownKernelError(f"entry point {ep.value!r} for kernel {kernel!r} is not a KernelDecl")
            _LOADED[kernel] = decl
            return decl
    known = sorted({*_REGISTERED, *(ep.name for ep in metadata.entry_points(group=KERNEL_GROUP))})
    raise UnknownKernelError(f"unknown kernel {kernel!r}; declared kernels: {', '.join(known) or 'none'}")


def normalize_key(decl: KernelDecl, key: Mapping[str, object]) -> dict[str, KeyValue]:
    """``key`` checked against ``decl``'s axes, in the declared axis order.

    Raises :class:`InvalidKeyError` naming the axis and the bad value.
    """
    names = [a.name for a in decl.key_axes]
    missing = [n for n in names if n not in key]
    extra = [k for k in key if k not in names]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if extra:
            parts.append(f"unknown {', '.join(map(str, extra))}")
        raise InvalidKeyError(f"key for {decl.name!r}: {'; '.join(parts)} (axes: {', '.join(names)})")
    out: dict[str, KeyValue] = {}
    for axis in decl.key_axes:
        value = key[axis.name]
        if axis.kind is int:
            if type(value) is not int:
                raise InvalidKeyError(f"key axis {axis.name!r} of {decl.name!r} must be an int, got {value!r}")
            if axis.minimum is not None and value < axis.minimum:
                raise InvalidKeyError(f"key axis {axis.name!r} of {decl.name!r} must be >= {axis.minimum}, got {value}")
        else:
            if not isinstance(value, str) or not _TOKEN.match(value):
                raise InvalidKeyError(f"key axis {axis.name!r} of {decl.name!r} must be a name, got {value!r}")
            if axis.choices is not None and value not in axis.choices:
                raise InvalidKeyError(
                    f"key axis {axis.name!r} of {decl.name!r} must be one of {', '.join(axis.choices)}, got {value!r}"
                )
        out[axis.name] = value
    return out
