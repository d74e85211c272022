"""Warm sessions on a machine the notebook cannot reach on a socket (Compute Engine): cells go through the Store.

A local session's client hands cells to the warm parent over a Unix socket
(client/session.py). A session VM has no such socket, so the client writes each
request, sealed under the session's secret, to the session's folder in the
Store, and the VM's relay (agent/session/relay.py) carries it to the warm parent
and writes the answers back (:mod:`nbburst.protocol.sessionwire`). A cell's
request carries its job key encrypted; the cell is then a job like any other,
whose ``wait`` reads the job's folder as a plain Compute Engine job's does. The
cost is the relay's poll interval (and a Store write and read) on each cell's start.

The session's VM is named after the session and its boot (``restarts``), so a
revived session never waits for the VM it replaces to be gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..machines.base import GONE, RUNNING, STOPPED, machine_name
from ..protocol import sessionwire
from ..protocol.job import JobLayout
from ..protocol.sealed import Refused
from ..store import NotFound

if TYPE_CHECKING:
    from ..store import Store
    from .burst import Burst, Job
    from .session import Session, SessionRecord

#: How often the client reads the session's state while it waits for an answer.
POLL_SECONDS = 0.2
#: How often it also asks Compute Engine whether the VM is still there.
CHECK_SECONDS = 2.0
#: How long a session VM may take to boot and install its environment before it takes cells.
START_SECONDS = 900.0
#: How long the relay may take to answer a question (a poll interval, and the warm parent's answer).
ASK_SECONDS = 60.0
#: The longest name a VM may have.
MAX_NAME = 63


def relayed(burst: Burst, backend: str) -> bool:
    """Whether ``backend``'s sessions are reached through the Store."""
    return bool(getattr(burst.machines(backend), "relays_sessions", False))


def machine_for(record: SessionRecord) -> str:
    """The name of the session's machine for its current boot (at most 63 characters, as Compute Engine wants)."""
    suffix = f"-{record.restarts}"
    return machine_name(record.session_id)[: MAX_NAME - len(suffix)].rstrip("-") + suffix


def _store(burst: Burst, record: SessionRecord) -> Store:
    return burst.store_for(record.backend)


def _secret(record: SessionRecord) -> bytes:
    return bytes.fromhex(record.token)


def state(burst: Burst, record: SessionRecord) -> dict[str, Any] | None:
    """The session's state as its relay last wrote it; None when there is none (or it is not the relay's)."""
    try:
        raw = _store(burst, record).get(sessionwire.state_key(record.session_id))
        return sessionwire.open_state(_secret(record), record.session_id, raw)
    except (NotFound, Refused, ValueError):
        return None


def boot(burst: Burst, record: SessionRecord) -> None:
    """Start the record's VM and wait until its relay says the warm parent takes cells."""
    machines = burst.machines(record.backend)
    settings = {"idle": record.idle_s, "until": record.until, "preload": record.preload, "boot": record.restarts}
    machines.launch_session(record.session_id, record.machine, record.plan, _secret(record), settings)
    try:
        _wait(burst, record, lambda s: s.get("boot") == record.restarts, START_SECONDS, "start")
    except SessionUnreachable:
        end(burst, record)  # a boot that failed leaves nothing behind: the next start begins afresh
        raise


def _wait(
    burst: Burst, record: SessionRecord, done: Callable[[dict[str, Any]], bool], seconds: float, what: str
) -> dict[str, Any]:
    """The session's state once ``done(state)`` holds; UsageError when its VM ends or ``seconds`` pass first."""
    machines = burst.machines(record.backend)
    deadline = time.monotonic() + seconds
    checked = time.monotonic()
    while True:
        found = state(burst, record)
        if found is not None and done(found):
            return found
        now = time.monotonic()
        if now - checked >= CHECK_SECONDS or now > deadline:
            checked = now
            if now > deadline or machines.describe(record.machine).state in (GONE, STOPPED):
                console = machines.console(record.machine)[-2000:]
                raise SessionUnreachable(f"session {record.name!r} did not {what}:\n{console}")
        time.sleep(POLL_SECONDS)


class SessionUnreachable(UsageError, ConnectionError):
    """The session's VM did not answer (gone, or too slow); an OSError, as a local session's socket gives."""


def _request(burst: Burst, record: SessionRecord, kind: str, **fields: Any) -> str:
    place, raw = sessionwire.seal_request(_secret(record), record.session_id, record.restarts, kind, **fields)
    _store(burst, record).create(place, raw)
    return place


def ask(session: Session, request: dict[str, Any]) -> dict[str, Any]:
    """The warm parent's state (or ``stop``), through the relay."""
    burst, record = session.sessions.burst, session.record
    if burst.machines(record.backend).describe(record.machine).state != RUNNING:
        raise SessionUnreachable(f"session {record.name!r}: its VM is not running")
    kind = sessionwire.STOP if request.get("stop") else sessionwire.STATE
    place = _request(burst, record, kind)
    return _wait(burst, record, lambda s: s.get("answers") == place, ASK_SECONDS, "answer")


def launch(session: Session, job: Job, attempt: int) -> None:
    """Hand the claimed ``attempt`` of ``job`` to the session's VM; ``job.wait`` reads the job's folder."""
    burst, record = session.sessions.burst, session.record
    fields = {"job": job.url, "key": job.key(), "attempt": attempt, "imports": job.cell_imports}
    _request(burst, record, sessionwire.CELL, **fields)


def up(session: Session) -> bool:
    """Whether the session's VM of its current boot runs and its relay has said it takes cells."""
    burst, record = session.sessions.burst, session.record
    if burst.machines(record.backend).describe(record.machine).state != RUNNING:
        return False
    found = state(burst, record)
    return found is not None and found.get("boot") == record.restarts


def end(burst: Burst, record: SessionRecord) -> None:
    """Delete the session's VM, its secret and its folders in the Store (a revived session makes them again)."""
    machines = burst.machines(record.backend)
    machines.delete(record.machine)
    machines.release_key(record.session_id)
    store = _store(burst, record)
    store.delete_prefix(sessionwire.folder(record.session_id))
    store.delete_prefix(JobLayout(record.session_id).prefix)
