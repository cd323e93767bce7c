"""FlyDSL's offline artifacts: byte-compatible export, import, and the file-name digest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from factories import MI300X, artifact_dict, make_artifact, predicted_artifact_dict
from flyconfigs.cli import main
from flyconfigs.errors import ArtifactError
from flyconfigs.schema import Artifact, load_artifact, write_atomic
from flyconfigs.schema.flydsl import export_flydsl, import_flydsl_file, write_flydsl


def flydsl_writer(identity: dict, config: dict) -> tuple[str, str]:
    """What FlyDSL's own writer does, restated from its documented behaviour."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    payload = {"version": 1, "identity": identity, "config": config}
    return f"{identity['name']}-{digest}.json", json.dumps(payload, sort_keys=True, indent=2) + "\n"


def test_export_matches_flydsls_writer_byte_for_byte() -> None:
    artifact = make_artifact(device=MI300X)
    name, payload = export_flydsl(artifact)
    identity = {
        "name": "rmsnorm",
        "key": dict(artifact.key),
        "device": {"name": "AMD Instinct MI300X", "arch": "gfx942", "compute_units": 304},
    }
    expected_name, expected_text = flydsl_writer(identity, dict(artifact.winner.config))
    assert name == expected_name
    assert payload == expected_text.encode()


def test_non_ascii_product_is_escaped_like_flydsl() -> None:
    artifact = make_artifact(device={**MI300X, "product": "Instinct™ MI300X"})
    name, payload = export_flydsl(artifact)
    assert b"\\u2122" in payload
    identity = json.loads(payload)["identity"]
    assert name == flydsl_writer(identity, {})[0]


def test_export_then_import_is_the_identity(tmp_path: Path) -> None:
    artifact = make_artifact(device=MI300X)
    path = write_flydsl(artifact, tmp_path)
    imported = import_flydsl_file(path)
    assert imported.winner.config == artifact.winner.config
    assert imported.key == artifact.key
    assert (imported.device.arch, imported.device.product, imported.device.compute_units) == ("gfx942", "AMD Instinct MI300X", 304)
    name, payload = export_flydsl(imported)
    assert (tmp_path / name).read_bytes() == payload


def test_import_then_export_reproduces_a_flydsl_file(tmp_path: Path) -> None:
    identity = {"name": "rmsnorm", "key": {"M": 32768, "N": 8192, "dtype_str": "bf16"},
                "device": {"name": "AMD Instinct MI325X", "arch": "gfx942", "compute_units": 304}}
    name, text = flydsl_writer(identity, {"BLOCK_THREADS": 256, "waves_per_eu": 2})
    (tmp_path / name).write_text(text)
    assert export_flydsl(import_flydsl_file(tmp_path / name)) == (name, text.encode())


def test_import_refuses_a_file_whose_name_lies(tmp_path: Path) -> None:
    identity = {"name": "rmsnorm", "key": {"M": 1}, "device": {"name": "X", "arch": "gfx942", "compute_units": 304}}
    _, text = flydsl_writer(identity, {"BLOCK_THREADS": 64})
    bad = tmp_path / ("rmsnorm-" + "0" * 64 + ".json")
    bad.write_text(text)
    with pytest.raises(ArtifactError, match="file name's digest") as info:
        import_flydsl_file(bad)
    assert info.value.problems[0].field == "identity"


def test_export_refuses_non_amd_devices() -> None:
    with pytest.raises(ArtifactError, match="device.vendor"):
        export_flydsl(make_artifact())


ACME = "flydsl.acme_norm"
"""A FlyDSL kernel this environment does not declare (FlyDSL's ``artifact_name`` ``acme_norm``)."""


