"""Resolution through real data-package distributions on a temporary sys.path:
discovery, precedence, every matching layer, the nearest-key rule, collisions, refresh,
the memo, the observer hook and device detection."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from conftest import SiteDir
from factories import H200, MI300X, make_artifact
from flyconfigs import resolve
from flyconfigs.errors import InvalidKeyError, UnknownKernelError
from flyconfigs.kernels.rmsnorm import SPEC as RMSNORM
from flyconfigs.kernels.rmsnorm.declaration import RMSNormSpec
from flyconfigs.registry import Resolver, add_observer, default_resolver, explain, refresh, register_kernel
from flyconfigs.registry.declarations import unregister_kernel
from flyconfigs.schema import Artifact, write_atomic

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
H200_SPEC = "sm90:132:NVIDIA H200"
H100_SXM = {**H200, "product": "NVIDIA H100 80GB HBM3", "compute_units": 132}
H100_PCIE = {**H200, "product": "NVIDIA H100 PCIe", "compute_units": 114}


def key(**changes: object) -> dict[str, object]:
    return {**KEY, **changes}


def test_installed_package_serves_its_artifact(site: SiteDir) -> None:
    artifact = make_artifact(key=KEY, winner_index=3)
    folder = site.install("sm90", [artifact], version="2.1.0")
    r = resolve("rmsnorm", KEY, H200_SPEC)
    assert dict(r.config) == artifact.winner.config
    assert (r.source, r.origin, r.version, r.layer, r.key_match, r.borrowed) == (
        "package", "flyconfigs-sm90", "2.1.0", "exact", "exact", False
    )
    assert r.file == str(folder / "artifacts" / artifact.file_name())


def test_discovery_never_imports_the_data_package(site: SiteDir, tmp_path: Path) -> None:
    marker = tmp_path / "imported.marker"
    init = f"open({str(marker)!r}, 'w').write('x')\nraise RuntimeError('data packages must not be imported')\n"
    site.install("sm90", [make_artifact(key=KEY)], init_code=init)
    assert resolve("rmsnorm", KEY, H200_SPEC).source == "package"
    assert default_resolver().check_all() == []
    assert not marker.exists()


def test_device_layers(site: SiteDir) -> None:
    site.install("sm90", [make_artifact(key=KEY, winner_index=2)])
    exact = resolve("rmsnorm", KEY, H200_SPEC)
    same_cus = resolve("rmsnorm", KEY, f"sm90:132:{H100_SXM['product']}")
    same_arch = resolve("rmsnorm", KEY, "sm90:114:NVIDIA H100 PCIe")
    arch_only = resolve("rmsnorm", KEY, "sm90")
    other_arch = resolve("rmsnorm", KEY, "sm80:108:NVIDIA A100")
    assert (exact.layer, exact.borrowed) == ("exact", False)
    assert (same_cus.layer, same_cus.borrowed) == ("same-compute-units", False)
    assert (same_arch.layer, same_arch.borrowed) == ("same-arch", True)
    assert same_arch.matched_device is not None and same_arch.matched_device.product == "NVIDIA H200"
    assert (arch_only.layer, arch_only.borrowed) == ("same-arch", True)
    assert other_arch.source == "default"
    assert same_cus.config == exact.config == same_arch.config


def test_more_specific_device_beats_nearer_key(site: SiteDir) -> None:
    site.install(
        "sm90",
        [
            make_artifact(device=H100_PCIE, key=KEY, winner_index=1),
            make_artifact(device=H200, key=key(M=1024), winner_index=4),
        ],
    )
    r = resolve("rmsnorm", KEY, H200_SPEC)
    assert (r.layer, r.key_match, r.matched_key) == ("exact", "nearest", key(M=1024))


def test_nearest_key_on_ordinal_axes_only(site: SiteDir) -> None:
    site.install(
        "sm90",
        [
            make_artifact(key=key(M=1024), winner_index=1),
            make_artifact(key=key(M=4096), winner_index=2),
            make_artifact(key=key(M=65536, dtype="fp16", weight_dtype="fp16"), winner_index=3),
        ],
    )
    assert resolve("rmsnorm", key(M=1500), H200_SPEC).matched_key == key(M=1024)
    assert resolve("rmsnorm", key(M=3000), H200_SPEC).matched_key == key(M=4096)
    tie = resolve("rmsnorm", key(M=2048), H200_SPEC)
    assert (tie.key_match, tie.matched_key) == ("nearest", key(M=4096))
    # N is ordinal too: a row length between tuned ones borrows the nearest config, which
    # must pass the kernel's check for the asked N before it is served.
    between = resolve("rmsnorm", key(M=65536, N=6144), H200_SPEC)
    assert (between.key_match, between.matched_key) == ("nearest", key(M=4096))
    from flyconfigs.kernels.rmsnorm import SPEC

    assert SPEC.check_config(between.config, key(M=65536, N=6144), None) is None
    fp16 = resolve("rmsnorm", key(M=7, dtype="fp16", weight_dtype="fp16"), H200_SPEC)
    assert fp16.matched_key == key(M=65536, dtype="fp16", weight_dtype="fp16")
    assert resolve("rmsnorm", key(M=7, dtype="fp32", weight_dtype="fp32"), H200_SPEC).source == "default"


def test_override_directory_wins_and_the_collision_is_reported(site: SiteDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site.install("sm90", [make_artifact(key=KEY, winner_index=1)])
    local = make_artifact(key=KEY, winner_index=5)
    first, second = tmp_path / "first", tmp_path / "second"
    write_atomic(first / local.file_name(), local.to_json_bytes())
    other = make_artifact(key=KEY, winner_index=6)
    write_atomic(second / "nested" / other.file_name(), other.to_json_bytes())
    monkeypatch.setenv("FLYCONFIGS_PATH", os.pathsep.join([str(first), str(second)]))
    refresh()
    r = resolve("rmsnorm", KEY, H200_SPEC)
    assert (r.source, r.origin, dict(r.config)) == ("override", str(first), local.winner.config)
    (collision,) = default_resolver().collisions()
    assert collision.winner == str(first / local.file_name())
    assert len(collision.shadowed) == 2 and "flyconfigs-sm90" in collision.shadowed[1]


def test_between_two_third_party_packages_no_name_wins(site: SiteDir, monkeypatch: pytest.MonkeyPatch) -> None:
    site.install("sm90", [make_artifact(key=KEY, winner_index=1)], name="flyconfigs-sm90-zeta", module="zeta")
    site.install("sm90", [make_artifact(key=KEY, winner_index=2)], name="flyconfigs-sm90-alpha", module="alpha")
    r = resolve("rmsnorm", KEY, H200_SPEC)
    assert r.source == "default"
    assert sum("contested" in reason for reason in r.reasons) == 2, r.reasons
    (collision,) = default_resolver().collisions()
    assert collision.contested and not collision.expected
    monkeypatch.setenv("FLYCONFIGS_PACKAGES", "flyconfigs-sm90-zeta")
    refresh()
    assert resolve("rmsnorm", KEY, H200_SPEC).origin == "flyconfigs-sm90-zeta"


def test_refresh_picks_up_install_and_uninstall(site: SiteDir) -> None:
    assert resolve("rmsnorm", KEY, H200_SPEC).source == "default"
    site.install("sm90", [make_artifact(key=KEY)])
    assert resolve("rmsnorm", KEY, H200_SPEC).source == "package"
    site.uninstall("sm90")
    assert resolve("rmsnorm", KEY, H200_SPEC).source == "default"


def test_memo_returns_the_same_record_and_caches_misses(site: SiteDir, monkeypatch: pytest.MonkeyPatch) -> None:
    site.install("sm90", [make_artifact(key=KEY)])
    resolver = default_resolver()
    first = resolve("rmsnorm", KEY, H200_SPEC)
    slow = resolver._resolve_slow
    calls = []

    def counting(*args: object) -> object:
        calls.append(args)
        return slow(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(resolver, "_resolve_slow", counting)
    assert resolve("rmsnorm", KEY, H200_SPEC) is first
    miss_key = key(dtype="fp32", weight_dtype="fp32")
    miss = resolve("rmsnorm", miss_key, H200_SPEC)
    assert resolve("rmsnorm", miss_key, H200_SPEC) is miss and miss.source == "default"
    assert len(calls) == 1


def test_observer_sees_hits_borrows_and_misses(site: SiteDir) -> None:
    site.install("sm90", [make_artifact(key=KEY)])
    seen = []
    remove = add_observer(lambda r: seen.append((r.source, r.borrowed)))
    resolve("rmsnorm", KEY, H200_SPEC)
    resolve("rmsnorm", KEY, H200_SPEC)
    resolve("rmsnorm", KEY, "sm90:114:NVIDIA H100 PCIe")
    resolve("rmsnorm", key(dtype="fp32", weight_dtype="fp32"), H200_SPEC)
    remove()
    resolve("rmsnorm", KEY, H200_SPEC)
    assert seen == [("package", False), ("package", False), ("package", True), ("default", False)]


def test_device_from_environment_and_unknown_device(site: SiteDir, monkeypatch: pytest.MonkeyPatch) -> None:
    site.install("gfx942", [make_artifact(device=MI300X, key=KEY)])
    monkeypatch.setenv("FLYCONFIGS_DEVICE", "gfx942:304:AMD Instinct MI300X:sramecc+,xnack-")
    refresh()
    assert resolve("rmsnorm", KEY).layer == "exact"
    monkeypatch.setenv("FLYCONFIGS_DEVICE", json.dumps({k: MI300X[k] for k in ("vendor", "arch", "product", "compute_units", "features")}))
    refresh()
    assert resolve("rmsnorm", KEY).layer == "exact"
    monkeypatch.setenv("FLYCONFIGS_DEVICE", "tpu7")
    refresh()
    r = resolve("rmsnorm", KEY)
    assert r.source == "default" and "FLYCONFIGS_DEVICE is invalid" in r.reasons[0]
    monkeypatch.delenv("FLYCONFIGS_DEVICE")
    refresh()
    r = resolve("rmsnorm", KEY)
    assert (r.source, r.device) == ("default", None)
    assert r.reasons[0].startswith("no device known: GPU detection disabled")


def test_explain_lists_every_step(site: SiteDir) -> None:
    site.install("sm90", [make_artifact(key=key(M=64))])
    r, steps = explain("rmsnorm", KEY, H200_SPEC)
    assert r.key_match == "nearest"
    assert [s.looked_for for s in steps] == ["device", "sources, in precedence order", "exact device, exact key", "same-compute-units device, exact key", "exact device, nearest key"]
    assert steps[-1].outcome.startswith("found ")


def test_bad_calls_raise_precise_errors(site: SiteDir) -> None:
    with pytest.raises(UnknownKernelError, match="rmsnorm"):
        resolve("layernorm", KEY, H200_SPEC)
    with pytest.raises(InvalidKeyError, match="missing weight_dtype"):
        resolve("rmsnorm", {"M": 1, "N": 2, "dtype": "bf16"}, H200_SPEC)
    with pytest.raises(InvalidKeyError, match="'M'.*int"):
        resolve("rmsnorm", key(M="4096"), H200_SPEC)
    with pytest.raises(InvalidKeyError, match="one of bf16, fp16, fp32"):
        resolve("rmsnorm", key(dtype="int8"), H200_SPEC)
    with pytest.raises(InvalidKeyError):
        resolve("rmsnorm", key(M=[1]), H200_SPEC)
    # The schema takes bools and floats in keys; rmsnorm's declaration does not (True == 1 in Python).
    for value in (True, 1.5, 4096.0, None):
        with pytest.raises(InvalidKeyError, match="'M'.*int"):
            resolve("rmsnorm", key(M=value), H200_SPEC)


# -- a nearer key's winner that does not fit the asked row ---------------------------------


WIDE = {"threads": 64, "rows_per_block": 1, "vector_bytes": 16, "row_storage": "reg", "occupancy": 0}
"""Valid at N=1024 in bf16; its 16-byte vectors (8 elements) do not divide N=1020."""
NARROW = {"threads": 32, "rows_per_block": 1, "vector_bytes": 8, "row_storage": "reg", "occupancy": 0}
"""Valid at N=512 and, with 8-byte vectors (4 elements), at N=1020 too."""


def _winner_at(folder: Path, n: int, config: dict[str, object]) -> Path:
    data = make_artifact(key=key(N=n)).model_dump(mode="json")
    data["candidates"][0]["config"] = config
    data["winner"]["config"] = config
    artifact = Artifact.model_validate(data)
    path = folder / artifact.file_name()
    write_atomic(path, artifact.to_json_bytes())
    return path


class _Without(RMSNormSpec):
    """RMSNorm's declaration with the contract's default ``adapt_config`` (it adapts
    nothing), or with ``adapt`` in its place: a family that does not adapt, or adapts badly."""

    def __init__(self, adapt: Any = None) -> None:
        super().__init__()
        object.__setattr__(self, "_adapt", adapt)

    def choose_from_neighbours(self, asked: Any, neighbours: Any, device: Any) -> None:
        return None  # the nearest-key step as it is, without the family's neighbourhood rule

    def adapt_config(self, config: Any, key: Any, device: Any) -> Any:
        if self._adapt is None:
            return super(RMSNormSpec, self).adapt_config(config, key, device)
        return self._adapt(config, key, device)


class _NoVote(RMSNormSpec):
    """RMSNorm without its neighbourhood rule: the step serves the nearer key's winner."""

    def choose_from_neighbours(self, asked: Any, neighbours: Any, device: Any) -> None:
        return None


