"""One file that holds what a GPU machine needs to run this checkout's GPU scripts offline:
the checkout's tree (every tracked file, and untracked ones git does not ignore, as they
are on disk) and, under ``.whl/``, the wheels of the Python packages such a machine
lacks, for CPython 3.12 on manylinux x86_64 (``scripts/gpu-tests.sh`` installs them from
there).  The bundle is refused above ``LIMIT_BYTES`` (60 MiB), what a call to a GPU
machine can carry beside its command.

Usage: python scripts/gpu_bundle.py OUT_DIR [--wheels DIR]
       (writes OUT_DIR/flyconfigs-gpu.tar.gz; the wheels are downloaded with pip into
       OUT_DIR/wheels unless --wheels names a folder that holds them already)

On the GPU machine: ``mkdir tree && tar xzf flyconfigs-gpu.tar.gz -C tree && cd tree``,
then ``bash scripts/gpu-tests.sh ...`` or ``bash bench/release_step.sh ...``
(docs/benchmarks.md).  Exit status: 0 written, 1 a wheel missing or the bundle too
large (nothing is left at the bundle's path then), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT_BYTES = 60 * 1024 * 1024
BUNDLE_NAME = "flyconfigs-gpu.tar.gz"
WHEELS_DIR = ".whl"
REQUIREMENTS = ("pydantic>=2.11,<3", "pydantic-core", "typing-extensions>=4.16", "annotated-types",
                "typing-inspection", "platformdirs", "tqdm")
"""What a GPU machine's Python (which has torch, Triton, packaging and pytest) lacks."""
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


class BundleError(Exception):
    """The bundle cannot be made; the message says why."""


def _project(requirement: str) -> str:
    """The normalized project name of a requirement or a wheel file's first field."""
    return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~ ;\[]", requirement, maxsplit=1)[0]).lower()


def download_wheels(dest: Path) -> list[Path]:
    """Download :data:`REQUIREMENTS` (with pip's resolution, so that pydantic-core is the
    one pydantic pins) as binary wheels for CPython 3.12, manylinux x86_64, into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version", "3.12",
               "--implementation", "cp", *(a for p in PLATFORMS for a in ("--platform", p)), "-d", str(dest),
               *REQUIREMENTS]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise BundleError(f"pip download failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return sorted(dest.glob("*.whl"))


def chosen_wheels(folder: Path) -> list[Path]:
    """One wheel per project of :data:`REQUIREMENTS` from ``folder`` (two versions of
    one would stop the install there); :class:`BundleError` naming what is missing or
    doubled."""
    by_project: dict[str, list[Path]] = {}
    for wheel in sorted(folder.glob("*.whl")):
        by_project.setdefault(_project(wheel.name.split("-")[0]), []).append(wheel)
    wanted = [_project(r) for r in REQUIREMENTS]
    missing = [p for p in wanted if p not in by_project]
    if missing:
        raise BundleError(f"no wheel in {folder} for {', '.join(missing)}")
    doubled = [p for p in wanted if len(by_project[p]) > 1]
    if doubled:
        raise BundleError(f"more than one wheel in {folder} for {', '.join(doubled)}: keep one version of each")
    return [by_project[p][0] for p in wanted]


def tree_files(root: Path = ROOT) -> list[str]:
    """The checkout's files as git sees them: tracked, and untracked ones not ignored,
    that exist on disk; sorted, relative to ``root``."""
    done = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                          capture_output=True, check=True)
    names = {n for n in done.stdout.decode().split("\0") if n}
    return sorted(n for n in names if (root / n).is_file() and not (root / n).is_symlink())


def bundle(out_dir: Path, wheels: Sequence[Path], root: Path = ROOT, limit: int = LIMIT_BYTES) -> Path:
    """Write ``out_dir/flyconfigs-gpu.tar.gz``: the tree of ``root`` and ``wheels`` under
    ``.whl/``.  Written under a temporary name and renamed when whole and within
    ``limit`` bytes; :class:`BundleError` (and no file at the bundle's path) otherwise."""
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / BUNDLE_NAME
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{BUNDLE_NAME}.", suffix=".tmp")
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=6) as tar:
            for name in tree_files(root):
                if name.startswith(f"{WHEELS_DIR}/"):
                    continue
                tar.add(root / name, arcname=name, recursive=False)
            for wheel in wheels:
                tar.add(wheel, arcname=f"{WHEELS_DIR}/{wheel.name}", recursive=False)
        size = Path(tmp).stat().st_size
        if size > limit:
            raise BundleError(f"the bundle is {size / 2**20:.1f} MiB, over the {limit / 2**20:.0f} MiB a GPU call carries")
        os.replace(tmp, final)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return final


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="gpu_bundle.py")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--wheels", type=Path, help="a folder holding the wheels already (no download)")
    args = parser.parse_args(argv)
    try:
        if args.wheels is None:
            download_wheels(args.out_dir / "wheels")
        wheels = chosen_wheels(args.wheels or args.out_dir / "wheels")
        path = bundle(args.out_dir, wheels)
    except BundleError as exc:
        print(f"gpu_bundle: {exc}", file=sys.stderr)
        return 1
    print(f"{path}: {path.stat().st_size / 2**20:.1f} MiB, {len(wheels)} wheels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
