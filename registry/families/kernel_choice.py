"""Which distribution's declaration a kernel name means when several declare it:
``FLYCONFIGS_KERNELS`` chooses on purpose, else the only one, else flyconfigs' own."""

from __future__ import annotations

from flyconfigs.errors import AmbiguousKernelError
from flyconfigs.registry.core.entrypoints import FoundEntryPoint
from flyconfigs.registry.core.names import canonical_name
from flyconfigs.registry.core.problems import Problem, ProblemLog
from flyconfigs.registry.core.settings import KERNEL_OWNERS_ENV, Settings, read_settings

__all__ = ["KERNEL_OWNERS_ENV", "OWN_DISTRIBUTION", "choose", "unknown_choices"]

OWN_DISTRIBUTION = "flyconfigs"


def _owners(log: ProblemLog, settings: Settings) -> dict[str, str]:
    owners = {}
    for item in settings.kernels.split(","):
        name, sep, dist = item.partition("=")
        if sep and name.strip() and dist.strip():
            owners[name.strip()] = dist.strip()
        elif item.strip():
            log.report(Problem("bad-setting", KERNEL_OWNERS_ENV, f"item {item.strip()!r} is not NAME=DISTRIBUTION; "
                                                                 f"ignored"))
    return owners


def choose(kernel: str, found: list[FoundEntryPoint], log: ProblemLog,
           settings: Settings | None = None) -> FoundEntryPoint:
    """The one declaration ``kernel`` means: the distribution ``FLYCONFIGS_KERNELS``
    names, else the only one, else flyconfigs' own; the shadowed ones are reported and
    never loaded.  A choice naming a distribution that declares no such kernel is
    reported and ignored; several third-party declarations and no choice is an error."""
    owner = _owners(log, settings if settings is not None else read_settings()).get(kernel)
    chosen = [f for f in found if owner is not None and canonical_name(f.distribution) == canonical_name(owner)]
    if owner is not None and not chosen:
        log.report(Problem("bad-setting", KERNEL_OWNERS_ENV,
                           f"says kernel {kernel!r} comes from {owner!r}, which declares no such kernel; ignored"))
    if chosen:
        winner = chosen[0]
    elif len(found) == 1:
        return found[0]
    else:
        own = [f for f in found if canonical_name(f.distribution) == OWN_DISTRIBUTION]
        if not own:
            names = ", ".join(sorted(f"{f.distribution} {f.version}" for f in found))
            raise AmbiguousKernelError(
                f"kernel {kernel!r} is declared by several distributions ({names}); choose one with "
                f"{KERNEL_OWNERS_ENV}={kernel}=DISTRIBUTION")
        winner = own[0]
    for other in found:
        if other is not winner:
            log.report(Problem(
                "kernel-collision", f"{other.distribution} {other.version}",
                f"also declares kernel {kernel!r} ({other.entry_point.value}); not loaded: {winner.distribution} "
                f"owns it (set {KERNEL_OWNERS_ENV}={kernel}=DISTRIBUTION to choose)", other.distribution))
    return winner


def unknown_choices(declared: set[str], log: ProblemLog, settings: Settings | None = None) -> list[str]:
    """The kernels ``FLYCONFIGS_KERNELS`` chooses a distribution for that no distribution
    (nor this process) declares, each reported (``bad-setting``): such a choice is never
    consulted, so a misspelt name would otherwise go unseen."""
    unknown = [name for name in _owners(log, settings if settings is not None else read_settings()) if name not in declared]
    for name in unknown:
        log.report(Problem("bad-setting", KERNEL_OWNERS_ENV, f"chooses a distribution for kernel {name!r}, which "
                                                             f"nothing installed declares; ignored"))
    return unknown
