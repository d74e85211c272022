"""Detach, reattach from a new kernel, interrupt, cancel, %burst management commands, and cost."""

from __future__ import annotations

import json
import queue
import time
from pathlib import Path

import pytest
from support import machines_gone
from support.notebook import errors, run_notebook, stream, views

from nbburst.protocol import pricing


def _status(root: Path, name: str) -> dict | None:
    for spec in (root / "jobs").glob("*/spec.json"):
        if json.loads(spec.read_text())["name"] == name:
            statuses = sorted((spec.parent / "status").glob("*.json"))
            return json.loads(statuses[-1].read_text()) if statuses else {"state": "SUBMITTED"}
    return None


def test_detach_then_attach_from_a_new_kernel(burst_env):
    first = run_notebook(
        [
            "%load_ext nbburst",
            "%%burst --detach --name later\n"
            "import time, nbburst\n"
            "for i in range(3):\n"
            "    nbburst.progress(i + 1, 3, 'steps')\n"
            "    print('step', i, flush=True)\n"
            "    time.sleep(0.7)\n"
            "x = 41 + 1",
            "job = _\nprint(type(job).__name__, job.name, job.state.terminal)",
        ]
    )
    assert errors(first) == []
    assert "`%burst attach later`" in stream(first.cells[1])
    assert stream(first.cells[2]) == "Job later False\n"
    assert views(first), "a detached cell shows a live view too"

    # a new kernel (as after a restart) finds the job by name and brings its outputs in
    second = run_notebook(
        [
            "%load_ext nbburst",
            "table = %burst jobs\nprint(table.rows[0]['name'], table.rows[0]['machine'], table.rows[0]['cost'])",
            "%burst attach later",
            "print(x)",
            "%burst logs later",
            "r = %burst result later\nprint(sorted(r))",
            "import time; time.sleep(1.5)",
        ]
    )
    assert errors(second) == []
    assert stream(second.cells[1]) == "later local $0.00\n"
    assert "step 2" in stream(second.cells[2])  # the log comes in as the cell's output
    assert stream(second.cells[3]) == "42\n"
    assert stream(second.cells[4]) == "step 0\nstep 1\nstep 2\n"
    assert "'x'" in stream(second.cells[5])
    (view,) = views(second)
    assert "SUCCEEDED" in view["summary"]["value"]
    assert view["progress-label"]["value"] == "steps 3/3 (100%)"
    assert "step 2" in view["tail"]["value"]


