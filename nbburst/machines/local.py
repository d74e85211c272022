"""LocalMachines: each machine is the agent in a process group of its own.

A registry file per machine (pid, process start time, job, attempt) lets a
restarted kernel, the CLI or the Jupyter server find and stop machines it did
not start; the start time guards against a recycled pid. Records are written
and removed under a lock of their own, and removed only by whoever still sees
the record it acted on: a preemption that ends attempt N never removes the
record of attempt N+1, launched meanwhile by a supervisor.

Every process of a machine carries its attempt's marker (``$NBBURST_ATTEMPT``,
see agent/attempt/spawn.py), so deleting or preempting a machine also ends what left
its process groups (``setsid``, a double fork): a machine that is gone runs
nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from .. import config
from ..errors import UnsupportedOption, UsageError
from ..protocol import processes
from ..protocol.job import (
    ENV_ATTEMPT,
    ENV_CPUS,
    ENV_JOB_KEY,
    ENV_MACHINE,
    ENV_WORKER,
    JobSpec,
    Resources,
    attempt_tag,
    worker_id,
)
from .base import GONE, RUNNING, Check, MachineInfo, Machines, Plan, SessionLaunch, machine_name, worker_name

THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "LOKY_MAX_CPU_COUNT",
)
_GCE_ONLY = ("machine_type", "zone", "image", "image_family")
#: The environment variable in which a session's warm parent finds the session's token.
SESSION_TOKEN = "NBBURST_SESSION_TOKEN"


def available_cpus() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _machine_env(name: str, cpus: list[int], tag: str) -> dict[str, str]:
    """The environment of a machine's first process: this one's, pinned to ``cpus``, marked with ``tag``."""
    env = dict(os.environ)
    for var in THREAD_VARS:
        env[var] = str(len(cpus))
    env.update(
        {
            ENV_MACHINE: name,
            ENV_ATTEMPT: tag,  # marks every process of the attempt
            ENV_CPUS: ",".join(map(str, cpus)),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("MPLBACKEND", None)
    return env


class LocalMachines(Machines):
    backend = "local"
    scale_out = True  # worker machines are agent processes too (launch_worker)
    session_transport = "socket"  # a session's warm parent listens on a Unix socket of this computer

    def __init__(self, settings: config.NBBurst):
        self.settings = settings
        self.folder = config.state_dir(settings) / "machines"

    # -- planning -----------------------------------------------------------
    def plan(self, resources: Resources) -> Plan:
        for option in _GCE_ONLY:
            if getattr(resources, option):
                flag = "--" + option.replace("_", "-")
                raise UnsupportedOption(f"{flag} applies to Compute Engine machines only; use --backend gce")
        if resources.gpu:
            raise UnsupportedOption("--gpu: the local backend has no GPUs; use --backend gce")
        self.check_workers(resources)
        cpus = available_cpus()
        cores = resources.cores or len(cpus)
        if cores > len(cpus):
            raise UsageError(
                f"--cores {cores}: this machine has only {len(cpus)} CPUs for the local backend; "
                f"ask for at most {len(cpus)}, or use --backend gce for a bigger machine"
            )
        total_gb = psutil.virtual_memory().total / 2**30
        if resources.memory_gb and resources.memory_gb > total_gb:
            raise UsageError(
                f"--memory {resources.memory_gb:g}: this machine has {total_gb:.1f} GB; "
                "ask for less, or use --backend gce"
            )
        return Plan(
            machine_type="local",
            cores=cores,
            memory_gb=round(total_gb, 1),
            spot=False,
            reason=f"local process group pinned to {cores} of {len(cpus)} CPUs",
            price_per_hour=0.0,
            on_demand_price_per_hour=0.0,
            extra={"cpus": cpus[:cores]},
        )

    # -- lifecycle ----------------------------------------------------------
    def _record(self, name: str) -> Path:
        return self.folder / f"{name}.json"

    def console_path(self, name: str) -> Path:
        return self.folder / f"{name}.console"

    @contextlib.contextmanager
    def _locked(self, name: str) -> Iterator[None]:
        """Hold the lock of ``name``'s record (across processes: kernel, CLI, server, supervisors)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder / f".{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _forget(self, name: str, record: dict) -> None:
        """Remove ``name``'s record if it is still ``record`` (not one written meanwhile for a later attempt)."""
        with self._locked(name):
            now = self._load(name)
            if now is not None and (now["pid"], now["started"]) == (record["pid"], record["started"]):
                self._record(name).unlink(missing_ok=True)

    def _sweep(self, record: dict) -> None:
        """End what is left of ``record``'s attempt (and of earlier ones) outside its process groups."""
        attempt = int(record.get("attempt") or 0)
        processes.sweep(record.get("marker") or record["job_id"], lambda n: n <= attempt)

    def launch(self, spec: JobSpec, job_url: str, key: bytes, attempt: int) -> str:
        return self._start(machine_name(spec.job_id), spec, job_url, key, attempt)

    def launch_worker(self, spec: JobSpec, job_url: str, key: bytes, index: int, attempt: int) -> str:
        """A worker machine: an agent process group of its own serving a Dask worker, marked apart from the job's
        (``worker_id``) so that ending either never ends the other."""
        name = worker_name(spec.job_id, index)
        self.delete(name)
        return self._start(name, spec, job_url, key, attempt, worker=index)

    def _start(
        self, name: str, spec: JobSpec, job_url: str, key: bytes, attempt: int, worker: int | None = None
    ) -> str:
        cpus = spec.plan.get("extra", {}).get("cpus") or available_cpus()[: spec.resources.cores or None]
        marker = spec.job_id if worker is None else worker_id(spec.job_id, worker)
        env = _machine_env(name, cpus, attempt_tag(marker, attempt))
        env[ENV_JOB_KEY] = key.hex()
        if worker is not None:
            env[ENV_WORKER] = str(worker)
        command = [sys.executable, "-m", "nbburst.agent", job_url]
        return self._run(name, command, env, {"job_id": spec.job_id, "attempt": attempt, "marker": marker}, cpus)

    def launch_session(self, request: SessionLaunch) -> str:
        """Start machine ``request.machine``, a boot of a session: its warm parent (``python -m
        nbburst.agent.session.parent``, agent/session/parent.py) listening on ``request.socket`` and
        ``request.control``, marked with the session id and the boot as an attempt is with its job, so deleting the
        machine ends every cell it ran, and never a later boot's."""
        attempt = request.boot + 1  # attempts count from 1
        cpus = list((request.plan.get("extra") or {}).get("cpus") or [])
        env = {
            **_machine_env(request.machine, cpus, attempt_tag(request.session_id, attempt)),
            SESSION_TOKEN: request.token,
        }
        argv = [request.socket, "--control", request.control, "--idle", str(request.idle_s)]
        argv += ["--until", str(request.until)]
        if request.preload:
            argv += ["--preload", ",".join(request.preload)]
        command = [sys.executable, "-m", "nbburst.agent.session.parent", *argv]
        fields = {"job_id": request.session_id, "attempt": attempt, "marker": request.session_id}
        return self._run(request.machine, command, env, fields, cpus)

    def _run(self, name: str, command: list[str], env: dict[str, str], fields: dict, cpus: list[int]) -> str:
        """Start a machine's process group and record it (``fields``: job_id, attempt, marker)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        console = open(self.console_path(name), "ab")
        proc = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            cwd=str(self.folder),
        )
        console.close()
        # Reap the child when it exits so it never lingers as a zombie in the kernel.
        threading.Thread(target=proc.wait, daemon=True, name=f"reap-{name}").start()
        started = psutil.Process(proc.pid).create_time()
        record = {
            "name": name,
            "pid": proc.pid,
            "started": started,
            "created": time.time(),
            "cores": len(cpus),
            **fields,
        }
        with self._locked(name):
            tmp = self._record(name).with_suffix(".tmp")
            tmp.write_text(json.dumps(record))
            tmp.replace(self._record(name))
        return name

    def restart(self, name: str, spec: JobSpec, job_url: str, key: bytes, attempt: int) -> str:
        self.delete(name)
        return self.launch(spec, job_url, key, attempt)

    def _process(self, record: dict) -> psutil.Process | None:
        try:
            proc = psutil.Process(record["pid"])
            if abs(proc.create_time() - record["started"]) > 0.01 or proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except psutil.Error:
            return None

    def _load(self, name: str) -> dict | None:
        try:
            return json.loads(self._record(name).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def describe(self, name: str) -> MachineInfo:
        record = self._load(name)
        if record is None:
            return MachineInfo(name=name, job_id="", state=GONE)
        alive = self._process(record) is not None
        return MachineInfo(
            name=name,
            job_id=record["job_id"],
            state=RUNNING if alive else GONE,
            attempt=record.get("attempt", 0),
            created=record.get("created", 0.0),
            detail=f"pid {record['pid']}",
            labels={"nbburst-job": record["job_id"]},
        )

    def _group(self, record: dict) -> list[psutil.Process]:
        proc = self._process(record)
        if proc is None:
            return []
        try:
            return [proc, *proc.children(recursive=True)]
        except psutil.Error:
            return [proc]

    def _signal_all(self, procs: list[psutil.Process], sig: int) -> None:
        groups = set()
        for p in procs:
            try:
                groups.add(os.getpgid(p.pid))
            except OSError:
                pass
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except OSError:
                pass

    def delete(self, name: str) -> None:
        record = self._load(name)
        if record is None:
            return
        procs = self._group(record)
        self._signal_all(procs, signal.SIGKILL)
        psutil.wait_procs(procs, timeout=5)
        self._sweep(record)
        self._forget(name, record)

    def cleanup(self, name: str) -> None:
        """The job has ended: a live agent ends itself; what a dead one left behind (its cell's processes that
        had left their group) goes now."""
        record = self._load(name)
        if record is not None and self._process(record) is None:
            self._sweep(record)
            self._forget(name, record)

    def preempt(self, name: str, grace_s: float) -> None:
        record = self._load(name)
        if record is None or self._process(record) is None:
            raise UsageError(f"machine {name} does not exist (the job is not running)")
        procs = self._group(record)
        self._signal_all(procs[:1], signal.SIGTERM)  # soft-off: the agent's group
        psutil.wait_procs(procs[:1], timeout=grace_s)
        procs = [p for p in procs + self._group(record) if p.is_running()]  # what it started meanwhile
        self._signal_all(procs, signal.SIGKILL)
        psutil.wait_procs(procs, timeout=5)
        self._sweep(record)
        self._forget(name, record)

    def list(self, job_id: str | None = None) -> list[MachineInfo]:
        if not self.folder.is_dir():
            return []
        out = []
        for path in sorted(self.folder.glob("*.json")):
            info = self.describe(path.stem)
            if info.state == GONE:
                record = self._load(path.stem)
                if record is not None:
                    self._sweep(record)
                    self._forget(path.stem, record)
                continue
            if job_id is None or info.job_id == job_id:
                out.append(info)
        return out

    def doctor(self) -> list[Check]:
        checks = []
        probe = subprocess.run(
            [sys.executable, "-c", "import nbburst.agent.attempt.controller, sys; print(sys.version.split()[0])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        checks.append(
            Check(
                "python",
                probe.returncode == 0,
                f"{sys.executable} (Python {probe.stdout.strip() or '?'}) runs the agent"
                if probe.returncode == 0
                else f"{sys.executable} cannot import the agent: {probe.stderr.strip().splitlines()[-1:]}",
                fix="" if probe.returncode == 0 else "reinstall nbburst in this environment (pip install nbburst)",
            )
        )
        cpus = available_cpus()
        checks.append(Check("cpus", True, f"{len(cpus)} CPUs for local machines (--cores up to {len(cpus)})"))
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            probe_file = self.folder / ".doctor"
            probe_file.write_text("ok")
            probe_file.unlink()
            checks.append(Check("machine registry", True, str(self.folder)))
        except OSError as exc:
            checks.append(
                Check(
                    "machine registry",
                    False,
                    f"{self.folder}: {exc}",
                    fix="set a writable state_dir (c.NBBurst.state_dir or $NBBURST_STATE_DIR)",
                )
            )
        return checks

    def console(self, name: str) -> str:
        try:
            return self.console_path(name).read_text(errors="replace")
        except FileNotFoundError:
            return ""
