"""Bad data never crashes resolve: each problem falls back with one warning and is
listed by ``flyconfigs doctor``."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import SiteDir
from factories import artifact_dict, make_artifact
from flyconfigs import resolve
from flyconfigs.cli import main
from flyconfigs.registry import default_resolver
from flyconfigs.schema import canonical_bytes

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
H200_SPEC = "sm90:132:NVIDIA H200"


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def _write_manifest(folder: Path, data: dict) -> None:
    (folder / "manifest.json").write_bytes(canonical_bytes(data))


def _corrupt_manifest(folder: Path) -> None:
    (folder / "manifest.json").write_text('{"schema_version": "1.0", "target": ')


def _row_escapes(folder: Path) -> None:
    data = _manifest(folder)
    data["artifacts"][0]["file"] = "../escape.json"
    _write_manifest(folder, data)


def _row_absolute(folder: Path) -> None:
    data = _manifest(folder)
    data["artifacts"][0]["file"] = "/etc/passwd"
    _write_manifest(folder, data)


def _symlink_out(folder: Path) -> None:
    row = _manifest(folder)["artifacts"][0]
    inside = folder / row["file"]
    outside = folder.parent.parent / "outside.json"
    outside.write_bytes(inside.read_bytes())
    inside.unlink()
    inside.symlink_to(outside)


def _missing_file(folder: Path) -> None:
    (folder / _manifest(folder)["artifacts"][0]["file"]).unlink()


def _hash_mismatch(folder: Path) -> None:
    path = folder / _manifest(folder)["artifacts"][0]["file"]
    path.write_bytes(path.read_bytes().replace(b'"host":"h200-test"', b'"host":"h200-edit"'))


def _newer_major(folder: Path) -> None:
    data = _manifest(folder)
    row = data["artifacts"][0]
    doc = artifact_dict(key=KEY)
    doc["schema_version"] = "2.0"
    raw = canonical_bytes(doc) + b"\n"
    (folder / row["file"]).write_bytes(raw)
    row["sha256"] = hashlib.sha256(raw).hexdigest()
    _write_manifest(folder, data)


def _newer_major_manifest(folder: Path) -> None:
    data = _manifest(folder)
    data["schema_version"] = "2.0"
    _write_manifest(folder, data)


def _wrong_target(folder: Path) -> None:
    data = _manifest(folder)
    data["target"] = "gfx942"
    _write_manifest(folder, data)


def _row_of_another_arch(folder: Path) -> None:
    data = _manifest(folder)
    data["artifacts"][0]["device"]["arch"] = "sm80"
    _write_manifest(folder, data)


def _duplicate_rows(folder: Path) -> None:
    data = _manifest(folder)
    row = dict(data["artifacts"][0])
    row["file"] = "artifacts/copy.json"
    data["artifacts"].append(row)
    _write_manifest(folder, data)


def _identity_mismatch(folder: Path) -> None:
    data = _manifest(folder)
    row = data["artifacts"][0]
    other = make_artifact(key={**KEY, "M": 1}).to_json_bytes()
    (folder / row["file"]).write_bytes(other)
    row["sha256"] = hashlib.sha256(other).hexdigest()
    _write_manifest(folder, data)


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "corrupt manifest": (_corrupt_manifest, "invalid-manifest"),
    "row pointing ../": (_row_escapes, "invalid-manifest"),
    "absolute row path": (_row_absolute, "invalid-manifest"),
    "symlink out of the package": (_symlink_out, "unsafe-path"),
    "missing file": (_missing_file, "missing-file"),
    "hash mismatch": (_hash_mismatch, "hash-mismatch"),
    "newer schema major (artifact)": (_newer_major, "unsupported-major"),
    "newer schema major (manifest)": (_newer_major_manifest, "unsupported-major"),
    "wrong target": (_wrong_target, "wrong-target"),
    "row of another arch": (_row_of_another_arch, "wrong-target"),
    "duplicate rows": (_duplicate_rows, "invalid-manifest"),
    "artifact differs from its row": (_identity_mismatch, "identity-mismatch"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_package_falls_back_warns_once_and_doctor_lists_it(
    case: str, site: SiteDir, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    breaker, kind = CASES[case]
    folder = site.install("sm90", [make_artifact(key=KEY)])
    breaker(folder)
    caplog.set_level(logging.INFO, logger="flyconfigs.registry")
    first = resolve("rmsnorm", KEY, H200_SPEC)
    resolve("rmsnorm", {**KEY, "M": 77}, H200_SPEC)
    resolve("rmsnorm", {**KEY, "M": 78}, H200_SPEC)
    assert first.source == "default"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert warnings[0].getMessage().startswith(kind)
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert f"problem: {kind}" in out


def test_a_bad_artifact_falls_through_to_the_next_source(site: SiteDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = make_artifact(key=KEY, winner_index=2)
    site.install("sm90", [good])
    override = tmp_path / "local"
    override.mkdir()
    (override / "broken.json").write_text("{")
    monkeypatch.setenv("FLYCONFIGS_PATH", str(override))
    default_resolver().refresh()
    r = resolve("rmsnorm", KEY, H200_SPEC)
    assert r.source == "package" and dict(r.config) == good.winner.config
    assert [p.kind for p in default_resolver().problems.problems()] == ["invalid-artifact"]


def test_hash_mismatch_falls_back_to_a_nearer_good_artifact(site: SiteDir) -> None:
    folder = site.install("sm90", [make_artifact(key=KEY), make_artifact(key={**KEY, "M": 2048}, winner_index=3)])
    rows = _manifest(folder)["artifacts"]
    exact_row = next(r for r in rows if r["key"]["M"] == 4096)
    (folder / exact_row["file"]).write_bytes(b"{}")
    r = resolve("rmsnorm", KEY, H200_SPEC)
    assert (r.key_match, r.matched_key["M"]) == ("nearest", 2048)
    assert "unusable (hash-mismatch)" in r.reasons[0]
