"""What the core left rough: ``doctor`` reports a ``FLYCONFIGS_KERNELS`` choice for a
kernel nothing declares, and ``TritonConfigs(...)(key, None)`` without torch asks the
registry for the current device instead of raising ``ModuleNotFoundError``."""

from __future__ import annotations

import sys

import pytest

from flyconfigs.cli import main
from flyconfigs.kernels.triton_config import TritonConfigs
from flyconfigs.registry import default_resolver
from flyconfigs.registry.device import parse_device_spec

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
