"""The shipped RMSNorm model files are what their fitting modules make of the committed
tunings: refitting reproduces ``default.json`` and ``model.json`` byte for byte, and the
fits refuse tunings they cannot use instead of fitting on a mix."""

from __future__ import annotations

import shutil
from importlib.resources import files as resources_files
from pathlib import Path

import pytest

from flyconfigs.errors import FitError
from flyconfigs.kernels.rmsnorm import fit_default, fit_model

ROOT = Path(__file__).resolve().parents[1]
SM90 = ROOT / "artifacts" / "sm90"


def _shipped(name: str) -> str:
    return (resources_files("flyconfigs.kernels.rmsnorm") / name).read_text(encoding="utf-8")


@pytest.mark.slow
def test_refitting_the_h200_tunings_reproduces_the_shipped_default_table(tmp_path: Path) -> None:
    out = tmp_path / "default.json"
    assert fit_default.main([str(SM90), "--product", "NVIDIA H200", "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == _shipped("default.json")


@pytest.mark.slow
def test_refitting_the_h200_tunings_reproduces_the_shipped_model(tmp_path: Path) -> None:
    out = tmp_path / "model.json"
    assert fit_model.main([str(SM90), "--product", "NVIDIA H200", "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == _shipped("model.json")


def _two_devices(tmp_path: Path) -> Path:
    """A folder holding one H200 and one H100 tuning of the same kernel."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    picked: dict[str, Path] = {}
    for path in sorted(SM90.glob("rmsnorm-sm90-*.json")):
        text = path.read_text(encoding="utf-8")
        for product in ("NVIDIA H200", "NVIDIA H100 80GB HBM3"):
            if product not in picked and f'"product":"{product}"' in text:
                picked[product] = path
        if len(picked) == 2:
            break
    assert len(picked) == 2, "artifacts/sm90 holds both products' tunings"
    for path in picked.values():
        shutil.copy(path, folder / path.name)
    return folder


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
