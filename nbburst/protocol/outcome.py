"""A job's end: committing its terminal state, and reading its signed error.

Shared by the agent, which normally ends a job, and the client side (cancel,
supervisor), which ends it when no agent can: both must write the same record.
"""

from __future__ import annotations

from typing import Any

from ..store import AlreadyExists, Store
from . import payload, pricing, signing
from .durations import format_duration
from .job import JobLayout, JobSpec, State, Status, Terminal


def commit_terminal(
    store: Store,
    layout: JobLayout,
    spec: JobSpec,
    state: State,
    reason: str,
    attempt: int,
    by: str,
    statuses: list[Status],
) -> State:
    """Write the job's end once (create-only), with its cost; if someone else ended it first, theirs stands."""
    terminal = Terminal(state, reason, attempt, by=by)
    try:
        terminal.cost = pricing.job_cost(spec, statuses, terminal.at)
    except Exception:  # a cost estimate must never stop a job from ending
        terminal.cost = None
    try:
        store.create(layout.terminal, terminal.to_json())
        return state
    except AlreadyExists:
        return Terminal.from_json(store.get(layout.terminal)).state


def timeout_reason(spec: JobSpec) -> str:
    return f"timed out: the job exceeded its time limit of {format_duration(spec.timeout_s)} (--timeout)"


def read_error(store: Store, layout: JobLayout, key: bytes) -> dict[str, Any]:
    """The remote exception's record (type, message, traceback, source, exc), verified."""
    data = signing.verify(key, store.get(layout.error), f"error of job {layout.job_id}")
    return payload.decode(bytearray(data))


def error_summary(store: Store, layout: JobLayout, key: bytes) -> str:
    """``ZeroDivisionError: division by zero``: the reason recorded in the terminal state."""
    try:
        info = read_error(store, layout, key)
        return f"{info['type'].rpartition('.')[2]}: {info['message']}"
    except Exception as exc:
        return f"the cell raised an exception ({exc})"
