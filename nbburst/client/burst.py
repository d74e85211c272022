"""The client API: ``Burst`` (a configured session) and ``Job`` (a handle on one job).

Every front end (magic, widgets, CLI, server) goes through here; nothing here
knows about front ends. A Job is just a job id and a Store: all its state is
read from the Store, which is why a restarted kernel, the CLI and the Jupyter
server all see the same jobs.
"""

from __future__ import annotations

import json
import linecache
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__, config
from ..errors import CaptureError, JobCancelled, JobFailed, JobNotFound, RemoteError, UsageError
from ..machines import Machines, open_machines
from ..machines.base import GONE, STOPPED, machine_name
from ..options import Options
from ..protocol import payload, pricing, signing
from ..protocol.env import manifest
from ..protocol.job import (
    BLOBS_PREFIX,
    DESCRIBE_SECONDS,
    QUICK_STALE_SECONDS,
    STALE_AFTER_SECONDS,
    JobLayout,
    JobSpec,
    State,
    Status,
    Terminal,
    blob_key,
    decode_records,
    jobs_prefix,
    new_job_id,
    valid_job_id,
)
from ..protocol.outcome import commit_terminal, read_error
from ..store import AlreadyExists, NotFound, Store, open_store
from .capture import Capture, unpicklable_message

if TYPE_CHECKING:
    from .supervisor import Supervisor  # it imports this module: made lazily in Job.supervisor

# fingerprint of exact bytes -> SHA-256 address, per store: saves re-hashing unchanged data.
_ADDRESS_CACHE: dict[tuple[str, str], str] = {}


