"""What a data package costs: the size of ``artifacts/<target>`` in the repository, its
wheel and sdist as ``flyconfigs publish`` builds them, and the wheel installed (files and
bytes under the install folder, as pip lays them out with ``--target``).  With
``--out FOLDER`` writes FOLDER/package-size-<target>.json.

    python -m bench.package_size [--folder artifacts/sm90] [--target sm90] [--out bench/results]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import machine, write_result
from flyconfigs.publish.build import publish

ROOT = Path(__file__).resolve().parents[1]


def _tree(folder: Path) -> dict[str, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


def measure(folder: Path, target: str) -> dict[str, Any]:
    """The figures of ``folder`` published as ``flyconfigs-<target>``."""
    with tempfile.TemporaryDirectory() as tmp:
        dist = Path(tmp) / "dist"
        version = (folder / "VERSION").read_text(encoding="utf-8").strip()
        result = publish(folder, target=target, version=version, out=dist)
        wheel = next(p for p in map(Path, result.files) if p.name.endswith(".whl"))
        sdist = next(p for p in map(Path, result.files) if p.name.endswith(".tar.gz"))
        site = Path(tmp) / "site"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target",
                        str(site), str(wheel)], check=True)
        return {
            "folder": str(folder.relative_to(ROOT)) if folder.is_relative_to(ROOT) else folder.name,
            "version": version,
            "keys": result.artifacts,
            "repository": _tree(folder),
            "wheel_bytes": wheel.stat().st_size,
            "sdist_bytes": sdist.stat().st_size,
            "installed": _tree(site),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--folder", type=Path, default=ROOT / "artifacts" / "sm90")
    parser.add_argument("--target", default="sm90")
    parser.add_argument("--out", type=Path, help="folder for package-size-<target>.json (default: print only)")
    args = parser.parse_args()
    figures = {**measure(args.folder.resolve(), args.target), "machine": machine(),
               "targets": {"installed_bytes": 8_000_000, "installed_files": 50, "wheel_bytes": 2_000_000,
                           "repository_bytes": 12_000_000}}
    where = write_result(f"package-size-{args.target}", figures, args.out) if args.out else "(not written: no --out)"
    print(f"flyconfigs-{args.target}: {figures['keys']} keys; repository {figures['repository']['bytes'] / 1e6:.1f} MB "
          f"in {figures['repository']['files']} files; wheel {figures['wheel_bytes'] / 1e6:.2f} MB; installed "
          f"{figures['installed']['bytes'] / 1e6:.1f} MB in {figures['installed']['files']} files -> {where}")


if __name__ == "__main__":
    main()