def test_cli_import_and_export(tmp_path: Path) -> None:
    fly = tmp_path / "fly"
    ours = tmp_path / "ours"
    write_flydsl(make_artifact(device=MI300X, kernel=ACME), fly)
    assert main(["flydsl", "import", str(fly), "--out", str(ours)]) == 0
    (imported,) = ours.iterdir()
    assert load_artifact(imported).selection.rule == "imported"
    assert main(["flydsl", "export", str(ours), "--out", str(tmp_path / "back")]) == 0
    assert [p.read_bytes() for p in (tmp_path / "back").iterdir()] == [p.read_bytes() for p in fly.iterdir()]


def test_the_digest_check_applies_wherever_a_flydsl_file_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flyconfigs import resolve
    from flyconfigs.kernels.flydsl import FlyDSLKernel
    from flyconfigs.registry import default_resolver, refresh

    good = write_flydsl(make_artifact(device=MI300X, kernel=ACME), tmp_path / "fly")
    assert good.name.startswith("acme_norm-")  # FlyDSL's name, out of flyconfigs' namespace
    misnamed = good.with_name("acme_norm-" + "0" * 64 + ".json")
    good.rename(misnamed)
    assert main(["validate", str(misnamed)]) == 1
    with pytest.raises(ArtifactError, match="file name's digest"):
        load_artifact(misnamed)
    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path / "fly"))
    refresh()
    key = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
    acme = FlyDSLKernel("acme_norm", tuple(key))
    assert resolve(acme, key, "gfx942:304:AMD Instinct MI300X").source == "default"
    assert any("file name's digest" in p.message for p in default_resolver().problems.problems())
    misnamed.rename(good)
    refresh()
    assert resolve(acme, key, "gfx942:304:AMD Instinct MI300X").source == "override"


def test_export_never_overwrites_a_different_artifact_of_the_same_flydsl_name(tmp_path: Path) -> None:
    plain = make_artifact(device={**MI300X, "features": []})
    other = make_artifact(device=MI300X, winner_index=2)  # differs only where FlyDSL's identity cannot see
    path = write_flydsl(plain, tmp_path)
    assert write_flydsl(plain, tmp_path) == path  # the same bytes again are fine
    before = path.read_bytes()
    with pytest.raises(ArtifactError, match="not overwritten"):
        write_flydsl(other, tmp_path)
    assert path.read_bytes() == before


