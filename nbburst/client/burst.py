"""The client API: ``Burst`` (a configured session) and ``Job`` (a handle on one job).

Every front end (magic, widgets, CLI, server) goes through here; nothing here
knows about front ends. A Job is just a job id and a Store: all its state is
read from the Store, which is why a restarted kernel, the CLI and the Jupyter
server all see the same jobs.
"""

from __future__ import annotations

import json
import linecache
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__, config
from ..errors import CaptureError, JobCancelled, JobFailed, JobNotFound, RemoteError, UsageError
from ..machines import Machines, open_machines
from ..machines.base import GONE, STOPPED, machine_name
from ..options import CELL_OPTIONS, Options, api_keywords, file_destination, split_api_options
from ..protocol import backends, budget, fence, payload, pricing, signing, sources, transfer, workfiles
from ..protocol import state as process_state
from ..protocol.env import manifest, manifest_json
from ..protocol.folder import JobFolder
from ..protocol.imports import imported_by
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
    attempt_marker,
    blob_key,
    job_id_time,
    job_url,
    jobs_prefix,
    new_job_id,
    record_text,
    valid_job_id,
)
from ..protocol.outcome import commit_terminal, holds_verdict, read_error, verdict_object
from ..store import AlreadyExists, NotFound, Store, open_store
from . import files, importahead, resume, workers
from .capture import Capture, unpicklable_message
from .session.manager import Session, Sessions
from .supervision import laptop

if TYPE_CHECKING:
    from .supervision.supervisor import Supervisor  # it imports this module: made lazily in Job.supervisor

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
        self.sessions = Sessions(self)

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

    def options(self, **given: Any) -> Options:
        """Options with the configured defaults filled in: each option declared ``configured`` and not given
        takes the setting of its name."""
        for option in CELL_OPTIONS:
            if option.configured:
                given.setdefault(option.name, getattr(self.settings, option.name))
        return Options.build(**given)

    # -- submission -------------------------------------------------------------
    def submit_cell(self, code: str, cap: Capture, options: Options) -> Job:
        """Submit an (IPython-transformed) cell whose inputs were captured; its values come back to
        the namespace they were captured from."""
        extra = {"submodules": cap.submodules, "track": True, "returns": cap.returns}
        options = cap.staged(options)  # the files beside the notebook that the cell names
        job = self._submit(
            "cell",
            code,
            cap.values,
            cap.modules,
            options,
            cap.outputs,
            cap.deletes,
            extra,
            cap.optional,
            cap.namespace,
            cap.imports,
        )
        job.namespace = cap.namespace
        job.imports_ahead = importahead.start(code)
        return job

    def submit(self, fn: Callable[..., Any], *args: Any, options: Options | None = None, **kwargs: Any) -> Job:
        """Run ``fn(*args, **kwargs)`` on a machine; ``Job.result()`` is its return value."""
        if not callable(fn):
            raise UsageError(f"submit() needs a function, got {type(fn).__name__}")
        values = {"__fn__": fn, "__args__": args, "__kwargs__": kwargs}
        return self._submit("call", "", values, {}, options or self.options(), None, [], {})

    def _submit(
        self,
        kind: str,
        code: str,
        values: dict[str, Any],
        modules: dict[str, str],
        options: Options,
        outputs: list[str] | None,
        deletes: list[str],
        extra: dict[str, Any],
        optional: frozenset[str] = frozenset(),
        namespace: dict[str, Any] | None = None,
        imports: Iterable[str] = (),
    ) -> Job:
        """``extra``: more entries of inputs.json (submodules, which inputs to watch); ``optional``: values
        that stay behind if they cannot be pickled; ``namespace``: where the values come from; ``imports``:
        modules the job imports (the notebook's own travel with it as files, :mod:`nbburst.protocol.sources`)."""
        session = self.sessions.for_cell(options)  # a warm session's machine, up (client/session/), if any
        machines = self.machines(options.backend)
        plan = machines.plan(options.resources)  # refuses what the backend cannot do, before anything else
        machines.check_environment(code, modules.values())  # and a package the cell needs that it cannot install
        pricing.price_plan(plan, options.backend, self.settings)
        count = 1 + (options.resources.workers or 0)  # the job's machine and its workers
        budget.check_plan(options.budget_usd, plan, options.backend, count)  # too small to boot them: refused
        store = self.store_for(options.backend)
        source = self._resume_source(store, options.resume)
        if source is not None:
            options = replace(options, resume=source.id)  # the spec names it by id: names repeat
        inner: dict[str, dict[int, Any]] = {}  # the objects inside each input: results may refer to them
        named = {*imports, *modules.values()}  # and the modules of what the inputs hold
        encoded = _encode_all(values, optional, namespace, inner, named)
        inputs = {"modules": modules, **extra, "state": _encode_state()}
        if own := sources.collect(named):
            inputs["sources"] = sources.encode(own)
        files = _check_files(options.files)
        if options.name and self._find_by_name(store, options.name, running_only=True):
            raise UsageError(f"--name: a job called {options.name!r} is still running; pick another name")
        job_id = new_job_id()
        layout = JobLayout(job_id)
        key = self.keyring.create(job_id, store.url)
        try:
            if source is not None:  # its checkpoints, verified and sealed again for this job (before its spec)
                resume.carry_over(source.folder, JobFolder(store, layout, key))
            spec = self._write_job(
                store, layout, key, kind, code, encoded, inputs, files, options, outputs, deletes, plan.to_dict()
            )
        except BaseException:
            store.delete_prefix(layout.prefix)  # no half-written job
            self.keyring.delete(job_id)
            raise
        job = self.handle(store, job_id, spec)
        job.inner = inner
        job.session = session
        job.cell_imports = imported_by(code) if kind == "cell" and session is not None else []
        job.launch(attempt=1)
        if self.settings.background_supervisor and not backends.is_remote(options.backend):
            laptop.ensure(self.settings, store.url)  # machines that only a supervisor on this computer relaunches
        try:  # a cloud's own supervisor: relaunches with the laptop shut
            machines.ensure_watcher(store, spec)
        except Exception as exc:  # the job runs; only its relaunch while no notebook runs is at stake
            logging.getLogger("nbburst").warning(
                "nbburst: job %s: no watcher relaunches it while no notebook runs: %s", job_id, exc
            )
        return job

    def _write_job(
        self,
        store: Store,
        layout: JobLayout,
        key: bytes,
        kind: str,
        code: str,
        encoded: dict[str, payload.Encoded],
        inputs: dict[str, Any],
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

        # The manifest of the inputs: modules by name, values (and any other blob) by address.
        inputs = {k: upload_blob(store, v) if isinstance(v, payload.Encoded) else v for k, v in inputs.items()}
        inputs["values"] = {name: upload_blob(store, enc) for name, enc in encoded.items()}
        put("code.py", code.encode())
        put("inputs.json", json.dumps(inputs, indent=1).encode())
        put("env.json", manifest_json())
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
            workdir_tail=workfiles.workdir_tail(Path.cwd(), files),
            owner=config.owner(self.settings),
            client_version=__version__,
            python=manifest()["python"],
            digests=digests,
            plan=plan,
            resumed_from=options.resume or "",
            budget_usd=options.budget_usd,
        )
        JobFolder(store, layout, key).create_record(layout.spec, spec.to_json())  # written last: now the job exists
        return spec

    def _resume_source(self, store: Store, ref: str | None) -> Job | None:
        """The job ``--resume`` names, in ``store``; refused before anything is written when it is unknown, has no
        checkpoints, or cannot be verified here."""
        if ref is None:
            return None
        if valid_job_id(ref) and store.exists(JobLayout(ref).spec):
            source = self.handle(store, ref)
        else:
            source = self._find_by_name(store, ref)
        if source is None:
            raise resume.ResumeRefused(
                f"--resume: no job with id or name {ref!r} in {store.url}; `%burst jobs` lists them"
            )
        try:
            source.spec  # noqa: B018 - verifies the job is this key ring's and genuine
        except signing.SignatureError as exc:
            raise resume.ResumeRefused(
                f"--resume: job {ref} cannot be verified here, so neither can its checkpoints: {exc}"
            ) from None
        resume.check_source(source.folder)
        return source

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
            try:
                if job.spec.name == name and (not running_only or not job.state.terminal):
                    return job
            except signing.SignatureError:
                continue  # a name that cannot be verified here names nothing
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


