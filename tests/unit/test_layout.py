"""The package's layout shows its architecture: no import circles, layers that look down.

Run alone to see the figures: `.venv/bin/python -m tests.unit.test_layout` prints the
package root's modules, the longest modules and every import circle (none, the test says).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "wakeline"
# The entry points and the few modules every layer shares (STYLE 14).
ROOT_MODULES = {"__init__", "__main__", "app", "cli", "clock", "config", "errors", "secrets"}


def modules() -> dict[str, Path]:
    """Every module of the package by its dotted name."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(found: dict[str, Path]) -> dict[str, set[str]]:
    """What each module imports of the package, wherever the import is (a function's own
    import counts: it is still a dependency), except under `if TYPE_CHECKING:`."""
    graph: dict[str, set[str]] = {}
    for name, path in found.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        wanted: set[str] = set()

        def visit(node: ast.AST) -> None:
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                    and node.test.id == "TYPE_CHECKING":
                return
            if isinstance(node, ast.Import):
                wanted.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    wanted.add(full if full in found else base)
            for child in ast.iter_child_nodes(node):
                visit(child)

        visit(ast.parse(path.read_text(encoding="utf-8")))
        graph[name] = {w for w in wanted if w in found and w != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: every strongly connected group of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_back() -> None:
    assert circles(imports(modules())) == []


def test_the_package_root_holds_only_the_entry_points_and_what_every_layer_shares() -> None:
    root = {p.stem for p in PACKAGE.glob("*.py")}
    assert root == ROOT_MODULES, f"move {sorted(root - ROOT_MODULES)} into the folder of its part"


def test_agents_never_name_a_provider_and_the_store_knows_no_layer_above_it() -> None:
    graph = imports(modules())
    for name, wanted in graph.items():
        if name.startswith("wakeline.agents"):
            assert not any(w.startswith("wakeline.providers") for w in wanted), (name, wanted)
        if name.startswith("wakeline.models"):
            above = ("wakeline.actors", "wakeline.http", "wakeline.admission",
                     "wakeline.providers", "wakeline.turns", "wakeline.commands")
            assert not any(w.startswith(above) for w in wanted), (name, wanted)


def test_only_the_cli_imports_the_cli_package() -> None:
    # The service's layers are used by the CLI, never the other way round.
    for name, wanted in imports(modules()).items():
        if not name.startswith("wakeline.commands") and name != "wakeline.cli":
            assert not any(w.startswith("wakeline.commands") for w in wanted), (name, wanted)


def test_only_http_imports_falcon() -> None:
    for name, path in modules().items():
        if not name.startswith("wakeline.http"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
            assert not any(n == "falcon" or n.startswith("falcon.") for n in names), name


if __name__ == "__main__":
    found = modules()
    sizes = sorted(((len(p.read_text().splitlines()), n) for n, p in found.items()), reverse=True)
    print("package root:", ", ".join(sorted(p.stem for p in PACKAGE.glob("*.py"))))
    print("longest modules:", ", ".join(f"{n} ({lines})" for lines, n in sizes[:8]))
    print("import circles:", circles(imports(found)) or "none")
