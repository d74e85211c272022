"""A session cell's controller: an ordinary attempt (:class:`.main.Agent`) that also wakes the waiting client.

Forked from a session's warm parent (agent/session.py), which imports this module
only once it listens: what it pulls in (the agent, IPython) is the slow part of
a session's start, and cells wait for it in the socket's backlog meanwhile.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from ..protocol import signing
from ..protocol.job import ENV_JOB_KEY, JobLayout, State, split_job_url
from ..store import NotFound, open_store
from . import preemption
from .main import Agent, Identity, load_spec
from .shipper import Shipper


class _WakingShipper(Shipper):
    """Ships like any attempt, and tells the waiting client each time a chunk is out."""

    wake: Any = None

    def flush(self) -> None:
        before = self.seq
        super().flush()
        if self.seq != before and self.wake is not None:
            self.wake(b"L")


class SessionAgent(Agent):
    """One cell's controller in a session: an ordinary attempt whose output also wakes the client."""

    shipper_class = _WakingShipper

    def write_status(self, **changes: Any) -> None:
        """As any attempt's, except that a warm machine has nothing to provision: that step is not written
        (its fields go with the next status)."""
        if changes.get("state") == State.PROVISIONING:
            for name, value in changes.items():
                setattr(self.status, name, value)
            return
        super().write_status(**changes)

    def sweep(self, attempts: Any) -> None:
        """Nothing to find by the job's marker: every process here carries the session's (the machine's).
        What a cell left behind is ended by the warm parent, its subreaper, once no cell runs."""


def _notify(conn: socket.socket, what: bytes) -> None:
    try:
        conn.send(what, socket.MSG_DONTWAIT)
    except OSError:
        pass  # the client is gone or not reading: the Store has everything


def control(conn: socket.socket, request: dict[str, Any]) -> int:
    """In the forked controller: run the attempt as ``python -m nbburst.agent`` would, then say so."""
    os.environ[ENV_JOB_KEY] = request["key"]
    root, job_id = split_job_url(request["job"])
    ident = Identity()
    store = open_store(root)
    layout = JobLayout(job_id)
    try:
        spec = load_spec(store, layout, ident.key)
    except (NotFound, signing.SignatureError) as exc:
        print(f"nbburst session: cannot run job {job_id}: {exc}", file=sys.stderr)
        _notify(conn, b"D")
        return 3
    if not store.exists(layout.terminal):
        agent = SessionAgent(store, layout, spec, ident)
        agent.shipper.wake = lambda what: _notify(conn, what)
        preemption.install(agent)
        agent.run()
    _notify(conn, b"D")
    return 0
