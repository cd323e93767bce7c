"""The registry's structure figures, counted from the source: import circles among its
modules, imports that run back up (a function-level or ``TYPE_CHECKING`` import of a
registry module that imports the importer back, so that a top-level import would close a
circle), broad ``except`` clauses and the modules that hold them, modules over 300 lines,
modules that read the process environment, and the registry modules the CLI imports other
than the public face (``flyconfigs.registry`` itself).  docs/architecture.md quotes them.

    python scripts/registry_figures.py [--root .] [--json]

The graph holds every import of a registry module by a registry module, at any depth and
under ``TYPE_CHECKING`` too; a circle is a strongly connected set of two or more modules.
"""

from __future__ import annotations

import argparse
import ast
import json
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "flyconfigs.registry"
LINE_LIMIT = 300


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    deferred: str | None
    """``None`` at module level, else ``"function"`` or ``"TYPE_CHECKING"``."""
    line: int


def modules(folder: Path) -> dict[str, Path]:
    """Every module of the package folder ``folder``, by its import name."""
    out = {}
    for path in sorted(folder.rglob("*.py")):
        parts = list(path.relative_to(folder).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join([PACKAGE, *parts])] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(name: str, path: Path, known: set[str]) -> list[Import]:
    """The imports of registry modules that module ``name`` makes, each with where it sits."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def target_modules(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        base = node.module or ""
        if node.level:
            anchor = package.split(".")
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, *([base] if base else [])])
        # ``from package import module`` imports the module; a name imports the package.
        return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]

    def visit(node: ast.AST, deferred: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in target_modules(child):
                    while target and target not in known and target.startswith(PACKAGE + "."):
                        target = target.rpartition(".")[0]
                    if target in known and target != name:
                        found.append(Import(name, target, deferred, child.lineno))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, deferred or "function")
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    visit(ast.Module(body=[stmt], type_ignores=[]), deferred or "TYPE_CHECKING")
                for stmt in child.orelse:
                    visit(ast.Module(body=[stmt], type_ignores=[]), deferred)
            else:
                visit(child, deferred)

    visit(tree, None)
    return list(dict.fromkeys(found))  # one per statement and target


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of two or more modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def connect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        v = todo.pop()
        if v == goal:
            return True
        for w in graph.get(v, ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return False


def broad_excepts(path: Path) -> int:
    """``except:``, ``except Exception`` or ``except BaseException`` clauses (alone or in a tuple)."""
    count = 0
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ExceptHandler):
            continue
        kinds = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
        if node.type is None or any(isinstance(k, ast.Name) and k.id in ("Exception", "BaseException") for k in kinds):
            count += 1
    return count


def reads_environment(path: Path) -> bool:
    text = path.read_text(encoding="utf-8")
    return "os.environ" in text or "os.getenv" in text or "environ.get(" in text


def cli_internals(cli: Path, known: set[str]) -> dict[str, list[str]]:
    """The registry modules other than the package itself that ``cli`` imports, with the files."""
    out: dict[str, list[str]] = {}
    for path in sorted(cli.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module
                         for alias in node.names]
            for target in names:
                if target.startswith(PACKAGE + ".") and target in known:
                    out.setdefault(target, []).append(path.name)
    return {k: sorted(set(v)) for k, v in sorted(out.items())}


def figures(root: Path) -> dict[str, object]:
    """Every figure, counted in the checkout at ``root``."""
    found = modules(root / "registry")
    known = set(found)
    edges = [imp for name, path in found.items() for imp in imports_of(name, path, known)]
    graph: dict[str, set[str]] = {name: set() for name in found}
    for imp in edges:
        graph[imp.source].add(imp.target)
    rings = circles(graph)
    back = [imp for imp in edges if imp.deferred is not None and reaches(graph, imp.target, imp.source)]
    broad = {str(path.relative_to(root)): n for path in found.values() if (n := broad_excepts(path))}
    lines = {str(path.relative_to(root)): n for path in found.values()
             if (n := len(path.read_text(encoding="utf-8").splitlines())) > LINE_LIMIT}
    cli = cli_internals(root / "flyconfigs" / "cli", known)
    return {
        "registry_modules": len(found),
        "registry_lines": sum(len(p.read_text(encoding="utf-8").splitlines()) for p in found.values()),
        "import_circles": len(rings),
        "modules_in_circles": sum(len(r) for r in rings),
        "circles": rings,
        "imports_back_up": len(back),
        "back_up": [f"{i.source}:{i.line} -> {i.target} ({i.deferred})" for i in back],
        "broad_excepts": sum(broad.values()),
        "broad_except_modules": broad,
        "modules_over_300_lines": lines,
        "modules_reading_environment": sorted(str(p.relative_to(root)) for p in found.values() if reads_environment(p)),
        "cli_registry_internals": len(cli),
        "cli_imports": cli,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--json", action="store_true", help="print every figure and its detail as JSON")
    args = parser.parse_args(argv)
    result = figures(args.root)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"registry: {result['registry_modules']} modules, {result['registry_lines']} lines")
    print(f"import circles: {result['import_circles']} ({result['modules_in_circles']} modules)")
    print(f"imports that run back up: {result['imports_back_up']}")
    broad = result["broad_except_modules"]
    assert isinstance(broad, dict)
    print(f"broad except: {result['broad_excepts']} in {len(broad)} modules")
    over = result["modules_over_300_lines"]
    assert isinstance(over, dict)
    print(f"modules over {LINE_LIMIT} lines: {len(over)} {over if over else ''}")
    env = result["modules_reading_environment"]
    assert isinstance(env, list)
    print(f"modules reading the environment: {len(env)} {env}")
    print(f"registry internals imported by cli/: {result['cli_registry_internals']} {list(result['cli_imports'])}")  # type: ignore[call-overload]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
