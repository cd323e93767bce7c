"""The layout of a data package, shared by publish and tests.

The official package of a target is the distribution ``flyconfigs-<target>``; anyone
may publish under a distribution name of their own.  Its import package (``flyconfigs_<target>``
for the official one, ``flyconfigs_data_<name>`` for any other, so that packages of one
target install side by side) holds an ``__init__.py`` with a docstring only,
``manifest.json`` and one ``artifacts/<file>`` per artifact; the distribution declares
the entry point ``<target> = <import package>`` in ``flyconfigs.artifacts``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence

from packaging.utils import InvalidName, canonicalize_name

from flyconfigs.errors import PublishError
from flyconfigs.schema.canonical import canonical_bytes
from flyconfigs.schema.manifest import MANIFEST_FILE, Manifest, ManifestRow, ManifestTable, target_module
from flyconfigs.schema.models import SCHEMA_VERSION, Artifact, is_safe_file_name
from flyconfigs.schema.pack import Pack
from flyconfigs.schema.table import Table

__all__ = ["ARTIFACTS_DIR", "TARGET", "checked_name", "corpus_problem", "distribution_name", "import_package",
           "name_problem", "package_files", "target_problem"]

ARTIFACTS_DIR = "artifacts"


def distribution_name(target: str) -> str:
    """``flyconfigs-<target>``: the official package of ``target``."""
    return f"flyconfigs-{target}"


TARGET = re.compile(r"^[a-z][a-z0-9_]{1,39}$")
"""A target as a package's name, import package and manifest spell it: an arch token
(``gfx942``, ``sm90``, oneAPI's ``intel_gpu_bmg_g31``), lower-case letters, digits and
underscores."""


def target_problem(target: str) -> str | None:
    """Why ``target`` cannot be a package's target (it is not an arch token: lower-case
    letters, then letters and digits), or ``None``."""
    if not TARGET.match(target):
        return (f"--target {target!r} is not an arch such as gfx942, sm90 or intel_gpu_bmg_g31 (a lower-case letter, "
                "then lower-case letters, digits and underscores)")
    return None


IMPORTED_CORPORA = ("aiter", "vllm-fused-moe")
"""The upstream corpora this project publishes imported, each as ``flyconfigs-<corpus>-<target>``
(``imported/aiter-<arch>``, ``artifacts/vllm-fused-moe-<arch>``): names of the flyconfigs
family it takes for itself."""


def name_problem(name: str, target: str) -> str | None:
    """Why a data package for ``target`` may not be published as ``name``, or ``None``.

    The name must be a valid distribution name (PEP 508) and not one flyconfigs owns:
    ``flyconfigs`` itself, nor ``flyconfigs-<anything>`` but ``target``'s own official
    name and its imported corpora's (``flyconfigs-aiter-<target>``,
    ``flyconfigs-vllm-fused-moe-<target>``; another target's, or a
    name of that family flyconfigs may take later); nor a
    distribution installed here that is not a flyconfigs data package (installing the
    package would replace it: ``pip``, say)."""
    try:
        norm = canonicalize_name(name, validate=True)
    except InvalidName:
        return (f"--name {name!r} is not a valid distribution name (letters, digits, '.', '_' and '-', starting and "
                "ending with a letter or digit)")
    official = canonicalize_name(distribution_name(target))
    imported = {canonicalize_name(f"flyconfigs-{corpus}-{target}") for corpus in IMPORTED_CORPORA}
    if norm == "flyconfigs" or (norm.startswith("flyconfigs-") and norm != official and norm not in imported):
        return (f"--name {name!r} is a name flyconfigs owns (the library and its official flyconfigs-<target> "
                f"packages); this target's official name is {official}")
    if norm != official and _installed_not_data(norm):
        return (f"--name {name!r} is the name of a distribution installed here that is not a flyconfigs data "
                "package: installing the package would replace it")
    return None


def corpus_problem(name: str, kernels: Iterable[str]) -> str | None:
    """Why a package named ``name`` may not hold ``kernels``, or ``None``: the names of
    the imported corpora (``flyconfigs-aiter-<target>``, ``flyconfigs-vllm-fused-moe-<target>``)
    rank as their families' own packages, so they carry their corpus's families only
    (``aiter_*``; ``vllm_*``) and never another kernel's tunings."""
    norm = canonicalize_name(name)
    for corpus in IMPORTED_CORPORA:
        if norm.startswith(f"flyconfigs-{corpus}-"):
            prefix = corpus.split("-")[0] + "_"
            others = sorted({k for k in kernels if not k.startswith(prefix)})
            if others:
                return (f"--name {name!r} is the name of flyconfigs' imported {corpus} corpus, which holds only "
                        f"{prefix}* families; this folder also holds {', '.join(others)}")
    return None


