"""The product catalog's format: a device descriptor per GPU product with the figures a
cost model needs beyond it, each figure with its public source."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StringConstraints, model_validator

from flyconfigs.schema.models import Device

__all__ = ["Product", "ProductCatalog"]

_Bytes = Annotated[StrictInt, Field(ge=1, le=2**50)]
_Alias = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}$")]
_REQUIRED_SOURCES = ("product", "arch", "features", "compute_units", "wave_size", "l2_bytes", "l2_total_bytes",
                     "llc_bytes", "lds_bytes_per_cu", "memory_bandwidth_gbps", "memory_bytes")


class Product(BaseModel):
    """One GPU product: its device descriptor (the identity its runtime reports, wave
    size, L2 as the runtime reports it, peak memory bandwidth) and the rest.  A cache
    figure no public source states is ``null``, and its source says so (``not
    published``)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    aliases: list[_Alias] = []
    device: Device
    lds_bytes_per_cu: _Bytes | None
    l2_total_bytes: _Bytes | None
    llc_bytes: _Bytes | None
    memory_bytes: _Bytes
    sources: dict[str, Annotated[str, StringConstraints(min_length=8, max_length=400)]]

    @model_validator(mode="after")
    def _every_figure_has_a_source(self) -> Product:
        missing = [f for f in _REQUIRED_SOURCES if f not in self.sources]
        if missing:
            raise ValueError(f"sources: no source for {', '.join(missing)}")
        if self.device.memory_bandwidth_gbps is None:
            raise ValueError("device: a catalog product states memory_bandwidth_gbps")
        absent = {"l2_bytes": self.device.l2_bytes, "lds_bytes_per_cu": self.lds_bytes_per_cu,
                  "l2_total_bytes": self.l2_total_bytes, "llc_bytes": self.llc_bytes}
        unsaid = [f for f, value in absent.items() if value is None and "not published" not in self.sources[f]]
        if unsaid:
            raise ValueError(f"sources: {', '.join(unsaid)} is null but its source does not say it is not published")
        return self


class ProductCatalog(BaseModel):
    """``{"catalog": "flyconfigs-products", "version": 1, "products": [...]}``."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    catalog: Literal["flyconfigs-products"]
    version: Literal[1]
    products: list[Product]

    @model_validator(mode="after")
    def _names_unique(self) -> ProductCatalog:
        seen: set[str] = set()
        for product in self.products:
            for name in (product.device.product, *product.aliases):
                if name.casefold() in seen:
                    raise ValueError(f"products: the name {name!r} is given twice")
                seen.add(name.casefold())
        return self
