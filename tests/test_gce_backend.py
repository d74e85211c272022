"""The Compute Engine backend end to end, against the emulators with the real client libraries.

Each VM is a local process group running the real startup script: it downloads the client's nbburst
wheel from the GCS emulator, installs it in a venv on the instance's disk and runs the agent, which
deletes its own VM at the end.
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from support import LARGE_QUOTAS, held_call, wait_until
from support.gce import PROJECT, ZONE, instance, submit
from support.nbrun import error, run, stream

from nbburst.client.burst import Burst
from nbburst.errors import UsageError
from nbburst.machines.base import machine_name
from nbburst.machines.gce.machines import GCEMachines
from nbburst.protocol.job import State
from nbburst.protocol.pricing import family_of

ROOT = Path(__file__).resolve().parents[1]


def inserts(emu) -> list[dict]:
    return [r for r in emu.request_log if r["method"] == "POST" and r["path"].endswith("/instances")]


def deletes(emu, name) -> list[dict]:
    return [r for r in emu.request_log if r["method"] == "DELETE" and r["path"].endswith(f"/instances/{name}")]


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_quickstart_notebook_runs_on_a_spot_vm(gce_env, compute_emulator, secretmanager_emulator):
    nb = nbformat.read(ROOT / "notebooks" / "quickstart.ipynb", as_version=4)
    burst_cells = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%%burst")]
    assert len(burst_cells) == 1 and "--backend local" in burst_cells[0].source
    burst_cells[0].source = burst_cells[0].source.replace("--backend local", "--backend gce --cores 4")
    t0 = time.monotonic()
    run(nb, timeout=240)
    elapsed = time.monotonic() - t0
    outputs = [c.outputs for c in nb.cells if c.cell_type == "code"]
    for out in outputs:
        assert error(out) is None, error(out)
    assert "candidates, best CV accuracy" in "".join(stream(o) for o in outputs)
    assert "test accuracy: 0.9" in stream(outputs[-1])

    (insert,) = inserts(compute_emulator)
    body = insert["body"]
    assert insert["query"]["requestId"]
    assert body["machineType"].endswith("/machineTypes/e2-highcpu-4")  # the cheapest with 4 vCPUs
    labels = body["labels"]
    assert labels["nbburst"] == "1" and labels["nbburst-job"] and labels["nbburst-owner"]
    sched = body["scheduling"]
    assert sched["provisioningModel"] == "SPOT" and sched["instanceTerminationAction"] == "STOP"
    assert 600 < int(sched["maxRunDuration"]["seconds"]) <= 600 + GCEMachines.run_margin_s  # --timeout 10m
    items = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert {"nbburst-job-url", "nbburst-key-secret", "nbburst-attempt", "startup-script", "shutdown-script"} <= set(
        items
    )
    assert items["nbburst-job-url"].startswith(f"gs://{gce_env['NBBURST_ROOT'][5:].split('/')[0]}/nbburst/jobs/")
    burst = Burst()
    (job,) = burst.jobs()
    assert job.state == State.SUCCEEDED and job.spec.plan["machine_type"] == "e2-highcpu-4"
    key = burst.keyring.get(job.id).hex()
    assert all(key not in value for value in items.values())  # the key is not in the metadata: its secret is
    vm_account = f"serviceAccount:{compute_emulator.default_service_account}"
    accesses = [r for r in secretmanager_emulator.requests if r[1].endswith(":access")]
    assert items["nbburst-key-secret"].endswith(f"/secrets/nbburst-key-{job.id}/versions/1") and accesses
    assert {who for _, _, who in accesses} == {vm_account}  # read by the VM, as its service account
    store = burst.store_for("gce")
    assert all(key.encode() not in store.get(k) for k in store.list(job.layout.prefix))  # not in the Store
    name = machine_name(job.id)
    assert compute_emulator.wait_for_status(name, "DELETED", timeout=20) == "DELETED"  # the VM is gone
    assert deletes(compute_emulator, name)
    print(f"quickstart on the gce emulator: {elapsed:.1f} s")


@pytest.mark.compute_emulator(quotas=LARGE_QUOTAS)
def test_plan_picks_the_cheapest_type_and_says_why(gce_env):
    machines = Burst().machines("gce")
    plan = machines.plan(Burst().options(backend="gce", cores=64).resources)
    assert plan.cores == 64 and plan.memory_gb >= 64 and plan.spot and plan.zone == "us-central1-a"
    assert "cheapest spot machine in us-central1-a" in plan.reason and "next:" in plan.reason
    runners_up = [float(p) for p in re.findall(r"\$([0-9.]+)/h", plan.reason.split("next:")[1])]
    assert runners_up and all(plan.price_per_hour <= p for p in runners_up)
    assert plan.price_per_hour < plan.on_demand_price_per_hour
    assert machines.plan(Burst().options(backend="gce", cores=4).resources).machine_type == "e2-highcpu-4"
    on_demand = machines.plan(Burst().options(backend="gce", cores=8, memory=64, on_demand=True).resources)
    assert not on_demand.spot and on_demand.memory_gb >= 64 and on_demand.cores >= 8
    custom = machines.plan(Burst().options(backend="gce", cores=6).resources)
    assert custom.machine_type == "e2-custom-6-6144" and custom.extra["custom"]  # cheaper than an 8-vCPU type
    t4 = machines.plan(Burst().options(backend="gce", gpu="t4:2").resources)
    assert family_of(t4.machine_type) == "n1" and (t4.gpu, t4.gpu_count) == ("nvidia-tesla-t4", 2)
    assert t4.extra["gpu_attached"]
    l4 = machines.plan(Burst().options(backend="gce", gpu="nvidia-l4").resources)
    assert l4.machine_type == "g2-standard-4" and not l4.extra["gpu_attached"]
    a100 = machines.plan(Burst().options(backend="gce", gpu="a100:2").resources)
    assert a100.machine_type == "a2-highgpu-2g"
    given = machines.plan(Burst().options(backend="gce", machine_type="c2d-standard-8").resources)
    assert given.machine_type == "c2d-standard-8" and "as asked" in given.reason


def test_choose_ranks_by_price_with_custom_types_and_gpu_families():
    from nbburst.machines.gce.types import MachineType, choose
    from nbburst.protocol.job import Resources

    prices = {
        "families": {
            "n2": {"vcpu": 1.0, "gb": 0.1},
            "e2": {"vcpu": 0.8, "gb": 0.1},
            "n1": {"vcpu": 0.9, "gb": 0.1},
            "g2": {"vcpu": 1.0, "gb": 0.1},
        },
        "gpus": {"nvidia-l4": {"hour": 5.0}, "nvidia-tesla-t4": {"hour": 3.0}},
        "regions": {"us-central1": {"factor": 1.0}},
    }
    catalog = [
        MachineType("e2-standard-8", 8, 32768),
        MachineType("n2-highcpu-8", 8, 8192),
        MachineType("n2-highcpu-16", 16, 16384),
        MachineType("e2-micro", 2, 1024, shared_cpu=True),
        MachineType("n1-standard-4", 4, 15360),
        MachineType("m1-megamem-96", 96, 1468006),
        MachineType("g2-standard-4", 4, 16384, gpu="nvidia-l4", gpu_count=1),
    ]
    zone = "us-central1-a"
    pick = choose(Resources(cores=8), catalog, zone, prices)
    assert pick.machine.name == "e2-custom-8-8192" and pick.custom  # 8 x 0.8 + 8 x 0.1, x 1.05 < n2-highcpu-8
    pick = choose(Resources(cores=8), catalog, zone, prices, custom_ok=False)
    assert pick.machine.name == "n2-highcpu-8" and "next: e2-standard-8" in pick.reason
    pick = choose(Resources(cores=2), catalog, zone, prices, custom_ok=False)  # never a shared-core type
    assert pick.machine.name == "n1-standard-4"
    pick = choose(Resources(gpu="l4"), catalog, zone, prices, offered_gpus={"nvidia-l4"})
    assert (pick.machine.name, pick.gpu, pick.gpu_count, pick.attached_gpu) == ("g2-standard-4", "nvidia-l4", 1, False)
    pick = choose(
        Resources(gpu="nvidia-tesla-t4", gpu_count=1),
        catalog,
        zone,
        prices,
        offered_gpus={"nvidia-tesla-t4"},
        custom_ok=False,
    )
    assert pick.machine.name == "n1-standard-4" and pick.attached_gpu
    with pytest.raises(UsageError, match="not offered in zone us-central1-a .GPUs there: nvidia-l4"):
        choose(Resources(gpu="t4"), catalog, zone, prices, offered_gpus={"nvidia-l4"})
    with pytest.raises(UsageError, match="no machine type in zone us-central1-a has 200 vCPUs"):
        choose(Resources(cores=200), catalog, zone, prices)
    with pytest.raises(UsageError, match="--machine-type n2-highcpu-8 has 8 vCPUs, fewer than --cores 16"):
        choose(Resources(cores=16, machine_type="n2-highcpu-8"), catalog, zone, prices)


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_a_retried_insert_makes_one_vm_and_the_agent_deletes_it(gce_env, compute_emulator):
    from google.api_core import exceptions

    burst = Burst()
    machines = burst.machines("gce")
    real_insert = machines.instances.insert
    calls = []

    def lost_answer(*args, **kwargs):  # the insert reaches Compute Engine, its answer is lost
        calls.append(kwargs["request"].request_id)
        op = real_insert(*args, **kwargs)
        if len(calls) == 1:
            raise exceptions.ServiceUnavailable("connection reset")
        return op

    machines.instances.insert = lost_answer
    machines.api_attempts = 3
    job = submit(burst, pow, 2, 10, cores=2)
    assert len(calls) == 2 and calls[0] == calls[1]  # the same request_id, sent twice
    assert len(inserts(compute_emulator)) == 2 and len(compute_emulator.instances()) == 1
    assert job.wait(timeout=60, supervise=False) == State.SUCCEEDED  # no client clean-up
    assert job.outcome().last == 1024
    name = machine_name(job.id)
    assert compute_emulator.wait_for_status(name, "DELETED", timeout=20) == "DELETED"
    (delete,) = deletes(compute_emulator, name)  # one DELETE: the agent's own


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_without_compute_scope_the_vm_powers_off_and_the_client_deletes_it(gce_env, compute_emulator, monkeypatch):
    monkeypatch.setenv("NBBURST_SCOPES", "https://www.googleapis.com/auth/devstorage.read_write")
    burst = Burst()
    job = submit(burst, sum, [1, 2, 3], cores=2)
    assert job.wait(timeout=60, supervise=False) == State.SUCCEEDED
    name = machine_name(job.id)
    assert compute_emulator.wait_for_status(name, "TERMINATED", timeout=20) == "TERMINATED"  # powered off
    assert "powering it off" in compute_emulator.serial_output(name)
    assert not deletes(compute_emulator, name)
    assert job.supervise() == State.SUCCEEDED  # what Job.wait does on its last poll
    assert compute_emulator.wait_for_status(name, "DELETED", timeout=20) == "DELETED"


@pytest.mark.compute_emulator(operation_delay=0.02, preemption_grace=1.0, time_scale=0.5)  # 30 s of VM time: 15 s
def test_max_run_duration_ends_a_vm_whose_agent_hangs(gce_env, compute_emulator, monkeypatch):
    monkeypatch.setattr(GCEMachines, "run_margin_s", 3.0)
    burst = Burst()
    job = submit(burst, time.sleep, 300, cores=2, timeout="8s")
    name = machine_name(job.id)
    sched = compute_emulator.api_get(compute_emulator.project, compute_emulator.zone, name)["scheduling"]
    assert int(sched["maxRunDuration"]["seconds"]) == 30  # --timeout 8s plus 3 s, raised to Compute Engine's least
    wait_until(lambda: job.state == State.RUNNING, what="the agent to start")
    agents = [
        p
        for p in map(psutil.Process, compute_emulator.instance(name)["live_pids"])
        if "nbburst.agent" in " ".join(p.cmdline())
    ]
    for agent in agents:
        agent.send_signal(signal.SIGSTOP)  # hung: its own time limit never fires
    assert compute_emulator.wait_for_status(name, "TERMINATED", timeout=20) == "TERMINATED"
    assert "maxRunDuration reached" in compute_emulator.serial_output(name)
    assert job.wait(timeout=30) == State.FAILED
    assert "timed out" in job.terminal().reason
    assert compute_emulator.wait_for_status(name, "DELETED", timeout=20) == "DELETED"


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_a_boot_failure_fails_the_job_with_the_serial_console_tail(gce_env, compute_emulator, monkeypatch):
    burst = Burst()
    machines = burst.machines("gce")
    build = machines.instance_resource

    def wrong_url(*args, **kwargs):
        resource = build(*args, **kwargs)
        for item in resource.metadata.items:
            if item.key == "nbburst-job-url":
                item.value = item.value.rsplit("/", 1)[0] + "/b20000101-000000-000000"
        return resource

    monkeypatch.setattr(machines, "instance_resource", wrong_url)
    job = submit(burst, print, "never runs", cores=2)
    name = machine_name(job.id)
    assert compute_emulator.wait_for_status(name, "TERMINATED", timeout=30) == "TERMINATED"
    assert "nbburst-startup:" in job.console()
    assert job.wait(timeout=40) == State.FAILED
    reason = job.terminal().reason
    assert "boot failure" in reason and "Last lines of its serial console" in reason
    assert "cannot read" in reason and "b20000101-000000-000000/dist/manifest.json: it does not exist" in reason
    assert compute_emulator.wait_for_status(name, "DELETED", timeout=20) == "DELETED"


@pytest.mark.compute_emulator(operation_delay=0.02, preemption_grace=2.0)
def test_a_preempted_vm_restarts_with_its_disk_and_the_next_attempt(gce_env, compute_emulator, tmp_path):
    burst = Burst()
    started = tmp_path / "started"
    job = submit(burst, held_call, str(started), "done", cores=2)
    name = machine_name(job.id)
    wait_until(started.exists, what="the job to run")  # still running when preempted, however busy the machine
    job.preempt(grace_s=1.0)
    wait_until(lambda: job.supervise() == State.RUNNING and job.attempt == 2, timeout=60, what="attempt 2")
    console = compute_emulator.serial_output(name)
    assert console.count("nbburst-startup: begin") == 2
    assert console.count("nbburst 0.1.0 installed") == 1 and "already installed" in console  # the venv stayed
    assert job.wait(timeout=90) == State.SUCCEEDED
    assert job.result() == "done" and job.attempt == 2
    boots = [r for r in compute_emulator.request_log if r["path"].endswith(f"/instances/{name}/setMetadata")]
    assert [{i["key"]: i["value"] for i in r["body"]["items"]}["nbburst-attempt"] for r in boots] == ["2"]
    starts = [r for r in compute_emulator.request_log if r["path"].endswith(f"/instances/{name}/start")]
    assert len(starts) == 1 and len(inserts(compute_emulator)) == 1  # the same VM, started again
    assert compute_emulator.wait_for_status(name, "DELETED", timeout=20) == "DELETED"


def test_the_wheel_is_deterministic_and_the_manifest_signed(gce_env):
    from nbburst.protocol import dist
    from nbburst.protocol.job import JobLayout
    from nbburst.store import open_store

    store = open_store(gce_env["NBBURST_ROOT"])
    manifest = dist.publish(store, JobLayout("b20000101-000000-aaaaaa"), b"k" * 32, {"numpy": "0"})
    assert dist.verify_manifest(b"k" * 32, manifest) and not dist.verify_manifest(b"x" * 32, manifest)
    name, data = dist.wheel()
    blob = store.get(manifest["wheel"]["blob"])
    assert blob == data and name == manifest["wheel"]["file"]
    assert dist.wheel()[1] == data  # deterministic: same files, same bytes, same digest
    listing = __import__("zipfile").ZipFile(__import__("io").BytesIO(data)).namelist()
    assert "nbburst/agent/attempt/controller.py" in listing and any(n.endswith(".dist-info/RECORD") for n in listing)
    assert not any("__pycache__" in n for n in listing)
    again = dist.publish(store, JobLayout("b20000101-000000-aaaaaa"), b"k" * 32, {})
    assert again == json.loads(store.get("jobs/b20000101-000000-aaaaaa/dist/manifest.json"))


def _probe_wheel(folder: Path) -> Path:
    """A tiny wheel on a local "index": the package the notebook has and the VM's image lacks."""
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nbburst_probe-1.0-py3-none-any.whl"
    files = {
        "nbburst_probe/__init__.py": "VALUE = 'probe 1.0'\n",
        "nbburst_probe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: nbburst-probe\nVersion: 1.0\n",
        "nbburst_probe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
        "nbburst_probe-1.0.dist-info/RECORD": "",
    }
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return folder


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_packages_that_differ_are_installed_on_the_vm_and_logged(gce_env, compute_emulator, monkeypatch, tmp_path):
    from nbburst.protocol import dist

    index = _probe_wheel(tmp_path / "index")
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # the VMs' pip (they inherit the environment) uses the local index
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    real = dist.requirements
    monkeypatch.setattr(dist, "requirements", lambda *a: {**real(*a), "nbburst-probe": "1.0"})

    def use_probe():
        import nbburst_probe

        return nbburst_probe.VALUE

    burst = Burst()
    job = submit(burst, use_probe, cores=2)
    assert job.wait(timeout=90) == State.SUCCEEDED, job.terminal().reason
    assert job.outcome().last == "probe 1.0"
    log = job.logs()
    assert "installing 1 package(s) to match the notebook: nbburst-probe==1.0" in log
    assert "packages installed in" in log
    manifest = json.loads(burst.store_for("gce").get(job.layout.key("dist/manifest.json")))
    assert manifest["requirements"]["nbburst-probe"] == "1.0" and manifest["requirements"].get("cloudpickle")
    assert compute_emulator.wait_for_status(machine_name(job.id), "DELETED", timeout=20) == "DELETED"


