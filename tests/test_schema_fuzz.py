"""Property: whatever a valid artifact is mutated into, the loader raises nothing but
ArtifactError (or returns a valid artifact) — over pretty-printed JSON (the slow parse
path) and over the compact canonical form that flyconfigs writes and production reads
(the fast path)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from factories import artifact_dict, value_paths
from flyconfigs.errors import ArtifactError
from flyconfigs.schema import MAX_DEPTH, Artifact, canonical_bytes, loads_artifact

CHARS = st.characters(exclude_categories=["Cs"])
"""Any character but a surrogate, as an explicit alphabet: ``st.text``'s default (UTF-8
encodable) warns, on a fresh install, of characters that do not decode back the same."""

BASE = artifact_dict(n_candidates=4)
BASE_BYTES = json.dumps(BASE).encode()
COMPACT = loads_artifact(BASE_BYTES).to_json_bytes()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(CHARS, max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(CHARS, max_size=5), inner, max_size=3),
    max_leaves=8,
)


PATHS = value_paths(BASE)[1:]


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return doc


def _check(raw: bytes) -> None:
    try:
        result = loads_artifact(raw)
    except ArtifactError:
        return
    assert isinstance(result, Artifact)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.sampled_from(PATHS), json_values)
def test_replacing_any_value_only_raises_artifact_error(path: tuple[Any, ...], value: Any) -> None:
    doc = json.loads(BASE_BYTES)
    _check(json.dumps(_set(doc, path, value), allow_nan=True).encode())


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(BASE_BYTES) - 1), st.binary(min_size=0, max_size=4), st.integers(0, 4))
def test_corrupting_bytes_only_raises_artifact_error(offset: int, insert: bytes, cut: int) -> None:
    _check(BASE_BYTES[:offset] + insert + BASE_BYTES[offset + cut :])


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(PATHS))
def test_deleting_any_field_only_raises_artifact_error(path: tuple[Any, ...]) -> None:
    doc = json.loads(BASE_BYTES)
    node = doc
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]
    _check(json.dumps(doc).encode())


def _compact(doc: Any) -> bytes:
    return canonical_json(doc) + b"\n"


def canonical_json(doc: Any) -> bytes:
    """The canonical encoding when the document has one, else compact ``json.dumps``
    (NaN and other values canonical JSON refuses still reach the reader this way)."""
    try:
        return canonical_bytes(doc)
    except (TypeError, ValueError):
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.sampled_from(PATHS), json_values)
def test_compact_canonical_form_replacing_any_value_only_raises_artifact_error(path: tuple[Any, ...], value: Any) -> None:
    doc = json.loads(COMPACT)
    _check(_compact(_set(doc, path, value)))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(COMPACT) - 1), st.binary(min_size=0, max_size=4), st.integers(0, 4))
def test_compact_canonical_form_corrupted_bytes_only_raise_artifact_error(offset: int, insert: bytes, cut: int) -> None:
    _check(COMPACT[:offset] + insert + COMPACT[offset + cut :])


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 80), st.sampled_from(PATHS))
def test_nesting_beyond_the_limit_is_refused_in_the_compact_form_as_in_the_pretty_one(depth: int, path: tuple[Any, ...]) -> None:
    nested: Any = 1
    for _ in range(depth):
        nested = [nested]
    doc = _set(json.loads(COMPACT), path, nested)
    outcomes = []
    for raw in (_compact(doc), json.dumps(doc, indent=2).encode()):
        try:
            loads_artifact(raw)
            outcomes.append("ok")
        except ArtifactError as exc:
            outcomes.append("deep" if "nesting deeper" in str(exc) else "invalid")
    assert outcomes[0] == outcomes[1]
    if len(path) + depth > MAX_DEPTH:
        assert outcomes == ["deep", "deep"]
