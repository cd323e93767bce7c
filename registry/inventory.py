"""What ``explain``, ``list`` and ``doctor`` read of a resolver besides a resolution: its
sources and packages, every entry and table, every collision between sources (with the
winner the search serves for its slot) and every problem of every artifact.
:class:`Inventory` is the part of :class:`~flyconfigs.registry.resolve.Resolver` that
answers them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from flyconfigs.errors import FlyconfigsError
from flyconfigs.registry.checks.check import check_table, check_winner
from flyconfigs.registry.core.problems import Problem, ProblemLog
from flyconfigs.registry.core.settings import PATH_ENV
from flyconfigs.registry.detecting import chosen_detector
from flyconfigs.registry.families.family import Family
from flyconfigs.registry.families.loaded import KernelRecords, LoadedKernel
from flyconfigs.registry.search.catalog import Catalog, ranked_entries
from flyconfigs.registry.search.collisions import find_collisions
from flyconfigs.registry.search.records import Collision, Resolution
from flyconfigs.registry.sources.entries import Entry, PackageInfo, Source
from flyconfigs.registry.sources.ownership import Owner, owner_of
from flyconfigs.schema.canonical import key_texts
from flyconfigs.schema.models import DeviceIdentity

if TYPE_CHECKING:
    from flyconfigs.registry.families.contract import KernelDecl
    from flyconfigs.registry.sources.tables import TableRef

__all__ = ["Inventory", "skipped_overrides"]


class Inventory:
    """What a resolver knows of its sources, beyond one resolution; mixed into
    :class:`~flyconfigs.registry.resolve.Resolver`, which gives the attributes below."""

    _catalog: Catalog
    _detector_installed: bool
    kernels: KernelRecords
    problems: ProblemLog

    if TYPE_CHECKING:
        def family(self, record: LoadedKernel) -> Family: ...

        def serving(self, kernel: str | KernelDecl, key: Mapping[str, object], device: DeviceIdentity) -> Resolution: ...

    def sources_for(self, arch: str) -> list[Source]:
        """The sources that can serve ``arch``, in precedence order."""
        return self._catalog.sources_for(arch)

    def packages(self) -> list[PackageInfo]:
        """Installed data packages whose manifests are readable, in precedence order
        (reads every manifest)."""
        return self._catalog.packages()

    def all_entries(self, tables: bool = True) -> Iterator[Entry]:
        """Every entry of every source (the tables' rows too unless ``tables`` is
        false), each ranked for its kernel's owner, in precedence order (reads every
        manifest)."""
        yield from self._catalog.all_entries(self._owner, tables)

    def ranked(self, entries: list[Entry]) -> list[Entry]:
        """``entries`` each ranked for its kernel's owner, in precedence order."""
        return ranked_entries(entries, self._owner)

    def all_tables(self) -> list[TableRef]:
        """Every table of every source, rows not read (reads every manifest)."""
        return self._catalog.all_tables()

    def _owner(self, kernel: str) -> Owner:
        try:
            record: LoadedKernel | None = self.kernels.record(kernel, self.problems)
        except FlyconfigsError:  # a kernel this environment does not declare has no owner
            record = None
        return owner_of(None if record is None else self.family(record), kernel)

    def collisions(self) -> list[Collision]:
        """Every collision between sources, each also logged once, its winner the
        artifact the search serves at that slot's key on that slot's device.  A table's
        rows are told apart by their keys' canonical texts, a column at a time: only the
        rows whose slot something else claims too become entries."""

        def served(entry: Entry) -> Resolution | None:
            try:
                return self.serving(entry.kernel, entry.key, entry.device)
            except FlyconfigsError:  # an undeclared kernel, or a key its family refuses: nothing serves it
                return None

        plain = list(self.all_entries(tables=False))
        claims = Counter(entry.slot() for entry in plain)
        rows: list[tuple[tuple[object, ...], TableRef, int]] = []
        for ref in self.all_tables():
            table = ref.read(self.problems)
            if table is None:
                continue
            layer = table.device.identity.layers()[0]
            for index, text in enumerate(key_texts(table.columns.key, table.rows)):
                slot = (table.kernel.name, layer, text)
                claims[slot] += 1
                rows.append((slot, ref, index))
        shared = [ref.row_entry(index) for slot, ref, index in rows if claims[slot] > 1]
        return find_collisions([*plain, *self.ranked(list(shared))], self.problems, served)

    def check_all(self) -> list[Problem]:
        """Load every artifact, check each winner with its kernel's declaration (when this
        environment declares the kernel), each table a column at a time
        (:func:`~flyconfigs.registry.checks.check.check_table`), and find every collision, as
        doctor does; every problem seen so far.  A resolver with the installed detector
        also reports detectors of other distributions competing with flyconfigs' own."""
        if self._detector_installed:
            chosen_detector(self.problems, self.kernels.environment)
        for entry in self.all_entries(tables=False):
            artifact = entry.load(self.problems)
            if artifact is None:
                continue
            dist = entry.source.name if entry.source.kind == "package" else None
            check_winner(artifact, str(entry.path), self.problems, dist, self.kernels)
        for ref in self.all_tables():
            dist = ref.source.name if ref.source.kind == "package" else None
            check_table(ref, self.problems, dist, self.kernels)
        self.collisions()
        return self.problems.problems()


def skipped_overrides(entries: list[Entry], kernel: str, arch: str) -> str:
    """What ``FLYCONFIGS_PATH`` holds for ``kernel`` that cannot serve ``arch``, so that
    a folder of such files is not mistaken for an empty one."""
    other: dict[str, int] = {}
    for entry in entries:
        if entry.kernel == kernel and entry.device.arch != arch:
            other[entry.device.arch] = other.get(entry.device.arch, 0) + 1
    if not other:
        return ""
    parts = [f"{n} for {a}" + (" (made by the test backend: never served to a real device)" if a == "simulated" else "")
             for a, n in sorted(other.items())]
    return f" ({sum(other.values())} files of {PATH_ENV} skipped: {'; '.join(parts)})"
