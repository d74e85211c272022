"""The folders are the layers (docs/architecture.md, "The layer rule"): no import runs upward, none
crosses sideways, the agent shares only the protocol and the Store, and runtime imports form no circle.

Imports are read from the source (module level and inside functions alike); imports made
only for type checking (``if TYPE_CHECKING:``) do not run and are left out. Two kinds of
import do not say at once what they import, and are followed to it:

* a ``"nbburst.x:Name"`` string, which a registry's loader imports on first use (the Stores,
  the backends): it counts as an import of ``nbburst.x`` by the module that names it;
* ``from nbburst import name`` of a name the root package imports on first use (its tables
  of lazy names): it counts as an import of the module the name comes from.
"""

from __future__ import annotations

import ast
import re
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
#: A registry's entry: ``"nbburst.store.local:LocalStore"`` (what the loader imports, and the name in it).
LOADED = re.compile(r"^(nbburst(?:\.\w+)+):(\w+)$")


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


def lazy_names(root: Path) -> dict[str, str]:
    """The names the root package imports on first use, with the module each comes from.

    Read from its tables of lazy names: module-level dicts whose values are all relative module
    names (``{"submit": ".client.burst"}``)."""
    found: dict[str, str] = {}
    for node in ast.parse(root.read_text()).body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if not isinstance(value, ast.Dict) or not value.keys:
            continue
        pairs = [
            (k.value, v.value)
            for k, v in zip(value.keys, value.values, strict=True)
            if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)
        ]
        if len(pairs) == len(value.keys) and all(isinstance(v, str) and v.startswith(".") for _, v in pairs):
            found.update({name: "nbburst" + origin for name, origin in pairs})
    return found


def loaded_by_name(tree: ast.AST, known: set[str]) -> set[str]:
    """The modules named by ``"nbburst.x:Name"`` strings (registries' entries) in ``tree``."""
    found = set()
    for node in ast.walk(tree):
        match = LOADED.match(node.value) if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
        if match:
            origin, name = match.groups()
            assert origin in known, f"{node.value!r} names no module of nbburst"
            found.add(f"{origin}.{name}" if f"{origin}.{name}" in known else origin)
    return found


def imports_of(module: str, path: Path, known: set[str], lazy: dict[str, str]) -> set[str]:
    """The nbburst modules ``module`` imports at run time (``lazy``: the root package's lazy names)."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    is_package = path.name == "__init__.py"
    found = loaded_by_name(tree, known)
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
            targets = [target(origin, a.name, known, lazy) for a in node.names]
        found.update(t for t in targets if t == "nbburst" or t.startswith("nbburst."))
    return found - {module}


def target(origin: str, name: str, known: set[str], lazy: dict[str, str]) -> str:
    """The module ``from origin import name`` imports: a submodule, where a lazy name of the root comes
    from, or ``origin`` itself."""
    if f"{origin}.{name}" in known:
        return f"{origin}.{name}"
    if origin == "nbburst" and name in lazy:
        return lazy[name]
    return origin


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
    lazy = lazy_names(PACKAGE / "__init__.py")
    return {m: imports_of(m, p, set(found), lazy) for m, p in found.items()}


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


def test_registry_strings_and_lazy_names_are_followed(tmp_path):
    known = set(modules())
    root = tmp_path / "__init__.py"
    root.write_text('__version__ = "1"\n_FUNCTIONS = {"submit": ".client.burst"}\nOTHER = {"a": "b"}\n')
    lazy = lazy_names(root)
    assert lazy == {"submit": "nbburst.client.burst"}
    source = tmp_path / "m.py"
    source.write_text(
        'from nbburst import __version__, submit\nSTORES = {"flaky": "nbburst.testing.faults:FlakyStore"}\n'
    )
    found = imports_of("nbburst.store.m", source, known, lazy)
    assert found == {"nbburst", "nbburst.client.burst", "nbburst.testing.faults"}
    assert [t for t in sorted(found) if not allowed("nbburst.store.m", t)] == [
        "nbburst.client.burst",
        "nbburst.testing.faults",
    ]
    # The package's own tables name modules that exist.
    real = lazy_names(PACKAGE / "__init__.py")
    assert real and set(real.values()) <= known, real


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
