"""Recovery does not need the notebook, on Compute Engine: the Store's watcher VM relaunches a detached job.

The process that submits the job exits at once, and nothing on this computer supervises it (the local
background process is for the local backend only, and this test process only looks and preempts): the job's
VM is preempted three times, the watcher VM (a process group of the Compute emulator running the real
startup script, as the job's VM does) relaunches it each time, a new process finds it SUCCEEDED, and the
watcher deletes its own VM once no unfinished job is left.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support import wait_until

from nbburst.client.burst import Burst
from nbburst.client.supervision import laptop
from nbburst.machines.base import machine_name
from nbburst.machines.gce.watcher import LABEL, say_state, watcher_name
from nbburst.protocol.job import State

SUBMITTER = """
import os, sys
from nbburst.client.burst import Burst

def work(seconds, runs):
    # each run adds a line to RUNS; the first three are preempted, so they run until their VM is taken
    import os, time
    before = open(runs).read().count("\\n") if os.path.exists(runs) else 0
    with open(runs, "a") as f:
        f.write("run\\n")
    while before < 3:
        time.sleep(0.1)
    time.sleep(seconds)
    return f"slept {seconds} s"

burst = Burst()
job = burst.submit(work, 6, sys.argv[1], options=burst.options(backend="gce", cores=2, max_restarts=5))
print(job.id, os.getpid(), flush=True)
"""
CHECK = """
import sys
from nbburst.client.burst import Burst
job = Burst().job(sys.argv[1])
print(job.state.value, job.attempt, repr(job.result(timeout=10)))
"""


@pytest.fixture
def quick_watcher(gce_env, monkeypatch):
    """A watcher (off in the other tests) that looks every half second and leaves after 3 s without jobs."""
    monkeypatch.setenv("NBBURST_WATCHER", "true")
    monkeypatch.setenv("NBBURST_WATCHER_INTERVAL", "0.5")
    monkeypatch.setenv("NBBURST_WATCHER_IDLE", "3s")
    return gce_env


@pytest.mark.compute_emulator(operation_delay=0.02, preemption_grace=1.0)
def test_a_detached_job_survives_three_preemptions_with_nobody_on_this_computer(
    quick_watcher, compute_emulator, tmp_path
):
    runs = tmp_path / "runs"
    done = subprocess.run([sys.executable, "-c", SUBMITTER, str(runs)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    job_id, submitter = done.stdout.split()
    job = Burst().job(job_id)  # this process only looks and preempts: it never supervises
    vm, watcher = machine_name(job_id), watcher_name(job.store.url)
    (made,) = [i for i in compute_emulator.instances() if i["name"] == watcher]
    assert made["labels"][LABEL] and "nbburst" not in made["labels"]  # no job's machine: gc judges it apart
    assert made["provisioning_model"] == "STANDARD"

    started = r"nbburst supervise: pid (\d+) watching gs://"
    console = Path(made["serial_console"])  # gone with its VM: read while the job runs
    pids = set(wait_until(lambda: re.findall(started, console.read_text()), 60, what="the watcher to start"))

    def running(attempt: int) -> bool:  # the attempt runs its cell, which has added its line to RUNS
        lines = runs.read_text().count("\n") if runs.exists() else 0
        return job.attempt == attempt and job.state == State.RUNNING and lines == attempt

    for attempt in (1, 2, 3):
        wait_until(lambda a=attempt: running(a), 180, what=f"attempt {attempt} to run its cell")
        compute_emulator.preempt(vm, grace=1.0)
    wait_until(lambda: job.terminal() is not None, 120, what="the job to end")

    seen = subprocess.run([sys.executable, "-c", CHECK, job_id], capture_output=True, text=True, timeout=60)
    assert seen.stdout.strip().split(maxsplit=2) == ["SUCCEEDED", "4", "'slept 6 s'"], seen.stderr

    assert len(pids) == 1
    relaunches = [e for e in json.loads(job.folder.get_record(job.layout.relaunch))["events"] if e["attempt"] > 1]
    assert [(e["attempt"], e["event"]) for e in relaunches] == [(2, "relaunched"), (3, "relaunched"), (4, "relaunched")]
    assert {e["by"].split(":")[1] for e in relaunches} == pids  # the watcher: neither this process nor the submitter
    assert pids.isdisjoint({submitter, str(os.getpid())})
    assert laptop.running(laptop.lock_path(job.burst.settings, job.store.url)) is None  # no local background process

    assert compute_emulator.wait_for_status(watcher, "DELETED", timeout=60) == "DELETED"
    (deleted,) = [r for r in compute_emulator.request_log if r["method"] == "DELETE" and watcher in r["path"]]
    assert compute_emulator.wait_for_status(vm, "DELETED", timeout=30) == "DELETED"


def nbburst(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "nbburst", *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_one_watcher_per_store_and_gc_deletes_it_once_no_job_is_left(gce_env, compute_emulator, monkeypatch):
    monkeypatch.setenv("NBBURST_WATCHER", "true")
    monkeypatch.setenv("NBBURST_WATCHER_IDLE", "10m")  # it would stay: gc is what removes it here
    burst = Burst()
    watchers = burst.machines("gce").watchers
    name = watcher_name(burst.store.url)
    assert watchers.ensure(burst.store, 60) == "created"
    assert watchers.ensure(burst.store, 60) == "running"  # one per Store: found by its name
    assert watchers.of(burst.store.url) == [name]
    console = Path(compute_emulator.instance(name)["serial_console"])
    wait_until(lambda: "nbburst supervise: pid" in console.read_text(), 60, what="the watcher to start")

    say_state(burst.store, name, "leaving")  # as a watcher says before it deletes its VM
    threading.Timer(1.0, watchers.delete, [name]).start()
    assert watchers.ensure(burst.store, 60) == "created"  # it waited for that one to go, then made a new one
    assert watchers.ensure(burst.store, 30 * 86400) == "replaced"  # its hard limit would end before the job's
    made = [
        r["method"]
        for r in compute_emulator.request_log
        if (r["method"], r["path"].rsplit("/", 1)[1]) in {("POST", "instances"), ("DELETE", name)}
        and (r.get("body") or {}).get("name", name) == name
    ]
    assert made == ["POST", "DELETE", "POST", "DELETE", "POST"]
    assert f"watcher: {name} is RUNNING" in nbburst("doctor", "--backend", "gce")

    dry = nbburst("gc", "--backend", "gce", "--dry-run")
    assert f"would delete watcher {name} (gce): no unfinished job in {burst.store.url}" in dry
    assert f"machine {name}" not in dry  # not taken for a job's machine
    nbburst("gc", "--backend", "gce")
    assert compute_emulator.wait_for_status(name, "DELETED", timeout=30) == "DELETED"


def test_the_watcher_reads_job_keys_as_the_vms_account_and_never_manages_them(gce_env, compute_emulator):
    """The watcher VM holds no admin role on the secrets: it reads the key the client shared with the VMs'
    account, and its relaunch of a job whose VM is gone leaves the secret as the client made it."""
    from google.oauth2.credentials import Credentials

    from nbburst.config import load
    from nbburst.errors import BurstError
    from nbburst.machines.gce.keysecret import KeySecrets
    from nbburst.testing import tokens

    settings = load()
    client = Burst(settings).machines("gce")
    vms = compute_emulator.default_service_account
    job_id, key = "b20260101-000000-w4tch0", os.urandom(32)
    name = client.key_secrets.put(job_id, key, vms, "me")

    def as_account(email: str) -> KeySecrets:
        token = tokens.mint(email)["access_token"]
        return KeySecrets(settings.secretmanager_endpoint, lambda: client.project, lambda: Credentials(token), True)

    assert as_account(vms).read(job_id) == key
    assert as_account(f"someone@{compute_emulator.project}.iam.gserviceaccount.com").read(job_id) is None
    assert as_account(vms).put(job_id, key, vms, "me") == name  # a relaunch by the watcher: nothing to change
    with pytest.raises(BurstError, match="secretmanager.admin"):
        as_account(vms).put(job_id, os.urandom(32), vms, "me")  # never another key
