"""Warm sessions, the notebook's side: start a session's machine, send it cells, show and end sessions.

A session keeps one machine and one warm agent (agent/session/parent.py) for the
cells that name it. Each cell is still a job in the Store with everything a
cell promises; only its start differs: instead of launching a machine, the
client hands the claimed attempt to the session's warm parent over a Unix
socket, and waits on that connection, which the cell's controller writes to
when it has shipped output and when the attempt is over (the Store stays the
record; the client reads everything from it). A Compute Engine session's VM has no
socket the notebook reaches: its cells go through the Store instead (client/sessionstore.py).

Sessions are recorded in the state folder (``sessions/<name>.json``, readable
by this user only: it holds the session's token). A session whose machine
ended (idle, preempted) comes back with the next cell, unless its time limit
has passed: then the cell is refused and says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import config
from ..errors import UnsupportedOption, UsageError
from ..machines.base import GONE
from ..options import Options
from ..protocol import pricing
from ..protocol.durations import parse_duration
from ..protocol.env import manifest_json
from ..protocol.job import Resources
from . import sessionstore

if TYPE_CHECKING:
    from .burst import Burst, Job

DEFAULT_NAME = "default"
DEFAULT_IDLE = "10m"
DEFAULT_TIMEOUT = "4h"
#: How long a waiting client sleeps on the session's connection before it checks the Store anyway.
WAKE_CEILING_SECONDS = 1.0
#: How long the warm parent may take to answer a question about its state.
ASK_SECONDS = 5.0
#: How long the machine may take to listen on its socket.
START_SECONDS = 30.0
#: Modules of the kernel that a session's warm parent never imports ahead (they belong to the kernel).
KERNEL_MODULES = frozenset(
    {
        "IPython",
        "ipykernel",
        "ipywidgets",
        "jupyter_client",
        "jupyter_core",
        "jupyter_server",
        "zmq",
        "tornado",
        "traitlets",
        "comm",
        "debugpy",
        "prompt_toolkit",
        "nbburst",
        "matplotlib_inline",
        "jedi",
        "parso",
        "pygments",
        "tqdm",
        "_pytest",
        "pytest",
        "pluggy",
    }
)


class SessionGone(UsageError):
    """The session cannot take cells any more (stopped, or past its time limit)."""


@dataclass
class SessionRecord:
    """A session as the state folder records it."""

    name: str
    session_id: str
    backend: str
    machine: str
    socket: str  # where cells go
    control: str  # where the session's state is asked and its stop is sent
    token: str
    cores: int
    cpus: list[int]
    idle_s: float
    until: float
    started: float
    plan: dict[str, Any] = field(default_factory=dict)
    preload: list[str] = field(default_factory=list)  # what its warm parent imports before the first cell
    restarts: int = 0


class Session:
    """A handle on one session: its record and its machine."""

    def __init__(self, sessions: Sessions, record: SessionRecord):
        self.sessions, self.record = sessions, record
        self.revived = False  # its machine had ended and was started again for this cell
        self.pending: socket.socket | None = None  # a connection to its cells' socket, made to check it is up

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def machine(self) -> str:
        return self.record.machine

    def alive(self) -> bool:
        return self.sessions.burst.machines(self.record.backend).describe(self.machine).state != GONE

    def ask(self, request: dict[str, Any], timeout: float = ASK_SECONDS) -> dict[str, Any]:
        """A request the warm parent answers with a line of JSON (its state; ``stop``); ``timeout``: how long a
        local parent may take (a table gives up soon: one still warming up, or ending, answers nothing)."""
        if sessionstore.relayed(self.sessions.burst, self.record.backend):
            return sessionstore.ask(self, request)
        with self.connect(self.record.control) as conn:
            conn.settimeout(timeout)
            conn.sendall(json.dumps({"token": self.record.token, **request}).encode() + b"\n")
            return json.loads(conn.makefile("rb").readline() or b"{}")

    def connect(self, path: str | None = None) -> socket.socket:
        """A connection to the cells' socket (or ``path``); OSError when the machine is gone."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path or self.record.socket)
        except OSError:
            conn.close()
            raise
        return conn

    def launch(self, job: Job, attempt: int) -> None:
        """Hand the claimed ``attempt`` of ``job`` to the warm parent; ``job.wait`` then wakes on its news."""
        if sessionstore.relayed(self.sessions.burst, self.record.backend):
            return sessionstore.launch(self, job, attempt)
        conn, self.pending = self.pending or self.connect(), None
        request = {
            "token": self.record.token,
            "job": job.url,
            "key": job.key().hex(),
            "attempt": attempt,
            "imports": job.cell_imports,
        }
        conn.sendall(json.dumps(request).encode() + b"\n")
        job.wake = Wakeup(conn)

    def info(self) -> dict[str, Any]:
        """A JSON-ready summary: state, cores, cells so far, limits and the cost so far."""
        alive = self.alive()
        state: dict[str, Any] = {}
        if alive:
            try:
                state = self.ask({})
            except (OSError, ValueError):
                state = {}
        now = time.time()
        hours = (min(now, self.record.until) - self.record.started) / 3600
        price = float(self.record.plan.get("price_per_hour") or 0.0)
        return {
            "name": self.name,
            "state": "RUNNING" if alive else "ENDED",
            "backend": self.record.backend,
            "machine": self.machine,
            "cores": self.record.cores,
            "cells": state.get("cells", 0),
            "running": state.get("running", 0),
            "held_blobs": len(state.get("held", [])),
            "started": self.record.started,
            "idle_s": self.record.idle_s,
            "until": self.record.until,
            "cost_per_hour_usd": price,
            "cost_usd": round(price * max(0.0, hours), 4),
        }


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


