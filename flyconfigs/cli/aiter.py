"""``flyconfigs import aiter`` and ``flyconfigs export aiter``: aiter's tuned CSVs in as
tables (``OUT/<arch>/``, one table per file and device, ready for ``flyconfigs publish``),
and what is installed or on ``FLYCONFIGS_PATH`` back out as aiter's own CSVs."""

from __future__ import annotations

import argparse
import sys

from flyconfigs.cli._common import emit_json
from flyconfigs.cli._reports import existing_paths, render_import

__all__ = ["export_files", "import_files"]


def import_files(args: argparse.Namespace) -> int:
    """Import the aiter CSVs named (exit 1 if any row or file was refused)."""
    from flyconfigs.adapters.importing import write_imports

    report = write_imports("aiter", existing_paths(args.paths), args.out, revision=args.revision,
                           upstream_dir=args.upstream_dir)
    return render_import(report, args.paths, args.json)


def export_files(args: argparse.Namespace) -> int:
    """Write every aiter table installed or on ``FLYCONFIGS_PATH`` as aiter's CSVs; exit 1
    when none was found or something could not be read (listed; ``problems`` in ``--json``)."""
    from flyconfigs.adapters.aiter_export import aiter_environment, export_aiter
    from flyconfigs.registry import ProblemLog, installed_tables

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
