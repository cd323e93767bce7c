"""The serving path's promises, tried as a hostile or unlucky caller would: the memo
never accepts what validation refuses, a refresh never leaves a stale answer, nothing a
caller or an observer does raises anything but flyconfigs' own errors, and a config is
served only after the kernel accepted it for the asked key and device."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import SiteDir
from factories import H200, MI300X, artifact_dict, make_artifact
from flyconfigs import resolve
from flyconfigs.errors import InvalidDeviceError, InvalidKeyError, UnknownKernelError
from flyconfigs.registry import Resolver, default_resolver, explain, refresh
from flyconfigs.registry.detecting import detect_with, installed_detector
from flyconfigs.registry.resolve import MEMO_LIMIT
from flyconfigs.registry.sources.device import parse_device_spec
from flyconfigs.schema import Artifact

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
H200_SPEC = "sm90:132:NVIDIA H200"
MI300X_SPEC = "gfx942:304:AMD Instinct MI300X:sramecc+,xnack-"


def _with_winner(config: dict[str, object], **kwargs: object) -> Artifact:
    data = artifact_dict(**kwargs)  # type: ignore[arg-type]
    data["candidates"][0]["config"] = config
    data["winner"]["config"] = config
    return Artifact.model_validate(data)


# -- the memo ----------------------------------------------------------------------------


def test_memo_never_accepts_a_key_validation_refuses(site: SiteDir) -> None:
    assert resolve("rmsnorm", {**KEY, "M": 1}, H200_SPEC).source == "default"
    for bad in (True, 1.0):
        with pytest.raises(InvalidKeyError, match="'M'.*must be an int"):
            resolve("rmsnorm", {**KEY, "M": bad}, H200_SPEC)


def test_key_order_shares_one_memo_entry_and_the_memo_is_bounded(site: SiteDir, monkeypatch: pytest.MonkeyPatch) -> None:
    resolver = Resolver()
    a = resolver.resolve("rmsnorm", KEY, H200_SPEC)
    b = resolver.resolve("rmsnorm", dict(reversed(list(KEY.items()))), H200_SPEC)
    assert a is b and len(resolver._memo) == 1
    monkeypatch.setattr(sys.modules["flyconfigs.registry.core.memo"], "MEMO_LIMIT", 64)
    for m in range(1, 500):
        resolver.resolve("rmsnorm", {**KEY, "M": m}, H200_SPEC)
    assert len(resolver._memo) <= 64
    assert MEMO_LIMIT >= 1024  # serving workloads see thousands of distinct token counts


def test_a_call_repeated_as_given_is_answered_typed_and_a_refresh_drops_it(site: SiteDir,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    resolver = Resolver()
    slow: list[object] = []
    real = resolver._resolve_slow
    monkeypatch.setattr(resolver, "_resolve_slow", lambda *args: slow.append(args) or real(*args))
    first = resolver.resolve("rmsnorm", KEY, H200_SPEC)
    reordered = dict(reversed(list(KEY.items())))
    assert all(resolver.resolve("rmsnorm", key, H200_SPEC) is first for key in (KEY, reordered, KEY, reordered, KEY))
    assert len(slow) == 1
    one = {**KEY, "M": 1}
    assert resolver.resolve("rmsnorm", one, H200_SPEC) is resolver.resolve("rmsnorm", one, H200_SPEC)
    for bad in (True, 1.0):  # equal to the remembered M=1, of another type
        with pytest.raises(InvalidKeyError, match="'M'.*must be an int"):
            resolver.resolve("rmsnorm", {**KEY, "M": bad}, H200_SPEC)
    resolver.refresh()
    again = resolver.resolve("rmsnorm", KEY, H200_SPEC)
    assert again is not first and again == first and len(slow) == 5


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty folder that ``FLYCONFIGS_PATH`` names."""
    folder = tmp_path / "local"
    folder.mkdir()
    monkeypatch.setenv("FLYCONFIGS_PATH", str(folder))
    return folder


