"""A watcher whose account may not relaunch says so: Compute Engine refuses instances.insert/start (403) to a
service account without roles/compute.instanceAdmin.v1; the watcher records ``can_relaunch: false`` with the 403
in the Store, and ``nbburst doctor`` shows it with the roles to grant. Against the emulators, which refuse one
account's launches as Google does.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import requests
from support import wait_until

from nbburst.client.burst import Burst
from nbburst.machines.base import machine_name
from nbburst.machines.gce.watcher import refusal, state_key, watcher_name
from nbburst.protocol.job import State
from nbburst.testing import tokens

SUBMITTER = """
import sys, time
from nbburst.client.burst import Burst

burst = Burst()
job = burst.submit(time.sleep, 600, options=burst.options(backend="gce", cores=2, max_restarts=5))
print(job.id, flush=True)
"""


def test_the_emulator_refuses_one_accounts_launches_with_googles_403(compute_emulator):
    refused = f"watcher@{compute_emulator.project}.iam.gserviceaccount.com"
    compute_emulator.refuse_launches(refused)
    url = f"{compute_emulator.endpoint}/compute/v1/projects/{compute_emulator.project}/zones/{compute_emulator.zone}"

    def post(path: str, email: str) -> requests.Response:
        auth = {"Authorization": "Bearer " + tokens.mint(email)["access_token"]}
        return requests.post(f"{url}/{path}", json={"name": "vm-a"}, headers=auth, timeout=10)

    answer = post("instances", refused)
    assert answer.status_code == 403
    assert answer.json()["error"]["message"] == (
        f"Required 'compute.instances.create' permission for 'projects/{compute_emulator.project}/zones/"
        f"{compute_emulator.zone}/instances/vm-a'"
    )
    assert post("instances/vm-a/start", refused).status_code == 403
    assert "compute.instances.start" in post("instances/vm-a/start", refused).json()["error"]["message"]
    assert post("instances/vm-a/start", "other@x.iam.gserviceaccount.com").status_code == 404  # judged on


@pytest.mark.compute_emulator(operation_delay=0.02, preemption_grace=1.0)
@pytest.mark.timeout(400)
def test_a_watcher_refused_a_relaunch_records_it_and_doctor_says_the_fix(
    gce_env, compute_emulator, monkeypatch, capsys
):
    monkeypatch.setenv("NBBURST_WATCHER", "true")
    monkeypatch.setenv("NBBURST_WATCHER_INTERVAL", "0.5")
    monkeypatch.setenv("NBBURST_WATCHER_IDLE", "3s")
    account = compute_emulator.default_service_account  # the watcher VM's (the client's calls are not judged)
    compute_emulator.refuse_launches(account)
    done = subprocess.run([sys.executable, "-c", SUBMITTER], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    job = Burst().job(done.stdout.strip())  # this process only looks and preempts: it never supervises
    wait_until(lambda: job.state == State.RUNNING, 180, what="the job to run")
    compute_emulator.preempt(machine_name(job.id), grace=1.0)
    wait_until(lambda: job.terminal() is not None, 180, what="the watcher's refused relaunch")

    assert job.state == State.FAILED and "compute.instances.start" in job.terminal().reason
    assert "fix: grant roles/compute.instanceAdmin.v1" in job.terminal().reason  # what the job view shows
    name = watcher_name(job.store.url)
    record = json.loads(job.store.get(state_key(name)))
    assert record["can_relaunch"] is False and "Required 'compute.instances.start' permission" in record["refused"]
    said = refusal(job.store, name)
    assert said.startswith("the watcher cannot relaunch: starting VM ")
    roles = "roles/compute.instanceAdmin.v1 and Service Account User (roles/iam.serviceAccountUser)"
    assert f"fix: grant {roles} to {account}" in said

    from nbburst.ui.cli import main

    assert main(["doctor"]) != 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "watcher: the watcher cannot relaunch: starting VM " in out and "roles/compute.instanceAdmin.v1" in out
