"""The supervisor: relaunch a preempted job, one supervisor per job, until it ends.

:meth:`Supervisor.step` is the entry point: a waiting cell's ``Job.supervise()``
calls it on every poll, and every host of the supervision loop (:mod:`.loop`)
on every round. One step:

1. read the job's state (``Job.derive_state``: a machine that is stopped or
   gone without a terminal state is PREEMPTED, whatever the agent managed to
   write);
2. if it is PREEMPTED and its machine is really down, take the job's lease: an
   object ``lease/<n>.json`` in the job folder, created create-only and valid
   for ``LEASE_SECONDS`` after its last write by the Store's clock (never a
   supervisor's own, which may be off by hours); its holder renews it, anyone
   may take over an expired one by creating ``lease/<n+1>.json`` (create-only,
   so one taker wins);
3. settle what needs no machine: a result or an error already written (the
   machine died between the result and the verdict), a cancellation, the time
   limit, a cause the attempt's agent printed on its machine's console because
   it could not write the job's end itself (``Machines.console``, see
   protocol/cause.py: a refused spec, a Store that stays full; no relaunch would
   get past it), ``--max-restarts`` (then FAILED, with the attempts' history);
4. claim the next attempt (its status, create-only: even two supervisors that
   both think they hold the lease cannot launch it twice; then its claim marker,
   whose Store time fences the attempt before, see protocol/fence.py) and
   restart the machine: ``Machines.restart`` starts the stopped VM, or creates a new one
   when it is gone;
5. no capacity (the Machines port's ``NoCapacity``, caught by its type: each
   adapter translates its cloud's errors into it): back off (``BACKOFF``) and
   retry the same attempt, in the next zone with ``--zone auto``, and on a
   standard VM with ``--fallback-on-demand`` once spot capacity failed
   everywhere. The retry state and the history live in ``relaunch.json``, so
   another supervisor can carry on.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import socket
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import NotPermitted
from ...machines.base import GONE, STOPPED, NoCapacity, machine_name
from ...protocol import fence, sealed
from ...protocol.cause import console_cause
from ...protocol.job import STALE_AFTER_SECONDS, Resources, State, Status
from ...protocol.outcome import error_summary, holds_verdict, timeout_reason
from ...store import AlreadyExists, NotFound
from ...store.base import elapsed
from .. import workers
from .history import history_text

if TYPE_CHECKING:
    from ..job import Job

LEASE_SECONDS = 30.0
BACKOFF = (5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0)  # seconds between tries when there is no capacity
MAX_CAPACITY_TRIES = 50


_HOLDER: tuple[int, str] | None = None


def holder_id() -> str:
    """This process, as a lease holder: every Job handle in one process is one supervisor."""
    global _HOLDER
    if _HOLDER is None or _HOLDER[0] != os.getpid():
        _HOLDER = (os.getpid(), f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}")
    return _HOLDER[1]


# -- lease ----------------------------------------------------------------------------------------


class Lease:
    """One supervisor per job: the newest ``lease/<n>.json`` written less than its ``seconds`` ago (by the
    Store's clock) names it; one released (``seconds`` 0) names nobody."""

    def __init__(self, job: Job, holder: str | None = None, seconds: float = LEASE_SECONDS):
        self.store, self.folder, self.prefix = job.store, job.folder, job.layout.lease_prefix
        self.holder = holder or holder_id()
        self.seconds = seconds
        self.number: int | None = None  # the lease object we hold
        self.until = 0.0  # elapsed() until which it is ours: it was written after we started writing it

    def _key(self, n: int) -> str:
        return f"{self.prefix}{n:08d}.json"

    def _body(self, seconds: float) -> bytes:
        """``expires`` is for people reading the record (the Store's clock); the lease runs ``seconds`` from the
        object's last write, as the Store stamped it."""
        expires = self.store.now() + seconds if seconds else 0.0
        return json.dumps({"holder": self.holder, "seconds": seconds, "expires": expires}).encode()

    def current(self) -> tuple[int, dict[str, Any]] | None:
        """The newest lease record. A listed record that vanished was deleted by a newer holder: list again,
        never fall back to an older one (its successor's number is free again, and would be taken twice). A
        planted one (not sealed under the job's key) names nobody: it is removed, and the list read again."""
        while True:
            for key in reversed(self.store.list(self.prefix)):
                try:
                    body = json.loads(self.folder.get_record(key))
                except NotFound:
                    break
                except ValueError:
                    continue
                except sealed.Refused as exc:  # planted without the job's key: it names nobody, and goes
                    self.folder.report(f"{exc}; removing it")
                    self.store.delete(key)
                    break
                return int(key.rsplit("/", 1)[1].split(".")[0]), body
            else:
                return None

    @property
    def held(self) -> bool:
        return self.number is not None and elapsed() < self.until

    def _in_force(self, n: int, body: dict[str, Any]) -> bool:
        seconds = float(body.get("seconds") or 0)
        try:
            return seconds > 0 and self.store.age(self._key(n)) < seconds
        except NotFound:
            return False

    def _write(self, n: int, create: bool) -> None:
        started = elapsed()
        (self.folder.create_record if create else self.folder.put_record)(self._key(n), self._body(self.seconds))
        self.number, self.until = n, started + self.seconds

    def acquire(self) -> bool:
        """Take or renew the lease; False while another supervisor holds it."""
        if self.held and self.until - elapsed() > self.seconds / 2:
            return True  # renewed recently enough: no Store round trip
        found = self.current()
        if found is not None:
            n, body = found
            if body.get("holder") == self.holder:
                if self._key(n + 1) in self.store.list(self.prefix):
                    self.number = None  # taken over meanwhile
                    return False
                self._write(n, create=False)
                return True
            if self._in_force(n, body):
                self.number = None
                return False
            target = n + 1
        else:
            target = 0
        try:
            self._write(target, create=True)
        except AlreadyExists:
            self.number = None
            return False
        for key in self.store.list(self.prefix):  # the expired ones
            if key < self._key(target):
                self.store.delete(key)
        return True

    def release(self) -> None:
        """Let another supervisor take over at once."""
        if self.number is not None:
            try:
                self.folder.put_record(self._key(self.number), self._body(0.0))
            except Exception:
                pass
            self.number = None
            self.until = 0.0

    def drop(self) -> None:
        """The job has ended: remove every lease object."""
        self.number = None
        try:
            self.store.delete_prefix(self.prefix)
        except Exception:
            pass


# -- supervisor -----------------------------------------------------------------------------------


class Supervisor:
    """Relaunches one job after preemptions. Cheap to step while nothing needs doing."""

    def __init__(self, job: Job, holder: str | None = None, refused: Callable[[NotPermitted], str] | None = None):
        """``refused(error)`` hears of a relaunch the cloud refused to this host's account, and says what the job's
        end (it fails) tells the user of it: the refusal and its fix."""
        self.job = job
        self.refused = refused
        self.lease = Lease(job, holder)
        self.ended = False
        self.workers: workers.Replacer | None = None  # a --workers job's, made on first use

    # -- state ---------------------------------------------------------------------------------
    def step(self) -> State:
        job = self.job
        state, status, terminal = job.derive_state()
        if terminal is not None:
            if not self.ended:  # once: leave no lease behind
                self.ended = True
                if self.lease.number is not None or job.store.list(job.layout.lease_prefix):
                    self.lease.drop()
            return state
        if status is None:
            if job.store.age(job.layout.spec) < STALE_AFTER_SECONDS:
                return State.SUBMITTED
            # the submitter died between writing the job and claiming its first attempt
            return self._relaunch(None) if self.lease.acquire() else State.SUBMITTED
        if state == State.RUNNING and job.spec.resources.workers:
            self._replace_workers()
        if state != State.PREEMPTED:
            return state
        if job.machine_state(status, max_age=0.5) not in (GONE, STOPPED):
            return state  # still shutting down
        if not self.lease.acquire():
            return state  # another supervisor has it
        return self._relaunch(status)

    def _replace_workers(self) -> None:
        """Launch lost worker machines again (under the lease: one supervisor does it); Dask reschedules."""
        self.workers = self.workers or workers.Replacer(self.job)
        lost = self.workers.lost()
        if lost and self.lease.acquire():
            try:
                self.workers.replace(lost)
            except Exception as exc:  # the job goes on with the workers it has; the next round tries again
                print(f"nbburst: job {self.job.id}: could not relaunch worker machines {lost}: {exc}")
            finally:
                self.lease.release()

    # -- relaunch --------------------------------------------------------------------------------
    def _relaunch(self, status: Status | None) -> State:
        job, spec = self.job, self.job.spec
        settled = self._settle()
        if settled is not None:
            return settled
        cause = self._console_cause(status) if status is not None else ""
        if cause:
            return job.commit(State.FAILED, cause, by="supervisor")
        plan = self._load()
        waiting = plan.get("waiting")
        if status is not None and waiting and waiting.get("attempt") == status.attempt:
            if job.store.now() < waiting.get("next_try", 0):
                return State.PREEMPTED  # backing off: no capacity at the last try
            attempt = status.attempt
            retry = True
        else:
            attempt = status.attempt + 1 if status is not None else 1
            retry = False
            if status is not None and status.attempt > spec.max_restarts:
                return self._give_up(
                    f"preempted {status.attempt} times; gave up after --max-restarts {spec.max_restarts}"
                )
            waiting = None
        name = job.machine_of(status) if status is not None else machine_name(job.id)
        claim = Status(
            attempt=attempt,
            state=State.PROVISIONING,
            machine=name,
            message="relaunching after preemption" if attempt > 1 else "starting",
        )
        if retry:
            job.folder.put_status(claim)  # ours: we hold the lease and the retry
        else:
            try:
                job.folder.put_status(claim, create=True)
            except AlreadyExists:
                return State.PROVISIONING  # another supervisor relaunched it
            fence.claim(job.folder, attempt)
        resources = self._resources(waiting)
        launch_spec = dataclasses.replace(spec, resources=resources)
        try:
            job.start_machine(claim, launch_spec)
        except NoCapacity as exc:
            return self._no_capacity(attempt, claim, resources, waiting, exc)
        except Exception as exc:
            said = self.refused(exc) if isinstance(exc, NotPermitted) and self.refused is not None else str(exc)
            self._event(plan, attempt, "failed", said, resources)
            return job.commit(
                State.FAILED, f"could not restart the machine for attempt {attempt}: {said}", by="supervisor"
            )
        plan["waiting"] = None
        self._event(plan, attempt, "relaunched" if attempt > 1 else "launched", "", resources)
        self.lease.release()  # nothing to do until the next preemption: any supervisor may act then
        return State.PROVISIONING

    def _settle(self) -> State | None:
        """End the job without a machine when nothing is left to run."""
        job, store, layout = self.job, self.job.store, self.job.layout
        if holds_verdict(job.folder, layout.result):  # a forged or superseded one in its place settles nothing
            return job.commit(State.SUCCEEDED, "", by="supervisor")
        if holds_verdict(job.folder, layout.error):
            return job.commit(State.FAILED, error_summary(store, layout, job.key()), by="supervisor")
        if job.folder.cancel_requested():
            return job.commit(State.CANCELLED, "cancelled by the user", by="supervisor")
        if job.store.now() > job.store.updated(layout.spec) + job.spec.timeout_s:  # the Store's clock, as the agent's
            return job.commit(State.FAILED, timeout_reason(job.spec), by="supervisor")
        spent = job.budget_spent()
        if spent:  # the cap the launch gave the machine has been used up: no relaunch
            return job.commit(State.FAILED, spent, by="supervisor")
        return None

    def _console_cause(self, status: Status) -> str:
        """Why the agent of ``status``'s attempt said on its machine's console that it cannot run the job, with
        where it said it; "" when it said nothing (the machine was stopped: a preemption)."""
        name = self.job.machine_of(status)
        try:
            console = self.job.machines.console(name)
        except Exception:  # a console that cannot be read says nothing: the attempt is taken for preempted
            return ""
        cause = console_cause(console, self.job.id, status.attempt)
        return f"{cause} (said by attempt {status.attempt} on the console of machine {name})" if cause else ""

    def _resources(self, waiting: dict[str, Any] | None) -> Resources:
        resources = self.job.spec.resources
        if waiting:
            changes = {}
            if waiting.get("zone"):
                changes["zone"] = waiting["zone"]
            if waiting.get("on_demand"):
                changes["on_demand"] = True
            if changes:
                resources = dataclasses.replace(resources, **changes)
        return resources

    def _zones(self) -> list[str]:
        """Zones to rotate through when there is no capacity (``--zone auto`` only)."""
        job = self.job
        wanted = job.spec.resources.zone or job.burst.settings.zone
        if wanted != "auto":
            return []
        try:
            return list(job.machines.relaunch_zones(job.spec))
        except Exception:
            return []

    def _no_capacity(
        self, attempt: int, claim: Status, resources: Resources, waiting: dict[str, Any] | None, exc: NoCapacity
    ) -> State:
        job, spec = self.job, self.job.spec
        plan = self._load()
        tries = (waiting or {}).get("tries", 0) + 1
        if tries >= MAX_CAPACITY_TRIES:
            return self._give_up(f"no capacity for attempt {attempt} after {tries} tries ({exc})")
        zone = exc.zone or resources.zone or (spec.plan or {}).get("zone")
        zones = self._zones()
        tried = list((waiting or {}).get("zones_tried", []))
        if zone and zone not in tried:
            tried.append(zone)
        next_zone = next((z for z in zones if z not in tried), None)
        on_demand = bool((waiting or {}).get("on_demand"))
        fallback = spec.resources.fallback_on_demand or job.burst.settings.fallback_on_demand
        if next_zone is None:
            if fallback and not on_demand and not spec.resources.on_demand:
                on_demand = True  # spot is out everywhere we may go: a standard VM
            tried = []  # start the round of zones again
            next_zone = zones[0] if zones else None
        delay = BACKOFF[min(tries - 1, len(BACKOFF) - 1)] * random.uniform(0.8, 1.2)
        if next_zone != zone or on_demand != bool((waiting or {}).get("on_demand")):
            delay = min(delay, 2.0)  # somewhere else: try soon
        plan["waiting"] = {
            "attempt": attempt,
            "tries": tries,
            "next_try": job.store.now() + delay,
            "zone": next_zone,
            "zones_tried": tried,
            "on_demand": on_demand,
        }
        where = f" in {zone}" if zone else ""
        nxt = (
            f"; next try in {delay:.0f} s"
            + (f" in {next_zone}" if next_zone and next_zone != zone else "")
            + (" on a standard VM" if on_demand else "")
        )
        claim.state = State.PREEMPTED
        claim.message = f"no capacity{where}{nxt}"
        claim.heartbeat = time.time()
        job.folder.put_status(claim)
        self._event(plan, attempt, "no-capacity", f"{exc}", resources)
        return State.PREEMPTED

    def _give_up(self, reason: str) -> State:
        table = history_text(self.job)
        return self.job.commit(State.FAILED, f"{reason}. Attempts: {table}" if table else reason, by="supervisor")

    # -- relaunch.json -------------------------------------------------------------------------
    def _load(self) -> dict[str, Any]:
        try:
            return json.loads(self.job.folder.get_record(self.job.layout.relaunch))
        except (NotFound, ValueError):
            return {"waiting": None, "events": []}
        except sealed.Refused as exc:  # planted without the job's key: ours replaces it at the next event
            self.job.folder.report(str(exc))
            return {"waiting": None, "events": []}

    def _event(self, plan: dict[str, Any], attempt: int, what: str, detail: str, resources: Resources) -> None:
        plan.setdefault("events", []).append(
            {
                "at": round(time.time(), 3),
                "attempt": attempt,
                "event": what,
                "detail": detail[:300],
                "zone": resources.zone,
                "on_demand": resources.on_demand,
                "by": self.lease.holder,
            }
        )
        plan["events"] = plan["events"][-200:]
        self.job.folder.put_record(self.job.layout.relaunch, json.dumps(plan).encode())