def test_a_refresh_during_a_slow_resolve_leaves_no_stale_answer(site: SiteDir, local: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    resolver = Resolver()
    original = resolver._search

    def search_then_install(*args: object) -> object:
        answer = original(*args)  # computed before the artifact exists
        artifact = make_artifact()
        (local / artifact.file_name()).write_bytes(artifact.to_json_bytes())
        resolver.refresh()  # what an installer in another thread would do
        return answer

    monkeypatch.setattr(resolver, "_search", search_then_install)
    assert resolver.resolve("rmsnorm", KEY, H200_SPEC).source == "default"
    monkeypatch.setattr(resolver, "_search", original)
    assert resolver.resolve("rmsnorm", KEY, H200_SPEC).source == "override"


@pytest.mark.slow
def test_concurrent_resolves_and_refreshes_end_on_the_current_answer(site: SiteDir, local: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    artifact = make_artifact()
    path = local / artifact.file_name()
    resolver = Resolver()
    errors: list[BaseException] = []
    stop = threading.Event()
    search = resolver._search

    def slow_search(*args: object) -> object:
        answer = search(*args)
        time.sleep(0.0005)  # widen the window between computing an answer and memoizing it
        return answer

    monkeypatch.setattr(resolver, "_search", slow_search)

    def serve() -> None:
        try:
            while not stop.is_set():
                resolver.resolve("rmsnorm", KEY, H200_SPEC)
                time.sleep(0.0002)  # let the refreshing thread in between resolves
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=serve) for _ in range(16)]
    for thread in threads:
        thread.start()
    stale = 0
    try:
        for round_ in range(40):
            if round_ % 2 == 0:
                path.write_bytes(artifact.to_json_bytes())
            else:
                path.unlink()
            resolver.refresh()
            present = path.exists()
            # After the refresh every answer must match the folder as it is now.
            for _ in range(3):
                time.sleep(0.001)
                stale += (resolver.resolve("rmsnorm", KEY, H200_SPEC).source == "override") != present
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert errors == []
    assert stale == 0


# -- bad calls ---------------------------------------------------------------------------


def test_bad_calls_raise_flyconfigs_errors_naming_the_argument(site: SiteDir) -> None:
    with pytest.raises(InvalidKeyError, match="must be a mapping"):
        resolve("rmsnorm", None, H200_SPEC)  # type: ignore[arg-type]
    with pytest.raises(InvalidKeyError, match="must be a mapping"):
        resolve("rmsnorm", [("M", 1)], H200_SPEC)  # type: ignore[arg-type]
    with pytest.raises(UnknownKernelError, match="a name or a KernelDecl"):
        resolve(None, KEY, H200_SPEC)  # type: ignore[arg-type]
    with pytest.raises(InvalidDeviceError, match="the device argument") as caught:
        resolve("rmsnorm", KEY, "cuda:0")
    assert "FLYCONFIGS_DEVICE" not in str(caught.value)
    with pytest.raises(InvalidDeviceError, match="the device argument"):
        resolve("rmsnorm", KEY, 0)  # type: ignore[arg-type]


def test_the_kernels_own_key_rules_apply_to_resolve(site: SiteDir) -> None:
    with pytest.raises(InvalidKeyError, match="weight_dtype 'fp16' must equal dtype 'bf16' or be 'fp32'"):
        resolve("rmsnorm", {**KEY, "weight_dtype": "fp16"}, H200_SPEC)
    with pytest.raises(InvalidKeyError, match="<= 2147483647"):
        resolve("rmsnorm", {**KEY, "M": 2**40}, H200_SPEC)


def test_device_specs_with_odd_digits_or_deep_json_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidDeviceError, match="compute_units.*ASCII"):
        parse_device_spec("sm90:²")
    deep = "[" * 5000 + "]" * 5000
    with pytest.raises(InvalidDeviceError, match="FLYCONFIGS_DEVICE"):
        parse_device_spec('{"arch": ' + deep + "}")
    nested = tmp_path / "device.json"
    nested.write_text('{"arch": ' + "[" * 40 + "]" * 40 + "}")
    with pytest.raises(InvalidDeviceError, match="nesting deeper"):
        parse_device_spec(f"@{nested}")


