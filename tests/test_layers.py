"""The house's floors hold: no module imports a layer above its own, and no modules import
each other in a circle.

The floors are docs/architecture.md's, read from the bottom up. Every import counts, at
module level or inside a function (a function-level import hides a dependency; it does not
remove it); only imports under `if TYPE_CHECKING:` are left out (they never run). The
package root `tpuscope` is the public API's face (`profile`, `load_run`): the top floor, which
no room of the house imports (the version lives in `tpuscope/version.py`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# floor of each top-level room of tpuscope (docs/architecture.md); rooms on one floor do
# not import each other
FLOORS: dict[str, int] = {
    "schema_consts": 0,
    "schema_rows": 0,
    "user_files": 0,
    "step_runs": 0,
    "version": 0,
    "schema": 1,
    "store": 2,
    "parse": 2,
    "analyze": 3,
    "detect": 4,
    "collect": 4,
    "ingest": 4,
    "report": 5,
    "launch": 5,
    "zoo": 5,
    "_boot": 6,
    "watch": 6,
    "bench": 6,
    "dashboards": 6,
    "cli": 7,
    "pytest_plugin": 7,
    "__main__": 8,
    "": 8,  # the package face `tpuscope`: the public API, loaded lazily
}
PACKAGES = {"tpuscope": ROOT / "tpuscope"}


def _module_name(package: str, folder: Path, path: Path) -> str:
    parts = list(path.relative_to(folder).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) of every import of tpuscope's own modules in one file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = _type_checking_lines(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names]  # a name or a submodule
        else:
            continue
        for name in names:
            if name.split(".")[0] in PACKAGES:
                yield name, node.lineno


def _modules() -> dict[str, Path]:
    return {
        _module_name(package, folder, path): path
        for package, folder in PACKAGES.items()
        for path in sorted(folder.rglob("*.py"))
    }


def _room(module: str) -> str:
    return module.partition(".")[2].split(".")[0]


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    modules = _modules()
    edges: dict[str, set[str]] = {name: set() for name in modules}
    upward = []
    for name, path in modules.items():
        for target, line in _imports(name, path):
            while target not in modules and "." in target:  # `from pkg import name`
                target = target.rpartition(".")[0]
            if target not in modules or name.startswith(f"{target}.") or target == name:
                continue  # a module's own packages are imported before it anyway
            edges[name].add(target)
            src, dst = _room(name), _room(target)
            if src != dst and FLOORS[dst] >= FLOORS[src]:
                upward.append(
                    f"{path.relative_to(ROOT)}:{line} ({src}, floor {FLOORS[src]}) "
                    f"imports {target} ({dst}, floor {FLOORS[dst]})"
                )
    return edges, upward


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_every_room_has_a_floor() -> None:
    rooms = {_room(name) for name in _modules()}
    assert rooms <= set(FLOORS), f"rooms without a floor in FLOORS: {sorted(rooms - set(FLOORS))}"


def test_no_module_imports_a_layer_above_its_own() -> None:
    _, upward = _graph()
    assert not upward, "imports that run up the floors:\n" + "\n".join(upward)


def test_no_modules_import_each_other_in_a_circle() -> None:
    edges, _ = _graph()
    circles = _circles(edges)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)
