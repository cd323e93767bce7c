"""``flyconfigs compare vllm OLD NEW``: what a vLLM upgrade changes in its fused-MoE
configs, per device and key (each of OLD and NEW a wheel, an installed vLLM, a checkout or
a config folder)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from flyconfigs.cli._common import Usage, add_command, emit_json

__all__ = ["register"]


def _folder(raw: str, trees: list[Any]) -> tuple[Path, str | None]:
    from flyconfigs.adapters.upstream import is_upstream, vllm_tree

    path = Path(raw)
    if is_upstream(path):
        tree = vllm_tree(path)
        trees.append(tree)
        return tree.folder, tree.revision
    if not path.is_dir():
        raise Usage(f"{raw}: not a vLLM wheel, installed vLLM, checkout or config folder")
    return path, None


def _compare(args: argparse.Namespace) -> int:
    from flyconfigs.adapters.upstream import compare_vllm

    trees: list[Any] = []
    try:
        old, old_revision = _folder(args.old, trees)
        new, new_revision = _folder(args.new, trees)
        changes = list(compare_vllm(old, new))
    finally:
        for tree in trees:
            tree.close()
    counts = {kind: sum(c.kind == kind for c in changes) for kind in ("added", "removed", "changed")}
    if args.json:
        emit_json({"command": "compare vllm", "old": {"path": args.old, "revision": old_revision},
                   "new": {"path": args.new, "revision": new_revision}, "counts": counts,
                   "changes": [c.as_json() for c in changes]})
        return 0
    last = None
    for change in changes:
        group = (change.device_name, json.dumps(change.key, sort_keys=True))
        if group != last:
            key = " ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in change.key.items())
            print(f"{change.device_name} {key}  ({change.file})")
            last = group
        what = {"added": f"added {change.new}", "removed": f"removed (was {change.old})",
                "changed": f"{change.old} -> {change.new}"}[change.kind]
        print(f"  M={change.m if change.m is not None else '?'}: {what}")
    print(f"{old_revision or args.old} -> {new_revision or args.new}: {counts['added']} added, {counts['removed']} "
          f"removed, {counts['changed']} changed", file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    """Add ``compare``."""
    group = sub.add_parser("compare", help="what changed between two upstream releases' configs, per device and key")
    actions = group.add_subparsers(dest="compare_command", required=True, metavar="FORMAT")
    p = add_command(actions, "vllm", _compare, "vLLM fused-MoE configs of two releases (wheels, installed vLLMs, "
                    "checkouts or config folders): every batch size added, removed or changed")
    p.add_argument("old", metavar="OLD")
    p.add_argument("new", metavar="NEW")
