"""``flyconfigs validate`` and ``flyconfigs schema``: checking files, printing the JSON Schema."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flyconfigs.cli._common import Usage, add_command, emit_json
from flyconfigs.cli._reports import existing_paths

__all__ = ["register"]

def _validate(args: argparse.Namespace) -> int:
    from flyconfigs.registry import validate_path

    report = validate_path(*existing_paths(args.paths))
    results: list[dict[str, Any]] = [{"file": str(f.file), "valid": f.valid, "notes": list(f.notes),
                                      "problems": [{"field": p.field, "message": p.message} for p in f.problems]}
                                     for f in report.files]
    if args.json:
        emit_json({"command": "validate", "files": results, "invalid": report.invalid})
    else:
        for r in results:
            for p in r["problems"]:
                print(f"{r['file']}: {p['field'] or '<document>'}: {p['message']}")
            for note in r["notes"]:
                print(f"{r['file']}: note: {note}")
        if results:
            print(f"{len(results) - report.invalid} valid, {report.invalid} invalid", file=sys.stderr)
        else:
            print(f"no artifact or manifest files found in {', '.join(args.paths)}", file=sys.stderr)
    return 0 if report.ok else 1


def _schema(args: argparse.Namespace) -> int:
    from flyconfigs.schema.json_schema import load_json_schema
    from flyconfigs.schema.models import SCHEMA_VERSION

    version = args.version or SCHEMA_VERSION
    try:
        if args.kernel is not None:
            if args.kind != "artifact":
                raise Usage("--kernel narrows the artifact schema; it takes no manifest")
            from flyconfigs.registry import kernel_artifact_schema, kernel_declaration

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
