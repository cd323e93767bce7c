"""Ways to damage an installed data package, each with the problem kind the loader
reports for it; shared by the loader's, doctor's and validate's tests."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from factories import artifact_dict, make_artifact
from flyconfigs.schema import canonical_bytes

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}


def read_manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def write_manifest(folder: Path, data: dict) -> None:
    (folder / "manifest.json").write_bytes(canonical_bytes(data))


def _corrupt_manifest(folder: Path) -> None:
    (folder / "manifest.json").write_text('{"schema_version": "1.0", "target": ')


def _row_escapes(folder: Path) -> None:
    data = read_manifest(folder)
    data["artifacts"][0]["file"] = "../escape.json"
    write_manifest(folder, data)


def _row_absolute(folder: Path) -> None:
    data = read_manifest(folder)
    data["artifacts"][0]["file"] = "/etc/passwd"
    write_manifest(folder, data)


def _symlink_out(folder: Path) -> None:
    row = read_manifest(folder)["artifacts"][0]
    inside = folder / row["file"]
    outside = folder.parent.parent / "outside.json"
    outside.write_bytes(inside.read_bytes())
    inside.unlink()
    inside.symlink_to(outside)


def _missing_file(folder: Path) -> None:
    (folder / read_manifest(folder)["artifacts"][0]["file"]).unlink()


def _hash_mismatch(folder: Path) -> None:
    path = folder / read_manifest(folder)["artifacts"][0]["file"]
    path.write_bytes(path.read_bytes().replace(b'"host":"h200-test"', b'"host":"h200-edit"'))


def _newer_major(folder: Path) -> None:
    data = read_manifest(folder)
    row = data["artifacts"][0]
    doc = artifact_dict(key=KEY)
    doc["schema_version"] = "2.0"
    raw = canonical_bytes(doc) + b"\n"
    (folder / row["file"]).write_bytes(raw)
    row["sha256"] = hashlib.sha256(raw).hexdigest()
    write_manifest(folder, data)


def _newer_major_manifest(folder: Path) -> None:
    data = read_manifest(folder)
    data["schema_version"] = "2.0"
    write_manifest(folder, data)


def _wrong_target(folder: Path) -> None:
    data = read_manifest(folder)
    data["target"] = "gfx942"
    write_manifest(folder, data)


def _row_of_another_arch(folder: Path) -> None:
    data = read_manifest(folder)
    data["artifacts"][0]["device"]["arch"] = "sm80"
    write_manifest(folder, data)


def _duplicate_rows(folder: Path) -> None:
    data = read_manifest(folder)
    row = dict(data["artifacts"][0])
    row["file"] = "artifacts/copy.json"
    data["artifacts"].append(row)
    write_manifest(folder, data)


def _identity_mismatch(folder: Path) -> None:
    data = read_manifest(folder)
    row = data["artifacts"][0]
    other = make_artifact(key={**KEY, "M": 1}).to_json_bytes()
    (folder / row["file"]).write_bytes(other)
    row["sha256"] = hashlib.sha256(other).hexdigest()
    write_manifest(folder, data)


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "corrupt manifest": (_corrupt_manifest, "invalid-manifest"),
    "row pointing ../": (_row_escapes, "invalid-manifest"),
    "absolute row path": (_row_absolute, "invalid-manifest"),
    "symlink out of the package": (_symlink_out, "unsafe-path"),
    "missing file": (_missing_file, "missing-file"),
    "hash mismatch": (_hash_mismatch, "hash-mismatch"),
    "newer schema major (artifact)": (_newer_major, "unsupported-major"),
    "newer schema major (manifest)": (_newer_major_manifest, "unsupported-major"),
    "wrong target": (_wrong_target, "wrong-target"),
    "row of another arch": (_row_of_another_arch, "wrong-target"),
    "duplicate rows": (_duplicate_rows, "invalid-manifest"),
    "artifact differs from its row": (_identity_mismatch, "identity-mismatch"),
}
