"""The pack form (schema 1.7): the served part of many artifacts in one file, every
candidate's measurements in another, read back equal (timings to 5 significant digits),
served by the registry, and read lazily."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from distributions import install_data_package
from factories import artifact_dict, staged_artifact_dict
from flyconfigs.errors import ArtifactError
from flyconfigs.publish.packing import pack_folder, unpack_folder
from flyconfigs.registry import Resolver
from flyconfigs.registry.checks.check import check_package_folder
from flyconfigs.registry.core.problems import ProblemLog
from flyconfigs.registry.sources.entries import Source
from flyconfigs.registry.sources.packages import read_package_folder
from flyconfigs.registry.sources.packs import PackRef
from flyconfigs.schema import Artifact, write_atomic
from flyconfigs.schema.load import load_artifact, parse_artifact
from flyconfigs.schema.pack import (
    DIGITS,
    Pack,
    candidates_of,
    difference,
    folder_artifacts,
    labels_of,
    measurements_bytes,
    pack_artifacts,
    read_artifacts,
)
from flyconfigs.tuner.emit import already_tuned

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(p for p in (ROOT / "artifacts").iterdir() if p.is_dir())


def _artifacts(n: int = 6, staged: bool = True, **kwargs: Any) -> list[Artifact]:
    """``n`` measured artifacts of one device, keys M = 1, 2, 4, …, with timings of many digits."""
    out = []
    for i in range(n):
        data = (staged_artifact_dict if staged else artifact_dict)(
            key={"M": 2 ** i, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16"}, winner_index=i % 3, **kwargs)
        for c in data["candidates"]:
            t = c.get("timing")
            if t:
                c["timing"] = {k: (v * 1.000123456789 if k.endswith("_us") else v) for k, v in t.items()}
                c["timing"]["bandwidth_gbps"] = 1e6 * 1.5 / c["timing"]["median_us"] / 1000.0
        w = next(c for c in data["candidates"] if c["config"] == data["winner"]["config"])
        d = next(c for c in data["candidates"] if c["config"] == data["default"]["config"])
        data["winner"]["timing"], data["default"]["timing"] = w["timing"], d["timing"]
        out.append(Artifact.model_validate(data))
    return out


def test_a_pack_gives_back_every_artifact_and_its_timings_to_five_digits() -> None:
    artifacts = _artifacts()
    (pack, measurements), = pack_artifacts(artifacts, "1.7")
    assert len(pack.rows) == 6 and measurements.counts == [len(a.candidates) for a in artifacts]
    by_key = {json.dumps(a.key, sort_keys=True): a for a in artifacts}
    for i in range(len(pack.rows)):
        back = pack.artifact(i, measurements)
        original = by_key[json.dumps(back.key, sort_keys=True)]
        assert difference(original, back) is None
        # The winner and default exactly; a candidate's timing to DIGITS digits, not exactly.
        assert back.winner == original.winner and back.default == original.default
        timed = [(o.timing, b.timing) for o, b in zip(original.candidates, back.candidates, strict=True) if o.timing]
        assert any(o != b for o, b in timed)
        assert all(abs(o.median_us - b.median_us) <= 10.0 ** -(DIGITS - 1) * o.median_us for o, b in timed)


def test_packing_what_a_pack_gives_back_gives_the_same_bytes() -> None:
    (pack, measurements), = pack_artifacts(_artifacts(), "1.7")
    again = [pack.artifact(i, measurements) for i in range(len(pack.rows))]
    (pack2, measurements2), = pack_artifacts(again, "1.7")
    assert pack2.to_json_bytes() == pack.to_json_bytes()
    assert measurements_bytes(measurements2) == measurements_bytes(measurements)


def test_a_difference_beyond_the_digits_kept_is_reported() -> None:
    original = _artifacts(1)[0]
    data = original.model_dump(mode="json")
    data["candidates"][3]["timing"]["p80_us"] *= 1.001
    assert "candidates[3].timing.p80_us" in (difference(original, Artifact.model_validate(data)) or "")
    data = original.model_dump(mode="json")
    data["winner"]["timing"]["median_us"] *= 1.00001  # the served part is kept exactly
    assert "winner.timing.median_us" in (difference(original, Artifact.model_validate(data)) or "")


def test_screen_and_final_are_labelled_as_recorded_and_inferred_only_where_certain() -> None:
    staged = _artifacts(1)[0]
    labels, recorded = labels_of(staged)
    assert recorded and labels == [c.timed_in for c in staged.candidates]
    # A file that records no label but whose timings came from a 5-sample screen and the
    # protocol's 50-sample final: the labels are certain.
    unlabelled = staged.model_dump(mode="json")
    for c in unlabelled["candidates"]:
        c.pop("timed_in", None)
    del unlabelled["provenance"]["timing_protocol"]["screen"]
    plain = Artifact.model_validate(unlabelled)
    labels, recorded = labels_of(plain)
    assert not recorded
    assert labels == [None if c.timing is None else "final" if c.timing.samples == 50 else "screen"
                      for c in plain.candidates]
    # Every timing of one sample count: a screen of the final's length cannot be told apart.
    same = _artifacts(1, staged=False)[0]
    assert {label for label in labels_of(same)[0] if label} == {"unknown"}
    (pack, measurements), = pack_artifacts([plain], "1.7")
    assert measurements.recorded == [False]
    assert [c.label for c in measurements.candidates(0)] == labels
    # An inferred label is never written back as the tuner's timed_in.
    assert all(c.timed_in is None for c in pack.artifact(0, measurements).candidates)


def test_pack_folder_replaces_single_files_and_a_new_tuning_replaces_a_packed_row(tmp_path: Path) -> None:
    artifacts = _artifacts()
    for a in artifacts:
        write_atomic(tmp_path / a.file_name(), a.to_json_bytes())
    result = pack_folder(tmp_path)
    assert result.rows == 6 and len(result.written) == 1 and len(result.removed) == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [result.written[0].name, result.written[0].name.replace("-pack-", "-measurements-") + ".gz"])
    # A re-tuning of one key, written as the tuner writes it, then packed again.
    newer = artifacts[2].model_copy(update={"provenance": artifacts[2].provenance.model_copy(
        update={"created": "2026-12-09T00:00:00Z"})})
    write_atomic(tmp_path / newer.file_name(), newer.to_json_bytes())
    pack_folder(tmp_path)
    found = {json.dumps(a.key, sort_keys=True): a for a in folder_artifacts(tmp_path)}
    assert len(found) == 6
    assert found[json.dumps(newer.key, sort_keys=True)].provenance.created == "2026-12-09T00:00:00Z"
    out = tmp_path.parent / "unpacked"
    assert len(unpack_folder(tmp_path, out)) == 6
    assert difference(newer, load_artifact(out / newer.file_name())) is None


def _packed_package(tmp_path: Path, artifacts: list[Artifact]) -> tuple[Path, Pack]:
    (pack, measurements), = pack_artifacts(artifacts, "1.7")
    site = tmp_path / "site"
    install_data_package(site, "sm90", [], packs=[(pack, measurements_bytes(measurements))])
    return site, pack


def test_a_package_of_packs_serves_as_its_artifacts_did_and_reads_candidates_only_when_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    artifacts = _artifacts()
    site, pack = _packed_package(tmp_path, artifacts)
    monkeypatch.syspath_prepend(str(site))
    resolver = Resolver([], detector=None)
    folder = site / "flyconfigs_sm90" / "artifacts"
    gz = folder / pack.measurements.file
    for a in artifacts:
        r = resolver.resolve("rmsnorm", dict(a.key), device="H200")
        assert r.key_match == "exact" and dict(r.config) == a.winner.config
    # The measurements are read on the first candidates_of, not to serve.
    gz.rename(gz.with_suffix(".moved"))
    assert Resolver([], detector=None).resolve("rmsnorm", dict(artifacts[1].key), device="H200").key_match == "exact"
    artifact = _row(site, artifacts[0])
    assert len(artifact.candidates) <= 2  # the served part only
    with pytest.raises(ArtifactError, match="measurements"):
        candidates_of(artifact)
    gz.with_suffix(".moved").rename(gz)
    got = candidates_of(_row(site, artifacts[0]))
    assert [c.config for c in got] == [c.config for c in artifacts[0].candidates]
    assert [c.label for c in got] == [c.timed_in for c in artifacts[0].candidates]
    assert check_package_folder(site / "flyconfigs_sm90") == ([], [])


def test_doctor_finds_nothing_wrong_with_an_installed_package_of_packs(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # A pack's rows hold key cells only: its winners are checked as its rows' artifacts,
    # not as table columns it does not have.
    site, _ = _packed_package(tmp_path, _artifacts())
    monkeypatch.syspath_prepend(str(site))
    problems = Resolver([], detector=None).check_all()
    assert [p for p in problems if p.kind in ("invalid-config", "invalid-key", "invalid-artifact")] == []


def _row(site: Path, wanted: Artifact) -> Artifact:
    """The artifact the installed package's pack serves for ``wanted``'s key, read afresh."""
    folder = site / "flyconfigs_sm90"
    problems = ProblemLog()
    package = read_package_folder(folder, None, Source("override", str(folder), (0, 0)), problems)
    assert package is not None
    ref = PackRef.of_manifest(package.packs[0], Source("override", str(folder), (0, 0)), str(folder))
    for entry in ref.entries(problems):
        if entry.key == dict(wanted.key):
            found = entry.load(problems)
            assert found is not None
            return found
    raise AssertionError("no row")


def test_an_altered_measurements_file_is_reported_by_the_package_check(tmp_path: Path) -> None:
    site, pack = _packed_package(tmp_path, _artifacts())
    gz = site / "flyconfigs_sm90" / "artifacts" / pack.measurements.file
    gz.write_bytes(gzip.compress(gzip.decompress(gz.read_bytes()).replace(b'"digits":5', b'"digits":6'), mtime=0))
    problems, _ = check_package_folder(site / "flyconfigs_sm90")
    assert [p.where for p in problems] == [str(gz)]
    assert "hash-mismatch" in problems[0].message and "the one its pack names" in problems[0].message


def test_resume_finds_a_key_in_a_pack(tmp_path: Path) -> None:
    artifacts = _artifacts(2)
    for a in artifacts:
        write_atomic(tmp_path / a.file_name(), a.to_json_bytes())
    pack_folder(tmp_path)
    a = artifacts[1]
    assert already_tuned(tmp_path, "rmsnorm", dict(a.key), a.device.identity, a.kernel.source_sha256 or "",
                         dict(a.provenance.backend_versions))
    assert not already_tuned(tmp_path, "rmsnorm", {**a.key, "N": 8192}, a.device.identity,
                             a.kernel.source_sha256 or "", dict(a.provenance.backend_versions))
    assert not already_tuned(tmp_path, "rmsnorm", dict(a.key), a.device.identity, "cd" * 32,
                             dict(a.provenance.backend_versions))


def test_an_artifact_reader_refuses_a_pack_by_its_form() -> None:
    (pack, _), = pack_artifacts(_artifacts(1), "1.7")
    with pytest.raises(ArtifactError, match="pack of many keys"):
        parse_artifact(pack.model_dump(mode="json"))


@pytest.mark.slow
@pytest.mark.parametrize("folder", COMMITTED, ids=[p.name for p in COMMITTED])
def test_every_committed_artifact_packs_and_reads_back_equal(folder: Path) -> None:
    """Every committed artifact, a single 1.x file or a packed row (read back whole),
    packed again reads back equal; a folder already packed is exactly what packing its
    artifacts gives (nothing more to gain, nothing lost)."""
    found, _ = read_artifacts(folder)
    artifacts = [a for a, _ in found.values()]
    packs = pack_artifacts(artifacts, "1.7")
    originals = {json.dumps(a.identity(), sort_keys=True): a for a in artifacts}
    for pack, measurements in packs:
        for i in range(len(pack.rows)):
            back = pack.artifact(i, measurements)
            assert difference(originals[json.dumps(back.identity(), sort_keys=True)], back) is None
        committed = folder / pack.file_name()
        if committed.is_file():
            assert committed.read_bytes() == pack.to_json_bytes()
            assert (folder / pack.measurements.file).read_bytes() == measurements_bytes(measurements)


def test_a_published_wheel_holds_each_pack_and_its_measurements(tmp_path: Path) -> None:
    import zipfile

    from flyconfigs.publish.build import publish

    folder = tmp_path / "sm90"
    folder.mkdir()
    for a in _artifacts(3):
        write_atomic(folder / a.file_name(), a.to_json_bytes())
    pack_folder(folder)
    result = publish(folder, target="sm90", version="1.0.0", out=tmp_path / "dist")
    wheel = next(p for p in result.files if str(p).endswith(".whl"))
    names = {Path(n).name for n in zipfile.ZipFile(wheel).namelist()}
    assert {p.name for p in folder.iterdir()} <= names