class Burst:
    """A configured session: settings, the Store, the machines and the key ring."""

    def __init__(self, settings: config.NBBurst | None = None):
        self.settings = settings or config.load()
        self._stores: dict[str, Store] = {}
        self._machines: dict[str, Machines] = {}
        self.keyring = signing.KeyRing(config.state_dir(self.settings) / "keys")
        self._handles: dict[tuple[str, str], Job] = {}  # (store url, job id) -> the job's handle
        self._handles_lock = threading.Lock()

    # -- ports ----------------------------------------------------------------
    def store_for(self, backend: str | None = None) -> Store:
        url = config.store_url(self.settings, backend)
        if url not in self._stores:
            self._stores[url] = open_store(url)
        return self._stores[url]

    @property
    def store(self) -> Store:
        return self.store_for()

    def machines(self, backend: str | None = None) -> Machines:
        backend = backend or self.settings.backend
        if backend not in self._machines:
            self._machines[backend] = open_machines(backend, self.settings)
        return self._machines[backend]

    def options(self, **kwargs: Any) -> Options:
        """Options with the configured defaults filled in."""
        kwargs.setdefault("backend", self.settings.backend)
        kwargs.setdefault("timeout", self.settings.timeout)
        kwargs.setdefault("max_restarts", self.settings.max_restarts)
        kwargs.setdefault("fallback_on_demand", self.settings.fallback_on_demand)
        return Options.build(**kwargs)

    # -- submission -------------------------------------------------------------
    def submit_cell(self, code: str, cap: Capture, options: Options) -> Job:
        """Submit an (IPython-transformed) cell whose inputs were captured."""
        return self._submit("cell", code, cap.values, cap.modules, options, cap.outputs, cap.deletes)

    def submit(self, fn: Callable[..., Any], *args: Any, options: Options | None = None, **kwargs: Any) -> Job:
        """Run ``fn(*args, **kwargs)`` on a machine; ``Job.result()`` is its return value."""
        if not callable(fn):
            raise UsageError(f"submit() needs a function, got {type(fn).__name__}")
        values = {"__fn__": fn, "__args__": args, "__kwargs__": kwargs}
        return self._submit("call", "", values, {}, options or self.options(), None, [])

    def _submit(
        self,
        kind: str,
        code: str,
        values: dict[str, Any],
        modules: dict[str, str],
        options: Options,
        outputs: list[str] | None,
        deletes: list[str],
    ) -> Job:
        machines = self.machines(options.backend)
        plan = machines.plan(options.resources)  # refuses what the backend cannot do, before anything else
        pricing.price_plan(plan, options.backend, self.settings)
        encoded = _encode_all(values)
        files = _check_files(options.files)
        store = self.store_for(options.backend)
        if options.name and self._find_by_name(store, options.name, running_only=True):
            raise UsageError(f"--name: a job called {options.name!r} is still running; pick another name")
        job_id = new_job_id()
        layout = JobLayout(job_id)
        key = self.keyring.create(job_id)
        try:
            spec = self._write_job(
                store, layout, key, kind, code, encoded, modules, files, options, outputs, deletes, plan.to_dict()
            )
        except BaseException:
            store.delete_prefix(layout.prefix)  # no half-written job
            self.keyring.delete(job_id)
            raise
        job = self.handle(store, job_id, spec)
        job._launch(attempt=1)
        return job

    def _write_job(
        self,
        store: Store,
        layout: JobLayout,
        key: bytes,
        kind: str,
        code: str,
        encoded: dict[str, payload.Encoded],
        modules: dict[str, str],
        files: dict[str, Path],
        options: Options,
        outputs: list[str] | None,
        deletes: list[str],
        plan: dict[str, Any],
    ) -> JobSpec:
        digests: dict[str, str] = {}

        def put(name: str, data: bytes) -> None:
            digests[name] = payload.digest_bytes(data)
            store.put(layout.key(name), data)

        manifest_values = {name: upload_blob(store, enc) for name, enc in encoded.items()}
        put("code.py", code.encode())
        put("inputs.json", json.dumps({"modules": modules, "values": manifest_values}, indent=1).encode())
        put("env.json", json.dumps(manifest(), indent=1).encode())
        if files:
            put("files.json", json.dumps({rel: upload_file(store, path) for rel, path in files.items()}).encode())
        spec = JobSpec(
            job_id=layout.job_id,
            name=options.name or layout.job_id,
            backend=options.backend,
            kind=kind,
            resources=options.resources,
            timeout_s=options.timeout_s,
            max_restarts=options.max_restarts,
            outputs=outputs,
            deleted=deletes,
            files=sorted(files),
            owner=config.owner(self.settings),
            client_version=__version__,
            python=manifest()["python"],
            digests=digests,
            plan=plan,
        )
        spec.signature = signing.sign_text(key, spec.signed_payload())
        store.create(layout.spec, spec.to_json())  # written last: now the job exists
        return spec

    # -- lookup -----------------------------------------------------------------
    def handle(self, store: Store, job_id: str, spec: JobSpec | None = None) -> Job:
        """The one handle of a job in this session: its spec is read once, and it has one supervisor."""
        with self._handles_lock:
            job = self._handles.get((store.url, job_id))
            if job is None:
                job = self._handles[(store.url, job_id)] = Job(self, job_id, store, spec)
            return job

    def handles(self) -> list[Job]:
        """The job handles this session has made (no Store call)."""
        with self._handles_lock:
            return list(self._handles.values())

    def job(self, ref: str) -> Job:
        """A job by id or by name (the newest of that name)."""
        store = self.store
        if valid_job_id(ref) and ((store.url, ref) in self._handles or store.exists(JobLayout(ref).spec)):
            return self.handle(store, ref)
        found = self._find_by_name(store, ref)
        if found is None:
            raise JobNotFound(f"no job with id or name {ref!r} in {store.url}; `%burst jobs` lists them")
        return found

    def _find_by_name(self, store: Store, name: str, running_only: bool = False) -> Job | None:
        for job in self.jobs(store=store):
            if job.spec.name == name and (not running_only or not job.state.terminal):
                return job
        return None

    def jobs(self, store: Store | None = None) -> list[Job]:
        """All jobs in the Store, newest first.

        A job folder without ``spec.json`` is a submission being written (or one that
        failed): not a job. Known jobs skip that check, which keeps polling cheap on GCS.
        """
        store = store or self.store
        ids = sorted((d for d in store.list_dirs(jobs_prefix()) if valid_job_id(d)), reverse=True)
        with self._handles_lock:
            known = {job_id for url, job_id in self._handles if url == store.url}
            for gone in known - set(ids):  # deleted meanwhile (nbburst gc)
                del self._handles[(store.url, gone)]
        return [self.handle(store, job_id) for job_id in ids if job_id in known or store.exists(JobLayout(job_id).spec)]


