"""Which device a resolution is for.

A :class:`DeviceQuery` is a device identity whose product, compute-unit count and
features may be unknown; an unknown part never matches anything.  The current device
comes from an explicit argument, else ``FLYCONFIGS_DEVICE``, else the detector injected
into the resolver (by default flyconfigs' GPU layer, declared in the entry-point group
``flyconfigs.detectors``; another distribution's detector there is used only when
``FLYCONFIGS_DETECTOR`` names that distribution, and otherwise reported); when none of
them knows, resolution serves the default and says why — it never guesses.

``FLYCONFIGS_DEVICE`` holds ``ARCH[:COMPUTE_UNITS[:PRODUCT[:FEATURE,FEATURE…]]]``
(``gfx942:304:AMD Instinct MI300X:sramecc+,xnack-``), a JSON device object, or
``@PATH`` of a JSON file holding one.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from flyconfigs.errors import ArtifactError, FieldProblem, InvalidDeviceError
from flyconfigs.registry.core.settings import DETECTOR_ENV, DEVICE_ENV
from flyconfigs.schema.models import DeviceIdentity, wave_size_of_arch

__all__ = [
    "DETECTOR_ENV",
    "DEVICE_ARGUMENT",
    "DEVICE_ENV",
    "DeviceQuery",
    "as_query",
    "Detector",
    "memo_token",
    "parse_device_spec",
    "vendor_of_arch",
    "wave_size_of_arch",
]

DEVICE_ARGUMENT = "the device argument"
_ARCH = re.compile(r"^(gfx[0-9]{1,2}[0-9a-f]{2}|sm[0-9]{2,3}[a-z]?|intel_gpu_[a-z0-9_]{1,40})$")
"""An arch a device spec may name: an AMD one as LLVM names it (``GFX_ARCH`` of the
schema: a decimal major, so ``gfxa42`` is none), an NVIDIA ``smNN``, or an Intel one as
oneAPI names it (``intel_gpu_bmg_g31``)."""
_COUNT = re.compile(r"^[0-9]{1,9}$")
logger = logging.getLogger("flyconfigs.registry")


def vendor_of_arch(arch: str) -> str:
    """``amd`` for ``gfx…``, ``nvidia`` for ``sm…``, ``intel`` for ``intel_gpu_…`` (oneAPI's
    device architecture names, such as ``intel_gpu_bmg_g31``); ``ValueError`` for anything
    else."""
    if not _ARCH.match(arch):
        raise ValueError(f"unknown arch {arch!r}: expected gfxNNN (AMD), smNN (NVIDIA) or intel_gpu_NAME (Intel)")
    return "amd" if arch.startswith("gfx") else "intel" if arch.startswith("intel_gpu_") else "nvidia"


@dataclass(frozen=True)
class DeviceQuery:
    """A device to resolve for; ``None`` parts are unknown."""

    vendor: str
    arch: str
    product: str | None = None
    compute_units: int | None = None
    features: tuple[str, ...] | None = None

    @classmethod
    def of(cls, identity: DeviceIdentity) -> DeviceQuery:
        """The complete query of a known device."""
        return cls(identity.vendor, identity.arch, identity.product, identity.compute_units, tuple(identity.features))

    def layers(self) -> tuple[tuple[object, ...] | None, tuple[object, ...] | None, tuple[object, ...]]:
        """Match tokens like :meth:`DeviceIdentity.layers`; ``None`` where a part is unknown."""
        exact = None
        if self.product is not None and self.compute_units is not None and self.features is not None:
            exact = (self.vendor, self.arch, self.product, self.compute_units, self.features)
        same_cus = (self.vendor, self.arch, self.compute_units) if self.compute_units is not None else None
        return exact, same_cus, (self.vendor, self.arch)

    def describe(self) -> str:
        """``sm90 'NVIDIA H200' 132 CUs``, with ``?`` for unknown parts."""
        product = repr(self.product) if self.product is not None else "?"
        cus = self.compute_units if self.compute_units is not None else "?"
        feats = f" [{' '.join(self.features)}]" if self.features else ""
        return f"{self.arch} {product} {cus} CUs{feats}"

    def __hash__(self) -> int:
        """The fields' hash, made once (every memo lookup of a call hashes its query)."""
        try:
            return self._hash  # type: ignore[attr-defined, no-any-return]
        except AttributeError:
            object.__setattr__(self, "_hash", hash((self.vendor, self.arch, self.product, self.compute_units,
                                                    self.features)))
            return self._hash  # type: ignore[attr-defined, no-any-return]

    def __getstate__(self) -> dict[str, object]:
        """The fields, without the hash (a string's hash differs between processes)."""
        return {name: value for name, value in self.__dict__.items() if name != "_hash"}


