"""What the core left rough: ``doctor`` reports a ``FLYCONFIGS_KERNELS`` choice for a
kernel nothing declares, and ``TritonConfigs(...)(key, None)`` without torch asks the
registry for the current device instead of raising ``ModuleNotFoundError``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from flyconfigs.cli import main
from flyconfigs.kernels.triton_config import TritonConfigs
from flyconfigs.registry import default_resolver
from flyconfigs.registry.sources.device import parse_device_spec

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}


def test_doctor_reports_a_kernel_choice_for_a_kernel_nothing_declares(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FLYCONFIGS_KERNELS", "rmsnrom=acme-kernels")
    default_resolver().refresh()
    assert main(["doctor", "--device", "sm90:132:NVIDIA H200"]) == 1
    out = capsys.readouterr().out
    assert "bad-setting" in out and "'rmsnrom'" in out and "nothing installed declares" in out


def test_a_kernel_choice_for_a_declared_kernel_is_not_reported(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FLYCONFIGS_KERNELS", "rmsnorm=flyconfigs")
    default_resolver().refresh()
    main(["doctor", "--device", "sm90:132:NVIDIA H200"])
    assert "nothing installed declares" not in capsys.readouterr().out


@pytest.mark.parametrize("device_env", [None, "sm90:132:NVIDIA H200"])
def test_the_current_device_without_torch_is_the_registrys(monkeypatch: pytest.MonkeyPatch,
                                                           device_env: str | None) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises, as where it is not installed
    if device_env is not None:
        monkeypatch.setenv("FLYCONFIGS_DEVICE", device_env)
    default_resolver().refresh()
    launch = TritonConfigs("rmsnorm")(KEY, None)
    if device_env is None:
        assert launch.resolution.device is None and launch.resolution.source == "default"
    else:
        assert launch.resolution.device == parse_device_spec(device_env)


def test_a_test_doubles_artifact_whose_winner_its_family_refuses_is_not_written(tmp_path: Path) -> None:
    from factories import artifact_dict
    from flyconfigs.errors import TuneError
    from flyconfigs.registry.checks.check import winner_refusal
    from flyconfigs.schema import Artifact
    from flyconfigs.tuner.emit import write_artifact

    data = artifact_dict(key={**KEY, "N": 1024})  # its winner moves more vectors than a 1,024 row holds
    data["provenance"]["backend"] = "simulated"
    artifact = Artifact.model_validate(data)
    assert artifact.from_test_double
    why = winner_refusal(artifact)
    assert why is not None and "more threads than vectors" in why
    with pytest.raises(TuneError, match="never be served"):
        write_artifact(tmp_path, artifact)
    assert list(tmp_path.iterdir()) == []
    good = Artifact.model_validate({**artifact_dict(key=KEY), "provenance": {**data["provenance"]}})
    assert winner_refusal(good) is None
