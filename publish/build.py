"""Building data packages (the official ``flyconfigs-<target>`` or one under any
distribution name) and uploading them.

:func:`publish` checks a folder of artifacts (every file validates, all belong to the
target, no two collide, the version is PEP 440 and, when uploading, newer than the
index's), writes the package's source tree into a temporary folder, builds an sdist and
a wheel with setuptools through the ``build`` frontend, and only then moves both into
the output folder — a failure leaves nothing behind there.  Wheels are reproducible:
fixed timestamps (``SOURCE_DATE_EPOCH``), fixed file modes and sorted entries, so the
same artifacts and version give the same bytes.  Uploads go through twine.

Needs the ``publish`` extra (build, twine, setuptools); the loader never imports this.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from flyconfigs.errors import ArtifactError, PublishError
from flyconfigs.publish.contents import NOTICE_FILE, Contents, collect, describe
from flyconfigs.publish.index import index_versions
from flyconfigs.publish.layout import (
    checked_name,
    corpus_problem,
    distribution_name,
    import_package,
    package_files,
    target_problem,
)
from flyconfigs.schema.jsonio import read_file_bytes
from flyconfigs.schema.models import Artifact
from flyconfigs.schema.versions import CURRENT_MAJOR

__all__ = ["BUILD_EPOCH", "PublishResult", "collect_artifacts", "publish", "publish_all", "upload_files"]

BUILD_EPOCH = 315532800
"""1980-01-01, the earliest time a zip entry can hold: every built file carries it."""
VERSION_FILE = "VERSION"
TARGET_FILE = "TARGET"
"""Optional beside ``VERSION``: the folder's target, when the folder is not named after it."""
NAME_FILE = "NAME"
"""Optional beside ``VERSION``: the package's distribution name (default: the official one)."""
UPLOAD_TIMEOUT_S = 300


@dataclass(frozen=True)
class PublishResult:
    """What :func:`publish` built (and uploaded)."""

    distribution: str
    version: str
    files: tuple[Path, ...]
    artifacts: int
    """How many keys it serves: its artifacts and its tables' and packs' rows."""
    uploaded_to: str | None = None


def collect_artifacts(folder: Path, target: str) -> list[Artifact]:
    """Every artifact under ``folder``, validated (:func:`~flyconfigs.publish.contents.collect`
    states the checks; the folder's tables are checked too but not returned)."""
    return collect(folder, target).artifacts


def _check_version(version: str) -> Version:
    try:
        return Version(version)
    except InvalidVersion:
        raise PublishError(f"version {version!r} is not a valid PEP 440 version") from None


def _pyproject(name: str, target: str, version: str) -> str:
    module = import_package(target, name)
    return f"""[build-system]
requires = ["setuptools>=70"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{version}"
description = "Tuned flyconfigs artifacts for {target} (data only)"
readme = {{file = "README.md", content-type = "text/markdown"}}
requires-python = ">=3.10"
dependencies = ["flyconfigs>={CURRENT_MAJOR},<{CURRENT_MAJOR + 1}"]
classifiers = ["Programming Language :: Python :: 3"]

[project.entry-points."flyconfigs.artifacts"]
{target} = "{module}"

[tool.setuptools]
packages = ["{module}"]
include-package-data = false

[tool.setuptools.package-data]
{module} = ["manifest.json", "artifacts/*.json", "artifacts/*.json.gz", "NOTICE"]
"""


def _write_tree(root: Path, name: str, target: str, version: str, contents: Contents) -> None:
    files = dict(package_files(target, contents.artifacts, name, tables=contents.tables, packs=contents.packs))
    if contents.notice is not None:
        files[f"{import_package(target, name)}/{NOTICE_FILE}"] = contents.notice.encode()
    files["pyproject.toml"] = _pyproject(name, target, version).encode()
    files["README.md"] = describe(name, target, version, contents).encode()
    for rel, data in sorted(files.items()):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.chmod(path, 0o644)
        os.utime(path, (BUILD_EPOCH, BUILD_EPOCH))


