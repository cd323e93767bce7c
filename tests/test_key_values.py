"""A tuned key is judged as an asked one: a tuned key the kernel's own ``check_key``
refuses (below an axis minimum, say) is never served, is reported by ``validate`` and
refused by ``publish`` for that reason."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from factories import artifact_dict
from flyconfigs.cli import main
from flyconfigs.registry import Resolver
from flyconfigs.registry.checks.check import winner_refusal
from flyconfigs.schema import Artifact, canonical_bytes

H200_SPEC = "sm90:132:NVIDIA H200"
KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}


def _rmsnorm_file(folder: Path, m: int | float, winner_index: int = 1) -> Path:
    raw = canonical_bytes(artifact_dict(key={**KEY, "M": 64}, winner_index=winner_index))
    path = folder / f"rmsnorm-M{m}.json"
    path.write_bytes(raw.replace(b'"M":64', f'"M":{m}'.encode()))
    return path


def test_a_tuned_key_below_the_axis_minimum_is_never_served(tmp_path: Path) -> None:
    bad = _rmsnorm_file(tmp_path, -64)
    resolver = Resolver([str(tmp_path)], packages=False)
    served, trace = resolver.explain("rmsnorm", {**KEY, "M": 1}, H200_SPEC)
    assert served.source == "default"
    assert any(str(bad) in step.outcome and "refuses its key" in step.outcome for step in trace)
    assert any(p.where == str(bad) and p.kind == "invalid-key" for p in resolver.problems.problems())


def test_validate_reports_a_tuned_key_the_kernel_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _rmsnorm_file(tmp_path, -64)
    assert main(["validate", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "invalid-key" in out and "'M'" in out and ">= 1" in out


def test_publish_refuses_a_tuned_key_the_kernel_refuses_for_that_reason(tmp_path: Path) -> None:
    path = _rmsnorm_file(tmp_path, -64)
    artifact = Artifact.model_validate_json(path.read_bytes())
    why = winner_refusal(artifact)
    assert why is not None and "'M'" in why and ">= 1" in why


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(max_value=0) | st.integers(min_value=2**40, max_value=2**62))
def test_no_out_of_range_tuned_key_is_served(tmp_path: Path, m: int) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    good = _rmsnorm_file(folder, 4096, winner_index=2)
    _rmsnorm_file(folder, m)
    resolver = Resolver([str(folder)], packages=False)
    for asked in (1, 2, 4096, 1 << 20):
        served = resolver.resolve("rmsnorm", {**KEY, "M": asked}, H200_SPEC)
        assert served.file in (None, str(good)), (m, asked, served.file)
