"""Importing the config files other projects ship, with one write policy for every format.

:func:`write_imports` reads vLLM's fused-MoE JSON files, aiter's tuned CSVs, FlyDSL's
offline autotune files or Kernel Tuner's T4 results files and writes what they hold as
``imported`` artifacts and tables, returning an :class:`ImportReport`: each file written,
each entry refused with the file and field it came from.  The policy is the same for
every format:

- every write is atomic (:func:`~flyconfigs.schema.jsonio.write_atomic`);
- nothing replaces a file that says more: a measured or predicted artifact of the same
  slot, or a file of a newer schema (:func:`flyconfigs.registry.replacement_refusal`);
- a table's row whose slot (kernel, device, key) the folder holds a measured or
  predicted artifact for is left out of the table: an import never shadows it;
- within one import, a second document for a file already written with other contents
  (two files of one name, two configs for one slot) is refused, never silently replaces
  the first.

The command line (``flyconfigs import …``, ``flyconfigs t4 import``) parses its
arguments, calls :func:`write_imports` and renders the report.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from flyconfigs.adapters.imported import write_imported
from flyconfigs.errors import ArtifactError, FlyconfigsError
from flyconfigs.registry import kernel_declaration, replacement_refusal
from flyconfigs.schema.jsonio import json_files_under, write_atomic
from flyconfigs.schema.models import Artifact, Device, artifact_file_name
from flyconfigs.schema.table import Table

__all__ = ["FORMATS", "ImportFormat", "ImportReport", "Refusal", "T4Identity", "UpstreamRead", "Written", "write_imports"]

ImportFormat = Literal["vllm", "aiter", "flydsl", "t4"]
FORMATS: tuple[ImportFormat, ...] = ("vllm", "aiter", "flydsl", "t4")
"""The formats :func:`write_imports` reads."""


@dataclass(frozen=True)
class Written:
    """One file an import wrote: ``source`` the file it was read from, ``entry`` its place
    there for an artifact of one entry (vLLM's ``"64"``; ``""`` for a whole file or a
    table), ``path`` the file written, the ``kernel`` and ``device`` (described) it is for,
    and ``rows`` the rows of a table written (``None`` for an artifact)."""

    source: Path
    entry: str
    path: Path
    kernel: str
    device: str
    rows: int | None = None


@dataclass(frozen=True)
class Refusal:
    """One thing an import did not write: ``file`` the file it read (or the path named,
    for a file that could not be read at all), ``field`` where in it (an entry, a line
    and column, a dotted field; ``""`` for the whole file) and ``message`` why, naming
    the file in the way when it was a file already written."""

    file: Path
    field: str
    message: str


@dataclass(frozen=True)
class UpstreamRead:
    """An upstream release an import read in place of a folder: the path named, the
    revision read from it (``None`` when it records none) and how it was read."""

    path: str
    revision: str | None
    how: str


@dataclass(frozen=True)
class ImportReport:
    """What :func:`write_imports` did: the ``format`` read, every file it read (``files``,
    in order), every file written and every refusal, in the order met, and the upstream
    releases read in place of folders.  Nothing written is left out of ``written``; a
    file not listed there was not touched."""

    format: ImportFormat
    files: tuple[Path, ...]
    written: tuple[Written, ...]
    refused: tuple[Refusal, ...]
    upstream: tuple[UpstreamRead, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether there was something to import and nothing was refused."""
        return bool(self.files) and not self.refused

    @property
    def rows(self) -> int:
        """The rows of the tables written."""
        return sum(w.rows or 0 for w in self.written)


@dataclass(frozen=True)
class T4Identity:
    """What a T4 file Kernel Tuner wrote does not say and the import is told: the
    kernel (``{"name", "version"}``), the key it tuned, the device it ran on and the
    kernel's default config (to recognise it among the results), if known."""

    kernel: Mapping[str, Any]
    key: Mapping[str, Any]
    device: Device
    default: Mapping[str, Any] | None = None


