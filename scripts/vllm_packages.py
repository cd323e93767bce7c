"""Build the folders of the vLLM packages from the committed vLLM corpus.

``python scripts/vllm_packages.py [--corpus corpora/vllm-0.34.0] [--out artifacts]`` imports
every config file of the corpus (``flyconfigs import vllm``, one table per file) and lays
the result out as one package folder per target, ``OUT/vllm-fused-moe-<target>/``: the
tables and artifacts, ``TARGET``, ``NAME`` (``flyconfigs-vllm-fused-moe-<target>``),
``VERSION`` (the vLLM release) and ``NOTICE`` (where the configs come from and vLLM's
Apache-2.0 licence, in full).  ``flyconfigs publish --all OUT`` then builds them beside the
official packages.  A folder's JSON files are replaced; nothing else under OUT is touched.
Run again on an unchanged corpus, it writes the same bytes.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "vllm-fused-moe-"


def notice(corpus: Path, release: str) -> str:
    """The package's NOTICE: the upstream project, release, path and licence, then the licence."""
    licence = (corpus / "LICENSE").read_text(encoding="utf-8")
    return (f"The configs in this package are vLLM's: the fused-MoE config files of vLLM {release}\n"
            f"(https://github.com/vllm-project/vllm, tag v{release}, folder\n"
            "vllm/model_executor/layers/fused_moe/configs/), imported unchanged by flyconfigs\n"
            "(`flyconfigs import vllm`); each table names its upstream file and revision in\n"
            "provenance.source.  vLLM is licensed under the Apache License, Version 2.0, whose\n"
            "text follows; the configs are used and redistributed under it.\n\n" + licence)


def build(corpus: Path, out: Path) -> list[Path]:
    """Write one package folder per target under ``out``; return them."""
    from flyconfigs.cli import main

    release = re.sub(r"^vllm-", "", corpus.name)
    folders = []
    with tempfile.TemporaryDirectory(prefix="vllm-packages-") as tmp:
        code = main(["import", "vllm", str(corpus / "configs"), "--revision", f"v{release}", "--out", tmp])
        if code != 0:
            raise SystemExit(f"flyconfigs import vllm refused part of {corpus}")
        for arch_dir in sorted(Path(tmp).iterdir()):
            folder = out / f"{PREFIX}{arch_dir.name}"
            folder.mkdir(parents=True, exist_ok=True)
            for old in folder.glob("*.json"):
                old.unlink()
            for new in sorted(arch_dir.glob("*.json")):
                shutil.copyfile(new, folder / new.name)
            (folder / "TARGET").write_text(arch_dir.name + "\n")
            (folder / "NAME").write_text(f"flyconfigs-{PREFIX}{arch_dir.name}\n")
            (folder / "VERSION").write_text(release + "\n")
            (folder / "NOTICE").write_text(notice(corpus, release), encoding="utf-8")
            folders.append(folder)
    return folders


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=ROOT / "corpora" / "vllm-0.34.0")
    parser.add_argument("--out", type=Path, default=ROOT / "artifacts")
    args = parser.parse_args(argv)
    for folder in build(args.corpus, args.out):
        print(folder, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
