"""The Machines contract, run against every adapter: LocalMachines and GCEMachines (on the Compute emulator).

One test per promise of the port (nbburst.machines.base): what ``plan`` refuses before anything
exists, what ``launch`` starts and how it names it, what ``describe`` and ``list`` say, that
``restart`` brings a lost machine back under its name, that ``delete`` is idempotent, and that
failures come as the port's declared errors. Jobs are trivial (``pow`` or ``time.sleep``): the
machines are real (agent processes, emulated VMs running the real startup script), the work is not.
"""

from __future__ import annotations

import time

import pytest
from support import machines_gone, wait_until
from support.gce import Compute, instance

from nbburst.client.burst import Burst, Job
from nbburst.errors import BurstError, JobFailed, UnsupportedOption, UsageError
from nbburst.machines.base import (
    GONE,
    PROVISIONING,
    RUNNING,
    STOPPED,
    MachineInfo,
    Machines,
    NoCapacity,
    Plan,
    machine_name,
)
from nbburst.protocol.job import Resources, State

pytestmark = [pytest.mark.compute_emulator(operation_delay=0.02, preemption_grace=1.0), pytest.mark.timeout(180)]

SIZE = {"local": {}, "gce": {"cores": 2}}  # the smallest machine each backend offers here
UP = (PROVISIONING, RUNNING)
MISSING = machine_name("b20000101-000000-000000")  # a job id no test ever makes


