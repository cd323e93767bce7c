"""The command line reaches the registry through its public face only: every import of
``flyconfigs/cli/`` from the registry names ``flyconfigs.registry`` itself, and only names
it exports (``__all__``), so that the registry's modules can move without the CLI
noticing.  ``registry_internals_of_cli`` is the count docs/architecture.md gives."""

from __future__ import annotations

import ast
from pathlib import Path

import flyconfigs.cli
import flyconfigs.registry

CLI = Path(flyconfigs.cli.__file__).parent


def registry_internals_of_cli(folder: Path = CLI) -> dict[str, list[str]]:
    """Each registry name the CLI (``folder``) imports that is not public (a module of
    the registry other than the package, or a name the package does not export), with
    the files that import it."""
    found: dict[str, list[str]] = {}
    public = set(flyconfigs.registry.__all__)
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("flyconfigs.registry.")]
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                if node.module.startswith("flyconfigs.registry."):
                    names = [node.module]
                elif node.module == "flyconfigs.registry":
                    names = [f"flyconfigs.registry.{a.name}" for a in node.names if a.name not in public]
                elif node.module == "flyconfigs":
                    names = [f"flyconfigs.{a.name}" for a in node.names if a.name == "registry"]
            for name in names:
                found.setdefault(name, []).append(path.name)
    return found


def test_the_cli_imports_no_registry_internal() -> None:
    assert registry_internals_of_cli() == {}


def test_the_check_sees_an_internal_import(tmp_path: Path) -> None:
    # The check fails on what it is meant to catch: a module of the registry, or a name
    # the registry does not export, imported in a function as the command modules import.
    (tmp_path / "cmd.py").write_text("def f():\n    from flyconfigs.registry.sources.device import parse_device_spec\n"
                                     "    from flyconfigs.registry import TABLE, Resolver\n"
                                     "    import flyconfigs.registry.sources.tables\n")
    assert registry_internals_of_cli(tmp_path) == {"flyconfigs.registry.sources.device": ["cmd.py"],
                                                   "flyconfigs.registry.TABLE": ["cmd.py"],
                                                   "flyconfigs.registry.sources.tables": ["cmd.py"]}
