"""What publishing, the compile cache and the tuner promise about bad luck: nothing
produced by the test backend is published, nothing is left behind, a corrupted cache
entry is a miss, a killed run leaves no litter, and a failing worker stops the run."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from factories import MI300X, artifact_dict, make_artifact
from flyconfigs.errors import InvalidKeyError, PublishError, TuneError
from flyconfigs.gpu.cache import CompileCache
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.publish import build as publish_module
from flyconfigs.publish.build import publish, publish_all, upload_files
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema import Artifact, write_atomic
from flyconfigs.tuner.crosscheck import spread_cross_checks
from flyconfigs.tuner.run import TuneOptions, tune
from flyconfigs.tuner.simulated import SIMULATED_DEVICE, SimulatedToolchain, config_name
from flyconfigs.tuner.worker import Worker

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}


def _folder(root: Path, artifacts: list[Artifact]) -> Path:
    for a in artifacts:
        write_atomic(root / a.file_name(), a.to_json_bytes())
    return root


# -- publishing ---------------------------------------------------------------------------


def test_the_test_backends_artifacts_are_never_published(tmp_path: Path) -> None:
    # Labelled with a real arch or with its own, a simulated artifact is refused.
    for device in (MI300X, {k: v for k, v in SIMULATED_DEVICE.items() if k != "ordinal"}):
        data = artifact_dict(device=device)
        data["provenance"]["backend"] = "simulated"
        folder = _folder(tmp_path / device["arch"], [Artifact.model_validate(data)])
        with pytest.raises(PublishError, match="test double"):
            publish(folder, device["arch"], "1.0.0", tmp_path / "dist")
    assert not (tmp_path / "dist").exists() or list((tmp_path / "dist").iterdir()) == []


def test_a_simulated_tune_cannot_be_published(tmp_path: Path) -> None:
    from flyconfigs.cli import main

    out = tmp_path / "tuned"
    assert main(["tune", "rmsnorm", "--backend", "simulated", "--key-grid", "M=1 N=1024 dtype=bf16", "--out", str(out),
                 "--budget", "3"]) == 0
    assert main(["publish", str(out), "--target", "simulated", "--version", "1.0", "--out", str(tmp_path / "d")]) == 1
    assert main(["publish", str(out), "--target", "sm90", "--version", "1.0", "--out", str(tmp_path / "d")]) == 1


@pytest.mark.slow
def test_concurrent_publishes_into_one_folder_both_succeed(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "arts", [make_artifact(device=MI300X)])
    errors: list[BaseException] = []

    def run() -> None:
        try:
            publish(folder, "gfx942", "3.0.0", tmp_path / "dist")
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(p.name for p in (tmp_path / "dist").iterdir()) == [
        "flyconfigs_gfx942-3.0.0-py3-none-any.whl", "flyconfigs_gfx942-3.0.0.tar.gz"]


@pytest.mark.slow
def test_publish_all_leaves_nothing_when_a_later_target_fails(tmp_path: Path) -> None:
    root = tmp_path / "artifacts"
    _folder(root / "gfx942", [make_artifact(device=MI300X)])
    (root / "gfx942" / "VERSION").write_text("1.0.0\n")
    _folder(root / "sm90", [make_artifact()])
    (root / "sm90" / "VERSION").write_text("not a version\n")
    with pytest.raises(PublishError, match="not a valid PEP 440"):
        publish_all(root, tmp_path / "dist")
    assert not (tmp_path / "dist").exists() or list((tmp_path / "dist").iterdir()) == []


def test_upload_without_twine_or_past_its_timeout_is_a_publish_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "twine" else real(name, *a))
    with pytest.raises(PublishError, match=r"needs twine: pip install 'flyconfigs\[publish\]'"):
        upload_files([tmp_path / "x.whl"], "http://127.0.0.1:9/")
    monkeypatch.setattr(importlib.util, "find_spec", real)

    def slow(*args: Any, **kwargs: Any) -> None:
        raise subprocess.TimeoutExpired(args[0], kwargs.get("timeout", 0))

    monkeypatch.setattr(publish_module.subprocess, "run", slow)
    with pytest.raises(PublishError, match="did not finish within"):
        upload_files([tmp_path / "x.whl"], "http://127.0.0.1:9/")


# -- the compile cache ----------------------------------------------------------------------


def _entry(cache: CompileCache, key: str, code: bytes) -> tuple[Path, Path]:
    cache.put(key, code, {"lowered_name": "k"})
    return next(cache.root.glob(f"*/{key}.bin")), next(cache.root.glob(f"*/{key}.json"))


def test_a_corrupted_code_object_of_the_same_size_is_a_miss(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path)
    code_path, _ = _entry(cache, "aa" * 32, b"\x7fELF" + b"\x00" * 100)
    assert cache.get("aa" * 32) is not None
    code_path.write_bytes(b"\x7fELF" + b"\x01" * 100)
    assert cache.get("aa" * 32) is None
    assert not code_path.exists(), "a corrupted entry is removed so the next compile replaces it"


@pytest.mark.parametrize("meta", ["[1, 2]", '{"size": 4}', "[" * 5000 + "]" * 5000, '{"lowered_name": 7, "size": 104}',
                                  "not json", ""])
def test_malformed_cache_metadata_is_a_miss(tmp_path: Path, meta: str) -> None:
    cache = CompileCache(tmp_path)
    _, meta_path = _entry(cache, "bb" * 32, b"x" * 104)
    meta_path.write_text(meta)
    assert cache.get("bb" * 32) is None


# -- the tuner ------------------------------------------------------------------------------


def test_cross_checks_spread_evenly_over_identical_devices() -> None:
    identities = ["h200"] * 4
    first = {index: index % 4 for index in range(40)}  # every worker tuned a quarter first
    pinned = spread_cross_checks(first, identities)
    assert sorted(len(p) for p in pinned) == [10, 10, 10, 10]
    for slot, keys in enumerate(pinned):
        assert all(first[k] != slot for k in keys)
    skewed = spread_cross_checks({i: 0 for i in range(30)}, identities)
    assert [len(p) for p in skewed] == [0, 10, 10, 10]
    assert spread_cross_checks({0: 0}, ["h200", "mi300x"]) == [[], []]


def test_cross_checks_go_to_another_node_as_far_as_an_even_spread_allows() -> None:
    identities, nodes = ["h200"] * 4, ["a", "a", "b", "b"]
    # Node a tuned ten keys first, node b two: 3 checks each, b's GPUs take only a's keys.
    first = {**{i: i % 2 for i in range(10)}, 10: 2, 11: 3}
    pinned = spread_cross_checks(first, identities, nodes)
    assert [len(p) for p in pinned] == [3, 3, 3, 3]
    assert all(nodes[first[k]] == "a" for k in pinned[2] + pinned[3])
    assert {10, 11} <= set(pinned[0] + pinned[1])
    assert all(first[k] != slot for slot, keys in enumerate(pinned) for k in keys)
    # GPU 0 tuned half the keys first: still 3 each, and only the two keys that node b
    # has no room for are checked on their own node (by the other GPU there).
    lopsided = {**{i: 0 for i in range(6)}, 6: 1, 7: 1, 8: 2, 9: 2, 10: 3, 11: 3}
    pinned = spread_cross_checks(lopsided, identities, nodes)
    assert [len(p) for p in pinned] == [3, 3, 3, 3]
    assert sum(nodes[slot] == nodes[lopsided[k]] for slot, keys in enumerate(pinned) for k in keys) == 2
    assert all(lopsided[k] != slot for slot, keys in enumerate(pinned) for k in keys)
    # A worker that is gone checks nothing; its twins share its part.
    gone = spread_cross_checks(first, identities, nodes, alive=[True, True, True, False])
    assert gone[3] == [] and sorted(len(p) for p in gone[:3]) == [4, 4, 4]


def test_a_worker_that_tuned_most_keys_first_checks_all_the_others_and_its_twins_share_the_rest() -> None:
    # Worker 2 tuned 9 of 12 keys first, so it may check only 3: an even 4/4/4 cannot be.
    first = {i: 2 for i in range(9)} | {9: 0, 10: 1, 11: 3}
    pinned = spread_cross_checks(first, ["h200"] * 4, ["a", "a", "b", "b"], alive=[True, True, True, False])
    assert pinned[2] == [9, 10, 11] and pinned[3] == []
    assert sorted((len(pinned[0]), len(pinned[1]))) == [4, 5]
    assert all(first[i] != w for w, keys in enumerate(pinned) for i in keys)


def test_a_failing_worker_stops_the_run_and_every_failure_is_reported(tmp_path: Path) -> None:
    keys = [{"M": m, "N": 1024, "dtype": "bf16", "weight_dtype": "bf16"} for m in range(8, 48)]
    device = DeviceQuery(**{k: SIMULATED_DEVICE[k] for k in ("vendor", "arch", "product", "compute_units")},
                         features=())
    defaults = {config_name(SPEC.default_config(key, device)) for key in keys}
    workers = [Worker("flyconfigs.tuner.simulated:SimulatedMeasurer", {"ordinal": i, "delay_s": 0.05}) for i in range(2)]
    # The default failing makes every key a TuneError: both workers fail on their first key.
    toolchain = SimulatedToolchain(dict.fromkeys(defaults, "error: simulated"))
    try:
        with pytest.raises(TuneError, match="2 workers failed") as caught:
            tune(SPEC, keys, tmp_path, workers, toolchain, TuneOptions(budget=3))
    finally:
        for w in workers:
            w.close()
    assert caught.value.args[0].count("the default config failed") == 2
    assert toolchain.compiled <= 2 * 3, "the other worker took no new key after the first failure"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_worker_leaves_ctrl_c_and_termination_to_the_parent(signum: int) -> None:
    """Ctrl-C in a terminal, ``timeout`` and batch systems signal every process of the
    run; the parent stops at the next candidate, so the worker must live until then."""
    worker = Worker("flyconfigs.tuner.simulated:SimulatedMeasurer", {})
    try:
        os.kill(worker._process.pid, signum)
        worker.prepare({"M": 1}, 1, 64)
        assert worker.device["arch"] == "simulated" and worker.check({"a": 1}).status == "ok"
    finally:
        worker.close()


def test_a_killed_runs_temporaries_are_removed_by_the_next_run(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    from flyconfigs.schema.jsonio import _host_tag

    host = _host_tag()
    stale = tmp_path / f".rmsnorm-simulated-0123.json.{host}.{dead.pid}.abcd1234.tmp"
    stale.write_text("{")
    live = tmp_path / f".rmsnorm-simulated-0123.json.{host}.{os.getpid()}.abcd1234.tmp"
    live.write_text("{")
    # On a folder shared between hosts, another host's write in flight (its process id
    # means nothing here), and a file that only looks like a temporary, are not ours.
    elsewhere = tmp_path / f".rmsnorm-simulated-0123.json.other-host.{dead.pid}.abcd1234.tmp"
    elsewhere.write_text("{")
    lookalike = tmp_path / f".notes.{dead.pid}.abcd1234.tmp"
    lookalike.write_text("mine")
    from flyconfigs.cli import main

    assert main(["tune", "rmsnorm", "--backend", "simulated", "--key-grid", "M=1 N=1024 dtype=bf16", "--out",
                 str(tmp_path), "--budget", "2"]) == 0
    assert not stale.exists() and live.exists() and elsewhere.exists() and lookalike.exists()


def test_time_ms_destroys_its_events_even_when_the_run_raises() -> None:
    # A recording stand-in for the vendor binding: no GPU exists here to count real events.
    from flyconfigs.gpu.backend import Backend

    class Events:
        created = destroyed = 0

        def create(self) -> tuple[int, object]:
            Events.created += 1
            return (0, object())

        def destroy(self, event: object) -> tuple[int]:
            Events.destroyed += 1
            return (0,)

    events = Events()
    binding = type("FakeBinding", (), {})()
    binding.name = "cuda"
    binding.event_create = events.create
    binding.event_destroy = events.destroy
    binding.event_record = lambda event, stream: (0,)
    binding.event_synchronize = lambda event: (0,)
    binding.event_elapsed = lambda a, b: (0, 1.5)
    backend = Backend.__new__(Backend)
    backend.binding = binding
    assert backend.time_ms(lambda: None) == 1.5
    with pytest.raises(RuntimeError):
        backend.time_ms(lambda: (_ for _ in ()).throw(RuntimeError("launch failed")))
    assert (Events.created, Events.destroyed) == (4, 4)


def test_simulated_artifacts_say_what_they_are(tmp_path: Path) -> None:
    from flyconfigs.cli import main

    assert main(["tune", "rmsnorm", "--backend", "simulated", "--key-grid", "M=1 N=1024 dtype=bf16", "--out",
                 str(tmp_path), "--budget", "2"]) == 0
    (path,) = tmp_path.glob("*.json")
    data = json.loads(path.read_text())
    assert (data["device"]["arch"], data["provenance"]["backend"]) == ("simulated", "simulated")
    assert hashlib.sha256(path.read_bytes()).hexdigest()  # a whole file, written atomically


def test_index_queries_fail_as_publish_errors() -> None:
    from flyconfigs.publish.index import index_versions

    with pytest.raises(PublishError, match="cannot reach the index"):
        index_versions("not a url", "flyconfigs-sm90")


def test_a_key_file_that_is_a_fifo_never_blocks(tmp_path: Path) -> None:
    from flyconfigs.tuner.grid import parse_grids

    fifo = tmp_path / "keys"
    os.mkfifo(fifo)
    with pytest.raises(InvalidKeyError, match="not a regular file"):
        parse_grids([f"@{fifo}"])


def test_a_cache_that_cannot_store_does_not_fail_the_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The compile itself is stubbed (no GPU compiler is needed to prove the cache path).
    from flyconfigs.gpu.backend import Backend, CompileRequest

    backend = Backend.__new__(Backend)
    backend.cache = CompileCache(tmp_path)
    backend.binding = type("B", (), {"name": "cuda"})()
    backend._arch = "sm90"
    monkeypatch.setattr(Backend, "arch", property(lambda self: "sm90"))
    monkeypatch.setattr(Backend, "cache_key", lambda self, request: "cd" * 32)
    monkeypatch.setattr(Backend, "_compile_uncached", lambda self, request: (b"code", "k", ""))

    def full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(CompileCache, "put", full)
    compiled = backend.compile(CompileRequest("src", "k"))
    assert compiled.code == b"code" and not compiled.from_cache
