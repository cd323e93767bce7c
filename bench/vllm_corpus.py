"""vLLM's whole corpus through flyconfigs: how much imports, whether what is served is what
vLLM's own lookup serves, and whether export gives the files back.

From the committed vLLM 0.34.0 corpus (corpora/vllm-0.34.0): ``flyconfigs import vllm``
of every config file (one table per file) into a temporary folder; the files and entries
imported and each one refused with its file, field and reason; then, through a resolver
over what was imported, every (file, batch size) pair of every imported file (every entry,
the midpoints between neighbours and their neighbours, 1, and beyond both ends) on the
file's own device, against vLLM 0.34's lookup (``min(configs, key=lambda x: abs(x - M))``
over the file read as ``get_moe_configs`` reads it, in the file's order): a pair is equal
when the entry served is vLLM's (its batch size) and so is its config, and the ties tried
(two batch sizes equally near) are counted, with those where vLLM's pick is the larger
(a file listing them out of order); then ``flyconfigs export vllm`` from
that folder on ``FLYCONFIGS_PATH``, compared file by file as JSON; and the bytes of the
corpus against those of the package folders (artifacts/vllm-fused-moe-*).  Writes
``bench/results/vllm-corpus.json`` (or ``--out FOLDER``).

    python -m bench.vllm_corpus [--out bench/results]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import write_result
from tests.vllm_corpus import CORPUS, RELEASE, config_files, probe_sizes, vllm_pick, vllm_table

ROOT = Path(__file__).resolve().parents[1]


def _import(out: Path) -> dict[str, Any]:
    from flyconfigs.cli import main

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(io.StringIO()):
        main(["import", "vllm", str(CORPUS / "configs"), "--revision", RELEASE, "--out", str(out), "--json"])
    return json.loads(buffer.getvalue())  # type: ignore[no-any-return]


def _serve(out: Path, files: list[Path]) -> dict[str, Any]:
    from flyconfigs.adapters.vllm import parse_file_name
    from flyconfigs.registry import Resolver

    resolver = Resolver(paths=[str(out)], detector=None)
    pairs, ties, larger, differ = 0, 0, 0, []
    started = time.perf_counter()
    for path in files:
        named = parse_file_name(path.name)
        table = vllm_table(path)
        raw = json.loads(path.read_text())
        for m in probe_sizes(list(table)):
            served = resolver.resolve(named.decl.name, {**named.axes, "M": m}, device=named.device_name)
            theirs = vllm_pick(table, m)
            pairs += 1
            nearest = sorted(t for t in table if abs(t - m) == abs(theirs - m))
            if len(nearest) == 2:
                ties += 1
                larger += theirs == nearest[1]
            ours = served.matched_key["M"] if served.matched_key else None
            if (served.source, ours, dict(served.config)) != ("override", theirs, raw[str(theirs)]):
                differ.append({"file": path.name, "M": m, "vllm_serves_entry": theirs, "flyconfigs_serves_entry": ours})
    return {"pairs": pairs, "equal": pairs - len(differ), "differ": differ, "ties": ties,
            "ties_vllm_breaks_to_the_larger": larger, "seconds": round(time.perf_counter() - started, 2)}


def _export(out: Path, exported: Path, files: list[Path]) -> dict[str, Any]:
    from flyconfigs.adapters.vllm_export import export_vllm, write_vllm_files
    from flyconfigs.registry import Resolver

    result = export_vllm(Resolver(paths=[str(out)], detector=None))
    write_vllm_files(result, exported)
    equal = [p.name for p in files if (exported / p.name).is_file()
             and json.loads((exported / p.name).read_text()) == json.loads(p.read_text())]
    return {"files_written": len(result.files), "files_equal_as_json": len(equal), "skipped": result.skipped,
            "not_equal": sorted(p.name for p in files if p.name not in set(equal))}


def _bytes(paths: list[Path]) -> int:
    return sum(p.stat().st_size for p in paths)


def run() -> dict[str, Any]:
    files = config_files()
    with tempfile.TemporaryDirectory(prefix="vllm-corpus-") as tmp:
        out = Path(tmp) / "imported"
        report = _import(out)
        refused_files = sorted({r["file"] for r in report["refused"] if r["field"].startswith("<file name>")})
        whole = [p for p in files if str(p) not in refused_files]
        entries = sum(len(vllm_table(p)) for p in files)
        refused_entries = [r for r in report["refused"] if not r["field"].startswith("<file name>")]
        tables = [r for r in report["files"] if r["entry"].startswith("table")]
        served = _serve(out, whole)
        exported = _export(out, Path(tmp) / "exported", whole)
    packages = sorted(ROOT.glob("artifacts/vllm-fused-moe-*/*.json"))
    return {
        "upstream": {"project": "vllm-project/vllm", "release": RELEASE, "path": "vllm/model_executor/layers/fused_moe/configs",
                     "origin": "corpora/vllm-0.34.0/ORIGIN.md", "licence": "Apache-2.0"},
        "files": len(files),
        "files_imported": len(whole),
        "files_imported_percent": round(100.0 * len(whole) / len(files), 2),
        "files_refused": [{"file": Path(r["file"]).name, "field": r["field"], "message": r["message"][:160]}
                          for r in report["refused"] if r["field"].startswith("<file name>")],
        "entries": entries,
        "entries_refused": [{"file": Path(r["file"]).name, "field": r["field"], "message": r["message"]}
                            for r in refused_entries],
        "tables_written": len(tables),
        "artifacts_written": len(report["files"]) - len(tables),
        "served_equals_vllm_lookup": served,
        "export_round_trip": exported,
        "sizes": {"corpus_json_bytes": _bytes(files), "package_json_bytes": _bytes(packages),
                  "package_json_files": len(packages)},
        "environment": {k: v for k, v in os.environ.items() if k.startswith("FLYCONFIGS_")},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="folder for vllm-corpus.json (default bench/results)")
    args = parser.parse_args()
    path = write_result("vllm-corpus", run(), args.out)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
