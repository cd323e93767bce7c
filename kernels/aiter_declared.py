"""aiter families declared from data: a CSV layout flyconfigs has not seen joins as a small
JSON file beside this module (``aiter_families/<family>.json``), no Python.

The file states what :class:`~flyconfigs.kernels.aiter_family.AiterFamily` needs, in the
CSV's own words::

    {"format": "flyconfigs aiter family 1",
     "family": "flydsl_gemm_a8w8_bpreshuffle",          # the kernel is aiter_<family>
     "files": ["flydsl_a8w8_bpreshuffle_tuned_gemm"],   # the tuned-file names aiter reads
     "env": null,                                       # its AITER_CONFIG_* variable, if any
     "header": "cu_num,M,N,K,q_dtype_w,tile_m,…",       # the CSV's header line
     "key": ["cu_num", "M", "N", "K", "q_dtype_w"],     # the columns aiter's lookup compares
     "measured": [],                                    # what its tuner measured (besides us, tflops, …)
     "rule": "nearest",                                 # aiter's lookup on a miss (RULES)
     "summary": "…"}                                    # which aiter function looks it up

Every other column of the header is a config column; ``gfx`` (or ``"arch_column"``) names the
device's arch where the file has one.  Optional: ``"arch_column"``, ``"types"`` (a key
column's type, ``int``, ``bool`` or ``str``, where :data:`~flyconfigs.kernels.aiter_family.COLUMN_TYPES`
does not say it), ``"retried"``, ``"unmatched"`` and ``"on_duplicate"`` as the family's
fields.  A family is served once an entry point of the group ``flyconfigs.kernels`` names
it (``aiter_<family> = "flyconfigs.kernels.aiter_declared:DECLARED.<family>"``).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from flyconfigs.errors import ArtifactError, FieldProblem
from flyconfigs.kernels.aiter_family import COLUMN_TYPES, MEASURED, RULES, AiterFamily

__all__ = ["DECLARED", "FAMILY_FORMAT", "FOLDER", "declared_families", "family_from_data"]

FAMILY_FORMAT = "flyconfigs aiter family 1"
"""The ``format`` a family file states."""
FOLDER = Path(__file__).with_name("aiter_families")
"""Where the families flyconfigs ships are declared."""
_FIELDS = {"format", "family", "files", "env", "header", "key", "measured", "rule", "summary", "arch_column", "types",
           "retried", "unmatched", "on_duplicate"}


def _strings(data: dict[str, Any], name: str, file: str, required: bool = True) -> tuple[str, ...]:
    value = data.get(name, None if required else [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value) or (required and not value):
        raise ArtifactError(file, [FieldProblem(name, f"expected a {'non-empty ' if required else ''}list of names, "
                                                      f"got {value!r}")])
    return tuple(value)


def family_from_data(data: object, file: str) -> AiterFamily:
    """The family a family file's JSON ``data`` declares; :class:`ArtifactError` naming
    ``file`` and the field for anything it does not accept (an unknown field or rule, a
    key column not in the header, a column named twice)."""
    if not isinstance(data, dict):
        raise ArtifactError(file, [FieldProblem("", f"expected an object, got {type(data).__name__}")])
    problems = [FieldProblem(k, "unknown field") for k in sorted(set(data) - _FIELDS)]
    if data.get("format") != FAMILY_FORMAT:
        problems.append(FieldProblem("format", f"expected {FAMILY_FORMAT!r}, got {data.get('format')!r}"))
    if problems:
        raise ArtifactError(file, problems)
    family, header, rule = data.get("family"), data.get("header"), data.get("rule")
    if not isinstance(family, str) or not family.replace("_", "").isalnum():
        raise ArtifactError(file, [FieldProblem("family", f"expected a name of letters, digits and _, got {family!r}")])
    if not isinstance(header, str) or not header:
        raise ArtifactError(file, [FieldProblem("header", f"expected the CSV's header line, got {header!r}")])
    if rule not in RULES:
        raise ArtifactError(file, [FieldProblem("rule", f"expected one of {', '.join(RULES)}, got {rule!r}")])
    columns = header.split(",")
    if len(set(columns)) != len(columns):
        raise ArtifactError(file, [FieldProblem("header", "a column is named twice")])
    key, measured = _strings(data, "key", file), _strings(data, "measured", file, required=False)
    arch_column = data.get("arch_column", "gfx")
    if not isinstance(arch_column, str):
        raise ArtifactError(file, [FieldProblem("arch_column", f"expected a column name, got {arch_column!r}")])
    stray = [c for c in (*key, *measured) if c not in columns]
    if stray:
        raise ArtifactError(file, [FieldProblem("key" if stray[0] in key else "measured",
                                                f"{', '.join(stray)} not in the header")])
    types = data.get("types", {})
    if not isinstance(types, dict) or any(c not in key or t not in ("int", "bool", "str") for c, t in types.items()):
        raise ArtifactError(file, [FieldProblem("types", f"expected key columns, each int, bool or str, got {types!r}")])
    if "cu_num" in columns and "cu_num" not in key:
        raise ArtifactError(file, [FieldProblem("key", "cu_num is in the header: aiter matches the GPU's CU count, "
                                                       "so it is a key column")])
    config = tuple(c for c in columns if c not in key and c not in measured and c not in MEASURED and c != arch_column)
    env = data.get("env")
    if env is not None and not isinstance(env, str):
        raise ArtifactError(file, [FieldProblem("env", f"expected a variable's name or null, got {env!r}")])
    summary = data.get("summary", "")
    on_duplicate = data.get("on_duplicate", "refuse")
    if not isinstance(summary, str) or on_duplicate not in ("refuse", "lowest-us"):
        raise ArtifactError(file, [FieldProblem("summary" if not isinstance(summary, str) else "on_duplicate",
                                                "expected text, and refuse or lowest-us")])
    try:
        return AiterFamily(
            family, _strings(data, "files", file), env, key, config, rule, arch_column=arch_column,
            on_duplicate=on_duplicate, retried=_strings(data, "retried", file, required=False),
            unmatched=_strings(data, "unmatched", file, required=False), summary=summary, measured=measured,
            column_types=tuple((c, str(t)) for c, t in types.items() if COLUMN_TYPES.get(c) is not
                               {"int": int, "bool": bool, "str": str}[t]))
    except ValueError as exc:
        raise ArtifactError(file, [FieldProblem("retried", str(exc))]) from None


def declared_families(folder: Path = FOLDER) -> dict[str, AiterFamily]:
    """Every family a ``*.json`` file of ``folder`` declares, by family name, in file-name
    order; :class:`ArtifactError` for a file it cannot read (a shipped file is checked by
    the tests, so that never happens in a release)."""
    out: dict[str, AiterFamily] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ArtifactError(str(path), [FieldProblem("", f"not readable JSON: {exc}")]) from None
        family = family_from_data(data, str(path))
        if family.family in out:
            raise ArtifactError(str(path), [FieldProblem("family", f"{family.family} is declared twice")])
        out[family.family] = family
    return out


DECLARED = SimpleNamespace(**declared_families())
"""The families shipped as data, by family name (``DECLARED.flydsl_gemm_a8w8_bpreshuffle``),
as the entry points name them."""
