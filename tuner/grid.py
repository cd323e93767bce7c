"""Keys to tune, from a grid on the command line or a file.

A grid is ``AXIS=V1,V2 AXIS=V…`` (the cartesian product; integer values become ints);
``weight_dtype`` defaults to ``dtype``.  A file (``@PATH``) holds a JSON list of key
objects, or one grid per line.  The benchmark grid (bench/rmsnorm.py) is the preset ``perf``.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from flyconfigs.errors import ArtifactError, InvalidKeyError, TuneError
from flyconfigs.registry.declarations import parse_value
from flyconfigs.schema.canonical import canonical_text
from flyconfigs.schema.jsonio import parse_document, read_file_bytes

__all__ = ["PERF_GRID", "parse_grid", "parse_grids"]

PERF_GRID = [
    "M=1,16,128,1024,4096,16384,65536 N=1024,2048,4096,5120,8192,16384 dtype=bf16",
    "M=4096,65536 N=4096,8192 dtype=fp16,fp32",
]


def _split_values(text: str) -> list[str] | None:
    """``text`` split at the commas outside brackets and quotes (``[4096,8192],[1,2]`` is two
    values); None when the brackets or quotes do not balance."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if quoted:
            quoted = ch != '"' or text[i - 1] == "\\"
        elif ch == '"':
            quoted = True
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth < 0:
                return None
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth or quoted:
        return None
    parts.append(text[start:])
    return parts


def parse_grid(text: str, dtypes: list[str] | None = None) -> list[dict[str, Any]]:
    """Keys of one grid expression; :class:`InvalidKeyError` naming the bad item."""
    axes: dict[str, list[int | str]] = {}
    for item in text.split():
        name, sep, values = item.partition("=")
        parts = _split_values(values)
        if not sep or not name or not values or parts is None or any(not v for v in parts):
            raise InvalidKeyError(f"grid item {item!r} is not AXIS=V1,V2,…")
        if name in axes:
            raise InvalidKeyError(f"grid axis {name!r} given twice in {text!r}")
        axes[name] = [parse_value(v) for v in parts]
    if not axes:
        raise InvalidKeyError("empty key grid")
    if "dtype" not in axes and dtypes:
        axes["dtype"] = list(dtypes)
    names = list(axes)
    keys = []
    for combo in itertools.product(*(axes[n] for n in names)):
        key = dict(zip(names, combo, strict=True))
        if "dtype" in key and "weight_dtype" not in key:
            key["weight_dtype"] = key["dtype"]
        keys.append(key)
    return keys


def parse_grids(grids: list[str], dtypes: list[str] | None = None) -> list[dict[str, Any]]:
    """Keys of several grids (``perf``, ``@file`` or expressions), duplicates dropped."""
    keys: list[dict[str, Any]] = []
    for grid in grids:
        if grid == "perf":
            for line in PERF_GRID:
                keys.extend(parse_grid(line))
        elif grid.startswith("@"):
            path = Path(grid[1:])
            try:
                text = read_file_bytes(path).decode("utf-8")
            except FileNotFoundError:
                raise TuneError(f"cannot read key file {path}: no such file") from None
            except (ArtifactError, UnicodeDecodeError) as exc:
                raise TuneError(f"cannot read key file {path}: {exc}") from None
            if text.lstrip().startswith("["):
                try:
                    loaded = parse_document(text.encode("utf-8"), str(path))
                except ArtifactError as exc:
                    raise TuneError(str(exc)) from None
                if not isinstance(loaded, list) or not all(isinstance(k, dict) for k in loaded):
                    raise TuneError(f"{path}: expected a JSON list of key objects")
                keys.extend(loaded)
            else:
                for line in text.splitlines():
                    if line.strip() and not line.lstrip().startswith("#"):
                        keys.extend(parse_grid(line, dtypes))
        else:
            keys.extend(parse_grid(grid, dtypes))
    unique: dict[str, dict[str, Any]] = {}
    for key in keys:
        # canonical text, not ==, so that {"M": 1} and {"M": true} stay two keys
        unique.setdefault(canonical_text(key), key)
    return list(unique.values())
