"""A ``--workers`` job's worker machines, from the notebook's side: started with the job, replaced when lost,
removed when it ends.

Worker machines are machines of the job (``worker_name(job, i)``: its labels,
limits and self-deletion, see ``Machines.launch_worker``) that serve Dask
workers to the scheduler beside the cell (agent/cluster.py). They outlive a
preemption of the job's machine: they join the next attempt's scheduler. A
worker machine that is lost (preempted, killed) is launched again by the
supervisor, under the job's lease so two supervisors never both do it; Dask
reschedules what it was running. Each worker is launched at most
``--max-restarts`` more times.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from ..machines.base import GONE, STOPPED, MachineInfo, worker_name
from ..protocol import cluster
from ..protocol.job import DESCRIBE_SECONDS, JobSpec

if TYPE_CHECKING:
    from .burst import Job


def names(spec: JobSpec) -> list[str]:
    """The names of the job's worker machines (none without ``--workers``)."""
    return [worker_name(spec.job_id, i) for i in range(spec.resources.workers or 0)]


def launch_all(job: Job) -> None:
    """Start every worker machine of a job being launched."""
    for index in range(job.spec.resources.workers or 0):
        job.machines.launch_worker(job.spec, job.url, job.key(), index, 1)


def end_all(job: Job) -> None:
    """The job has ended: remove its worker machines (each ends itself too, as soon as it sees the verdict)."""
    for name in names(job.spec):
        job.machines.delete(name)


def listed(job: Job) -> dict[str, MachineInfo]:
    """The job's worker machines that exist, by name (one call to the backend)."""
    wanted = set(names(job.spec))
    return {m.name: m for m in job.machines.list(job.id) if m.name in wanted}


def states(job: Job) -> list[dict[str, Any]]:
    """Each worker machine and its state, for the job's view and the sidebar."""
    found = listed(job)
    return [{"name": name, "state": found[name].state if name in found else GONE} for name in names(job.spec)]


def summary(job: Job, elapsed_s: float, live: bool) -> dict[str, Any]:
    """The workers for the job's view and the sidebar: count, each machine's state (asked of the backend only
    while the job is ``live``), their cost so far (their count at the job's price for ``elapsed_s``, an
    estimate: each runs about as long as the job) and the Dask dashboard's address, when there is one."""
    spec = job.spec
    machines = states(job) if live else [{"name": name, "state": GONE} for name in names(spec)]
    record = cluster.latest(job.folder) or {}
    per_hour = float((spec.plan or {}).get("price_per_hour") or 0.0)
    return {
        "count": len(machines),
        "machines": machines,
        "states": dict(Counter(m["state"] for m in machines)),
        "cost_usd": round(len(machines) * per_hour * elapsed_s / 3600.0, 4),
        "dashboard": record.get("dashboard"),
    }


class Replacer:
    """Finds a running job's lost worker machines (at most every ``DESCRIBE_SECONDS``) and launches them again."""

    def __init__(self, job: Job):
        self.job = job
        self.launches = dict.fromkeys(range(job.spec.resources.workers or 0), 1)
        self.checked = 0.0

    def lost(self) -> list[int]:
        """Indexes of worker machines that are stopped or gone, asked of the backend now and then."""
        if not self.launches or time.monotonic() - self.checked < DESCRIBE_SECONDS:
            return []
        self.checked = time.monotonic()
        found = listed(self.job)
        spec = self.job.spec
        return [
            i
            for i, name in enumerate(names(spec))
            if (name not in found or found[name].state in (GONE, STOPPED)) and self.launches[i] <= spec.max_restarts
        ]

    def replace(self, indexes: list[int]) -> None:
        """Launch the worker machines ``indexes`` again (the caller holds the job's lease)."""
        job = self.job
        for index in indexes:
            self.launches[index] += 1
            job.machines.launch_worker(job.spec, job.url, job.key(), index, self.launches[index])
