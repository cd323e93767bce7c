"""The benchmarks use flyconfigs as a user does: run as ``python -m bench.NAME`` from the
checkout's root, they import only public names (each in its module's ``__all__``) and
never patch ``sys.path``."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p.name != "__init__.py")


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _all_of(source: Path) -> tuple[str, ...]:
    """The module's ``__all__``, read from its source (importing it could need a GPU
    runtime or Triton)."""
    for node in _tree(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    return ()


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_a_benchmark_never_patches_sys_path(path: Path) -> None:
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name):
            assert node.value.id != "sys", f"{path.name}:{node.lineno} touches sys.path"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_a_benchmark_imports_only_public_names_of_flyconfigs(path: Path) -> None:
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("flyconfigs", "bench"):
                    assert not any(part.startswith("_") for part in alias.name.split(".")), f"{path.name}: {alias.name}"
        if not isinstance(node, ast.ImportFrom) or node.module is None or node.module == "__future__":
            continue
        where = f"{path.name}:{node.lineno} from {node.module}"
        assert node.level == 0, f"{where}: relative import (run as python -m bench.NAME)"
        assert not any(part.startswith("_") for part in node.module.split(".")), f"{where}: a private module"
        for alias in node.names:
            assert not alias.name.startswith("_"), f"{where} import {alias.name}: a private name"
        if node.module.split(".")[0] in ("flyconfigs", "bench"):
            spec = importlib.util.find_spec(node.module)
            assert spec is not None and spec.origin is not None, f"{where}: no such module"
            public = _all_of(Path(spec.origin))
            for alias in node.names:
                # A submodule imported from its package is a module, not a name of __all__.
                is_module = spec.submodule_search_locations and importlib.util.find_spec(f"{node.module}.{alias.name}")
                assert is_module or alias.name in public, f"{where} import {alias.name}: not in its __all__"


def test_the_bench_folder_says_how_to_run_a_benchmark() -> None:
    doc = ast.get_docstring(_tree(BENCH / "__init__.py")) or ""
    assert "python -m bench." in doc
    for path in SCRIPTS:
        if path.name != "common.py":
            assert f"python -m bench.{path.stem}" in (ast.get_docstring(_tree(path)) or ""), path.name


def test_against_names_each_other_commit_once_and_refuses_a_malformed_one(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from bench.common import add_against, versions_of

    parser = argparse.ArgumentParser()
    add_against(parser)
    args = parser.parse_args(["--against", "before=a:b", "--against", "older=c"])
    assert versions_of(parser, args.against) == {"this": "", "before": "a:b", "older": "c"}
    for bad in (["before"], ["before="], ["=a"], ["this=a"], ["x=a", "x=b"]):
        with pytest.raises(SystemExit):
            versions_of(parser, bad)
        assert "--against" in capsys.readouterr().err
