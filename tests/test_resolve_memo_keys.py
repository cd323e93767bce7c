"""The memo keeps apart keys that differ as JSON (``0.0`` and ``-0.0``, ``(0.0,)`` and
``(-0.0,)``): every input is served what the search without the memo serves it."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from factories import H200, make_artifact
from flyconfigs.registry import KernelDecl, KeyAxis, Resolver
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema import Artifact, write_atomic

H200_SPEC = "sm90:132:NVIDIA H200"
DEFAULT = {"threads": 1, "rows_per_block": 1, "vector_bytes": 0, "row_storage": "reg", "occupancy": 0}


class _Scaled(KernelDecl):
    """Keyed by an ordinal ``M`` and an exact float ``alpha``."""

    name = "toy_scaled"
    version = 1
    key_axes = (KeyAxis("M", int, ordinal=True, minimum=1), KeyAxis("alpha", float))

    def default_config(self, key: Mapping[str, Any], device: DeviceQuery | None) -> dict[str, Any]:
        return dict(DEFAULT)


SCALED = _Scaled()


def _write(folder: Path, artifact: Artifact) -> Path:
    path = folder / artifact.file_name()
    write_atomic(path, artifact.to_json_bytes())
    return path


def test_the_memo_keeps_minus_zero_apart_from_zero(tmp_path: Path) -> None:
    zero = make_artifact(device=H200, key={"M": 8, "alpha": 0.0}, kernel="toy_scaled", winner_index=1)
    minus = make_artifact(device=H200, key={"M": 8, "alpha": -0.0}, kernel="toy_scaled", winner_index=2)
    _write(tmp_path, zero)
    _write(tmp_path, minus)
    resolver = Resolver([str(tmp_path)], packages=False)
    first = resolver.resolve(SCALED, {"M": 8, "alpha": 0.0}, H200_SPEC)
    second = resolver.resolve(SCALED, {"M": 8, "alpha": -0.0}, H200_SPEC)
    assert dict(first.config) == dict(zero.winner.config)
    assert dict(second.config) == dict(minus.winner.config)
    assert math.copysign(1.0, second.key["alpha"]) == -1.0


_FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=64) | st.sampled_from([0.0, -0.0, 1.0, -1.0])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(_FLOATS, st.sampled_from([1, 1.0, True, "1", [1], [1.0], (0.0,), (-0.0,)])), min_size=2,
                max_size=6))
def test_the_memo_serves_every_input_what_the_search_without_it_serves(tmp_path: Path,
                                                                        asks: list[tuple[float, object]]) -> None:
    # Any two inputs the memo could take for one: each is answered as explain (no memo) answers it.
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    for i, (alpha, _) in enumerate(asks[:3]):
        _write(folder, make_artifact(device=H200, key={"M": 8, "alpha": alpha}, kernel="toy_scaled",
                                     winner_index=1 + i))
    resolver = Resolver([str(folder)], packages=False)
    for alpha, m in asks:
        for key in ({"M": 8, "alpha": alpha}, {"M": m, "alpha": alpha}):
            try:
                expected, _ = resolver.explain(SCALED, key, H200_SPEC)
            except Exception as exc:  # noqa: BLE001 - the memo must raise as the search does
                with pytest.raises(type(exc)):
                    resolver.resolve(SCALED, key, H200_SPEC)
                continue
            served = resolver.resolve(SCALED, key, H200_SPEC)
            assert (dict(served.config), served.file) == (dict(expected.config), expected.file)
            assert repr(dict(served.key)) == repr(dict(expected.key))
