"""``flyconfigs validate`` and ``flyconfigs schema``: checking files, printing the JSON Schema."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flyconfigs.cli._common import Usage, add_command, emit_json, iter_json_files
from flyconfigs.errors import FlyconfigsError

__all__ = ["register"]

_FIELD_OF = {"test-double": "provenance.backend", "invalid-config": "winner.config", "kernel-name-clash": "key",
             "stale-artifact": "kernel"}
"""The artifact field each refusal of :func:`flyconfigs.registry.checks.check.check_winner` is about."""


def _validate(args: argparse.Namespace) -> int:
    from flyconfigs.registry.checks.check import check_entries, check_package_folder, check_table, check_winner
    from flyconfigs.registry.core.problems import Problem, ProblemLog
    from flyconfigs.registry.sources.entries import Source
    from flyconfigs.registry.sources.packs import PackRef, override_table
    from flyconfigs.registry.sources.tables import TableRef
    from flyconfigs.schema import parse_artifact, read_document
    from flyconfigs.schema.load import parse_pack, parse_table
    from flyconfigs.schema.manifest import MANIFEST_FILE
    from flyconfigs.schema.pack import is_pack_document
    from flyconfigs.schema.table import is_table_document

    results = []
    for path in iter_json_files(args.paths):
        entry: dict[str, Any] = {"file": str(path), "valid": True, "problems": [], "notes": []}
        try:
            if path.name == MANIFEST_FILE:
                found, entry["notes"] = check_package_folder(path.parent)
                entry["problems"] = [{"field": p.where, "message": f"{p.kind}: {p.message}"} for p in found]
            elif is_pack_document(document := read_document(path, schema_bounds_depth=True)):
                # A pack (1.7) is checked row by row, and its measurements file too.
                report = parse_pack(document, str(path))[1]
                entry["notes"] = [f"ignored field of a newer minor: {f}" for f in report.ignored_fields]
                log = ProblemLog()
                pack = override_table(path, document, Source("override", str(path.parent), (0, 0)), log)
                entry["notes"] += check_entries(pack.entries(log) if pack is not None else [], log)
                if isinstance(pack, PackRef):
                    try:
                        pack.measurements()
                    except FlyconfigsError as exc:
                        log.report(Problem("invalid-artifact", str(pack.measurements_path()), str(exc)))
                entry["problems"] = [{"field": p.where.removeprefix(str(path)).lstrip("#") or _FIELD_OF.get(p.kind, ""),
                                      "message": f"{p.kind}: {p.message}"} for p in log.problems()]
            elif is_table_document(document):
                parsed, report = parse_table(document, str(path))
                entry["notes"] = [f"ignored field of a newer minor: {f}" for f in report.ignored_fields]
                log = ProblemLog()
                table = TableRef(parsed.kernel.name, parsed.device.identity, str(path),
                                 Source("override", str(path.parent), (0, 0)), rows=len(parsed.rows), table=parsed)
                entry["notes"] += check_table(table, log)
                entry["problems"] = [{"field": p.where.removeprefix(str(path)).lstrip("#") or _FIELD_OF.get(p.kind, ""),
                                      "message": f"{p.kind}: {p.message}"} for p in log.problems()]
            else:
                artifact, report = parse_artifact(document, str(path))
                entry["notes"] = [f"ignored field of a newer minor: {f}" for f in report.ignored_fields]
                entry["notes"] += [f"migrated from {m}" for m in report.migrated_from]
                log = ProblemLog()
                entry["notes"] += check_winner(artifact, str(path), log)
                entry["problems"] = [{"field": _FIELD_OF.get(p.kind, ""), "message": f"{p.kind}: {p.message}"}
                                     for p in log.problems()]
        except FlyconfigsError as exc:
            problems = getattr(exc, "problems", ())
            entry["problems"] = [{"field": p.field, "message": p.message} for p in problems] or [
                {"field": "", "message": str(exc)}
            ]
        entry["valid"] = not entry["problems"]
        results.append(entry)
    by_file = {r["file"]: r for r in results}
    for problem in _duplicates(args.paths):
        # A table's row is named ``<table>#<entry>``: the problem is the table file's.
        where, _, row_entry = problem.where.partition("#") if problem.where not in by_file else (problem.where, "", "")
        row = by_file.get(where)
        if row is not None:
            row["problems"].append({"field": row_entry or "key", "message": f"{problem.kind}: {problem.message}"})
            row["valid"] = False
    bad = sum(not r["valid"] for r in results)
    if args.json:
        emit_json({"command": "validate", "files": results, "invalid": bad})
    else:
        for r in results:
            for p in r["problems"]:
                print(f"{r['file']}: {p['field'] or '<document>'}: {p['message']}")
            for note in r["notes"]:
                print(f"{r['file']}: note: {note}")
        if results:
            print(f"{len(results) - bad} valid, {bad} invalid", file=sys.stderr)
        else:
            print(f"no artifact or manifest files found in {', '.join(args.paths)}", file=sys.stderr)
    return 1 if bad or not results else 0


def _duplicates(paths: list[str]) -> list[Any]:
    """Artifacts of one slot twice in one folder named: which one serves is what the
    loader's search (:mod:`flyconfigs.registry.search.steps`) serves from that folder alone."""
    import logging
    from pathlib import Path

    from flyconfigs.registry import Resolver

    # The loader's search logs what it skips; validate reports each problem once, itself.
    logger = logging.getLogger("flyconfigs.registry")
    found: list[Any] = []
    disabled, logger.disabled = logger.disabled, True
    try:
        for raw in paths:
            if Path(raw).is_dir():
                resolver = Resolver([raw], detector=None, packages=False)
                resolver.collisions()
                found += [p for p in resolver.problems.problems() if p.kind == "duplicate"]
    finally:
        logger.disabled = disabled
    return found


def _schema(args: argparse.Namespace) -> int:
    from flyconfigs.schema.json_schema import load_json_schema
    from flyconfigs.schema.models import SCHEMA_VERSION

    version = args.version or SCHEMA_VERSION
    try:
        if args.kernel is not None:
            if args.kind != "artifact":
                raise Usage("--kernel narrows the artifact schema; it takes no manifest")
            from flyconfigs.registry import kernel_declaration
            from flyconfigs.registry.checks.kernel_schema import kernel_artifact_schema

            document = kernel_artifact_schema(kernel_declaration(args.kernel), version)
        else:
            document = load_json_schema(args.kind, version)
    except KeyError as exc:
        raise Usage(str(exc.args[0])) from None
    if args.json:
        emit_json({"command": "schema", "kind": args.kind, "version": version, "kernel": args.kernel, "schema": document})
    else:
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    return 0


def register(sub: Any) -> None:
    """Add ``validate`` and ``schema``."""
    p = add_command(sub, "validate", _validate, "check artifact, table and manifest files (folders are searched)")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p = add_command(sub, "schema", _schema, "print a JSON Schema of the format")
    p.add_argument("kind", nargs="?", default="artifact", choices=["artifact", "manifest", "table"])
    p.add_argument("--version", help="schema version (default: the current one)")
    p.add_argument("--kernel", metavar="NAME",
                   help="the artifact schema narrowed to one declared kernel: its name, typed key and config")