def test_a_bad_device_variable_falls_back_and_says_so(site: SiteDir, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLYCONFIGS_DEVICE", '{"arch": ' + "[" * 100 + "]" * 100 + "}")
    refresh()
    r = resolve("rmsnorm", KEY)
    assert r.source == "default" and "FLYCONFIGS_DEVICE is invalid" in r.reasons[0]


# -- observers and detection ---------------------------------------------------------------


def test_an_observer_that_raises_is_logged_once_and_never_breaks_resolve(site: SiteDir,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    resolver = Resolver()
    seen = []

    def broken(_: object) -> None:
        raise RuntimeError("observer bug")

    remove = resolver.add_observer(broken)
    resolver.add_observer(seen.append)
    with caplog.at_level(logging.WARNING, logger="flyconfigs.registry"):
        for _ in range(3):
            assert resolver.resolve("rmsnorm", KEY, H200_SPEC).source == "default"
    assert len(seen) == 3
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "observer bug" in caplog.records[0].message
    remove()


@pytest.mark.parametrize("error", [ValueError("odd property"), KeyError("gcnArchName"), OSError("driver gone")])
def test_any_error_of_the_gpu_layer_means_no_device_known(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    monkeypatch.delenv("FLYCONFIGS_NO_GPU_DETECT", raising=False)

    def detect() -> None:
        raise error

    query, why = detect_with(detect)  # type: ignore[arg-type]
    assert query is None and type(error).__name__ in why
    monkeypatch.setattr("flyconfigs.gpu.detect_device", lambda ordinal=0: (_ for _ in ()).throw(error))
    assert installed_detector() is not None
    r = Resolver().resolve("rmsnorm", KEY)
    assert r.source == "default" and type(error).__name__ in r.reasons[0]


# -- served means valid --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ({"threads": 256, "rows_per_block": 1, "vector_bytes": 16, "row_storage": "reg"}, "missing occupancy"),
        ({"threads": 0, "rows_per_block": 1, "vector_bytes": 16, "row_storage": "reg", "occupancy": 0}, "threads=0"),
        ({"threads": 256, "rows_per_block": 1, "vector_bytes": 16, "row_storage": "disk", "occupancy": 0}, "row_storage"),
        ({"threads": 256, "rows_per_block": 1, "vector_bytes": 16, "row_storage": "reg", "occupancy": 0, "x": 1}, "unknown x"),
    ],
)
def test_a_config_the_kernel_refuses_is_never_served(site: SiteDir, config: dict[str, object], why: str) -> None:
    site.install("sm90", [_with_winner(config)])
    r = resolve("rmsnorm", KEY, H200_SPEC)
    assert r.source == "default"
    assert any("refused by rmsnorm" in reason and why in reason for reason in r.reasons), r.reasons
    assert any(p.kind == "invalid-config" for p in default_resolver().problems.problems())


def test_a_wave_32_config_is_not_served_to_a_wave_64_device(site: SiteDir) -> None:
    # 32 threads, one row: a whole wave on NVIDIA, half a wave on an MI300X.
    wave32 = {"threads": 32, "rows_per_block": 1, "vector_bytes": 16, "row_storage": "reread", "occupancy": 0}
    site.install("gfx942", [_with_winner(wave32, device=MI300X)])
    r = resolve("rmsnorm", KEY, MI300X_SPEC)
    assert r.source == "default"
    assert any("wave" in reason for reason in r.reasons)


