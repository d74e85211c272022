"""One renderer of a job's log records for every front end: the magic, the job view and the CLI.

A record (see :mod:`nbburst.protocol.job`) is shown three ways. Its plain text
is decided in the protocol (:func:`record_text`), because ``Job.logs`` and the
Jupyter server need it below this layer. On top of it, this module decides
which stream of a terminal a record goes to, how a kernel cell shows it (as
the kernel would have shown it locally, rich outputs included), and how a
backlog is replayed compactly (``%burst attach`` of a job that printed a lot).
"""

from __future__ import annotations

import sys
from typing import Any

from ..protocol.job import SHELL_RECORDS, record_text

__all__ = ["compact", "print_record", "record_text", "rewrite_line", "show_record"]

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


#: Runs of stdout and stderr between two other records above which a backlog puts each stream in one block.
MAX_RUNS = 8
_STREAMS = ("stdout", "stderr")


def rewrite_line(line: str) -> str:
    """A line as a terminal leaves it: the text after its last carriage return that is followed by any."""
    segments = line.split("\r")
    current = segments[0]
    for segment in segments[1:]:
        if segment:
            current = segment
    return current


def _settled(text: str) -> str:
    """Text with each line as a terminal leaves it (a progress bar's hundred rewrites: its last one)."""
    return "\n".join(rewrite_line(line) for line in text.split("\n"))


def compact(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A backlog of records (what a job printed before someone attached) in as few blocks as it reads well.

    Between two records that are not text (displays, events, ``Out``), adjacent text of one stream is one
    record, each line as a terminal leaves it; where stdout and stderr alternate more than :data:`MAX_RUNS`
    times, each stream's text becomes one record (stdout, then stderr: the exact order is in ``%burst logs``),
    instead of hundreds of alternating blocks."""
    out: list[dict[str, Any]] = []
    segment: list[dict[str, Any]] = []

    def close() -> None:
        runs: list[dict[str, Any]] = []
        for record in segment:
            if runs and runs[-1]["s"] == record["s"]:
                runs[-1]["x"] += record.get("x", "")
            else:
                runs.append({**record, "x": record.get("x", "")})
        if len(runs) > MAX_RUNS:
            runs = [
                {**runs[0], "s": name, "x": "".join(r["x"] for r in runs if r["s"] == name)}
                for name in _STREAMS
                if any(r["s"] == name for r in runs)
            ]
        out.extend({**run, "x": _settled(run["x"])} for run in runs)
        segment.clear()

    for record in records:
        if record.get("s") in _STREAMS:
            segment.append(record)
        else:
            close()
            out.append(record)
    close()
    return out
