"""``--workers N``: a Dask scheduler beside the cell, worker machines that join it, and the cell's client.

Scale-out runs on an existing engine (dask.distributed), not on scheduling of
our own. Three parts, one per process:

* the job's agent starts the **scheduler** (:func:`start_scheduler`) as a child
  made by :mod:`.spawn` (its own session, dies with the agent, carries the
  attempt's marker), and writes its address to the attempt's ``cluster`` record
  in the job folder (sealed: a worker joins no scheduler the job did not start);
* the **runner** connects before the cell runs (:func:`connect`): the client is
  the default one (``distributed.get_client()``) and joblib's default backend is
  Dask, so ``n_jobs=-1`` in scikit-learn spreads over every worker;
* each **worker machine** runs ``python -m nbburst.agent JOB_URL`` with its index
  (:func:`serve_worker`): it serves a Dask worker to the newest attempt's
  scheduler, joins the next attempt's after a preemption of the job's machine,
  and ends when the job has.

Connections are mutually authenticated TLS with a certificate made for the
attempt (``Security.temporary``), handed to the workers in the cluster record
with its private key encrypted under the job key (protocol/cluster.py): only a
holder of the job key can join, not every reader of the bucket. A worker that is lost is the supervisor's to replace
(client/workers.py); Dask reschedules what it was running.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from ..protocol.cluster import latest as latest_cluster
from ..protocol.cluster import open_tls, seal_tls
from ..protocol.folder import JobFolder
from ..protocol.job import ENV_SCHEDULER, JobSpec
from ..protocol.metadata import metadata, on_gce
from .attempt import spawn

#: How long the runner waits for every worker once the first has joined, before the cell starts with fewer.
ALL_WORKERS_S = 60.0
#: How often a worker machine asks the Store whether the job has ended or moved to a new scheduler.
WORKER_POLL_S = 1.0
#: How long a worker machine tries to join a scheduler before it reads the cluster record again.
JOIN_S = 15
#: A worker the scheduler has not heard from for this long is lost (a preempted VM sends no goodbye).
WORKER_TTL = "30s"
_SCHEDULER_START_S = 60.0


def host_address() -> str:
    """The address the job's processes listen on: the VM's internal address on Compute Engine (worker VMs
    reach it over the VPC), else the loopback (the local backend's workers are on this machine)."""
    if on_gce():
        address = metadata("instance/network-interfaces/0/ip", timeout=2.0)
        if address:
            return address.strip()
    return "127.0.0.1"


@dataclass
class Scheduler:
    """The scheduler child of one attempt: its process group and its address."""

    pid: int
    address: str

    def stop(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start_scheduler(folder: JobFolder, spec: JobSpec, attempt: int, tag: str) -> Scheduler:
    """Start the attempt's scheduler, publish its record (address, dashboard, TLS) and point the runner at it
    (``$NBBURST_SCHEDULER``: the runner is forked from this process afterwards). Raises RuntimeError when it
    does not start (e.g. ``distributed`` is not installed)."""
    host = host_address()
    read_fd, write_fd = os.pipe()

    def body() -> int:
        os.close(read_fd)
        return _serve_scheduler(write_fd, host)

    pid = spawn.spawn(body, tag)
    os.close(write_fd)
    started = _read_line(read_fd, _SCHEDULER_START_S)
    if started is None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        raise RuntimeError("the Dask scheduler did not start (is `distributed` installed? pip install nbburst[dask])")
    tls = started.pop("tls")
    worker_tls = seal_tls(tls["worker"], folder.key, spec.job_id, attempt)
    record = {"attempt": attempt, "workers": spec.resources.workers, **started, "tls": worker_tls}
    folder.put_record(folder.layout.cluster(attempt), json.dumps(record).encode())
    os.environ[ENV_SCHEDULER] = json.dumps({k: record[k] for k in ("address", "workers")} | {"tls": tls["client"]})
    return Scheduler(pid, started["address"])


def _read_line(fd: int, timeout: float) -> dict[str, Any] | None:
    import select

    data = b""
    end = time.monotonic() + timeout
    try:
        while not data.endswith(b"\n") and time.monotonic() < end:
            ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    return json.loads(data) if data.endswith(b"\n") else None


def _security(role: str, tls: dict[str, Any]) -> Any:
    from distributed.security import Security

    return Security(
        require_encryption=True,
        tls_ca_file=tls["ca_file"],
        **{f"tls_{role}_cert": tls["cert"], f"tls_{role}_key": tls["key"]},
    )


def _serve_scheduler(write_fd: int, host: str) -> int:
    """The scheduler child's body: make the attempt's TLS material (a CA and certificate for this attempt
    only), hand it over with the address, serve until killed (it dies with the agent)."""
    import dask
    from distributed import Scheduler as DaskScheduler
    from distributed.security import Security

    dask.config.set({"distributed.scheduler.worker-ttl": WORKER_TTL})
    temporary = Security.temporary()
    tls = {role: temporary.get_tls_config_for_role(role) for role in ("scheduler", "worker", "client")}

    async def serve() -> None:
        async with DaskScheduler(
            host=host,
            port=0,
            protocol="tls",
            dashboard_address=f"{host}:0",
            security=_security("scheduler", tls["scheduler"]),
        ) as scheduler:
            port = scheduler.http_server.port if scheduler.http_server is not None else None
            charts = importlib.util.find_spec("bokeh") is not None  # the dashboard's pages need it
            dashboard = f"http://{host}:{port}/status" if port and charts else None
            started = {"address": scheduler.address, "dashboard": dashboard, "tls": tls}
            os.write(write_fd, json.dumps(started).encode() + b"\n")
            os.close(write_fd)
            await scheduler.finished()

    asyncio.run(serve())
    return 0


# -- in the runner ----------------------------------------------------------------------------------------


def connect() -> Any:
    """In the runner, before the cell: the default Dask client on the attempt's scheduler, with the job's
    workers joined (every one, or as many as came within :data:`ALL_WORKERS_S` of the first), and Dask as
    joblib's default backend in this (the cell's) thread. None for a job without ``--workers``."""
    raw = os.environ.get(ENV_SCHEDULER)
    if not raw:
        return None
    import joblib
    from distributed import Client

    wanted = json.loads(raw)
    client = Client(wanted["address"], security=_security("client", wanted["tls"]), set_as_default=True)
    client.wait_for_workers(1)
    try:
        client.wait_for_workers(wanted["workers"], timeout=ALL_WORKERS_S)
    except TimeoutError:
        joined = len(client.scheduler_info(n_workers=-1)["workers"])
        print(f"nbburst: {joined} of {wanted['workers']} workers joined; the cell starts with them", file=sys.stderr)
    joblib.parallel_config(backend="dask")  # not as a context: in force for the rest of the cell
    return client


# -- on a worker machine ----------------------------------------------------------------------------------


def serve_worker(folder: JobFolder, spec: JobSpec, machine: str) -> int:
    """A worker machine's agent: serve a Dask worker to the newest attempt's scheduler until the job ends.

    A scheduler that goes (its machine preempted) is followed to the next attempt's; the job's end (its
    verdict) ends the worker within :data:`WORKER_POLL_S` or so."""
    if folder.store.exists(folder.layout.dist_manifest):  # a VM of its own: the notebook's versions, as the job's
        from .machine.envsync import sync

        sync(folder.store, folder.layout, folder.key, _Console())
    cores = int((spec.plan or {}).get("cores") or os.cpu_count() or 1)
    workdir = os.path.join(os.getcwd(), "work", machine)
    os.makedirs(workdir, exist_ok=True)
    served: int | None = None
    while not folder.store.exists(folder.layout.terminal):
        record = latest_cluster(folder)
        if record is None or record["attempt"] == served:
            time.sleep(WORKER_POLL_S)
            continue
        print(f"nbburst worker {machine}: joining {record['address']} (attempt {record['attempt']})", flush=True)
        try:
            asyncio.run(_serve_worker(folder, record, cores, workdir, machine))
            served = record["attempt"]  # until its scheduler went: the next attempt's, or the job's end
        except Exception as exc:  # not joined (its scheduler went meanwhile?): again, or the next attempt's
            print(f"nbburst worker {machine}: {type(exc).__name__}: {exc}", flush=True)
            time.sleep(WORKER_POLL_S)
    print(f"nbburst worker {machine}: the job has ended", flush=True)
    return 0


class _Console:
    """Where a worker machine reports (its console: the job's log is the cell's)."""

    def event(self, text: str) -> None:
        print(text, flush=True)

    def flush(self) -> None:
        sys.stdout.flush()


async def _serve_worker(folder: JobFolder, record: dict[str, Any], cores: int, workdir: str, machine: str) -> None:
    from distributed import Worker
    from distributed.core import Status

    def moved_on() -> bool:
        if folder.store.exists(folder.layout.terminal):
            return True
        newest = latest_cluster(folder)
        return newest is not None and newest["attempt"] != record["attempt"]

    loop = asyncio.get_running_loop()
    async with Worker(
        record["address"],
        nthreads=cores,
        name=f"{machine}-{os.getpid()}",
        host=host_address(),
        local_directory=workdir,
        security=_security("worker", open_tls(record["tls"], folder.key, folder.job_id, record["attempt"])),
        death_timeout=JOIN_S,
    ) as worker:
        while worker.status in (Status.running, Status.paused):
            if await loop.run_in_executor(None, moved_on):
                break
            await asyncio.sleep(WORKER_POLL_S)
