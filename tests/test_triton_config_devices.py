"""What ``TritonConfigs(...)(key, device)`` accepts as the device: a product name or a
spec string as ``FLYCONFIGS_DEVICE`` takes it, a ``DeviceQuery``, a CPU tensor's device
(Triton's interpreter: the default, no GPU runtime touched); anything else is one
``InvalidDeviceError`` naming the argument, never a raw ``TypeError``."""

from __future__ import annotations

import pytest

from flyconfigs.errors import InvalidDeviceError
from flyconfigs.kernels.triton_config import TritonConfigs, device_query
from flyconfigs.registry.sources.device import parse_device_spec

torch = pytest.importorskip("torch")

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}


def test_a_product_name_or_spec_string_is_a_device() -> None:
    configs = TritonConfigs("rmsnorm")
    launch = configs(KEY, "H200")
    assert launch.resolution.device == parse_device_spec("H200")
    assert configs(KEY, "gfx942").resolution.device == parse_device_spec("gfx942")
    assert device_query(parse_device_spec("MI300X")) == parse_device_spec("MI300X")


@pytest.mark.parametrize("device", ["B9000", 3.5, -1, object()])
def test_anything_else_is_one_error_naming_the_argument(device: object) -> None:
    with pytest.raises(InvalidDeviceError, match="the device argument"):
        TritonConfigs("rmsnorm")(KEY, device)


@pytest.mark.parametrize("device", [torch.device("cpu"), "cpu", torch.device("meta")])
def test_a_cpu_tensor_is_served_the_default_without_a_gpu_runtime(device: object) -> None:
    launch = TritonConfigs("rmsnorm")(KEY, device)
    assert launch.resolution.source == "default" and launch.resolution.device is None
    assert launch.resolution.reasons[0] == "the tensors are on the CPU (Triton's interpreter): no GPU to resolve for"
    from flyconfigs.kernels.rmsnorm import SPEC

    assert dict(launch.config) == SPEC.default_config(KEY, None)