def _build(source: Path, out: Path) -> list[Path]:
    try:
        from build import BuildBackendException, ProjectBuilder
        from pyproject_hooks import quiet_subprocess_runner
    except ImportError:
        raise PublishError("building needs the publish extra: pip install 'flyconfigs[publish]'") from None
    previous = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = str(BUILD_EPOCH)
    try:
        _check_backend()
        builder = ProjectBuilder(source, python_executable=sys.executable, runner=quiet_subprocess_runner)
        return [Path(builder.build(kind, out)) for kind in ("sdist", "wheel")]
    except BuildBackendException as exc:
        raise PublishError(f"the build backend failed: {exc}") from None
    finally:
        if previous is None:
            os.environ.pop("SOURCE_DATE_EPOCH", None)
        else:
            os.environ["SOURCE_DATE_EPOCH"] = previous


def _check_backend() -> None:
    from importlib import metadata

    try:
        found = metadata.version("setuptools")
    except metadata.PackageNotFoundError:
        found = None
    if found is None or Version(found) < Version("70"):
        raise PublishError(f"building needs setuptools>=70 beside flyconfigs (found {found or 'none'})")


def upload_files(files: Sequence[Path], url: str) -> None:
    """Upload ``files`` to the index at ``url`` with twine (credentials from ``TWINE_*``);
    :class:`PublishError` with twine's last line on failure."""
    import importlib.util

    if importlib.util.find_spec("twine") is None:
        raise PublishError("uploading needs twine: pip install 'flyconfigs[publish]'")
    command = [sys.executable, "-m", "twine", "upload", "--non-interactive", "--disable-progress-bar",
               "--repository-url", url, *map(str, files)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=UPLOAD_TIMEOUT_S,
                                env={**os.environ, "NO_COLOR": "1"})
    except subprocess.TimeoutExpired:
        raise PublishError(f"twine upload to {url} did not finish within {UPLOAD_TIMEOUT_S} s") from None
    except OSError as exc:
        raise PublishError(f"cannot run twine: {exc.strerror or exc}") from None
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise PublishError(f"twine upload to {url} failed: {detail[-1] if detail else result.returncode}")


def publish(
    folder: str | Path,
    target: str,
    version: str,
    out: str | Path = "dist",
    upload: str | None = None,
    index_url: str | None = None,
    *,
    name: str | None = None,
) -> PublishResult:
    """Build the data package ``name`` (default: the official ``flyconfigs-<target>``)
    at ``version`` from the artifacts in ``folder`` into ``out``; with ``upload`` (an
    upload URL), upload both files there after checking that ``version`` is newer than
    every release the index (``index_url``, default ``<upload>/simple/``) has.  Its
    manifest lists the kernel families it serves.  Raises :class:`PublishError` (also
    for a ``name`` that is not a valid distribution name); nothing is left in ``out`` on
    failure."""
    with tempfile.TemporaryDirectory(prefix="flyconfigs-publish-") as tmp:
        release = _build_release(Path(folder), target, version, Path(tmp), upload, index_url, name)
        if upload is not None:
            upload_files(release.files, upload)
        return _place([release], Path(out), upload)[0]


def _build_release(folder: Path, target: str, version: str, tmp: Path, upload: str | None,
                   index_url: str | None, name: str | None = None) -> PublishResult:
    """Check and build one release into ``tmp`` (nothing outside it is touched)."""
    why = target_problem(target)
    if why is not None:
        raise PublishError(why)
    dist = checked_name(name, target) if name is not None else distribution_name(target)
    parsed = _check_version(version)
    contents = collect(folder, target)
    if name is not None:
        kernels = [a.kernel.name for a in contents.artifacts] + [t.kernel.name for t in contents.tables]
        why = corpus_problem(name, kernels + [p.kernel.name for p, _ in contents.packs])
        if why is not None:
            raise PublishError(why)
    if upload is not None:
        existing = index_versions(index_url or upload.rstrip("/") + "/simple/", dist)
        newer = [v for v in existing if v >= parsed]
        if newer:
            raise PublishError(f"the index already has {dist} {max(newer)}; {version} is not newer")
    # A folder of its own, fresh, per release: setuptools keeps what it built under the
    # source tree (build/lib), and two releases of one target sharing a folder would put
    # the first one's files into the second one's wheel.
    own = Path(tempfile.mkdtemp(prefix=f"{canonicalize_name(dist)}-", dir=tmp))
    source = own / "src"
    _write_tree(source, dist, target, str(parsed), contents)
    built = _build(source, own / "dist")
    return PublishResult(dist, str(parsed), tuple(built), contents.count, upload)


