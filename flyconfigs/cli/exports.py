"""``flyconfigs export vllm|aiter``: what is installed or on ``FLYCONFIGS_PATH`` written in
another project's own format, so that adopting flyconfigs needs no change to it.

``vllm`` writes, from the installed data packages and ``FLYCONFIGS_PATH`` (in their
precedence), one vLLM fused-MoE config file per device and key group into ``--out``,
named as vLLM names the file it reads: point ``VLLM_TUNED_CONFIG_FOLDER`` at the folder.
A file already there of the same name is replaced (atomically); other files are left
alone.  The exit status is 1 when nothing was found to export, something was left out or
something could not be read (each listed; ``problems`` in ``--json``).
``aiter`` writes aiter's tuned CSVs (see :mod:`flyconfigs.cli.aiter`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from flyconfigs.cli import aiter
from flyconfigs.cli._common import emit_json

__all__ = ["register"]


def _vllm(args: argparse.Namespace) -> int:
    from flyconfigs.adapters.vllm_export import export_vllm, write_vllm_files
    from flyconfigs.registry import default_resolver

    resolver = default_resolver()
    exported = export_vllm(resolver)
    written = write_vllm_files(exported, args.out) if exported.files else []
    # What could not be read (a file on FLYCONFIGS_PATH, a package) was left out: said, and exit 1.
    problems = [f"{p.where}: {p.kind}: {p.message}" for p in resolver.problems.problems() if p.kind != "collision"]
    if args.json:
        emit_json({"command": "export vllm", "files": [str(p) for p in written], "skipped": exported.skipped,
                   "problems": problems})
    else:
        for path in written:
            print(path)
        for why in exported.skipped:
            print(f"flyconfigs: skipped: {why}", file=sys.stderr)
        for problem in problems:
            print(f"flyconfigs: problem: {problem}", file=sys.stderr)
        if not written:
            print("flyconfigs: error: no vllm_fused_moe or vllm_flydsl_moe artifacts installed or on FLYCONFIGS_PATH",
                  file=sys.stderr)
        print(f"{len(written)} files written to {args.out}, {len(exported.skipped)} skipped, {len(problems)} problem(s)",
              file=sys.stderr)
    return 0 if written and not exported.skipped and not problems else 1


def register(sub: Any) -> None:
    """Add ``export vllm`` and ``export aiter``."""
    group = sub.add_parser("export", help="write what is installed in another project's own format")
    actions = group.add_subparsers(dest="export_command", required=True, metavar="FORMAT")
    text = ("vLLM fused-MoE config files (E=…,N=…,device_name=….json), one per device and key group, for "
            "VLLM_TUNED_CONFIG_FOLDER")
    p = actions.add_parser("vllm", help=text, description=text)
    p.add_argument("--out", required=True, help="the folder to write the files into (created)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=_vllm)
    text = ("aiter's tuned CSVs (OUT/aiter/configs/…, read through AITER_CONFIG_*) from every aiter table installed or "
            "on FLYCONFIGS_PATH")
    p = actions.add_parser("aiter", help=text, description=text)
    p.add_argument("--out", required=True, help="folder to write aiter/configs/… into")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=aiter.export_files)
