"""``Job``: a handle on one job.

A Job is just a job id and a Store: all its state is read from the Store, which is why a restarted kernel,
the CLI and the Jupyter server all see the same jobs. Only what the kernel that submitted it knows rides on
the handle (where its values come back to, the objects it sent, its warm session).
"""

from __future__ import annotations

import ast
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import JobCancelled, JobFailed, JobNotFound
from ..machines import Machines
from ..machines.base import GONE, STOPPED, machine_name
from ..protocol import budget, fence, pricing, signing
from ..protocol.folder import JobFolder
from ..protocol.job import (
    DESCRIBE_SECONDS,
    QUICK_STALE_SECONDS,
    STALE_AFTER_SECONDS,
    JobLayout,
    JobSpec,
    State,
    Status,
    Terminal,
    job_id_time,
    job_url,
    record_text,
)
from ..protocol.outcome import commit_terminal, holds_verdict, read_error, verdict_object
from ..store import AlreadyExists, NotFound, Store
from . import files, workers
from .logtail import LogTail
from .result import CellResult, raise_remote, user_namespace

if TYPE_CHECKING:
    from .burst import Burst
    from .session.manager import Session
    from .supervision.supervisor import Supervisor  # it imports this module: made lazily in Job.supervisor


class Job:
    """A handle on one job; cheap to create, everything is read from the Store."""

    def __init__(self, burst: Burst, job_id: str, store: Store, spec: JobSpec | None = None):
        self.burst, self.id, self.store = burst, job_id, store
        self.layout = JobLayout(job_id)
        self._spec = spec
        self.namespace: dict[str, Any] | None = None  # where a cell's values come back to (set at submission)
        self.inner: dict[str, dict[int, Any]] = {}  # objects inside its inputs as sent (set at submission)
        self.replayable: dict[str, list[ast.stmt]] = {}  # the cell's def/class statements by name (set at submission)
        self._described: tuple[str, float, str] | None = None  # (machine, when, its state): describe() cache
        self._cleaned_up = False
        self._supervisor: Supervisor | None = None
        self._folder: JobFolder | None = None
        self.session: Session | None = None  # the warm session its first attempt runs on
        self.wake: Callable[[float], None] | None = None  # what wait() sleeps on (a session's news), else time
        self.imports_ahead: threading.Thread | None = None  # the kernel importing what the cell imports
        self.cell_imports: list[str] = []  # a warm session imports these before it forks the cell's process

    def __repr__(self) -> str:
        # No state here: a repr stays frozen in the notebook's Out while the job moves on.
        try:
            return f"<nbburst.Job {self.spec.name} ({self.id})>"
        except signing.SignatureError:
            return f"<nbburst.Job ({self.id}), cannot verify>"

    @property
    def folder(self) -> JobFolder:
        """The job's objects in the Store, sealed under its key (:class:`~nbburst.protocol.signing.NoKey`
        when this machine's key ring has no key for it)."""
        if self._folder is None:
            self._folder = JobFolder(self.store, self.layout, self.key())
        return self._folder

    @property
    def spec(self) -> JobSpec:
        if self._spec is None:
            try:
                self._spec = self.folder.spec()
            except NotFound:
                raise JobNotFound(f"job {self.id} does not exist in {self.store.url}") from None
        return self._spec

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def label(self) -> str:
        """The job as its messages name it: by the name the user gave it (``--name``), with its id."""
        name = self.name
        return self.id if name == self.id else f"{name} ({self.id})"

    @property
    def url(self) -> str:
        """The job's URL (what its agent is started with)."""
        return job_url(self.store.url, self.id)

    @property
    def machines(self) -> Machines:
        return self.burst.machines(self.spec.backend)

    # -- state --------------------------------------------------------------------
    def terminal(self) -> Terminal | None:
        """The job's verdict, unless an attempt wrote it after a later one was claimed (protocol/fence.py)."""
        terminal = self.folder.terminal()
        if terminal is not None and not fence.stands(self.folder, terminal.attempt, self.layout.terminal):
            return None
        return terminal

    def statuses(self) -> list[Status]:
        return self.folder.statuses()

    def latest_status(self) -> Status | None:
        return self.folder.latest_status()

    @property
    def attempt(self) -> int:
        status = self.latest_status()
        return status.attempt if status else 0

    @property
    def state(self) -> State:
        return self.derive_state()[0]

    @property
    def status(self) -> State:
        """The job's state (``SUBMITTED`` ... ``SUCCEEDED``); an alias of :attr:`state`."""
        return self.state

    def derive_state(self) -> tuple[State, Status | None, Terminal | None]:
        """The state with the status and verdict it was read from; a vanished machine reads as PREEMPTED."""
        terminal = self.terminal()
        status = self.latest_status()
        if terminal is not None:
            return terminal.state, status, terminal
        if status is None:
            return State.SUBMITTED, None, None
        if status.state in (State.PROVISIONING, State.RUNNING) and self._vanished(status):
            terminal = self.terminal()  # it may have ended just before its machine went
            if terminal is not None:
                return terminal.state, status, terminal
            return State.PREEMPTED, status, None  # a machine that vanished without a verdict, never FAILED
        return status.state, status, None

    def _vanished(self, status: Status) -> bool:
        """The attempt's machine is stopped or gone, although no verdict was written.

        Asked only once the heartbeat is late: after two missed beats for a started
        machine, after STALE_AFTER_SECONDS for a launch still in progress (its claim
        has no ``launched`` time yet), so that a slow launch is never taken for a loss.
        Late by the Store's clock (the status's last write), never by this machine's."""
        quiet = QUICK_STALE_SECONDS if (status.launched or status.state == State.RUNNING) else STALE_AFTER_SECONDS
        try:
            if self.store.age(self.layout.status(status.attempt)) <= quiet:
                return False
        except NotFound:
            return False
        return self.machine_state(status) in (GONE, STOPPED)

    def machine_of(self, status: Status | None = None) -> str:
        """The name of the machine of ``status``'s attempt (of the latest attempt by default)."""
        status = status or self.latest_status()
        return status.machine if status and status.machine else machine_name(self.id)

    def machine_state(self, status: Status, max_age: float = DESCRIBE_SECONDS) -> str:
        """The machine's state, asked of the backend at most every ``max_age`` seconds."""
        name = self.machine_of(status)
        cached = self._described
        now = time.monotonic()
        if cached and cached[0] == name and now - cached[1] < max_age:
            return cached[2]
        state = self.machines.describe(name).state
        self._described = (name, now, state)
        return state

    # -- launching ------------------------------------------------------------------
    def key(self) -> bytes:
        return self.burst.keyring.get(self.id)

    def launch(self, attempt: int) -> None:
        """Claim ``attempt`` (create-only, so two supervisors never both launch it) and start it."""
        claim = Status(
            attempt=attempt,
            state=State.PROVISIONING,
            machine=self.session.machine if self.session and attempt == 1 else machine_name(self.id),
            message=f"starting {self.spec.plan.get('machine_type', 'machine')}",
        )
        self.folder.put_status(claim, create=True)
        fence.claim(self.folder, attempt)
        try:
            self.start_machine(claim, self.spec)
            workers.launch_all(self)  # --workers: the worker machines, beside the job's
        except Exception as exc:
            reason = f"could not start the machine: {exc}"
            self.commit(State.FAILED, reason, by="client")
            self.clean_up()  # nothing of a launch that failed stays: no machine, no key held for it
            raise JobFailed(reason) from exc

    def start_machine(self, claim: Status, spec: JobSpec) -> None:
        """Launch (attempt 1) or restart the machine of a claimed attempt, then record when it started.

        Shared by the first launch and the supervisor's relaunches. The launch time is
        written only if the agent has not reported yet: its status is fresher. With a budget, the
        machine gets what is left of it (:func:`~nbburst.protocol.budget.for_launch`).
        """
        spec = budget.for_launch(spec, [s for s in self.statuses() if s.attempt < claim.attempt])
        if claim.attempt == 1 and self.session is not None:
            self.session.launch(self, claim.attempt)  # its warm machine forks the cell's controller
        elif claim.attempt == 1:
            self.machines.launch(spec, self.url, self.key(), claim.attempt)
        else:
            # the machine it runs on: a session cell's relaunch gets one of its own, which the claim must name
            claim.machine = self.machines.restart(claim.machine, spec, self.url, self.key(), claim.attempt)
        claim.launched = claim.heartbeat = time.time()
        key = self.layout.status(claim.attempt)
        try:
            if Status.from_json(self.folder.get_record(key)).launched == 0:
                self.folder.put_record(key, claim.to_json())
        except NotFound:
            pass

    def commit(self, state: State, reason: str, by: str) -> State:
        """Write the job's verdict once (create-only); returns the state that won."""
        statuses = self.statuses()
        return commit_terminal(
            self.folder, self.spec, state, reason, statuses[-1].attempt if statuses else 0, by, statuses
        )

    def _cost(self, ended: float | None = None, statuses: list[Status] | None = None) -> dict[str, Any]:
        """Cost so far (or in total, given the end time) by component, and the saving versus on-demand."""
        try:
            return pricing.job_cost(self.spec, self.statuses() if statuses is None else statuses, ended)
        except Exception:  # a cost estimate must never break a job's bookkeeping
            return pricing.cost(pricing.Breakdown(), 0.0)

    def budget_spent(self) -> str:
        """Why the job may not run on (its budget cannot buy another boot); "" while it may, or without a cap."""
        if self.spec.budget_usd is None:
            return ""
        return budget.exhausted(self.spec, self.statuses())

    def supervise(self) -> State:
        """Relaunch the job if its machine vanished without a verdict (preemption); returns its state.

        Cheap while nothing needs doing; see :mod:`nbburst.client.supervision.supervisor` (lease, backoff, history).
        Once the job has ended, makes sure its machine is gone (once per handle)."""
        state = self.supervisor.step()
        if state.terminal:
            self.clean_up()
        return state

    def clean_up(self) -> None:
        """The job has ended: make sure its machines and what the backend holds for it (a key's secret) are gone,
        once per handle. The agent removes its machine; this covers a VM that could only power itself off, and a
        launch that failed half way."""
        if self._cleaned_up:
            return
        self._cleaned_up = True
        if self._ended_on_session():
            return
        try:
            self.machines.cleanup(self.machine_of())
            workers.end_all(self)
        except Exception:
            pass

    def _ended_on_session(self) -> bool:
        """Whether the job's warm session ran it and its machine wrote the verdict: that machine was up then and
        serves the next cells; ending it is the session's business (its next cell, its idle time, ``stop``), so
        the job asks the backend nothing, which would cost every session cell a Compute API round trip."""
        if self.session is None:
            return False
        terminal = self.folder.terminal()
        return terminal is not None and terminal.attempt == 1 and terminal.by == "agent"

    @property
    def supervisor(self) -> Supervisor:
        """This handle's supervisor (its lease, relaunch state), made on first use."""
        if self._supervisor is None:
            from .supervision.supervisor import Supervisor

            self._supervisor = Supervisor(self)
        return self._supervisor

    def attempts(self) -> list[dict[str, Any]]:
        """The attempts so far, oldest first (state, start, end, machine, message)."""
        from .supervision.history import attempts

        return attempts(self)

    # -- waiting and output -------------------------------------------------------------
    def tail(self) -> LogTail:
        return LogTail(self.folder)

    def wait(
        self,
        timeout: float | None = None,
        on_record: Callable[[dict[str, Any]], None] | None = None,
        supervise: bool = True,
        tail: LogTail | None = None,
    ) -> State:
        """Block until the job ends, streaming log records to ``on_record``; returns the final state.

        Pass a ``tail`` to resume reading where an earlier reader of it stopped (no record twice)."""
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        tail = tail or self.tail()
        delay = 0.005
        while True:
            got = False
            for record in tail.poll():
                got = True
                if on_record:
                    on_record(record)
            state = self.supervise() if supervise else self.state
            if state.terminal:
                for record in tail.poll():
                    if on_record:
                        on_record(record)
                return state
            if deadline is not None and time.monotonic() > deadline:
                return state
            # Poll tightly while the job is young (short cells), then settle to the configured pace.
            young = time.monotonic() - start < 5
            ceiling = (
                self.store.min_poll_seconds
                if young
                else max(self.store.min_poll_seconds, self.burst.settings.poll_interval)
            )
            delay = 0.005 if got else min(delay * 2, ceiling)
            (self.wake or time.sleep)(delay)

    def logs(self, attempt: int | None = None) -> str:
        """The job's output as text (all attempts, or one)."""
        return "".join(record_text(r) for r in self.tail().records(attempt))

    def cancel(self, wait_s: float = 15.0) -> State:
        """Stop the job: the machine is deleted and the state is CANCELLED, unless it already ended."""
        if self.terminal():
            return self.terminal().state  # type: ignore[union-attr]
        request = json.dumps({"at": time.time()}).encode()
        try:
            self.folder.create_record(self.layout.cancel, request)
        except AlreadyExists:
            if not self.folder.cancel_requested():  # a forged request in its place: ours replaces it
                self.folder.put_record(self.layout.cancel, request)
        end = time.monotonic() + wait_s
        while time.monotonic() < end and self.terminal() is None:
            if self.latest_status() is None or self.machines.describe(self.machine_of()).state in (GONE, STOPPED):
                break
            time.sleep(0.1)
        state = self.commit(State.CANCELLED, "cancelled by the user", by="client")
        self.machines.delete(machine_name(self.id))
        workers.end_all(self)
        return state

    def preempt(self, grace_s: float = 3.0) -> None:
        """Simulate an eviction of the job's machine (fault injection)."""
        self.machines.preempt(self.machine_of(), grace_s)

    def console(self) -> str:
        """The machine's boot/console output (the serial port on Compute Engine); "" when there is none."""
        try:
            return self.machines.console(self.machine_of())
        except Exception:
            return ""

    # -- results --------------------------------------------------------------------------
    def outcome(
        self, namespace: dict[str, Any] | None = None, before: Callable[[CellResult], None] | None = None
    ) -> CellResult:
        """The cell's result, or raise its exception; the job must have ended.

        Values are unpickled for ``namespace`` (by default the one the cell was captured from, else the
        kernel's): notebook functions bind to it, unchanged inputs are its own objects, changed ones are
        updated in it in place. Binding the names is :meth:`CellResult.merge_into`'s job. A cell that raised
        hands ``before`` what it had bound and changed when it raised (a plain run keeps that), loaded so too,
        before its exception is raised."""
        __tracebackhide__ = True
        state = self.state
        if state == State.SUCCEEDED:
            try:  # sealed at the attempt that held the job: a superseded attempt's or a forged one is refused
                data = verdict_object(self.folder, self.layout.result)[1]
            except NotFound:
                missing = f"job {self.label} succeeded but its result.pkl is missing from the Store"
                raise JobFailed(missing, state.value) from None
            return self._load(data, namespace)
        if not state.terminal:
            raise JobFailed(f"job {self.label} has not finished (it is {state.value})", state.value)
        if state == State.FAILED and holds_verdict(self.folder, self.layout.error):  # not a superseded one
            info = self.remote_error()
            if before is not None and info.get("before") is not None:
                before(self._load(info["before"], namespace))
            raise_remote(info)
        reason = self.terminal().reason if self.terminal() else state.value  # type: ignore[union-attr]
        if state == State.CANCELLED:
            raise JobCancelled(f"job {self.label} was cancelled: {reason}")
        raise JobFailed(f"job {self.label} failed: {reason}")

    def _load(self, data: Any, namespace: dict[str, Any] | None) -> CellResult:
        """The result in ``namespace``'s terms. Loaded, it no longer needs the objects inside the inputs as they
        were sent, and lets go of them: the kernel keeps a job's handle for as long as it runs, and through it
        kept every object a cell replaced inside an input (a Figure's transforms of each draw, an estimator's old
        arrays). Loading the result again later refers to what the namespace holds then, as after a restart."""
        target = namespace if namespace is not None else self.namespace
        if self.imports_ahead is not None:
            self.imports_ahead.join()  # its modules are the values' modules: imported by one thread at a time
        inner, self.inner = self.inner, {}
        return CellResult.load(data, target if target is not None else user_namespace(), inner, self.replayable)

    def remote_error(self) -> dict[str, Any]:
        return read_error(self.store, self.layout, self.key())

    def result(self, timeout: float | None = None) -> Any:
        """Wait, then return the value (``submit``) or the dict of variables (a cell)."""
        state = self.wait(timeout)
        if not state.terminal:
            raise TimeoutError(f"job {self.label} is still {state.value} after {timeout} s")
        return self.value_of(self.outcome())

    def files(self) -> dict[str, int]:
        """The files the cell wrote in its working folder and the job kept in the Store: path -> size."""
        return {rel: entry.size for rel, entry in files.listing(self.folder).items()}

    def download(self, dest: str | Path = ".", limit: int | None = None) -> files.Arrival:
        """Fetch the files the cell wrote into ``dest`` (a local file changed since the cell started is kept,
        and the machine's copy put beside it); over ``limit`` bytes, nothing is fetched (see the Arrival)."""
        return files.download(self.folder, dest, self.spec.created, limit)

    def bring_back(self, dest: str | Path = ".") -> list[str]:
        """After the cell: its files into ``dest`` (the kernel's working folder), up to the configured limit;
        returns what to tell the user."""
        limit = int(self.burst.settings.files_limit_gb * files.GIB)
        try:
            return self.download(dest, limit).lines(self.spec.name)
        except (OSError, signing.SignatureError) as exc:
            return [f"the files the cell wrote could not come back ({exc}); `%burst download {self.id}` tries again"]

    def value_of(self, outcome: CellResult) -> Any:
        """What the job gives back: a ``submit`` call's return value, or a cell's variables."""
        return outcome.last if self.spec.kind == "call" else outcome.values

    def info(self) -> dict[str, Any]:
        """A JSON-ready summary for tables, the REST API and the sidebar.

        A job whose objects cannot be verified here (no key: another user's; or a forged object) is
        summed up as :data:`UNVERIFIED` with the reason, and nothing read from its folder."""
        try:
            state, status, terminal = self.derive_state()
            plan = self.spec.plan or {}
            statuses = self.statuses() if status else []
        except signing.SignatureError as exc:
            return unverified_info(self.id, exc)
        started = next((s.started for s in statuses if s.state != State.PROVISIONING), None)
        ended = terminal.at if terminal else None
        # The job's wall time, as its view counts it: from submission (boot, environment, relaunches
        # included), not from when the cell began, which leaves a quick cell on a slow machine at 0 s.
        elapsed = max(0.0, (ended or time.time()) - self.spec.created)
        cost = (terminal.cost if terminal and terminal.cost else None) or self._cost(ended, statuses)
        return {
            "id": self.id,
            "name": self.spec.name,
            "state": state.value,
            "attempt": status.attempt if status else 0,
            "backend": self.spec.backend,
            "kind": self.spec.kind,
            "machine": {
                "type": plan.get("machine_type"),
                "cores": plan.get("cores"),
                "memory_gb": plan.get("memory_gb"),
                "gpu": plan.get("gpu"),
                "gpu_count": plan.get("gpu_count"),
                "spot": plan.get("spot"),
                "zone": plan.get("zone"),
            }
            if plan
            else None,
            "created": self.spec.created,
            "started": started,
            "ended": ended,
            "elapsed_s": round(elapsed, 1),
            "cost_usd": round(cost["total"], 4),
            "cost_per_hour_usd": cost["per_hour"],
            "saving_usd": round(cost["saving"], 4),
            "cost": cost,
            "progress": (terminal.progress if terminal and terminal.progress else status.progress if status else None),
            "budget": budget.view(self.spec.budget_usd, cost["total"]),
            "resumed_from": self.spec.resumed_from or None,
            "message": (terminal.reason if terminal else status.message if status else ""),
            # --workers: their count, states, cost and the Dask dashboard (client/workers.py)
            "workers": workers.summary(self, cost["total"], not state.terminal)
            if self.spec.resources.workers
            else None,
            "kept": kept_view(self.spec, ended),
        }


