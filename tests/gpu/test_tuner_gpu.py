"""The tuner's real path on the GPU: compile in a process pool through the cache,
verify and time in the worker, select and emit; a candidate that faults the context is
recorded and the run goes on; a second run compiles nothing."""

from __future__ import annotations

from pathlib import Path

from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.schema import load_artifact
from flyconfigs.tuner.run import TuneOptions, tune
from flyconfigs.tuner.toolchain import GPUToolchain
from flyconfigs.tuner.worker import Worker

KEY = {"M": 4096, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16"}


def test_end_to_end_with_a_faulting_candidate(tmp_path: Path) -> None:
    toolchain = GPUToolchain("cuda", 8)
    with Worker("gpu.faulty_measurer:FaultyMeasurer", {"kernel": "rmsnorm", "backend": "cuda"}) as worker:
        report = tune(SPEC, [KEY], tmp_path / "a", worker, toolchain, TuneOptions(budget=24))
        restarts = worker.restarts
    artifact = load_artifact(report.results[0].path)
    faulted = [c for c in artifact.candidates if c.config["occupancy"] == 2 and c.config["rows_per_block"] == 1
               and c.config != artifact.default.config]
    assert faulted and all(c.status == "launch_error" for c in faulted)
    assert restarts >= 1
    ok = [c for c in artifact.candidates if c.status == "ok"]
    assert len(ok) >= 10 and all(c.timing and c.resources and c.resources.registers for c in ok)
    assert artifact.device.product.startswith("NVIDIA")
    assert artifact.winner.timing is not None and artifact.default is not None
    compiled = toolchain.compiled
    assert compiled > 0
    with Worker("flyconfigs.tuner.measure_gpu:GPUMeasurer", {"kernel": "rmsnorm", "backend": "cuda"}) as worker:
        tune(SPEC, [KEY], tmp_path / "b", worker, toolchain, TuneOptions(budget=24))
    toolchain.close()
    assert toolchain.compiled == compiled, "the second run must compile nothing"


def test_two_workers_on_one_gpu_with_cross_check(tmp_path: Path) -> None:
    keys = [{**KEY, "M": m} for m in (1, 16, 128, 1024, 4096)]
    toolchain = GPUToolchain("cuda", 8)
    workers = [Worker("flyconfigs.tuner.measure_gpu:GPUMeasurer", {"kernel": "rmsnorm", "backend": "cuda", "ordinal": 0}) for _ in range(2)]
    try:
        report = tune(SPEC, keys, tmp_path, workers, toolchain, TuneOptions(budget=12), cross_check=True)
    finally:
        for w in workers:
            w.close()
        toolchain.close()
    artifacts = [load_artifact(r.path) for r in report.results]
    assert [a.key["M"] for a in artifacts] == [1, 16, 128, 1024, 4096]
    assert all(a.device.ordinal == 0 for a in artifacts)
    for d in report.disagreements:
        assert d["key"] in keys and len(d["winners"]) == 2
    print("disagreements between two workers on one GPU:", report.disagreements)


def test_a_ray_run_on_this_gpu_tunes_with_the_real_backend(tmp_path: Path) -> None:
    import pytest

    pytest.importorskip("ray", reason="Ray is not installed (pip install 'flyconfigs[ray]')")
    from flyconfigs.tuner.fleet import FleetRequest, tune_fleet
    from flyconfigs.tuner.run import TuneOptions as Options

    keys = [{**KEY, "M": m} for m in (1, 4096)]
    report = tune_fleet(FleetRequest("rmsnorm", keys, tmp_path, "cuda", Options(budget=12)))
    assert report.lost == [] and len(report.workers) >= 1
    for result in report.results:
        artifact = load_artifact(result.path)
        assert artifact.provenance.backend == "cuda" and artifact.device.product.startswith("NVIDIA")
        assert artifact.device.ordinal is not None and artifact.provenance.host
        assert artifact.winner.timing is not None and sum(c.status == "ok" for c in artifact.candidates) >= 4
