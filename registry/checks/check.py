"""Checking data the way the loader reads it, eagerly: a data package folder (its
manifest and every row's file, hash, identity and target) and an artifact's winner
against its kernel's declaration.  :func:`refusal` is the one rule by which the
resolver refuses an artifact it found and ``flyconfigs validate`` and ``doctor`` judge
one; ``flyconfigs validate`` is a thin layer over this module."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from flyconfigs.errors import ArtifactError, FlyconfigsError, InvalidKeyError, KernelPluginError, UnknownKernelError
from flyconfigs.registry.checks.binding import binding_problem
from flyconfigs.registry.core.problems import Problem, ProblemKind, ProblemLog
from flyconfigs.registry.families.contract import KernelDecl, KeyValue
from flyconfigs.registry.families.family import Family
from flyconfigs.registry.families.loaded import RECORDS, KernelRecords, LoadedKernel
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.registry.sources.entries import Entry, Source
from flyconfigs.registry.sources.packages import read_package_folder
from flyconfigs.schema.jsonio import read_document
from flyconfigs.schema.models import TEST_DEVICE_PRODUCT, Artifact

if TYPE_CHECKING:
    from flyconfigs.registry.sources.tables import TableRef

__all__ = ["check_entries", "check_package_folder", "check_table", "check_winner", "refusal", "winner_refusal"]

_TEST_DOUBLE_MESSAGE = "made by the test backend; never served to a real device"


def refusal(kernel: LoadedKernel | KernelDecl | None, artifact: Artifact, key: Mapping[str, KeyValue],
            device: DeviceQuery | None) -> tuple[ProblemKind, str] | None:
    """Why the loader may not serve ``artifact``'s winner for ``key`` on ``device``, as
    a problem kind and message, or ``None`` when it may: made by a test double and the
    device is not the test device (``test-double``); tuned for another version or source
    of the kernel than the one installed (``stale-artifact``, see
    :func:`~flyconfigs.registry.checks.binding.binding_problem`); refused by the registry's check
    of its tunables or the kernel's own check (``invalid-config``, with the reason).  The
    last two are not asked when ``decl`` is ``None``, a kernel this environment does not
    declare.  ``device`` ``None`` asks about a real device of the artifact's own
    identity, as ``validate`` and ``doctor`` do."""
    if artifact.from_test_double and (device is None or device.product != TEST_DEVICE_PRODUCT):
        return "test-double", _TEST_DOUBLE_MESSAGE
    if kernel is None:
        return None
    decl = kernel.decl if isinstance(kernel, LoadedKernel) else kernel
    digest = (lambda: kernel.digest) if isinstance(kernel, LoadedKernel) else None
    stale = binding_problem(decl, artifact.kernel, artifact.selection.rule, digest)
    if stale is not None:
        return "stale-artifact", stale
    why = Family.of_declaration(decl).check_config(artifact.winner.config, key,
                       device if device is not None else DeviceQuery.of(artifact.device.identity))
    return None if why is None else ("invalid-config", why)


def check_winner(artifact: Artifact, where: str, problems: ProblemLog, distribution: str | None = None,
                 kernels: KernelRecords | None = None) -> list[str]:
    """Report what would make the loader refuse the artifact to a real device of its own
    identity, for its own key (:func:`refusal`: ``test-double``, ``stale-artifact``,
    ``invalid-config``),
    and (``kernel-name-clash``) an artifact whose key has other axes than the declared
    kernel of its name (such as a FlyDSL kernel imported under a name flyconfigs also
    declares); returns notes for what was not checked.  Which distribution's
    declaration is used is the loader's choice; another one declaring the kernel too is
    the environment's matter (``doctor`` reports it), never a problem of the artifact."""
    notes: list[str] = []
    decl: KernelDecl | None
    record: LoadedKernel | None
    try:
        record = (kernels or RECORDS).record(artifact.kernel.name)
        decl = record.decl
    except (UnknownKernelError, KernelPluginError) as exc:
        decl = record = None
        notes.append(f"winner not checked: {exc}")
    if decl is not None and not _has_axes(decl, artifact.key) and _own_key(decl, artifact.key) is None:
        how = "imported " if artifact.selection.rule == "imported" else ""
        problems.report(Problem(
            "kernel-name-clash", where,
            f"this {how}artifact names kernel {decl.name!r} but keys it by ({', '.join(sorted(artifact.key))}), "
            f"while the declared {decl.name!r} takes ({', '.join(a.name for a in decl.key_axes)}): another kernel "
            f"under the same name, never served for this one; give it a name of its own", distribution))
        decl = record = None
    refused = refusal(record, artifact, dict(artifact.key), None)
    if refused is not None and refused[0] != "invalid-config":  # a test double's, or stale: whatever the key
        problems.report(Problem(refused[0], where, refused[1], distribution))
        return notes
    if decl is not None:
        try:
            Family.of_declaration(decl, problems).check_key(artifact.key)
        except InvalidKeyError as exc:
            # A tuned key the kernel refuses is never served (the search judges it as an
            # asked key): a problem of the file, whatever its winner.
            problems.report(Problem("invalid-key", where, f"{decl.name} refuses its key {dict(artifact.key)}: {exc}",
                                    distribution))
            return notes
        except FlyconfigsError:
            pass  # the plugin's fault, reported by check_key; the winner is still checked
    if refused is not None:
        kind, why = refused
        message = f"{decl.name} refuses the winner: {why}" if decl is not None and kind == "invalid-config" else why
        problems.report(Problem(kind, where, message, distribution))
    return notes


