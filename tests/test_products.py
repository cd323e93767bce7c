"""The product catalog: valid data with a source for every figure, the gfx942 products
the issue names, and device specs by product name."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from pydantic import ValidationError

from flyconfigs.errors import InvalidDeviceError
from flyconfigs.registry import parse_device_spec
from flyconfigs.registry.products import find_product, product_catalog, product_of
from flyconfigs.schema.products import ProductCatalog


def test_the_catalog_holds_the_mi300_class_with_their_identity_and_sources() -> None:
    catalog = product_catalog()
    gfx942 = {p.device.product: p for p in catalog.products if p.device.arch == "gfx942"}
    assert set(gfx942) == {"AMD Instinct MI300X", "AMD Instinct MI325X", "AMD Instinct MI300A"}
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
    data = json.loads(resources.files("flyconfigs.registry").joinpath("products.json").read_text())
    del data["products"][0]["sources"]["llc_bytes"]
    with pytest.raises(ValidationError, match="no source for llc_bytes"):
        ProductCatalog.model_validate_json(json.dumps(data))
    data = json.loads(resources.files("flyconfigs.registry").joinpath("products.json").read_text())
    data["products"][1]["aliases"] = ["MI300X"]
    with pytest.raises(ValidationError, match="given twice"):
        ProductCatalog.model_validate_json(json.dumps(data))
