"""Every malformed file of the corpus gets its own clear error naming file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from flyconfigs.errors import ArtifactError, UnsupportedSchemaVersionError
from flyconfigs.schema.models import SCHEMA_VERSION
from flyconfigs.schema import load_artifact

CORPUS = Path(__file__).parent / "corpus"

# file -> (field path of the first problem, a fragment of its message)
EXPECTED = {
    "truncated.json": ("", "invalid JSON"),
    "string-for-int.json": ("device.compute_units", "valid integer (got '132')"),
    "bool-for-int.json": ("device.compute_units", "valid integer (got True)"),
    "float-for-int.json": ("device.compute_units", "valid integer (got 132.0)"),
    "wrong-type-object.json": ("kernel", "valid dictionary"),
    "nan.json": ("candidates[0].timing.median_us", "NaN is not allowed"),
    "infinity.json": ("candidates[0].timing.median_us", "Infinity is not allowed"),
    "overflow-1e400.json": ("candidates[0].timing.median_us", "not finite"),
    "deep-nesting.json": ("provenance.host" + "[0]" * 30, "nesting deeper than 32"),
    "oversized.json": ("", "over the limit"),
    "duplicate-key.json": ("device.compute_units", "duplicate object key"),
    "newer-major.json": ("schema_version", "newer than this flyconfigs supports"),
    "unsafe-kernel-name.json": ("kernel.name", "should match pattern"),
    "unsafe-arch.json": ("device.arch", "should match pattern"),
    "key-value-too-deep.json": ("key.dtype", ""),
    "missing-winner.json": ("winner", "Field required"),
    "winner-not-a-candidate.json": ("winner.config", "must be one of the candidates"),
    "unknown-status.json": ("candidates[1].status", "'ok', 'compiled', 'compile_error'"),
    "unknown-field.json": ("surprise", "Extra inputs are not permitted"),
    "version-not-string.json": ("schema_version", "expected 'MAJOR.MINOR'"),
    "not-an-object.json": ("", "expected a JSON object"),
    "not-utf8.json": ("", "not UTF-8"),
    "quantiles-out-of-order.json": ("candidates[0].timing.p20_us", "min_us <= p20_us"),
}


# Files too large to keep in the repository are written by the test itself.
GENERATED = {
    "oversized.json": lambda: '{"schema_version": "1.0", "pad": "' + "x" * (8 * 1024 * 1024) + '"}',
}


def test_corpus_is_complete() -> None:
    on_disk = sorted(p.name for p in (CORPUS / "bad").iterdir())
    assert sorted(on_disk + list(GENERATED)) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_bad_file_has_its_own_error(name: str, tmp_path: Path) -> None:
    path = CORPUS / "bad" / name
    if name in GENERATED:
        path = tmp_path / name
        path.write_text(GENERATED[name](), encoding="utf-8")
    with pytest.raises(ArtifactError) as info:
        load_artifact(path)
    field, fragment = EXPECTED[name]
    error = info.value
    assert error.file == str(path)
    assert error.problems[0].field == field
    assert fragment in error.problems[0].message
    assert str(path) in str(error)


def test_newer_major_is_its_own_type_and_names_the_supported_version() -> None:
    with pytest.raises(UnsupportedSchemaVersionError) as info:
        load_artifact(CORPUS / "bad" / "newer-major.json")
    assert info.value.found == "2.0"
    assert SCHEMA_VERSION in str(info.value)


@pytest.mark.parametrize("path", sorted((CORPUS / "good").iterdir()), ids=lambda p: p.name)
def test_good_files_load(path: Path) -> None:
    artifact = load_artifact(path)
    assert artifact.kernel.name == "rmsnorm"
