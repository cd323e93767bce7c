"""The catalog of sources: override directories and installed data packages, read
lazily and indexed by kernel, arch and device layer, each entry ranked as its source
ranks for its kernel's owner (see :mod:`flyconfigs.registry.sources.ownership`).

Override directories are indexed from each file's tail (see
:mod:`flyconfigs.registry.sources.folders`); a data package's manifest is read only when a
device of its target is first resolved, since every row of a package belongs to its
target.  An artifact file is read in full only when a call needs it.  A table (schema
1.6, see :mod:`flyconfigs.registry.sources.tables`) joins the index when its kernel is indexed
for its arch, as one :class:`~flyconfigs.registry.sources.blocks.TableBlock` under its manifest's
device: a package's table is read when a search first weighs that device's entries, never
before, and its rows become entries only when a search matches them.  A catalog is never
refreshed: the resolver replaces it.  Its tables are built without a lock: two threads
that build one at once build the same thing, and the first stored is kept.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from flyconfigs.registry.core.collector import collector_paused
from flyconfigs.registry.core.environment import Environment
from flyconfigs.registry.core.problems import ProblemLog
from flyconfigs.registry.search.matching import Item, Pool, PoolItem, by_product
from flyconfigs.registry.search.preference import in_preference
from flyconfigs.registry.sources.blocks import TableBlock
from flyconfigs.registry.sources.entries import Entry, PackageInfo, Source
from flyconfigs.registry.sources.folders import override_directories, scan_directory
from flyconfigs.registry.sources.ownership import Owner
from flyconfigs.registry.sources.packages import LoadedPackage, PackageRef, find_packages, load_package
from flyconfigs.schema.models import DeviceIdentity

if TYPE_CHECKING:
    # Imported when a source offers a table: a catalog of artifacts alone does without the
    # table's models.
    from flyconfigs.registry.sources.tables import TableRef

__all__ = ["Catalog", "Index", "rank_entries", "ranked_entries"]


@dataclass
class Index:
    """One kernel's entries for one arch (a table's rows as one
    :class:`~flyconfigs.registry.sources.blocks.TableBlock`), each ranked for the kernel's owner,
    and by device layer token."""

    units: list[PoolItem]
    by_layer: tuple[dict[tuple[object, ...], Pool], ...] = field(default_factory=tuple)
    product_order: dict[tuple[object, ...], Pool] = field(default_factory=dict)
    """A layer's entries in the order another product tries them (:func:`by_product`),
    by layer, token and product asked: built on first use."""

    def claimants(self, layer: int, token: tuple[object, ...], entry: Entry) -> set[str]:
        """The sources whose entries of layer ``layer``'s ``token`` claim ``entry``'s
        kernel, device and key at ``entry``'s standing (``entry``'s own among them)."""
        return self.by_layer[layer].get(token, Pool()).claimants(entry)

    def pool(self, layer: int, token: tuple[object, ...], product: str | None) -> Pool:
        """The entries a search step at ``layer`` tries: the exact product's in source
        order, another layer's with the products nearest ``product`` first."""
        return self.by_layer[0].get(token, Pool()) if layer == 0 else self.for_product(layer, token, product)

    def for_product(self, layer: int, token: tuple[object, ...], product: str | None) -> Pool:
        """Layer ``layer``'s entries for ``token``, the products nearest ``product`` first."""
        slot = (layer, token, product)
        ordered = self.product_order.get(slot)
        if ordered is None:
            units = self.by_layer[layer].get(token, Pool()).units
            ordered = self.product_order.setdefault(slot, Pool(units, lambda found: by_product(found, product)))
        return ordered


