"""Tuning on a Ray cluster (``flyconfigs tune --ray``) with a real local Ray cluster.

Ray is real: a head and a second node (``ray.cluster_utils.Cluster``, one raylet each)
offering fake GPU resources, one actor per GPU, each with its measuring worker process.
The measurements are the test backend's (no GPU here).  A heterogeneous cluster is
tested where it is decided (which GPUs a run takes, and what it says of the others):
another raylet per device kind costs more time than the decision is worth here.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'flyconfigs[ray]')")

from flyconfigs.kernels.plugin import tunable_kernel  # noqa: E402
from flyconfigs.registry.sources.device import DeviceQuery  # noqa: E402
from flyconfigs.schema import load_artifact  # noqa: E402
from flyconfigs.schema.models import Device, DeviceIdentity  # noqa: E402
from flyconfigs.tuner.crosscheck import reassign_check  # noqa: E402
from flyconfigs.tuner.fleet import (  # noqa: E402
    FleetRequest,
    _pick_target,
    _StartedActor,
    identity_matches,
    ray_address,
    tune_fleet,
)
from flyconfigs.tuner.grid import parse_grids  # noqa: E402
from flyconfigs.tuner.run import TuneOptions  # noqa: E402
from flyconfigs.tuner.simulated import SIMULATED_DEVICE, config_name  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]

GRID = "M=1,16,128,1024 N=1024,2048,4096 dtype=bf16"
KEYS = parse_grids([GRID], tunable_kernel("rmsnorm"), None)
OPTIONS = TuneOptions(budget=6)
ROOT = Path(__file__).resolve().parent.parent


class Fleet:
    """The running test cluster: node ids by role and the address drivers join."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.address: str = cluster.address
        self.head = cluster.head_node.node_id
        self.nodes = {n.node_id for n in cluster.list_all_nodes()}


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    from ray.cluster_utils import Cluster

    fast_failure_detection = {"health_check_period_ms": 500, "health_check_failure_threshold": 2}
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "num_gpus": 2, "include_dashboard": False, "object_store_memory": 80 << 20,
        "_system_config": fast_failure_detection})
    cluster.add_node(num_cpus=1, num_gpus=2, object_store_memory=80 << 20)
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    found = Fleet(cluster)
    try:
        yield found
    finally:
        ray.shutdown()
        cluster.shutdown()


def _artifacts(folder: Path) -> dict[str, Any]:
    return {p.name: load_artifact(p) for p in sorted(folder.glob("*.json"))}


def _key_of(artifact: Any) -> tuple[Any, ...]:
    return tuple(sorted(artifact.key.items()))