def _place(releases: Sequence[PublishResult], out: Path, upload: str | None) -> list[PublishResult]:
    """Move every built file into ``out``: each is first written whole under a private
    temporary name there, and only when all are written are they renamed into place, so
    a failure (a full disk) leaves no file of the release in ``out`` and concurrent runs
    into one folder never collide."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PublishError(f"cannot create the output folder: {exc.strerror or exc}", str(out)) from None
    staged: list[tuple[Path, Path]] = []
    try:
        for release in releases:
            for path in release.files:
                fd, name = tempfile.mkstemp(dir=out, prefix=f".{path.name}.", suffix=".tmp")
                staged.append((Path(name), out / path.name))
                with os.fdopen(fd, "wb") as handle:
                    handle.write(path.read_bytes())
                    handle.flush()
                    os.fsync(handle.fileno())
                os.chmod(name, 0o644)
    except OSError as exc:
        for written, _ in staged:
            written.unlink(missing_ok=True)
        raise PublishError(f"cannot write the built files: {exc.strerror or exc}; nothing was placed", str(out)) from None
    for written, final in staged:
        os.replace(written, final)
    placed, done = [], iter(final for _, final in staged)
    for release in releases:
        final_files = tuple(next(done) for _ in release.files)
        placed.append(PublishResult(release.distribution, release.version, final_files, release.artifacts, upload))
    return placed


def _read_setting(folder: Path, file: str, required: str | None) -> str | None:
    """The stripped text of ``folder/file``; ``None`` when it is absent and not
    ``required`` (what it holds, for the message); :class:`PublishError` otherwise."""
    path = folder / file
    if not path.is_file():
        if required is None:
            return None
        raise PublishError(f"missing {file} file with {required}", str(folder))
    try:
        return read_file_bytes(path, 256).decode("utf-8").strip()
    except (ArtifactError, UnicodeDecodeError) as exc:
        raise PublishError(f"cannot read {file}: {exc}", str(folder)) from None


def publish_all(root: str | Path, out: str | Path = "dist", upload: str | None = None,
                index_url: str | None = None) -> list[PublishResult]:
    """Publish every ``<root>/<target>/`` folder, at the version in its ``VERSION`` file,
    each checked against the index as :func:`publish` does (``index_url``, default
    ``<upload>/simple/``).  A folder with a ``TARGET`` file is of that target whatever
    its name, and one with a ``NAME`` file is published under that distribution name
    (``imported/aiter-gfx942/`` holds ``flyconfigs-aiter-gfx942`` of target ``gfx942``).
    Every target is checked and built before any file reaches ``out`` (or the index), so
    one failing target leaves nothing behind."""
    base = Path(root)
    if not base.is_dir():
        raise PublishError("not a folder of target folders", str(root))
    folders = sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not folders:
        raise PublishError("no target folders", str(root))
    plan = []
    for folder in folders:
        version = _read_setting(folder, VERSION_FILE, "the release's version")
        assert version is not None
        target = _read_setting(folder, TARGET_FILE, None) or folder.name
        plan.append((folder, version, target, _read_setting(folder, NAME_FILE, None)))
    with tempfile.TemporaryDirectory(prefix="flyconfigs-publish-") as tmp:
        releases = [_build_release(folder, target, version, Path(tmp), upload, index_url, name)
                    for folder, version, target, name in plan]
        if upload is not None:
            for release in releases:
                upload_files(release.files, upload)
        return _place(releases, Path(out), upload)