@pytest.fixture(params=["local", "gce"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def burst(backend: str, request: pytest.FixtureRequest) -> Burst:
    """A session on the backend's own environment: a local Store, or the Compute and GCS emulators."""
    request.getfixturevalue("burst_env" if backend == "local" else "gce_env")
    return Burst()


@pytest.fixture
def machines(burst: Burst, backend: str) -> Machines:
    return burst.machines(backend)


def submit(burst: Burst, backend: str, fn, *args) -> Job:
    return burst.submit(fn, *args, options=burst.options(backend=backend, **SIZE[backend]))


@pytest.fixture
def sleeper(burst: Burst, backend: str, machines: Machines):
    """A job whose machine stays up (it sleeps) until the test deletes it."""
    job = submit(burst, backend, time.sleep, 300)
    yield job
    machines.delete(machine_name(job.id))


def up(machines: Machines, name: str) -> MachineInfo:
    """The machine once it is RUNNING (a VM boots for a moment first)."""
    return wait_until(lambda: (info := machines.describe(name)).state == RUNNING and info, 60, what=f"{name} to run")


def gone(machines: Machines, name: str) -> None:
    wait_until(lambda: machines.describe(name).state == GONE, 30, what=f"{name} to be gone")


# -- plan ----------------------------------------------------------------------------------------------


def test_plan_chooses_a_machine_and_creates_nothing(machines: Machines, backend: str) -> None:
    plan = machines.plan(Resources(**SIZE[backend]))
    assert isinstance(plan, Plan)
    assert plan.machine_type and plan.cores >= SIZE[backend].get("cores", 1) and plan.memory_gb > 0
    assert plan.reason  # says why
    assert plan.price_per_hour is not None and 0 <= plan.price_per_hour <= plan.on_demand_price_per_hour
    assert plan.to_dict()["machine_type"] == plan.machine_type
    assert machines.list() == []


def test_plan_refuses_what_it_cannot_honour_before_launch(machines: Machines) -> None:
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
    burst: Burst, backend: str, machines: Machines
) -> None:
    job = submit(burst, backend, pow, 2, 10)
    assert job.result(timeout=90) == 1024
    assert job.state == State.SUCCEEDED
    assert job.statuses()[-1].machine == machine_name(job.id)
    machines_gone(machines, job.id, timeout=30)
    gone(machines, machine_name(job.id))


def test_launch_names_the_machine_after_the_job(machines: Machines, sleeper: Job) -> None:
    name = machine_name(sleeper.id)
    assert name == f"nbburst-{sleeper.id}"
    machines.delete(name)
    gone(machines, name)
    assert machines.launch(sleeper.spec, sleeper.url, sleeper.key(), 2) == name
    info = up(machines, name)
    assert (info.name, info.job_id, info.attempt) == (name, sleeper.id, 2)


# -- describe and list -----------------------------------------------------------------------------------


def test_describe_a_machine_of_a_job(machines: Machines, sleeper: Job) -> None:
    name = machine_name(sleeper.id)
    info = machines.describe(name)
    assert info.state in UP
    assert (info.name, info.job_id, info.attempt) == (name, sleeper.id, 1)
    assert info.labels["nbburst-job"] == sleeper.id
    assert info.created > 0


def test_describe_a_machine_that_never_was_says_gone(machines: Machines) -> None:
    info = machines.describe(MISSING)
    assert (info.name, info.state, info.job_id) == (MISSING, GONE, "")


def test_list_by_job_finds_ours_only(
    machines: Machines, sleeper: Job, backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "gce":  # a VM in the same project that is not nbburst's
        Compute(request.getfixturevalue("compute_emulator")).create(instance("someone-elses-vm"))
    name = machine_name(sleeper.id)
    assert [(m.name, m.job_id) for m in machines.list(sleeper.id)] == [(name, sleeper.id)]
    assert [m.name for m in machines.list()] == [name]
    assert machines.list("b20000101-000000-000000") == []


# -- delete ----------------------------------------------------------------------------------------------


def test_delete_is_idempotent_and_a_deleted_machine_is_gone(machines: Machines, sleeper: Job) -> None:
    name = machine_name(sleeper.id)
    machines.delete(name)
    gone(machines, name)
    assert machines.list(sleeper.id) == []
    machines.delete(name)  # gone already: nothing to do
    machines.delete(MISSING)
    machines.cleanup(name)
    assert machines.describe(name).state == GONE


# -- restart ---------------------------------------------------------------------------------------------


def test_restart_brings_a_preempted_machine_back_under_its_name(machines: Machines, sleeper: Job) -> None:
    name = machine_name(sleeper.id)
    up(machines, name)
    machines.preempt(name, grace_s=0.5)
    wait_until(lambda: machines.describe(name).state in (STOPPED, GONE), 30, what=f"{name} to stop")
    assert machines.restart(name, sleeper.spec, sleeper.url, sleeper.key(), 2) == name
    info = up(machines, name)
    assert (info.job_id, info.attempt) == (sleeper.id, 2)


def test_restart_makes_a_new_machine_when_it_is_gone(machines: Machines, sleeper: Job) -> None:
    name = machine_name(sleeper.id)
    machines.delete(name)
    gone(machines, name)
    assert machines.restart(name, sleeper.spec, sleeper.url, sleeper.key(), 2) == name
    info = up(machines, name)
    assert (info.job_id, info.attempt) == (sleeper.id, 2)


# -- declared errors -----------------------------------------------------------------------------------


def test_a_machine_that_is_not_there(machines: Machines) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        machines.preempt(MISSING, grace_s=0)
    assert machines.console(MISSING) == ""
    machines.cleanup(MISSING)


@pytest.mark.parametrize("backend", ["gce"])  # the local backend always has room for its processes
def test_no_capacity_is_the_ports_error_from_launch_and_restart(
    burst: Burst, backend: str, machines: Machines, sleeper: Job, request: pytest.FixtureRequest
) -> None:
    emulator = request.getfixturevalue("compute_emulator")
    name = machine_name(sleeper.id)
    up(machines, name)
    machines.preempt(name, grace_s=0.5)
    wait_until(lambda: machines.describe(name).state == STOPPED, 30, what=f"{name} to stop")
    emulator.set_zone_capacity(emulator.zone, available=False)

    with pytest.raises(NoCapacity) as refused:
        machines.restart(name, sleeper.spec, sleeper.url, sleeper.key(), 2)
    assert refused.value.zone == emulator.zone and isinstance(refused.value, BurstError)
    assert machines.describe(name).state == STOPPED  # still there, to start when there is room

    with pytest.raises(JobFailed) as failed:  # the first launch of another job
        submit(burst, backend, pow, 2, 10)
    assert isinstance(failed.value.__cause__, NoCapacity) and failed.value.__cause__.zone == emulator.zone
