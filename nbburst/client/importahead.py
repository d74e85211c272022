"""Import, in the kernel, the modules a cell imports, while the machine runs the cell.

A cell's ``import statsmodels.api as sm`` binds ``sm``: the variable comes back as a reference to the
module, and the kernel imports it when it loads the cell's values, after the cell ended. A module that
takes seconds to import would cost them twice in a row, once on the machine, once here. Imported here
while the machine runs the cell, it costs them once: the kernel had to import it anyway (as it would have
had the cell run locally), only sooner.

Only the imports the cell runs for certain are taken: its top-level ``import`` statements, not those in a
function, a branch or a ``try`` (a cell may guard an import the kernel cannot make). A failure here is
left alone: loading the values meets the same one and reports it, as it does without this.
"""

from __future__ import annotations

import importlib
import sys
import threading

from ..protocol.imports import imported_by


def start(code: str) -> threading.Thread | None:
    """Import the modules ``code`` imports that the kernel has not, in a daemon thread; None when there are
    none. :meth:`~nbburst.client.burst.Job.outcome` joins it before it loads the values (two threads never
    import at once in the same package there)."""
    missing = [name for name in imported_by(code, top_level=True) if name not in sys.modules]
    if not missing:
        return None
    thread = threading.Thread(target=_import_all, args=(missing,), name="nbburst-import-ahead", daemon=True)
    thread.start()
    return thread


def _import_all(names: list[str]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # loading the values meets it and reports it, as it would without this
            pass