@dataclass
class _Policy:
    """The one write policy (module docstring), with what this import wrote so far."""

    written: list[Written] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    _seen: dict[Path, tuple[bytes, str]] = field(default_factory=dict)

    def refuse(self, source: Path, error: ArtifactError) -> None:
        self.refused.extend(Refusal(source, p.field, p.message) for p in error.problems)

    def _first(self, target: Path, data: bytes, source: Path, entry: str, what: str) -> bool:
        """Whether ``data`` may go to ``target`` as far as this import goes: not another
        document for a file it already wrote (refused, naming the first)."""
        earlier = self._seen.get(target)
        if earlier is not None and earlier[0] != data:
            self.refused.append(Refusal(source, entry, what.format(earlier=earlier[1], name=target.name)))
            return False
        return True

    def _replaces(self, target: Path, rule: str, source: Path, entry: str) -> bool:
        why = replacement_refusal(target, rule)
        if why is not None:
            self.refused.append(Refusal(source, entry, f"{target}: {why}"))
        return why is None

    def artifact(self, artifact: Artifact, folder: Path, source: Path, entry: str) -> None:
        target = folder / artifact.file_name()
        data = artifact.to_json_bytes()
        if not self._first(target, data, source, entry, "the same kernel, device and key as {earlier}, with another "
                                                        "config; not written"):
            return
        try:
            write_imported(artifact, folder)
        except ArtifactError as exc:  # the file in the way says more: named, and left as it is
            self.refused.extend(Refusal(source, entry, f"{exc.file}: {p.message}") for p in exc.problems)
            return
        self._seen[target] = (data, f"{source}: {entry}" if entry else str(source))
        self.written.append(Written(source, entry, target, artifact.kernel.name, artifact.device.identity.describe()))

    def table(self, table: Table, folder: Path, source: Path) -> None:
        target = folder / table.file_name()
        data = table.to_json_bytes()
        if not self._first(target, data, source, "", "the same table ({name}) as {earlier}, with other rows; not "
                                                     "written (import them into separate --out folders, or merge "
                                                     "the files first)"):
            return
        self._seen[target] = (data, str(source))
        if not self._replaces(target, table.selection.rule, source, ""):
            return
        keep = self._unshadowed(table, folder, source)
        if not keep:
            return
        if len(keep) < len(table.rows):
            table = _rows_kept(table, keep)
            data = table.to_json_bytes()
        write_atomic(target, data)
        self.written.append(Written(source, "", target, table.kernel.name, table.device.identity.describe(),
                                    rows=len(table.rows)))

    def _unshadowed(self, table: Table, folder: Path, source: Path) -> list[int]:
        """The rows of ``table`` no measured or predicted artifact in ``folder`` holds the
        slot of; each other row refused, naming the artifact.  A row's artifact file name
        comes from its kernel, device and key alone: no row is made an artifact for it."""
        try:
            names = {e.name for e in os.scandir(folder) if e.name.endswith(".json") and "-table-" not in e.name}
        except OSError:  # no folder yet: nothing in it to shadow
            names = set()
        if not names:
            return list(range(len(table.rows)))
        keep: list[int] = []
        for index in range(len(table.rows)):
            name = artifact_file_name(table.kernel.name, table.device.identity, table.key_of(index))
            why = replacement_refusal(folder / name, table.selection.rule) if name in names else None
            if why is None:
                keep.append(index)
            else:
                self.refused.append(Refusal(source, table.entry_of(index), f"{folder / name}: {why}; an import never "
                                                                           "shadows it (row not written)"))
        return keep


def _rows_kept(table: Table, keep: list[int]) -> Table:
    data = table.model_dump(mode="json")
    data["rows"] = [data["rows"][i] for i in keep]
    if data.get("entries") is not None:
        data["entries"] = [data["entries"][i] for i in keep]
    return Table.model_validate(data)


