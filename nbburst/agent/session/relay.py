"""``python -m nbburst.agent.session.relay SESSION_URL``: a session's machine on Compute Engine, and its mailbox.

On the local backend the client hands a cell to the session's warm parent
(agent/session/parent.py) over a Unix socket. A Compute Engine VM has no socket the
notebook can reach, so its startup script runs this relay instead of the agent:
it starts the warm parent exactly as the local backend does, with its sockets in
a folder of its own on the VM, and carries the client's requests to it through
the Store (:mod:`nbburst.protocol.sessionwire`): every ``POLL_SECONDS`` it lists
the session's requests, opens each under the session's secret (refusing what
is not the session's, misplaced, or for an earlier boot of the machine), and

* a cell: connects to the cells' socket and sends the request line a local
  client sends (token, job URL, job key, attempt); the cell's controller then
  writes everything to the job's folder, which the client reads as for any job;
* state, stop: asks the control socket and writes its answer, sealed, as the
  session's ``state.json`` (also written once the parent takes cells: that is
  how the client knows the session is up).

The session's secret comes as the job key of a job VM does (Secret Manager, read
by the bootstrap into ``$NBBURST_HOME/job-key``); its limits (idle, until,
preload, boot) from the instance's ``nbburst-session`` attribute. The relay ends
with the parent, which deletes the VM when the session is over.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

from ...protocol import sessionwire
from ...protocol.job import ENV_ATTEMPT, attempt_tag, split_job_url
from ...protocol.metadata import metadata
from ...store import NotFound, Store, open_store
from ..machine import gce
from .parent import ENV_TOKEN

#: How often the relay lists the session's requests: what a cell's start waits at most, besides the Store
#: (``$NBBURST_SESSION_POLL`` on the VM sets it).
POLL_SECONDS = float(os.environ.get("NBBURST_SESSION_POLL", "0.3"))
#: How long the warm parent may take to answer on its control socket (it answers once warm).
ASK_SECONDS = 60.0
#: The instance attribute with the session's limits.
METADATA_KEY = "nbburst-session"


def _log(message: str) -> None:
    print(f"nbburst session relay: {message} t={time.time():.3f}", file=sys.stderr, flush=True)


class Relay:
    """The warm parent's sockets on one side, the session's folder in the Store on the other."""

    def __init__(self, store: Store, session_id: str, secret: bytes, boot: int, folder: str):
        self.store, self.session_id, self.secret, self.boot = store, session_id, secret, boot
        self.cells, self.control = os.path.join(folder, "cells"), os.path.join(folder, "control")
        self.token = secret.hex()
        self.seen: set[str] = set()

    def _send(self, path: str, request: dict[str, Any], timeout: float) -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(timeout)
            conn.connect(path)
            conn.sendall(json.dumps({"token": self.token, **request}).encode() + b"\n")
        except OSError:
            conn.close()
            raise
        return conn

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """The warm parent's answer on its control socket."""
        with self._send(self.control, request, ASK_SECONDS) as conn:
            return json.loads(conn.makefile("rb").readline() or b"{}")

    def publish(self, answers: str = "", request: dict[str, Any] | None = None) -> None:
        """Write the session's state (the parent's answer to ``request``), sealed, for the client."""
        state = {**self.ask(request or {}), "boot": self.boot, "answers": answers}
        self.store.put(
            sessionwire.state_key(self.session_id), sessionwire.seal_state(self.secret, self.session_id, state)
        )

    def step(self) -> None:
        """Carry every request not seen yet."""
        for place in self.store.list(sessionwire.requests_prefix(self.session_id)):
            if place in self.seen:
                continue
            self.seen.add(place)
            try:
                request = sessionwire.open_request(
                    self.secret, self.session_id, self.boot, place, self.store.get(place)
                )
            except NotFound:
                continue
            except Exception as exc:  # not the session's: never acted on
                _log(f"refusing {place}: {type(exc).__name__}: {exc}")
                continue
            self.carry(place, request)
            with contextlib.suppress(Exception):
                self.store.delete(place)

    def carry(self, place: str, request: dict[str, Any]) -> None:
        kind = request.get("kind")
        try:
            if kind == sessionwire.CELL:
                cell = {key: request[key] for key in ("job", "key", "attempt")}
                cell["imports"] = request.get("imports") or []  # the warm parent imports them before it forks
                self._send(self.cells, cell, 10.0).close()  # the cell's controller reports to the job's folder
                _log(f"cell {request['job']} attempt {request['attempt']} handed over")
            elif kind in (sessionwire.STATE, sessionwire.STOP):
                self.publish(place, {"stop": True} if kind == sessionwire.STOP else {})
        except (OSError, ValueError, KeyError) as exc:
            _log(f"could not carry {place}: {type(exc).__name__}: {exc}")


def _settings() -> dict[str, Any]:
    raw = metadata(f"instance/attributes/{METADATA_KEY}", timeout=5.0)
    if not raw:
        raise SystemExit(f"nbburst session relay: no {METADATA_KEY} attribute: this VM is not a session's")
    return json.loads(raw)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m nbburst.agent.session.relay SESSION_URL", file=sys.stderr)
        return 2
    root, session_id = split_job_url(argv[0])
    key_hex = gce.vm_key()
    if not key_hex:
        raise SystemExit("nbburst session relay: no session secret ($NBBURST_HOME/job-key)")
    settings = _settings()
    boot = int(settings["boot"])
    folder = tempfile.mkdtemp(prefix="nbb-session-")  # only this user enters it
    relay = Relay(open_store(root), session_id, bytes.fromhex(key_hex), boot, folder)
    command = [sys.executable, "-m", "nbburst.agent.session.parent", relay.cells, "--control", relay.control]
    command += ["--idle", str(settings["idle"]), "--until", str(settings["until"])]
    if settings.get("preload"):
        command += ["--preload", ",".join(settings["preload"])]
    env = {**os.environ, ENV_TOKEN: relay.token, ENV_ATTEMPT: attempt_tag(session_id, boot + 1)}
    parent = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
    _log(f"warm parent {parent.pid} starting (boot {boot})")
    try:
        while parent.poll() is None:
            try:
                relay.publish()  # once it answers, it takes cells: the client's start returns
                break
            except (OSError, ValueError):
                time.sleep(0.05)
        _log("the session takes cells")
        while parent.poll() is None:
            try:
                relay.step()
            except Exception as exc:  # the Store unreachable for a moment: the next round tries again
                _log(f"listing requests failed: {type(exc).__name__}: {exc}")
            time.sleep(POLL_SECONDS)
    finally:
        if parent.poll() is None:
            parent.terminate()
        _log(f"warm parent ended with status {parent.wait()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
