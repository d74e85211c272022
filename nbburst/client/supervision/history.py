"""A job's attempts as a table: what ``Job.attempts()``, the server's job detail and a supervisor giving up show.

Read from the attempts' status records and the verdict alone, so any reader of the job can draw it; an attempt
that a later one followed without saying how it ended was preempted.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ...protocol.job import State

if TYPE_CHECKING:
    from ..job import Job


def attempts(job: Job) -> list[dict[str, Any]]:
    """The job's attempts, oldest first: attempt, state, start, end, seconds, machine, message.

    An attempt that a later one followed without saying how it ended was preempted.
    """
    statuses = job.statuses()
    terminal = job.terminal()
    derived = job.derive_state()[0] if statuses else State.SUBMITTED
    rows = []
    for i, s in enumerate(statuses):
        last = i == len(statuses) - 1
        state = s.state
        end: float | None = s.heartbeat
        if last and terminal is not None:
            state, end = terminal.state, terminal.at
        elif last:
            state = derived
            if not derived.terminal and derived != State.PREEMPTED:
                end = None
        elif not state.terminal and state != State.PREEMPTED:
            state = State.PREEMPTED
        message = terminal.reason if last and terminal is not None else s.message
        rows.append(
            {
                "attempt": s.attempt,
                "state": state.value,
                "start": s.started,
                "end": end,
                "seconds": round(end - s.started, 1) if end else None,
                "machine": s.machine,
                "message": message,
            }
        )
    return rows


def history_text(job: Job) -> str:
    """:func:`attempts` in one line, for a verdict's reason: why a job that was given up on ended so."""
    parts = []
    for row in attempts(job):
        start = time.strftime("%H:%M:%S", time.localtime(row["start"]))
        end = time.strftime("%H:%M:%S", time.localtime(row["end"])) if row["end"] else "…"
        note = f" ({row['message']})" if row["message"] else ""
        parts.append(f"#{row['attempt']} {row['state']} {start}-{end}{note}")
    return "; ".join(parts)


def timeline(job: Job) -> Any:
    """:func:`attempts` as a pandas DataFrame with readable times (a list of dicts without pandas)."""
    rows = attempts(job)
    try:
        import pandas as pd
    except ImportError:
        return rows
    frame = pd.DataFrame(rows, columns=["attempt", "state", "start", "end", "seconds", "machine", "message"])
    for col in ("start", "end"):
        frame[col] = pd.to_datetime(frame[col], unit="s", utc=True).dt.tz_convert(None).dt.strftime("%H:%M:%S")
    return frame.set_index("attempt")
