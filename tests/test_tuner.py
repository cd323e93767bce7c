"""The tuner on the CPU with the test backend (a simulated device and measurer; no GPU
exists where these run): planning, honest selection, resume, atomic emit, failure
isolation in a real worker process, and bad input."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from flyconfigs.cli import main
from flyconfigs.errors import InvalidKeyError, TuneError
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema import Timing, load_artifact
from flyconfigs.tuner.grid import parse_grid, parse_grids
from flyconfigs.tuner.run import TuneOptions, tune
from flyconfigs.tuner.select import decide, near_ties, noise_band
from flyconfigs.tuner.simulated import SIMULATED_DEVICE, SimulatedToolchain, config_name
from flyconfigs.tuner.worker import Worker

KEY = {"M": 4096, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16"}
QUERY = DeviceQuery("nvidia", "simulated", SIMULATED_DEVICE["product"], 4, ())


def _timing(median: float, spread: float = 0.002) -> Timing:
    return Timing(median_us=median, p20_us=median * (1 - spread), p80_us=median * (1 + spread), min_us=median * (1 - 2 * spread), samples=15)


def _space() -> list[dict]:
    default = SPEC.default_config(KEY, QUERY, wave=32)
    return [default, *[c for c in SPEC.space(KEY, QUERY, wave=32) if c != default]]


def _worker(**options: object) -> Worker:
    return Worker("flyconfigs.tuner.simulated:SimulatedMeasurer", dict(options))


# -- planning ------------------------------------------------------------------------


def test_space_is_pruned_valid_and_holds_the_default() -> None:
    for n in (1, 7, 1000, 4096, 16384, 32768):
        for m in (1, 64, 65536):
            key = {**KEY, "M": m, "N": n}
            space = SPEC.space(key, QUERY, wave=32)
            assert SPEC.default_config(key, QUERY, wave=32) in space
            assert all(SPEC.valid(c, key, 32) is None for c in space)
            assert all(c["rows_per_block"] <= max(1, 1 << (m - 1).bit_length()) or c == space[0] for c in space)
            assert len(space) == len({tuple(sorted(c.items())) for c in space})
    odd = SPEC.space({**KEY, "N": 1000, "dtype": "bf16"}, QUERY, wave=32)
    assert {c["vector_bytes"] for c in odd} == {16, 8}
    assert {c["vector_bytes"] for c in SPEC.space({**KEY, "N": 7}, QUERY, wave=32)} == {0}


def test_grid_parsing() -> None:
    assert parse_grid("M=1,16 N=4096", {"dtype": ["bf16"]}) == [
        {"M": 1, "N": 4096, "dtype": "bf16"},
        {"M": 16, "N": 4096, "dtype": "bf16"},
    ]
    # The kernel completes keys and names its presets; the grid itself knows no kernel.
    assert parse_grids(["M=1 N=4096 dtype=fp16"], SPEC) == [{"M": 1, "N": 4096, "dtype": "fp16", "weight_dtype": "fp16"}]
    assert len(parse_grids(["perf"], SPEC)) == 7 * 6 + 2 * 2 * 2
    with pytest.raises(InvalidKeyError, match="presets: between, hidden, models, perf, unseen"):
        parse_grids(["perf2"], SPEC)
    for bad in ("M=", "M", "M=1,,2", "M=1 M=2", "", "M=--5", "M=²", "M=1_000", "M=[1,", "M=1e999"):
        with pytest.raises(InvalidKeyError):
            parse_grid(bad)
    # Schema 1.1 values: the kernel's declaration, not the grid, says which an axis takes.
    assert parse_grid("M=1e3 flag=true,null shape=[4096,8192]") == [
        {"M": 1000.0, "flag": True, "shape": [4096, 8192]},
        {"M": 1000.0, "flag": None, "shape": [4096, 8192]},
    ]
    assert parse_grid('shape=[4096,8192],[1,2] name="a,b"') == [
        {"shape": [4096, 8192], "name": "a,b"},
        {"shape": [1, 2], "name": "a,b"},
    ]
    # 1 and true are equal in Python but two keys here.
    assert parse_grids(["M=1,true"]) == [{"M": 1}, {"M": True}]


# -- selection -----------------------------------------------------------------------


def test_winner_must_beat_the_default_beyond_the_noise_band() -> None:
    configs = [{"a": 1}, {"a": 2}]
    clear = decide(configs, [_timing(10.0), _timing(9.0)], default_index=0)
    assert (clear.winner, clear.kept_default) == (1, False)
    within = decide(configs, [_timing(10.0), _timing(9.95)], default_index=0)
    assert (within.winner, within.kept_default) == (0, True)
    noisy = decide(configs, [_timing(10.0, spread=0.08), _timing(9.5)], default_index=0)
    assert noisy.kept_default and noisy.noise_band == pytest.approx(0.08)
    assert noise_band(_timing(1.0, 0.001), _timing(1.0, 0.001)) == 0.01


def test_near_ties_are_the_candidates_within_the_band_of_the_best() -> None:
    timings = [_timing(10.0), _timing(9.0), _timing(9.05), _timing(12.0)]
    assert near_ties(timings) == [1, 2]


# -- the loop with the test backend ----------------------------------------------------


def test_tune_emits_one_valid_artifact_per_key_and_keeps_the_default_when_nothing_beats_it(tmp_path: Path) -> None:
    space = _space()
    faster = config_name(space[5])
    with _worker(speeds={faster: 0.8}) as worker:
        report = tune(SPEC, [KEY, {**KEY, "M": 1}], tmp_path, worker, SimulatedToolchain())
    first = load_artifact(report.results[0].path)
    assert first.winner.config == space[5]
    assert first.selection.rule == "beat-default-beyond-noise" and not first.selection.kept_default
    assert first.default is not None and first.default.config == space[0]
    assert first.winner.timing.median_us < first.default.timing.median_us * (1 - first.selection.noise_band)
    assert first.provenance.backend == "simulated" and first.provenance.timing_protocol.interleaved
    second = load_artifact(report.results[1].path)
    assert second.winner.config == second.default.config and not second.selection.kept_default or second.selection.kept_default
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(r.path.name for r in report.results)


def test_near_ties_are_remeasured_and_a_tie_keeps_the_default(tmp_path: Path) -> None:
    space = _space()
    tie = config_name(space[3])
    with _worker(speeds={tie: 0.998}) as worker:
        (result,) = tune(SPEC, [KEY], tmp_path, worker, SimulatedToolchain()).results
    artifact = load_artifact(result.path)
    assert artifact.selection.remeasured
    assert artifact.winner.config == space[0]


def test_the_screen_ranks_each_candidate_against_the_default_timed_beside_it(tmp_path: Path) -> None:
    # The screen times the space in groups (a GPU measurer loads only each group's
    # variants); here every timing request runs 4% slower than the one before, so the
    # fastest config, in the last group, is slower in absolute terms than the first
    # group's and is found only by its ratio to the default beside it.
    space = _space()
    options = TuneOptions(screen_group=16)
    fastest = config_name(space[-1])
    with _worker(speeds={fastest: 0.9}, drift=0.04) as worker:
        (result,) = tune(SPEC, [KEY], tmp_path, worker, SimulatedToolchain(), options).results
    artifact = load_artifact(result.path)
    assert artifact.winner.config == space[-1]
    timed = {config_name(c.config): c.timing.median_us for c in artifact.candidates if c.timing}
    first_group = statistics.median(timed[config_name(c)] for c in space[1:options.screen_group])
    last_group = statistics.median(timed[config_name(c)] for c in space[-options.screen_group + 1:-1])
    assert last_group > first_group * (1 + 0.04 * (len(space) // options.screen_group - 1))


def test_each_timing_says_whether_it_is_from_the_screen_or_the_final(tmp_path: Path) -> None:
    # The screen's timings are shorter and grouped: a reader must not rank them against the
    # winner's.  The artifact names both protocols and which one timed each candidate.
    space = _space()
    options = TuneOptions(screen_group=8, finalists=3, screen_samples=4, samples=9)
    with _worker(speeds={config_name(space[7]): 0.8, config_name(space[20]): 0.85}) as worker:
        (result,) = tune(SPEC, [KEY], tmp_path, worker, SimulatedToolchain(), options).results
    artifact = load_artifact(result.path)
    protocol = artifact.provenance.timing_protocol
    assert protocol.samples == 9
    assert (protocol.screen.samples, protocol.screen.group_size, protocol.screen.finalists) == (4, 8, 3)
    timed = [c for c in artifact.candidates if c.timing is not None]
    final = [c for c in timed if c.timed_in == "final"]
    assert {c.timed_in for c in timed} == {"screen", "final"}
    assert all(c.timing.samples == (9 if c.timed_in == "final" else 4) for c in timed)
    assert 2 <= len(final) <= 4  # the three finalists and the default, which may be one of them
    finals = [c.config for c in final]
    assert artifact.winner.config == space[7] and space[7] in finals and space[0] in finals and space[20] in finals
    assert all(c.timed_in is None for c in artifact.candidates if c.timing is None)


def test_the_artifact_records_whether_the_timing_was_held(tmp_path: Path) -> None:
    # Unheld, a short call can read the host's submission pace instead of the device's
    # time; the test backend models that pace as a floor.  The record must follow what
    # the measurer was asked to do.
    floor = 1000.0
    for hold in (True, False):
        with _worker(unheld_floor_us=floor) as worker:
            (result,) = tune(SPEC, [KEY], tmp_path / str(hold), worker, SimulatedToolchain(),
                             TuneOptions(hold=hold)).results
        artifact = load_artifact(result.path)
        assert artifact.provenance.timing_protocol.held is hold
        medians = [c.timing.median_us for c in artifact.candidates if c.timing]
        assert (min(medians) >= floor * 0.99) is not hold, (hold, min(medians))


def test_failures_are_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    space = _space()
    behaviour = {config_name(space[1]): "crash", config_name(space[2]): "wrong", config_name(space[3]): "launch_error"}
    toolchain = SimulatedToolchain({config_name(space[4]): "error: simulated syntax error"})
    with _worker(behaviour=behaviour, speeds={config_name(space[6]): 0.5}) as worker:
        report = tune(SPEC, [KEY], tmp_path, worker, toolchain, TuneOptions(check_timeout_s=30))
        assert worker.restarts == 2
    artifact = load_artifact(report.results[0].path)
    statuses = [c.status for c in artifact.candidates[:7]]
    assert statuses == ["ok", "launch_error", "wrong_result", "launch_error", "compile_error", "ok", "ok"]
    assert "died (exit code 17)" in artifact.candidates[1].message
    assert artifact.candidates[2].timing is None and artifact.candidates[4].message.startswith("error:")
    assert artifact.winner.config == space[6]


def test_a_hanging_candidate_times_out(tmp_path: Path) -> None:
    space = _space()
    with _worker(behaviour={config_name(space[2]): "hang"}) as worker:
        report = tune(SPEC, [KEY], tmp_path, worker, SimulatedToolchain(), TuneOptions(check_timeout_s=3, budget=4))
    artifact = load_artifact(report.results[0].path)
    assert artifact.candidates[2].status == "timeout"
    assert len(artifact.candidates) == 4


def test_resume_skips_keys_tuned_with_the_same_source_and_toolchain(tmp_path: Path) -> None:
    toolchain = SimulatedToolchain()
    with _worker() as worker:
        tune(SPEC, [KEY], tmp_path, worker, toolchain, TuneOptions(budget=8))
        before = toolchain.compiled
        again = tune(SPEC, [KEY, {**KEY, "M": 16}], tmp_path, worker, toolchain, TuneOptions(budget=8, resume=True))
    assert [r.skipped for r in again.results] == [True, False]
    assert toolchain.compiled == before + 8
    assert toolchain.queued_ahead == [SPEC.check_key(KEY), SPEC.check_key({**KEY, "M": 16})]


def test_keys_still_to_tune_are_queued_for_compiling_in_the_order_asked(tmp_path: Path) -> None:
    keys = [{**KEY, "M": m} for m in (256, 1, 16)]
    with _worker() as worker:
        tune(SPEC, keys[:1], tmp_path, worker, SimulatedToolchain(), TuneOptions(budget=4))
        toolchain = SimulatedToolchain()
        tune(SPEC, keys, tmp_path, worker, toolchain, TuneOptions(budget=4, resume=True))
    assert toolchain.queued_ahead == [SPEC.check_key(k) for k in keys[1:]], "a key resume skips is not compiled ahead"


def test_an_interrupted_run_reports_the_keys_it_finished_and_the_ones_it_did_not(tmp_path: Path) -> None:
    keys = [{**KEY, "M": m} for m in (1, 16, 256)]
    events: list[str] = []

    def stop_after_the_first_key(event: str, data: dict) -> None:
        events.append(event)
        if event == "key":
            raise KeyboardInterrupt

    with _worker() as worker:
        report = tune(SPEC, keys, tmp_path, worker, SimulatedToolchain(), TuneOptions(budget=4), stop_after_the_first_key)
    assert report.interrupted
    assert [r.key["M"] for r in report.results] == [1]
    assert [k["M"] for k in report.not_reached] == [16, 256]
    assert [p.name for p in tmp_path.iterdir()] == [report.results[0].path.name]
    assert load_artifact(report.results[0].path).key["M"] == 1
    assert report.seconds["total"] > 0 and all(report.seconds[p] > 0 for p in ("compile", "verify", "time"))
    assert events.count("key") == 1


def test_a_terminated_tune_prints_what_it_finished_and_resume_tunes_the_rest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM (what ``timeout`` and batch systems send) stops a run the way Ctrl-C does,
    at the next candidate or key: the finished keys' artifacts stay and are counted, the
    phase split is printed, and the exit status is 128 + the signal's number."""
    import os
    import signal

    from flyconfigs.tuner import emit

    write = emit.write_artifact

    def write_then_terminate(folder: Path, artifact: object) -> Path:
        path = write(folder, artifact)
        os.kill(os.getpid(), signal.SIGTERM)
        return path

    monkeypatch.setattr(emit, "write_artifact", write_then_terminate)
    argv = ["tune", "rmsnorm", "--backend", "simulated", "--key-grid", "M=1,16,256,4096 N=1024", "--dtype", "bf16",
            "--out", str(tmp_path), "--budget", "4"]
    before = signal.getsignal(signal.SIGTERM)
    assert main([*argv, "--json"]) == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["interrupted"] and summary["signal"] == "SIGTERM"
    assert captured.err.count("candidates, winner") == 1, "the key written before the stop still has its line"
    written = sorted(p.name for p in tmp_path.iterdir())
    assert len(written) == summary["tuned"] == 1 and len(summary["not_reached"]) == 3
    assert set(summary["seconds"]) >= {"compile", "verify", "time", "total"}
    monkeypatch.setattr(emit, "write_artifact", write)
    assert main([*argv, "--resume"]) == 0
    captured = capsys.readouterr()
    assert f"tuned {4 - len(written)} keys ({len(written)} skipped)" in captured.out
    assert "(compile " in captured.out and "stopped by" not in captured.err
    assert len(list(tmp_path.iterdir())) == 4


