"""Modules on the machine as the kernel has them, and work to do once a module is imported.

A notebook reaches submodules that earlier cells loaded as a side effect
(``import statsmodels.api as sm`` then ``sm.graphics.gofplots`` after some call
imported it): the kernel sends the names of the submodules it has loaded under
the packages a cell uses, and the machine imports them before the cell.

Process state that belongs to a module (numpy's global RNG, scikit-learn's
config) can only be set once that module is imported, and importing it just to
set it would cost a cell seconds: :func:`when_imported` runs a callback right
after the module's own code has run, or at once if it already has.
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Callable, Iterable
from typing import Any

Callback = Callable[[types.ModuleType], None]


def imported_by(code: str, top_level: bool = False) -> list[str]:
    """The modules ``code`` imports (``import a.b``, ``from a.b import c``; not relative ones; ``%matplotlib``
    imports pyplot, as in a kernel), in order, once each; ``top_level``: only those its top-level statements
    import (not in a function, a branch or a ``try``: the imports it runs for certain)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    names: list[str] = []
    for node in tree.body if top_level else ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
        elif isinstance(node, ast.Expr) and _magic(node.value) in PLOTTING_MAGICS:
            names.append("matplotlib.pyplot")
    return list(dict.fromkeys(names))


#: Line magics that import pyplot (and with it, matplotlib's settings become process state to bring back).
PLOTTING_MAGICS = frozenset({"matplotlib", "pylab"})


def _magic(node: ast.expr) -> str:
    """The line magic a transformed cell's statement runs (``get_ipython().run_line_magic('name', ...)``)."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "run_line_magic"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ):
        return str(node.args[0].value)
    return ""


def loaded_submodules(packages: Iterable[str]) -> list[str]:
    """Names of the real submodules of ``packages`` (top-level names) in ``sys.modules``, in import order.

    Asked before every cell, over thousands of modules once a notebook imports a few libraries: the answer is
    kept until ``sys.modules`` changes (its size or its last entry: modules are added at its end)."""
    tops = frozenset(packages)
    names = list(sys.modules)  # one step under the GIL, while another thread may be importing
    mark = (tops, len(names), names[-1] if names else None)
    if _last_scan[0] != mark:
        _last_scan[:] = [mark, _scan(tops)]
    return list(_last_scan[1])


_last_scan: list[Any] = [None, []]


def _scan(tops: frozenset[str]) -> list[str]:
    found = []
    for name, module in list(sys.modules.items()):
        if "." not in name or name.partition(".")[0] not in tops or not isinstance(module, types.ModuleType):
            continue
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.name == name:  # not an alias some package planted in sys.modules
            found.append(name)
    return found


def import_all(names: Iterable[str]) -> list[str]:
    """Import each module not imported yet, quietly; returns the names that failed (not installed here...)."""
    failed = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the kernel showed these when it imported them, in an earlier cell
        for name in names:
            if name in sys.modules:
                continue
            try:
                importlib.import_module(name)
            except Exception:
                failed.append(name)
    return failed


def when_imported(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once module ``name`` is imported: now if it is, else right after its import."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    _watcher().callbacks.setdefault(name, []).append(callback)


class _Loader:
    """Stands in for a module's loader during its import, then runs the callbacks waiting for it."""

    def __init__(self, loader: Any, waiting: dict[str, list[Callback]]):
        self.loader, self.waiting = loader, waiting

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__spec__.loader = module.__loader__ = self.loader  # nobody sees the stand-in afterwards
        self.loader.exec_module(module)
        for callback in self.waiting.pop(module.__name__, []):
            try:
                callback(module)
            except Exception as exc:  # a module must import even if restoring its state fails
                warnings.warn(f"nbburst: after importing {module.__name__}: {exc}", RuntimeWarning, stacklevel=2)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.loader, attr)


class _Watcher(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: finds watched modules with the other finders and wraps their loader."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callback]] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.callbacks:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, self.callbacks)  # find_spec alone imports nothing
                return spec
        return None


def _watcher() -> _Watcher:
    for finder in sys.meta_path:
        if isinstance(finder, _Watcher):
            return finder
    watcher = _Watcher()
    sys.meta_path.insert(0, watcher)
    return watcher
