"""One renderer of a job's log records for every front end: the magic, the job view and the CLI.

A record (see :mod:`nbburst.protocol.job`) is shown three ways. Its plain text
is decided in the protocol (:func:`record_text`), because ``Job.logs`` and the
Jupyter server need it below this layer. On top of it, this module decides
which stream of a terminal a record goes to, and how a kernel cell shows it:
as the kernel would have shown it locally, rich outputs included.
"""

from __future__ import annotations

import sys
from typing import Any

from ..protocol.job import SHELL_RECORDS, record_text

__all__ = ["print_record", "record_text", "show_record"]

#: Record kinds written to stderr: the cell's own stderr, and nbburst's events (attempt markers, stops).
_STDERR_KINDS = ("stderr", "event")


def print_record(record: dict[str, Any]) -> None:
    """Write a record's plain text on its stream, as a terminal shows it."""
    text = record_text(record)
    if text:
        stream = sys.stderr if record.get("s") in _STDERR_KINDS else sys.stdout
        stream.write(text)
        stream.flush()


def show_record(record: dict[str, Any]) -> None:
    """Show a record in the current cell as the kernel shows it locally: what the machine's IPython
    published (displays, Out, the pager, widgets) as this kernel publishes it, everything else as text."""
    if record.get("s") in SHELL_RECORDS:
        from .replay import show

        show(record)
    else:
        print_record(record)
