"""Make ``tqdm`` progress bars in a burst cell feed the job's progress (``nbburst.progress``).

Nothing is imported up front: a one-shot import hook (agent/hooks/importhook.py)
patches ``tqdm.std.tqdm`` when the cell (or a library it uses) imports tqdm.
The patch wraps ``refresh`` (which tqdm
itself calls only every ``mininterval``, 0.1 s by default) and ``close`` of the
base class, so every flavour (``tqdm.auto``, ``tqdm.notebook``, ``trange``,
pandas' ``progress_apply``) reports, and the per-iteration fast path is
untouched. Only the outermost bar (position 0) reports; reports are further
throttled to :data:`MIN_INTERVAL` except the final one; once that bar closes,
the job's progress is cleared (``reporting.loop_ended``), so the notebook's bar
never stays at 100% of a finished loop while the cell goes on.
"""

from __future__ import annotations

import time
from typing import Any

from .importhook import after_import

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
        from ... import reporting

        reporting.progress(bar.n, bar.total, str(bar.desc or "").rstrip(": "))
    except Exception:  # progress must never break the cell
        pass


def _ended(bar: Any) -> None:
    try:
        if abs(getattr(bar, "pos", 0) or 0) == 0:
            from ... import reporting

            reporting.loop_ended()
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
        closed = close(self, *args, **kwargs)
        if live:
            _ended(self)
        return closed

    cls.refresh, cls.close = refresh_and_report, close_and_report
    cls._nbburst_patched = True


def install() -> None:
    """Patch tqdm now if it is loaded, else when it is first imported."""
    after_import("tqdm.std", patch)
