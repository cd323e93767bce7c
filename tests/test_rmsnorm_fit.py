"""The shipped RMSNorm model files are what their fitting modules make of the committed
tunings: refitting reproduces ``default.json`` and ``model.json`` (their figures to the
precision the packed timings keep), and the
fits refuse tunings they cannot use instead of fitting on a mix."""

from __future__ import annotations

import functools
import json
from importlib.resources import files as resources_files
from pathlib import Path
from typing import Any

import pytest

from flyconfigs.errors import FitError
from flyconfigs.kernels.rmsnorm import fit_default, fit_model
from flyconfigs.schema import Artifact
from flyconfigs.schema.pack import folder_artifacts

ROOT = Path(__file__).resolve().parents[1]
SM90 = ROOT / "artifacts" / "sm90"


def _shipped(name: str) -> str:
    return (resources_files("flyconfigs.kernels.rmsnorm") / name).read_text(encoding="utf-8")


def _leaves(node: Any, path: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        return {k: v for key in node for k, v in _leaves(node[key], f"{path}.{key}").items()}
    if isinstance(node, list):
        return {k: v for i, item in enumerate(node) for k, v in _leaves(item, f"{path}[{i}]").items()}
    return {path: node}


def _same_fit(got: Any, shipped: Any) -> None:
    """``got`` is ``shipped`` (fitted when the tunings held full-precision timings) to the
    precision the packed tunings keep: the same fields and names, the numbers within 1e-3
    (relative) or one unit of the 4 decimals a table keeps, but where two candidates timed
    within a hair of each other, whose order may turn on the digits a pack drops (5
    significant digits kept): at most 1% of the values may differ beyond that (or be
    there in one and not the other)."""
    a, b = _leaves(got), _leaves(shipped)
    assert {k.split("[")[0] for k in a} == {k.split("[")[0] for k in b}
    assert {k: v for k, v in a.items() if isinstance(v, str) and ".fitted_on" in k} == {
        k: v for k, v in b.items() if isinstance(v, str) and ".fitted_on" in k}
    differ = sorted(a.keys() ^ b.keys()) + [k for k in b if k in a and not (type(a[k]) is type(b[k]) and (
        a[k] == b[k] or (isinstance(b[k], float) and abs(a[k] - b[k]) <= 1e-3 * abs(b[k]) + 1e-4)))]
    assert len(differ) <= 0.01 * len(b), (len(differ), len(b), differ[:5])


@pytest.mark.slow
def test_refitting_the_h200_tunings_reproduces_the_shipped_default_table(tmp_path: Path) -> None:
    out = tmp_path / "default.json"
    assert fit_default.main([str(SM90), "--product", "NVIDIA H200", "--out", str(out)]) == 0
    _same_fit(json.loads(out.read_text(encoding="utf-8")), json.loads(_shipped("default.json")))


@pytest.mark.slow
def test_refitting_the_h200_tunings_reproduces_the_shipped_model(tmp_path: Path) -> None:
    out = tmp_path / "model.json"
    assert fit_model.main([str(SM90), "--product", "NVIDIA H200", "--out", str(out)]) == 0
    _same_fit(json.loads(out.read_text(encoding="utf-8")), json.loads(_shipped("model.json")))


@functools.cache
def _one_tuning_of_each_product() -> dict[str, Artifact]:
    """One RMSNorm tuning of each product ``artifacts/sm90`` holds (read once: the folder
    is read whole, candidates and all)."""
    picked: dict[str, Artifact] = {}
    for artifact in folder_artifacts(SM90, "rmsnorm"):
        picked.setdefault(artifact.device.product or "", artifact)
    return picked


def _two_devices(tmp_path: Path) -> Path:
    """A folder holding one H200 and one H100 tuning of the same kernel."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    picked = _one_tuning_of_each_product()
    assert {"NVIDIA H200", "NVIDIA H100 80GB HBM3"} <= set(picked), "artifacts/sm90 holds both products' tunings"
    for product in ("NVIDIA H200", "NVIDIA H100 80GB HBM3"):
        (folder / picked[product].file_name()).write_bytes(picked[product].to_json_bytes())
    return folder


@pytest.mark.slow  # reads or compiles every recorded candidate: CI runs it with the slow tests
@pytest.mark.parametrize("module", [fit_default, fit_model])
def test_a_folder_of_two_devices_tunings_is_refused_without_a_product(tmp_path: Path, module: object,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    folder = _two_devices(tmp_path)
    out = tmp_path / "out.json"
    with pytest.raises(SystemExit) as exited:
        module.main([str(folder), "--out", str(out)])  # type: ignore[attr-defined]
    assert exited.value.code == 1
    error = capsys.readouterr().err
    assert str(folder) in error and "--product" in error
    assert not out.exists()


def test_a_folder_without_measured_tunings_is_a_fit_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(FitError, match=str(tmp_path)):
        fit_default.measured(tmp_path, None)
    with pytest.raises(FitError, match=str(tmp_path)):
        fit_model.fit(tmp_path)


@pytest.mark.parametrize("module", [fit_default, fit_model])
def test_a_folder_that_does_not_exist_is_a_usage_error_naming_it(tmp_path: Path, module: object,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        module.main([str(tmp_path / "missing"), "--out", str(tmp_path / "out.json")])  # type: ignore[attr-defined]
    assert exited.value.code == 2
    assert f"{tmp_path / 'missing'}: no such folder" in capsys.readouterr().err
    with pytest.raises(FitError, match="no such folder"):
        fit_model.fit(tmp_path / "missing")


@pytest.mark.parametrize("module", [fit_default, fit_model])
def test_help_describes_the_module_in_whole_sentences(module: object, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        module.main(["--help"])  # type: ignore[attr-defined]
    described = " ".join(capsys.readouterr().out.split())
    assert " ".join((module.__doc__ or "").split("\n\n")[0].split()) in described