def test_shutdown_script_marks_a_silent_attempt_preempted(tmp_path, monkeypatch):
    from nbburst.agent.machine.gce import mark_shutdown
    from nbburst.protocol import signing
    from nbburst.protocol.folder import JobFolder
    from nbburst.protocol.job import JobLayout, Status, Terminal
    from nbburst.store import open_store
    from nbburst.testing import MetadataServer

    root = tmp_path / "store"
    store, layout, key = open_store(str(root)), JobLayout("b20000101-000000-bbbbbb"), signing.new_key()
    folder = JobFolder(store, layout, key)
    attrs = {"nbburst-job-url": f"{root}/jobs/{layout.job_id}", "nbburst-attempt": "2"}
    (tmp_path / "job-key").write_text(key.hex())  # what the bootstrap left from the job's secret
    monkeypatch.setenv("NBBURST_HOME", str(tmp_path))
    with MetadataServer({"instance/attributes": attrs, "instance/preempted": "TRUE"}) as md:
        monkeypatch.setenv("GCE_METADATA_HOST", md.host)
        folder.put_status(Status(2, State.PROVISIONING, heartbeat=time.time() - 60))
        assert mark_shutdown(wait_s=0) == "the attempt is PROVISIONING"  # never started: the client's call
        folder.put_status(Status(2, State.RUNNING, heartbeat=time.time()))
        assert mark_shutdown(wait_s=0.2) == "the agent is still reporting"
        folder.put_status(Status(2, State.RUNNING, heartbeat=time.time() - 60))
        assert mark_shutdown(wait_s=0) == "marked attempt 2 PREEMPTED"
        marked = folder.status(2)
        assert marked.state == State.PREEMPTED and marked.message == "the VM was preempted"
        folder.create_record(layout.terminal, Terminal(State.SUCCEEDED).to_json())
        assert mark_shutdown(wait_s=0) == "the job has ended"


