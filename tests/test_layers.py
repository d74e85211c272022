"""The folders are the layers (DESIGN.md "The layout"): no import runs upward, none crosses
sideways, the agent shares only the protocol and the Store, and runtime imports form no circle.

Imports are read from the source (module level and inside functions alike); imports made
only for type checking (``if TYPE_CHECKING:``) do not run and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nbburst"

#: Layer of each part, from the bottom. Parts of one layer may not import each other.
LAYERS: dict[str, int] = {
    "store": 0,
    "protocol": 1,
    "reporting": 2,
    "checkpoint": 2,
    "config": 2,
    "options": 2,
    "machines": 3,
    "client": 4,
    "ui": 5,
    "server": 5,
}
#: Parts that sit beside the layers, with what each may import.
SIDE: dict[str, set[str]] = {
    "agent": {"protocol", "store", "checkpoint", "reporting"},
    "testing": {"store", "protocol", "config", "options", "machines", "client"},
    "__init__": set(LAYERS),  # the facade users import: it may reach every layer (lazily)
    "__main__": {"ui"},
}
OPEN_TO_ALL = {"errors"}


def part_of(module: str) -> str:
    """``nbburst.client.burst`` -> ``client``; ``nbburst`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        if "labextension" in rel.parts or "vm" in rel.parts:  # programs for the VM: not imported
            continue
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The nbburst modules ``module`` imports at run time."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or _type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in known else origin for a in node.names]
        found.update(t for t in targets if t == "nbburst" or t.startswith("nbburst."))
    return found - {module}


def allowed(importer: str, imported: str) -> bool:
    if imported == "nbburst":  # the root package (``__version__``): Python runs it before any submodule anyway
        return True
    src, dst = part_of(importer), part_of(imported)
    if src == dst or dst in OPEN_TO_ALL:
        return True
    if src in SIDE:
        return dst in SIDE[src]
    if src in OPEN_TO_ALL:
        return False
    return dst in LAYERS and LAYERS[dst] < LAYERS[src]


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    found = modules()
    return {m: imports_of(m, p, set(found)) for m, p in found.items()}


def test_every_part_has_a_place():
    parts = {part_of(m) for m in modules()}
    assert parts <= set(LAYERS) | set(SIDE) | OPEN_TO_ALL, parts - set(LAYERS) - set(SIDE) - OPEN_TO_ALL


def test_no_import_runs_upward_or_sideways(graph):
    wrong = sorted(f"{m} imports {t}" for m, ts in graph.items() for t in ts if not allowed(m, t))
    assert not wrong, "\n".join(wrong)


def test_the_rule_catches_a_wrong_import():
    assert not allowed("nbburst.protocol.job", "nbburst.client.burst")  # upward
    assert not allowed("nbburst.ui.view", "nbburst.server.manager")  # sideways
    assert not allowed("nbburst.agent.attempt.controller", "nbburst.config")  # the agent shares only protocol and Store
    assert allowed("nbburst.client.burst", "nbburst.machines.base")


def test_no_import_circles(graph):
    # A module imports its package's __init__ (Python runs it first): a package importing its own
    # modules is not a circle on that account.
    def edges(m: str) -> set[str]:
        return {t for t in graph.get(m, ()) if not m.startswith(t + ".")}

    seen: dict[str, int] = {}  # 1 = on the current path, 2 = done
    cycles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        seen[m] = 1
        for t in sorted(edges(m)):
            if seen.get(t) == 1:
                cycles.append(path[path.index(t) :] + [t] if t in path else [m, t])
            elif t not in seen:
                visit(t, [*path, t])
        seen[m] = 2

    for m in sorted(graph):
        if m not in seen:
            visit(m, [m])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)