class Catalog:
    """Every source a resolver reads, in precedence order, each read once.  Not
    thread-safe by itself: the resolver holds its lock around every call."""

    def __init__(self, paths: list[str] | None, problems: ProblemLog, packages: bool = True,
                 environment: Environment | None = None) -> None:
        """``environment``: the snapshot whose settings and entry points it reads
        (default: one of its own)."""
        self._environment = environment if environment is not None else Environment()
        self._paths = paths
        self._with_packages = packages
        self.problems = problems
        self._indexes: dict[tuple[Owner, str], Index] = {}
        self._overrides: list[Entry] | None = None
        self._override_tables: list[TableRef] = []
        self._scan_lock = threading.Lock()
        self._table_heads: list[tuple[str, str, DeviceIdentity, Source, str]] = []
        """Override directories' tables known by their heads (path, kernel, device,
        source), made :class:`TableRef` when a call reaches their arch."""
        self._refs: list[PackageRef] | None = None
        self._loaded: dict[str, list[LoadedPackage]] = {}
        self._tables: dict[str, list[TableRef]] = {}

    def _directories(self) -> list[Path]:
        return override_directories(os.pathsep.join(self._paths) if self._paths is not None
                                    else self._environment.settings.path)

    def override_entries(self) -> list[Entry]:
        """Every valid artifact of the override directories, in their order (the folders
        scanned once: threads that ask during the scan wait for it)."""
        if self._overrides is not None:
            return self._overrides
        with self._scan_lock:
            return self._scan_overrides()

    def _scan_overrides(self) -> list[Entry]:
        if self._overrides is None:
            entries: list[Entry] = []
            tables: list[TableRef] = []

            def on_table(path: Path, data: object, source: Source) -> None:
                from flyconfigs.registry.sources.packs import override_table

                found = override_table(path, data, source, self.problems)
                if found is not None:
                    tables.append(found)

            heads: list[tuple[str, str, DeviceIdentity, Source, str]] = []

            def on_table_head(path: str, kernel: str, device: DeviceIdentity, source: Source, form: str) -> None:
                heads.append((path, kernel, device, source, form))

            for rank, folder in enumerate(self._directories()):
                entries.extend(scan_directory(folder, rank, self.problems, on_table, on_table_head))
            self._override_tables = tables
            self._table_heads = heads
            self._overrides = entries
        return self._overrides

    def tables_for(self, arch: str) -> list[TableRef]:
        """Every table that can serve ``arch``, rows not yet read: override directories',
        then packages'."""
        found = self._tables.get(arch)
        if found is None:
            self.override_entries()
            found = [t for t in self._override_tables if t.device.arch == arch]
            heads = [head for head in self._table_heads if head[2].arch == arch]
            if heads:
                from flyconfigs.registry.sources.packs import PackRef
                from flyconfigs.registry.sources.tables import TableRef

                found.extend((PackRef if form == "pack" else TableRef)(kernel, device, path, source)
                             for path, kernel, device, source, form in heads)
                found.sort(key=lambda t: t.source.rank)  # stable: in the folders' order
            for package in self.packages_for(arch):
                if package.source is not None and (package.tables or package.packs):
                    from flyconfigs.registry.sources.packs import PackRef
                    from flyconfigs.registry.sources.tables import TableRef

                    found.extend(TableRef.of_manifest(row, package.source, package.info.location)
                                 for row in package.tables)
                    found.extend(PackRef.of_manifest(row, package.source, package.info.location)
                                 for row in package.packs)
            found = self._tables.setdefault(arch, found)
        return found

    def package_refs(self) -> list[PackageRef]:
        """The installed data packages, the ones the user ranks first (metadata only)."""
        if self._refs is None:
            self._refs = find_packages(self.problems, self._environment) if self._with_packages else []
        return self._refs

    def packages_for(self, target: str) -> list[LoadedPackage]:
        """The packages of ``target`` whose manifests are readable (read on first use)."""
        loaded = self._loaded.get(target)
        if loaded is None:
            loaded = []
            for ref in self.package_refs():
                if ref.target == target:
                    package = load_package(ref, self.problems)
                    if package is not None:
                        loaded.append(package)
            loaded = self._loaded.setdefault(target, loaded)
        return loaded

    def entries_for(self, arch: str, kernel: str | None = None, tables: bool = True) -> list[Entry]:
        """Every entry that can serve ``arch`` (``kernel``'s only, when given): override
        entries, then packages', then the rows of the tables (of ``kernel`` only, so that
        no other kernel's table is read; none when ``tables`` is false)."""
        entries = [e for e in self.override_entries() if e.device.arch == arch]
        for package in self.packages_for(arch):
            entries.extend(package.entries)
        for table in self.tables_for(arch) if tables else ():
            if kernel is None or table.kernel == kernel:
                entries.extend(table.entries(self.problems))
        return entries if kernel is None else [e for e in entries if e.kernel == kernel]

    def units_for(self, arch: str, kernel: str) -> list[PoolItem]:
        """:meth:`entries_for` of ``kernel``, each table's rows as one block (the table
        not read yet: a search reads it when a step first weighs its device's entries)."""
        units: list[PoolItem] = [e for e in self.override_entries() if e.device.arch == arch and e.kernel == kernel]
        for package in self.packages_for(arch):
            units.extend(e for e in package.entries if e.kernel == kernel)
        units.extend(TableBlock(ref, ref.source, self.problems) for ref in self.tables_for(arch) if ref.kernel == kernel)
        return units

    def index(self, owner: Owner, arch: str) -> Index:
        """``owner.kernel``'s entries for ``arch`` ranked for ``owner``, by device layer
        (built on first use; each pool put in precedence order when first searched)."""
        index = self._indexes.get((owner, arch))
        if index is None:
            with collector_paused():
                units = _for_family(self.units_for(arch, owner.kernel), owner)
                layers: tuple[dict[tuple[object, ...], Pool], ...] = ({}, {}, {})
                for unit in units:
                    for layer, token in enumerate(unit.device.layers()):
                        layers[layer].setdefault(token, Pool()).append(unit)
                index = self._indexes.setdefault((owner, arch), Index(units, layers))
        return index

    def sources_for(self, arch: str, owner: Owner | None = None) -> list[Source]:
        """The sources that can serve ``arch`` in precedence order (for ``owner``'s
        family when given)."""
        sources = {id(e.source): e.source for e in self.override_entries() if e.device.arch == arch}
        for table in self.tables_for(arch):
            sources.setdefault(id(table.source), table.source)
        for package in self.packages_for(arch):
            if package.source is not None:
                sources.setdefault(id(package.source), package.source)
        ranked = [s.for_family(owner) if owner is not None else s for s in sources.values()]
        return sorted(ranked, key=lambda s: s.rank)

    def all_tables(self) -> list[TableRef]:
        """Every table of every source (rows not read), override directories' first."""
        return [ref for target in self.all_targets() for ref in self.tables_for(target)]

    def all_targets(self) -> list[str]:
        """Every target some source has (reads metadata and override folders)."""
        targets = {ref.target for ref in self.package_refs()}
        targets.update(e.device.arch for e in self.override_entries())
        targets.update(t.device.arch for t in self._override_tables)
        targets.update(head[2].arch for head in self._table_heads)
        return sorted(targets)

    def packages(self) -> list[PackageInfo]:
        """Installed data packages whose manifests are readable, the user's ranked first
        (reads every manifest)."""
        order = [r.distribution for r in self.package_refs()]
        found = [p.info for t in self.all_targets() for p in self.packages_for(t)]
        return sorted(found, key=lambda info: order.index(info.distribution))

    def all_entries(self, owners: Callable[[str], Owner], tables: bool = True) -> list[Entry]:
        """Every entry of every source (without the tables' rows when ``tables`` is
        false), each ranked for its kernel's owner (``owners(kernel)``), in precedence
        order (reads every manifest)."""
        return ranked_entries([e for target in self.all_targets() for e in self.entries_for(target, tables=tables)],
                              owners)


