"""A session cell's controller: an ordinary attempt (:class:`..attempt.controller.Agent`) that also wakes
the waiting client.

Forked from a session's warm parent (agent/session/parent.py), which imports this module
only once it listens: what it pulls in (the agent, IPython) is the slow part of
a session's start, and cells wait for it in the socket's backlog meanwhile.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ...protocol import overlay, sessionpush, signing
from ...protocol.cause import cause_of, console_line
from ...protocol.job import ENV_ATTEMPT, ENV_JOB_KEY, JobLayout, JobSpec, State, split_job_url
from ...store import NotFound, Store, open_store
from ..attempt import preemption, spawn
from ..attempt.controller import Agent, Identity, load_spec
from ..attempt.runnerstart import Pipes, RunnerJob, serve
from ..attempt.shipper import Shipper

#: How long a session's cell runs before its status says so (the heartbeat, the verdict say it anyway).
RUNNING_NOTE_SECONDS = 0.2
#: How long a line of news may take to reach the relay before the client is taken for gone.
NEWS_SECONDS = 30.0


class _WakingShipper(Shipper):
    """Ships like any attempt, and tells the waiting client each time a chunk is out."""

    wake: Any = None

    def flush(self, strict: bool = False) -> None:
        before = self.seq
        super().flush(strict)
        if self.seq != before and self.wake is not None:
            self.wake(b"L")


@dataclass
class PushedRunnerJob(RunnerJob):
    """A runner's job whose objects came down the session's push channel (``objects``: the file the relay wrote
    them to; "" for a cell that came through the Store): the runner reads its inputs and code from them."""

    objects: str = ""

    def store(self) -> Store:
        store = super().store()
        if not self.objects:
            return store
        owned = JobLayout(JobSpec.from_json(self.spec_json).job_id).prefix
        return overlay.Overlay(store, owned, overlay.THROUGH, read_ops(self.objects))


def read_ops(path: str) -> list[overlay.Op]:
    """The objects a cell was pushed with, from the file the relay wrote."""
    with open(path) as f:
        return overlay.decode_ops(json.load(f))


class News:
    """The cell's news to the waiting client, a line each (:mod:`nbburst.protocol.sessionpush`): a client that
    stops reading is told nothing more (the Store has everything)."""

    def __init__(self, conn: socket.socket):
        self.conn: socket.socket | None = conn
        self.lock = threading.Lock()

    def send(self, kind: bytes, ops: list[overlay.Op] | None = None) -> None:
        with self.lock:
            if self.conn is None:
                return
            try:
                self.conn.settimeout(NEWS_SECONDS)
                self.conn.sendall(sessionpush.news_line(kind, ops or []))
            except OSError:
                self.conn = None


class ReadyRunner:
    """A runner forked while the session waits for a cell: its shell and hooks are set up before the cell
    comes, and it is told its job down a pipe (agent/attempt/runnerstart.py). ``prelude``: what the cell's imports
    printed when the warm parent made them for it, before this runner was forked (stdout, stderr)."""

    def __init__(self, prelude: tuple[bytes, bytes] = (b"", b"")) -> None:
        os.environ.setdefault("IPYTHONDIR", os.path.join(os.getcwd(), "work", ".ipython"))
        self.pipes = Pipes()
        job_r, self.job_w = os.pipe()

        def next_job() -> RunnerJob | None:
            os.close(self.job_w)
            with os.fdopen(job_r, "rb") as f:
                line = f.readline()  # empty: the controller is gone without a cell
            return PushedRunnerJob.from_json(line) if line else None

        self.pid = spawn.spawn(lambda: serve(self.pipes, next_job, True, prelude), os.environ.get(ENV_ATTEMPT, ""))
        os.close(job_r)

    def start(self, job: RunnerJob) -> int:
        """Tell the runner its job; returns its pid."""
        with os.fdopen(self.job_w, "wb") as f:
            f.write(job.to_json().encode() + b"\n")
        return self.pid


class SessionAgent(Agent):
    """One cell's controller in a session: an ordinary attempt whose output also wakes the client, and whose
    runner was made ready before the cell came."""

    shipper_class = _WakingShipper
    ready: ReadyRunner | None = None
    running_note: threading.Timer | None = None
    objects = ""  # the file of the objects the cell was pushed with

    def start_runner(self, job: RunnerJob) -> tuple[int, tuple[int, int, int]]:
        job = PushedRunnerJob(**asdict(job), objects=self.objects)
        if isinstance(self.store, overlay.Overlay):  # the cell's process has started: a cancel is the Store's
            self.store.shared.add(self.layout.cancel)
        ready, self.ready = self.ready, None
        if ready is None:
            return super().start_runner(job)
        try:
            pid = ready.start(job)
        except OSError:  # it died waiting (killed): a runner of its own, as any attempt's
            return super().start_runner(job)
        reads, self.control.fd = ready.pipes.in_controller()
        return pid, reads

    def write_status(self, **changes: Any) -> None:
        """As any attempt's, except that a warm machine has nothing to provision: that step is not written (its
        fields go with the next status); and a cell of a few milliseconds does not pay for the write that says
        it runs: that status is written a moment later, as it is then, unless another status came first."""
        state = changes.get("state")
        if state in (State.PROVISIONING, State.RUNNING):
            with self.status_lock:
                for name, value in changes.items():
                    setattr(self.status, name, value)
            if state == State.RUNNING:
                self.running_note = threading.Timer(RUNNING_NOTE_SECONDS, super().write_status)
                self.running_note.daemon = True
                self.running_note.start()
            return
        if self.running_note is not None:
            self.running_note.cancel()
        super().write_status(**changes)

    def pin(self) -> None:
        """Only the cell's runner keeps to the session's CPUs (:meth:`.runnerstart.RunnerJob.enter`): this
        controller, and the warm parent readying the next cell, may run beside it on the others."""

    def sweep(self, attempts: Any) -> None:
        """Nothing to find by the job's marker: every process here carries the session's (the machine's).
        What a cell left behind is ended by the warm parent, its subreaper, once no cell runs."""


def control(conn: socket.socket, request: dict[str, Any], ready: ReadyRunner, ended: Callable[[], None]) -> int:
    """In the forked controller: run the attempt as ``python -m nbburst.agent`` would (its runner ``ready``),
    then say so (to the client, then ``ended()``). A cell pushed with its objects reads them from memory and
    writes the job's record behind the cell (:mod:`nbburst.protocol.overlay`): its objects go up to the client
    as they are made, and the cell's end as soon as it has one. The warm parent is told the cell ended then too,
    so the next cell is taken while this one's record is still being written; this process ends only once the
    record is in the Store, and the parent lets the VM go only once no cell's controller runs."""
    os.environ[ENV_JOB_KEY] = request["key"]
    root, job_id = split_job_url(request["job"])
    ident = Identity()
    layout = JobLayout(job_id)
    news = News(conn)
    objects = request.get("objects") or ""
    store: Store = open_store(root)
    if objects:  # the cancel request alone is read from the Store, once the cell's process has started
        store = overlay.Overlay(store, layout.prefix, overlay.QUEUE, read_ops(objects))
        store.on_write = lambda op: news.send(sessionpush.OBJECTS, [op])
    try:
        try:
            spec = load_spec(store, layout, ident.key)
        except (NotFound, signing.SignatureError) as exc:
            print(console_line(job_id, ident.attempt, cause_of(exc)), file=sys.stderr, flush=True)
            news.send(sessionpush.DONE)
            return 3
        if store.exists(layout.terminal):
            news.send(sessionpush.DONE)
            return 0
        agent = SessionAgent(store, layout, spec, ident)
        agent.objects = objects
        agent.shipper.wake = lambda what: news.send(sessionpush.OUTPUT)
        agent.ready = ready
        preemption.install(agent)
        try:
            agent.run()
        except Exception as exc:  # what every attempt would meet (agent/attempt/controller.py's main does the same)
            agent.give_up(cause_of(exc))
        news.send(sessionpush.DONE)
        ended()
        _record(store, news)
        agent.reap()  # after the client is told: its runner's exit is no cell's time
        return 0
    finally:
        _record(store, news)
        if objects:
            with contextlib.suppress(OSError):
                os.unlink(objects)


def _record(store: Store, news: News) -> None:
    """Wait until the job's record is in the Store, then tell the client, which holds its copy until then."""
    if not isinstance(store, overlay.Overlay) or store.mode == overlay.THROUGH:
        return
    try:
        store.flush()
    except Exception as exc:  # the client writes what it holds when the channel ends without the word
        print(f"nbburst: the job's record could not be written: {exc}", file=sys.stderr, flush=True)
        return
    finally:
        store.mode = overlay.THROUGH
    news.send(sessionpush.STORED)
