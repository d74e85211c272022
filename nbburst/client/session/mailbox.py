"""The mailbox transport: a session's cells reach a machine the notebook cannot reach on a socket through the Store.

A session VM on Compute Engine has no socket the notebook reaches (:mod:`.socket`), so the client writes each
request, sealed under the session's secret, to the session's folder in the Store, and the VM's relay
(agent/session/relay.py) carries it to the warm parent and writes the answers back
(:mod:`nbburst.protocol.sessionwire`). A cell's request carries its job key encrypted; the cell is then a job like
any other, whose ``wait`` reads the job's folder as a plain Compute Engine job's does. The cost is the relay's
poll interval (and a Store write and read) on each cell's start.

When the relay announces a push channel (:mod:`nbburst.protocol.sessionpush`) and the notebook reaches it, the same
sealed request goes down a mutually authenticated TLS connection instead, and the cell's news and end come back up
it (``job.wait`` wakes on them as on a local session's socket): no polling on the cell's way. When the channel
cannot be reached (a firewall, an address the notebook has no route to), the request is written to the Store as
before; a request carried both ways is carried once (the relay takes each name once).
"""

from __future__ import annotations

import contextlib
import json
import ssl
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import UsageError
from ...machines.base import GONE, RUNNING, STOPPED
from ...protocol import sessionpush, sessionwire
from ...protocol.job import JobLayout
from ...protocol.sealed import Refused
from ...store import AlreadyExists, NotFound
from .socket import Wakeup
from .transport import Transport

if TYPE_CHECKING:
    from ...store import Store
    from ..job import Job
    from .manager import Session, SessionRecord

#: How often the client reads the session's state while it waits for an answer.
POLL_SECONDS = 0.2
#: How often it also asks Compute Engine whether the VM is still there.
CHECK_SECONDS = 2.0
#: How long a session VM may take to boot and install its environment before it takes cells.
START_SECONDS = 900.0
#: How long the relay may take to answer a question (a poll interval, and the warm parent's answer).
ASK_SECONDS = 60.0
#: How long the client tries to reach the VM's push channel before it writes to the Store instead.
CONNECT_SECONDS = 2.0
#: How long after a failed attempt the client goes straight to the Store: a firewall that drops the connection
#: would otherwise cost every cell :data:`CONNECT_SECONDS`.
RETRY_SECONDS = 300.0

#: Until when (monotonic) the push channel of each session's boot is not tried again, after it could not be reached.
_unreachable: dict[tuple[str, int], float] = {}


class SessionUnreachable(UsageError, ConnectionError):
    """The session's VM did not answer (gone, or too slow); an OSError, as a local session's socket gives."""


def _secret(record: SessionRecord) -> bytes:
    return bytes.fromhex(record.token)


