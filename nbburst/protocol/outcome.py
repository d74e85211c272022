"""A job's end: committing its terminal state, and reading the verdict objects (result, error) it names.

Shared by the agent, which normally ends a job, and the client side (cancel,
supervisor), which ends it when no agent can: both must write the same record.

A verdict object is sealed at the attempt that committed it (its version), so
a reader can tell a result of the attempt that held the job from one that a
superseded attempt wrote after the next was claimed (:func:`verdict_object`).
Create-only writes meet objects planted by a bucket writer without the job's
key: the real writer's replaces them (:func:`commit_terminal`, ``agent/attempt/verdict.py``).
"""

from __future__ import annotations

from typing import Any

from ..store import AlreadyExists, NotFound, Store
from . import fence, payload, pricing, sealed
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
    stands, unless theirs came from an attempt superseded before it wrote it (:func:`.fence.stands`); one
    planted without the job's key is replaced (and reported)."""
    ending = next((s for s in statuses if s.attempt == attempt), None)
    terminal = Terminal(state, reason, attempt, by=by, progress=ending.progress if ending else None)
    try:
        terminal.cost = pricing.job_cost(spec, statuses, terminal.at)
    except Exception:  # a cost estimate must never stop a job from ending
        terminal.cost = None
    try:
        folder.create_record(folder.layout.terminal, terminal.to_json())
        return state
    except AlreadyExists:
        pass
    try:
        earlier = Terminal.from_json(folder.get_record(folder.layout.terminal))
    except NotFound:
        earlier = None  # deleted meanwhile
    except sealed.Refused as exc:  # planted without the job's key: the real verdict replaces it
        folder.report(f"{exc}; replacing it with the real verdict")
        earlier = None
    if earlier is None or (
        earlier.attempt < attempt and not fence.stands(folder, earlier.attempt, folder.layout.terminal)
    ):
        folder.put_record(folder.layout.terminal, terminal.to_json())  # a superseded attempt's verdict gives way
        return state
    return earlier.state


class Overtaken(sealed.Refused):
    """A genuine verdict object of an attempt that a later attempt had superseded before it was written."""


def verdict_object(folder: JobFolder, key: str) -> tuple[int, memoryview]:
    """The verdict object at ``key`` (``result.pkl`` or ``error.pkl``) and the attempt that committed it, once
    it counts: sealed to its place under the job's key (else :class:`~.sealed.Refused`) by an attempt that still
    held the job when it wrote it (else :class:`Overtaken`); :class:`~..store.NotFound` if there is none."""
    attempt, data = folder.get_view(key)
    if not fence.stands(folder, attempt, key):
        raise Overtaken(
            f"{folder.place(key)} of job {folder.job_id} was written by attempt {attempt} after attempt "
            f"{attempt + 1} had taken over (a superseded attempt's verdict); refusing it"
        )
    return attempt, data


def holds_verdict(folder: JobFolder, key: str) -> bool:
    """Whether a verdict object that counts is at ``key``; one that does not is reported (once) and is none."""
    return folder.genuine(key, lambda k: verdict_object(folder, k))


def timeout_reason(spec: JobSpec) -> str:
    return f"timed out: the job exceeded its time limit of {format_duration(spec.timeout_s)} (--timeout)"


def read_error(store: Store, layout: JobLayout, key: bytes) -> dict[str, Any]:
    """The remote exception's record (type, message, traceback, source, exc), verified."""
    data = verdict_object(JobFolder(store, layout, key), layout.error)[1]
    return payload.decode(bytearray(data))


def error_summary(store: Store, layout: JobLayout, key: bytes) -> str:
    """``ZeroDivisionError: division by zero``: the reason recorded in the terminal state."""
    try:
        info = read_error(store, layout, key)
        return f"{info['type'].rpartition('.')[2]}: {info['message']}"
    except Exception as exc:
        return f"the cell raised an exception ({exc})"