def _encode_all(values: dict[str, Any]) -> dict[str, payload.Encoded]:
    encoded = {}
    for name, value in values.items():
        try:
            encoded[name] = payload.encode(value)
        except Exception as exc:
            shown = "a function argument" if name.startswith("__") else name
            raise CaptureError(unpicklable_message(shown, value, exc)) from None
    return encoded


def _check_files(paths: list[str]) -> dict[str, Path]:
    files = {}
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.is_file():
            raise UsageError(f"--files: {raw!r} is not a file (folders: pass each file, or archive them)")
        rel = raw if not os.path.isabs(raw) and ".." not in Path(raw).parts else path.name
        files[rel] = path
    return files


def upload_blob(store: Store, enc: payload.Encoded) -> str:
    """Upload ``enc`` as a content-addressed blob unless the Store already has it; returns its address."""
    fp = payload.fingerprint(enc.parts)
    address = _ADDRESS_CACHE.get((store.url, fp))
    if address is None or not store.exists(blob_key(address)):
        address = store.put_addressed(BLOBS_PREFIX, enc.chunks, lambda: payload.digest(enc.parts))
    _ADDRESS_CACHE[(store.url, fp)] = address
    return address


def upload_file(store: Store, path: Path) -> str:
    """Upload a file's bytes as a blob (``--files``) unless the Store has them; returns the address."""
    data = path.read_bytes()
    return store.put_addressed(BLOBS_PREFIX, lambda: [data], lambda: payload.digest_bytes(data))


@dataclass
class CellResult:
    """What a cell sent back: the variables it assigned and its last expression."""

    values: dict[str, Any]
    deleted: list[str] = field(default_factory=list)
    has_last: bool = False
    last: Any = None
    last_bundle: tuple[dict[str, Any], dict[str, Any]] | None = None
    warnings: list[str] = field(default_factory=list)


