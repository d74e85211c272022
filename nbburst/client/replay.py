"""A name whose new value cannot come back to the kernel must not keep its earlier value there (docs/fidelity.md,
cause 15): a plain run would have rebound it, so a later cell would silently run other code than it does plainly.

A top-level ``def`` or ``class`` statement of the cell is run again in the kernel, after the cell's other values
came back, so that the kernel holds the notebook's own object, its decorators, defaults and bases being what the
cell made. Any other such name is unbound in the kernel: a later cell that uses it fails with a NameError
naming it instead of using a stale value."""

from __future__ import annotations

import ast
from typing import Any

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def definitions(tree: ast.Module) -> dict[str, list[ast.stmt]]:
    """The cell's top-level ``def``/``class`` statements, by name, that are the only statement binding their
    name anywhere in the cell, each with the later top-level ``def``/``class`` statements that hand its object
    to their decorators only (``@f.register(T)``, as formulaic's ``singledispatch`` transforms do): running
    them again gives what the cell left bound. A later ``f = wrap(f)``, a loop or an ``if`` around it would
    not, nor would any other statement handed the object (``g(f)``, ``f.attr = 1``), which may change it; one
    that only calls it is left out."""
    bound: dict[str, int] = {}
    for node in ast.walk(tree):
        for name in _binds(node):
            bound[name] = bound.get(name, 0) + 1
    found = {}
    for at, node in enumerate(tree.body):
        if not (isinstance(node, _DEFINITIONS) and bound.get(node.name) == 1):
            continue
        later = [stmt for stmt in tree.body[at + 1 :] if node.name in _handed(list(ast.walk(stmt)))]
        if all(_decorates_with(stmt, node.name) for stmt in later):
            found[node.name] = [node, *later]
    return found


def _decorates_with(stmt: ast.stmt, name: str) -> bool:
    """Whether ``stmt`` is a ``def``/``class`` that hands ``name`` on in its decorators only."""
    if not isinstance(stmt, _DEFINITIONS):
        return False
    decorating = {id(node) for decorator in stmt.decorator_list for node in ast.walk(decorator)}
    return name not in _handed([node for node in ast.walk(stmt) if id(node) not in decorating])


def _handed(nodes: list[ast.AST]) -> set[str]:
    """The names ``nodes`` read other than to call them (``f.attr``, ``g(f)``, ``x = f``)."""
    called = {id(node.func) for node in nodes if isinstance(node, ast.Call)}
    return {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in called}


def _binds(node: ast.AST) -> list[str]:
    """The names ``node`` binds or unbinds in its scope (or, for ``global``, in the module's)."""
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        return [node.id]
    if isinstance(node, _DEFINITIONS):
        return [node.name]
    if isinstance(node, ast.alias):
        return [node.asname or node.name.split(".")[0]]
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return list(node.names)
    if isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
        return [node.name]
    if isinstance(node, ast.MatchMapping) and node.rest:
        return [node.rest]
    return []


def settle(namespace: dict[str, Any], unsent: dict[str, str], replayable: dict[str, list[ast.stmt]]) -> dict[str, str]:
    """Replay or unbind each name of ``unsent`` (name -> why it did not come back) in ``namespace``; returns what
    to tell the user instead of the why, by name (nothing for a name replayed)."""
    said: dict[str, str] = {}
    for name, why in unsent.items():
        statements = replayable.get(name)
        if statements:
            try:
                exec(compile(ast.Module(body=statements, type_ignores=[]), "<cell>", "exec"), namespace)
                continue
            except Exception as exc:
                why = f"{why}; running its statement again in the kernel raised {type(exc).__name__}: {exc}"
        said[name] = f"{why}. It stays on the machine"
        if namespace.pop(name, _MISSING) is not _MISSING:
            said[name] += f"; the kernel's earlier value of {name!r} was unbound so that no later cell uses a stale one"
    return said


_MISSING = object()
