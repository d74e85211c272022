"""Import, in the kernel, the modules a cell imports, while the machine runs the cell.

A cell's ``import statsmodels.api as sm`` binds ``sm``: the variable comes back as a reference to the
module, and the kernel imports it when it loads the cell's values, after the cell ended. A module that
takes seconds to import would cost them twice in a row, once on the machine, once here. Imported here
while the machine runs the cell, it costs them once: the kernel had to import it anyway (as it would have
had the cell run locally), only sooner.

Only the imports the cell runs for certain are taken: its top-level ``import`` statements, not those in a
function, a branch or a ``try`` (a cell may guard an import the kernel cannot make). A failure here is
left alone: loading the values meets the same one and reports it, as it does without this.

What these imports print (a module beside the notebook announcing itself, a package's warning) is not
shown: the cell's own import on the machine printed it in the cell already, as the kernel's would have
once. Only this thread's writes are dropped; the cell's output goes on meanwhile.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
from collections.abc import Iterator
from typing import Any, TextIO

from ..protocol.imports import imported_by


def start(code: str) -> threading.Thread | None:
    """Import the modules ``code`` imports that the kernel has not, in a daemon thread; None when there are
    none. :meth:`~nbburst.client.job.Job.outcome` joins it before it loads the values (two threads never
    import at once in the same package there)."""
    missing = [name for name in imported_by(code, top_level=True) if name not in sys.modules]
    if not missing:
        return None
    thread = threading.Thread(target=_import_all, args=(missing,), name="nbburst-import-ahead", daemon=True)
    thread.start()
    return thread


def _import_all(names: list[str]) -> None:
    with _quiet("stdout"), _quiet("stderr"):
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:  # loading the values meets it and reports it, as it would without this
                pass


class _QuietIn:
    """A stream that drops what one thread writes and passes on what the others do."""

    def __init__(self, stream: TextIO, thread: threading.Thread):
        self.stream, self.thread = stream, thread

    def write(self, text: str) -> int:
        return len(text) if threading.current_thread() is self.thread else self.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    """This thread's writes to ``sys.<name>`` dropped while it lasts (put back unless replaced meanwhile)."""
    quiet = _QuietIn(getattr(sys, name), threading.current_thread())
    setattr(sys, name, quiet)
    try:
        yield
    finally:
        if getattr(sys, name) is quiet:
            setattr(sys, name, quiet.stream)
