"""Make joblib's ``Parallel`` (and so scikit-learn's searches and cross-validation) feed the job's progress.

A search fans its fits out through ``joblib.Parallel``, which counts finished
tasks in ``print_progress`` (called as each batch completes, whatever the
backend, even when ``verbose=0``). Patching it reports ``done/total`` with no
user code: ``GridSearchCV(...).fit`` shows "fits 45/100" in the notebook's bar,
and the view derives the ETA from the pace.

The total is ``len(iterable)`` when joblib knows it; for a generator (what
scikit-learn passes) it is read from the caller where scikit-learn has it
(``n_candidates * n_splits`` in ``BaseSearchCV.evaluate_candidates``, the
splitter's ``get_n_splits`` in ``cross_validate``), else
from the generator's underlying iterator (``range``, a list of splits), else
it is known once every task was dispatched. Only the outermost ``Parallel`` of
the cell reports, and when it returns the job's progress is cleared, so the
bar never stays at 100% while the cell goes on (a refit, the next search).
The patch is applied when the cell first imports joblib (agent/hooks/importhook.py).
"""

from __future__ import annotations

import operator
import sys
import threading
import time
from typing import Any

from .importhook import after_import

MIN_INTERVAL = 0.25
#: Callers in scikit-learn whose tasks are fits (each fits one estimator on one split).
_FIT_CALLERS = {"evaluate_candidates", "cross_validate", "_fit_and_score", "learning_curve", "validation_curve"}

_state = threading.local()
_last = {"t": 0.0}
_outer: dict[str, Any] = {"parallel": None, "total": None, "desc": "tasks"}


def _caller(frame: Any) -> Any:
    """The frame that called ``Parallel``, past the ``__call__`` of subclasses (scikit-learn's own Parallel)."""
    for _ in range(4):
        if frame is None or frame.f_code.co_name != "__call__":
            return frame
        frame = frame.f_back
    return frame


def _caller_total(frame: Any, iterable: Any) -> int | None:
    """How many tasks ``iterable`` holds, where it can be known without consuming it."""
    in_sklearn = frame is not None and str(frame.f_globals.get("__name__", "")).startswith("sklearn.")
    local = frame.f_locals if in_sklearn else {}  # scikit-learn's own names, never a user's that happen to match
    candidates, splits = local.get("n_candidates"), local.get("n_splits")
    if isinstance(candidates, int) and isinstance(splits, int):
        return candidates * splits
    cv = local.get("cv")
    if hasattr(cv, "get_n_splits") and "X" in local:  # cross_validate: one fit per split of a splitter
        try:
            return int(cv.get_n_splits(local["X"], local.get("y"), local.get("groups")))
        except Exception:
            pass
    for _ in range(4):  # a generator over a generator (scikit-learn wraps each task) ... over a sized iterator
        if hasattr(iterable, "__len__"):
            return len(iterable)
        source = getattr(getattr(iterable, "gi_frame", None), "f_locals", {}).get(".0")
        if source is None:
            return operator.length_hint(iterable, 0) or None
        iterable = source
    return None


def _report(parallel: Any, final: bool = False) -> None:
    try:
        if _outer["parallel"] is not parallel:
            return
        now = time.monotonic()
        if not final and now - _last["t"] < MIN_INTERVAL:
            return
        _last["t"] = now
        done = parallel.n_completed_tasks
        total = _outer["total"]
        if total is None and getattr(parallel, "_original_iterator", True) is None:  # every task was dispatched
            total = parallel.n_dispatched_tasks
        from ... import reporting

        reporting.progress(done, max(total, done) if total else None, _outer["desc"])
    except Exception:  # progress must never break the cell
        pass


def patch(module: Any) -> None:
    """Wrap ``Parallel.__call__`` and ``Parallel.print_progress`` of ``joblib.parallel``; idempotent."""
    cls = getattr(module, "Parallel", None)
    if cls is None or getattr(cls, "_nbburst_patched", False):
        return
    call, print_progress = cls.__call__, cls.print_progress

    def call_and_report(self: Any, iterable: Any) -> Any:
        depth = getattr(_state, "depth", 0)
        outermost = depth == 0 and _outer["parallel"] is None
        if outermost:
            try:
                frame = _caller(sys._getframe(1))
                _outer.update(
                    parallel=self,
                    total=_caller_total(frame, iterable),
                    desc="fits" if frame.f_code.co_name in _FIT_CALLERS else "tasks",
                )
            except Exception:
                _outer.update(parallel=self, total=None, desc="tasks")
        _state.depth = depth + 1
        try:
            return call(self, iterable)
        finally:
            _state.depth = depth
            if outermost:
                _report(self, final=True)
                _outer.update(parallel=None, total=None)
                from ... import reporting

                reporting.loop_ended()

    def print_and_report(self: Any) -> Any:
        shown = print_progress(self)
        _report(self)
        return shown

    cls.__call__, cls.print_progress = call_and_report, print_and_report
    cls._nbburst_patched = True


def install() -> None:
    """Patch joblib now if it is loaded, else when it is first imported."""
    after_import("joblib.parallel", patch)
