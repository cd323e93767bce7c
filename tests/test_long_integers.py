"""A JSON integer longer than Python converts from text (``sys.get_int_max_str_digits()``,
4300 digits by default) is bad data like any other: one clear error naming the file and
the field where files are checked, a fallback with one warning where a call is served.
Python's own conversion raises a bare ``ValueError``, which must never escape."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from conftest import SiteDir
from factories import artifact_dict, make_artifact
from flyconfigs import resolve
from flyconfigs.cli import main
from flyconfigs.errors import ArtifactError, InvalidDeviceError
from flyconfigs.registry import default_resolver, refresh
from flyconfigs.schema.jsonio import parse_document
from package_damage import read_manifest

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
ARGS = ["M=4096", "N=8192", "dtype=bf16", "weight_dtype=bf16"]
H200_SPEC = "sm90:132:NVIDIA H200"
LONG = "9" * 5000


def _with_long_integer(text: str, field: str) -> str:
    """``text`` (compact JSON) with the value of ``"field":`` replaced by :data:`LONG`."""
    data = json.loads(text)
    data[field] = 0
    compact = json.dumps(data, sort_keys=True)
    return compact.replace(f'"{field}": 0', f'"{field}": {LONG}')


@pytest.mark.parametrize("literal", [LONG, "-" + LONG])
def test_a_long_integer_is_an_artifact_error_naming_the_field(literal: str) -> None:
    with pytest.raises(ArtifactError) as caught:
        parse_document(b'{"outer": {"list": [1, ' + literal.encode() + b"]}}", "x.json")
    assert caught.value.file == "x.json"
    assert caught.value.field == "outer.list[1]"
    assert "integer of 5000 digits is over the limit of 4300 digits" in str(caught.value)


def test_an_override_artifact_with_a_long_integer_falls_back_with_one_warning(
        site: SiteDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    local = tmp_path / "local"
    local.mkdir()
    bad = local / "long.json"
    bad.write_text(_with_long_integer(json.dumps(artifact_dict(key=KEY)), "schema_version"))
    monkeypatch.setenv("FLYCONFIGS_PATH", str(local))
    refresh()
    caplog.set_level(logging.WARNING, logger="flyconfigs.registry")
    assert resolve("rmsnorm", KEY, H200_SPEC).source == "default"
    assert resolve("rmsnorm", {**KEY, "M": 77}, H200_SPEC).source == "default"
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and warnings[0].startswith(f"invalid-artifact: {bad}: schema_version: integer of 5000")


def test_validate_names_the_file_and_field_of_a_long_integer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "long.json"
    bad.write_text(_with_long_integer(json.dumps(artifact_dict(key=KEY)), "schema_version"))
    assert main(["validate", str(bad)]) == 1
    out, err = capsys.readouterr()
    assert f"{bad}: schema_version: integer of 5000 digits" in out
    assert "Traceback" not in err


def test_a_manifest_with_a_long_integer_is_skipped_and_reported_by_list_doctor_and_explain(
        site: SiteDir, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    folder = site.install("sm90", [make_artifact(key=KEY)])
    manifest = folder / "manifest.json"
    manifest.write_text(_with_long_integer(json.dumps(read_manifest(folder)), "target"))
    monkeypatch.setenv("FLYCONFIGS_DEVICE", H200_SPEC)
    refresh()
    caplog.set_level(logging.WARNING, logger="flyconfigs.registry")
    assert resolve("rmsnorm", KEY).source == "default"
    assert [r.getMessage()[:len("invalid-manifest")] for r in caplog.records] == ["invalid-manifest"]
    assert main(["list"]) == 0
    assert main(["explain", "rmsnorm", *ARGS]) == 0
    assert main(["doctor"]) == 1
    out, err = capsys.readouterr()
    assert f"problem: invalid-manifest: {manifest} (from flyconfigs-sm90): target: integer of 5000 digits" in out
    assert "Traceback" not in err
    assert main(["validate", str(manifest)]) == 1
    assert "target: integer of 5000 digits" in capsys.readouterr().out


def test_a_long_integer_in_the_device_argument_is_an_invalid_device_error(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    spec = '{"arch": "sm90", "compute_units": ' + LONG + "}"
    with pytest.raises(InvalidDeviceError, match="compute_units: integer of 5000 digits"):
        resolve("rmsnorm", KEY, spec)
    device_file = tmp_path / "device.json"
    device_file.write_text(spec)
    with pytest.raises(InvalidDeviceError, match=f"{device_file}: compute_units: integer of 5000"):
        resolve("rmsnorm", KEY, f"@{device_file}")
    assert main(["explain", "rmsnorm", *ARGS, "--device", spec]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "compute_units: integer of 5000 digits" in err


def test_a_long_integer_in_the_device_variable_falls_back_and_says_so(site: SiteDir,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    site.install("sm90", [make_artifact(key=KEY)])
    monkeypatch.setenv("FLYCONFIGS_DEVICE", '{"arch": "sm90", "compute_units": ' + LONG + "}")
    refresh()
    r = resolve("rmsnorm", KEY)
    assert r.source == "default"
    assert r.reasons[0].startswith("no device known: FLYCONFIGS_DEVICE is invalid (compute_units: integer of 5000")
    assert [p.kind for p in default_resolver().problems.problems()] == ["bad-device"]