def test_interrupt_detaches_and_cancel_stops_the_job(burst_env):
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")

    def execute(code: str, while_busy=None, timeout: float = 60) -> list[dict]:
        msg_id = kc.execute(code)
        out, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            if while_busy is not None and while_busy():
                while_busy = None
            try:
                msg = kc.get_iopub_msg(timeout=0.1)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return out
            out.append(msg)
        raise TimeoutError(code)

    def text(msgs: list[dict]) -> str:
        return "".join(m["content"].get("text", "") for m in msgs if m["msg_type"] == "stream")

    def interrupt_when_running() -> bool:
        status = _status(burst_env["root"], "long")
        if status and status["state"] == "RUNNING":
            km.interrupt_kernel()
            return True
        return False

    try:
        execute("%load_ext nbburst")
        started = time.monotonic()
        msgs = execute(
            "%%burst --name long\nimport time\nprint('working', flush=True)\ntime.sleep(120)\ny = 1",
            while_busy=interrupt_when_running,
        )
        assert time.monotonic() - started < 90  # well before the cell's 120 s: the interrupt detached it
        assert not [m for m in msgs if m["msg_type"] == "error"], "the interrupt detaches, it is not an error"
        out = text(msgs)
        assert "detached from job long" in out and "`%burst attach long`" in out and "`%burst cancel long`" in out
        assert _status(burst_env["root"], "long")["state"] == "RUNNING"  # it keeps running

        listing = execute("t = %burst jobs --state running\nprint([(r['name'], r['state']) for r in t.rows])")
        assert text(listing) == "[('long', 'RUNNING')]\n"
        assert "nbburst: job long is CANCELLED" in text(execute("%burst cancel long"))
        assert text(execute("t2 = %burst jobs --state active\nprint(t2.rows)")) == "[]\n"
        info = text(execute("from nbburst.client import Burst\nprint(Burst().job('long').info()['state'])"))
        assert info == "CANCELLED\n"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_cancel_from_the_view_and_config_magic(burst_env):
    nb = run_notebook(
        [
            "%load_ext nbburst",
            "%%burst --detach --name doomed\nimport time\nprint('started', flush=True)\ntime.sleep(120)",
            "import time\nfrom nbburst.ui.view import live_view\n"
            "job = _\n"
            "deadline = time.time() + 120\n"
            "while job.state.value != 'RUNNING' and time.time() < deadline:\n"
            "    time.sleep(0.1)\n"
            "live_view(job.id).cancel()  # what the Cancel button does\n"
            "while not job.state.terminal and time.time() < deadline:\n"
            "    time.sleep(0.1)\n"
            "print(job.state.value)",
            "%burst config poll_interval=0.1",
            "c = %burst config\nprint(c['poll_interval'], c.described['poll_interval']['source'])",
            "%burst config no_such_setting=1",
            "import time; time.sleep(2)",
        ]
    )
    assert stream(nb.cells[2]) == "CANCELLED\n"
    config_html = next(o for o in nb.cells[3].outputs if o["output_type"] == "execute_result")["data"]["text/html"]
    assert "poll_interval" in config_html and "%burst config" in config_html
    assert stream(nb.cells[4]) == "0.1 %burst config\n"
    assert any("unknown setting 'no_such_setting'" in e for e in errors(nb))
    (view,) = views(nb)
    assert "CANCELLED" in view["summary"]["value"]
    assert view["cancel"]["disabled"] is True


def test_logs_of_one_attempt_and_unknown_jobs(burst_env):
    from nbburst.client.burst import Burst

    burst = Burst()
    job = burst.submit(lambda: time.sleep(0.3) or print("hi") or 5, options=burst.options(name="small"))
    assert job.result(timeout=60) == 5
    assert job.logs(attempt=1) == "hi\n" and job.logs(attempt=2) == ""
    assert burst.job("small").id == job.id  # names work wherever ids do
    with pytest.raises(LookupError, match="no job with id or name 'nope'"):
        burst.job("nope")
    info = job.info()
    assert info["cost_usd"] == 0.0 and info["cost"]["local"] is True and info["cost_per_hour_usd"] == 0.0
    assert job.terminal().cost["seconds"] > 0
    machines_gone(burst.machines("local"))


# -- pricing ---------------------------------------------------------------------------------------


def test_hourly_price_spot_versus_on_demand():
    spot = pricing.hourly("n2", 64, 256, spot=True, region="us-central1-a", disk_gb=50)
    demand = pricing.hourly("n2-standard-64", 64, 256, spot=False, region="us-central1")
    table = pricing.DEFAULT_TABLE["families"]["n2"]
    assert spot.vcpu == pytest.approx(64 * table["spot_vcpu"]) and spot.memory == pytest.approx(256 * table["spot_gb"])
    assert spot.disk == pytest.approx(50 * 0.10 / pricing.HOURS_PER_MONTH)
    assert demand.total == pytest.approx(64 * table["vcpu"] + 256 * table["gb"])
    assert spot.on_demand == pytest.approx(demand.total + spot.disk)
    assert 0.5 < spot.saving < 0.95 and demand.saving == 0.0
    assert spot.region == "us-central1" and spot.as_of == pricing.PRICES_AS_OF and not spot.notes


