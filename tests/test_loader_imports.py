"""A resolve imports only what it uses: from FLYCONFIGS_PATH alone it reads no manifest
and no table, so neither model is imported (a few ms each to build), nor
``packaging.utils`` (``packaging.tags`` and ``subprocess`` with it); a package's
manifest and a folder's table still load their models when met."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from factories import make_artifact
from flyconfigs.schema import write_atomic

DEFERRED = ["flyconfigs.schema.manifest", "flyconfigs.schema.table", "flyconfigs.registry.sources.tables", "packaging.utils",
            "packaging.tags"]
KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys
import flyconfigs.registry
after_import = sorted(m for m in {deferred!r} if m in sys.modules)
r = flyconfigs.registry.resolve("rmsnorm", {key!r}, "sm90:132:NVIDIA H200")
after_resolve = sorted(m for m in {deferred!r} if m in sys.modules)
import flyconfigs.schema
manifest = flyconfigs.schema.Manifest.__name__, flyconfigs.schema.MANIFEST_FILE
print(json.dumps({{"source": r.source, "after_import": after_import, "after_resolve": after_resolve,
                  "manifest": manifest, "problems": [str(p) for p in flyconfigs.registry.default_resolver().problems.problems()]}}))
"""


def _resolve_in_fresh_process(folder: Path) -> dict[str, object]:
    # From the checkout's root, so that the checkout is imported whether or not it is installed.
    env = {"PATH": "/usr/bin:/bin", "FLYCONFIGS_PATH": str(folder), "FLYCONFIGS_NO_GPU_DETECT": "1"}
    result = subprocess.run([sys.executable, "-c", CHILD.format(deferred=DEFERRED, key=KEY)], capture_output=True,
                            text=True, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr
    out: dict[str, object] = json.loads(result.stdout)
    return out


def test_a_resolve_from_flyconfigs_path_imports_no_manifest_table_or_packaging_utils(tmp_path: Path) -> None:
    folder = tmp_path / "tuned"
    artifact = make_artifact(key=KEY)
    write_atomic(folder / artifact.file_name(), artifact.to_json_bytes())
    out = _resolve_in_fresh_process(folder)
    assert out["source"] == "override", out
    assert out["after_import"] == [] and out["after_resolve"] == [], out
    assert out["manifest"] == ["Manifest", "manifest.json"]  # the lazy names still resolve


def test_a_table_in_flyconfigs_path_still_loads_the_table_model(tmp_path: Path) -> None:
    folder = tmp_path / "tuned"
    artifact = make_artifact(key=KEY)
    write_atomic(folder / artifact.file_name(), artifact.to_json_bytes())
    # A table document (schema 1.6) of another kernel: it is recognised as a table, so
    # the table's model is imported to validate it (and reports it invalid).
    write_atomic(folder / "table.json", json.dumps({"form": "table", "schema_version": "1.6"}).encode())
    out = _resolve_in_fresh_process(folder)
    assert out["source"] == "override", out
    assert "flyconfigs.schema.table" in out["after_resolve"] and "flyconfigs.registry.sources.tables" in out["after_resolve"]
    assert any("table.json" in p for p in out["problems"]), out["problems"]  # type: ignore[union-attr]


def test_the_schema_package_names_the_manifest_lazily() -> None:
    import flyconfigs.schema
    from flyconfigs.schema import MANIFEST_FILE, Manifest, ManifestRow, manifest, target_module

    assert (MANIFEST_FILE, Manifest, ManifestRow, target_module) == (
        manifest.MANIFEST_FILE, manifest.Manifest, manifest.ManifestRow, manifest.target_module)
    assert {"Manifest", "ManifestRow", "MANIFEST_FILE", "target_module"} <= set(dir(flyconfigs.schema))
    namespace: dict[str, object] = {}
    exec("from flyconfigs.schema import *", namespace)
    assert namespace["Manifest"] is Manifest
