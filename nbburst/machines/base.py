"""The Machines port: launch, describe, restart, delete and list job machines.

Both adapters run the same agent; they differ only in what a "machine" is (a
process group here, a VM on Compute Engine). ``plan`` runs before anything is
written or launched, so an option a backend cannot honour fails while it is
still free.

The port declares its errors, so callers catch them by type and never by the
wording of a cloud's message: :class:`~nbburst.errors.UsageError` (and its
:class:`~nbburst.errors.UnsupportedOption`) from ``plan`` for what cannot be
had, :class:`NoCapacity` from ``launch``/``restart`` when there is no machine
to be had right now, :class:`~nbburst.errors.BurstError` for any other failure.
Each adapter translates its cloud's errors into these in one place, and passes
the contract suite (:class:`nbburst.testing.contracts.machines.MachinesContract`, which an adapter's tests
subclass: tests/test_machines_contract.py for nbburst's own).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..errors import BurstError, UnsupportedOption
from ..protocol.job import JobSpec, Resources
from ..store import Store

# Machine states as the client sees them. STOPPED and GONE without a terminal
# job state mean the job was preempted.
PROVISIONING, RUNNING, STOPPING, STOPPED, GONE = "PROVISIONING", "RUNNING", "STOPPING", "STOPPED", "GONE"


class NoCapacity(BurstError):
    """No machine can be had now (spot stock-out, zone exhausted); the same request may succeed later.

    ``launch`` and ``restart`` raise it; ``zone`` names the zone that had none, when known. The
    supervisor backs off and tries again (in another zone with ``--zone auto``).
    """

    def __init__(self, message: str, zone: str | None = None):
        super().__init__(message)
        self.zone = zone


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


@dataclass
class SessionLaunch:
    """What :meth:`Machines.launch_session` starts: boot ``boot`` of a warm session's machine.

    The session's client and its warm parent share ``token`` (hex), which seals every request between them.
    ``socket`` and ``control`` are the paths of the Unix sockets on which the warm parent listens, made by the
    client when the backend's :attr:`Machines.session_transport` is ``"socket"``; they are empty when it is
    ``"mailbox"`` (the cells come through the Store).
    """

    session_id: str
    machine: str
    boot: int  # 0 for the session's first machine, then one more each time it comes back
    plan: dict[str, Any]
    token: str
    idle_s: float
    until: float  # the session's time limit (epoch seconds)
    preload: list[str] = field(default_factory=list)  # what the warm parent imports before the first cell
    socket: str = ""
    control: str = ""


class Machines(abc.ABC):
    backend: str
    #: Whether the backend can start worker machines (``--workers``, :meth:`launch_worker`).
    scale_out: bool = False
    #: How a session's cells reach its warm parent (:meth:`launch_session`): ``"socket"``, a Unix socket the
    #: notebook reaches (a machine on this computer); ``"mailbox"``, objects in the Store that a relay on the
    #: machine carries (a machine the notebook cannot reach directly); None when the backend has no sessions.
    session_transport: Literal["socket", "mailbox"] | None = None

    def check_workers(self, resources: Resources) -> None:
        """Refuse ``--workers`` (from ``plan``) where the backend cannot start worker machines."""
        if resources.workers and not self.scale_out:
            raise UnsupportedOption(
                f"--workers: the {self.backend} backend cannot start worker machines (Dask scale-out); "
                "drop --workers, or use a backend that can (local, gce)"
            )

    def launch_worker(self, spec: JobSpec, job_url: str, key: bytes, index: int, attempt: int) -> str:
        """Start worker machine ``index`` of a ``--workers`` job (``worker_name(spec.job_id, index)``): the
        same machine as the job's, carrying its labels and limits, running ``python -m nbburst.agent JOB_URL
        --worker INDEX`` (a Dask worker that joins the job's scheduler). A stopped one is started again, one
        still there is replaced. ``attempt`` counts this worker's launches. Raises as ``launch`` does."""
        raise UnsupportedOption(f"--workers: the {self.backend} backend cannot start worker machines")

    def check_sessions(self) -> None:
        """Refuse, with UnsupportedOption and before anything is planned, a session on a backend without them."""
        if self.session_transport is None:
            raise _no_sessions(self.backend)

    def launch_session(self, request: SessionLaunch) -> str:
        """Start boot ``request.boot`` of a warm session's machine ``request.machine``, running its warm parent
        (and, on a ``"mailbox"`` transport, its relay), marked with the session id and the boot as a job's machine
        is with its job and attempt; returns the machine's name. Deleting the machine ends every cell it ran.
        Raises as ``launch`` does; the default refuses (no sessions)."""
        raise _no_sessions(self.backend)

    def wake_session(self, name: str, value: str) -> None:
        """Tell the relay of session machine ``name`` (a ``"mailbox"`` transport's) that a request waits in the
        Store: set the machine's wake attribute (``sessionwire.WAKE_ATTRIBUTE``) to ``value``, new each time. A
        quiet session's relay lists the Store only now and then and holds a read on that attribute, which returns
        when it changes: the request is taken at once, with no Store polling. Raises as ``launch`` does; the
        default refuses (no mailbox sessions)."""
        raise _no_sessions(self.backend)

    def ensure_watcher(self, store: Store, spec: JobSpec) -> str | None:
        """Make sure something on the cloud's side relaunches job ``spec`` of ``store`` after a preemption while
        no notebook runs (on Compute Engine, the Store's watcher VM); what was done. Called after each launch; the
        job runs whatever it raises. Default: nothing (a supervisor on this computer covers the job)."""
        return None

    def watchers_of(self, store_url: str) -> list[str]:
        """Names of the watcher machines :meth:`ensure_watcher` made for the Store at ``store_url`` (for ``nbburst
        gc``). Default: none."""
        return []

    def delete_watcher(self, name: str) -> None:
        """Delete the watcher machine ``name`` of :meth:`watchers_of` (nothing when it is gone)."""
        return None

    def relaunch_zones(self, spec: JobSpec) -> list[str]:
        """Zones a supervisor may move job ``spec`` to when its zone has no capacity (``--zone auto``), in the
        order to try them. The default: the zones its plan chose from (``plan["extra"]["zones"]``), none when
        the plan names no such list."""
        return list(((spec.plan or {}).get("extra") or {}).get("zones") or [])

    def doctor(self) -> list[Check]:
        """Backend-specific health checks for ``nbburst doctor`` (credentials, API reachable, quota,
        image, ...). Each check should be quick and must not create billable resources; raise
        nothing: report failures as ``Check(ok=False, fix=...)``. The default has none."""
        return []

    @abc.abstractmethod
    def plan(self, resources: Resources) -> Plan:
        """Choose a machine for ``resources`` without creating anything.

        Raises UnsupportedOption for an option this backend cannot honour and UsageError for what
        cannot be had (more cores than exist, no quota, a missing image...): nothing is launched yet.
        """

    def check_environment(self, code: str, modules: Iterable[str]) -> None:
        """Refuse, with UsageError and before anything is written, a job whose cell (``code``, and the modules
        its inputs name) needs a package this backend's machines cannot have. The default: they share the
        notebook's environment."""
        return None

    @abc.abstractmethod
    def launch(self, spec: JobSpec, job_url: str, key: bytes, attempt: int) -> str:
        """Start a machine running the agent for attempt ``attempt`` of the job at ``job_url``.

        Returns ``machine_name(spec.job_id)``. Raises NoCapacity when no machine can be had now,
        BurstError when it could not be started for another reason.
        """

    @abc.abstractmethod
    def describe(self, name: str) -> MachineInfo:
        """The machine's state: PROVISIONING, RUNNING, STOPPING, STOPPED or GONE.

        A machine that does not exist (deleted, or never made) is ``MachineInfo(name, job_id="",
        state=GONE)``; describing never raises for a missing machine.
        """

    @abc.abstractmethod
    def restart(self, name: str, spec: JobSpec, job_url: str, key: bytes, attempt: int) -> str:
        """Bring a STOPPED machine back, or make a new one when it is GONE; returns the machine name.

        Raises NoCapacity and BurstError as ``launch`` does; an adapter may refuse, with BurstError, a
        machine that has not stopped yet.
        """

    @abc.abstractmethod
    def delete(self, name: str) -> None:
        """Remove the machine; a no-op when it is gone. Afterwards ``describe`` says GONE (at once, or as
        soon as the cloud has finished deleting it)."""

    @abc.abstractmethod
    def list(self, job_id: str | None = None) -> list[MachineInfo]:
        """Machines that carry nbburst's labels (of one job, or all), never anyone else's."""

    @abc.abstractmethod
    def preempt(self, name: str, grace_s: float) -> None:
        """Simulate an eviction: soft-off signal, ``grace_s`` seconds, then hard off (STOPPED or GONE).

        Raises UsageError when the machine does not exist.
        """

    @abc.abstractmethod
    def console(self, name: str) -> str:
        """Boot/console output of the machine (serial port on Compute Engine); "" when there is none."""

    def cleanup(self, name: str) -> None:
        """The job has ended: remove its machine if it is still there. The agent normally ends its own
        machine; this covers the case where it could not (a VM that could only power itself off).
        Must not fail when the machine is gone. Default: nothing (the local agent's process just ends)."""
        return None

    def held_keys(self) -> list[tuple[str, str]]:
        """(job id, owner label) of the job keys this backend keeps outside the Store (on Compute Engine, the
        Secret Manager secrets its VMs read their key from), for ``nbburst gc``. Default: none."""
        return []

    def release_key(self, job_id: str) -> None:
        """Delete the key of job ``job_id`` that :meth:`held_keys` lists (nothing when it is gone)."""
        return None


def _no_sessions(backend: str) -> UnsupportedOption:
    return UnsupportedOption(f"sessions run on the local and gce backends, not on {backend!r}")


def machine_name(job_id: str) -> str:
    """The name of a job's machine: one per job, the same for every attempt."""
    return f"nbburst-{job_id}"


def worker_name(job_id: str, index: int) -> str:
    """The name of a ``--workers`` job's worker machine ``index`` (0, 1, ...)."""
    return f"{machine_name(job_id)}-w{index}"