def test_a_nearer_winner_that_does_not_fit_the_row_is_served_adapted_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    near = _winner_at(tmp_path, 1024, WIDE)
    _winner_at(tmp_path, 512, NARROW)
    resolver = Resolver(paths=[str(tmp_path)], detector=None)
    with caplog.at_level(logging.DEBUG, logger="flyconfigs"):
        r, steps = resolver.explain(_NoVote(), key(N=1020), H200_SPEC)
    assert dict(r.config) == {**WIDE, "vector_bytes": 8}
    assert r.adapted_from is not None and dict(r.adapted_from) == WIDE
    assert (r.file, r.key_match, r.matched_key) == (str(near), "nearest", key(N=1024))
    assert r.as_json()["adapted_from"] == WIDE and resolver.resolve("rmsnorm", key(N=1024), H200_SPEC).adapted_from is None
    assert "adapted to this key by rmsnorm: vector_bytes 16 -> 8" in steps[-1].outcome
    assert [rec for rec in caplog.records if rec.levelno >= logging.WARNING] == []


def test_a_family_that_does_not_adapt_is_served_a_farther_winner_that_fits(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _winner_at(tmp_path, 1024, WIDE)
    far = _winner_at(tmp_path, 512, NARROW)
    register_kernel(_Without())  # type: ignore[arg-type]
    try:
        with caplog.at_level(logging.DEBUG, logger="flyconfigs"):
            r = Resolver(paths=[str(tmp_path)], detector=None).resolve("rmsnorm", key(N=1020), H200_SPEC)
    finally:
        unregister_kernel("rmsnorm")
    assert (dict(r.config), r.file, r.adapted_from) == (NARROW, str(far), None)
    assert any("does not fit this key" in reason and "does not divide the row of 1020" in reason for reason in r.reasons)
    # Passing over a key routinely is one DEBUG line, not a warning.
    # (Registering over flyconfigs' own rmsnorm is itself reported, once.)
    assert [(rec.levelname, "passed over" in rec.getMessage()) for rec in caplog.records
            if "kernel-collision" not in rec.getMessage()] == [("DEBUG", True)]


@pytest.mark.parametrize("adapt", [
    lambda config, key, device: (_ for _ in ()).throw(RuntimeError("adapter bug")),
    lambda config, key, device: {**config, "threads": 0},
    lambda config, key, device: "not a config",
])
def test_an_adapter_that_raises_or_answers_an_invalid_config_adapts_nothing(tmp_path: Path, adapt: object) -> None:
    _winner_at(tmp_path, 1024, WIDE)
    register_kernel(_Without(adapt))  # type: ignore[arg-type]
    try:
        r = Resolver(paths=[str(tmp_path)], detector=None).resolve("rmsnorm", key(N=1020), H200_SPEC)
    finally:
        unregister_kernel("rmsnorm")
    assert r.source == "default" and r.adapted_from is None
    assert RMSNORM.check_config(r.config, r.key, r.device) is None


def test_a_winner_refused_for_its_own_key_is_still_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # 2048 threads a block fits no key: a bad artifact, not a row it does not fit.
    _winner_at(tmp_path, 1024, {**WIDE, "threads": 1024, "rows_per_block": 2})
    with caplog.at_level(logging.DEBUG, logger="flyconfigs"):
        r = Resolver(paths=[str(tmp_path)], detector=None).resolve("rmsnorm", key(N=1020), H200_SPEC)
    assert r.source == "default"
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warnings) == 1 and "invalid-config" in warnings[0]