def test_a_device_between_two_products_gets_one_products_tunings_for_every_key(site: SiteDir) -> None:
    # One package holds an H200's and an H100's tunings of the same keys, each product
    # with a winner of its own; a third product with the same compute units is served the
    # nearer name's wherever it has the key, not whichever file the manifest lists first.
    h100 = {**H200, "product": "NVIDIA H100 80GB HBM3"}
    h200_config = {"threads": 256, "rows_per_block": 1, "vector_bytes": 16, "row_storage": "reg", "occupancy": 0}
    h100_config = {"threads": 128, "rows_per_block": 1, "vector_bytes": 16, "row_storage": "reg", "occupancy": 0}
    ms = [1, 16, 256, 4096, 65536]
    only_h200 = _with_winner(h200_config, device=H200, key={**KEY, "M": 2048})
    site.install("sm90", [_with_winner(config, device=device, key={**KEY, "M": m})
                          for m in ms for device, config in ((H200, h200_config), (h100, h100_config))] + [only_h200])
    for m in ms:
        near_h100 = resolve("rmsnorm", {**KEY, "M": m}, "sm90:132:NVIDIA H100 NVL")
        assert near_h100.layer == "same-compute-units" and dict(near_h100.config) == h100_config
        assert near_h100.matched_device is not None and near_h100.matched_device.product == "NVIDIA H100 80GB HBM3"
        near_h200 = resolve("rmsnorm", {**KEY, "M": m}, "sm90:132:NVIDIA H200 NVL")
        assert dict(near_h200.config) == h200_config
    # A nearer key still goes before a nearer product: M=2500 is nearer the H200's 2048
    # than the H100's 4096.
    nearest = resolve("rmsnorm", {**KEY, "M": 2500}, "sm90:132:NVIDIA H100 NVL")
    assert nearest.key_match == "nearest" and nearest.matched_key is not None and nearest.matched_key["M"] == 2048
    assert nearest.matched_device is not None and nearest.matched_device.product == "NVIDIA H200"
    # Between tuned keys the family's rule decides from that product's measurements: no
    # key timed its default beside a candidate, so its default serves.
    assert nearest.neighbourhood is not None and "the family's default" in nearest.neighbourhood.reason


def test_a_nearest_key_config_is_checked_against_the_asked_key(site: SiteDir) -> None:
    # Tuned at M=1 with 32 rows per block is fine there; it is checked again for M=4096
    # (and still fine), while a config invalid for the asked N would be refused.
    ok = {"threads": 256, "rows_per_block": 1, "vector_bytes": 16, "row_storage": "reg", "occupancy": 0}
    site.install("sm90", [_with_winner(ok, key={**KEY, "M": 1})])
    r = resolve("rmsnorm", KEY, H200_SPEC)
    assert (r.source, r.key_match) == ("package", "nearest")


def test_test_double_artifacts_are_never_served_to_a_real_device(site: SiteDir, local: Path) -> None:
    from flyconfigs.tuner.simulated import SIMULATED_DEVICE

    for device, backend in ((H200, "simulated"), (SIMULATED_DEVICE, "simulated"), (SIMULATED_DEVICE, "cuda")):
        data = artifact_dict(device={k: v for k, v in device.items() if k != "ordinal"})
        data["provenance"]["backend"] = backend
        a = Artifact.model_validate(data)
        (local / f"{backend}-{a.file_name()}").write_bytes(a.to_json_bytes())
    refresh()
    for spec in (H200_SPEC, "sm90:132:NVIDIA H100 80GB HBM3", "sm90"):
        r = resolve("rmsnorm", KEY, spec)
        assert r.source == "default", (spec, r.reasons)
    from flyconfigs.registry.sources.device import DeviceQuery

    simulated = DeviceQuery("nvidia", "simulated", SIMULATED_DEVICE["product"], 4, ())
    assert resolve("rmsnorm", KEY, simulated).source == "override"
    assert any(p.kind == "test-double" for p in default_resolver().problems.problems())


def test_explain_names_the_precedence_and_the_served_source(site: SiteDir) -> None:
    site.install("sm90", [make_artifact()])
    _, steps = explain("rmsnorm", KEY, H200_SPEC)
    order = next(s for s in steps if s.looked_for == "sources, in precedence order")
    assert order.outcome == "package flyconfigs-sm90 1.0.0 (official)"
    assert steps[-1].outcome.endswith("(package flyconfigs-sm90 1.0.0 (official))")


def test_the_device_argument_may_be_an_identity(site: SiteDir) -> None:
    site.install("sm90", [make_artifact()])
    identity = make_artifact().device.identity
    assert resolve("rmsnorm", KEY, identity).source == "package"
    assert json.loads(json.dumps(resolve("rmsnorm", KEY, identity).as_json()))["layer"] == "exact"
