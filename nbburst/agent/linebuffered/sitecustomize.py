"""Run at the start of every interpreter the cell starts (see this package's docstring): stdout and stderr,
when they are pipes, write each line in one ``write``; then the ``sitecustomize`` this one hides runs.

Only the standard library, and nothing else is imported: it runs in every worker.
"""

from __future__ import annotations

import importlib
import io
import os
import stat
import sys


def _line_buffered() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stat.S_ISFIFO(os.fstat(stream.fileno()).st_mode):
                # write_through off too: under PYTHONUNBUFFERED it would write the text and its newline apart
                stream.reconfigure(line_buffering=True, write_through=False)
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            pass  # no stream, a closed one, or one a program put there that cannot be reconfigured


def _chain() -> None:
    """Import the ``sitecustomize`` further down the path (a user's, a distribution's) as Python would have."""
    here = os.path.dirname(os.path.abspath(__file__))
    mine = sys.modules.pop(__name__)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]  # PYTHONPATH keeps it for children
    try:
        importlib.import_module("sitecustomize")
    except ModuleNotFoundError as exc:
        if exc.name != "sitecustomize":
            raise
        sys.modules[__name__] = mine


if __name__ == "sitecustomize":
    _line_buffered()
    _chain()