def winner_refusal(artifact: Artifact, kernels: KernelRecords | None = None) -> str | None:
    """Why the loader would refuse ``artifact``'s winner for its own key on a device of
    its own identity (stale for the installed family, or a config the family refuses),
    or ``None``; ``None`` too for a kernel this environment does not declare.  What the
    tuner and ``publish`` ask before writing or shipping an artifact."""
    try:
        record = (kernels or RECORDS).record(artifact.kernel.name)
    except (UnknownKernelError, KernelPluginError):
        return None
    try:
        key = Family.of_declaration(record.decl).check_key(artifact.key)
    except FlyconfigsError as exc:
        if not _has_axes(record.decl, artifact.key):
            return None  # another kernel under the name: check_winner reports the clash
        return str(exc)  # the kernel's own axes, a value it refuses: never served
    refused = refusal(record, artifact, key, None)
    if refused is not None and refused[0] == "test-double":
        # Never served to a real device, but its winner must still be a config its family
        # accepts: a test double's run checks the tuner's output as a real one would.
        stale = binding_problem(record.decl, artifact.kernel, artifact.selection.rule, lambda: record.digest)
        return stale or Family.of_declaration(record.decl).check_config(artifact.winner.config, key,
                                     DeviceQuery.of(artifact.device.identity))
    return None if refused is None else refused[1]


_UNSEEN = "<unseen>"
"""A config whose tunables are not checked yet (no refusal reads so)."""


def _has_axes(decl: KernelDecl, key: Mapping[str, KeyValue]) -> bool:
    return sorted(key) == sorted(axis.name for axis in decl.key_axes)


def _own_key(decl: KernelDecl, key: Mapping[str, KeyValue]) -> dict[str, KeyValue] | None:
    """``key`` as the kernel's own ``check_key`` takes it, or ``None`` where it refuses
    it (a family may take optional axes beyond its ``key_axes``, as FlyDSL's RMSNorm
    takes ``weight_dtype_str``: such a key is the kernel's, not another kernel's)."""
    try:
        return Family.of_declaration(decl).check_key(key)
    except FlyconfigsError:
        return None


def check_package_folder(folder: Path) -> tuple[list[Problem], list[str]]:
    """Every problem the loader would meet in the data package whose manifest is in
    ``folder`` (the version rule, the manifest, each row's file, sha256, identity and
    target, each winner its kernel refuses), and notes."""
    # Here, not at the top: the resolver imports this module for refusal(), and a
    # resolve from FLYCONFIGS_PATH reads no manifest or table.
    from flyconfigs.registry.sources.packs import PackRef
    from flyconfigs.registry.sources.tables import TableRef
    from flyconfigs.schema.load import parse_manifest_report
    from flyconfigs.schema.manifest import MANIFEST_FILE

    problems = ProblemLog()
    package = read_package_folder(folder, None, Source("override", str(folder), (0, 0)), problems)
    notes: list[str] = []
    if package is not None:
        # The loader read the manifest; what of a newer minor it ignored is said here.
        manifest_path = folder / MANIFEST_FILE
        _, report = parse_manifest_report(read_document(manifest_path, schema_bounds_depth=True), str(manifest_path))
        notes.extend(f"ignored field of a newer minor: {f}" for f in report.ignored_fields)
    if package is not None:
        notes.extend(check_entries(package.entries, problems))
        source = package.source or Source("override", str(folder), (0, 0))
        for row in package.tables:
            notes.extend(n for n in check_table(TableRef.of_manifest(row, source, str(folder)), problems)
                         if n not in notes)
        pack_entries: list[Entry] = []
        for row in package.packs:
            ref = PackRef.of_manifest(row, source, str(folder))
            pack_entries.extend(ref.entries(problems))
            if ref.table is not None:
                try:
                    ref.measurements()
                except ArtifactError as exc:
                    problems.report(Problem("invalid-artifact", str(ref.measurements_path()),
                                            "; ".join(p.message for p in exc.problems), None))
        notes.extend(n for n in check_entries(pack_entries, problems) if n not in notes)
    return problems.problems(), notes


