"""Run a function on a module right after it is first imported, without importing it up front.

The progress hooks (tqdm, joblib) patch libraries only if the cell uses them:
a one-shot meta-path finder wraps the module's loader, so a cell that never
imports them pays one string comparison per import.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from typing import Any


class _Finder(importlib.abc.MetaPathFinder):
    """Calls ``patch(module)`` right after ``name`` is first executed, then steps aside."""

    def __init__(self, name: str, patch: Callable[[Any], None]):
        self.name, self.patch = name, patch

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.name:
            return None
        for finder in sys.meta_path:
            if isinstance(finder, _Finder) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                inner = spec.loader.exec_module

                def exec_module(module: Any, _inner: Any = inner) -> None:
                    _inner(module)
                    self.patch(module)

                spec.loader.exec_module = exec_module  # type: ignore[method-assign]
                return spec
            if spec is not None:
                return spec
        return None


def after_import(name: str, patch: Callable[[Any], None]) -> None:
    """``patch(module)`` now if ``name`` is loaded, else right after it is first imported; once per name."""
    if name in sys.modules:
        patch(sys.modules[name])
    elif not any(isinstance(f, _Finder) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(name, patch))
