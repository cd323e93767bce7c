"""The command line's promises: one-line errors, exit 2 for every usage error, 1 for a
problem found, nothing lost; ``validate`` refuses what the loader refuses; ``doctor``
fails when calls would all get the default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SiteDir
from factories import H200, artifact_dict, make_artifact
from flyconfigs.cli import main
from flyconfigs.errors import ConfigurationError
from flyconfigs.schema import Artifact
from package_damage import CASES, read_manifest, write_manifest

ARGS = ["M=4096", "N=8192", "dtype=bf16", "weight_dtype=bf16"]
H200_SPEC = "sm90:132:NVIDIA H200"


def _err_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("items", "needle"),
    [
        (["M=--5", "N=8192", "dtype=bf16", "weight_dtype=bf16"], "--5"),
        (["M=²", "N=8192", "dtype=bf16", "weight_dtype=bf16"], "ASCII"),
        (["M=" + "9" * 5000, "N=8192", "dtype=bf16", "weight_dtype=bf16"], "18 ASCII digits"),
        (["M=1", "M=2", "N=8192", "dtype=bf16", "weight_dtype=bf16"], "given twice"),
        (["M=1", "N=8192", "dtype=int4", "weight_dtype=bf16"], "dtype"),
        (["M4096"], "NAME=VALUE"),
    ],
)
def test_every_bad_key_is_a_one_line_usage_error(site: SiteDir, capsys: pytest.CaptureFixture[str],
                                                  items: list[str], needle: str) -> None:
    assert main(["explain", "rmsnorm", *items, "--device", H200_SPEC]) == 2
    assert needle in _err_line(capsys)


def test_bad_device_specs_and_unknown_kernels_are_usage_errors(site: SiteDir, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "rmsnorm", *ARGS, "--device", "sm90:²"]) == 2
    assert "compute_units" in _err_line(capsys)
    assert main(["explain", "nope", *ARGS]) == 2
    _err_line(capsys)


def test_huge_keys_in_tune_are_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "rmsnorm", "--backend", "simulated", "--key-grid", f"M={2**40} N=64 dtype=bf16",
                 "--out", str(tmp_path)]) == 2
    assert "<= 2147483647" in _err_line(capsys)
    assert main(["tune", "rmsnorm", "--backend", "simulated", "--key-grid", "M=" + "1" * 5000 + " N=64",
                 "--out", str(tmp_path)]) == 2
    _err_line(capsys)


def test_an_os_error_is_one_line_and_traceback_works_anywhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    source = tmp_path / "in"
    source.mkdir()
    from flyconfigs.schema.flydsl import write_flydsl

    write_flydsl(make_artifact(device={**H200, "vendor": "amd", "arch": "gfx942", "wave_size": 64}, kernel="flydsl.acme"), source)
    assert main(["flydsl", "import", str(source), "--out", str(blocker / "x")]) == 1
    assert str(blocker) in _err_line(capsys)
    with pytest.raises(OSError):
        main(["flydsl", "import", str(source), "--out", str(blocker / "x"), "--traceback"])


def test_a_bad_cache_size_names_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from flyconfigs.gpu.cache import CompileCache, parse_size

    assert parse_size("1GiB") == 1 << 30 and parse_size("500 MB") == 500 * 10**6 and parse_size("4096") == 4096
    monkeypatch.setenv("FLYCONFIGS_CACHE_MAX_BYTES", "lots")
    with pytest.raises(ConfigurationError, match="FLYCONFIGS_CACHE_MAX_BYTES='lots'"):
        CompileCache(tmp_path)


def test_validate_survives_file_names_that_are_not_utf8(tmp_path: Path) -> None:
    folder = tmp_path / "odd"
    folder.mkdir()
    with open(os.path.join(os.fsencode(folder), b"\xff\xfe.json"), "wb") as handle:
        handle.write(b"{")
    done = subprocess.run([sys.executable, "-m", "flyconfigs", "validate", str(folder)], capture_output=True,
                          cwd="/", env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    assert done.returncode == 1, done.stderr
    assert b"Traceback" not in done.stderr and b"invalid JSON" in done.stdout


def test_validate_of_nothing_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path)]) == 1
    assert "no artifact or manifest files found" in capsys.readouterr().err


def _package(site: SiteDir) -> Path:
    return site.install("sm90", [make_artifact(), make_artifact(key={"M": 2, "N": 8192, "dtype": "bf16",
                                                                     "weight_dtype": "bf16"})])


@pytest.mark.parametrize("case", ["hash mismatch", "missing file", "artifact differs from its row", "row of another arch",
                                  "newer schema major (manifest)"])
def test_validate_refuses_what_the_loader_refuses(site: SiteDir, capsys: pytest.CaptureFixture[str], case: str) -> None:
    damage, kind = CASES[case]
    folder = _package(site)
    assert main(["validate", str(folder)]) == 0
    capsys.readouterr()
    damage(folder)
    assert main(["validate", str(folder)]) == 1
    assert kind in capsys.readouterr().out


def test_a_newer_minor_manifest_field_is_ignored_like_an_artifacts(site: SiteDir, capsys: pytest.CaptureFixture[str]) -> None:
    from flyconfigs import resolve
    from flyconfigs.registry import refresh

    folder = _package(site)
    data = read_manifest(folder)
    data["schema_version"] = "1.9"
    data["signed_by"] = "someone"
    write_manifest(folder, data)
    refresh()
    assert resolve("rmsnorm", {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}, H200_SPEC).source == "package"
    assert main(["validate", str(folder)]) == 0


def test_configs_no_kernel_can_run_fail_validate_and_doctor(site: SiteDir, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    bad = {"threads": 0, "rows_per_block": 1, "vector_bytes": 16, "row_storage": "reg", "occupancy": 0}
    data = artifact_dict()
    data["candidates"][0]["config"] = bad
    data["winner"]["config"] = bad
    artifact = Artifact.model_validate(data)
    path = tmp_path / artifact.file_name()
    path.write_bytes(artifact.to_json_bytes())
    assert main(["validate", str(path)]) == 1
    assert "threads=0" in capsys.readouterr().out
    site.install("sm90", [artifact])
    monkeypatch.setenv("FLYCONFIGS_DEVICE", H200_SPEC)
    assert main(["doctor"]) == 1
    assert "invalid-config" in capsys.readouterr().out


def test_doctor_warns_but_passes_when_every_call_gets_the_default(site: SiteDir, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # Warnings exit 0 (nothing installed is at fault); errors, such as bad data, exit 1.
    assert main(["doctor"]) == 0
    assert "warning: no device known" in capsys.readouterr().out
    monkeypatch.setenv("FLYCONFIGS_DEVICE", H200_SPEC)
    from flyconfigs.registry import refresh

    refresh()
    assert main(["doctor"]) == 0
    assert "warning: nothing installed serves sm90" in capsys.readouterr().out
    site.install("sm90", [make_artifact()])
    assert main(["doctor"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "ok"


def test_doctor_takes_a_device(site: SiteDir, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--device", "gfx942:304:AMD Instinct MI300X:sramecc+,xnack-"]) == 0
    out = capsys.readouterr().out
    assert "(given by --device)" in out and "nothing installed serves gfx942" in out
    site.install("sm90", [make_artifact()])
    assert main(["doctor", "--device", H200_SPEC, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["device"] == "sm90 'NVIDIA H200' 132 CUs" and payload["warnings"] == []
    assert main(["doctor", "--device", "sm90:²"]) == 2
    assert "--device" in _err_line(capsys)


def test_version_is_printed() -> None:
    from flyconfigs import __version__

    done = subprocess.run([sys.executable, "-m", "flyconfigs", "--version"], capture_output=True, text=True, cwd="/")
    assert (done.returncode, done.stdout) == (0, f"flyconfigs {__version__}\n"), done.stderr


def test_traceback_keeps_a_usage_errors_status(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["explain", "nope", "M=1"], ["explain", "rmsnorm", "M=1"], ["validate", "/nonexistent/x.json"]):
        assert main(argv) == 2
        plain = capsys.readouterr().err
        assert main(["--traceback", *argv]) == 2
        traced = capsys.readouterr().err
        assert "Traceback (most recent call last)" in traced and traced.endswith(plain), traced


@pytest.mark.parametrize("argv", [
    ["validate", "{missing}"],
    ["flydsl", "export", "{missing}", "--out", "{tmp}"],
    ["publish", "{missing}", "--target", "sm90", "--version", "1.0.0"],
    ["publish", "--all", "{missing}"],
    ["publish", "{tmp}", "--target", "sm90", "--version", "not-a-version!"],
    ["publish", "--all", "{tmp}", "--index-url", "http://127.0.0.1:9/simple/"],
    ["schema", "--version", "not-a-version"],
    ["tune", "rmsnorm", "--backend", "simulated", "--key-grid", "@{missing}", "--out", "{tmp}"],
    ["predict", "rmsnorm", "--device", "MI300X", "--key-grid", "@{missing}", "--out", "{tmp}"],
])
def test_a_missing_file_or_a_bad_version_is_a_usage_error_in_every_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    words = [w.format(missing=tmp_path / "missing", tmp=tmp_path) for w in argv]
    assert main(words) == 2
    _err_line(capsys)


def test_tune_without_a_grid_names_the_kernels_presets(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # A family without a 'perf' preset (fused add + RMSNorm's presets, less that one): the
    # user is told what to give, not about a preset they never typed.
    from flyconfigs.kernels.fused_add_rmsnorm import FusedAddRMSNormSpec

    presets = {name: grid for name, grid in FusedAddRMSNormSpec().presets.items() if name != "perf"}
    monkeypatch.setattr(FusedAddRMSNormSpec, "presets", property(lambda self: presets))
    assert main(["tune", "fused_add_rmsnorm", "--backend", "simulated", "--out", str(tmp_path)]) == 2
    err = _err_line(capsys)
    assert "--key-grid" in err and "hidden, models, smoke, unseen" in err and "is neither" not in err
    assert list(tmp_path.iterdir()) == []


def test_every_command_that_prints_takes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "manifest", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert (payload["command"], payload["kind"]) == ("schema", "manifest") and "$id" in payload["schema"]
    source = tmp_path / "fly"
    source.mkdir()
    from flyconfigs.schema.flydsl import write_flydsl

    write_flydsl(make_artifact(device={**H200, "vendor": "amd", "arch": "gfx942", "wave_size": 64}, kernel="flydsl.acme"), source)
    (source / "broken.json").write_text("{")
    assert main(["flydsl", "import", str(source), "--out", str(tmp_path / "out"), "--json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    assert len(payload["files"]) == 1 and len(payload["failed"]) == 1, "a bad file never stops the others"
    assert payload["failed"][0]["from"].endswith("broken.json")