class Job:
    """A handle on one job; cheap to create, everything is read from the Store."""

    def __init__(self, burst: Burst, job_id: str, store: Store, spec: JobSpec | None = None):
        self.burst, self.id, self.store = burst, job_id, store
        self.layout = JobLayout(job_id)
        self._spec = spec
        self._described: tuple[str, float, str] | None = None  # (machine, when, its state): describe() cache
        self._cleaned_up = False
        self._supervisor: Supervisor | None = None

    def __repr__(self) -> str:
        # No state here: a repr stays frozen in the notebook's Out while the job moves on.
        return f"<nbburst.Job {self.spec.name} ({self.id})>"

    @property
    def spec(self) -> JobSpec:
        if self._spec is None:
            try:
                self._spec = JobSpec.from_json(self.store.get(self.layout.spec))
            except NotFound:
                raise JobNotFound(f"job {self.id} does not exist in {self.store.url}") from None
        return self._spec

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def url(self) -> str:
        return f"{self.store.url}/jobs/{self.id}"

    @property
    def machines(self) -> Machines:
        return self.burst.machines(self.spec.backend)

    # -- state --------------------------------------------------------------------
    def terminal(self) -> Terminal | None:
        try:
            return Terminal.from_json(self.store.get(self.layout.terminal))
        except NotFound:
            return None

    def statuses(self) -> list[Status]:
        return [Status.from_json(self.store.get(k)) for k in self.store.list(self.layout.status_prefix)]

    def latest_status(self) -> Status | None:
        keys = self.store.list(self.layout.status_prefix)
        if not keys:
            return None
        try:
            return Status.from_json(self.store.get(keys[-1]))
        except NotFound:
            return None

    @property
    def attempt(self) -> int:
        status = self.latest_status()
        return status.attempt if status else 0

    @property
    def state(self) -> State:
        return self._derive_state()[0]

    @property
    def status(self) -> State:
        """The job's state (``SUBMITTED`` ... ``SUCCEEDED``); an alias of :attr:`state`."""
        return self.state

    def _derive_state(self) -> tuple[State, Status | None, Terminal | None]:
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
        has no ``launched`` time yet), so that a slow launch is never taken for a loss."""
        quiet = QUICK_STALE_SECONDS if (status.launched or status.state == State.RUNNING) else STALE_AFTER_SECONDS
        if time.time() - status.heartbeat <= quiet:
            return False
        return self._machine_state(status) in (GONE, STOPPED)

    def machine_of(self, status: Status | None = None) -> str:
        """The name of the machine of ``status``'s attempt (of the latest attempt by default)."""
        status = status or self.latest_status()
        return status.machine if status and status.machine else machine_name(self.id)

    def _machine_state(self, status: Status, max_age: float = DESCRIBE_SECONDS) -> str:
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

    def _launch(self, attempt: int) -> None:
        """Claim ``attempt`` (create-only, so two supervisors never both launch it) and start it."""
        claim = Status(
            attempt=attempt,
            state=State.PROVISIONING,
            machine=machine_name(self.id),
            message=f"starting {self.spec.plan.get('machine_type', 'machine')}",
        )
        self.store.create(self.layout.status(attempt), claim.to_json())
        try:
            self.start_machine(claim, self.spec)
        except Exception as exc:
            reason = f"could not start the machine: {exc}"
            self._commit(State.FAILED, reason, by="client")
            raise JobFailed(reason) from exc

    def start_machine(self, claim: Status, spec: JobSpec) -> None:
        """Launch (attempt 1) or restart the machine of a claimed attempt, then record when it started.

        Shared by the first launch and the supervisor's relaunches. The launch time is
        written only if the agent has not reported yet: its status is fresher.
        """
        if claim.attempt == 1:
            self.machines.launch(spec, self.url, self.key(), claim.attempt)
        else:
            self.machines.restart(claim.machine, spec, self.url, self.key(), claim.attempt)
        claim.launched = claim.heartbeat = time.time()
        key = self.layout.status(claim.attempt)
        try:
            if Status.from_json(self.store.get(key)).launched == 0:
                self.store.put(key, claim.to_json())
        except NotFound:
            pass

    def _commit(self, state: State, reason: str, by: str) -> State:
        statuses = self.statuses()
        return commit_terminal(
            self.store, self.layout, self.spec, state, reason, statuses[-1].attempt if statuses else 0, by, statuses
        )

    def _cost(self, ended: float | None = None, statuses: list[Status] | None = None) -> dict[str, Any]:
        """Cost so far (or in total, given the end time) by component, and the saving versus on-demand."""
        try:
            return pricing.job_cost(self.spec, self.statuses() if statuses is None else statuses, ended)
        except Exception:  # a cost estimate must never break a job's bookkeeping
            return pricing.cost(pricing.Breakdown(), 0.0)

    def supervise(self) -> State:
        """Relaunch the job if its machine vanished without a verdict (preemption); returns its state.

        Cheap while nothing needs doing; see :mod:`nbburst.client.supervisor` (lease, backoff, history).
        Once the job has ended, makes sure its machine is gone (once per handle)."""
        state = self.supervisor.step()
        if state.terminal and not self._cleaned_up:
            self._cleaned_up = True
            try:  # the agent removes its machine; this covers a VM that could only power itself off
                self.machines.cleanup(self.machine_of())
            except Exception:
                pass
        return state

    @property
    def supervisor(self) -> Supervisor:
        """This handle's supervisor (its lease, relaunch state), made on first use."""
        if self._supervisor is None:
            from .supervisor import Supervisor

            self._supervisor = Supervisor(self)
        return self._supervisor

    def attempts(self) -> list[dict[str, Any]]:
        """The attempts so far, oldest first (state, start, end, machine, message)."""
        from .supervisor import attempts

        return attempts(self)

    # -- waiting and output -------------------------------------------------------------
    def tail(self) -> LogTail:
        return LogTail(self.store, self.layout)

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
            time.sleep(delay)

    def logs(self, attempt: int | None = None) -> str:
        """The job's output as text (all attempts, or one)."""
        return "".join(render_text(r) for r in self.tail().records(attempt))

    def cancel(self, wait_s: float = 15.0) -> State:
        """Stop the job: the machine is deleted and the state is CANCELLED, unless it already ended."""
        if self.terminal():
            return self.terminal().state  # type: ignore[union-attr]
        try:
            self.store.create(self.layout.cancel, json.dumps({"at": time.time()}).encode())
        except AlreadyExists:
            pass
        end = time.monotonic() + wait_s
        while time.monotonic() < end and self.terminal() is None:
            if self.latest_status() is None or self.machines.describe(self.machine_of()).state in (GONE, STOPPED):
                break
            time.sleep(0.1)
        state = self._commit(State.CANCELLED, "cancelled by the user", by="client")
        self.machines.delete(machine_name(self.id))
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
    def outcome(self) -> CellResult:
        """The cell's result, or raise its exception; the job must have ended."""
        __tracebackhide__ = True
        state = self.state
        if state == State.SUCCEEDED:
            data = signing.verify(self.key(), self.store.get(self.layout.result), f"result of job {self.id}")
            return CellResult(**payload.decode(bytearray(data)))
        if not state.terminal:
            raise JobFailed(f"job {self.id} has not finished (it is {state.value})", state.value)
        if self.store.exists(self.layout.error) and state == State.FAILED:
            raise_remote(self.remote_error())
        reason = self.terminal().reason if self.terminal() else state.value  # type: ignore[union-attr]
        if state == State.CANCELLED:
            raise JobCancelled(f"job {self.id} was cancelled: {reason}")
        raise JobFailed(f"job {self.id} failed: {reason}")

    def remote_error(self) -> dict[str, Any]:
        return read_error(self.store, self.layout, self.key())

    def result(self, timeout: float | None = None) -> Any:
        """Wait, then return the value (``submit``) or the dict of variables (a cell)."""
        state = self.wait(timeout)
        if not state.terminal:
            raise TimeoutError(f"job {self.id} is still {state.value} after {timeout} s")
        return self.value_of(self.outcome())

    def value_of(self, outcome: CellResult) -> Any:
        """What the job gives back: a ``submit`` call's return value, or a cell's variables."""
        return outcome.last if self.spec.kind == "call" else outcome.values

    def info(self) -> dict[str, Any]:
        """A JSON-ready summary for tables, the REST API and the sidebar."""
        state, status, terminal = self._derive_state()
        plan = self.spec.plan or {}
        statuses = self.statuses() if status else []
        started = next((s.started for s in statuses if s.state != State.PROVISIONING), None)
        ended = terminal.at if terminal else None
        elapsed = max(0.0, (ended or time.time()) - (started or self.spec.created))
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
            "progress": status.progress if status else None,
            "message": (terminal.reason if terminal else status.message if status else ""),
        }