def _installed_not_data(norm: str) -> bool:
    from importlib import metadata

    try:
        dist = metadata.distribution(norm)
    except metadata.PackageNotFoundError:
        return False
    try:
        return not any(ep.group == "flyconfigs.artifacts" for ep in dist.entry_points)
    except Exception:  # noqa: BLE001 - unreadable metadata: a distribution all the same
        return True


def checked_name(name: str, target: str) -> str:
    """``name`` if a data package for ``target`` may be published under it (see
    :func:`name_problem`); :class:`PublishError` saying why not otherwise."""
    why = name_problem(name, target)
    if why is not None:
        raise PublishError(why)
    return name


def import_package(target: str, name: str | None = None) -> str:
    """The import package of the data package ``name`` (default: the official one) for
    ``target``: ``flyconfigs_<target>`` for ``flyconfigs-<target>``, else
    ``flyconfigs_data_<name>`` with every run of other characters an underscore."""
    if name is None or canonicalize_name(name) == canonicalize_name(distribution_name(target)):
        return target_module(target)
    return "flyconfigs_data_" + re.sub(r"[^a-z0-9]+", "_", canonicalize_name(name))


def build_manifest(target: str, artifacts: Sequence[Artifact], tables: Sequence[Table] = (),
                   packs: Sequence[tuple[Pack, bytes]] = ()) -> tuple[Manifest, dict[str, bytes]]:
    """The manifest for ``artifacts`` and ``tables`` and each one's file bytes by
    relative path.

    Rows are sorted by file name, so the same artifacts always give the same manifest.
    Raises :class:`PublishError` if a name is unsafe or two artifacts (or tables) collide.
    """
    files: dict[str, bytes] = {}
    rows = []
    for artifact in sorted(artifacts, key=lambda a: a.file_name()):
        name = artifact.file_name()
        if not is_safe_file_name(name):
            raise PublishError(f"unsafe artifact file name {name!r}")
        rel = f"{ARTIFACTS_DIR}/{name}"
        data = artifact.to_json_bytes()
        if rel in files:
            raise PublishError(f"two artifacts for the same kernel, device and key ({name})")
        files[rel] = data
        rows.append(
            ManifestRow(
                kernel=artifact.kernel.name,
                key=dict(artifact.key),
                device=artifact.device.identity,
                file=rel,
                sha256=hashlib.sha256(data).hexdigest(),
                schema_version=artifact.schema_version,
            )
        )
    listed: list[ManifestTable] = []
    kept: list[ManifestTable] = []
    for table in sorted(tables, key=lambda t: t.file_name()):
        rel = f"{ARTIFACTS_DIR}/{table.file_name()}"
        if rel in files:
            raise PublishError(f"two tables of the same kernel, device and upstream file ({table.file_name()})")
        data = files[rel] = table.to_json_bytes()
        # A table of no rows (an upstream file that holds none) is kept, listed apart: an
        # older reader, which ignores the list, never meets a table it would refuse.
        (listed if table.rows else kept).append(ManifestTable(
            kernel=table.kernel.name, device=table.device.identity, file=rel, sha256=hashlib.sha256(data).hexdigest(),
            schema_version=table.schema_version, rows=len(table.rows)))
    packed = []
    for pack, measurements in sorted(packs, key=lambda p: p[0].file_name()):
        rel = f"{ARTIFACTS_DIR}/{pack.file_name()}"
        if rel in files:
            raise PublishError(f"two packs of the same kernel, device and key axes ({pack.file_name()})")
        data = files[rel] = pack.to_json_bytes()
        files[f"{ARTIFACTS_DIR}/{pack.measurements.file}"] = measurements
        packed.append(ManifestTable(kernel=pack.kernel.name, device=pack.device.identity, file=rel,
                                    sha256=hashlib.sha256(data).hexdigest(), schema_version=pack.schema_version,
                                    rows=len(pack.rows)))
    kernels = sorted({row.kernel for row in rows})
    return Manifest(schema_version=SCHEMA_VERSION, target=target, artifacts=rows, kernels=kernels,
                    tables=listed, packs=packed, kept=kept), files


def package_files(target: str, artifacts: Sequence[Artifact], name: str | None = None,
                  tables: Sequence[Table] = (), packs: Sequence[tuple[Pack, bytes]] = ()) -> dict[str, bytes]:
    """Every file of the import package of data package ``name`` (default: the official
    one) for ``target`` (see :func:`import_package`), by path relative to the package's
    parent folder."""
    module = import_package(target, name)
    manifest, files = build_manifest(target, artifacts, tables, packs)
    out = {
        f"{module}/__init__.py": f'"""Tuned flyconfigs artifacts for {target} (data only)."""\n'.encode(),
        f"{module}/{MANIFEST_FILE}": canonical_bytes(manifest.model_dump(mode="json")) + b"\n",
    }
    out.update({f"{module}/{rel}": data for rel, data in files.items()})
    return out