def as_query(device: DeviceIdentity | DeviceQuery | str, where: str = DEVICE_ARGUMENT) -> DeviceQuery:
    """A query from an identity, a query, or a ``FLYCONFIGS_DEVICE``-style string;
    :class:`InvalidDeviceError` naming ``where`` for anything else."""
    if isinstance(device, DeviceQuery):
        # Features given as a list would make the query's match tokens unhashable.
        return replace(device, features=tuple(device.features)) if isinstance(device.features, list) else device
    if isinstance(device, DeviceIdentity):
        return DeviceQuery.of(device)
    if isinstance(device, str):
        return parse_device_spec(device, where)
    raise InvalidDeviceError(
        where, [FieldProblem("", f"expected a Device, DeviceQuery or spec string, got {type(device).__name__}")]
    )


def _from_json(data: Any, where: str) -> DeviceQuery:
    if not isinstance(data, dict):
        raise InvalidDeviceError(where, [FieldProblem("", "a device must be a JSON object")])
    fields = {k: data[k] for k in ("vendor", "arch", "product", "compute_units", "features") if k in data}
    try:
        return DeviceQuery.of(DeviceIdentity.model_validate(fields))
    except ValidationError as exc:
        from flyconfigs.schema.load import validation_problems

        raise InvalidDeviceError(where, validation_problems(exc, fields)) from None


def parse_device_spec(spec: str, where: str = DEVICE_ENV) -> DeviceQuery:
    """Parse a ``FLYCONFIGS_DEVICE``-style value (``ARCH[:CUS[:PRODUCT[:FEATURES]]]``,
    JSON, ``@file`` or a catalog product's name); :class:`InvalidDeviceError` names
    ``where`` (or the ``@file``) and the bad part.  JSON goes through the artifact
    reader's limits (size, depth, a regular file only)."""
    from flyconfigs.schema.jsonio import parse_document, read_document

    text = spec.strip()
    try:
        if text.startswith("@"):
            return _from_json(read_document(text[1:]), text[1:])
        if text.startswith("{"):
            return _from_json(parse_document(text.encode("utf-8", "surrogateescape"), where), where)
    except InvalidDeviceError:
        raise
    except ArtifactError as exc:
        raise InvalidDeviceError(exc.file, exc.problems) from None
    parts = text.split(":", 3)
    arch = parts[0]
    try:
        vendor = vendor_of_arch(arch)
    except ValueError as exc:
        # Not an arch: a product name of the catalog (read only for such a spec).
        from flyconfigs.registry.core.products import find_product, product_catalog

        known = find_product(text) if ":" not in text else None
        if known is not None:
            return DeviceQuery.of(known.device.identity)
        names = ", ".join(p.device.product for p in product_catalog().products)
        raise InvalidDeviceError(where, [FieldProblem("arch", f"{exc}, or a product name ({names})")]) from None
    cus = None
    if len(parts) > 1 and parts[1]:
        if not _COUNT.match(parts[1]) or int(parts[1]) < 1:
            raise InvalidDeviceError(
                where, [FieldProblem("compute_units", f"expected a positive int of ASCII digits, got {parts[1]!r}")]
            )
        cus = int(parts[1])
    product = parts[2] if len(parts) > 2 and parts[2] else None
    features = tuple(sorted(f for f in parts[3].split(",") if f)) if len(parts) > 3 else (() if product else None)
    return DeviceQuery(vendor, arch, product, cus, features)


Detector = Callable[[], DeviceIdentity]
"""Returns the identity of the current GPU, or raises when there is none."""
def memo_token(device: object) -> object:
    """``device`` as a hashable memo token that equals another exactly when both resolve
    alike: an identity (a pydantic model holding a list, so unhashable) becomes the query
    resolution makes of it, a query's features a tuple; a spec string stays itself."""
    if isinstance(device, DeviceIdentity):
        return DeviceQuery.of(device)
    if isinstance(device, DeviceQuery) and isinstance(device.features, list):
        return replace(device, features=tuple(device.features))
    return device