def check_entries(entries: list[Entry], problems: ProblemLog, distribution: str | None = None,
                  kernels: KernelRecords | None = None) -> list[str]:
    """Load each entry and check its winner; the notes (each said once).  A table's rows
    are better checked with :func:`check_table`, a column at a time."""
    notes: list[str] = []
    for entry in entries:
        artifact = entry.load(problems)
        if artifact is not None:
            notes.extend(n for n in check_winner(artifact, str(entry.path), problems, distribution, kernels)
                         if n not in notes)
    return notes


def check_table(ref: TableRef, problems: ProblemLog, distribution: str | None = None,
                kernels: KernelRecords | None = None) -> list[str]:
    """Report what would make the loader refuse any row of the table ``ref`` (read now):
    exactly what :func:`check_winner` reports of each row as an artifact, judged as the
    loader reads a table, a column at a time.  What all rows share (the kernel's
    binding, a test double's provenance, the key's axes, that a row is an artifact) is
    judged once, on the first row; each row's key by the kernel's ``check_key``
    (``invalid-key``) and its winner by the registry's check of the tunables (once per
    distinct config) and the kernel's ``check_config`` (``invalid-config``), each
    problem at ``<table>#<row's entry>``.  No artifact is made per row: a table of
    166,000 rows is checked in seconds, not in half a minute and gigabytes.  Returns the
    notes of what was not checked."""
    from flyconfigs.registry.sources.packs import PackRef  # here for the reason check_package_folder's are

    if isinstance(ref, PackRef):  # a pack's rows hold key cells only: each row's winner is in its artifact
        return check_entries(ref.entries(problems), problems, distribution, kernels)
    # A table validated already (one named to validate) needs no index of its keys.
    table = ref.table if ref.table is not None else ref.read(problems)
    if table is None or not table.rows:
        return []

    def where(index: int) -> str:
        return f"{ref.path}#{table.entry_of(index)}"

    # The first row as an artifact: what every row shares, and the first row itself.
    try:
        artifact = Artifact.model_validate(table.row_artifact_data(0))
    except ValidationError as exc:  # a row the table form takes but an artifact does not
        problems.report(Problem("invalid-artifact", where(0), f"not an artifact as a row: {exc.errors()[0]['msg']}",
                                distribution))
        return []
    before = len(problems.problems())
    notes = check_winner(artifact, where(0), problems, distribution, kernels)
    shared = [p for p in problems.problems()[before:] if p.kind in ("test-double", "stale-artifact",
                                                                    "kernel-name-clash")]
    if shared or notes:
        return notes  # every row is refused alike, or the kernel is not declared here
    decl = (kernels or RECORDS).record(table.kernel.name).decl
    device = DeviceQuery.of(table.device.identity)
    names, tunables = table.columns.key, table.columns.config
    width = len(names)
    tunables_of: dict[tuple[tuple[object, ...], tuple[type, ...]], str | None] = {}
    end = width + len(tunables)
    family = Family.of_declaration(decl, problems)
    for index, row in enumerate(table.rows):
        if index == 0:
            continue  # checked above, as an artifact
        key = dict(zip(names, row[:width], strict=True))
        try:
            family.check_key(key)
        except InvalidKeyError as exc:
            problems.report(Problem("invalid-key", where(index), f"{decl.name} refuses its key {key}: {exc}",
                                    distribution))
            continue
        except FlyconfigsError:
            pass  # the plugin's fault, reported once by check_key
        cells = tuple(row[width:end])
        typed = (cells, tuple(map(type, cells)))  # 1 and True are two configs
        why = tunables_of.get(typed, _UNSEEN)
        if why is _UNSEEN:
            why = tunables_of[typed] = family.check_tunables(dict(zip(tunables, cells, strict=True)))
        if why is None:
            why = family.own_check_config(dict(zip(tunables, cells, strict=True)), key, device)
        if why is not None:
            problems.report(Problem("invalid-config", where(index), f"{decl.name} refuses the winner: {why}",
                                    distribution))
    return notes
