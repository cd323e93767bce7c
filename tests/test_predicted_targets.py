"""The predicted packages of the GPUs no tuning has run on: sm80 (A100, A800), sm100 (B200,
GB200), gfx90a (MI210, MI250X) and gfx950 (MI350X, MI355X).  Each says what it is
(``predicted``, RMSNorm's cost model named with its version), covers the benchmark grid
for every product it names, serves winners the family's rules accept for that product,
and every served winner compiles for its target with the resources its artifact records:
NVRTC for the sm targets (on the CPU, resources read from the cubin), hipRTC for the gfx
ones (ROCm 5.7 for gfx90a, ROCm 6.4 for gfx950, which ROCm 5.7 does not know)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.kernels.rmsnorm.declaration import PERF_GRID
from flyconfigs.kernels.rmsnorm.model import MODEL
from flyconfigs.registry import DeviceQuery
from flyconfigs.registry.core.products import product_catalog
from flyconfigs.schema import Artifact
from flyconfigs.schema.pack import folder_artifacts
from flyconfigs.tuner.grid import parse_grids
from hiprtc_helpers import PREFIX, PREFIX6, needs_prefix, needs_prefix6, run_in_prefix
from nvrtc_helpers import needs_nvrtc

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
PRODUCTS = {
    "sm80": {"NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe", "NVIDIA A800-SXM4-80GB"},
    "sm100": {"NVIDIA B200", "NVIDIA GB200"},
    "gfx90a": {"AMD Instinct MI210", "AMD Instinct MI250X"},
    "gfx950": {"AMD Instinct MI350X", "AMD Instinct MI355X"},
}


@functools.cache
def _artifacts(target: str) -> tuple[tuple[Path, Artifact], ...]:
    # Each packed row as the file it was made from would be named.
    return tuple((Path(a.file_name()), a) for a in folder_artifacts(ARTIFACTS / target, "rmsnorm"))


def _grid() -> set[str]:
    kernel = SPEC
    return {json.dumps(k, sort_keys=True) for k in (kernel.check_key(k) for k in parse_grids(list(PERF_GRID), kernel, {}))}


@pytest.mark.parametrize("target", sorted(PRODUCTS))
def test_each_package_predicts_the_benchmark_grid_for_its_products_and_says_so(target: str) -> None:
    folder = ARTIFACTS / target
    assert (folder / "VERSION").read_text().strip()
    assert "predicted" in (folder / "CHANGELOG.md").read_text()
    found = _artifacts(target)
    catalog = {p.device.product: p.device for p in product_catalog().products}
    assert {a.device.product for _, a in found} == PRODUCTS[target]
    grid = _grid()
    for product in PRODUCTS[target]:
        keys = {json.dumps(dict(a.key), sort_keys=True) for _, a in found if a.device.product == product}
        assert keys == grid, product
    for path, artifact in found:
        assert artifact.selection.rule == "predicted" and artifact.device.arch == target, path.name
        model = artifact.provenance.model
        assert model is not None and (model.name, model.version) == (MODEL.name, MODEL.version), path.name
        assert artifact.device == catalog[artifact.device.product], "the device is the catalog's descriptor"
        assert not any(c.timing for c in artifact.candidates), "nothing in a predicted artifact was timed"


@pytest.mark.parametrize("target", sorted(PRODUCTS))
def test_every_winner_compiled_without_spilling_and_passes_the_familys_rules(target: str) -> None:
    for path, artifact in _artifacts(target):
        config = dict(artifact.winner.config)
        winner = next(c for c in artifact.candidates if dict(c.config) == config)
        assert winner.status == "compiled" and winner.resources is not None, path.name
        assert not winner.resources.spill_bytes and winner.predicted_us is not None, path.name
        assert SPEC.check_config(config, dict(artifact.key), DeviceQuery.of(artifact.device.identity)) is None, path.name


def _served(target: str) -> list[dict[str, object]]:
    """Each distinct (key, winner) the package serves, with the resources recorded."""
    out: dict[str, dict[str, object]] = {}
    for path, artifact in _artifacts(target):
        config = dict(artifact.winner.config)
        resources = next(c for c in artifact.candidates if dict(c.config) == config).resources
        assert resources is not None
        row = {"key": dict(artifact.key), "config": config, "file": path.name, "want": resources.model_dump()}
        out.setdefault(json.dumps([row["key"], config, artifact.device.compute_units], sort_keys=True), row)
    return list(out.values())



@pytest.mark.slow
@pytest.mark.nvrtc
@needs_nvrtc
@pytest.mark.parametrize("target", ["sm80", "sm100"])
def test_every_served_nvidia_winner_compiles_with_nvrtc_to_the_resources_recorded(target: str, tmp_path: Path) -> None:
    from flyconfigs.gpu.backend import Backend
    from flyconfigs.gpu.cache import CompileCache
    from flyconfigs.gpu.cubin import resources_from_cubin
    from flyconfigs.gpu.cuda import CudaBinding

    backend = Backend(CudaBinding(), arch=target, cache=CompileCache(tmp_path / "cache"))
    served = _served(target)
    assert len(served) >= 50
    for row in served:
        config, key = row["config"], row["key"]
        compiled = backend.compile(SPEC.request(config, key, 32))  # type: ignore[arg-type]
        got = resources_from_cubin(compiled.code, compiled.lowered_name, target, MODEL.block_threads(config))  # type: ignore[arg-type]
        assert got.model_dump() == row["want"], row["file"]


_HIP_CHECK = """
import json
from flyconfigs.gpu import get_backend
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.kernels.rmsnorm.model import MODEL
backend = get_backend("hip", arch={target!r})
out = []
for row in {rows!r}:
    compiled = backend.compile(SPEC.request(row["config"], row["key"], 64))
    got = backend.resources(compiled, MODEL.block_threads(row["config"])).model_dump()
    out.append({{"file": row["file"], "same": got == row["want"], "got": got}})
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.hiprtc
@needs_prefix
def test_every_served_gfx90a_winner_compiles_with_hiprtc_to_the_resources_recorded() -> None:
    rows = _served("gfx90a")
    report = run_in_prefix(_HIP_CHECK.format(target="gfx90a", rows=rows), timeout=1800, prefix=PREFIX)
    assert len(report) == len(rows) >= 50
    assert [r for r in report if not r["same"]] == []


@pytest.mark.slow
@pytest.mark.hiprtc
@needs_prefix6
def test_every_served_gfx950_winner_compiles_with_rocm6_hiprtc_to_the_resources_recorded() -> None:
    rows = _served("gfx950")
    report = run_in_prefix(_HIP_CHECK.format(target="gfx950", rows=rows), timeout=1800, prefix=PREFIX6)
    assert len(report) == len(rows) >= 50
    assert [r for r in report if not r["same"]] == []
