"""``flyconfigs export aiter``: what is installed or on ``FLYCONFIGS_PATH`` written in
another project's own format, so that adopting flyconfigs needs no change to it."""

from __future__ import annotations

from typing import Any

from flyconfigs.cli import aiter

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``export aiter``."""
    group = sub.add_parser("export", help="write what is installed in another project's own format")
    actions = group.add_subparsers(dest="export_command", required=True, metavar="FORMAT")
    text = ("aiter's tuned CSVs (OUT/aiter/configs/…, read through AITER_CONFIG_*) from every aiter table installed or "
            "on FLYCONFIGS_PATH")
    p = actions.add_parser("aiter", help=text, description=text)
    p.add_argument("--out", required=True, help="folder to write aiter/configs/… into")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=aiter.export_files)
