"""Make ``tqdm`` progress bars in a burst cell feed the job's progress (``nbburst.progress``).

Nothing is imported up front: a one-shot import hook patches ``tqdm.std.tqdm``
when the cell (or a library it uses) imports tqdm, so a cell without tqdm
pays one string comparison per import. The patch wraps ``refresh`` (which tqdm
itself calls only every ``mininterval``, 0.1 s by default) and ``close`` of the
base class, so every flavour (``tqdm.auto``, ``tqdm.notebook``, ``trange``,
pandas' ``progress_apply``) reports, and the per-iteration fast path is
untouched. Only the outermost bar (position 0) reports; reports are further
throttled to :data:`MIN_INTERVAL` except the final one.
"""

from __future__ import annotations

import importlib.abc
import sys
import time
from typing import Any

MIN_INTERVAL = 0.25
_last = {"t": 0.0}


def _report(bar: Any, final: bool = False) -> None:
    try:
        if abs(getattr(bar, "pos", 0) or 0) != 0:
            return
        now = time.monotonic()
        if not final and now - _last["t"] < MIN_INTERVAL and bar.n != bar.total:
            return
        _last["t"] = now
        from .. import reporting

        reporting.progress(bar.n, bar.total, str(bar.desc or "").rstrip(": "))
    except Exception:  # progress must never break the cell
        pass


def patch(module: Any) -> None:
    """Wrap ``refresh`` and ``close`` of ``module.tqdm`` (``tqdm.std``); idempotent."""
    cls = getattr(module, "tqdm", None)
    if cls is None or getattr(cls, "_nbburst_patched", False):
        return
    refresh, close = cls.refresh, cls.close

    def refresh_and_report(self, *args: Any, **kwargs: Any) -> Any:
        shown = refresh(self, *args, **kwargs)
        if not getattr(self, "disable", True):
            _report(self)
        return shown

    def close_and_report(self, *args: Any, **kwargs: Any) -> Any:
        live = not getattr(self, "disable", True)
        if live:
            _report(self, final=True)
        return close(self, *args, **kwargs)

    cls.refresh, cls.close = refresh_and_report, close_and_report
    cls._nbburst_patched = True


class _Finder(importlib.abc.MetaPathFinder):
    """Patches ``tqdm.std`` right after it is first executed, then steps aside."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "tqdm.std":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                inner = spec.loader.exec_module

                def exec_module(module: Any, _inner: Any = inner) -> None:
                    _inner(module)
                    patch(module)

                spec.loader.exec_module = exec_module  # type: ignore[method-assign]
                return spec
            if spec is not None:
                return spec
        return None


def install() -> None:
    """Patch tqdm now if it is loaded, else when it is first imported."""
    if "tqdm.std" in sys.modules:
        patch(sys.modules["tqdm.std"])
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
