"""A ``--workers`` job's worker machines, from the notebook's side: started with the job, replaced when lost,
removed when it ends.

Worker machines are machines of the job (``worker_name(job, i)``: its labels,
limits and self-deletion, see ``Machines.launch_worker``) that serve Dask
workers to the scheduler beside the cell (agent/scaleout.py). They outlive a
preemption of the job's machine: they join the next attempt's scheduler. A
worker machine that is lost (preempted, killed) is launched again by the
supervisor, under the job's lease so two supervisors never both do it; Dask
reschedules what it was running. Each worker is launched at most
``--max-restarts`` more times, and with ``--budget`` for no longer than what
is left buys all the job's machines (protocol/budget.py), and not at all once
it cannot pay for a boot.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from ..machines.base import GONE, STOPPED, MachineInfo, NoCapacity, worker_name
from ..protocol import budget, cluster
from ..protocol.job import DESCRIBE_SECONDS, JobSpec

if TYPE_CHECKING:
    from .job import Job


def names(spec: JobSpec) -> list[str]:
    """The names of the job's worker machines (none without ``--workers``)."""
    return [worker_name(spec.job_id, i) for i in range(spec.resources.workers or 0)]


def launch_all(job: Job) -> None:
    """Start every worker machine of a job being launched; one that finds no capacity now is left to the
    supervisor, which launches lost workers again (the cell starts with those that joined)."""
    for index in range(job.spec.resources.workers or 0):
        try:
            job.machines.launch_worker(budget.for_launch(job.spec, job.statuses()), job.url, job.key(), index, 1)
        except NoCapacity as exc:
            print(f"nbburst: job {job.id}: worker {index} not started yet: {exc}", file=sys.stderr)


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


def summary(job: Job, cost_usd: float, live: bool) -> dict[str, Any]:
    """The workers for the job's view and the sidebar: count, each machine's state (asked of the backend only
    while the job is ``live``), their share of the job's cost ``cost_usd`` (which counts every machine of
    the job, :func:`~nbburst.protocol.pricing.job_cost`) and the Dask dashboard's address, when there is one."""
    spec = job.spec
    machines = states(job) if live else [{"name": name, "state": GONE} for name in names(spec)]
    record = cluster.latest(job.folder) or {}
    return {
        "count": len(machines),
        "machines": machines,
        "states": dict(Counter(m["state"] for m in machines)),
        "cost_usd": round(cost_usd * len(machines) / (len(machines) + 1), 4),
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
        if not self.launches or time.monotonic() - self.checked < DESCRIBE_SECONDS or self.job.budget_spent():
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
        spec = budget.for_launch(job.spec, job.statuses())  # what is left, shared by all the job's machines
        for index in indexes:
            self.launches[index] += 1
            job.machines.launch_worker(spec, job.url, job.key(), index, self.launches[index])
