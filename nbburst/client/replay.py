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


def definitions(tree: ast.Module) -> dict[str, ast.stmt]:
    """The cell's top-level ``def``/``class`` statements, by name, that are the only statement binding their
    name anywhere in the cell and whose object the rest of the cell only calls: running one again gives what
    the cell left bound. A later ``f = wrap(f)``, a loop or an ``if`` around it would not, nor would a later
    ``@f.register(T)`` (as formulaic's ``singledispatch`` transforms do) or anything else handed the object,
    which may change it."""
    bound: dict[str, int] = {}
    for node in ast.walk(tree):
        for name in _binds(node):
            bound[name] = bound.get(name, 0) + 1
    found = {}
    for at, node in enumerate(tree.body):
        if (
            isinstance(node, _DEFINITIONS)
            and bound.get(node.name) == 1
            and node.name not in _handed(tree.body[at + 1 :])
        ):
            found[node.name] = node
    return found


def _handed(body: list[ast.stmt]) -> set[str]:
    """The names ``body`` reads other than to call them (``f.attr``, ``g(f)``, ``x = f``)."""
    nodes = [node for stmt in body for node in ast.walk(stmt)]
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


def settle(namespace: dict[str, Any], unsent: dict[str, str], replayable: dict[str, ast.stmt]) -> dict[str, str]:
    """Replay or unbind each name of ``unsent`` (name -> why it did not come back) in ``namespace``; returns what
    to tell the user instead of the why, by name (nothing for a name replayed)."""
    said: dict[str, str] = {}
    for name, why in unsent.items():
        node = replayable.get(name)
        if node is not None:
            try:
                exec(compile(ast.Module(body=[node], type_ignores=[]), "<cell>", "exec"), namespace)
                continue
            except Exception as exc:
                why = f"{why}; running its statement again in the kernel raised {type(exc).__name__}: {exc}"
        said[name] = f"{why}. It stays on the machine"
        if namespace.pop(name, _MISSING) is not _MISSING:
            said[name] += f"; the kernel's earlier value of {name!r} was unbound so that no later cell uses a stale one"
    return said


_MISSING = object()
