"""``flyconfigs predict`` with the real hipRTC on the CPU (no AMD GPU here): a small grid
compiled for an MI300X, ranked by RMSNorm's cost model, emitted as predicted artifacts
and served as predicted; the committed gfx942 package's winners compile without spills
and with the resources their artifacts record; and the usage errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from flyconfigs.cli import main
from flyconfigs.schema import load_artifact, write_atomic
from flyconfigs.schema.pack import folder_artifacts
from hiprtc_helpers import needs_prefix, run_in_prefix

ROOT = Path(__file__).resolve().parents[1]
GFX942 = ROOT / "artifacts" / "gfx942"


@needs_prefix
@pytest.mark.hiprtc
@pytest.mark.slow
def test_predict_compiles_ranks_and_emits_predicted_artifacts_that_are_served_as_such(tmp_path: Path) -> None:
    out = tmp_path / "predicted"
    summary = run_in_prefix(f"""
import contextlib, io, json
from flyconfigs.cli import main
buffer = io.StringIO()
with contextlib.redirect_stdout(buffer):
    code = main(["predict", "rmsnorm", "--device", "MI300X", "--target", "gfx942", "--key-grid",
                 "M=1,4096 N=4096 dtype=bf16", "--budget", "6", "--out", {str(out)!r}, "--json"])
print(json.dumps({{"code": code, **json.loads(buffer.getvalue())}}))
""")
    assert summary["code"] == 0 and summary["predicted"] == 2
    for path in summary["artifacts"]:
        artifact = load_artifact(Path(path))
        assert artifact.selection.rule == "predicted" and artifact.provenance.model is not None
        assert artifact.provenance.backend == "hip" and artifact.device.product == "AMD Instinct MI300X"
        assert artifact.winner.timing is None and not any(c.timing for c in artifact.candidates)
        compiled = [c for c in artifact.candidates if c.status == "compiled"]
        assert compiled and all(c.predicted_us and c.resources and c.resources.registers for c in compiled)
        winner = next(c for c in compiled if dict(c.config) == dict(artifact.winner.config))
        assert winner.resources.spill_bytes == 0
        assert winner.predicted_us == min(c.predicted_us for c in compiled)
    env_path = str(out)
    import os

    os.environ["FLYCONFIGS_PATH"] = env_path
    try:
        from flyconfigs import resolve
        from flyconfigs.registry import default_resolver

        default_resolver().refresh()
        r = resolve("rmsnorm", {"M": 4096, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16"}, "MI300X")
        assert (r.selection, r.layer, r.source) == ("predicted", "exact", "override")
    finally:
        del os.environ["FLYCONFIGS_PATH"]
        default_resolver().refresh()


def test_the_gfx942_package_is_predicted_for_three_products_and_no_winner_spills() -> None:
    artifacts = folder_artifacts(GFX942)
    assert (GFX942 / "VERSION").read_text().strip()
    products = {a.device.product for a in artifacts}
    assert products == {"AMD Instinct MI300X", "AMD Instinct MI325X", "AMD Instinct MI300A"}
    for product in products:
        keys = [dict(a.key) for a in artifacts if a.device.product == product]
        assert len(keys) >= 50, (product, len(keys))
    for artifact in artifacts:
        assert artifact.selection.rule == "predicted" and artifact.device.arch == "gfx942"
        winner = next(c for c in artifact.candidates if dict(c.config) == dict(artifact.winner.config))
        assert winner.status == "compiled" and winner.resources and winner.resources.spill_bytes == 0


@needs_prefix
@pytest.mark.hiprtc
def test_a_sample_of_gfx942_winners_recompiles_with_the_resources_recorded(tmp_path: Path) -> None:
    everything = folder_artifacts(GFX942)
    sample = [str(write_atomic(tmp_path / a.file_name(), a.to_json_bytes()))
              for a in everything[:: max(1, len(everything) // 6)]]
    report = run_in_prefix(f"""
import json
from flyconfigs.gpu import get_backend
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema import load_artifact
backend = get_backend("hip", arch="gfx942")
out = []
for path in {sample!r}:
    a = load_artifact(path)
    config = dict(a.winner.config)
    compiled = backend.compile(SPEC.build(config, a.key, DeviceQuery.of(a.device.identity)))
    got = backend.resources(compiled, config["threads"] * config["rows_per_block"]).model_dump()
    want = next(c for c in a.candidates if dict(c.config) == config).resources.model_dump()
    out.append({{"file": path, "got": got, "want": want}})
print(json.dumps(out))
""")
    assert len(report) >= 6
    for row in report:
        assert row["got"] == row["want"], row


def test_predict_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["predict", "rmsnorm", "--device", "MI999", "--out", str(tmp_path)]) == 2
    assert "not a product of the catalog" in capsys.readouterr().err
    assert main(["predict", "rmsnorm", "--device", "MI300X", "--target", "sm90", "--out", str(tmp_path)]) == 2
    assert "is gfx942" in capsys.readouterr().err
    assert main(["predict", "fused_add_rmsnorm", "--device", "MI300X", "--key-grid", "smoke",
                 "--out", str(tmp_path)]) == 1
    assert "declares no cost model" in capsys.readouterr().err
