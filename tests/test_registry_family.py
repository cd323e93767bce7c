"""A loaded kernel's :class:`~flyconfigs.registry.families.family.Family`: made once per loaded
kernel and resolver, it reads the declaration's data members once, and reports a faulty
member into its own resolver's fault set, naming the family's origin; the registry
catches what code it does not own raises in one module only."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from factories import H200, make_artifact
from flyconfigs.registry import KernelDecl, KeyAxis, Resolver
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema import write_atomic

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = {"threads": 1, "rows_per_block": 1, "vector_bytes": 0, "row_storage": "reg", "occupancy": 0}


class _Counting(KernelDecl):
    """A family whose optional data members count their reads and whose distance raises."""

    name = "toy_counted"
    version = 1
    key_axes = (KeyAxis("M", int, ordinal=True, minimum=1), KeyAxis("dtype", str))

    def __init__(self) -> None:
        self.reads: dict[str, int] = {}

    def _read(self, member: str, value: Any) -> Any:
        self.reads[member] = self.reads.get(member, 0) + 1
        return value

    @property
    def device_match(self) -> Any:  # type: ignore[override]
        return self._read("device_match", "arch")

    @property
    def own_device_first(self) -> bool:  # type: ignore[override]
        return bool(self._read("own_device_first", False))

    def key_distance(self, asked: Mapping[str, Any], tuned: Mapping[str, Any]) -> tuple[float, ...] | None:
        raise RuntimeError("a bug in the plugin")

    def default_config(self, key: Mapping[str, Any], device: DeviceQuery | None) -> dict[str, Any]:
        return dict(DEFAULT)


def _folder(tmp_path: Path) -> Path:
    artifact = make_artifact(device=H200, key={"M": 4096, "dtype": "bf16"}, kernel="toy_counted")
    write_atomic(tmp_path / artifact.file_name(), artifact.to_json_bytes())
    return tmp_path


def test_the_data_members_are_read_once_per_resolver(tmp_path: Path) -> None:
    decl = _Counting()
    resolver = Resolver([str(_folder(tmp_path))], detector=None)
    for m in (1000, 2000, 3000, 4096):
        resolver.resolve(decl, {"M": m, "dtype": "bf16"}, "sm90:132:NVIDIA H200")
    assert decl.reads == {"device_match": 1, "own_device_first": 1}
    resolver.refresh()  # a refresh makes the family again: read once more
    resolver.resolve(decl, {"M": 5000, "dtype": "bf16"}, "sm90:132:NVIDIA H200")
    assert decl.reads == {"device_match": 2, "own_device_first": 2}


def test_a_fault_goes_to_each_resolvers_own_log_once_and_names_the_origin(tmp_path: Path) -> None:
    decl = _Counting()
    folder = str(_folder(tmp_path))
    first, second = Resolver([folder], detector=None), Resolver([folder], detector=None)
    for resolver in (first, second, first):
        for m in (1000, 2000):
            assert resolver.resolve(decl, {"M": m, "dtype": "bf16"}, "sm90:132:NVIDIA H200").source == "default"
    for resolver in (first, second):
        faults = [p for p in resolver.problems.problems() if p.kind == "kernel-error"]
        assert [(p.where, p.message.split(";")[0]) for p in faults] == [
            ("a _Counting passed by the caller", "key_distance raised RuntimeError: a bug in the plugin")]
    second.refresh()
    assert [p.kind for p in first.problems.problems()] == ["kernel-error"]  # another resolver's refresh leaves it


def test_what_code_the_registry_does_not_own_raises_is_caught_in_one_module() -> None:
    spec = importlib.util.spec_from_file_location("registry_figures", ROOT / "scripts" / "registry_figures.py")
    assert spec is not None and spec.loader is not None
    figures = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = figures  # its dataclasses look their module up
    try:
        spec.loader.exec_module(figures)
    finally:
        del sys.modules[spec.name]
    broad = figures.figures(ROOT)["broad_except_modules"]
    assert list(broad) == ["registry/core/guard.py"] and sum(broad.values()) <= 8


def test_each_resolver_keeps_its_own_record_of_a_registration() -> None:
    from flyconfigs.kernels.rmsnorm import SPEC
    from flyconfigs.registry import register_kernel, unregister_kernel

    class _Replacing(type(SPEC)):  # type: ignore[misc]
        pass

    register_kernel(_Replacing())
    try:
        first, second = Resolver(detector=None), Resolver(detector=None)
        records = [r.kernels.record("rmsnorm", r.problems) for r in (first, second)]
        assert records[0] is not records[1] and records[0].decl is records[1].decl
        for resolver in (first, second):  # each resolver reports the registration replacing flyconfigs' own
            assert [p.distribution for p in resolver.problems.problems() if p.kind == "kernel-collision"] == ["flyconfigs"]
        second.refresh()
        assert first.kernels.record("rmsnorm", first.problems) is records[0]  # another's refresh leaves it
    finally:
        unregister_kernel("rmsnorm")
