"""The registry core as a hostile or unlucky user meets it with several families,
packages and folders at once: a kernel is one loaded record (the memo, ownership and
registration follow the record, never the name), precedence ranks standing first within
each step, the one search names the same file to resolve, explain, doctor and validate,
and what a plugin or a file gets wrong is reported, never raised into serving."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import SiteDir
from factories import H200, MI300X, artifact_dict, make_artifact
from flyconfigs import resolve
from flyconfigs.cli import main
from flyconfigs.errors import KernelPluginError
from flyconfigs.kernels.rmsnorm.declaration import RMSNormSpec
from flyconfigs.registry import KernelDecl, KeyAxis, Resolver, default_resolver, explain, refresh, register_kernel
from flyconfigs.registry.declarations import forget_loaded, unregister_kernel
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema import Artifact, write_atomic

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
ARGS = [f"{k}={v}" for k, v in KEY.items()]
H200_SPEC = "sm90:132:NVIDIA H200"
ACME_DECL = '''
from dataclasses import dataclass
from flyconfigs.kernels.rmsnorm.declaration import RMSNormSpec
from flyconfigs.registry import register_kernel


@dataclass(frozen=True)
class AcmeRMSNorm(RMSNormSpec):
    name: str = "acme_rms"

    @property
    def data_packages(self) -> tuple[str, ...]:
        return ("acme-tunings",)


SPEC = register_kernel(AcmeRMSNorm()) if {register} else AcmeRMSNorm()
'''


@pytest.fixture(autouse=True)
def _fresh_declarations() -> Any:
    forget_loaded()
    yield
    forget_loaded()


@dataclass(frozen=True)
class RMSNormV2(RMSNormSpec):
    """RMSNorm at family version 2: version-1 artifacts are stale for it."""

    version: int = 2


def _folder(path: Path, *artifacts: Artifact, names: tuple[str, ...] = ()) -> Path:
    for i, artifact in enumerate(artifacts):
        write_atomic(path / (names[i] if i < len(names) else artifact.file_name()), artifact.to_json_bytes())
    return path


def _measured(created: str = "2026-12-01T10:00:00Z", **kwargs: Any) -> Artifact:
    data = artifact_dict(**kwargs)
    data["provenance"]["created"] = created
    return Artifact.model_validate(data)


# -- a kernel is one record ---------------------------------------------------------------


def test_the_memo_never_answers_for_another_declaration_of_the_name(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "tuned", make_artifact(key=KEY, winner_index=3))
    resolver = Resolver([str(folder)], detector=None)
    assert resolver.resolve("rmsnorm", KEY, H200_SPEC).source == "override"
    fresh = resolver.resolve(RMSNormV2(), KEY, H200_SPEC)
    assert fresh.source == "default" and any("stale" in r for r in fresh.reasons)
    assert resolver.resolve("rmsnorm", KEY, H200_SPEC).source == "override"


def test_a_registration_and_its_removal_are_seen_by_the_next_resolve(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "tuned", make_artifact(key=KEY, winner_index=3))
    resolver = Resolver([str(folder)], detector=None)
    assert resolver.resolve("rmsnorm", KEY, H200_SPEC).source == "override"
    register_kernel(RMSNormV2())
    try:
        assert resolver.resolve("rmsnorm", KEY, H200_SPEC).source == "default"
    finally:
        unregister_kernel("rmsnorm")
    assert resolver.resolve("rmsnorm", KEY, H200_SPEC).source == "override"


def test_a_call_by_name_repeated_after_the_kernels_are_forgotten_is_searched_again(tmp_path: Path) -> None:
    from flyconfigs.registry.families.loaded import RECORDS as TABLE

    resolver = Resolver([str(_folder(tmp_path / "tuned", make_artifact(key=KEY, winner_index=3)))], detector=None,
                        kernels=TABLE)
    first = resolver.resolve("rmsnorm", KEY, H200_SPEC)
    assert resolver.resolve("rmsnorm", KEY, H200_SPEC) is first
    record = TABLE.record("rmsnorm")
    forget_loaded()  # the name's record is made afresh: no answer of the old one is given for it
    again = resolver.resolve("rmsnorm", KEY, H200_SPEC)
    assert again is not first and again.config == first.config and TABLE.record("rmsnorm") is not record


def test_a_device_query_hashes_as_its_fields_and_pickles_without_this_process_hash() -> None:
    import pickle

    query = DeviceQuery("nvidia", "sm90", "NVIDIA H200", 132, ("a",))
    assert hash(query) == hash(("nvidia", "sm90", "NVIDIA H200", 132, ("a",))) == hash(query)
    copy = pickle.loads(pickle.dumps(query))
    assert copy == query and "_hash" not in vars(copy) and hash(copy) == hash(query)
    with pytest.raises(TypeError):
        hash(DeviceQuery("nvidia", "sm90", "NVIDIA H200", 132, ["a"]))  # type: ignore[arg-type]


def test_refreshing_one_resolver_leaves_anothers_kernels_alone() -> None:
    one, other = Resolver([], detector=None), Resolver([], detector=None)
    one.resolve("rmsnorm", KEY, H200_SPEC)
    record = one.kernels.record("rmsnorm")
    other.refresh()
    assert one.kernels.record("rmsnorm") is record


def test_registering_over_another_distributions_kernel_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    register_kernel(RMSNormV2())
    try:
        with caplog.at_level(logging.WARNING, logger="flyconfigs.registry"):
            r = Resolver([], detector=None)
            r.resolve("rmsnorm", KEY, H200_SPEC)
    finally:
        unregister_kernel("rmsnorm")
    found = [p for p in r.problems.problems() if p.kind == "kernel-collision"]
    assert found and found[0].distribution == "flyconfigs" and "replaces kernel 'rmsnorm'" in found[0].message
    assert any("kernel-collision" in rec.getMessage() for rec in caplog.records)


@pytest.mark.parametrize("bad", [object(), "rmsnorm", 3])
def test_register_kernel_refuses_what_is_not_a_declaration(bad: object) -> None:
    with pytest.raises(TypeError, match="KernelDecl"):
        register_kernel(bad)  # type: ignore[arg-type]


def test_register_kernel_refuses_a_declaration_without_its_required_members() -> None:
    class NoAxes(KernelDecl):
        name = "no_axes"
        version = 1

        def default_config(self, key: Mapping[str, Any], device: DeviceQuery | None) -> dict[str, Any]:
            return {}

    with pytest.raises(TypeError, match="gives no key_axes"):
        register_kernel(NoAxes())


def _acme(site: SiteDir, register: bool) -> None:
    """acme-kernels declares acme_rms (naming acme-tunings as its data package); both
    acme-tunings and a third party hold an artifact for KEY on an MI300X."""
    site.install("gfx942", [make_artifact(device=MI300X, key=KEY, kernel="acme_rms", winner_index=1)],
                 name="acme-tunings", module="acme_tunings")
    site.install("gfx942", [make_artifact(device=MI300X, key=KEY, kernel="acme_rms", winner_index=2)],
                 name="other-tunings", module="other_tunings")
    info = site.root / "acme_kernels-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-kernels\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[flyconfigs.kernels]\nacme_rms = acme_rms_reg:SPEC\n")
    (site.root / "acme_rms_reg.py").write_text(ACME_DECL.replace("{register}", str(register)))
    refresh()


def test_an_entry_points_own_declaration_registered_in_process_keeps_its_owner(site: SiteDir) -> None:
    # acme-kernels ships its own artifacts (so they rank as the owner's) and registers its
    # declaration at import, as the Triton decorator does; a third party holds the key too.
    site.install("gfx942", [make_artifact(device=MI300X, key=KEY, kernel="acme_rms", winner_index=1)],
                 name="acme-kernels", module="acme_kernels_data")
    site.install("gfx942", [make_artifact(device=MI300X, key=KEY, kernel="acme_rms", winner_index=2)],
                 name="other-tunings", module="other_tunings")
    (info,) = site.root.glob("acme_kernels-*.dist-info")
    with (info / "entry_points.txt").open("a") as f:
        f.write("[flyconfigs.kernels]\nacme_rms = acme_own_reg:SPEC\n")
    (site.root / "acme_own_reg.py").write_text(
        ACME_DECL.replace("{register}", "True").replace('("acme-tunings",)', "()"))
    refresh()
    import acme_own_reg  # noqa: F401 - registers its declaration, as a decorator does at import

    try:
        r = resolve("acme_rms", KEY, "MI300X")
        assert r.origin == "acme-kernels", r.reasons
        assert explain("acme_rms", KEY, "MI300X")[0].file == r.file
        assert not [p for p in default_resolver().problems.problems() if p.kind == "kernel-collision"]
    finally:
        unregister_kernel("acme_rms")


def test_ranking_for_a_second_owner_never_changes_the_first(site: SiteDir) -> None:
    _acme(site, register=False)
    owned = resolve("acme_rms", KEY, "MI300X")
    assert owned.origin == "acme-tunings"
    from acme_rms_reg import AcmeRMSNorm

    @dataclass(frozen=True)
    class Unowned(AcmeRMSNorm):
        @property
        def data_packages(self) -> tuple[str, ...]:
            return ()

    # A declaration of the name made in this process that names no package has no owner:
    # the two packages are third parties of one standing and contest the key.
    assert resolve(Unowned(), KEY, "MI300X").source == "default"
    again, _ = explain("acme_rms", KEY, "MI300X")
    assert again.origin == "acme-tunings" and again.file == owned.file


def test_a_distribution_claiming_another_name_than_its_folder_is_skipped(site: SiteDir) -> None:
    official = make_artifact(key=KEY, winner_index=1)
    site.install("sm90", [official])
    site.install("sm90", [make_artifact(key=KEY, winner_index=2)], name="evil-tunings", module="evil_tunings")
    (info,) = site.root.glob("evil_tunings-*.dist-info")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flyconfigs\nVersion: 1.0.0\n")
    refresh()
    r = resolve("rmsnorm", KEY, H200_SPEC)
    assert (r.origin, dict(r.config)) == ("flyconfigs-sm90", official.winner.config)
    assert any(p.kind == "bad-distribution" and "names 'flyconfigs'" in p.message
               for p in default_resolver().problems.problems())


def test_a_typo_in_the_settings_is_reported_and_serving_goes_on(site: SiteDir, monkeypatch: pytest.MonkeyPatch) -> None:
    site.install("sm90", [make_artifact(key=KEY)])
    monkeypatch.setenv("FLYCONFIGS_KERNELS", "rmsnorm=flyconfig")
    monkeypatch.setenv("FLYCONFIGS_PACKAGES", "flyconfigs-sm09")
    refresh()
    assert resolve("rmsnorm", KEY, H200_SPEC).origin == "flyconfigs-sm90"
    problems = [*default_resolver().problems.problems()]
    settings = {p.where for p in problems if p.kind == "bad-setting"}
    assert settings == {"FLYCONFIGS_KERNELS", "FLYCONFIGS_PACKAGES"}, problems


def test_a_data_packages_member_that_raises_is_reported_not_raised(tmp_path: Path) -> None:
    @dataclass(frozen=True)
    class Broken(RMSNormSpec):
        @property
        def data_packages(self) -> tuple[str, ...]:
            raise RuntimeError("broken")

    folder = _folder(tmp_path / "tuned", make_artifact(key=KEY))
    resolver = Resolver([str(folder)], detector=None)
    assert resolver.resolve(Broken(), KEY, H200_SPEC).source == "override"
    assert any(p.kind == "kernel-error" and "data_packages" in p.message for p in resolver.problems.problems())


# -- precedence: the steps, then standing within each step ------------------------------


def test_a_lower_sources_nearer_key_never_beats_a_higher_ones_nearest(site: SiteDir, tmp_path: Path) -> None:
    official = make_artifact(key={**KEY, "M": 2048}, winner_index=1)
    site.install("sm90", [official])
    site.install("sm90", [make_artifact(key={**KEY, "M": 4097}, winner_index=2)], name="acme-tunings",
                 module="acme_tunings")
    r = resolve("rmsnorm", KEY, H200_SPEC)
    assert (r.origin, r.key_match, dict(r.matched_key or {})["M"]) == ("flyconfigs-sm90", "nearest", 2048)
    assert any("acme-tunings" in reason and "has a nearer key" in reason for reason in r.reasons)
    _, steps = explain("rmsnorm", KEY, H200_SPEC)
    assert any("has a nearer key" in s.outcome for s in steps)
    # The user's own tuning is never beaten by a package's nearer key either.
    mine = _folder(tmp_path / "mine", make_artifact(key={**KEY, "M": 512}, winner_index=3))
    local = Resolver([str(mine)], detector=None).resolve("rmsnorm", KEY, H200_SPEC)
    assert (local.source, dict(local.matched_key or {})["M"]) == ("override", 512)


def test_two_runs_in_one_folder_name_one_file_to_every_tool(site: SiteDir, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    site.install("sm90", [make_artifact(key=KEY, winner_index=1)])
    older = _measured(created="2026-12-01T10:00:00Z", key=KEY, winner_index=2)
    newer = _measured(created="2026-12-02T10:00:00Z", key=KEY, winner_index=3)
    # The older run's file sorts first by name: the name must not decide.
    folder = _folder(tmp_path / "runs", older, newer, names=("a-run.json", "b-run.json"))
    monkeypatch.setenv("FLYCONFIGS_PATH", str(folder))
    refresh()
    r = resolve("rmsnorm", KEY, H200_SPEC)
    assert (r.file, dict(r.config)) == (str(folder / "b-run.json"), newer.winner.config)
    assert explain("rmsnorm", KEY, H200_SPEC)[0].file == r.file
    assert main(["doctor", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    (collision,) = report["collisions"]
    assert collision["winner"] == r.file and not collision["contested"]
    assert [p["where"] for p in report["problems"] if p["kind"] == "duplicate"] == [str(folder / "a-run.json")]
    assert main(["validate", "--json", str(folder)]) == 1
    files = {f["file"]: f for f in json.loads(capsys.readouterr().out)["files"]}
    assert files[str(folder / "b-run.json")]["valid"]
    (problem,) = files[str(folder / "a-run.json")]["problems"]
    assert "duplicate" in problem["message"] and r.file in problem["message"]


# -- served means valid ------------------------------------------------------------------


class _Toy(KernelDecl):
    name = "toy_lists"
    version = 1
    key_axes = (KeyAxis("M", int, ordinal=True, minimum=1), KeyAxis("shape", list))

    def default_config(self, key: Mapping[str, Any], device: DeviceQuery | None) -> dict[str, Any]:
        return {"threads": 1, "rows_per_block": 1, "vector_bytes": 0, "row_storage": "reg", "occupancy": 0}


def test_a_resolution_shares_nothing_with_the_catalog(tmp_path: Path) -> None:
    data = artifact_dict(key={"M": 64, "shape": [1, 2]}, kernel="toy_lists")
    for candidate in [*data["candidates"], data["winner"], data["default"]]:
        candidate["config"] = {**candidate["config"], "tile": [16, 16]}
    artifact = Artifact.model_validate(data)
    resolver = Resolver([str(_folder(tmp_path / "t", artifact))], detector=None)
    first = resolver.resolve(_Toy(), {"M": 60, "shape": [1, 2]}, H200_SPEC)
    assert first.key_match == "nearest" and first.config["tile"] == [16, 16]
    first.config["tile"].append(3)
    first.matched_key["shape"].append(3)  # type: ignore[index]
    later = resolver.resolve(_Toy(), {"M": 70, "shape": [1, 2]}, H200_SPEC)
    assert (later.key_match, later.file, later.config["tile"]) == ("nearest", first.file, [16, 16])
    assert dict(later.matched_key or {}) == {"M": 64, "shape": [1, 2]}


def test_a_default_its_own_family_refuses_is_never_served(tmp_path: Path) -> None:
    @dataclass(frozen=True)
    class BadDefault(RMSNormSpec):
        def default_config(self, key: Mapping[str, Any], device: DeviceQuery | None) -> dict[str, Any]:
            return {**super().default_config(key, device), "vector_bytes": 3}

    resolver = Resolver([], detector=None)
    with pytest.raises(KernelPluginError, match="default_config returned a config its own checks refuse"):
        resolver.resolve(BadDefault(), KEY, H200_SPEC)
    assert any(p.kind == "kernel-error" for p in resolver.problems.problems())


def test_a_measured_artifact_recording_no_source_is_stale_under_exact_binding(tmp_path: Path) -> None:
    @dataclass(frozen=True)
    class Exact(RMSNormSpec):
        @property
        def source_binding(self) -> Any:
            return "exact"

        def source_sha256(self) -> str:
            return "cd" * 32

    data = artifact_dict(key=KEY, winner_index=3)
    data["kernel"] = {"name": "rmsnorm", "version": 1}
    folder = _folder(tmp_path / "t", Artifact.model_validate(data))
    r = Resolver([str(folder)], detector=None).resolve(Exact(), KEY, H200_SPEC)
    assert r.source == "default" and any("records no rmsnorm source" in reason for reason in r.reasons)
    data["selection"] = {"rule": "imported"}
    imported = _folder(tmp_path / "i", Artifact.model_validate(data))
    assert Resolver([str(imported)], detector=None).resolve(Exact(), KEY, H200_SPEC).source == "override"


def test_a_folder_file_changed_after_indexing_is_never_served_for_its_old_key(tmp_path: Path) -> None:
    artifact = make_artifact(key=KEY, winner_index=3)
    folder = _folder(tmp_path / "t", artifact)
    resolver = Resolver([str(folder)], detector=None)
    resolver.resolve("rmsnorm", KEY, "MI300X")  # indexes the folder, reads no file whole
    other = make_artifact(key={**KEY, "M": 1}, winner_index=2)
    (folder / artifact.file_name()).write_bytes(other.to_json_bytes())
    r = resolver.resolve("rmsnorm", KEY, H200_SPEC)
    assert r.source == "default"
    assert any(p.kind == "identity-mismatch" for p in resolver.problems.problems())


def test_a_hand_written_folder_file_is_indexed_whole(tmp_path: Path) -> None:
    artifact = make_artifact(device=H200, key=KEY, winner_index=3)
    (tmp_path / "pretty.json").write_text(json.dumps(artifact.model_dump(mode="json"), indent=2))
    r = Resolver([str(tmp_path)], detector=None).resolve("rmsnorm", KEY, H200_SPEC)
    assert (r.source, dict(r.config)) == ("override", artifact.winner.config)


def test_a_familys_source_is_hashed_once_however_many_misses(tmp_path: Path) -> None:
    calls = []

    @dataclass(frozen=True)
    class Counting(RMSNormSpec):
        def source_sha256(self) -> str:
            calls.append(1)
            return "ab" * 32

        @property
        def source_binding(self) -> Any:
            return "exact"

    folder = _folder(tmp_path / "t", make_artifact(key=KEY, winner_index=3))
    resolver = Resolver([str(folder)], detector=None)
    family = Counting()
    for m in range(1, 40):
        resolver.resolve(family, {**KEY, "M": m * 97}, H200_SPEC)
    assert len(calls) == 1


def test_a_declaration_passed_as_an_object_hits_the_memo(tmp_path: Path) -> None:
    resolver = Resolver([str(_folder(tmp_path / "t", make_artifact(key=KEY)))], detector=None)
    from flyconfigs.kernels.rmsnorm import SPEC

    for decl in (SPEC, RMSNormV2()):
        first = resolver.resolve(decl, KEY, H200_SPEC)
        assert resolver.resolve(decl, KEY, H200_SPEC) is first


def test_a_slow_plugin_call_never_holds_up_another_resolve(tmp_path: Path) -> None:
    import threading
    import time

    entered, release = threading.Event(), threading.Event()

    @dataclass(frozen=True)
    class Slow(RMSNormSpec):
        name: str = "slow_rms"

        def check_config(self, config: Mapping[str, object], key: Mapping[str, Any],
                         device: DeviceQuery | None) -> str | None:
            entered.set()
            release.wait(10)
            return None

    folder = _folder(tmp_path / "t", make_artifact(key=KEY, kernel="slow_rms"), make_artifact(key=KEY, winner_index=2))
    resolver = Resolver([str(folder)], detector=None)
    worker = threading.Thread(target=resolver.resolve, args=(Slow(), KEY, H200_SPEC))
    worker.start()
    try:
        assert entered.wait(10)
        start = time.perf_counter()
        assert resolver.resolve("rmsnorm", KEY, H200_SPEC).source == "override"
        assert time.perf_counter() - start < 5, "the other resolve waited for the slow plugin"
    finally:
        release.set()
        worker.join()


def test_a_discarded_resolver_leaves_nothing_of_its_catalog_alive(tmp_path: Path) -> None:
    import gc
    import weakref

    folder = _folder(tmp_path / "t", make_artifact(key=KEY, winner_index=3))
    resolver = Resolver([str(folder)], detector=None)
    assert resolver.resolve("rmsnorm", {**KEY, "M": 4000}, H200_SPEC).key_match == "nearest"
    index = next(iter(resolver._catalog._indexes.values()))
    entry = weakref.ref(index.units[0])
    del resolver, index
    gc.collect()
    assert entry() is None, gc.get_referrers(entry())