def test_bad_input_is_a_clear_error_and_nothing_is_half_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["tune", "nosuchkernel", "--backend", "simulated", "--out", str(out)]) == 2
    assert "unknown kernel 'nosuchkernel'" in capsys.readouterr().err
    assert main(["tune", "rmsnorm", "--backend", "simulated", "--key-grid", "M=1,,2", "--out", str(out)]) == 2
    assert "is not AXIS=V1,V2" in capsys.readouterr().err
    assert main(["tune", "rmsnorm", "--backend", "simulated", "--key-grid", "M=1 N=64 dtype=int8", "--out", str(out)]) == 2
    assert "dtype" in capsys.readouterr().err
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert main(["tune", "rmsnorm", "--backend", "simulated", "--key-grid", "M=1 N=64 dtype=bf16", "--out", str(blocked / "x")]) == 1
    assert "cannot write artifacts" in capsys.readouterr().err
    assert not out.exists() or list(out.iterdir()) == []


def test_no_gpu_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLYCONFIGS_BACKEND", "cuda")
    assert main(["tune", "rmsnorm", "--key-grid", "M=1 N=64 dtype=bf16", "--out", str(tmp_path)]) == 1
    assert "cannot start the measuring worker" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_cli_tune_with_the_test_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "rmsnorm", "--backend", "simulated", "--key-grid", "M=1,64 N=1024", "--dtype", "bf16",
                 "--out", str(tmp_path), "--budget", "5"]) == 0
    assert "tuned 2 keys" in capsys.readouterr().out
    # Well-formed, but what a test double made is never served to a real device: invalid, as the loader says.
    assert main(["validate", str(tmp_path)]) == 1
    assert capsys.readouterr().out.count("provenance.backend: test-double") == 2
    assert all(p.name.startswith("rmsnorm-simulated-") for p in tmp_path.iterdir())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# -- the tuner names no kernel -----------------------------------------------------------


