"""A family's ``device_match``: ``product`` (FlyDSL's identity) is served only artifacts
of the asked product, arch and compute units; the memo never gives one declaration's
answer to another of the same name that differs in it; a member that raises or answers
another value is reported once and counts as ``product``.  And the one rule by which the
tuner, ``publish`` and ``validate`` judge a winner for its own key."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from factories import H200, make_artifact
from flyconfigs.registry import KernelDecl, KeyAxis, Resolver, register_kernel, unregister_kernel
from flyconfigs.registry.checks.check import winner_refusal
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema import write_atomic

H100 = "sm90:132:NVIDIA H100 SXM5"  # H200's arch and SM count, another product
H200_SPEC = "sm90:132:NVIDIA H200"
KEY = {"M": 2000, "dtype": "bf16"}
DEFAULT = {"threads": 1, "rows_per_block": 1, "vector_bytes": 0, "row_storage": "reg", "occupancy": 0}


class _Family(KernelDecl):
    name = "toy_exact"
    version = 1
    key_axes = (KeyAxis("M", int, ordinal=True, minimum=1), KeyAxis("dtype", str))

    def __init__(self, device_match: Any = "arch") -> None:
        self.device_match = device_match

    def default_config(self, key: Mapping[str, Any], device: DeviceQuery | None) -> dict[str, Any]:
        return dict(DEFAULT)


class _Raising(_Family):
    @property  # type: ignore[override]
    def device_match(self) -> str:
        raise RuntimeError("a bug in the plugin")

    @device_match.setter
    def device_match(self, value: object) -> None:
        pass


def _folder(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """One artifact of ``KEY`` tuned on an H200 and one of another key on a 114-SM H100."""
    artifact = make_artifact(device=H200, key=KEY, kernel="toy_exact", winner_index=2)
    write_atomic(tmp_path / artifact.file_name(), artifact.to_json_bytes())
    pcie = {**H200, "product": "NVIDIA H100 PCIe", "compute_units": 114}
    other = make_artifact(device=pcie, key={"M": 4000, "dtype": "bf16"}, kernel="toy_exact", winner_index=3)
    write_atomic(tmp_path / other.file_name(), other.to_json_bytes())
    return tmp_path, dict(artifact.winner.config)


def test_a_product_family_is_served_its_own_product_only_and_explain_says_what_it_passed_over(tmp_path: Path) -> None:
    folder, winner = _folder(tmp_path)
    resolver = Resolver([str(folder)], detector=None)
    exact = _Family("product")
    assert dict(resolver.resolve(exact, KEY, H200_SPEC).config) == winner  # its own product
    r, steps = resolver.explain(exact, KEY, H100)
    assert (r.source, dict(r.config)) == ("default", DEFAULT)
    outcomes = {step.looked_for: step.outcome for step in steps}
    assert outcomes["same-compute-units device, exact key"] == (
        "no artifact; 1 of other products passed over: toy_exact is served configs of its exact device only")
    assert all(outcome.startswith("skipped: toy_exact is served configs of its exact device only")
               for what, outcome in outcomes.items() if what.startswith("same-arch device"))
    # The same family by the default rule: the H200's config serves the H100 (same SMs),
    # and a device of another SM count borrows one.
    r = resolver.resolve(_Family(), KEY, H100)
    assert (r.layer, dict(r.config)) == ("same-compute-units", winner)
    assert resolver.resolve(_Family(), KEY, "sm90:78:NVIDIA H20").borrowed
    assert resolver.resolve(exact, KEY, "sm90:78:NVIDIA H20").source == "default"


@pytest.mark.parametrize("first", ["product", "arch"])
def test_the_memo_never_gives_one_declarations_answer_to_another_of_the_same_name(tmp_path: Path, first: str) -> None:
    folder, winner = _folder(tmp_path)
    resolver = Resolver([str(folder)], detector=None)
    decls = {"product": _Family("product"), "arch": _Family("arch")}
    expected = {"product": DEFAULT, "arch": winner}
    for _ in range(2):  # the second round is answered from the memo
        for match in (first, "arch" if first == "product" else "product"):
            assert dict(resolver.resolve(decls[match], KEY, H100).config) == expected[match], match


@pytest.mark.parametrize("family", [_Family("exact"), _Family(["product"]), _Family(None), _Raising()],
                         ids=["another-word", "a-list", "none", "raises"])
def test_a_device_match_that_is_neither_value_is_reported_once_and_counts_as_product(
        tmp_path: Path, family: _Family) -> None:
    folder, winner = _folder(tmp_path)
    resolver = Resolver([str(folder)], detector=None)
    for m in (2000, 2001, 2002):
        r = resolver.resolve(family, {"M": m, "dtype": "bf16"}, H100)
        assert (r.source, dict(r.config)) == ("default", DEFAULT)
    assert dict(resolver.resolve(family, KEY, H200_SPEC).config) == winner  # its own product still serves
    from flyconfigs.registry import declarations

    faults = [p for p in [*resolver.problems.problems(), *declarations.PROBLEMS.problems()]
              if p.kind == "kernel-error" and "device_match" in p.message]
    assert len(faults) == 1 and "only artifacts of the asked product serve it" in faults[0].message


def test_a_winner_is_judged_for_its_own_key_by_the_kernels_check_key(tmp_path: Path) -> None:
    register_kernel(_Family())
    try:
        ok = make_artifact(device=H200, key=KEY, kernel="toy_exact")
        assert winner_refusal(ok) is None
        # The kernel's own axes, a value its check_key refuses: never served, so refused.
        bad = make_artifact(device=H200, key={"M": 0, "dtype": "bf16"}, kernel="toy_exact")
        assert "must be >= 1" in (winner_refusal(bad) or "")
        # Other axes: another kernel under the name (validate reports the clash), not judged here.
        other = make_artifact(device=H200, key={"rows": 0}, kernel="toy_exact")
        assert winner_refusal(other) is None
    finally:
        unregister_kernel("toy_exact")
