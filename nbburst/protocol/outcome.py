"""A job's end: committing its terminal state, and reading its signed error.

Shared by the agent, which normally ends a job, and the client side (cancel,
supervisor), which ends it when no agent can: both must write the same record.
"""

from __future__ import annotations

from typing import Any

from ..store import AlreadyExists, Store
from . import fence, payload, pricing
from .durations import format_duration
from .folder import JobFolder
from .job import JobLayout, JobSpec, State, Status, Terminal


def commit_terminal(
    folder: JobFolder,
    spec: JobSpec,
    state: State,
    reason: str,
    attempt: int,
    by: str,
    statuses: list[Status],
) -> State:
    """Write the job's end once (create-only, sealed), with its cost; if someone else ended it first, theirs
    stands (a forged verdict in its place is refused: :class:`~.sealed.Refused`), unless theirs came from an
    attempt superseded before it wrote it (:func:`.fence.stands`)."""
    terminal = Terminal(state, reason, attempt, by=by)
    try:
        terminal.cost = pricing.job_cost(spec, statuses, terminal.at)
    except Exception:  # a cost estimate must never stop a job from ending
        terminal.cost = None
    try:
        folder.create_record(folder.layout.terminal, terminal.to_json())
        return state
    except AlreadyExists:
        earlier = Terminal.from_json(folder.get_record(folder.layout.terminal))
    if earlier.attempt < attempt and not fence.stands(
        folder.store, folder.layout, earlier.attempt, folder.layout.terminal
    ):
        folder.put_record(folder.layout.terminal, terminal.to_json())  # a superseded attempt's verdict gives way
        return state
    return earlier.state


def timeout_reason(spec: JobSpec) -> str:
    return f"timed out: the job exceeded its time limit of {format_duration(spec.timeout_s)} (--timeout)"


def read_error(store: Store, layout: JobLayout, key: bytes) -> dict[str, Any]:
    """The remote exception's record (type, message, traceback, source, exc), verified."""
    data = JobFolder(store, layout, key).get_object(layout.error)
    return payload.decode(bytearray(data))


def error_summary(store: Store, layout: JobLayout, key: bytes) -> str:
    """``ZeroDivisionError: division by zero``: the reason recorded in the terminal state."""
    try:
        info = read_error(store, layout, key)
        return f"{info['type'].rpartition('.')[2]}: {info['message']}"
    except Exception as exc:
        return f"the cell raised an exception ({exc})"