def test_a_winner_refused_for_its_own_key_warns_once_naming_that_key_whatever_rows_are_asked(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The broken artifact is one cause: a serving process that asks many rows logged one
    # warning per row, each naming the row asked instead of the key the artifact is for.
    bad = _winner_at(tmp_path, 1024, {**WIDE, "threads": 1024, "rows_per_block": 2})
    resolver = Resolver(paths=[str(tmp_path)], detector=None)
    with caplog.at_level(logging.DEBUG, logger="flyconfigs"):
        for n in (1020, 1000, 4096, 1024, 1020):
            assert resolver.resolve("rmsnorm", key(N=n), H200_SPEC).source == "default"
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert str(bad) in warnings[0] and f"its winner for its own key {key(N=1024)}" in warnings[0]
    assert "block of 2048 threads exceeds 1024" in warnings[0]


def test_one_resolve_of_a_row_of_one_logs_at_most_one_line_per_cause(caplog: pytest.LogCaptureFixture) -> None:
    # Against the committed sm90 artifacts, a row of one element passed over 16 tuned keys
    # with a warning each.
    resolver = Resolver(paths=[str(Path(__file__).resolve().parent.parent / "artifacts" / "sm90")], detector=None)
    for dtype in ("bf16", "fp32"):
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="flyconfigs"):
            r = resolver.resolve("rmsnorm", {"M": 1, "N": 1, "dtype": dtype, "weight_dtype": dtype}, H200_SPEC)
        assert RMSNORM.check_config(r.config, r.key, r.device) is None
        assert [rec for rec in caplog.records if rec.levelno >= logging.WARNING] == []
        causes = [rec.getMessage().split(":")[0] for rec in caplog.records]
        assert len(causes) == len(set(causes)) <= 1, causes
