"""The Machines contract: what every Machines adapter does, as classes of tests any adapter's test module can run.

Subclass :class:`MachinesContract` in a test module and provide the ``burst`` and ``machines`` fixtures; every
test below then runs against that adapter (nbburst's own: ``tests/test_machines_contract.py``)::

    class TestMyMachines(MachinesContract):
        @pytest.fixture
        def burst(self, burst_env):
            return Burst()

        @pytest.fixture
        def machines(self, burst):
            return burst.machines("mine")

``burst`` is a client whose settings reach the adapter's machines and its Store; ``machines`` is the adapter.
Two more fixtures have defaults an adapter may override: ``size`` (the options of the smallest machine it
offers: ``{"cores": 2}``) and ``someone_elses_machine`` (make a machine beside nbburst's that is not nbburst's,
which ``list`` must leave out, where the adapter's machines live among other people's: a Compute Engine
project). An adapter that can be made to run out of machines subclasses :class:`NoCapacityContract` too, and
provides ``exhaust`` (take away every machine it could start, and return the zone that has none).

One test per promise of the port (:mod:`nbburst.machines.base`): what ``plan`` refuses before anything
exists, what ``launch`` starts and how it names it, what ``describe`` and ``list`` say, that ``restart``
brings a lost machine back under its name, that ``delete`` is idempotent, that failures come as the port's
declared errors, and the capabilities the client uses beside them (the zones a supervisor may move a job to,
the watchers, sessions). Jobs are trivial (``pow`` or ``time.sleep``): the machines are real, the work is not.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from ...client.burst import Burst
from ...client.job import Job
from ...errors import BurstError, JobFailed, UnsupportedOption, UsageError
from ...machines.base import (
    GONE,
    PROVISIONING,
    RUNNING,
    STOPPED,
    MachineInfo,
    Machines,
    NoCapacity,
    Plan,
    SessionLaunch,
    machine_name,
)
from ...protocol.job import Resources, State

T = TypeVar("T")

UP = (PROVISIONING, RUNNING)
MISSING = machine_name("b20000101-000000-000000")  # a job id no test ever makes


def wait_until(predicate: Callable[[], T], timeout: float, what: str) -> T:
    """Poll ``predicate`` until it returns something true, and return that; fail after ``timeout`` s."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def up(machines: Machines, name: str) -> MachineInfo:
    """The machine once it is RUNNING (a VM boots for a moment first)."""
    return wait_until(lambda: (info := machines.describe(name)).state == RUNNING and info, 60, f"{name} to run")


def gone(machines: Machines, name: str) -> None:
    wait_until(lambda: machines.describe(name).state == GONE, 30, f"{name} to be gone")