def raise_remote(info: dict[str, Any]) -> None:
    """Raise the remote exception here, with a traceback through the cell's own lines."""
    __tracebackhide__ = True
    filename, source = info.get("filename"), info.get("source") or []
    if filename:
        linecache.cache[filename] = (sum(map(len, source)), None, source, filename)
    exc = info.get("exc")
    if isinstance(exc, BaseException):
        raise exc
    raise RemoteError(info["type"], info["message"], info.get("traceback", ""))


class LogTail:
    """Reads a job's log chunks in order, each once, across attempts."""

    def __init__(self, store: Store, layout: JobLayout):
        self.store, self.layout = store, layout
        self.seen: set[str] = set()

    def _keys(self, attempt: int | None = None) -> list[str]:
        prefix = self.layout.attempt_logs(attempt) if attempt else self.layout.logs_prefix
        return self.store.list(prefix)

    def poll(self) -> Iterator[dict[str, Any]]:
        for key in self._keys():
            if key in self.seen:
                continue
            self.seen.add(key)
            attempt = int(key.split("/")[-2])
            if key.endswith("/00000000") and attempt > 1:
                yield {"s": "event", "x": f"--- attempt {attempt} ---\n", "attempt": attempt}
            for record in decode_records(self.store.get(key)):
                record["attempt"] = attempt
                yield record

    def records(self, attempt: int | None = None) -> list[dict[str, Any]]:
        """All records (of one attempt), with a marker where each attempt after the first began."""
        out: list[dict[str, Any]] = []
        for key in self._keys(attempt):
            number = int(key.split("/")[-2])
            if key.endswith("/00000000") and number > 1 and attempt is None:
                out.append({"s": "event", "x": f"--- attempt {number} ---\n", "attempt": number})
            out.extend(decode_records(self.store.get(key)))
        return out


def render_text(record: dict[str, Any]) -> str:
    kind = record.get("s")
    if kind in ("stdout", "stderr"):
        return record.get("x", "")
    if kind == "display":
        mimes = ", ".join(sorted(record.get("data", {})))
        return f"[display: {mimes}]\n"
    if kind == "event":
        text = record.get("x", "")
        return text if text.endswith("\n") else text + "\n"
    return ""
