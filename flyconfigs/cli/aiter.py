"""``flyconfigs import aiter`` and ``flyconfigs export aiter``: aiter's tuned CSVs in as
tables (``OUT/<arch>/``, one table per file and device, ready for ``flyconfigs publish``),
and what is installed or on ``FLYCONFIGS_PATH`` back out as aiter's own CSVs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from flyconfigs.cli._common import Usage, emit_json
from flyconfigs.errors import ArtifactError

__all__ = ["export_files", "import_files"]


def _csv_files(paths: list[str]) -> dict[Path, str]:
    """The files named, and under the folders named every ``*.csv`` aiter reads for a
    declared family (sorted), each with its folder relative to the folder named (``""``
    for a file named).  Other files (untuned shapes, READMEs) are left out, not refused."""
    from flyconfigs.kernels.aiter_gemm import family_of

    files: dict[Path, str] = {}
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for found in sorted(p for p in path.rglob("*.csv") if p.is_file() and family_of(p.name) is not None):
                folder = found.parent.relative_to(path).as_posix()
                files[found] = "" if folder == "." else folder
        elif path.exists():
            files[path] = ""
        else:
            raise Usage(f"{raw}: no such file or directory")
    return files


def _upstream_dir(given: str | None, relative: str, name: str) -> str:
    """The file's folder in aiter: ``--upstream-dir`` with the subfolder the file was
    found in; else the subfolder itself when it is aiter's own (``aiter/…``, or
    ``configs/…`` and ``ops/…`` below the ``aiter`` package folder named); else where
    aiter keeps a file of this name (the FlyDSL ops' beside their code, the others under
    ``aiter/configs``) with the subfolder."""
    from flyconfigs.adapters.aiter import CONFIG_DIR

    if given is not None:
        return "/".join(part for part in (given.rstrip("/"), relative) if part)
    if relative.split("/")[0] == "aiter":
        return relative
    if relative.split("/")[0] in ("configs", "ops"):
        return f"aiter/{relative}"
    base = "aiter/ops/flydsl" if name in ("gdr_decode_tuned.csv", "chunk_gdn_h_tuned.csv") else CONFIG_DIR
    return "/".join(part for part in (base, relative) if part)


def import_files(args: argparse.Namespace) -> int:
    """Import the aiter CSVs named (exit 1 if any row or file was refused)."""
    from flyconfigs.adapters.upstream import aiter_tree
    from flyconfigs.cli.imports import upstream_paths

    trees = upstream_paths(args, aiter_tree)
    try:
        return _import_files(args)
    finally:
        for tree in trees:
            tree.close()


def _import_files(args: argparse.Namespace) -> int:
    from flyconfigs.adapters.aiter import import_aiter_file
    from flyconfigs.registry.checks.replacing import replacement_refusal
    from flyconfigs.schema.jsonio import write_atomic

    files = _csv_files(args.paths)
    if not files:
        print(f"flyconfigs: error: no aiter tuned CSV of a declared family in {', '.join(args.paths)}", file=sys.stderr)
    out = Path(args.out)
    done: list[dict[str, Any]] = []
    refused: list[dict[str, str]] = []
    written: dict[Path, tuple[bytes, str]] = {}
    for path, relative in files.items():
        try:
            result = import_aiter_file(path, args.revision, upstream_dir=_upstream_dir(args.upstream_dir, relative,
                                                                                       path.name))
        except ArtifactError as exc:
            refused.extend({"file": str(path), "field": p.field, "message": p.message} for p in exc.problems)
            continue
        refused.extend({"file": str(path), "field": p.field, "message": p.message}
                       for error in result.refused for p in error.problems)
        for table in result.tables:
            target = out / table.device.arch / table.file_name()
            data = table.to_json_bytes()
            if target in written and written[target][0] != data:
                # Two files of one name (two machines' tunings of one family and device)
                # make one table: the second would replace the first's rows unseen.
                refused.append({"file": str(path), "field": "", "message": f"the same table ({target.name}) as "
                                f"{written[target][1]}, with other rows; not written (import them into separate "
                                f"--out folders, or merge the CSVs first)"})
                continue
            newer = replacement_refusal(target, "imported")
            if newer is not None:  # a newer schema's table: this flyconfigs cannot tell what it would lose
                refused.append({"file": str(target), "field": "schema_version", "message": newer})
                continue
            written[target] = (data, str(path))
            to = write_atomic(target, data)
            done.append({"from": str(path), "kernel": table.kernel.name, "device": table.device.identity.describe(),
                         "rows": len(table.rows), "to": str(to)})
    if args.json:
        emit_json({"command": "import aiter", "tables": done, "refused": refused})
    else:
        for row in done:
            print(f"{row['from']} -> {row['to']} ({row['kernel']}, {row['device']}, {row['rows']} rows)")
        for bad in refused:
            print(f"flyconfigs: refused: {bad['file']}: {bad['field'] or '<document>'}: {bad['message']}", file=sys.stderr)
        print(f"{len(done)} tables, {sum(r['rows'] for r in done)} rows imported, {len(refused)} refused", file=sys.stderr)
    return 1 if refused or not files else 0


def export_files(args: argparse.Namespace) -> int:
    """Write every aiter table installed or on ``FLYCONFIGS_PATH`` as aiter's CSVs; exit 1
    when none was found or something could not be read (listed; ``problems`` in ``--json``)."""
    from flyconfigs.adapters.aiter_export import aiter_environment, export_aiter
    from flyconfigs.registry.core.problems import ProblemLog
    from flyconfigs.registry.installed import installed_tables

    log = ProblemLog()
    written = export_aiter(installed_tables(None, log), args.out, log)
    environment = aiter_environment(written)
    # What could not be read was left out: said, and exit 1.
    problems = [f"{p.where}: {p.kind}: {p.message}" for p in log.problems() if p.kind != "collision"]
    if args.json:
        emit_json({"command": "export aiter", "files": [
            {"file": str(f.path), "upstream": f.upstream, "kernel": f.family.name, "rows": f.rows} for f in written],
            "environment": environment, "problems": problems})
    else:
        for f in written:
            print(f"{f.path} ({f.family.name}, {f.rows} rows)")
        for env, value in environment.items():
            print(f"export {env}={value}")
        for problem in problems:
            print(f"flyconfigs: problem: {problem}", file=sys.stderr)
        print(f"{len(written)} files, {sum(f.rows for f in written)} rows, {len(problems)} problem(s)", file=sys.stderr)
    if not written:
        print("flyconfigs: error: no aiter table is installed or on FLYCONFIGS_PATH", file=sys.stderr)
    return 0 if written and not problems else 1
