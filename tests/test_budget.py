"""``--budget``: a dollar cap on a job's machines, enforced at plan, at launch (maxRunDuration) and on the machine."""

from __future__ import annotations

import json

import pytest
from support import LARGE_QUOTAS, wait_until

from nbburst.client.burst import Burst
from nbburst.client.capture import capture
from nbburst.client.job import Job
from nbburst.errors import UsageError
from nbburst.machines.base import machine_name, worker_name
from nbburst.machines.gce.machines import GCEMachines
from nbburst.options import Options
from nbburst.protocol import budget, pricing
from nbburst.protocol.job import JobSpec, Resources, State, Status
from nbburst.ui.tables import cost_text

#: e2 spot at $3.60 per vCPU-hour, memory and disk free: an e2 machine with 2 vCPUs costs $0.002 a second.
PRICES = {
    "families": {"e2": {"spot_vcpu": 3.6, "spot_gb": 0.0, "vcpu": 3.6, "gb": 0.0}},
    "disks": {"pd-balanced": {"gb_month": 0.0}},
}

LOOP = """
import nbburst, time
for i in nbburst.checkpoint.range(100000, name="train"):
    nbburst.checkpoint.save("step", i)
    print("step", i, flush=True)
    time.sleep(0.2)
"""


def submit(burst: Burst, code: str, **options) -> Job:
    return burst.submit_cell(code, capture(code, {}, None, set()), burst.options(**options))


def test_budget_parsing_and_arithmetic():
    assert budget.parse_budget("$2.50") == 2.5 and budget.parse_budget(None) is None
    for bad in ("-1", "0", "two dollars", "nan"):
        with pytest.raises(UsageError, match="--budget"):
            budget.parse_budget(bad)
    assert Options.build(budget="2.5").budget_usd == 2.5
    assert budget.seconds_for(0.02, 7.2) == pytest.approx(10.0)
    assert budget.view(2.0, 0.5) == {"usd": 2.0, "spent": 0.5, "left": 1.5, "share": 0.25}
    assert budget.stop_after(100.0) == 90.0 and budget.stop_after(1000.0) == 985.0


def test_relaunches_get_what_is_left_and_none_once_it_is_spent():
    """Spend over attempts: a relaunch's machine may run for what is left; a supervisor gives up below a boot."""
    plan = {"machine_type": "e2-standard-2", "cores": 2, "memory_gb": 8, "spot": True, "zone": "us-central1-a"}
    plan["extra"] = {"pricing": pricing.for_plan(plan, "gce", prices=pricing.table(PRICES)).to_dict()}
    spec = JobSpec("b20261124-000000-abcdef", "x", "gce", "cell", Resources(), 3600, 5, None, plan=plan)
    spec.created, spec.budget_usd = 1000.0, 0.2  # $7.20 an hour: 100 s of the machine
    assert budget.per_hour(spec) == pytest.approx(7.2)
    assert budget.run_seconds(budget.for_launch(spec, [])) == 100
    first = Status(1, State.PREEMPTED, heartbeat=1060.0, started=1010.0, launched=1000.0)  # 60 s used
    relaunch = budget.for_launch(spec, [first])
    assert relaunch.budget_usd == pytest.approx(0.08) and budget.run_seconds(relaunch) == 40
    assert budget.stop_time(spec, [first], launched=2000.0) == pytest.approx(2000.0 + 36.0)
    assert budget.exhausted(spec, [first]) == ""  # 40 s left: enough to boot
    second = Status(2, State.PREEMPTED, heartbeat=2015.0, started=2005.0, launched=2000.0)  # 15 s more
    reason = budget.exhausted(spec, [first, second])  # 25 s left: not enough to boot again
    assert reason.startswith("reached its budget: $0.1500 spent of $0.2000")
    local = JobSpec("b20261124-000000-abcdef", "x", "local", "cell", Resources(), 3600, 5, None, budget_usd=0.01)
    assert budget.run_seconds(local) is None and budget.stop_time(local, [], 0.0) is None  # free: nothing to cap


def test_workers_share_the_budget_with_the_job_machine():
    """``--workers 2``: three machines of the planned type spend the budget together, at launch and on the machine."""
    plan = {"machine_type": "e2-standard-2", "cores": 2, "memory_gb": 8, "spot": True, "zone": "us-central1-a"}
    plan["extra"] = {"pricing": pricing.for_plan(plan, "gce", prices=pricing.table(PRICES)).to_dict()}
    spec = JobSpec("b20261124-000000-abcdef", "x", "gce", "cell", Resources(workers=2), 3600, 5, None, plan=plan)
    spec.created, spec.budget_usd = 1000.0, 0.6  # $7.20 an hour a machine, three machines: 100 s of all three
    assert budget.machines(spec) == 3 and budget.per_hour(spec) == pytest.approx(21.6)
    assert budget.run_seconds(budget.for_launch(spec, [])) == 100  # each machine's maxRunDuration, workers' too
    first = Status(1, State.PREEMPTED, heartbeat=1060.0, started=1010.0, launched=1000.0)  # 60 s of three machines
    cost = pricing.job_cost(spec, [first], ended=1060.0)
    assert cost["total"] == pytest.approx(0.36) and cost["machines"] == 3  # the workers' lifetimes are counted
    assert budget.run_seconds(budget.for_launch(spec, [first])) == 40  # $0.24 left, shared by three
    assert budget.stop_time(spec, [first], launched=2000.0) == pytest.approx(2000.0 + 36.0)
    second = Status(2, State.PREEMPTED, heartbeat=2015.0, started=2005.0, launched=2000.0)
    assert budget.exhausted(spec, [first, second]).startswith("reached its budget: $0.4500 spent of $0.6000")
    with pytest.raises(UsageError, match=r"buys 10 s of the 3 planned machines"):
        budget.check_plan(0.06, plan, "gce", 3)  # enough for one machine's boot, not for three
    budget.check_plan(0.06, plan, "gce", 1)


