"""The plugin contract: one base class per role (``KernelDecl`` for serving,
``TunableKernel`` for tuning and predicting) holding every member flyconfigs reads,
optional ones with defaults; the registry checks a config's tunables before the
family's own check; the project's families use the contract like any third party."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from flyconfigs.errors import InvalidKeyError, TuneError, UnknownKernelError
from flyconfigs.kernels.fused_add_rmsnorm import SPEC as FUSED
from flyconfigs.kernels.plugin import (
    TunableKernel,
    Workload,
    complete_key,
    cost_model,
    key_presets,
    tool_versions,
    tunable_kernel,
)
from flyconfigs.kernels.rmsnorm import SPEC as RMSNORM
from flyconfigs.registry import KernelDecl, KeyAxis, Resolver, kernel_declaration
from flyconfigs.registry.declarations import TunableVariants, check_config, forget_loaded
from flyconfigs.registry.sources.device import DeviceQuery

KEY = {"rows": 64, "dtype": "bf16"}


class Minimal(KernelDecl):
    """A serve-only family that states only what is required."""

    name = "minimal"
    version = 1
    key_axes = (KeyAxis("rows", int, ordinal=True, minimum=1), KeyAxis("dtype", str, choices=("bf16", "fp16")))

    def default_config(self, key: Mapping[str, Any], device: DeviceQuery | None) -> dict[str, Any]:
        return {"BLOCK": 128}


class Strict(Minimal):
    """Declares its tunables and one real rule, and records every call of its check."""

    tunables = {"BLOCK": (64, 128, 256), "online": (True, False)}
    tunable_defaults = {"online": False}

    def __init__(self) -> None:
        self.calls: list[Mapping[str, object]] = []

    def check_config(self, config: Mapping[str, object], key: Mapping[str, Any],
                     device: DeviceQuery | None) -> str | None:
        self.calls.append(config)
        return "BLOCK wider than the rows" if int(config["BLOCK"]) > key["rows"] else None  # type: ignore[call-overload]


class Tunable(Minimal, TunableKernel):
    def space(self, key: Mapping[str, Any], device: DeviceQuery) -> list[dict[str, Any]]:
        return [{"BLOCK": 128}]

    def traffic(self, key: Mapping[str, Any]) -> int:
        return 2 * key["rows"]

    def source_sha256(self) -> str:
        return "ab" * 32

    def workload(self, key: Mapping[str, Any], copies: int, backend: Any) -> Workload:
        raise RuntimeError("no GPU here")


def test_a_family_states_the_four_required_members_or_cannot_be_made() -> None:
    class NoDefault(KernelDecl):
        name = "broken"
        version = 1
        key_axes = ()

    with pytest.raises(TypeError, match="default_config"):
        NoDefault()  # type: ignore[abstract]

    class NoWorkload(Minimal, TunableKernel):
        def space(self, key: Mapping[str, Any], device: DeviceQuery) -> list[dict[str, Any]]:
            return []

    with pytest.raises(TypeError, match="source_sha256.*traffic.*workload"):
        NoWorkload()  # type: ignore[abstract]


def test_the_optional_members_have_defaults_that_say_nothing_more() -> None:
    decl = Minimal()
    assert decl.check_key({"rows": 4, "dtype": "bf16"}) == {"rows": 4, "dtype": "bf16"}
    with pytest.raises(InvalidKeyError, match="'dtype'"):
        decl.check_key({"rows": 4, "dtype": "fp8"})
    assert (decl.tunables, decl.tunable_defaults, decl.source_sha256(), tuple(decl.compatible_versions),
            decl.source_binding, tuple(decl.data_packages)) == ({}, {}, None, (), "exact", ())
    assert decl.check_config({"anything": 1}, KEY, None) is None
    assert decl.adapt_config({"BLOCK": 128}, KEY, None) is None
    r = Resolver(paths=[], detector=None).resolve(decl, KEY, "sm90")
    assert (r.source, dict(r.config)) == ("default", {"BLOCK": 128})


def test_the_tuners_optional_members_have_defaults() -> None:
    decl = Tunable()
    assert decl.build({"BLOCK": 128}, KEY, DeviceQuery("nvidia", "sm90", None, None, ())) is None
    assert (dict(key_presets(decl)), complete_key(decl, KEY), tool_versions(decl)) == ({}, KEY, {})
    with pytest.raises(TuneError, match="declares no cost model"):
        cost_model(decl)
    assert key_presets(Minimal()) == {} and complete_key(Minimal(), KEY) == KEY


def test_the_registry_checks_tunables_before_the_familys_own_rules() -> None:
    decl = Strict()
    refusals = {
        "not a minimal config: missing BLOCK": {"online": True},
        "not a minimal config: unknown extra": {"BLOCK": 64, "extra": 1},
        "BLOCK=96 is not one of 64, 128, 256": {"BLOCK": 96},
        "BLOCK=True is not one of": {"BLOCK": True},
        "online=1 is not one of True, False": {"BLOCK": 64, "online": 1},
    }
    for why, config in refusals.items():
        found = check_config(decl, config, KEY, None)
        assert found is not None and found.startswith(why), (config, found)
    assert decl.calls == [], "the family's check never sees a config outside its tunables"
    assert check_config(decl, {"BLOCK": 64}, KEY, None) is None, "a tunable with a default may be left out"
    assert check_config(decl, {"BLOCK": 256, "online": True}, KEY, None) == "BLOCK wider than the rows"
    assert len(decl.calls) == 2


class TwoImplementations(Minimal):
    """A family with two implementations whose configs hold different tunables."""

    tunables = {"impl": ("lang", "cuda"), "BLOCK": (64, 128), "threads": (32, 64)}
    tunable_defaults = {"impl": "lang"}
    tunable_variants = TunableVariants("impl", {"lang": ("BLOCK",), "cuda": ("threads",)})


def test_each_implementation_of_a_family_holds_its_own_tunables() -> None:
    decl = TwoImplementations()
    assert check_config(decl, {"impl": "lang", "BLOCK": 64}, KEY, None) is None
    assert check_config(decl, {"BLOCK": 128}, KEY, None) is None, "the selector's default names the first"
    assert check_config(decl, {"impl": "cuda", "threads": 32}, KEY, None) is None
    refusals = {
        "not a minimal config: missing threads; unknown BLOCK": {"impl": "cuda", "BLOCK": 64},
        "not a minimal config: unknown threads": {"BLOCK": 64, "threads": 32},
        "not a minimal config: missing BLOCK": {"impl": "lang"},
        "impl='rust' is not one of lang, cuda": {"impl": "rust", "BLOCK": 64},
        "threads=48 is not one of 32, 64": {"impl": "cuda", "threads": 48},
    }
    for why, config in refusals.items():
        assert check_config(decl, config, KEY, None) == why, config


def test_a_workload_that_subclasses_the_contract_releases_nothing_by_default() -> None:
    class Inputs(Workload):
        copies = 1

        def check(self, config: Mapping[str, Any]) -> str | None:
            return None

        def launcher(self, config: Mapping[str, Any]) -> Callable[[int], None]:
            return lambda i: None

        def resources(self, config: Mapping[str, Any]) -> None:
            return None

    inputs: Sequence[Mapping[str, Any]] = []
    assert Inputs().release(inputs) == 0 and isinstance(Inputs(), Workload)


def test_an_entry_point_object_outside_the_contract_is_one_clear_error(site: Any) -> None:
    info = site.root / "duck_kernels-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: duck-kernels\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[flyconfigs.kernels]\nduck = duck_kernels:SPEC\n")
    (site.root / "duck_kernels.py").write_text(
        "class Duck:\n    name = 'duck'\n    version = 1\n    key_axes = ()\n"
        "    def default_config(self, key, device):\n        return {}\n\nSPEC = Duck()\n")
    forget_loaded()
    try:
        with pytest.raises(UnknownKernelError, match="instance of a subclass of flyconfigs.registry.KernelDecl"):
            kernel_declaration("duck")
    finally:
        forget_loaded()


def test_the_project_families_use_the_contract_like_any_third_party() -> None:
    for spec in (RMSNORM, FUSED):
        assert isinstance(spec, TunableKernel) and tunable_kernel(spec.name) is spec
        assert spec.source_binding == "version"
    # Membership is the registry's: the families' own checks hold only their real rules.
    rms = {**RMSNORM.default_config({"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}, None),
           "threads": 96}
    assert check_config(RMSNORM, rms, {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"},
                        None) == "threads=96 is not one of 8, 16, 32, 64, 128, 256, 512, 1024"
    assert cost_model(RMSNORM).name and tool_versions(FUSED).keys() <= {"triton"}
