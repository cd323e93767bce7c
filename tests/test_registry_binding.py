"""An artifact is served only by the kernel family it was tuned for: its
``kernel.version`` must be the installed family's (or one it declares compatible), and
its ``source_sha256`` the installed source's unless the family binds by version.  The
loader, ``validate``, ``explain`` and ``doctor`` ask one function, so they agree."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import SiteDir
from factories import artifact_dict
from flyconfigs.cli import main
from flyconfigs.kernels.fused_add_rmsnorm import SPEC as FUSED
from flyconfigs.kernels.rmsnorm import SPEC as RMSNORM
from flyconfigs.kernels.rmsnorm.declaration import RMSNormSpec
from flyconfigs.kernels.vllm_flydsl_moe import SPEC as VLLM_FLYDSL_MOE
from flyconfigs.kernels.vllm_fused_moe import SPEC as VLLM_MOE
from flyconfigs.registry import Resolver, default_resolver, explain, resolve
from flyconfigs.registry.checks.binding import binding_problem
from flyconfigs.registry.declarations import SourceBinding
from flyconfigs.schema import Artifact
from flyconfigs.schema.models import KernelRef

ROOT = Path(__file__).parents[1]
KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
H200_SPEC = "sm90:132:NVIDIA H200"
TUNED_SOURCE = "ab" * 32


def artifact(version: int = 1, source: str | None = TUNED_SOURCE) -> Artifact:
    data = artifact_dict(key=KEY, winner_index=3)
    data["kernel"] = {"name": "rmsnorm", "version": version, **({"source_sha256": source} if source else {})}
    return Artifact.model_validate(data)


@dataclass(frozen=True)
class BoundRMSNorm(RMSNormSpec):
    """RMSNorm at family version 3, accepting 2, and binding artifacts to its exact source."""

    version: int = 3

    @property
    def compatible_versions(self) -> range:
        return range(2, 3)

    @property
    def source_binding(self) -> SourceBinding:
        return "exact"

    def source_sha256(self) -> str:
        return "cd" * 32


def test_an_artifact_of_another_family_version_is_not_served(site: SiteDir) -> None:
    site.install("sm90", [artifact(version=7)])
    r = resolve("rmsnorm", KEY, H200_SPEC)
    assert r.source == "default"
    assert any("stale: tuned for rmsnorm version 7" in reason and "is version 1" in reason for reason in r.reasons)
    _, steps = explain("rmsnorm", KEY, H200_SPEC)
    assert any("stale: tuned for rmsnorm version 7" in s.outcome for s in steps)


def test_validate_and_doctor_say_why_a_stale_artifact_is_not_served(
    tmp_path: Path, site: SiteDir, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "stale.json"
    stale.write_bytes(artifact(version=7).to_json_bytes())
    assert main(["validate", str(stale)]) == 1
    out = capsys.readouterr().out
    assert f"{stale}: kernel: stale-artifact: tuned for rmsnorm version 7" in out
    site.install("sm90", [artifact(version=7)])
    assert main(["doctor"]) == 1
    assert "stale-artifact" in capsys.readouterr().out


def test_a_declared_compatible_version_serves_and_any_other_does_not(tmp_path: Path) -> None:
    decl = BoundRMSNorm()
    accepted = {v: binding_problem(decl, KernelRef(name="rmsnorm", version=v, source_sha256="cd" * 32)) for v in (1, 2, 3, 4)}
    assert accepted[2] is None and accepted[3] is None
    assert accepted[1] is not None and "(serves 2, 3)" in accepted[1]
    assert accepted[4] is not None


def test_exact_binding_refuses_another_source_and_version_binding_serves_it(tmp_path: Path) -> None:
    for version, source in ((3, TUNED_SOURCE), (1, TUNED_SOURCE)):
        (tmp_path / f"v{version}.json").write_bytes(artifact(version=version, source=source).to_json_bytes())
    exact = Resolver(paths=[str(tmp_path)], detector=None).resolve(BoundRMSNorm(), KEY, H200_SPEC)
    assert exact.source == "default"
    assert any("binds artifacts to their exact source" in r for r in exact.reasons), exact.reasons
    by_version = Resolver(paths=[str(tmp_path)], detector=None).resolve(RMSNORM, KEY, H200_SPEC)
    assert by_version.source == "override" and by_version.file is not None and by_version.file.endswith("v1.json")


def test_an_artifact_that_records_no_source_is_not_stale_by_source() -> None:
    assert binding_problem(BoundRMSNorm(), KernelRef(name="rmsnorm", version=3, source_sha256=None)) is None


def test_the_project_families_serve_every_committed_artifact() -> None:
    """Both families bind by version: the gfx942 artifacts were tuned with an older
    rmsnorm.cu than the one installed, and stay served; so are the vLLM packages' tables
    and artifacts, imported with no source."""
    families = {"rmsnorm": RMSNORM, "fused_add_rmsnorm": FUSED, "vllm_fused_moe": VLLM_MOE,
                "vllm_flydsl_moe": VLLM_FLYDSL_MOE}
    seen: dict[str, int] = {}
    sources: set[str | None] = set()
    for path in sorted((ROOT / "artifacts").rglob("*.json")):
        kernel = json.loads(path.read_bytes())["kernel"]
        ref = KernelRef.model_validate(kernel)
        assert binding_problem(families[ref.name], ref) is None, path
        seen[ref.name] = seen.get(ref.name, 0) + 1
        sources.add(ref.source_sha256)
    assert seen.keys() == families.keys()
    # Some (today all of rmsnorm's) were tuned with another source than the installed one:
    # exact binding would refuse them.
    assert any(s != RMSNORM.source_sha256() and s != FUSED.source_sha256() for s in sources)


def test_the_default_resolver_refuses_a_stale_override_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.json").write_bytes(artifact(version=2).to_json_bytes())
    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path))
    default_resolver().refresh()
    try:
        assert resolve("rmsnorm", KEY, H200_SPEC).source == "default"
    finally:
        monkeypatch.delenv("FLYCONFIGS_PATH")
        default_resolver().refresh()


def test_a_declaration_whose_binding_members_raise_serves_none_of_its_artifacts() -> None:
    @dataclass(frozen=True)
    class Broken(RMSNormSpec):
        @property
        def compatible_versions(self) -> range:
            raise RuntimeError("compatible_versions is broken")

    why = binding_problem(Broken(), KernelRef(name="rmsnorm", version=2, source_sha256=None))
    assert why is not None and "raised RuntimeError while its binding was checked" in why