def test_gpus_regions_and_estimates():
    a2 = pricing.for_plan(
        {"machine_type": "a2-highgpu-2g", "cores": 24, "memory_gb": 170, "spot": False, "zone": "europe-west4-a"}
    )
    base = pricing.hourly("a2", 24, 170, "nvidia-tesla-a100", 2, spot=False, region="us-central1")
    assert a2.gpu == pytest.approx(2 * 2.933908 * 1.10) and a2.total == pytest.approx(base.total * 1.10)
    g2 = pricing.for_plan({"machine_type": "g2-standard-8", "cores": 8, "memory_gb": 32, "spot": True})
    assert g2.gpu == pytest.approx(pricing.DEFAULT_TABLE["gpus"]["nvidia-l4"]["spot_hour"])
    t4 = pricing.hourly("n1", 4, 15, "nvidia-tesla-t4", 1, spot=True, region="asia-southeast1")
    assert t4.gpu == pytest.approx(0.14 * 1.231)
    odd = pricing.hourly("m9", 2, 8, "nvidia-h900", 1, region="mars-north1")
    assert odd.total > 0 and len(odd.notes) == 3  # unknown region, family and GPU: estimated, never an error
    assert pricing.for_plan({"machine_type": "local"}, "local").total == 0.0
    for family in ("e2", "n2", "n2d", "c2d", "c3", "n1", "g2", "a2"):
        for region in ("us-central1", "us-east1", "europe-west4", "asia-southeast1"):
            b = pricing.hourly(family, 8, 32, spot=True, region=region)
            assert 0 < b.total < b.on_demand and not b.notes


def test_price_overrides_and_cost_of_a_preempted_job(tmp_path):
    from types import SimpleNamespace

    from nbburst.protocol.job import State, Status

    price_file = tmp_path / "prices.json"
    price_file.write_text(json.dumps({"families": {"n2": {"spot_vcpu": 0.01}}}))
    prices = pricing.table({"regions": {"us-east1": {"factor": 2.0}}}, str(price_file))
    assert pricing.hourly("n2", 10, 0, prices=prices).vcpu == pytest.approx(0.1)
    assert pricing.hourly("n2", 10, 0, prices=prices, region="us-east1").vcpu == pytest.approx(0.2)
    assert pricing.DEFAULT_TABLE["families"]["n2"]["spot_vcpu"] != 0.01  # the default is untouched

    plan = {"machine_type": "n2-standard-8", "cores": 8, "memory_gb": 32, "spot": True, "zone": "us-central1-b"}
    spec = SimpleNamespace(plan=plan, backend="gce", created=1000.0)
    statuses = [
        Status(attempt=1, state=State.PREEMPTED, started=1010.0, heartbeat=1600.0),
        Status(attempt=2, state=State.SUCCEEDED, started=1700.0, heartbeat=2290.0),
    ]
    cost = pricing.job_cost(spec, statuses, ended=2300.0)
    assert cost["seconds"] == pytest.approx(600 + 600)  # both attempts are billed, the gap between them is not
    hourly = pricing.for_plan(plan)
    assert cost["total"] == pytest.approx(hourly.total * 1200 / 3600, abs=1e-5)
    assert cost["saving"] == pytest.approx((hourly.on_demand - hourly.total) * 1200 / 3600, abs=1e-5)
    assert pricing.usd(0.00421) == "$0.0042" and pricing.usd(12.5) == "$12.50" and pricing.usd(0) == "$0.00"


def test_config_prices_reach_the_plan(burst_env, monkeypatch):
    from nbburst import config
    from nbburst.machines.base import Plan

    monkeypatch.setenv("NBBURST_PRICES", json.dumps({"families": {"c3": {"spot_vcpu": 1.0, "spot_gb": 0.0}}}))
    settings = config.load()
    assert config.describe(settings)["prices"]["source"] == "$NBBURST_PRICES"
    plan = pricing.price_plan(Plan("c3-standard-4", 4, 16, True, zone="us-east1-b"), "gce", settings)
    assert plan.price_per_hour == pytest.approx(4.0 + 50 * 0.10 / pricing.HOURS_PER_MONTH, abs=1e-5)
    assert plan.extra["pricing"]["vcpu"] == pytest.approx(4.0)
    assert pricing.breakdown_of(plan.to_dict()).vcpu == pytest.approx(4.0)
