"""Who owns a kernel family, and how a source ranks for it.

A family's **owner** is the distribution whose declaration of it is loaded (through the
entry-point group ``flyconfigs.kernels``; ``None`` for one registered in this process).
Its **packages** are the owner's own distribution, when it also ships artifacts, and the
data packages its declaration names in :attr:`~flyconfigs.registry.KernelDecl.data_packages`.
Ranking a source for a family (:func:`standing_for`) is the precedence rule of
:mod:`flyconfigs.registry.resolve` in code: nothing but the user's settings and the
family's declaration moves a source, never a name sorted or a label a package wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from flyconfigs.registry.core.names import canonical_name

__all__ = ["OFFICIAL_PREFIX", "TIERS", "Owner", "Standing", "is_official", "owner_of"]

Standing = Literal["override", "chosen", "owner", "official", "third-party"]
"""Why a source ranks where it does for a family: an override directory
(``FLYCONFIGS_PATH``), a package the user ranks in ``FLYCONFIGS_PACKAGES``, a package
of the family's owner, an official ``flyconfigs-<target>`` package, or any other."""
TIERS: dict[Standing, int] = {"override": 0, "chosen": 1, "owner": 2, "official": 3, "third-party": 4}
"""Each standing's tier: a lower tier always wins a collision and a search step."""
OFFICIAL_PREFIX = "flyconfigs-"


def is_official(distribution: str, target: str) -> bool:
    """Whether ``distribution`` is the official data package of ``target``."""
    return canonical_name(distribution) == canonical_name(f"{OFFICIAL_PREFIX}{target}")


@dataclass(frozen=True)
class Owner:
    """A kernel family's owner: its declaring distribution (normalized; ``None`` when
    the family is declared in this process) and the data packages it names (normalized)."""

    kernel: str
    distribution: str | None = None
    packages: frozenset[str] = frozenset()

    def claims(self, distribution: str) -> bool:
        """Whether ``distribution`` is one of the owner's packages."""
        name = canonical_name(distribution)
        return name == self.distribution or name in self.packages

    def describe(self) -> str:
        """``acme-kernels`` (and the packages it names), or ``this process``."""
        who = self.distribution or "this process"
        return who + (f" (with {', '.join(sorted(self.packages))})" if self.packages else "")


class _Declared(Protocol):
    """What ownership reads of a family (:class:`~flyconfigs.registry.families.family.Family`)."""

    @property
    def distribution(self) -> str | None: ...

    @property
    def data_packages(self) -> frozenset[str]: ...


def owner_of(family: _Declared | None, kernel: str) -> Owner:
    """The owner of ``kernel`` whose family is ``family`` (``None`` when this environment
    declares no such kernel: no package is its owner's).  A ``data_packages`` that raises
    or is not a collection of names is reported once, by the family, and names no package."""
    if family is None:
        return Owner(kernel)
    dist = family.distribution
    return Owner(kernel, canonical_name(dist) if dist else None, family.data_packages)
