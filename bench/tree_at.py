"""An importable tree of another commit, to time its code beside this checkout's in one
run: the commit's files (``git archive``) under ``DEST/src`` and, under ``DEST/site``,
a ``flyconfigs`` package laid out as an install lays it out (``flyconfigs.schema`` is
``schema/``, and so on, as ``pyproject.toml`` maps them).  A process whose
``PYTHONPATH`` starts with ``DEST/site:DEST/src`` imports that commit's ``flyconfigs``
(and its ``bench`` and ``tests`` helpers) ahead of the installed one; the installed
distribution's entry points still name the kernels.

    python -m bench.tree_at COMMIT DEST      # prints the PYTHONPATH to use
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

__all__ = ["SUBPACKAGES", "tree_at"]

SUBPACKAGES = ("schema", "registry", "publish", "kernels", "tuner", "adapters")
"""The top-level folders that install as ``flyconfigs.<name>``."""


def tree_at(commit: str, dest: Path, repository: Path | None = None) -> str:
    """Lay out ``commit`` of ``repository`` (default: this checkout) under ``dest``
    (replaced if present); returns the ``PYTHONPATH`` entries that import it."""
    repository = repository or Path(__file__).resolve().parent.parent
    archive = subprocess.run(["git", "-C", str(repository), "archive", commit], capture_output=True, check=True).stdout
    if dest.exists():
        shutil.rmtree(dest)
    src, site = dest / "src", dest / "site" / "flyconfigs"
    src.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(src, filter="data")
    site.mkdir(parents=True)
    for child in (src / "flyconfigs").iterdir():
        (site / child.name).symlink_to(child)
    for name in SUBPACKAGES:
        if (src / name).is_dir() and not (site / name).exists():  # older commits hold some inside flyconfigs/
            (site / name).symlink_to(src / name)
    return f"{dest / 'site'}:{src}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commit")
    parser.add_argument("dest", type=Path)
    args = parser.parse_args()
    print(tree_at(args.commit, args.dest.resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
