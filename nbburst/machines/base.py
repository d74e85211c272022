"""The Machines port: launch, describe, restart, delete and list job machines.

Both adapters run the same agent; they differ only in what a "machine" is (a
process group here, a VM on Compute Engine). ``plan`` runs before anything is
written or launched, so an option a backend cannot honour fails while it is
still free.
"""

from __future__ import annotations

import abc
from dataclasses import asdict, dataclass, field
from typing import Any

from ..protocol.job import JobSpec, Resources

# Machine states as the client sees them. STOPPED and GONE without a terminal
# job state mean the job was preempted.
PROVISIONING, RUNNING, STOPPING, STOPPED, GONE = "PROVISIONING", "RUNNING", "STOPPING", "STOPPED", "GONE"


@dataclass
class Plan:
    """The machine chosen for a job, and why."""

    machine_type: str
    cores: int
    memory_gb: float
    spot: bool
    zone: str | None = None
    gpu: str | None = None
    gpu_count: int = 0
    image: str | None = None
    reason: str = ""
    price_per_hour: float | None = None
    on_demand_price_per_hour: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class MachineInfo:
    name: str
    job_id: str
    state: str
    attempt: int = 0
    created: float = 0.0
    detail: str = ""
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Check:
    """One finding of ``nbburst doctor``: what was checked, whether it is fine, and how to fix it."""

    name: str
    ok: bool
    detail: str = ""
    fix: str = ""
    warning: bool = False  # not fine, but jobs can still run

    @property
    def level(self) -> str:
        return "ok" if self.ok else "warn" if self.warning else "fail"


class Machines(abc.ABC):
    backend: str

    def doctor(self) -> list[Check]:
        """Backend-specific health checks for ``nbburst doctor`` (credentials, API reachable, quota,
        image, ...). Each check should be quick and must not create billable resources; raise
        nothing: report failures as ``Check(ok=False, fix=...)``. The default has none."""
        return []

    @abc.abstractmethod
    def plan(self, resources: Resources) -> Plan:
        """Choose a machine for ``resources``; raise UsageError if it cannot be had."""

    @abc.abstractmethod
    def launch(self, spec: JobSpec, job_url: str, key: bytes, attempt: int) -> str:
        """Start a machine running the agent for ``spec``; returns the machine name."""

    @abc.abstractmethod
    def describe(self, name: str) -> MachineInfo:
        """The machine's state; GONE when it no longer exists."""

    @abc.abstractmethod
    def restart(self, name: str, spec: JobSpec, job_url: str, key: bytes, attempt: int) -> str:
        """Bring a stopped machine back (or make a new one); returns the machine name."""

    @abc.abstractmethod
    def delete(self, name: str) -> None:
        """Remove the machine; no-op when it is gone."""

    @abc.abstractmethod
    def list(self, job_id: str | None = None) -> list[MachineInfo]:
        """Machines that carry nbburst's labels (of one job, or all)."""

    @abc.abstractmethod
    def preempt(self, name: str, grace_s: float) -> None:
        """Simulate an eviction: soft-off signal, ``grace_s`` seconds, then hard off."""

    @abc.abstractmethod
    def console(self, name: str) -> str:
        """Boot/console output of the machine (serial port on Compute Engine)."""

    def cleanup(self, name: str) -> None:
        """The job has ended: remove its machine if it is still there. The agent normally ends its own
        machine; this covers the case where it could not (a VM that could only power itself off).
        Must not fail when the machine is gone. Default: nothing (the local agent's process just ends)."""
        return None


def machine_name(job_id: str) -> str:
    return f"nbburst-{job_id}"
