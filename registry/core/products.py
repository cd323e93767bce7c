"""The catalog of GPU products (``products.json``, validated by
:class:`~flyconfigs.schema.products.ProductCatalog`): each product's device descriptor as
its runtime reports it, with the figures a cost model needs and their public sources.
``FLYCONFIGS_DEVICE`` and ``--device`` take a product's name or alias (``MI300X``,
``AMD Instinct MI300X``) for its whole identity, or the name as a file name writes it
(spaces as underscores: ``NVIDIA_H100_80GB_HBM3``, as vLLM names its config files)."""

from __future__ import annotations

import functools
from importlib import resources

from flyconfigs.errors import ArtifactError
from flyconfigs.schema.load import validation_problems
from flyconfigs.schema.models import DeviceIdentity
from flyconfigs.schema.products import Product, ProductCatalog

__all__ = ["find_product", "product_catalog", "product_of", "vllm_device_name"]

CATALOG_FILE = "products.json"


@functools.cache
def product_catalog() -> ProductCatalog:
    """The shipped catalog; :class:`ArtifactError` naming the file and field if it is damaged."""
    text = resources.files("flyconfigs.registry.core").joinpath(CATALOG_FILE).read_text(encoding="utf-8")
    from pydantic import ValidationError

    try:
        return ProductCatalog.model_validate_json(text)
    except ValidationError as exc:
        raise ArtifactError(CATALOG_FILE, validation_problems(exc, None)) from None


def find_product(name: str) -> Product | None:
    """The product called ``name`` (its runtime name or an alias, any case, spaces written
    as spaces or as underscores), or ``None``."""
    wanted = name.strip().casefold()
    for product in product_catalog().products:
        if wanted in (product.device.product.casefold(), *(a.casefold() for a in product.aliases)):
            return product
    for product in product_catalog().products:
        if wanted.replace(" ", "_") == product.device.product.casefold().replace(" ", "_"):
            return product
    return None


def vllm_device_name(product: str) -> str:
    """The ``device_name`` of the vLLM config files a GPU called ``product`` reads: its name
    with spaces as underscores, except that any name with the token ``H200`` reads
    ``NVIDIA_H200`` (vLLM's ``get_config_file_name``: the H200 family shares one set of files)."""
    name = product.replace(" ", "_")
    return "NVIDIA_H200" if "H200" in name.split("_") else name


def product_of(identity: DeviceIdentity) -> Product | None:
    """The catalog entry with exactly ``identity``, or ``None``."""
    for product in product_catalog().products:
        if product.device.identity == identity:
            return product
    return None
