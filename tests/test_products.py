"""The product catalog: valid data with a source for every figure, the gfx942 products,
every product a shipped package names, and device specs by product name."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from pydantic import ValidationError

from flyconfigs.cli import main
from flyconfigs.errors import InvalidDeviceError
from flyconfigs.registry import parse_device_spec
from flyconfigs.registry.core.products import find_product, product_catalog, product_of
from flyconfigs.schema.models import DeviceIdentity
from flyconfigs.schema.products import ProductCatalog

SHIPPED = Path(__file__).parents[1] / "artifacts"


def test_the_catalog_holds_the_mi300_class_with_their_identity_and_sources() -> None:
    catalog = product_catalog()
    gfx942 = {p.device.product: p for p in catalog.products if p.device.arch == "gfx942"}
    assert set(gfx942) == {"AMD Instinct MI300X", "AMD Instinct MI325X", "AMD Instinct MI300A", "AMD Instinct MI308X",
                           "AMD Instinct MI325 OAM"}
    for product in gfx942.values():
        device = product.device
        assert (device.vendor, device.wave_size, device.features) == ("amd", 64, ["sramecc+", "xnack-"])
        assert product.lds_bytes_per_cu == 64 * 1024 and product.llc_bytes == 256 << 20
        assert all(len(source) > 8 for source in product.sources.values())
    assert gfx942["AMD Instinct MI300A"].device.compute_units == 228
    assert gfx942["AMD Instinct MI325X"].device.memory_bandwidth_gbps > gfx942["AMD Instinct MI300X"].device.memory_bandwidth_gbps


def test_a_product_name_is_enough_for_a_device_spec() -> None:
    for spec in ("MI300X", "amd instinct mi300x", " AMD Instinct MI300X "):
        query = parse_device_spec(spec)
        assert (query.arch, query.product, query.compute_units, query.features) == (
            "gfx942", "AMD Instinct MI300X", 304, ("sramecc+", "xnack-"))
    mi300a = find_product("MI300A")
    assert mi300a is not None and product_of(mi300a.device.identity) is mi300a
    with pytest.raises(InvalidDeviceError, match="or a product name .*AMD Instinct MI325X"):
        parse_device_spec("MI999")


def test_a_figure_without_a_source_or_a_name_given_twice_is_refused() -> None:
    data = json.loads(resources.files("flyconfigs.registry.core").joinpath("products.json").read_text())
    del data["products"][0]["sources"]["llc_bytes"]
    with pytest.raises(ValidationError, match="no source for llc_bytes"):
        ProductCatalog.model_validate_json(json.dumps(data))
    data = json.loads(resources.files("flyconfigs.registry.core").joinpath("products.json").read_text())
    data["products"][1]["aliases"] = ["MI300X"]
    with pytest.raises(ValidationError, match="given twice"):
        ProductCatalog.model_validate_json(json.dumps(data))


def test_every_product_a_shipped_package_names_is_in_the_catalog() -> None:
    named: dict[str, tuple[DeviceIdentity, Path]] = {}
    for path in sorted(SHIPPED.glob("*/*.json")):
        device = json.loads(path.read_bytes())["device"]
        identity = DeviceIdentity.model_validate({f: device[f] for f in ("vendor", "arch", "product", "compute_units",
                                                                        "features")})
        named.setdefault(identity.describe(), (identity, path))
    assert len(named) >= 5, "the shipped packages name the three gfx942 products and two sm90 ones"
    missing = [f"{name} (first in {path.name})" for name, (identity, path) in named.items()
               if product_of(identity) is None]
    assert missing == []


def test_the_h100_the_sm90_package_ships_is_a_device_name(tmp_path: Path) -> None:
    query = parse_device_spec("H100", "--device")
    assert (query.arch, query.product, query.compute_units) == ("sm90", "NVIDIA H100 80GB HBM3", 132)
    h100 = find_product("NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.device.l2_bytes == 50 << 20
    assert main(["explain", "rmsnorm", "M=4096", "N=8192", "dtype=bf16", "weight_dtype=bf16", "--device", "H100"]) == 0
