"""Property: over random pools — packages of every standing (chosen, owner, official,
third party), override folders, duplicate identities in one source, nearer keys in
lower sources, measured and predicted artifacts — ``resolve``, ``explain``, ``doctor``
(its collisions) and ``validate`` (its duplicates) name the same serving file or the
same refusal, and what serves follows the documented order: within a step, no source of
a better standing had a usable artifact."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distributions import install_data_package
from factories import H200, artifact_dict, predicted_artifact_dict
from flyconfigs.cli import main
from flyconfigs.kernels.rmsnorm.declaration import RMSNormSpec
from flyconfigs.registry import Resolver, register_kernel
from flyconfigs.registry.declarations import unregister_kernel
from flyconfigs.registry.sources.ownership import TIERS
from flyconfigs.schema import Artifact, write_atomic

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
H200_SPEC = "sm90:132:NVIDIA H200"
H100 = {**H200, "product": "NVIDIA H100 80GB HBM3"}
PACKAGES = ["flyconfigs-sm90", "own-tunings", "tp-a", "tp-b"]
"""The official package, the owner's (the declaration registered below names it) and
two third parties; ``FLYCONFIGS_PACKAGES`` may choose any of them."""
MS = [1024, 2048, 4096, 8192]
ASKED = [1024, 3000, 4096, 6000, 16384]


@dataclass(frozen=True)
class OwnedRMSNorm(RMSNormSpec):
    @property
    def data_packages(self) -> tuple[str, ...]:
        return ("own-tunings",)


artifacts = st.lists(
    st.tuples(st.sampled_from(MS), st.booleans(), st.integers(0, 5), st.booleans(), st.integers(1, 28)),
    min_size=0, max_size=4)
"""(M, predicted, winner, on an H100 rather than the H200, day of the month made)."""
pools = st.fixed_dictionaries({
    "packages": st.dictionaries(st.sampled_from(PACKAGES), artifacts, max_size=4),
    "folders": st.lists(artifacts, max_size=2),
    "chosen": st.lists(st.sampled_from(PACKAGES), unique=True, max_size=2),
})


def _artifact(m: int, predicted: bool, winner: int, h100: bool, day: int) -> Artifact:
    make = predicted_artifact_dict if predicted else artifact_dict
    data = make(key={**KEY, "M": m}, winner_index=winner, device=H100 if h100 else H200)
    data["provenance"]["created"] = f"2026-11-{day:02d}T10:00:00Z"
    return Artifact.model_validate(data)


def _build(root: Path, pool: dict[str, Any]) -> tuple[list[str], list[Path]]:
    site = root / "site"
    site.mkdir()
    for name, rows in pool["packages"].items():
        # One artifact per slot in a package (a manifest lists each file once).
        unique = {(m, h100): (m, p, w, h100, d) for m, p, w, h100, d in rows}
        install_data_package(site, "sm90", [_artifact(*row) for row in unique.values()], name=name,
                             module=name.replace("-", "_"))
    folders = []
    for i, rows in enumerate(pool["folders"]):
        folder = root / f"folder{i}"
        folder.mkdir()
        for j, row in enumerate(rows):  # any name: duplicates of one slot are allowed here
            write_atomic(folder / f"run{j}.json", _artifact(*row).to_json_bytes())
        folders.append(folder)
    return [str(site)], folders


def _validate_duplicates(folder: Path) -> dict[str, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(["validate", "--json", str(folder)])
    found = {}
    for row in json.loads(out.getvalue())["files"]:
        for problem in row["problems"]:
            if problem["message"].startswith("duplicate:"):
                found[row["file"]] = problem["message"]
    return found


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pool=pools)
def test_every_tool_names_the_file_the_search_serves(pool: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        paths, folders = _build(Path(tmp), pool)
        saved = os.environ.get("FLYCONFIGS_PACKAGES")
        sys.path[:0] = paths
        importlib.invalidate_caches()
        os.environ["FLYCONFIGS_PACKAGES"] = ",".join(pool["chosen"])
        register_kernel(OwnedRMSNorm())
        try:
            _check(folders)
        finally:
            unregister_kernel("rmsnorm")
            del sys.path[:len(paths)]
            importlib.invalidate_caches()
            if saved is None:
                os.environ.pop("FLYCONFIGS_PACKAGES", None)
            else:
                os.environ["FLYCONFIGS_PACKAGES"] = saved


def _check(folders: list[Path]) -> None:
    resolver = Resolver([str(f) for f in folders], detector=None)
    served = {}
    for m in ASKED:
        key = {**KEY, "M": m}
        r = resolver.resolve("rmsnorm", key, H200_SPEC)
        explained, _ = resolver.explain("rmsnorm", key, H200_SPEC)
        assert (explained.file, explained.source, explained.key_match) == (r.file, r.source, r.key_match)
        assert dict(explained.config) == dict(r.config)
        served[m] = r
        _check_order(resolver, r)
    # doctor: each collision's winner is what resolve serves for that slot, on that device.
    for collision in resolver.collisions():
        if collision.device.product != H200["product"] or collision.key["M"] not in ASKED:
            continue
        r = served[collision.key["M"]]
        names = [collision.winner, *collision.shadowed]
        if collision.contested:
            assert r.key_match != "exact" or r.layer != "exact", (collision, r)
        elif r.key_match == "exact" and r.layer == "exact":
            assert collision.winner == _label(r), (collision, r)
        else:  # every artifact of the slot was refused: none of them serves
            assert all(_label(r) != n for n in names)
    # validate: of a folder's duplicates, it names the file the folder alone serves, and
    # the full environment serves that same file whenever it serves from that folder.
    for folder in folders:
        alone = Resolver([str(folder)], detector=None, packages=False)
        for shadowed, message in _validate_duplicates(folder).items():
            artifact = json.loads(Path(shadowed).read_bytes())
            device = artifact["device"]
            if device["product"] != H200["product"]:
                continue
            r = alone.resolve("rmsnorm", artifact["key"], H200_SPEC)
            if r.layer != "exact" or r.key_match != "exact":
                continue  # served from another slot (a measurement of the same silicon, say)
            assert r.file is not None and r.file in message and r.file != shadowed
            full = served.get(artifact["key"]["M"])
            if full is not None and full.origin == str(folder) and full.key_match == "exact" and full.layer == "exact":
                assert full.file == r.file


def _label(r: Any) -> str:
    return str(r.file) if r.source == "override" else f"{r.origin} {r.version} ({Path(r.file).name})"


def _check_order(resolver: Resolver, r: Any) -> None:
    """The oracle of "within each step standing first": every artifact of a better
    standing than the one served that the serving step could have served (its device
    layer, and the asked key for an exact match) was tried and passed over, with a
    reason in the record (contested, unusable, refused, not fitting the key)."""
    if r.source == "default" or any("predicted, not served" in reason for reason in r.reasons):
        return
    owner = resolver.owner(resolver.kernels.record("rmsnorm"))
    tier = {s.name: s.for_family(owner).rank[0] for s in resolver.sources_for("sm90")}
    layer = {"exact": 0, "same-compute-units": 1, "same-arch": 2}[r.layer]
    for entry in resolver.all_entries():
        if entry.kernel != "rmsnorm" or tier[entry.source.name] >= tier[r.origin]:
            continue
        in_layer = entry.device.product == H200["product"] if layer == 0 else True
        if in_layer and (r.key_match == "nearest" or dict(entry.key) == dict(r.key)):
            assert any(str(entry.path) in reason for reason in r.reasons), (str(entry.path), r)


def test_tiers_are_the_documented_order() -> None:
    assert sorted(TIERS, key=TIERS.__getitem__) == ["override", "chosen", "owner", "official", "third-party"]
