"""Bad data never crashes resolve: each problem falls back with one warning and is
listed by ``flyconfigs doctor``."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from conftest import SiteDir
from factories import make_artifact
from flyconfigs import resolve
from flyconfigs.cli import main
from flyconfigs.registry import default_resolver
from package_damage import CASES, read_manifest

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
H200_SPEC = "sm90:132:NVIDIA H200"


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
    rows = read_manifest(folder)["artifacts"]
    exact_row = next(r for r in rows if r["key"]["M"] == 4096)
    (folder / exact_row["file"]).write_bytes(b"{}")
    r = resolve("rmsnorm", KEY, H200_SPEC)
    assert (r.key_match, r.matched_key["M"]) == ("nearest", 2048)
    assert "unusable (hash-mismatch)" in r.reasons[0]