def write_imports(format: ImportFormat, paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], *,
                  revision: str | None = None, devices: Sequence[Device] = (), artifacts: bool = False,
                  upstream_dir: str | None = None, flydsl_kernels: Mapping[str, str] | None = None,
                  t4: T4Identity | None = None) -> ImportReport:
    """Import the files ``paths`` name (files; folders, searched; for vLLM and aiter also
    an upstream release: a wheel, an installed package or a checkout, whose revision is
    recorded unless ``revision`` is given) into ``out`` under the one write policy of this
    module, and report what was written and what refused.

    vLLM, aiter and T4 files are written under ``out/<arch>/`` (one folder per publish
    target), FlyDSL files into ``out``.  Options by format:

    - ``vllm``: ``devices`` describe GPUs the product catalog does not know; ``artifacts``
      writes one artifact per batch size instead of one table per file.
    - ``aiter``: ``upstream_dir`` is the files' folder in aiter (default: where aiter keeps
      a file of that name, with the subfolder it was found in).  A folder is searched for
      the tuned CSVs of declared families only.
    - ``flydsl``: ``flydsl_kernels`` maps a FlyDSL kernel name (no namespace) to the
      declared kernel whose configs its files are; others become ``flydsl.<name>``.
    - ``t4``: ``t4`` says what a file Kernel Tuner wrote does not (flyconfigs' own T4 files
      need nothing).

    A file or entry that cannot be imported is a :class:`Refusal` naming the file and
    the field; every other one is imported.  Raises :class:`FileNotFoundError` for a path
    that does not exist (nothing is written then)."""
    named = [Path(p) for p in paths]
    for path in named:
        if not os.path.lexists(path):
            raise FileNotFoundError(2, "No such file or directory", str(path))
    upstream: list[UpstreamRead] = []
    trees: list[Any] = []
    try:
        if format in ("vllm", "aiter"):
            named, revision = _open_upstream(format, named, revision, upstream, trees)
        policy = _Policy()
        files = _files(format, named)
        read = _reader(format, revision=revision, devices=devices, artifacts=artifacts, upstream_dir=upstream_dir,
                       flydsl_kernels=flydsl_kernels, t4=t4)
        folder = Path(out)
        for path, relative in files:
            try:
                results = list(read(path, relative))
            except ArtifactError as exc:
                policy.refuse(path, exc)
                continue
            for result in results:
                if isinstance(result, ArtifactError):
                    policy.refuse(path, result)
                elif isinstance(result, Table):
                    policy.table(result, folder / result.device.arch, path)
                else:
                    entry = (result.provenance.source.entry or "") if result.provenance.source else ""
                    policy.artifact(result, folder if format == "flydsl" else folder / result.device.arch, path, entry)
    finally:
        for tree in trees:
            tree.close()
    return ImportReport(format, tuple(p for p, _ in files), tuple(policy.written), tuple(policy.refused), tuple(upstream))


def _open_upstream(format: ImportFormat, named: list[Path], revision: str | None, upstream: list[UpstreamRead],
                   trees: list[Any]) -> tuple[list[Path], str | None]:
    """``named`` with each upstream release replaced by its config folder (the trees
    opened added to ``trees``, to close), and the revision: ``revision``, else the first
    release's."""
    from flyconfigs.adapters.upstream import aiter_tree, is_upstream, vllm_tree

    opener = vllm_tree if format == "vllm" else aiter_tree
    folders = []
    for path in named:
        if is_upstream(path):
            tree = opener(path)
            trees.append(tree)
            folders.append(Path(tree.folder))
            if revision is None:
                revision = tree.revision
            upstream.append(UpstreamRead(str(path), tree.revision, tree.how))
        else:
            folders.append(path)
    return folders, revision


def _files(format: ImportFormat, named: list[Path]) -> list[tuple[Path, str]]:
    """The files to read, each with its folder relative to the folder named (``""`` for a
    file named): the files named, and under each folder named its ``*.json`` files, or
    for aiter the tuned CSVs of declared families (untuned shapes and READMEs are left
    out, not refused; each file once)."""
    if format != "aiter":
        return [(p, "") for path in named for p in (json_files_under(path) if path.is_dir() else [path])]
    from flyconfigs.kernels.aiter_gemm import family_of

    files: dict[Path, str] = {}
    for path in named:
        if not path.is_dir():
            files[path] = ""
            continue
        for found in sorted(p for p in path.rglob("*.csv") if p.is_file() and family_of(p.name) is not None):
            folder = found.parent.relative_to(path).as_posix()
            files[found] = "" if folder == "." else folder
    return list(files.items())