def ranked_entries(entries: list[Entry], owners: Callable[[str], Owner]) -> list[Entry]:
    """``entries`` each ranked for its kernel's owner (``owners(kernel)``), in precedence
    order."""
    by_kernel: dict[str, list[Entry]] = {}
    for entry in entries:
        by_kernel.setdefault(entry.kernel, []).append(entry)
    ranked = [e for kernel, found in by_kernel.items() for e in rank_entries(found, owners(kernel))]
    return sorted(ranked, key=lambda e: e.source.rank)


def rank_entries(entries: list[Item], owner: Owner) -> list[Item]:
    """``entries`` (one kernel's) as they rank for ``owner``, in precedence order, new
    entries sharing the originals' files (each source ranked once, however many entries
    it has; the originals are never changed, so rankings for two owners never mix).
    Within one source the most recently made artifact goes first, so of two tuning runs
    of one key in one folder the newer serves (``doctor`` and ``validate`` report them)."""
    return in_preference(_for_family(entries, owner))


def _for_family(entries: list[Item], owner: Owner) -> list[Item]:
    """``entries`` as their sources rank for ``owner``, in the order given."""
    ranked: dict[int, Source] = {}
    out = []
    for entry in entries:
        base = entry.base_source()
        source = ranked.get(id(base))
        if source is None:
            source = ranked[id(base)] = base.for_family(owner)
        out.append(entry if source is entry.source else entry.ranked(source))
    return out
