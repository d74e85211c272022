"""The client API: ``Burst``, a configured client (settings, the Store, the machines, the key ring), and
``submit``, the Python API (``nbburst.submit``).

Every front end (magic, widgets, CLI, server) goes through here; nothing here knows about front ends. A
submission is checked, its inputs uploaded, its spec written last and its machine launched here; from then
on the job is a :class:`~.job.Job` handle.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import __version__, config
from ..errors import JobNotFound, UsageError
from ..machines import Machines, open_machines
from ..options import CELL_OPTIONS, Options, api_keywords, split_api_options
from ..protocol import backends, budget, celllines, payload, pricing, signing, sources, workfiles
from ..protocol.env import manifest, manifest_json
from ..protocol.folder import JobFolder
from ..protocol.imports import imported_by
from ..protocol.job import JobLayout, JobSpec, jobs_prefix, new_job_id, valid_job_id
from ..store import Store, open_store
from . import importahead, keep, resume
from .capture import Capture
from .job import Job
from .session.manager import Sessions
from .submission import check_files, encode_all, encode_state, upload_blob, upload_file
from .supervision import laptop


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
        extra = {
            "submodules": cap.submodules,
            "track": True,
            "returns": cap.returns,
            "history": cap.history,
            "count": cap.count,
        }
        if lines := celllines.collect(cap.values):  # the earlier cells its functions and classes were defined in
            extra["lines"] = lines
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
            cap.code_name,
        )
        job.namespace = cap.namespace
        job.replayable = cap.replayable
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
        code_name: str = "",
    ) -> Job:
        """``extra``: more entries of inputs.json (submodules, which inputs to watch); ``optional``: values
        that stay behind if they cannot be pickled; ``namespace``: where the values come from; ``imports``:
        modules the job imports (the notebook's own travel with it as files, :mod:`nbburst.protocol.sources`);
        ``code_name``: the kernel's name for the cell's code, which the machine compiles it under."""
        session = keep.session_for(self, options)  # a warm session's or a kept machine, up, if any
        try:
            machines = self.machines(options.backend)
            # refuses what the backend cannot do, before anything else; a session's cell runs on its machine
            plan = machines.plan(options.resources) if session is None else session.plan()
            # and a package the cell needs that it cannot install (a session's machine installs nothing per cell:
            # its environment came with its start)
            if session is None:
                machines.check_environment(code, modules.values())
            pricing.price_plan(plan, options.backend, self.settings)
            count = 1 + (options.resources.workers or 0)  # the job's machine and its workers
            budget.check_plan(options.budget_usd, plan, options.backend, count)  # too small to boot them: refused
            store = self.store_for(options.backend)
            source = self._resume_source(store, options.resume)
            if source is not None:
                options = replace(options, resume=source.id)  # the spec names it by id: names repeat
            inner: dict[str, dict[int, Any]] = {}  # the objects inside each input: results may refer to them
            named = {*imports, *modules.values()}  # and the modules of what the inputs hold
            encoded = encode_all(values, optional, namespace, inner, named)
            deletes = [n for n in deletes if n in encoded or n not in optional]  # an unsent one: cannot tell
            inputs = {"modules": modules, **extra, "state": encode_state()}
            if own := sources.collect(named):
                inputs["sources"] = sources.encode(own)
            files = check_files(options.files)
            if options.name and self._find_by_name(store, options.name, running_only=True):
                raise UsageError(f"--name: a job called {options.name!r} is still running; pick another name")
            job_id = new_job_id()
            layout = JobLayout(job_id)
            key = self.keyring.create(job_id, store.url)
            written = store if session is None else session.cell_store(store, layout)  # may travel with the cell
            try:
                if source is not None:  # its checkpoints, verified and sealed again for this job (before its spec)
                    resume.carry_over(source.folder, JobFolder(written, layout, key), source.label)
                spec = self._write_job(
                    written,
                    layout,
                    key,
                    kind,
                    code,
                    encoded,
                    inputs,
                    files,
                    options,
                    outputs,
                    deletes,
                    plan.to_dict(),
                    code_name,
                )
            except BaseException:
                store.delete_prefix(layout.prefix)  # no half-written job
                self.keyring.delete(job_id)
                raise
            job = self.handle(written, job_id, spec)
            job.inner = inner
            job.session = session
            job.cell_imports = imported_by(code) if kind == "cell" and session is not None else []
            job.launch(attempt=1)
        except BaseException:
            if session is not None:  # the cell was refused or interrupted before it reached the session
                session.release()
            raise
        if self.settings.background_supervisor and not backends.is_remote(options.backend):
            laptop.ensure(self.settings, store.url)  # machines that only a supervisor on this computer relaunches
        if session is None:
            _ensure_watcher(machines, store, spec)
        else:  # a warm cell's way stays as short as its machine is near: the check only guards a relaunch
            threading.Thread(
                target=_ensure_watcher, args=(machines, store, spec), name="nbburst-watcher-check", daemon=True
            ).start()
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
        code_name: str = "",
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
            folders=workfiles.subfolders(Path.cwd()),
            owner=config.owner(self.settings),
            client_version=__version__,
            python=manifest()["python"],
            digests=digests,
            plan=plan,
            resumed_from=options.resume or "",
            budget_usd=options.budget_usd,
            kept_s=options.keep_s or 0.0,
            code_name=code_name,
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
        resume.check_source(source.folder, source.label)
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


def _ensure_watcher(machines: Machines, store: Store, spec: JobSpec) -> None:
    """Make sure a cloud's own supervisor runs, which relaunches ``spec``'s job with the laptop shut."""
    try:
        machines.ensure_watcher(store, spec)
    except Exception as exc:  # the job runs; only its relaunch while no notebook runs is at stake
        logging.getLogger("nbburst").warning(
            "nbburst: job %s: no watcher relaunches it while no notebook runs: %s", spec.job_id, exc
        )