def test_no_module_under_tuner_names_a_kernel() -> None:
    """The tuner reaches kernels only through the plugin protocol: the one module of
    flyconfigs.kernels it may import is flyconfigs.kernels.plugin, and no declared
    kernel's name appears in its code."""
    import ast
    from importlib.metadata import entry_points

    import flyconfigs.tuner

    declared = {ep.name for ep in entry_points(group="flyconfigs.kernels")}
    assert "rmsnorm" in declared
    folder = Path(flyconfigs.tuner.__file__).resolve().parent
    modules = sorted(folder.glob("*.py"))
    assert len(modules) >= 8
    for path in modules:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("flyconfigs.kernels"):
                assert node.module == "flyconfigs.kernels.plugin", f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                for alias in node.names:
                    assert not alias.name.startswith("flyconfigs.kernels"), f"{path.name} imports {alias.name}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                named = [k for k in declared if k in node.value.lower()]
                assert not named, f"{path.name} names kernel {named} in {node.value!r}"


def test_artifacts_record_which_folders_a_command_used_not_where_a_machine_keeps_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from flyconfigs.tuner import emit

    argv = ["/opt/venv/lib/python3.12/site-packages/flyconfigs/__main__.py", "tune", "rmsnorm", "--out", "/tmp/run/sm90",
            "--key-grid", "M=1 N=1024 dtype=bf16", "--cache-dir=/home/someone/cache/", "relative/dir", "/"]
    monkeypatch.setattr(emit.sys, "argv", argv)
    assert emit.command_line() == ["flyconfigs", "tune", "rmsnorm", "--out", ".../sm90", "--key-grid",
                                   "M=1 N=1024 dtype=bf16", "--cache-dir=.../cache", "relative/dir", "/"]


def test_artifacts_record_which_headers_were_included_not_where_a_machine_keeps_them() -> None:
    from flyconfigs.tuner.toolchain import portable_options

    options = ["-DFLYCONFIGS_HIP=1", "-std=c++17", "-I/home/someone/.cache/flyconfigs/rocm-prefix/usr/include",
               "-I/opt/venv/lib/python3.12/site-packages/nvidia/cu13/include", "-I/usr/include"]
    assert portable_options(options) == ["-DFLYCONFIGS_HIP=1", "-std=c++17", "-I.../rocm-prefix/usr/include",
                                         "-I.../nvidia/cu13/include", "-I/usr/include"]
