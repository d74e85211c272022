"""The socket transport: a session's cells reach a warm parent on this computer over a Unix socket.

The warm parent (agent/session/parent.py) listens on two sockets in a folder only this user enters: ``cells``,
down which the client hands a claimed attempt and on which it then waits, woken by the cell's controller when it
has shipped output and when the attempt is over (the Store stays the record; the client reads everything from
it); and ``control``, where its state is asked and its stop is sent. Every request carries the session's token.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import UsageError
from ...machines.base import GONE
from .transport import Transport

if TYPE_CHECKING:
    from ..job import Job
    from .manager import Session, SessionRecord

#: How long a waiting client sleeps on the session's connection before it checks the Store anyway.
WAKE_CEILING_SECONDS = 1.0
#: How long the machine may take to listen on its socket, and then to warm up.
START_SECONDS = 30.0


def connect(path: str) -> socket.socket:
    """A connection to the warm parent's socket at ``path``; OSError when the machine is gone."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        raise
    return conn


class Wakeup:
    """What a session cell's ``Job.wait`` sleeps on: the controller's connection, woken by its news."""

    def __init__(self, conn: socket.socket):
        self.conn: socket.socket | None = conn

    def __call__(self, delay: float) -> None:
        if self.conn is None:
            time.sleep(delay)
            return
        ready, _, _ = select.select([self.conn], [], [], max(delay, WAKE_CEILING_SECONDS))
        if ready:
            try:
                data = self.conn.recv(4096)
            except OSError:
                data = b""
            if not data:  # the controller is done: what remains is in the Store
                self.close()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class SocketTransport(Transport):
    """Sessions whose machine runs on this computer (the local backend)."""

    def boot(self, record: SessionRecord, save: Callable[[SessionRecord], None]) -> None:
        """Start the record's machine and wait until it listens."""
        folder = tempfile.mkdtemp(prefix="nbb-")  # a folder only this user enters
        record.socket, record.control = os.path.join(folder, "cells"), os.path.join(folder, "control")
        save(record)
        machines = self.burst.machines(record.backend)
        machines.launch_session(record.launch_request())
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                connect(record.control).close()
                return
            except OSError:
                if time.monotonic() > deadline or machines.describe(record.machine).state == GONE:
                    console = machines.console(record.machine)[-2000:]
                    raise UsageError(f"session {record.name!r} did not start:\n{console}") from None
                time.sleep(0.005)

    def warm(self, session: Session) -> None:
        """Wait until the warm parent answers: it answers once it is warm."""
        with contextlib.suppress(OSError, ValueError):  # still warming up after that: cells wait for it
            self.ask(session, {}, START_SECONDS)

    def ask(self, session: Session, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """The warm parent's answer on its control socket; ``timeout``: how long it may take (one still warming
        up, or ending, answers nothing)."""
        with connect(session.record.control) as conn:
            conn.settimeout(timeout)
            conn.sendall(json.dumps({"token": session.record.token, **request}).encode() + b"\n")
            return json.loads(conn.makefile("rb").readline() or b"{}")

    def launch(self, session: Session, job: Job, attempt: int) -> None:
        """Send the attempt down the cells' socket (the connection :meth:`up` made, if any); ``job.wait`` then
        wakes on its news."""
        conn, session.pending = session.pending or connect(session.record.socket), None
        request = {
            "token": session.record.token,
            "job": job.url,
            "key": job.key().hex(),
            "attempt": attempt,
            "imports": job.cell_imports,
        }
        conn.sendall(json.dumps(request).encode() + b"\n")
        job.wake = Wakeup(conn)

    def up(self, session: Session) -> bool:
        """Up when its cells' socket takes a connection, which the next cell goes down (OSError when not)."""
        session.pending = connect(session.record.socket)
        return True

    def end(self, record: SessionRecord) -> None:
        """Delete the machine and its sockets' folder."""
        self.burst.machines(record.backend).delete(record.machine)
        shutil.rmtree(os.path.dirname(record.socket), ignore_errors=True)
