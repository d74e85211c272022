"""Warm sessions, the notebook's side: start a session's machine, send it cells, show and end sessions.

A session keeps one machine and one warm agent (agent/session/parent.py) for the
cells that name it. Each cell is still a job in the Store with everything a
cell promises; only its start differs: instead of launching a machine, the
client hands the claimed attempt to the session's warm parent, by the transport
its backend declares (:attr:`~nbburst.machines.base.Machines.session_transport`):
over a Unix socket to a machine on this computer (:mod:`.socket`), or through
the Store to a Compute Engine VM, which no socket of the notebook reaches
(:mod:`.mailbox`).

Sessions are recorded in the state folder (``sessions/<name>.json``, readable
by this user only: it holds the session's token). A session whose machine
ended (idle, preempted) comes back with the next cell, unless its time limit
has passed: then the cell is refused and says so.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ... import config
from ...errors import UsageError
from ...machines.base import GONE, Plan, SessionLaunch, machine_name
from ...options import Options
from ...protocol import pricing
from ...protocol.durations import parse_duration
from ...protocol.env import manifest_json
from ...protocol.job import JobLayout, Resources
from .mailbox import MailboxTransport
from .socket import SocketTransport
from .transport import Transport

if TYPE_CHECKING:
    from ...store import Store
    from ..burst import Burst
    from ..job import Job

DEFAULT_NAME = "default"
DEFAULT_IDLE = "10m"
DEFAULT_TIMEOUT = "4h"
#: How long the warm parent may take to answer a question about its state.
ASK_SECONDS = 5.0
#: The longest name a machine may have (Compute Engine's).
MAX_NAME = 63
#: The transport of each :attr:`~nbburst.machines.base.Machines.session_transport`.
TRANSPORTS: dict[str, type[Transport]] = {"socket": SocketTransport, "mailbox": MailboxTransport}
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
    tls: dict[str, str] = field(default_factory=dict)  # the client's certificate and key for a push channel
    push: dict[str, Any] = field(default_factory=dict)  # the push channel its machine announced (host, port, cert)

    def boot_machine(self) -> str:
        """The name of the session's machine for its current boot (``restarts``), at most :data:`MAX_NAME`
        characters: a relaunch after a preemption deletes the machine it names, which must never be the session as
        it came back since, and a revived session never waits for the machine it replaces to be gone."""
        suffix = f"-{self.restarts}"
        return machine_name(self.session_id)[: MAX_NAME - len(suffix)].rstrip("-") + suffix

    def launch_request(self) -> SessionLaunch:
        """What the backend starts for the session's current boot."""
        return SessionLaunch(
            session_id=self.session_id,
            machine=self.machine,
            boot=self.restarts,
            plan=self.plan,
            token=self.token,
            idle_s=self.idle_s,
            until=self.until,
            preload=list(self.preload),
            socket=self.socket,
            control=self.control,
        )


class Session:
    """A handle on one session: its record and its machine."""

    def __init__(self, sessions: Sessions, record: SessionRecord):
        self.sessions, self.record = sessions, record
        self.revived = False  # its machine had ended and was started again for this cell
        self.pending: Any = None  # what the transport made to check that the machine is up, for the next cell

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def machine(self) -> str:
        return self.record.machine

    def alive(self) -> bool:
        return self.sessions.burst.machines(self.record.backend).describe(self.machine).state != GONE

    def ask(self, request: dict[str, Any], timeout: float = ASK_SECONDS) -> dict[str, Any]:
        """A request the warm parent answers (its state; ``stop``); ``timeout``: how long a local parent may take
        (a table gives up soon: one still warming up, or ending, answers nothing)."""
        return self.sessions.transport(self.record.backend).ask(self, request, timeout)

    def launch(self, job: Job, attempt: int) -> None:
        """Hand the claimed ``attempt`` of ``job`` to the warm parent; ``job.wait`` then follows it."""
        self.sessions.transport(self.record.backend).launch(self, job, attempt)

    def release(self) -> None:
        """The cell this session was made ready for is not launched: let go of what was made for it."""
        self.sessions.transport(self.record.backend).release(self)

    def plan(self) -> Plan:
        """The plan of a cell on the session: its machine's, which is there already (nothing is chosen again, and
        no quota or image is looked up for the cell)."""
        return Plan(**self.record.plan)

    def cell_store(self, store: Store, layout: JobLayout) -> Store:
        """Where a cell's job is written and read: ``store``, or the objects that travel with the cell over the
        session's push channel, beside it (:meth:`.transport.Transport.cell_store`)."""
        return self.sessions.transport(self.record.backend).cell_store(self, store, layout)

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
            "idle_until": state["last"] + self.record.idle_s if "last" in state else None,  # renewed by each cell
            "cost_per_hour_usd": price,
            "cost_usd": round(price * max(0.0, hours), 4),
        }


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
        resources: Resources | None = None,
    ) -> Session:
        """Start a session's machine and make it the default session; returns once it takes cells, and on the
        local backend once its warm parent has warmed up (imported the runtime and ``preload``). ``resources``:
        the machine's shape when more than ``cores`` is asked (a machine kept by ``--keep``)."""
        Options.build(name=name, backend=backend or self.burst.settings.backend)  # the same rules as a job name
        existing = self._load(name)
        if existing is not None and Session(self, existing).alive():
            raise UsageError(f"session {name!r} is already running; `%burst session stop {name}` ends it")
        idle_s, limit_s = parse_duration(idle), parse_duration(timeout)
        backend = backend or self.burst.settings.backend
        machines = self.burst.machines(backend)
        machines.check_sessions()
        plan = machines.plan(resources or Resources(cores=cores))
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
        self.transport(backend).warm(session)  # the first cell pays nothing
        return session

    def transport(self, backend: str) -> Transport:
        """The way to the warm parents of ``backend``'s sessions (UnsupportedOption when it has none)."""
        machines = self.burst.machines(backend)
        machines.check_sessions()
        return TRANSPORTS[machines.session_transport](self.burst)

    def _boot(self, record: SessionRecord) -> None:
        """Start the record's machine and wait until it takes cells."""
        record.machine = record.boot_machine()
        self.transport(record.backend).boot(record, self._save)

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
        self.transport(record.backend).end(record)

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
            if self.transport(record.backend).up(session):
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
