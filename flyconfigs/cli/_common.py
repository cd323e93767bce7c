"""What every command module shares: JSON output, usage errors, key items, files."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_PRESET", "JSON_FORMAT", "Handler", "Usage", "add_command", "add_grid_arguments", "emit_json",
           "grid_extra", "iter_json_files", "key_grids", "parse_key"]

JSON_FORMAT = 1
DEFAULT_PRESET = "perf"
"""The preset ``tune`` and ``predict`` take without ``--key-grid``, when the kernel has one."""
Handler = Callable[[argparse.Namespace], int]


class Usage(Exception):
    """A usage error found by the command line itself (exit status 2)."""


def emit_json(payload: dict[str, Any]) -> None:
    """One versioned JSON object on stdout."""
    sys.stdout.write(json.dumps({"flyconfigs_output": JSON_FORMAT, **payload}, indent=2, sort_keys=True) + "\n")


def add_command(sub: Any, name: str, handler: Handler, help_text: str, json_flag: bool = True) -> argparse.ArgumentParser:
    """A subcommand with ``--json`` (unless ``json_flag`` is false)."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text)
    if json_flag:
        parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=handler)
    return parser


def parse_key(pairs: Sequence[str]) -> dict[str, object]:
    """``AXIS=VALUE`` items as a key, items joined by commas as a file name joins them
    (see :func:`flyconfigs.registry.parse_spelled_items`)."""
    from flyconfigs.registry import parse_spelled_items

    return dict(parse_spelled_items(list(pairs)))


def iter_json_files(paths: Sequence[str]) -> list[Path]:
    """The files named, and the ``*.json`` files under the folders named; :class:`Usage`
    for a path that does not exist."""
    import os

    from flyconfigs.schema.jsonio import json_files_under

    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(json_files_under(path))
        elif os.path.lexists(path):
            files.append(path)
        else:
            raise Usage(f"{raw}: no such file or directory")
    return files


def add_grid_arguments(p: argparse.ArgumentParser) -> None:
    """``--key-grid`` and ``--dtype``, as ``tune`` and ``predict`` take them."""
    p.add_argument("--key-grid", action="append", metavar="GRID",
                   help=f"'M=1,16 N=4096 dtype=bf16', @FILE, or a preset of the kernel (default: its "
                        f"{DEFAULT_PRESET!r} preset, the benchmark grid, if it has one); repeatable")
    p.add_argument("--dtype", action="append", help="values of the dtype axis for grids that name none (comma-separated)")


def grid_extra(args: argparse.Namespace) -> dict[str, list[str]] | None:
    """The axis values ``--dtype`` gives for grids that name no dtype, or ``None``."""
    dtypes = [d for item in args.dtype or [] for d in item.split(",")]
    return {"dtype": dtypes} if dtypes else None


def key_grids(args: argparse.Namespace) -> list[str]:
    """The grids ``--key-grid`` names, else the kernel's :data:`DEFAULT_PRESET`;
    :class:`Usage` naming the kernel's presets when it has no such preset (the user
    typed none), :class:`~flyconfigs.errors.UnknownKernelError` for an unknown kernel."""
    if args.key_grid:
        return list(args.key_grid)
    from flyconfigs.kernels.plugin import key_presets
    from flyconfigs.registry import kernel_declaration

    presets = key_presets(kernel_declaration(args.kernel))
    if DEFAULT_PRESET not in presets:
        known = ", ".join(sorted(presets)) or "none"
        raise Usage(f"{args.kernel} has no {DEFAULT_PRESET!r} preset to tune by default: give --key-grid, "
                    f"a grid such as 'M=1,4096 N=8192 dtype=bf16' or one of its presets ({known})")
    return [DEFAULT_PRESET]