def test_a_killed_driver_is_resumed_and_only_unfinished_keys_are_redone_through_the_cli(fleet: Fleet, tmp_path: Path) -> None:
    out = tmp_path / "tuned"
    driver = (
        "import sys\nfrom pathlib import Path\n"
        "from flyconfigs.tuner.fleet import FleetRequest, tune_fleet\nfrom flyconfigs.tuner.run import TuneOptions\n"
        f"keys = {KEYS!r}\n"
        f"tune_fleet(FleetRequest('rmsnorm', keys, Path({str(out)!r}), 'simulated', TuneOptions(budget=6), "
        f"address={fleet.address!r}, measurer_options={{'delay_s': 0.08}}))\n"
    )
    process = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while len(list(out.glob("*.json"))) < 3 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, process.stderr.read().decode()[-3000:] if process.stderr else ""
    process.send_signal(signal.SIGKILL)
    process.wait()
    if process.stderr:
        process.stderr.close()
    before = {name: (out / name).read_bytes() for name in _artifacts(out)}
    assert 3 <= len(before) < len(KEYS)

    done = subprocess.run(
        [sys.executable, "-m", "flyconfigs", "tune", "rmsnorm", "--backend", "simulated", "--key-grid", GRID,
         "--budget", "6", "--ray", fleet.address, "--resume", "--out", str(out), "--json"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["skipped"] == len(before) and summary["tuned"] == len(KEYS) - len(before)
    found = _artifacts(out)
    assert sorted(_key_of(a) for a in found.values()) == sorted(tuple(sorted(k.items())) for k in KEYS)
    assert all((out / name).read_bytes() == raw for name, raw in before.items()), "a finished key was redone"
    assert not [p for p in out.iterdir() if p.suffix != ".json"], "temporary files left behind"

    assert summary["workers"] == 4 and len(summary["tuned_on"]) == 4
    assert summary["left_out"] == [] and summary["lost"] == []
    # Each artifact says which node and GPU measured it, and the command the driver ran.
    host = socket.gethostname()
    for artifact in found.values():
        assert artifact.device.compute_units == 4 and artifact.device.ordinal in (0, 1)
        assert artifact.provenance.host == host and artifact.provenance.backend == "simulated"
    resumed = [a for name, a in found.items() if name not in before]
    assert resumed and all(a.provenance.command[:3] == ["flyconfigs", "tune", "rmsnorm"] for a in resumed)


def test_an_actor_and_a_node_lost_mid_run_lose_no_key_and_the_cross_check_spreads_over_the_rest(
        fleet: Fleet, tmp_path: Path) -> None:
    extra = fleet.cluster.add_node(num_cpus=1, num_gpus=1, object_store_memory=80 << 20)
    decl = tunable_kernel("rmsnorm")
    simulated = DeviceQuery.of(DeviceIdentity.model_validate(
        {k: SIMULATED_DEVICE[k] for k in ("vendor", "arch", "product", "compute_units", "features")}))
    default = decl.default_config(KEYS[0], simulated)  # as the run computes it
    crashing = next(c for c in decl.space(KEYS[0], simulated) if c != default)
    dispatched: list[dict[str, Any]] = []
    killed: dict[str, str] = {}
    first: dict[str, str] = {}
    checks: list[tuple[dict[str, Any], str]] = []

    def progress(event: str, data: dict[str, Any]) -> None:
        if event == "key":
            first[json.dumps(data["key"], sort_keys=True)] = data["worker"]
        elif event == "cross-check":
            checks.append((data["key"], data["worker"]))
        elif event == "dispatch" and not checks and len(first) < len(KEYS):
            dispatched.append(data)
            if len(dispatched) >= 6 and "actor" not in killed and extra.node_id[:8] not in data["worker"]:
                killed["actor"] = data["worker"]
                ray.kill(data["actor"])
            if "node" not in killed and extra.node_id[:8] in data["worker"]:
                killed["node"] = data["worker"]
                fleet.cluster.remove_node(extra)

    try:
        report = tune_fleet(FleetRequest("rmsnorm", KEYS, tmp_path, "simulated", OPTIONS, cross_check=True,
                                         measurer_options={"delay_s": 0.05, "behaviour": {config_name(crashing): "crash"}}),
                            progress)
    finally:
        if "node" not in killed:
            fleet.cluster.remove_node(extra)
    assert set(killed) == {"actor", "node"}, killed
    assert len(report.lost) == 2
    assert any(line.startswith(killed["actor"]) for line in report.lost)
    assert any(line.startswith(killed["node"]) for line in report.lost)
    # Every key tuned exactly once, the two keys in flight on the lost workers included.
    found = _artifacts(tmp_path)
    assert sorted(_key_of(a) for a in found.values()) == sorted(tuple(sorted(k.items())) for k in KEYS)
    assert len(report.results) == len(KEYS) and not any(r.skipped for r in report.results)
    lost_keys = [d["key"] for d in dispatched if d["worker"] in killed.values()][-2:]
    assert all(any(a.key == k for a in found.values()) for k in lost_keys)
    # A candidate that kills the measuring process restarts that process, not the actor.
    assert report.worker_restarts >= 1
    # The cross-check: every key re-tuned once more, never on the GPU that tuned it
    # first, spread evenly over the three GPUs left (4 each) unless one of them tuned so
    # many keys first that it may check fewer: then it checks all it may, and the other
    # two share the rest evenly.  Cross-checks write nothing.
    assert len(checks) == len(KEYS) and report.disagreements == []
    per_worker: dict[str, int] = {}
    for key, worker in checks:
        assert worker != first[json.dumps(key, sort_keys=True)] and worker not in killed.values(), (key, worker)
        per_worker[worker] = per_worker.get(worker, 0) + 1
    survivors = {w for w in [*first.values(), *per_worker] if w not in killed.values()}
    assert len(survivors) == 3, survivors
    per_worker = {w: per_worker.get(w, 0) for w in survivors}
    may = {w: sum(1 for f in first.values() if f != w) for w in per_worker}
    share = len(KEYS) // 3
    below = {w for w, n in per_worker.items() if n < share}
    assert all(per_worker[w] == may[w] for w in below), (per_worker, may)
    rest = [n for w, n in per_worker.items() if w not in below]
    assert max(rest) - min(rest) <= 1, (per_worker, may)
    assert len(_artifacts(tmp_path)) == len(KEYS)


def test_the_target_chooses_the_gpus_and_says_which_it_left_out() -> None:
    h200 = DeviceIdentity(vendor="nvidia", arch="sm90", product="NVIDIA H200", compute_units=132)
    h100 = DeviceIdentity(vendor="nvidia", arch="sm90", product="NVIDIA H100 80GB HBM3", compute_units=132)
    assert identity_matches(DeviceQuery("nvidia", "sm90"), h200) and identity_matches(DeviceQuery("nvidia", "sm90"), h100)
    assert identity_matches(DeviceQuery("nvidia", "sm90", "NVIDIA H200"), h200)
    assert not identity_matches(DeviceQuery("nvidia", "sm90", "NVIDIA H200"), h100)
    assert not identity_matches(DeviceQuery("nvidia", "sm90", None, 114), h200)
    assert not identity_matches(DeviceQuery("amd", "gfx942"), h200)

    def slot(node: str, gpu: int, identity: DeviceIdentity) -> _StartedActor:
        device = Device(**identity.model_dump(), wave_size=32, ordinal=gpu)
        return _StartedActor(None, node * 4, f"host-{node}", gpu, device, {}, "0" * 64)

    slots = [slot("a", 0, h100), slot("a", 1, h100), slot("b", 0, h200), slot("b", 1, h200), slot("c", 0, h200)]
    chosen, left_out, wanted = _pick_target(slots, None)  # default: the device most GPUs are
    assert [s.host for s in chosen] == ["host-b", "host-b", "host-c"] and "NVIDIA H200" in wanted
    assert left_out == ["host-a (node aaaa): GPU 0, 1 is sm90 'NVIDIA H100 80GB HBM3' 132 CUs, not the target "
                        "sm90 'NVIDIA H200' 132 CUs"]
    chosen, left_out, _ = _pick_target(slots, DeviceQuery("nvidia", "sm90", "NVIDIA H100 80GB HBM3"))
    assert [(s.host, s.gpu) for s in chosen] == [("host-a", 0), ("host-a", 1)] and len(left_out) == 2
    assert _pick_target(slots, DeviceQuery("amd", "gfx942"))[0] == []


def test_without_ray_the_option_says_how_to_get_it(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['ray'] = None\nfrom flyconfigs.cli import main\n"
            f"sys.exit(main(['tune', 'rmsnorm', '--backend', 'simulated', '--ray', '--key-grid', 'M=1 N=1024 dtype=bf16', "
            f"'--out', {str(tmp_path / 'x')!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1 and "pip install 'flyconfigs[ray]'" in done.stderr, done.stderr
    usage = subprocess.run([sys.executable, "-m", "flyconfigs", "tune", "rmsnorm", "--backend", "simulated", "--devices", "0,1",
                            "--ray", "--out", str(tmp_path / "y")], capture_output=True, text=True, timeout=120)
    assert usage.returncode == 2 and "--devices and --ray exclude each other" in usage.stderr
    target = subprocess.run([sys.executable, "-m", "flyconfigs", "tune", "rmsnorm", "--target", "sm90", "--out",
                             str(tmp_path / "z")], capture_output=True, text=True, timeout=120)
    assert target.returncode == 2 and "--target" in target.stderr and "needs --ray" in target.stderr


def test_a_check_lost_during_the_cross_check_goes_where_the_spread_stays_even() -> None:
    # Three live twins were given 4, 4 and 3 checks; another node breaks a tie.
    assert reassign_check([0, 1, 2], [4, 4, 3], [True, True, False]) == 2
    assert reassign_check([0, 1, 2], [4, 3, 3], [False, False, True]) == 2
    assert reassign_check([0, 1], [4, 4], [False, True]) == 1
    assert reassign_check([], [4], [True]) is None
    # Moving a lost worker's four checks one by one onto three twins given 4 each ends even.
    given = [4, 4, 4, 0]
    for _ in range(4):
        given[reassign_check([0, 1, 2], given, [True, True, True, False])] += 1  # type: ignore[index]
    assert sorted(given[:3]) == [5, 5, 6]


def _slowed_cli(delay_s: float) -> str:
    """A driver that runs ``flyconfigs`` as the command line does, each measurement of
    the test backend taking ``delay_s`` (the command line has no option for it)."""
    return ("import dataclasses, sys\nfrom flyconfigs.cli import main\nfrom flyconfigs.tuner import fleet\n"
            "real = fleet.tune_fleet\n"
            "def slowed(request, progress=None, stop=None):\n"
            f"    return real(dataclasses.replace(request, measurer_options={{'delay_s': {delay_s}}}), progress, stop)\n"
            "fleet.tune_fleet = slowed\nsys.exit(main(sys.argv[1:]))\n")


def test_sigterm_reports_what_was_tuned_and_only_the_json_object_reaches_stdout(fleet: Fleet, tmp_path: Path) -> None:
    """Ray prints the cluster's error messages on the driver's stdout and, from ray.init
    on, answers SIGTERM by exiting at once (status 15, no summary).  Here every driver
    of the cluster is sent such messages while the run goes on (published as the
    cluster publishes its own), then the run gets SIGTERM: it stops, says what it did
    in the one JSON object on stdout, and exits 128 + 15; what it wrote is resumed."""
    import threading

    from ray._private.utils import publish_error_to_driver

    out = tmp_path / "tuned"
    driver = subprocess.Popen(
        [sys.executable, "-c", _slowed_cli(0.15), "tune", "rmsnorm", "--backend", "simulated", "--key-grid", GRID,
         "--budget", "6", "--ray", fleet.address, "--out", str(out), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    running = threading.Event()
    running.set()

    def publish() -> None:
        gcs = ray._private.worker.global_worker.gcs_client
        while running.is_set():
            publish_error_to_driver("flyconfigs_test", "a message from the cluster for every driver", gcs)
            time.sleep(0.2)

    publisher = threading.Thread(target=publish, daemon=True)
    publisher.start()
    try:
        deadline = time.monotonic() + 120
        while len(list(out.glob("*.json"))) < 2 and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert driver.poll() is None, driver.communicate()[1][-3000:]
        driver.send_signal(signal.SIGTERM)
        stdout, stderr = driver.communicate(timeout=120)
    finally:
        running.clear()
        publisher.join()
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert "a message from the cluster for every driver" in stderr  # Ray's messages went to stderr
    summary = json.loads(stdout)
    assert summary["interrupted"] and summary["signal"] == "SIGTERM"
    written = _artifacts(out)
    assert 2 <= summary["tuned"] == len(written) < len(KEYS)
    assert summary["tuned"] + len(summary["not_reached"]) == len(KEYS)
    assert sorted(summary["artifacts"]) == sorted(str(out / name) for name in written)
    assert not [p for p in out.iterdir() if p.suffix != ".json"], "temporary files left behind"

    before = {name: (out / name).read_bytes() for name in written}
    report = tune_fleet(FleetRequest("rmsnorm", KEYS, out, "simulated", TuneOptions(budget=6, resume=True)))
    assert sum(r.skipped for r in report.results) == len(before) and len(_artifacts(out)) == len(KEYS)
    assert all((out / name).read_bytes() == raw for name, raw in before.items())


def test_an_address_that_does_not_answer_fails_at_once_and_one_that_is_no_address_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Ray retries an address where nothing listens for many minutes (a closed port
    here: about 35 s per try, 20 tries); the run fails within the connect timeout."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "flyconfigs", "tune", "rmsnorm", "--backend", "simulated", "--key-grid",
                           "M=1 N=1024 dtype=bf16", "--ray", f"127.0.0.1:{port}", "--out", str(tmp_path / "x")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.splitlines() == [f"flyconfigs: error: cannot connect to the Ray cluster at 127.0.0.1:{port}: "
                                        "Connection refused"]
    assert time.monotonic() - started < 60
    assert not (tmp_path / "x").exists() or not list((tmp_path / "x").iterdir())

    from flyconfigs.cli import main

    for wrong in ("not-an-address", "host:port", "10.0.0.1:99999", "http://10.0.0.1:6379/x", "10.0.0.1:6379/x"):
        assert main(["tune", "rmsnorm", "--backend", "simulated", "--ray", wrong, "--out", str(tmp_path / "y")]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"flyconfigs: error: --ray takes 'auto', HOST:PORT or ray://HOST:PORT (alone: a local cluster); got {wrong!r}"]
    for right, address in (("local", None), ("auto", "auto"), ("10.0.0.1:6379", "10.0.0.1:6379"),
                           ("ray://head.example:10001", "ray://head.example:10001"), ("[::1]:6379", "[::1]:6379")):
        assert ray_address(right) == address


def test_a_local_cluster_leaves_no_token_in_the_home_folder(tmp_path: Path) -> None:
    """ray.init of a new cluster writes ~/.ray/auth_token when no token is set, and any
    later cluster of that user then turns on token authentication.  The run's own
    cluster keeps its token in the run's environment."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run([sys.executable, "-m", "flyconfigs", "tune", "rmsnorm", "--backend", "simulated", "--key-grid",
                           "M=1 N=1024 dtype=bf16", "--budget", "2", "--ray", "--out", str(tmp_path / "out"), "--json"],
                          capture_output=True, text=True, timeout=300, env={**env, "HOME": str(home)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["tuned"] == 1
    assert not (home / ".ray").exists(), sorted(p.name for p in (home / ".ray").iterdir())
