"""The project's own vLLM and aiter packages rank as their families' owner's: another
package holding one of their keys never stops them serving (it ranks below), ``explain``
and ``doctor`` never call them third party, and ``list`` counts a package of tables by
its files and keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import SiteDir
from flyconfigs.cli import main
from flyconfigs.kernels.aiter_family import PUBLISHED_TARGETS
from flyconfigs.kernels.aiter_gemm import FAMILIES
from flyconfigs.kernels.vllm_fused_moe import VLLMFusedMoESpec
from flyconfigs.registry import default_resolver
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema.table import Table
from test_schema_table import table_dict

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "aiter_gemm_a8w8_blockscale"
MI300X = DeviceQuery("amd", "gfx942", "AMD Instinct MI300X", 304, ())
KEY = {"cu_num": 304, "M": 16, "N": 1536, "K": 7168}


def test_every_published_vllm_and_aiter_package_is_its_familys_own() -> None:
    vllm = {(f / "NAME").read_text().strip() for f in (ROOT / "artifacts").glob("vllm-fused-moe-*")}
    assert vllm and vllm == set(VLLMFusedMoESpec.data_packages)
    aiter = {(f / "NAME").read_text().strip() for f in (ROOT / "imported").glob("aiter-*")}
    assert aiter == {f"flyconfigs-aiter-{t}" for t in PUBLISHED_TARGETS}
    assert all(set(family.data_packages) == aiter for family in FAMILIES.values())


def test_a_third_party_package_of_the_same_key_does_not_stop_the_projects_own(
        site: SiteDir, capsys: pytest.CaptureFixture[str]) -> None:
    own = table_dict()
    site.install("gfx942", [], tables=[Table.model_validate(own)], name="flyconfigs-aiter-gfx942", module="ownaiter")
    other = table_dict()
    other["rows"] = [[304, 16, 1536, 7168, "ck", 99, 0, "theirs", None, None]]
    other["entries"] = ["line 2"]
    site.install("gfx942", [], tables=[Table.model_validate(other)], name="acme-tunings", module="acme")
    served = default_resolver().resolve(KERNEL, KEY, MI300X)
    assert served.origin == "flyconfigs-aiter-gfx942" and served.config["kernelId"] == 5
    assert main(["explain", KERNEL, *[f"{k}={v}" for k, v in KEY.items()], "--device",
                 "gfx942:304:AMD Instinct MI300X"]) == 0
    out = capsys.readouterr().out
    assert "flyconfigs-aiter-gfx942 1.0.0 (the kernel owner's)" in out
    assert "flyconfigs-aiter-gfx942 1.0.0 (third party)" not in out


def test_list_counts_a_package_of_tables_by_its_files_and_keys(site: SiteDir, capsys: pytest.CaptureFixture[str]) -> None:
    site.install("gfx942", [], tables=[Table.model_validate(table_dict())], name="flyconfigs-aiter-gfx942",
                 module="ownaiter")
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "1 file (3 keys: 0 artifacts, 1 table)" in out