class MailboxTransport(Transport):
    """Sessions whose machine the notebook reaches only through the Store (the gce backend)."""

    def _store(self, record: SessionRecord) -> Store:
        return self.burst.store_for(record.backend)

    def state(self, record: SessionRecord) -> dict[str, Any] | None:
        """The session's state as its relay last wrote it; None when there is none (or it is not the relay's)."""
        try:
            raw = self._store(record).get(sessionwire.state_key(record.session_id))
            return sessionwire.open_state(_secret(record), record.session_id, raw)
        except (NotFound, Refused, ValueError):
            return None

    def boot(self, record: SessionRecord, save: Callable[[SessionRecord], None]) -> None:
        """Start the record's VM and wait until its relay says the warm parent takes cells."""
        record.tls = sessionpush.identity(f"{record.session_id}-{record.restarts}-client")
        record.push = {}
        client = sessionpush.seal_client(_secret(record), record.session_id, record.tls["cert"])
        self._store(record).put(sessionpush.client_key(record.session_id), client)
        save(record)
        self.burst.machines(record.backend).launch_session(record.launch_request())
        try:
            found = self._wait(record, lambda s: s.get("boot") == record.restarts, START_SECONDS, "start")
        except SessionUnreachable:
            self.end(record)  # a boot that failed leaves nothing behind: the next start begins afresh
            raise
        record.push = found.get("push") or {}
        save(record)

    def _dial(self, record: SessionRecord) -> ssl.SSLSocket | None:
        """A connection to the push channel of the session's current boot, or None when there is none to reach."""
        boot = (record.session_id, record.restarts)
        if not record.push or not record.tls or time.monotonic() < _unreachable.get(boot, 0.0):
            return None
        try:
            return sessionpush.connect(record.push, record.tls, CONNECT_SECONDS)
        except (OSError, ValueError):
            _unreachable[boot] = time.monotonic() + RETRY_SECONDS
            return None

    def _push(
        self, session: Session, place: str, raw: bytes, timeout: float, dial: bool
    ) -> tuple[ssl.SSLSocket, dict[str, Any]] | None:
        """Send a sealed request down the push channel (the connection :meth:`up` made, else a new one if
        ``dial``): the connection and the relay's answer, or None when it could not be delivered (the Store then
        carries it)."""
        conn, session.pending = session.pending or (self._dial(session.record) if dial else None), None
        if conn is None:
            return None
        try:
            conn.settimeout(timeout)
            conn.sendall(sessionpush.request_line(place, raw))
            answer = json.loads(sessionpush.read_line(conn) or b"null")
            if isinstance(answer, dict):
                return conn, answer
        except (OSError, ValueError):
            pass
        conn.close()
        return None

    def _wait(
        self, record: SessionRecord, done: Callable[[dict[str, Any]], bool], seconds: float, what: str
    ) -> dict[str, Any]:
        """The session's state once ``done(state)`` holds; UsageError when its VM ends or ``seconds`` pass first."""
        machines = self.burst.machines(record.backend)
        deadline = time.monotonic() + seconds
        checked = time.monotonic()
        while True:
            found = self.state(record)
            if found is not None and done(found):
                return found
            now = time.monotonic()
            if now - checked >= CHECK_SECONDS or now > deadline:
                checked = now
                if now > deadline or machines.describe(record.machine).state in (GONE, STOPPED):
                    console = machines.console(record.machine)[-2000:]
                    raise SessionUnreachable(f"session {record.name!r} did not {what}:\n{console}")
            time.sleep(POLL_SECONDS)

    def _seal(self, record: SessionRecord, kind: str, **fields: Any) -> tuple[str, bytes]:
        return sessionwire.seal_request(_secret(record), record.session_id, record.restarts, kind, **fields)

    def ask(self, session: Session, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """The warm parent's state (or ``stop``), through the relay, which may take :data:`ASK_SECONDS` (a poll
        interval, and the warm parent's answer) whatever ``timeout`` a local session would be given."""
        record = session.record
        if self.burst.machines(record.backend).describe(record.machine).state != RUNNING:
            raise SessionUnreachable(f"session {record.name!r}: its VM is not running")
        kind = sessionwire.STOP if request.get("stop") else sessionwire.STATE
        place, raw = self._seal(record, kind)
        pushed = self._push(session, place, raw, ASK_SECONDS, dial=True)
        if pushed is not None:
            pushed[0].close()
            if pushed[1].get("answers") == place:
                return pushed[1]
        with contextlib.suppress(AlreadyExists):  # one the relay already took off the channel is answered once
            self._store(record).create(place, raw)
        return self._wait(record, lambda s: s.get("answers") == place, ASK_SECONDS, "answer")

    def launch(self, session: Session, job: Job, attempt: int) -> None:
        """Hand the claimed ``attempt`` of ``job`` to the session's VM; ``job.wait`` reads the job's folder (woken
        by the push channel when the connection :meth:`up` made carried the cell; :meth:`up` just tried it)."""
        fields = {"job": job.url, "key": job.key(), "attempt": attempt, "imports": job.cell_imports}
        place, raw = self._seal(session.record, sessionwire.CELL, **fields)
        pushed = self._push(session, place, raw, CONNECT_SECONDS + sessionpush.HANDSHAKE_SECONDS, dial=False)
        if pushed is not None and pushed[1].get("carried"):
            pushed[0].settimeout(None)
            job.wake = Wakeup(pushed[0])  # the controller's news, carried by the relay
            return
        if pushed is not None:
            pushed[0].close()
        self._store(session.record).create(place, raw)

    def up(self, session: Session) -> bool:
        """Whether the session's VM of its current boot runs and its relay has said it takes cells: its push
        channel answering proves both (its certificate is this boot's), and the connection takes the next cell."""
        record = session.record
        session.pending = self._dial(record)
        if session.pending is not None:
            return True
        if self.burst.machines(record.backend).describe(record.machine).state != RUNNING:
            return False
        found = self.state(record)
        return found is not None and found.get("boot") == record.restarts

    def end(self, record: SessionRecord) -> None:
        """Delete the session's VM, its secret and its folders in the Store (a revived session makes them
        again)."""
        machines = self.burst.machines(record.backend)
        machines.delete(record.machine)
        machines.release_key(record.session_id)
        store = self._store(record)
        store.delete_prefix(sessionwire.folder(record.session_id))
        store.delete_prefix(JobLayout(record.session_id).prefix)
