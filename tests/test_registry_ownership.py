"""Ownership and precedence between data packages, through real distributions on a
temporary ``sys.path``: the owner's packages, then the official ``flyconfigs-<target>``,
then third parties; never by name, never by a label a package wrote; two packages of
one standing contest a key and neither serves it; ``FLYCONFIGS_PACKAGES`` is the user's
choice; ``explain`` shows each source's standing and ``doctor`` reports the claims."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import SiteDir
from factories import MI300X, artifact_dict, predicted_artifact_dict
from flyconfigs import resolve
from flyconfigs.cli import main
from flyconfigs.registry import default_resolver, explain, refresh
from flyconfigs.registry.declarations import forget_loaded
from flyconfigs.schema import Artifact

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
ARGS = [f"{k}={v}" for k, v in KEY.items()]
MI325X = {**MI300X, "product": "AMD Instinct MI325X"}
ACME_DECL = '''
from dataclasses import dataclass
from flyconfigs.kernels.rmsnorm.declaration import RMSNormSpec


@dataclass(frozen=True)
class AcmeRMSNorm(RMSNormSpec):
    name: str = "acme_rms"

    @property
    def data_packages(self) -> tuple[str, ...]:
        return ("Acme_Tunings",)


SPEC = AcmeRMSNorm()
'''


@pytest.fixture(autouse=True)
def _fresh_declarations() -> Any:
    forget_loaded()
    yield
    forget_loaded()


def imported(**kwargs: Any) -> Artifact:
    data = artifact_dict(**kwargs)
    data["selection"] = {"rule": "imported"}
    return Artifact.model_validate(data)


def measured(**kwargs: Any) -> Artifact:
    return Artifact.model_validate(artifact_dict(**kwargs))


def predicted(**kwargs: Any) -> Artifact:
    return Artifact.model_validate(predicted_artifact_dict(**kwargs))


def test_a_third_party_label_never_outranks_the_official_package(site: SiteDir,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    official = predicted(device=MI300X, key=KEY, winner_index=2)
    rogue = imported(device=MI300X, key=KEY, winner_index=3)
    site.install("gfx942", [official])
    site.install("gfx942", [rogue], name="aaa-flyconfigs-gfx942", module="aaa_flyconfigs_gfx942")
    r = resolve("rmsnorm", KEY, "MI300X")
    assert (r.origin, r.selection) == ("flyconfigs-gfx942", "predicted")
    assert dict(r.config) == official.winner.config
    _, steps = explain("rmsnorm", KEY, "MI300X")
    order = next(s.outcome for s in steps if s.looked_for == "sources, in precedence order")
    assert order == "package flyconfigs-gfx942 1.0.0 (official); package aaa-flyconfigs-gfx942 1.0.0 (third party)"
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "flyconfigs-gfx942 1.0.0" in out and "(official) shadows aaa-flyconfigs-gfx942" in out
    assert "unexpected collision" in out


def test_a_same_silicon_measurement_of_a_third_party_does_not_replace_the_official_prediction(site: SiteDir) -> None:
    site.install("gfx942", [predicted(device=MI300X, key=KEY, winner_index=2)])
    site.install("gfx942", [measured(device=MI325X, key=KEY, winner_index=3)], name="mi325x-tunings",
                 module="mi325x_tunings")
    r = resolve("rmsnorm", KEY, "MI300X")
    assert (r.origin, r.selection, r.layer) == ("flyconfigs-gfx942", "predicted", "exact")


def test_two_third_parties_contest_a_key_and_the_user_chooses(site: SiteDir, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    site.install("gfx942", [measured(device=MI300X, key=KEY, winner_index=2)], name="aaa-tunings", module="aaa")
    site.install("gfx942", [predicted(device=MI300X, key=KEY, winner_index=3)], name="zzz-tunings", module="zzz")
    r = resolve("rmsnorm", KEY, "MI300X")
    assert r.source == "default", "neither a name nor a measured label decides between two third parties"
    assert main(["doctor", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    (collision,) = report["collisions"]
    assert collision["contested"] and collision["standings"] == ["third-party", "third-party"]
    assert any(e.startswith("contested:") for e in report["errors"])
    monkeypatch.setenv("FLYCONFIGS_PACKAGES", "zzz-tunings")
    refresh()
    r = resolve("rmsnorm", KEY, "MI300X")
    assert (r.origin, r.selection) == ("zzz-tunings", "predicted"), "chosen, the prediction outranks a third party"
    # Both ranked: within one standing a measurement goes before a prediction, and the
    # user chose every package involved, so doctor is content.
    monkeypatch.setenv("FLYCONFIGS_PACKAGES", "zzz-tunings,aaa-tunings")
    monkeypatch.setenv("FLYCONFIGS_DEVICE", "MI300X")
    refresh()
    assert resolve("rmsnorm", KEY).origin == "aaa-tunings"
    assert main(["doctor"]) == 0
    assert "aaa-tunings 1.0.0 (rmsnorm-gfx942-" in capsys.readouterr().out.split("(chosen) shadows")[0]


def test_the_family_owners_packages_come_before_the_official_and_third_parties(
        site: SiteDir, capsys: pytest.CaptureFixture[str]) -> None:
    key = dict(KEY)
    owners = measured(device=MI300X, key=key, kernel="acme_rms", winner_index=1)
    site.install("gfx942", [owners], name="acme-tunings", module="acme_tunings")
    site.install("gfx942", [measured(device=MI300X, key=key, kernel="acme_rms", winner_index=2)])
    site.install("gfx942", [measured(device=MI300X, key=key, kernel="acme_rms", winner_index=3)], name="other-tunings",
                 module="other_tunings")
    info = site.root / "acme_kernels-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-kernels\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[flyconfigs.kernels]\nacme_rms = acme_rms_decl:SPEC\n")
    (site.root / "acme_rms_decl.py").write_text(ACME_DECL)
    refresh()
    r = resolve("acme_rms", key, "MI300X")
    assert r.origin == "acme-tunings" and dict(r.config) == owners.winner.config
    assert main(["explain", "acme_rms", *ARGS, "--device", "MI300X"]) == 0
    out = capsys.readouterr().out
    assert "owner of acme_rms: acme-kernels (with acme-tunings)" in out
    assert ("package acme-tunings 1.0.0 (the kernel owner's); package flyconfigs-gfx942 1.0.0 (official); "
            "package other-tunings 1.0.0 (third party)") in out
    # The same packages rank as plain third parties for a family acme-kernels does not own.
    assert "(official)" not in out.split("=>")[1]
    (collision,) = default_resolver().collisions()
    assert collision.standings == ("owner", "official", "third-party") and not collision.contested


def test_the_owners_own_distribution_ranks_as_the_owners(site: SiteDir) -> None:
    site.install("gfx942", [measured(device=MI300X, key=KEY, kernel="acme_rms", winner_index=1)], name="acme-kernels",
                 module="acme_kernels_data")
    site.install("gfx942", [measured(device=MI300X, key=KEY, kernel="acme_rms", winner_index=2)], name="other-tunings",
                 module="other_tunings")
    (info,) = site.root.glob("acme_kernels-*.dist-info")
    with (info / "entry_points.txt").open("a") as f:
        f.write("[flyconfigs.kernels]\nacme_rms = acme_own_decl:SPEC\n")
    (site.root / "acme_own_decl.py").write_text(ACME_DECL.replace('("Acme_Tunings",)', "()"))
    refresh()
    assert resolve("acme_rms", KEY, "MI300X").origin == "acme-kernels"
