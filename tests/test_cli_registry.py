"""``flyconfigs list``, ``show``, ``explain`` and ``doctor``, human and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SiteDir
from factories import MI300X, make_artifact
from flyconfigs.cli import main
from flyconfigs.schema import SCHEMA_VERSION

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
ARGS = ["M=4096", "N=8192", "dtype=bf16", "weight_dtype=bf16"]


def _json(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out)


def test_list_and_show(site: SiteDir, capsys: pytest.CaptureFixture[str]) -> None:
    site.install("gfx942", [make_artifact(device=MI300X, key=KEY)], version="3.0.1")
    assert main(["list"]) == 0
    assert f"flyconfigs-gfx942 3.0.1  target gfx942  schema {SCHEMA_VERSION}  1 artifact  " in capsys.readouterr().out
    assert main(["list", "--json"]) == 0
    (package,) = _json(capsys)["packages"]
    assert (package["distribution"], package["artifacts"]) == ("flyconfigs-gfx942", 1)
    assert main(["show", "rmsnorm", "--json"]) == 0
    shown = _json(capsys)
    assert [a["name"] for a in shown["axes"] if a["ordinal"]] == ["M", "N"]
    assert shown["artifacts"][0]["key"] == KEY


def test_explain_human_and_json(site: SiteDir, capsys: pytest.CaptureFixture[str]) -> None:
    site.install("gfx942", [make_artifact(device=MI300X, key={**KEY, "M": 1024})])
    assert main(["explain", "rmsnorm", *ARGS, "--device", "gfx942:304"]) == 0
    out = capsys.readouterr().out
    assert "same-compute-units device, nearest key: found" in out
    # One tuned key, which never timed the family's default beside another config: the
    # neighbourhood rule serves the default, and the step's line says why.
    assert out.strip().splitlines()[-1].startswith("=> ")
    assert "neighbourhood rule chose" in out and "the family's default: no candidate was timed with it" in out
    assert main(["explain", "rmsnorm", *ARGS, "--device", "gfx942:304", "--json"]) == 0
    payload = _json(capsys)
    assert payload["resolution"]["source"] == "package"
    assert payload["resolution"]["matched_key"]["M"] == 1024


def test_explain_usage_and_key_errors(site: SiteDir, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "rmsnorm", "M4096"]) == 2
    assert "NAME=VALUE" in capsys.readouterr().err
    assert main(["explain", "rmsnorm", "M=1", "N=2", "dtype=int4", "weight_dtype=bf16"]) == 2
    assert "dtype" in capsys.readouterr().err
    assert main(["explain", "nope", *ARGS]) == 2


def test_doctor_ok_and_collisions(site: SiteDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    artifact = make_artifact(device=MI300X, key=KEY)
    site.install("gfx942", [artifact])
    monkeypatch.setenv("FLYCONFIGS_DEVICE", "gfx942:304:AMD Instinct MI300X:sramecc+,xnack-")
    assert main(["doctor"]) == 0
    assert capsys.readouterr().out.strip().endswith("ok")
    local = tmp_path / "local"
    local.mkdir()
    (local / artifact.file_name()).write_bytes(artifact.to_json_bytes())
    monkeypatch.setenv("FLYCONFIGS_PATH", str(local))
    from flyconfigs.registry import refresh

    refresh()
    assert main(["doctor", "--json"]) == 0
    report = _json(capsys)
    assert report["problems"] == []
    assert report["collisions"][0]["winner"] == str(local / artifact.file_name())


def test_list_shows_declared_kernels_and_the_families_each_package_serves(
        site: SiteDir, capsys: pytest.CaptureFixture[str]) -> None:
    from flyconfigs.registry.declarations import forget_loaded

    info = site.root / "acme_kernels-2.5.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-kernels\nVersion: 2.5\n")
    (info / "entry_points.txt").write_text("[flyconfigs.kernels]\nacme_rms = acme_listed_decl:SPEC\n"
                                           "ghost = acme_ghost_missing:SPEC\n")
    (site.root / "acme_listed_decl.py").write_text(
        "from dataclasses import dataclass\nfrom flyconfigs.kernels.rmsnorm.declaration import RMSNormSpec\n\n"
        "@dataclass(frozen=True)\nclass Acme(RMSNormSpec):\n    name: str = 'acme_rms'\n    version: int = 4\n\n"
        "SPEC = Acme()\n")
    site.install("gfx942", [make_artifact(device=MI300X, key=KEY), make_artifact(device=MI300X, key=KEY, kernel="acme_rms")],
                 name="acme-tunings", module="acme_tunings")
    forget_loaded()
    try:
        assert main(["list"]) == 0
        out = capsys.readouterr().out
        assert "  acme_rms version 4  from acme-kernels 2.5\n" in out
        assert "  rmsnorm version 1  from flyconfigs " in out
        assert "  ghost  from acme-kernels  cannot be loaded: " in out and "ModuleNotFoundError" in out
        assert "  acme-tunings 1.0.0  target gfx942  schema" in out and "2 artifacts  families acme_rms, rmsnorm" in out
        assert main(["list", "--json"]) == 0
        listed = _json(capsys)
        kernels = {k["name"]: k for k in listed["kernels"]}
        assert (kernels["acme_rms"]["version"], kernels["acme_rms"]["distribution"]) == (4, "acme-kernels")
        assert kernels["ghost"]["version"] is None and kernels["ghost"]["problem"]
        (package,) = listed["packages"]
        assert (package["distribution"], package["target"], package["families"]) == (
            "acme-tunings", "gfx942", ["acme_rms", "rmsnorm"])
    finally:
        forget_loaded()
