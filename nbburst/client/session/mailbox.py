"""The mailbox transport: a session's cells reach a machine the notebook cannot reach on a socket through the Store.

A session VM on Compute Engine has no socket the notebook reaches (:mod:`.socket`), so the client writes each
request, sealed under the session's secret, to the session's folder in the Store, and the VM's relay
(agent/session/relay.py) carries it to the warm parent and writes the answers back
(:mod:`nbburst.protocol.sessionwire`). A cell's request carries its job key encrypted; the cell is then a job like
any other, whose ``wait`` reads the job's folder as a plain Compute Engine job's does. The cost is the relay's
poll interval (and a Store write and read) on each cell's start.

When the relay announces a push channel (:mod:`nbburst.protocol.sessionpush`) and the notebook reaches it, the same
sealed request goes down a mutually authenticated TLS connection instead, with the job's objects, and the objects
the cell's controller writes come back up it (:mod:`nbburst.protocol.overlay`): neither side waits on the Store for
the cell, whose record the VM writes behind it. When the channel cannot be reached (a firewall, an address the
notebook has no route to), the job and the request are written to the Store as before. A session quiet for a while
has a relay that lists the Store only now and then: a request written there after :data:`QUIET_SECONDS` without one
also changes the VM's wake attribute (:meth:`~nbburst.machines.base.Machines.wake_session`), on which the relay
waits, so it is taken at once.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import UsageError
from ...machines.base import GONE, RUNNING, STOPPED
from ...protocol import overlay, sessionpush, sessionwire
from ...protocol.job import JobLayout, Status
from ...protocol.sealed import Refused
from ...store import AlreadyExists, NotFound
from .socket import WAKE_CEILING_SECONDS
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

#: How long a pushed cell's channel may say nothing (a running cell's controller writes its heartbeat more often)
#: before the notebook takes it for cut off (a VM gone without closing it) and reads the job from the Store.
SILENT_SECONDS = 60.0
#: How long after its last request through the Store the client wakes the relay for the next one: well within the
#: relay's ``STORE_BUSY_SECONDS`` (agent/session/relay.py), after which it lists the Store only now and then.
QUIET_SECONDS = 60.0
#: When (monotonic) each session's client last wrote a request to the Store, or its VM took cells, by session id.
_stored: dict[str, float] = {}
#: Until when (monotonic) the push channel of each session's boot is not tried again, after it could not be reached.
_unreachable: dict[tuple[str, int], float] = {}
#: Blobs each session's cells found in the Store or had written there: a later cell does not ask again.
_known: dict[str, set[str]] = {}
#: Each session's last pushed cell, whose objects are let go once the next cell is launched.
_last: dict[str, overlay.Overlay] = {}
#: A connection to the push channel of each session's boot, dialed while a cell ran, taken by the next one: on a
#: real network that cell then waits on one round trip to the VM instead of three (TCP, TLS, the request).
_ahead: dict[tuple[str, int], ssl.SSLSocket] = {}
_ahead_lock = threading.Lock()


class PushedNews:
    """What a pushed cell's ``Job.wait`` sleeps on: the relay's answer, then the objects the cell's controller
    writes, read off the channel into the job's :class:`~nbburst.protocol.overlay.Overlay` as they come. A cell
    the relay does not carry goes through the Store (``fallback``). When the channel ends before the VM said the
    job's record is in the Store (the VM preempted), or says nothing for :data:`SILENT_SECONDS` (cut off), the
    notebook writes what it holds there itself, and the job is read, and recovered, from the Store as any job is."""

    def __init__(self, conn: ssl.SSLSocket, held: overlay.Overlay, fallback: Callable[[], None]):
        self.conn, self.held, self.fallback = conn, held, fallback
        self.news = threading.Event()
        self.over = threading.Event()  # the channel has ended (the record stored, or written from here)
        threading.Thread(target=self._read, name="nbburst-cell-news", daemon=True).start()

    def _read(self) -> None:
        stored = carried = False
        try:
            lines = self.conn.makefile("rb")
            carried = isinstance(answer := json.loads(lines.readline() or b"null"), dict) and answer.get("carried")
            self.conn.settimeout(SILENT_SECONDS)
            for line in lines if carried else ():
                kind, ops = sessionpush.read_news(line)
                for op in ops:
                    self.held.receive(op)
                if kind == sessionpush.STORED:
                    self.held.stored()
                    stored = True
                self.news.set()
        except (OSError, ValueError):
            pass
        finally:
            self.conn.close()
            try:
                if not stored:
                    self.held.release()
                if not carried:
                    self.fallback()
            finally:
                self.over.set()
                self.news.set()

    def __call__(self, delay: float) -> None:
        if self.over.is_set():
            time.sleep(delay)
        elif self.news.wait(max(delay, WAKE_CEILING_SECONDS)):
            self.news.clear()


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
        _stored[record.session_id] = time.monotonic()  # a relay that has just started lists the Store often

    def _dial(self, record: SessionRecord) -> ssl.SSLSocket | None:
        """A connection to the push channel of the session's current boot (the one dialed ahead while it is open),
        or None when there is none to reach."""
        boot = (record.session_id, record.restarts)
        with _ahead_lock:
            ahead = _ahead.pop(boot, None)
        if ahead is not None:
            if sessionpush.idle_and_open(ahead):
                return ahead
            ahead.close()
        if not record.push or not record.tls or time.monotonic() < _unreachable.get(boot, 0.0):
            return None
        try:
            return sessionpush.connect(record.push, record.tls, CONNECT_SECONDS)
        except (OSError, ValueError):
            _unreachable[boot] = time.monotonic() + RETRY_SECONDS
            return None

    def _dial_ahead(self, record: SessionRecord) -> None:
        """Dial the connection the session's next cell (or question) takes, in the background."""
        boot = (record.session_id, record.restarts)

        def dial() -> None:
            try:
                conn = sessionpush.connect(record.push, record.tls, CONNECT_SECONDS)
            except (OSError, ValueError):
                return  # the next cell dials itself, and learns then whether the VM can be reached
            with _ahead_lock:
                replaced, _ahead[boot] = _ahead.get(boot), conn
            if replaced is not None:
                replaced.close()

        threading.Thread(target=dial, name="nbburst-dial-ahead", daemon=True).start()

    def _push(
        self, session: Session, place: str, raw: bytes, timeout: float
    ) -> tuple[ssl.SSLSocket, dict[str, Any]] | None:
        """Send a sealed request down the push channel (the connection :meth:`up` made, else a new one): the
        connection and the relay's answer, or None when it could not be delivered (the Store then carries it)."""
        conn, session.pending = session.pending or self._dial(session.record), None
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
        pushed = self._push(session, place, raw, ASK_SECONDS)
        if pushed is not None:
            pushed[0].close()
            if pushed[1].get("answers") == place:
                return pushed[1]
        with contextlib.suppress(AlreadyExists):  # one the relay already took off the channel is answered once
            self._post(record, place, raw)
        return self._wait(record, lambda s: s.get("answers") == place, ASK_SECONDS, "answer")

    def cell_store(self, session: Session, store: Store, layout: JobLayout) -> Store:
        """While the push channel is up (:meth:`up` connected), the cell's job is held here and travels with the
        cell (:mod:`nbburst.protocol.overlay`): the VM writes it to the Store behind the cell."""
        if session.pending is None:
            return store
        known = _known.setdefault(session.record.session_id, set())
        return overlay.Overlay(store, layout.prefix, overlay.HOLD, shared=[layout.cancel], known=known)

    def launch(self, session: Session, job: Job, attempt: int) -> None:
        """Hand the claimed ``attempt`` of ``job`` to the session's VM. Pushed (down the connection :meth:`up`
        made), the cell takes its job's objects with it and ``job.wait`` reads those the VM sends back
        (:class:`PushedNews`); through the Store, the job is written there first and ``job.wait`` reads the job's
        folder."""
        held = job.store if isinstance(job.store, overlay.Overlay) else None
        conn, session.pending = session.pending, None
        if held is not None and conn is not None:
            key = job.layout.status(attempt)  # the launch time goes with the claim: never written after the VM's
            claim = Status.from_json(job.folder.get_record(key))
            claim.launched = claim.heartbeat = time.time()
            job.folder.put_record(key, claim.to_json())
            place, raw = self._seal(session.record, sessionwire.CELL, **self._cell(job, attempt))
            try:
                conn.settimeout(CONNECT_SECONDS + sessionpush.HANDSHAKE_SECONDS)
                conn.sendall(sessionpush.request_line(place, raw, held.held))
            except OSError:
                conn.close()
            else:
                job.wake = PushedNews(conn, held, lambda: self._through_store(session, job, attempt))
                self._dial_ahead(session.record)
                with contextlib.suppress(KeyError):  # the cell before it has been read: the Store keeps its objects
                    _last.pop(session.record.session_id).forget()
                _last[session.record.session_id] = held
                return
        elif conn is not None:
            conn.close()
        if held is not None:
            held.release()  # the job in the Store before the request that names it
        self._through_store(session, job, attempt)

    @staticmethod
    def _cell(job: Job, attempt: int) -> dict[str, Any]:
        return {"job": job.url, "key": job.key(), "attempt": attempt, "imports": job.cell_imports}

    def _through_store(self, session: Session, job: Job, attempt: int) -> None:
        """Hand the attempt over through the Store, in a request of its own (the relay takes each place once)."""
        place, raw = self._seal(session.record, sessionwire.CELL, **self._cell(job, attempt))
        self._post(session.record, place, raw)

    def _post(self, record: SessionRecord, place: str, raw: bytes) -> None:
        """Write a sealed request to the Store; after :data:`QUIET_SECONDS` without one, wake the relay too (it
        then lists the Store only now and then). Waking is a shortcut: when it fails, the slow listing takes the
        request."""
        self._store(record).create(place, raw)
        now = time.monotonic()
        last, _stored[record.session_id] = _stored.get(record.session_id), now
        if last is not None and now - last < QUIET_SECONDS:
            return
        try:
            self.burst.machines(record.backend).wake_session(record.machine, place.rsplit("/", 1)[-1])
        except Exception as exc:  # the Compute API refused or failed: the relay's next listing finds the request
            print(f"nbburst: could not wake session {record.name!r}: {exc}", file=sys.stderr)

    def up(self, session: Session) -> bool:
        """Whether the session's VM of its current boot runs and its relay has said it takes cells: its push
        channel answering proves both (its certificate is this boot's), as does a connection dialed ahead that is
        still open (kept alive by probes); the connection takes the next cell."""
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
        with _ahead_lock:
            dialed = [_ahead.pop(boot) for boot in list(_ahead) if boot[0] == record.session_id]
        for conn in dialed:
            conn.close()
        machines = self.burst.machines(record.backend)
        machines.delete(record.machine)
        machines.release_key(record.session_id)
        store = self._store(record)
        store.delete_prefix(sessionwire.folder(record.session_id))
        store.delete_prefix(JobLayout(record.session_id).prefix)