def kept_view(spec: JobSpec, ended: float | None) -> dict[str, Any] | None:
    """``--keep``: its machine stays warm after it; what it costs an hour, and when it goes unless another cell
    of its shape renews it (known once the job ended); None for a job whose machine is not kept."""
    if not spec.kept_s:
        return None
    return {
        "idle_s": spec.kept_s,
        "until": ended + spec.kept_s if ended else None,
        "cost_per_hour_usd": float((spec.plan or {}).get("price_per_hour") or 0.0),
    }


#: The state shown for a job whose objects cannot be verified on this machine (it is not a job state).
UNVERIFIED = "UNVERIFIED"


def unverified_info(job_id: str, why: signing.SignatureError) -> dict[str, Any]:
    """:meth:`Job.info` of a job that cannot be verified here: its id, the time its id tells, and why."""
    no_key = isinstance(why, signing.NoKey)
    reason = "no key (submitted by another user or machine)" if no_key else str(why)
    return {
        "id": job_id,
        "name": job_id,
        "state": UNVERIFIED,
        "unverified": "no key" if no_key else "refused",
        "attempt": 0,
        "backend": None,
        "kind": None,
        "machine": None,
        "created": job_id_time(job_id) or 0.0,
        "started": None,
        "ended": None,
        "elapsed_s": 0.0,
        "cost_usd": 0.0,
        "cost_per_hour_usd": 0.0,
        "saving_usd": 0.0,
        "cost": None,
        "progress": None,
        "budget": None,
        "resumed_from": None,
        "kept": None,
        "message": f"cannot verify: {reason}",
    }
