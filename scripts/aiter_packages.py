"""Make the folders of the imported aiter packages from the committed corpus: every tuned
CSV of ``corpora/aiter-e4048607`` imported (``flyconfigs import aiter``), its tables
sorted into ``imported/aiter-<arch>/`` with the files ``flyconfigs publish`` reads there:
``TARGET`` (the arch), ``NAME`` (``flyconfigs-aiter-<arch>``), ``VERSION`` (kept when
present) and ``NOTICE`` (aiter's MIT licence and where the configs came from).

    python scripts/aiter_packages.py [--out imported] [--version 2026.12.7]

Publish them with ``flyconfigs publish imported --all`` (or ``publish`` one folder with
``--target``/``--name``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "corpora" / "aiter-e4048607"
REVISION = "e4048607a535ace3a2b51ded31b1c8c2d45c0879"
NOTICE = """These configs are ROCm/aiter's tuned configs (https://github.com/ROCm/aiter), imported
unchanged by flyconfigs from aiter at commit {revision}: each table names its upstream file,
revision and address in its provenance and is labelled imported (measured by aiter's tuner,
not by flyconfigs). aiter is distributed under the MIT License:

{licence}"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "imported")
    parser.add_argument("--version", default="2026.12.7", help="VERSION of a folder that has none")
    args = parser.parse_args(argv)
    licence = (CORPUS / "LICENSE").read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, "-m", "flyconfigs", "import", "aiter", str(CORPUS / "aiter"), "--out",
                               tmp, "--revision", REVISION], capture_output=True, text=True)
        print(done.stderr.strip().splitlines()[-1], file=sys.stderr)
        for arch_dir in sorted(Path(tmp).iterdir()):
            folder = args.out / f"aiter-{arch_dir.name}"
            folder.mkdir(parents=True, exist_ok=True)
            for old in folder.glob("*.json"):
                old.unlink()
            for table in sorted(arch_dir.glob("*.json")):
                shutil.copyfile(table, folder / table.name)
            (folder / "TARGET").write_text(arch_dir.name + "\n")
            (folder / "NAME").write_text(f"flyconfigs-aiter-{arch_dir.name}\n")
            if not (folder / "VERSION").exists():
                (folder / "VERSION").write_text(args.version + "\n")
            (folder / "NOTICE").write_text(NOTICE.format(revision=REVISION, licence=licence))
    # The only refusal is tuned_grouped_fmoe.csv line 73, a row aiter never serves (kept as
    # text in its table's spelling: export aiter gives it back).
    return 0 if done.returncode in (0, 1) else done.returncode


if __name__ == "__main__":
    sys.exit(main())
