"""Keys to tune, from a grid on the command line, a file, or a kernel's preset.

A grid is ``AXIS=V1,V2 AXIS=V…`` (the cartesian product; values read as
:func:`~flyconfigs.registry.parse_value` reads them, commas inside ``[…]``, ``{…}`` or
``"…"`` belonging to the value).  A file (``@PATH``) holds a JSON list of key objects,
or one grid per line.  A bare name (``perf``) is one of the kernel's ``presets``.  Each
key is completed by the kernel (``complete_key``) and nothing here knows any kernel.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flyconfigs.errors import ArtifactError, InvalidKeyError
from flyconfigs.kernels.plugin import complete_key, key_presets
from flyconfigs.registry.declarations import KernelDecl, parse_value
from flyconfigs.schema.canonical import canonical_text
from flyconfigs.schema.jsonio import parse_document, read_file_bytes

__all__ = ["parse_grid", "parse_grids"]


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


def parse_grid(text: str, extra: Mapping[str, Sequence[Any]] | None = None) -> list[dict[str, Any]]:
    """Keys of one grid expression, with ``extra`` axes (name → values) for the axes the
    expression does not name; :class:`InvalidKeyError` naming the bad item."""
    axes: dict[str, list[Any]] = {}
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
    for axis, given in (extra or {}).items():
        if axis not in axes and given:
            axes[axis] = list(given)
    names = list(axes)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(axes[n] for n in names))]


def parse_grids(grids: Sequence[str], decl: KernelDecl | None = None,
                extra: Mapping[str, Sequence[Any]] | None = None) -> list[dict[str, Any]]:
    """Keys of several grids (a preset of ``decl``, ``@file`` or expressions), each
    completed by ``decl``, duplicates dropped."""
    presets = key_presets(decl) if decl is not None else {}
    keys: list[dict[str, Any]] = []
    for grid in grids:
        if grid in presets:
            for line in presets[grid]:
                keys.extend(parse_grid(line, extra))
        elif grid.startswith("@"):
            keys.extend(_keys_of_file(Path(grid[1:]), extra))
        elif "=" not in grid:
            known = ", ".join(sorted(presets)) or "none"
            raise InvalidKeyError(f"--key-grid {grid!r} is neither AXIS=V1,V2 …, @FILE nor a preset (presets: {known})")
        else:
            keys.extend(parse_grid(grid, extra))
    if decl is not None:
        keys = [complete_key(decl, k) for k in keys]
    unique: dict[str, dict[str, Any]] = {}
    for key in keys:
        # canonical text, not ==, so that {"M": 1} and {"M": true} stay two keys
        unique.setdefault(canonical_text(key), key)
    return list(unique.values())


def _keys_of_file(path: Path, extra: Mapping[str, Sequence[Any]] | None) -> list[dict[str, Any]]:
    try:
        text = read_file_bytes(path).decode("utf-8")
    except FileNotFoundError:
        raise InvalidKeyError(f"cannot read key file {path}: no such file") from None
    except (ArtifactError, UnicodeDecodeError) as exc:
        raise InvalidKeyError(f"cannot read key file {path}: {exc}") from None
    if text.lstrip().startswith("["):
        try:
            loaded = parse_document(text.encode("utf-8"), str(path))
        except ArtifactError as exc:
            raise InvalidKeyError(str(exc)) from None
        if not isinstance(loaded, list) or not all(isinstance(k, dict) for k in loaded):
            raise InvalidKeyError(f"{path}: expected a JSON list of key objects")
        return loaded
    keys = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            keys.extend(parse_grid(line, extra))
    return keys