class MachinesContract:
    """The tests every Machines adapter passes; a subclass provides ``burst`` and ``machines`` (see the module)."""

    @pytest.fixture
    def size(self) -> dict[str, Any]:
        """The options of the smallest machine the adapter offers."""
        return {}

    @pytest.fixture
    def someone_elses_machine(self) -> None:
        """Make a machine beside nbburst's that is not nbburst's; the default: there is none to make."""

    @pytest.fixture
    def submit(self, burst: Burst, machines: Machines, size: dict[str, Any]) -> Callable[..., Job]:
        """Submit ``fn(*args)`` to a machine of the adapter's, of the smallest size."""
        return lambda fn, *args, **options: burst.submit(
            fn, *args, options=burst.options(backend=machines.backend, **size, **options)
        )

    @pytest.fixture
    def sleeper(self, submit: Callable[..., Job], machines: Machines) -> Iterator[Job]:
        """A job whose machine stays up (it sleeps) until the test deletes it."""
        job = submit(time.sleep, 300)
        yield job
        machines.delete(machine_name(job.id))

    # -- plan ----------------------------------------------------------------------------------------------

    def test_plan_chooses_a_machine_and_creates_nothing(self, machines: Machines, size: dict[str, Any]) -> None:
        plan = machines.plan(Resources(**size))
        assert isinstance(plan, Plan)
        assert plan.machine_type and plan.cores >= size.get("cores", 1) and plan.memory_gb > 0
        assert plan.reason  # says why
        assert plan.price_per_hour is not None and 0 <= plan.price_per_hour <= plan.on_demand_price_per_hour
        assert plan.to_dict()["machine_type"] == plan.machine_type
        assert machines.list() == []

    def test_plan_refuses_what_it_cannot_honour_before_launch(self, machines: Machines) -> None:
        if machines.scale_out:  # --workers: worker machines like the job's (tests/test_scaleout.py)
            assert machines.plan(Resources(cores=2, workers=1)).cores >= 2
        else:
            with pytest.raises(UnsupportedOption, match="--workers"):
                machines.plan(Resources(workers=2))
        with pytest.raises(UsageError, match="100000"):
            machines.plan(Resources(cores=100_000))
        assert machines.list() == []

    # -- launch ----------------------------------------------------------------------------------------------

    def test_launch_runs_the_agent_for_the_job_and_the_machine_ends_itself(
        self, submit: Callable[..., Job], machines: Machines
    ) -> None:
        job = submit(pow, 2, 10)
        assert job.result(timeout=90) == 1024
        assert job.state == State.SUCCEEDED
        assert job.statuses()[-1].machine == machine_name(job.id)
        wait_until(lambda: not machines.list(job.id), 30, f"the machine of {job.id} to go")
        gone(machines, machine_name(job.id))

    def test_launch_names_the_machine_after_the_job(self, machines: Machines, sleeper: Job) -> None:
        name = machine_name(sleeper.id)
        assert name == f"nbburst-{sleeper.id}"
        machines.delete(name)
        gone(machines, name)
        assert machines.launch(sleeper.spec, sleeper.url, sleeper.key(), 2) == name
        info = up(machines, name)
        assert (info.name, info.job_id, info.attempt) == (name, sleeper.id, 2)

    # -- describe and list -----------------------------------------------------------------------------------

    def test_describe_a_machine_of_a_job(self, machines: Machines, sleeper: Job) -> None:
        name = machine_name(sleeper.id)
        info = machines.describe(name)
        assert info.state in UP
        assert (info.name, info.job_id, info.attempt) == (name, sleeper.id, 1)
        assert info.labels["nbburst-job"] == sleeper.id
        assert info.created > 0

    def test_describe_a_machine_that_never_was_says_gone(self, machines: Machines) -> None:
        info = machines.describe(MISSING)
        assert (info.name, info.state, info.job_id) == (MISSING, GONE, "")

    def test_list_by_job_finds_ours_only(self, machines: Machines, sleeper: Job, someone_elses_machine: None) -> None:
        name = machine_name(sleeper.id)
        assert [(m.name, m.job_id) for m in machines.list(sleeper.id)] == [(name, sleeper.id)]
        assert [m.name for m in machines.list()] == [name]
        assert machines.list("b20000101-000000-000000") == []

    # -- delete ----------------------------------------------------------------------------------------------

    def test_delete_is_idempotent_and_a_deleted_machine_is_gone(self, machines: Machines, sleeper: Job) -> None:
        name = machine_name(sleeper.id)
        machines.delete(name)
        gone(machines, name)
        assert machines.list(sleeper.id) == []
        machines.delete(name)  # gone already: nothing to do
        machines.delete(MISSING)
        machines.cleanup(name)
        assert machines.describe(name).state == GONE

    # -- restart ---------------------------------------------------------------------------------------------

    def test_restart_brings_a_preempted_machine_back_under_its_name(self, machines: Machines, sleeper: Job) -> None:
        name = machine_name(sleeper.id)
        up(machines, name)
        machines.preempt(name, grace_s=0.5)
        wait_until(lambda: machines.describe(name).state in (STOPPED, GONE), 30, f"{name} to stop")
        assert machines.restart(name, sleeper.spec, sleeper.url, sleeper.key(), 2) == name
        info = up(machines, name)
        assert (info.job_id, info.attempt) == (sleeper.id, 2)

    def test_restart_makes_a_new_machine_when_it_is_gone(self, machines: Machines, sleeper: Job) -> None:
        name = machine_name(sleeper.id)
        machines.delete(name)
        gone(machines, name)
        assert machines.restart(name, sleeper.spec, sleeper.url, sleeper.key(), 2) == name
        info = up(machines, name)
        assert (info.job_id, info.attempt) == (sleeper.id, 2)

    # -- declared errors -----------------------------------------------------------------------------------

    def test_a_machine_that_is_not_there(self, machines: Machines) -> None:
        with pytest.raises(UsageError, match="does not exist"):
            machines.preempt(MISSING, grace_s=0)
        assert machines.console(MISSING) == ""
        machines.cleanup(MISSING)

    # -- what the client uses beside the machines of jobs ----------------------------------------------------

    def test_relaunch_zones_name_the_zones_a_supervisor_may_move_a_job_to(
        self, machines: Machines, sleeper: Job
    ) -> None:
        zones = machines.relaunch_zones(sleeper.spec)
        assert isinstance(zones, list) and all(isinstance(z, str) and z for z in zones)
        assert len(set(zones)) == len(zones)

    def test_the_watchers_it_makes_for_a_store_can_be_listed_and_deleted(
        self, burst: Burst, machines: Machines, sleeper: Job
    ) -> None:
        made = machines.ensure_watcher(burst.store, sleeper.spec)
        assert made is None or isinstance(made, str)
        for name in machines.watchers_of(burst.store.url):
            machines.delete_watcher(name)
        wait_until(lambda: machines.watchers_of(burst.store.url) == [], 60, "the watchers to go")
        machines.delete_watcher(MISSING)  # gone already: nothing to do
        assert machines.describe(machine_name(sleeper.id)).state in UP  # a job's machine is no watcher

    def test_a_session_takes_cells_on_a_machine_of_its_own_or_is_refused(
        self, burst: Burst, machines: Machines, submit: Callable[..., Job], size: dict[str, Any]
    ) -> None:
        assert machines.session_transport in (None, "socket", "mailbox")
        if machines.session_transport is None:
            with pytest.raises(UnsupportedOption, match="sessions run on"):
                machines.check_sessions()
            request = SessionLaunch("session-x-000000", "nbburst-session-x-000000-0", 0, {}, "00" * 16, 60.0, 0.0)
            with pytest.raises(UnsupportedOption, match="sessions run on"):
                machines.launch_session(request)
            return
        machines.check_sessions()
        session = burst.sessions.start(
            name="contract", backend=machines.backend, cores=size.get("cores"), idle="5m", timeout="10m", preload=[]
        )
        try:
            assert machines.describe(session.machine).state in UP
            job = submit(pow, 2, 10, session=session.name)
            assert job.result(timeout=90) == 1024
            assert job.statuses()[-1].machine == session.machine
        finally:
            burst.sessions.stop(session.name)
        gone(machines, session.machine)


class NoCapacityContract:
    """For an adapter that can be made to run out of machines: ``exhaust()`` takes every machine away and returns
    the zone that has none; the port's NoCapacity then comes from ``launch`` and ``restart``."""

    def test_no_capacity_is_the_ports_error_from_launch_and_restart(
        self, machines: Machines, sleeper: Job, submit: Callable[..., Job], exhaust: Callable[[], str]
    ) -> None:
        name = machine_name(sleeper.id)
        up(machines, name)
        machines.preempt(name, grace_s=0.5)
        wait_until(lambda: machines.describe(name).state == STOPPED, 30, f"{name} to stop")
        zone = exhaust()

        with pytest.raises(NoCapacity) as refused:
            machines.restart(name, sleeper.spec, sleeper.url, sleeper.key(), 2)
        assert refused.value.zone == zone and isinstance(refused.value, BurstError)
        assert machines.describe(name).state == STOPPED  # still there, to start when there is room

        with pytest.raises(JobFailed) as failed:  # the first launch of another job
            submit(pow, 2, 10)
        assert isinstance(failed.value.__cause__, NoCapacity) and failed.value.__cause__.zone == zone