def test_flydsls_rmsnorm_is_imported_into_its_own_namespace_and_clashes_with_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # FlyDSL's own RMSNorm is called rmsnorm too, but keyed by m_in, N, dtype_str: another kernel.
    identity = {"name": "rmsnorm", "key": {"m_in": 32768, "N": 8192, "dtype_str": "bf16"},
                "device": {"name": "AMD Instinct MI300X", "arch": "gfx942", "compute_units": 304}}
    name, text = flydsl_writer(identity, {"BLOCK_THREADS": 256})
    (tmp_path / "flydsl").mkdir()
    (tmp_path / "flydsl" / name).write_text(text)
    assert main(["flydsl", "import", str(tmp_path / "flydsl"), "--out", str(tmp_path / "imported")]) == 0
    (imported,) = (tmp_path / "imported").iterdir()
    assert imported.name.startswith("flydsl.rmsnorm-") and load_artifact(imported).kernel.name == "flydsl.rmsnorm"
    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path / "imported"))
    from flyconfigs.registry import default_resolver

    default_resolver().refresh()
    capsys.readouterr()
    assert main(["doctor", "--json"]) == 0
    assert [p for p in json.loads(capsys.readouterr().out)["problems"] if p["kind"] == "kernel-name-clash"] == []
    device = "gfx942:304:AMD Instinct MI300X:sramecc+,xnack-"
    key = {"M": 32768, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
    assert main(["explain", "rmsnorm", *(f"{k}={v}" for k, v in key.items()), "--device", device]) == 0
    assert "[default" in capsys.readouterr().out
    assert main(["explain", "flydsl.rmsnorm", "m_in=32768", "N=8192", "dtype_str=bf16", "--device", device]) == 0
    assert "=> BLOCK_THREADS=256  [override" in capsys.readouterr().out


def _round_trip(artifact: Artifact, tmp_path: Path) -> str:
    """The label ``artifact`` has after ``flydsl export`` and ``flydsl import``."""
    fly, back = tmp_path / "fly", tmp_path / "back"
    write_flydsl(artifact, fly)
    assert main(["flydsl", "import", str(fly), "--out", str(back)]) == 0
    (path,) = back.iterdir()
    return load_artifact(path).selection.rule


def test_a_conversion_never_upgrades_a_label(tmp_path: Path) -> None:
    measured = make_artifact(device=MI300X, kernel=ACME)
    assert _round_trip(measured, tmp_path / "measured") == "imported"
    imported = import_flydsl_file(write_flydsl(measured, tmp_path / "first"))
    assert _round_trip(imported, tmp_path / "imported") == "imported"
    predicted = Artifact.model_validate(predicted_artifact_dict(device=MI300X))
    with pytest.raises(ArtifactError, match="never measured") as info:
        export_flydsl(predicted)
    assert info.value.problems[0].field == "selection.rule"


def test_export_of_a_predicted_artifact_is_refused_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The laundering path: a shipped prediction exported, imported as 'imported', then outranking it.
    ours = tmp_path / "ours"
    predicted = Artifact.model_validate(predicted_artifact_dict(device=MI300X))
    write_atomic(ours / predicted.file_name(), predicted.to_json_bytes())
    assert main(["flydsl", "export", str(ours), "--out", str(tmp_path / "fly")]) == 1
    assert "selection.rule" in capsys.readouterr().err
    assert not (tmp_path / "fly").exists() or list((tmp_path / "fly").iterdir()) == []


def test_export_of_a_test_doubles_artifact_is_refused() -> None:
    data = artifact_dict(device=MI300X)
    data["provenance"]["backend"] = "simulated"
    with pytest.raises(ArtifactError, match="test double") as info:
        export_flydsl(Artifact.model_validate(data))
    assert info.value.problems[0].field == "provenance.backend"


def test_export_of_a_newer_minor_refuses_to_drop_its_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = artifact_dict(device=MI300X)
    data["schema_version"] = "1.9"
    data["winner"]["valid_for"] = {"N": "multiple of 8"}
    path = tmp_path / "ours" / "newer.json"
    write_atomic(path, json.dumps(data).encode())
    assert load_artifact(path).schema_version == "1.9"  # readable: the loader ignores what it does not know
    assert main(["flydsl", "export", str(path), "--out", str(tmp_path / "fly")]) == 1
    err = capsys.readouterr().err
    assert "schema_version" in err and "winner.valid_for" in err and "upgrade flyconfigs" in err
    assert not (tmp_path / "fly").exists()


def test_import_never_replaces_a_measured_or_predicted_artifact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = {**MI300X, "features": []}  # the identity a FlyDSL import has
    fly, ours = tmp_path / "fly", tmp_path / "ours"
    write_flydsl(make_artifact(device=plain, winner_index=2, kernel=ACME), fly)
    predicted = Artifact.model_validate(predicted_artifact_dict(device=plain, kernel=ACME))
    path = write_atomic(ours / predicted.file_name(), predicted.to_json_bytes())
    before = path.read_bytes()
    assert main(["flydsl", "import", str(fly), "--out", str(ours)]) == 1
    assert "holds a predicted artifact" in capsys.readouterr().err
    assert path.read_bytes() == before and load_artifact(path).selection.rule == "predicted"
    path.unlink()
    assert main(["flydsl", "import", str(fly), "--out", str(ours)]) == 0
    assert main(["flydsl", "import", str(fly), "--out", str(ours)]) == 0  # an earlier import is replaced
    assert load_artifact(path).selection.rule == "imported"


def test_kernel_imports_a_flydsl_kernels_files_as_a_declared_kernel_checked_by_its_declaration(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # flyconfigs' own rmsnorm exported to FlyDSL's format, read back as rmsnorm on purpose.
    ours = make_artifact(device={**MI300X, "features": []})
    write_flydsl(ours, tmp_path / "fly")
    assert main(["import", "flydsl", str(tmp_path / "fly"), "--out", str(tmp_path / "back"),
                 "--kernel", "rmsnorm=rmsnorm"]) == 0
    (back,) = (tmp_path / "back").iterdir()
    assert load_artifact(back).kernel.name == "rmsnorm" and load_artifact(back).winner.config == ours.winner.config
    # Without --kernel it is FlyDSL's rmsnorm, whose key it is not.
    assert main(["import", "flydsl", str(tmp_path / "fly"), "--out", str(tmp_path / "refused")]) == 1
    assert "identity.key" in capsys.readouterr().err
    # FlyDSL's own RMSNorm file is not flyconfigs' rmsnorm either: --kernel is checked.
    identity = {"name": "rmsnorm", "key": {"m_in": 1, "N": 8192, "dtype_str": "bf16"},
                "device": {"name": "AMD Instinct MI300X", "arch": "gfx942", "compute_units": 304}}
    name, text = flydsl_writer(identity, {"BLOCK_THREADS": 256})
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / name).write_text(text)
    assert main(["flydsl", "import", str(tmp_path / "theirs"), "--out", str(tmp_path / "x"),
                 "--kernel", "rmsnorm=rmsnorm"]) == 1
    assert "key for 'rmsnorm'" in capsys.readouterr().err
    assert main(["flydsl", "import", str(tmp_path / "theirs"), "--out", str(tmp_path / "x"), "--kernel", "rmsnorm"]) == 2


def test_flydsls_rmsnorm_takes_the_merged_adopters_weight_dtype_str_and_no_other_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # PR #786 as merged keys FlyDSL's RMSNorm by weight_dtype_str too.
    device = {"name": "AMD Instinct MI300X", "arch": "gfx942", "compute_units": 304}
    for folder, key in (("merged", {"m_in": 8, "N": 8192, "dtype_str": "bf16", "weight_dtype_str": "f32"}),
                        ("other", {"m_in": 8, "N": 8192, "dtype_str": "bf16", "eps": 1e-6})):
        name, text = flydsl_writer({"name": "rmsnorm", "key": key, "device": device},
                                   {"BLOCK_THREADS": 512, "waves_per_eu": 2})
        (tmp_path / folder).mkdir()
        (tmp_path / folder / name).write_text(text)
    assert main(["import", "flydsl", str(tmp_path / "merged"), "--out", str(tmp_path / "ok")]) == 0
    assert main(["validate", str(tmp_path / "ok")]) == 0
    capsys.readouterr()
    assert main(["import", "flydsl", str(tmp_path / "other"), "--out", str(tmp_path / "no")]) == 1
    assert "must name exactly m_in, N, dtype_str" in capsys.readouterr().err


def test_validate_reports_a_flydsl_import_of_an_earlier_flyconfigs_under_a_declared_kernels_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before the namespace, FlyDSL's rmsnorm was imported as rmsnorm: another kernel under that name.
    identity = {"name": "rmsnorm", "key": {"m_in": 8, "N": 8192, "dtype_str": "bf16"},
                "device": {"name": "AMD Instinct MI300X", "arch": "gfx942", "compute_units": 304}}
    name, text = flydsl_writer(identity, {"BLOCK_THREADS": 256})
    (tmp_path / name).write_text(text)
    data = import_flydsl_file(tmp_path / name).model_dump(mode="json")
    data["kernel"]["name"] = "rmsnorm"
    old = Artifact.model_validate(data)
    write_atomic(tmp_path / "old" / old.file_name(), old.to_json_bytes())
    capsys.readouterr()
    assert main(["validate", str(tmp_path / "old")]) == 1
    out = capsys.readouterr().out
    assert "kernel-name-clash" in out and "dtype_str" in out and "weight_dtype" in out
