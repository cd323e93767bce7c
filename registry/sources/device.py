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

from flyconfigs.errors import ArtifactError, FieldProblem, GPURuntimeMissingError, InvalidDeviceError
from flyconfigs.registry.core.entrypoints import FoundEntryPoint
from flyconfigs.registry.core.environment import Environment
from flyconfigs.registry.core.guard import Raised, guarded
from flyconfigs.registry.core.names import canonical_name
from flyconfigs.registry.core.problems import Problem, ProblemLog
from flyconfigs.registry.core.settings import DETECTOR_ENV, DEVICE_ENV, NO_DETECT_ENV, Settings, read_settings
from flyconfigs.registry.sources.packages import find_packages
from flyconfigs.schema.models import DeviceIdentity, wave_size_of_arch

__all__ = [
    "DETECTOR_ENV",
    "DEVICE_ARGUMENT",
    "DEVICE_ENV",
    "DeviceQuery",
    "as_query",
    "chosen_detector",
    "Detector",
    "detect_with",
    "device_from_env",
    "memo_token",
    "installed_detector",
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
DETECTOR_GROUP = "flyconfigs.detectors"
OWN_DISTRIBUTION = "flyconfigs"


def detect_with(detector: Detector | None, problems: ProblemLog | None = None,
                settings: Settings | None = None) -> tuple[DeviceQuery | None, str]:
    """The current GPU as ``detector`` reports it, or ``None`` and the reason it is
    unknown; whatever the detector raises (a missing runtime, an odd property, a driver
    error) means unknown, never an exception.

    When the detector says no GPU runtime is installed at all
    (:class:`~flyconfigs.errors.GPURuntimeMissingError`), every call will get the
    default heuristic.  With ``problems`` (the resolver's, which detects once until
    :meth:`~flyconfigs.registry.Resolver.refresh`) that is logged at WARNING, and the
    reason returned says what to install: the extra the installed data packages'
    targets call for (``gfx…``: ``flyconfigs[hip]``, ``sm…``: ``flyconfigs[cuda]``), or
    the vendor's runtime when the bindings are there.  It is not a
    :class:`~flyconfigs.registry.core.problems.Problem`: nothing installed is at fault, and
    ``doctor`` shows it as its warning that no device is known."""
    if (settings if settings is not None else read_settings()).no_gpu_detect:
        return None, f"GPU detection disabled by {NO_DETECT_ENV}"
    if detector is None:
        return None, "no GPU detector is installed"

    def detect() -> tuple[DeviceQuery | None, str]:
        identity = detector()
        return DeviceQuery.of(identity), f"detected {identity.describe()}"

    detected = guarded(detect)  # a serving call must not fail on detection
    if not isinstance(detected, Raised):
        return detected
    exc = detected.exc
    if isinstance(exc, GPURuntimeMissingError) and problems is not None:
        advice = _runtime_advice(exc, problems)
        logger.warning("the GPU is not detected and every call gets the default heuristic: %s", advice)
        return None, advice
    first = str(exc).splitlines()[0] if str(exc) else ""
    return None, f"no GPU detected ({type(exc).__name__}: {first})"


def _runtime_advice(exc: GPURuntimeMissingError, problems: ProblemLog) -> str:
    """What to install so that the GPU is detected."""
    wanted = {"hip" if ref.target.startswith("gfx") else "cuda" for ref in find_packages(problems=problems)}
    missing = [extra for extra in ("hip", "cuda") if extra in exc.extras and (extra in wanted or not wanted)]
    if missing:
        installs = " or ".join(f"pip install 'flyconfigs[{extra}]'" for extra in missing)
        return f"no GPU runtime is installed; {installs} brings it (with {_VENDOR_RUNTIME[missing[0]]})"
    vendors = " or ".join(_VENDOR_RUNTIME[extra] for extra in sorted(wanted or {"hip", "cuda"}))
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"no GPU runtime is installed; install {vendors} ({first})"


_VENDOR_RUNTIME = {"hip": "ROCm", "cuda": "the NVIDIA driver"}


def chosen_detector(problems: ProblemLog, environment: Environment | None = None) -> FoundEntryPoint | None:
    """The entry point of group ``flyconfigs.detectors`` that detects the GPU, without
    loading it: the one of the distribution ``FLYCONFIGS_DETECTOR`` names, else
    flyconfigs' own.  Any other distribution's detector is never used unless chosen so,
    and is reported (``detector-collision``, which ``flyconfigs doctor`` shows); a choice
    naming a distribution that declares no detector is reported (``detector-choice``)
    and flyconfigs' own is used."""
    env = environment if environment is not None else Environment()
    found = env.entry_points(DETECTOR_GROUP, problems)
    choice = env.settings.detector.strip()
    own = [f for f in found if canonical_name(f.distribution) == OWN_DISTRIBUTION]
    chosen = [f for f in found if choice and canonical_name(f.distribution) == canonical_name(choice)]
    if choice and not chosen:
        declared = ", ".join(sorted({f.distribution for f in found})) or "none"
        problems.report(Problem("detector-choice", DETECTOR_ENV, f"{DETECTOR_ENV}={choice!r} names no distribution "
                                f"declaring a GPU detector (declared by: {declared}); flyconfigs' own is used"))
    winner = (chosen or own)[0] if chosen or own else None
    for other in found:
        if other is not winner and other not in own:
            problems.report(Problem(
                "detector-collision", f"{other.distribution} {other.version}",
                f"declares a GPU detector ({other.entry_point.value}); not used: "
                f"{winner.distribution if winner else 'no detector'} detects the GPU "
                f"(set {DETECTOR_ENV}={other.distribution} to use this one)", other.distribution))
    return winner


def installed_detector(problems: ProblemLog | None = None, environment: Environment | None = None) -> Detector | None:
    """The detector :func:`chosen_detector` picks, loaded; ``None`` when there is none or
    it cannot be loaded (logged)."""
    found = chosen_detector(problems if problems is not None else ProblemLog(), environment)
    if found is None:
        return None
    loaded = guarded(found.entry_point.load)  # an unloadable detector means no detection
    if isinstance(loaded, Raised):
        logger.warning("GPU detector %s of %s cannot be loaded: %s", found.entry_point.value, found.distribution,
                       loaded.exc)
        return None
    detector: Detector = loaded
    return detector


def device_from_env(problems: ProblemLog, settings: Settings | None = None) -> tuple[DeviceQuery | None, str] | None:
    """The device ``FLYCONFIGS_DEVICE`` names (in ``settings``, default: as set now) and
    how it was found, ``None`` when it is not set; an invalid one is reported
    (``bad-device``) and no device is known."""
    spec = (settings if settings is not None else read_settings()).device
    if not spec:
        return None
    try:
        return parse_device_spec(spec, DEVICE_ENV), f"from {DEVICE_ENV}"
    except ArtifactError as exc:
        problems.report(Problem("bad-device", DEVICE_ENV, "; ".join(map(str, exc.problems))))
        return None, f"{DEVICE_ENV} is invalid ({exc.problems[0]})"


def memo_token(device: object) -> object:
    """``device`` as a hashable memo token that equals another exactly when both resolve
    alike: an identity (a pydantic model holding a list, so unhashable) becomes the query
    resolution makes of it, a query's features a tuple; a spec string stays itself."""
    if isinstance(device, DeviceIdentity):
        return DeviceQuery.of(device)
    if isinstance(device, DeviceQuery) and isinstance(device.features, list):
        return replace(device, features=tuple(device.features))
    return device
