"""Byte for byte: which upstream files come back identical after import and export.

Every tuned CSV of the aiter corpus (corpora/aiter-e4048607) through ``flyconfigs import
aiter`` and ``flyconfigs export aiter``, and every vLLM 0.34.0 file (corpora/vllm-0.34.0)
through ``import vllm`` and ``export vllm``, each export compared with its upstream file
byte for byte.  Each table keeps its upstream file's spelling (schema 1.8), so every file
should come back identical; one that does not is classed by its first difference
(``number spelling``: a cell that reads as the same number, ``7.780`` and ``7.78``; ``short
row``: a row with fewer cells than the header comes back padded; ``row left out``: a row
refused at import not given back; ``JSON layout``: equal as JSON, other indentation or final
newline; ``not exported``: no table was made).  Writes ``bench/results/round-trip-bytes.json``
(or ``--out FOLDER``).

    python -m bench.round_trip_bytes [--out bench/results]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import write_result
from tests.aiter_corpus import CORPUS as AITER, as_read, tuned_files, upstream_path
from tests.vllm_corpus import config_files


def _cli(argv: list[str], path: list[Path] | None = None) -> None:
    from flyconfigs.cli import main
    from flyconfigs.registry import default_resolver

    old = os.environ.get("FLYCONFIGS_PATH")
    if path is not None:
        os.environ["FLYCONFIGS_PATH"] = os.pathsep.join(map(str, path))
    try:
        default_resolver().refresh()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(argv)
    finally:
        if old is None:
            os.environ.pop("FLYCONFIGS_PATH", None)
        else:
            os.environ["FLYCONFIGS_PATH"] = old
        default_resolver().refresh()


def _csv_kind(upstream: bytes, exported: bytes) -> str:
    a, b = upstream.decode().splitlines(), exported.decode().splitlines()
    if len(a) != len(b):
        return "row left out" if len(a) > len(b) else "row added"
    for x, y in zip(a, b, strict=True):
        if x != y:
            cells_x, cells_y = x.split(","), y.split(",")
            if len(cells_x) < len(cells_y) and cells_y[:len(cells_x)] == cells_x:
                return "short row"
            if len(cells_x) == len(cells_y) and as_read(cells_x) == as_read(cells_y):
                return "number spelling"
            return "other"
    return "line endings or final newline"


def _aiter(tmp: Path) -> dict[str, Any]:
    files = tuned_files()
    _cli(["import", "aiter", str(AITER / "aiter"), "--out", str(tmp / "ai")])
    _cli(["export", "aiter", "--out", str(tmp / "ae")], sorted((tmp / "ai").iterdir()))
    kinds: Counter[str] = Counter()
    differ: dict[str, str] = {}
    for path in files:
        exported = tmp / "ae" / upstream_path(path)
        if not exported.exists():
            kind = "not exported"
        elif exported.read_bytes() == path.read_bytes():
            continue
        else:
            kind = _csv_kind(path.read_bytes(), exported.read_bytes())
        kinds[kind] += 1
        differ[upstream_path(path)] = kind
    return {"files": len(files), "identical": len(files) - len(differ), "differ_by_kind": dict(kinds),
            "differ": differ}


def _vllm(tmp: Path) -> dict[str, Any]:
    files = config_files()
    _cli(["import", "vllm", *map(str, files), "--out", str(tmp / "vi")])
    _cli(["export", "vllm", "--out", str(tmp / "ve")], sorted((tmp / "vi").iterdir()))
    kinds: Counter[str] = Counter()
    for path in files:
        exported = tmp / "ve" / path.name
        if not exported.exists():
            kinds["not exported"] += 1
        elif exported.read_bytes() != path.read_bytes():
            same = json.loads(exported.read_bytes()) == json.loads(path.read_bytes())
            kinds["JSON layout" if same else "other"] += 1
    return {"files": len(files), "identical": len(files) - sum(kinds.values()), "differ_by_kind": dict(kinds)}


def run() -> dict[str, Any]:
    """Both corpora through import and export, compared byte for byte."""
    with tempfile.TemporaryDirectory() as tmp:
        return {"aiter": _aiter(Path(tmp)), "vllm": _vllm(Path(tmp))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, help="folder for round-trip-bytes.json (default: bench/results)")
    args = parser.parse_args()
    result = run()
    path = write_result("round-trip-bytes", result, args.out)
    for name in ("aiter", "vllm"):
        r = result[name]
        print(f"{name}: {r['identical']} of {r['files']} files byte-identical; differ: {r['differ_by_kind']}")
    print(f"-> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