def test_gc_deletes_orphaned_vms_and_keeps_live_jobs(gce_env, compute_emulator):
    """`nbburst gc` finds VMs carrying our labels whose job is unknown or ended, and only those."""
    import os
    import subprocess
    import sys

    from google.cloud import compute_v1

    from nbburst import config

    burst = Burst()
    owner = config.owner(burst.settings)
    finished = submit(burst, time.sleep, 0)
    assert finished.result(timeout=120) is None
    alive = submit(burst, time.sleep, 300)
    wait_until(lambda: alive.state == State.RUNNING, 120, what="the live job to run")
    vms = compute_emulator.client(compute_v1.InstancesClient)
    ops = compute_emulator.client(compute_v1.ZoneOperationsClient)
    sleeper = "exec sleep 300"
    leftovers = {
        "nbburst-orphan": {"nbburst": "1", "nbburst-job": "b20260101-000000-0rphan", "nbburst-owner": owner},
        "nbburst-leftover": {"nbburst": "1", "nbburst-job": finished.id, "nbburst-owner": owner},
        "someone-elses": {"nbburst": "1", "nbburst-job": "b20260101-000000-0ther0", "nbburst-owner": "someone"},
        "not-ours": {"team": "data"},
    }
    for name, labels in leftovers.items():
        op = vms.insert(project=PROJECT, zone=ZONE, instance_resource=instance(name, startup=sleeper, labels=labels))
        ops.wait(project=PROJECT, zone=ZONE, operation=op.name)

    def gc(*flags):
        proc = subprocess.run(
            [sys.executable, "-m", "nbburst", "gc", "--backend", "gce", *flags],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ),
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    try:
        dry = gc("--dry-run")
        assert "would delete machine nbburst-orphan (gce): its job is unknown" in dry
        assert "would delete machine nbburst-leftover (gce): its job ended (SUCCEEDED)" in dry
        assert "someone-elses" not in dry and "not-ours" not in dry and machine_name(alive.id) not in dry
        assert {"nbburst-orphan", "nbburst-leftover"} <= {i["name"] for i in compute_emulator.instances()}

        gc()
        names = {i["name"] for i in compute_emulator.instances()}
        assert "nbburst-orphan" not in names and "nbburst-leftover" not in names
        assert {"someone-elses", "not-ours", machine_name(alive.id)} <= names
        assert alive.state == State.RUNNING
    finally:
        alive.cancel()