@pytest.mark.compute_emulator(operation_delay=0.02, preemption_grace=1.0)
def test_a_budget_too_small_to_boot_is_refused_at_plan(gce_env, compute_emulator, tmp_path, monkeypatch):
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    monkeypatch.setenv("NBBURST_PRICE_FILE", str(prices))
    burst = Burst()
    with pytest.raises(UsageError, match=r"--budget \$0.0100 buys 5 s .* give at least \$0.0600"):
        submit(burst, "x = 1", backend="gce", machine_type="e2-standard-2", budget="0.01")
    assert not [r for r in compute_emulator.request_log if r["method"] == "POST"]  # nothing was launched
    assert burst.jobs(store=burst.store_for("gce")) == []


@pytest.mark.compute_emulator(operation_delay=0.02, preemption_grace=1.0)
def test_a_budget_stops_a_job_on_compute_engine(gce_env, compute_emulator, tmp_path, monkeypatch):
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    monkeypatch.setenv("NBBURST_PRICE_FILE", str(prices))
    burst = Burst()
    job = submit(burst, LOOP, backend="gce", machine_type="e2-standard-2", budget="0.09")  # 45 s of the machine
    assert job.spec.plan["machine_type"].startswith("e2-") and job.info()["cost_per_hour_usd"] == pytest.approx(7.2)
    insert = next(r for r in compute_emulator.request_log if r["method"] == "POST" and r["path"].endswith("/instances"))
    sched = insert["body"]["scheduling"]
    assert sched["instanceTerminationAction"] == "DELETE"  # the cap is Google's to enforce, too
    assert 40 <= int(sched["maxRunDuration"]["seconds"]) <= 45 < GCEMachines.run_margin_s
    assert " of $0.0900" in cost_text(job.info())

    wait_until(lambda: "step 3" in job.logs(), timeout=60, what="the loop to run")
    assert job.wait(timeout=90) == State.FAILED
    reason = job.terminal().reason
    assert "reached its budget" in reason and "of $0.0900" in reason, reason
    info = job.info()
    assert info["budget"]["usd"] == 0.09 and info["budget"]["spent"] <= 0.09 + 1e-9
    assert info["budget"]["spent"] >= 0.09 * 0.8  # it ran for most of what it could buy
    store = burst.store_for("gce")
    assert any("/state/" in k for k in store.list(job.layout.checkpoints))  # checkpoints kept: --resume continues
    assert compute_emulator.wait_for_status(machine_name(job.id), "DELETED", timeout=30) == "DELETED"


@pytest.mark.compute_emulator(operation_delay=0.02, preemption_grace=1.0, quotas=LARGE_QUOTAS)
def test_a_budget_stops_a_job_and_its_workers(gce_env, compute_emulator, secretmanager_emulator, tmp_path, monkeypatch):
    """``--workers 2 --budget``: three machines share the cap; every VM's maxRunDuration derives from it."""
    pytest.importorskip("distributed")
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    monkeypatch.setenv("NBBURST_PRICE_FILE", str(prices))
    burst = Burst()
    job = submit(burst, LOOP, backend="gce", machine_type="e2-standard-2", workers=2, budget="0.27")  # 45 s of three
    inserts = [r for r in compute_emulator.request_log if r["method"] == "POST" and r["path"].endswith("/instances")]
    assert len(inserts) == 3
    for insert in inserts:  # the job's machine and both workers: what the budget buys all three at once
        sched = insert["body"]["scheduling"]
        assert sched["instanceTerminationAction"] == "DELETE" and 40 <= int(sched["maxRunDuration"]["seconds"]) <= 45
    assert job.wait(timeout=120) == State.FAILED, (job.terminal(), job.logs())
    reason = job.terminal().reason
    assert "reached its budget" in reason and "of $0.2700" in reason, reason
    info = job.info()
    assert 0.27 * 0.8 <= info["budget"]["spent"] <= 0.27 + 1e-9 and info["cost"]["machines"] == 3
    assert info["workers"]["cost_usd"] == pytest.approx(info["cost_usd"] * 2 / 3, abs=1e-3)
    for name in [machine_name(job.id), worker_name(job.id, 0), worker_name(job.id, 1)]:
        assert compute_emulator.wait_for_status(name, "DELETED", timeout=30) == "DELETED"
