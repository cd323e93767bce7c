"""The catalog knows the GPUs the field's shipped configs name: every ``device_name`` of
vLLM 0.34.0's fused-MoE configs (spaces as underscores), aiter's CU counts, the figures
a cost model needs for the targets predicted packages are built for, and vLLM's H200
aliasing."""

from __future__ import annotations

import pytest

from flyconfigs.registry import parse_device_spec
from flyconfigs.registry.core.products import find_product, product_catalog, vllm_device_name

# The device_name of every fused-MoE config file vLLM 0.34.0 ships, with the arch the
# catalog must give it.
VLLM_0_34_DEVICES = {
    "AMD_Instinct_MI300X": "gfx942", "AMD_Instinct_MI308X": "gfx942", "AMD_Instinct_MI325X": "gfx942",
    "AMD_Instinct_MI325_OAM": "gfx942", "AMD_Instinct_MI350X": "gfx950", "AMD_Instinct_MI350_OAM": "gfx950",
    "AMD_Instinct_MI355X": "gfx950", "AMD_Instinct_MI355_OAM": "gfx950", "AMD_Radeon_R9700": "gfx1201",
    "Radeon_8060S_Graphics": "gfx1151", "NVIDIA_A100-SXM4-40GB": "sm80", "NVIDIA_A100-SXM4-80GB": "sm80",
    "NVIDIA_A100_80GB_PCIe": "sm80", "NVIDIA_A800-SXM4-80GB": "sm80", "NVIDIA_GeForce_RTX_4090": "sm89",
    "NVIDIA_L20": "sm89", "NVIDIA_L20Y": "sm89", "NVIDIA_L40S": "sm89", "NVIDIA_H100": "sm90",
    "NVIDIA_H100_80GB_HBM3": "sm90", "NVIDIA_H100_PCIe": "sm90", "NVIDIA_H20": "sm90", "NVIDIA_H20-3e": "sm90",
    "NVIDIA_H200": "sm90", "NVIDIA_H800": "sm90", "NVIDIA_B200": "sm100", "NVIDIA_GB200": "sm100",
    "NVIDIA_B300_SXM6_AC": "sm103", "NVIDIA_GB10": "sm121",
    "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition": "sm120", "NVIDIA_RTX_PRO_6000_Blackwell_Workstation_Edition": "sm120",
    "Intel(R)_Arc(TM)_Pro_B70_Graphics": "intel_gpu_bmg_g31",
}


@pytest.mark.parametrize(("device_name", "arch"), sorted(VLLM_0_34_DEVICES.items()))
def test_every_device_vllm_names_is_a_product_whose_file_name_is_that_name(device_name: str, arch: str) -> None:
    product = find_product(device_name)
    assert product is not None, device_name
    assert product.device.arch == arch
    # The product's runtime name is the one vLLM wrote, so an export names the same file.
    assert product.device.product.replace(" ", "_") == device_name
    assert vllm_device_name(product.device.product) == device_name


def test_the_targets_of_predicted_packages_state_units_l2_and_bandwidth() -> None:
    expected = {"A100": ("sm80", 108), "A800": ("sm80", 108), "B200": ("sm100", 148), "GB200": ("sm100", 152),
                "MI210": ("gfx90a", 104), "MI250X": ("gfx90a", 110), "MI350X": ("gfx950", 256), "MI355X": ("gfx950", 256)}
    for alias, (arch, units) in expected.items():
        product = find_product(alias)
        assert product is not None, alias
        device = product.device
        assert (device.arch, device.compute_units) == (arch, units)
        assert device.l2_bytes is not None and device.l2_bytes >= 4 << 20
        assert device.memory_bandwidth_gbps is not None and device.memory_bandwidth_gbps > 1000
        assert device.wave_size == (64 if device.vendor == "amd" else 32)


def test_aiter_cu_counts_name_one_arch_each() -> None:
    """aiter keys its CSVs by ``cu_num``: 304 and 80 (the MI300 class, MI308X), 256 (MI350 class)."""
    for cus, arch in ((304, "gfx942"), (80, "gfx942"), (256, "gfx950"), (104, "gfx90a"), (110, "gfx90a")):
        arches = {p.device.arch for p in product_catalog().products if p.device.vendor == "amd"
                  and p.device.compute_units == cus}
        assert arches == {arch}, cus


def test_vllm_reads_the_h200_files_for_every_h200_name() -> None:
    assert vllm_device_name("NVIDIA H200 NVL") == "NVIDIA_H200"
    assert vllm_device_name("NVIDIA H200") == "NVIDIA_H200"
    # The rule is a token of the name, not a substring: a GH200 has its own files.
    assert vllm_device_name("NVIDIA GH200 480GB") == "NVIDIA_GH200_480GB"
    nvl = find_product("H200 NVL")
    assert nvl is not None and vllm_device_name(nvl.device.product) == "NVIDIA_H200"


def test_a_file_names_device_is_a_device_spec() -> None:
    query = parse_device_spec("NVIDIA_A100-SXM4-80GB")
    assert (query.arch, query.product, query.compute_units) == ("sm80", "NVIDIA A100-SXM4-80GB", 108)
    assert find_product("nvidia_b300_sxm6_ac") is find_product("B300")


def test_every_product_has_distinct_names_and_a_source_for_each_figure() -> None:
    catalog = product_catalog()
    assert len(catalog.products) >= 36
    for product in catalog.products:
        assert all(len(text) >= 8 for text in product.sources.values()), product.device.product
        if product.l2_total_bytes is not None and product.llc_bytes is not None:
            assert product.llc_bytes >= product.l2_total_bytes >= (product.device.l2_bytes or 0)
    # A figure no public source states is null, and its source says so; the B70's caches.
    b70 = find_product("B70")
    assert b70 is not None and (b70.device.vendor, b70.device.l2_bytes, b70.llc_bytes) == ("intel", None, None)
    assert "not published" in b70.sources["l2_bytes"] and b70.device.memory_bandwidth_gbps == 608.0


def test_a_null_figure_needs_a_source_that_says_it_is_not_published() -> None:
    import json
    from importlib import resources

    from pydantic import ValidationError

    from flyconfigs.schema.products import ProductCatalog

    data = json.loads(resources.files("flyconfigs.registry.core").joinpath("products.json").read_text())
    data["products"][0]["llc_bytes"] = None
    with pytest.raises(ValidationError, match="llc_bytes is null but its source does not say it is not published"):
        ProductCatalog.model_validate_json(json.dumps(data))


def test_an_intel_arch_names_its_vendor() -> None:
    query = parse_device_spec("intel_gpu_bmg_g31:256:Intel(R) Arc(TM) Pro B70 Graphics", "--device")
    assert (query.vendor, query.arch, query.compute_units) == ("intel", "intel_gpu_bmg_g31", 256)
    assert parse_device_spec("B70").vendor == "intel"
