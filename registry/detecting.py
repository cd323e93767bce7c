"""Which device a resolve is for when the caller names none (:class:`Detecting`, mixed
into :class:`~flyconfigs.registry.resolve.Resolver`): ``FLYCONFIGS_DEVICE``, else the
detector given or installed (the ``flyconfigs.detectors`` entry points), asked once per
refresh."""

from __future__ import annotations

import logging
import threading
from typing import Any

from flyconfigs.errors import ArtifactError, GPURuntimeMissingError
from flyconfigs.registry.core.entrypoints import FoundEntryPoint
from flyconfigs.registry.core.environment import Environment
from flyconfigs.registry.core.guard import Raised, guarded
from flyconfigs.registry.core.names import canonical_name
from flyconfigs.registry.core.problems import Problem, ProblemLog
from flyconfigs.registry.core.settings import DETECTOR_ENV, DEVICE_ENV, NO_DETECT_ENV, Settings, read_settings
from flyconfigs.registry.families.loaded import KernelRecords
from flyconfigs.registry.sources.device import Detector, DeviceQuery, as_query, parse_device_spec
from flyconfigs.registry.sources.packages import find_packages

__all__ = ["DETECTOR_GROUP", "UNSET", "Detecting", "chosen_detector", "detect_with", "device_from_env",
           "installed_detector"]

logger = logging.getLogger("flyconfigs.registry")

UNSET: Any = object()
"""A detector not given: the installed one is looked up when first needed."""


class Detecting:
    """The device of a resolver's calls, from the lock, records and log it gives."""

    _lock: threading.RLock
    _detector: Any
    _device: tuple[DeviceQuery | None, str] | None
    kernels: KernelRecords
    problems: ProblemLog

    def current_device(self) -> tuple[DeviceQuery | None, str]:
        """The device resolve uses when none is given, and how it was found."""
        return self._device_query(None)

    def _device_query(self, device: object) -> tuple[DeviceQuery | None, str]:
        if device is not None:
            return as_query(device), "given by the caller"  # type: ignore[arg-type]
        with self._lock:
            if self._device is None:
                self._device = self._detect()
            return self._device

    def _detect(self) -> tuple[DeviceQuery | None, str]:
        environment = self.kernels.environment
        from_env = device_from_env(self.problems, environment.settings)
        if from_env is not None:
            return from_env
        if self._detector is UNSET:
            self._detector = installed_detector(self.problems, environment)
        return detect_with(self._detector, self.problems, environment.settings)


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