@api_keywords
def submit(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Job:
    """Run ``fn(*args, **kwargs)`` on a machine and return a :class:`Job` (``nbburst.submit``).

    Keywords named like an option of ``nbburst.submit`` (docs/options.md: ``cores``, ``timeout``,
    ``resume=JOB`` to begin with that job's latest checkpoints, ``budget=2.50`` for a dollar cap on its
    machines...) configure the launch as the ``%%burst`` flags do; anything else is passed to ``fn``.
    """
    burst = Burst()
    given, kwargs = split_api_options(kwargs)
    return burst.submit(fn, *args, options=burst.options(**given), **kwargs)


def _encode_all(
    values: dict[str, Any],
    optional: frozenset[str] = frozenset(),
    namespace: dict[str, Any] | None = None,
    inner: dict[str, dict[int, Any]] | None = None,
    named: set[str] | None = None,
) -> dict[str, payload.Encoded]:
    """Every input as a blob (see :func:`transfer.encode_inputs`); one that cannot be pickled stops the
    submission, naming it, unless it is ``optional``."""
    encoded, failed = transfer.encode_inputs(values, optional, namespace, inner, named)
    for name, exc in failed.items():
        if name not in optional:
            shown = "a function argument" if name.startswith("__") else name
            raise CaptureError(unpicklable_message(shown, values[name], exc)) from None
    return encoded


def _encode_state() -> payload.Encoded:
    """The process state the cell relies on (:mod:`nbburst.protocol.state`)."""
    return payload.encode(process_state.capture())


def user_namespace() -> dict[str, Any]:
    """The namespace results come back to by default: the IPython kernel's, else ``__main__``'s."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell.user_ns if shell is not None else sys.modules["__main__"].__dict__


def _check_files(paths: list[str]) -> dict[str, Path]:
    files = {}
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.is_file():
            raise UsageError(f"--files: {raw!r} is not a file (folders: pass each file, or archive them)")
        files[file_destination(raw)] = path
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
    state: dict[str, Any] = field(default_factory=dict)  # process state the cell changed
    failed: dict[str, str] = field(default_factory=dict)  # name -> why it could not come back (also in warnings)

    @classmethod
    def load(cls, data: bytes, namespace: dict[str, Any], inner: dict[str, dict[int, Any]] | None = None) -> CellResult:
        """Unpickle a result into ``namespace``'s terms (see :mod:`nbburst.protocol.transfer`): value by
        value, so one that cannot come back is a warning, not the loss of the others. ``inner``: the objects
        inside the inputs as they were sent, which the result may update in place."""
        loaded = transfer.load_values(data, namespace, inner)
        meta, values = loaded.meta, loaded.values
        has_last = meta["has_last"] and transfer.LAST in values
        last = values.pop(transfer.LAST, None)
        failed = [
            f"{'the value of the cell (Out)' if name == transfer.LAST else repr(name)} could not come back: {why}"
            for name, why in loaded.failed.items()
        ]
        return cls(
            values=values,
            deleted=meta["deleted"],
            has_last=has_last,
            last=last,
            last_bundle=meta.get("last_bundle"),
            warnings=[*meta["warnings"], *failed],
            state=meta.get("state", {}),
            failed=dict(loaded.failed),
        )

    def merge_into(self, namespace: dict[str, Any]) -> None:
        """Bind the values, drop the deleted names, apply the process state, as the cell would have."""
        namespace.update(self.values)
        for name in self.deleted:
            namespace.pop(name, None)
        self.warnings += process_state.restore(self.state)


class Job:
    """A handle on one job; cheap to create, everything is read from the Store."""

    def __init__(self, burst: Burst, job_id: str, store: Store, spec: JobSpec | None = None):
        self.burst, self.id, self.store = burst, job_id, store
        self.layout = JobLayout(job_id)
        self._spec = spec
        self.namespace: dict[str, Any] | None = None  # where a cell's values come back to (set at submission)
        self.inner: dict[str, dict[int, Any]] = {}  # objects inside its inputs as sent (set at submission)
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
        if state.terminal and not self._cleaned_up:
            self._cleaned_up = True
            try:  # the agent removes its machine; this covers a VM that could only power itself off
                self.machines.cleanup(self.machine_of())
                workers.end_all(self)
            except Exception:
                pass
        return state

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
    def outcome(self, namespace: dict[str, Any] | None = None) -> CellResult:
        """The cell's result, or raise its exception; the job must have ended.

        Values are unpickled for ``namespace`` (by default the one the cell was captured from, else the
        kernel's): notebook functions bind to it, unchanged inputs are its own objects, changed ones are
        updated in it in place. Binding the names is :meth:`CellResult.merge_into`'s job."""
        __tracebackhide__ = True
        state = self.state
        if state == State.SUCCEEDED:
            try:  # sealed at the attempt that held the job: a superseded attempt's or a forged one is refused
                data = verdict_object(self.folder, self.layout.result)[1]
            except NotFound:
                missing = f"job {self.id} succeeded but its result.pkl is missing from the Store"
                raise JobFailed(missing, state.value) from None
            target = namespace if namespace is not None else self.namespace
            if self.imports_ahead is not None:
                self.imports_ahead.join()  # its modules are the values' modules: imported by one thread at a time
            return CellResult.load(data, target if target is not None else user_namespace(), self.inner)
        if not state.terminal:
            raise JobFailed(f"job {self.id} has not finished (it is {state.value})", state.value)
        if state == State.FAILED and holds_verdict(self.folder, self.layout.error):  # not a superseded one
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
        "message": f"cannot verify: {reason}",
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
    """Reads a job's log chunks in order, each once, across attempts; a forged chunk is shown as refused."""

    def __init__(self, folder: JobFolder):
        self.folder, self.store, self.layout = folder, folder.store, folder.layout
        self.seen: set[str] = set()

    def _read(self, keys: list[str], markers: bool) -> Iterator[dict[str, Any]]:
        """The records of these chunks, each tagged with its attempt; a marker where each attempt after
        the first begins."""
        for key in keys:
            attempt = int(part) if (part := key.split("/")[-2]).isdigit() else 0
            if markers and attempt > 1 and key.endswith("/00000000"):
                yield attempt_marker(attempt)
            for record in self.folder.log_records(key):
                record["attempt"] = attempt
                yield record

    def poll(self) -> Iterator[dict[str, Any]]:
        """The records of the chunks not read before."""
        fresh = [key for key in self.store.list(self.layout.logs_prefix) if key not in self.seen]
        for key in fresh:
            self.seen.add(key)
            yield from self._read([key], markers=True)

    def records(self, attempt: int | None = None) -> list[dict[str, Any]]:
        """All records (of one attempt), with a marker where each attempt after the first began."""
        prefix = self.layout.attempt_logs(attempt) if attempt else self.layout.logs_prefix
        return list(self._read(self.store.list(prefix), markers=attempt is None))