Reader = Callable[[Path, str], Iterator["Artifact | Table | ArtifactError"]]


def _reader(format: ImportFormat, *, revision: str | None, devices: Sequence[Device], artifacts: bool,
            upstream_dir: str | None, flydsl_kernels: Mapping[str, str] | None, t4: T4Identity | None) -> Reader:
    """The function that reads one file of ``format``: what it yields (artifacts, tables,
    refused entries); an :class:`ArtifactError` it raises refuses the whole file."""
    if format == "vllm":
        def vllm(path: Path, relative: str) -> Iterator[Artifact | Table | ArtifactError]:
            from flyconfigs.adapters.vllm import import_vllm_file, tabulated

            imported = import_vllm_file(path, revision, devices)
            if not artifacts:
                imported = tabulated(imported)
            yield from imported.refused
            yield from imported.artifacts
            yield from imported.tables
        return vllm
    if format == "aiter":
        def aiter(path: Path, relative: str) -> Iterator[Artifact | Table | ArtifactError]:
            from flyconfigs.adapters.aiter import import_aiter_file

            result = import_aiter_file(path, revision, upstream_dir=_aiter_dir(upstream_dir, relative, path.name))
            yield from result.refused
            yield from result.tables
        return aiter
    if format == "flydsl":
        from flyconfigs.schema.flydsl import NAMESPACE

        mapped = {NAMESPACE + name: kernel for name, kernel in (flydsl_kernels or {}).items()}

        def flydsl(path: Path, relative: str) -> Iterator[Artifact | Table | ArtifactError]:
            from flyconfigs.kernels.flydsl import check_flydsl_artifact
            from flyconfigs.schema.flydsl import import_flydsl_file

            artifact = import_flydsl_file(path)
            if artifact.kernel.name in mapped:
                artifact = _as_kernel(artifact, mapped[artifact.kernel.name], str(path))
            else:
                check_flydsl_artifact(artifact, str(path))  # what FlyDSL's own loader would refuse is not imported
            yield artifact
        return flydsl

    def t4_file(path: Path, relative: str) -> Iterator[Artifact | Table | ArtifactError]:
        from flyconfigs.adapters.t4 import t4_to_artifact
        from flyconfigs.schema.jsonio import read_document

        document = read_document(path)
        if t4 is None:
            yield t4_to_artifact(document, str(path))
        else:
            yield t4_to_artifact(document, str(path), t4.kernel, t4.key, t4.device, t4.default)
    return t4_file


def _as_kernel(artifact: Artifact, kernel: str, file: str) -> Artifact:
    """``artifact`` as an artifact of the declared kernel ``kernel``, checked by that
    kernel's declaration where this environment has it."""
    from flyconfigs.kernels.flydsl import refuse_unservable
    from flyconfigs.schema.load import parse_artifact

    data = artifact.model_dump(mode="json")
    data["kernel"]["name"] = kernel
    renamed = parse_artifact(data, file)[0]
    try:
        decl = kernel_declaration(kernel)
    except FlyconfigsError:
        return renamed  # declared where it is served: the loader checks it there
    refuse_unservable(decl, renamed, file, f"{kernel} cannot serve it")
    return renamed


def _aiter_dir(given: str | None, relative: str, name: str) -> str:
    """The file's folder in aiter: ``given`` with the subfolder the file was found in;
    else the subfolder itself when it is aiter's own (``aiter/…``, or ``configs/…`` and
    ``ops/…`` below the ``aiter`` package folder named); else where aiter keeps a file of
    this name (the FlyDSL ops' beside their code, the others under ``aiter/configs``)
    with the subfolder."""
    from flyconfigs.adapters.aiter import CONFIG_DIR

    if given is not None:
        return "/".join(part for part in (given.rstrip("/"), relative) if part)
    if relative.split("/")[0] == "aiter":
        return relative
    if relative.split("/")[0] in ("configs", "ops"):
        return f"aiter/{relative}"
    base = "aiter/ops/flydsl" if name in ("gdr_decode_tuned.csv", "chunk_gdn_h_tuned.csv") else CONFIG_DIR
    return "/".join(part for part in (base, relative) if part)