class Sessions:
    """The sessions of this user, recorded in the state folder."""

    def __init__(self, burst: Burst):
        self.burst = burst
        self.folder = config.state_dir(burst.settings) / "sessions"
        self.default: str | None = None  # the session cells run on when they name none (the last started)

    def _path(self, name: str) -> Path:
        return self.folder / f"{name}.json"

    def _save(self, record: SessionRecord) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self._path(record.name).with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(record), f)
        tmp.replace(self._path(record.name))

    def _load(self, name: str) -> SessionRecord | None:
        try:
            return SessionRecord(**json.loads(self._path(name).read_text()))
        except (FileNotFoundError, ValueError, TypeError):
            return None

    # -- start and stop ----------------------------------------------------------------------
    def start(
        self,
        name: str = DEFAULT_NAME,
        cores: int | None = None,
        idle: str | float = DEFAULT_IDLE,
        timeout: str | float = DEFAULT_TIMEOUT,
        backend: str | None = None,
        preload: list[str] | None = None,
    ) -> Session:
        """Start a session's machine and make it the default session; returns once it takes cells, and on the
        local backend once its warm parent has warmed up (imported the runtime and ``preload``)."""
        Options.build(name=name, backend=backend or self.burst.settings.backend)  # the same rules as a job name
        existing = self._load(name)
        if existing is not None and Session(self, existing).alive():
            raise UsageError(f"session {name!r} is already running; `%burst session stop {name}` ends it")
        idle_s, limit_s = parse_duration(idle), parse_duration(timeout)
        backend = backend or self.burst.settings.backend
        machines = self.burst.machines(backend)
        if not hasattr(machines, "launch_session"):
            raise UnsupportedOption(f"sessions run on the local and gce backends, not on {backend!r}")
        plan = machines.plan(Resources(cores=cores))
        pricing.price_plan(plan, backend, self.burst.settings)
        now = time.time()
        record = SessionRecord(
            name=name,
            session_id=f"session-{name}-{secrets.token_hex(3)}",
            backend=backend,
            machine="",
            socket="",
            control="",
            token=secrets.token_hex(16),
            cores=plan.cores,
            cpus=list(plan.extra.get("cpus") or []),
            idle_s=idle_s,
            until=now + limit_s,
            started=now,
            plan=plan.to_dict(),
            preload=kernel_modules() if preload is None else preload,
        )
        self._boot(record)
        self.default = name
        session = Session(self, record)
        manifest_json()  # every cell's env.json: made while the machine warms up, not in the first cell
        if not sessionstore.relayed(self.burst, backend):
            with contextlib.suppress(OSError, ValueError):  # still warming up after that: cells wait for it
                session.ask({}, timeout=START_SECONDS)  # answered once it is warm: the first cell pays nothing
        return session

    def _boot(self, record: SessionRecord) -> None:
        """Start the record's machine and wait until it listens."""
        if sessionstore.relayed(self.burst, record.backend):  # no socket of its machine is reachable
            record.machine = sessionstore.machine_for(record)
            self._save(record)
            return sessionstore.boot(self.burst, record)
        folder = tempfile.mkdtemp(prefix="nbb-")  # a folder only this user enters
        record.socket, record.control = os.path.join(folder, "cells"), os.path.join(folder, "control")
        record.machine = sessionstore.machine_for(record)  # one name per boot: a relaunch after a preemption
        # deletes the machine it names, which must never be the session as it came back since
        self._save(record)
        argv = [record.socket, "--control", record.control, "--idle", str(record.idle_s), "--until", str(record.until)]
        if record.preload:
            argv += ["--preload", ",".join(record.preload)]
        machines = self.burst.machines(record.backend)
        env = {"NBBURST_SESSION_TOKEN": record.token}
        machines.launch_session(record.session_id, record.machine, record.restarts + 1, record.cpus, argv, env)
        session = Session(self, record)
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                session.connect(record.control).close()
                return
            except OSError:
                if time.monotonic() > deadline or not session.alive():
                    console = machines.console(record.machine)[-2000:]
                    raise UsageError(f"session {record.name!r} did not start:\n{console}") from None
                time.sleep(0.005)

    def stop(self, name: str | None = None) -> dict[str, Any]:
        """End a session and its machine; returns its summary (with the cost)."""
        session = self.get(name)
        info = session.info()
        try:
            session.ask({"stop": True})
        except (OSError, ValueError):
            pass
        self._end_machine(session.record)
        self._path(session.name).unlink(missing_ok=True)
        if self.default == session.name:
            self.default = None
        info["state"] = "STOPPED"
        return info

    def _end_machine(self, record: SessionRecord) -> None:
        if sessionstore.relayed(self.burst, record.backend):
            return sessionstore.end(self.burst, record)
        self.burst.machines(record.backend).delete(record.machine)
        shutil.rmtree(os.path.dirname(record.socket), ignore_errors=True)  # its sockets' folder

    # -- lookup -------------------------------------------------------------------------------
    def get(self, name: str | None = None) -> Session:
        name = name or self.default or DEFAULT_NAME
        record = self._load(name)
        if record is None:
            raise SessionGone(f"no session {name!r}; start one with `%burst session start --cores N --name {name}`")
        return Session(self, record)

    def all(self) -> list[Session]:
        if not self.folder.is_dir():
            return []
        return [Session(self, r) for p in sorted(self.folder.glob("*.json")) if (r := self._load(p.stem))]

    def ready(self, name: str | None) -> Session:
        """The session a cell runs on, its machine up: one that ended (idle, preempted) comes back, unless
        its time limit has passed."""
        session = self.get(name)
        record = session.record
        try:
            if not sessionstore.relayed(self.burst, record.backend):
                session.pending = session.connect()  # up; the cell goes down this connection (Session.launch)
                return session
            if sessionstore.up(session):
                return session
        except OSError:
            pass
        self._end_machine(record)  # whatever is left of it
        if time.time() >= record.until - 1:
            self._path(record.name).unlink(missing_ok=True)
            raise SessionGone(
                f"session {record.name!r} ended at its time limit; `%burst session start` starts a new one"
            )
        record.restarts += 1
        self._boot(record)
        session.revived = True
        return session

    def _serves(self, name: str, backend: str) -> bool:
        record = self._load(name)
        return record is not None and record.backend == backend

    def for_cell(self, options: Options) -> Session | None:
        """The session a cell runs on (``--session``, else the default one if the cell runs on its backend),
        its machine up; ``options`` are fitted to it: its backend and cores, a time limit within the session's."""
        if options.session is None and (self.default is None or not self._serves(self.default, options.backend)):
            return None  # no default session, or one on another backend than the cell's
        session = self.ready(options.session or self.default)
        asked = options.resources.cores
        if asked is not None and asked > session.record.cores:
            raise UsageError(
                f"--cores {asked}: session {session.name!r} has {session.record.cores} cores; "
                "start a bigger session, or run the cell on a machine of its own with `%burst session stop`"
            )
        options.resources = replace(options.resources, cores=session.record.cores)
        options.timeout_s = max(1.0, min(options.timeout_s, session.record.until - time.time()))
        options.backend = session.record.backend
        return session


def kernel_modules() -> list[str]:
    """The top-level packages this kernel has imported from outside the standard library: what a session's
    warm parent imports before the first cell."""
    stdlib = set(sys.stdlib_module_names)
    names = set()
    for name, module in list(sys.modules.items()):
        top = name.partition(".")[0]
        if top in stdlib or top in KERNEL_MODULES or top.startswith("_") or top in names:
            continue
        if "site-packages" in (getattr(module, "__file__", None) or ""):
            names.add(top)
    return sorted(names)
