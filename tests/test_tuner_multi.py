"""Tuning on several devices, with the test backend (simulated devices in real worker
processes): dynamic distribution of keys, per-device provenance, a fault restarting only
its own worker, and the cross-check of winners between identical devices."""

from __future__ import annotations

from pathlib import Path

import pytest

from flyconfigs.cli import main
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema import load_artifact
from flyconfigs.tuner.run import TuneOptions, tune
from flyconfigs.tuner.simulated import SIMULATED_DEVICE, SimulatedToolchain, config_name
from flyconfigs.tuner.worker import Worker

BASE = {"N": 1024, "dtype": "bf16", "weight_dtype": "bf16"}
QUERY = DeviceQuery("nvidia", "simulated", SIMULATED_DEVICE["product"], 4, ())


def _workers(*options: dict) -> list[Worker]:
    return [Worker("flyconfigs.tuner.simulated:SimulatedMeasurer", {"ordinal": i, **o}) for i, o in enumerate(options)]


def _close(workers: list[Worker]) -> None:
    for w in workers:
        w.close()


def test_a_slow_key_does_not_hold_the_others_back(tmp_path: Path) -> None:
    keys = [{**BASE, "M": 65536}, *({**BASE, "M": m} for m in (1, 2, 3, 4, 5))]
    workers = _workers({"delay_s": 0.02}, {"delay_s": 0.02})
    try:
        report = tune(SPEC, keys, tmp_path, workers, SimulatedToolchain(), TuneOptions(budget=8))
    finally:
        _close(workers)
    by_device: dict[int, list[int]] = {}
    for result in report.results:
        by_device.setdefault(load_artifact(result.path).device.ordinal, []).append(result.key["M"])
    slow_device = next(d for d, ms in by_device.items() if 65536 in ms)
    assert by_device[slow_device] == [65536], by_device
    assert sorted(m for ms in by_device.values() for m in ms) == [1, 2, 3, 4, 5, 65536]
    assert [r.key["M"] for r in report.results] == [65536, 1, 2, 3, 4, 5]


def test_a_fault_restarts_only_the_worker_it_happened_in(tmp_path: Path) -> None:
    default = SPEC.default_config({**BASE, "M": 1}, QUERY, wave=32)
    crashing = next(c for c in SPEC.space({**BASE, "M": 1}, QUERY, wave=32) if c != default)
    workers = _workers({"behaviour": {config_name(crashing): "crash"}}, {})
    pids = [w._process.pid for w in workers]
    try:
        report = tune(SPEC, [{**BASE, "M": 1}], tmp_path, workers, SimulatedToolchain(), TuneOptions(budget=8))
        assert [w.restarts for w in workers] == [1, 0]
        assert workers[1]._process.pid == pids[1] and workers[0]._process.pid != pids[0]
    finally:
        _close(workers)
    artifact = load_artifact(report.results[0].path)
    assert artifact.device.ordinal == 0
    assert [c.status for c in artifact.candidates if c.config == crashing] == ["launch_error"]


def test_cross_check_reports_winners_that_differ(tmp_path: Path) -> None:
    key = {**BASE, "M": 4096}
    space = SPEC.space(key, QUERY, wave=32)
    a, b = config_name(space[2]), config_name(space[3])
    agree = _workers({"speeds": {a: 0.7}}, {"speeds": {a: 0.7}, "seed": 5})
    try:
        same = tune(SPEC, [key], tmp_path / "same", agree, SimulatedToolchain(), TuneOptions(budget=8), cross_check=True)
    finally:
        _close(agree)
    assert same.disagreements == []
    differ = _workers({"speeds": {a: 0.7}}, {"speeds": {b: 0.6}})
    try:
        split = tune(SPEC, [key], tmp_path / "differ", differ, SimulatedToolchain(), TuneOptions(budget=8), cross_check=True)
    finally:
        _close(differ)
    (d,) = split.disagreements
    assert d["key"] == key and sorted(d["devices"]) == [0, 1] and not d["within_noise"]
    assert {config_name(w) for w in d["winners"]} == {a, b}


def test_cli_devices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "rmsnorm", "--backend", "simulated", "--devices", "all", "--key-grid", "M=1,2,3 N=1024",
                 "--dtype", "bf16", "--budget", "4", "--out", str(tmp_path), "--json"]) == 0
    import json

    summary = json.loads(capsys.readouterr().out)
    assert summary["workers"] == 2 and summary["tuned"] == 3 and summary["disagreements"] == []
    assert main(["tune", "rmsnorm", "--backend", "simulated", "--devices", "0,x", "--out", str(tmp_path)]) == 2
    assert "--devices takes" in capsys.readouterr().err


def test_a_failure_while_keys_are_in_flight_stops_them_before_it_is_raised(tmp_path: Path) -> None:
    # Here the caller's progress callback breaks on the second dispatch, while the first
    # key is being tuned: the caller closes its workers once tune returns, so nothing
    # may still be using them then.
    import threading

    def progress(event: str, data: dict) -> None:
        if event == "dispatch" and data["key"]["M"] == 2:
            raise RuntimeError("the callback broke")

    workers = _workers({"delay_s": 0.05}, {"delay_s": 0.05})
    try:
        with pytest.raises(RuntimeError, match="the callback broke"):
            tune(SPEC, [{**BASE, "M": m} for m in (1, 2, 3)], tmp_path, workers, SimulatedToolchain(),
                 TuneOptions(budget=8), progress)
        assert not [t.name for t in threading.enumerate() if t.name.startswith("flyconfigs-tune-")]
    finally:
        _close(workers)
