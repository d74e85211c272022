"""Secret Manager and Cloud Storage agree late, as Google documents, and a job's VM waits for them.

The Secret Manager stand-in can hold back a role granted on a secret (``iam_delay``) and what ``latest`` names
(``latest_lag``); the GCS proxy can hold back a bucket grant for an emulated VM's token (``propagation_delay``).
The client names the key's version by number in the VM's metadata, and the VM waits out 403/404 for up to 10
minutes, saying so on its console; a launch that fails leaves no VM and no key secret.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud import secretmanager_v1
from google.oauth2.credentials import Credentials
from support.gce import submit

from nbburst.client.burst import Burst
from nbburst.errors import BurstError
from nbburst.machines.base import machine_name
from nbburst.machines.gce import keysecret
from nbburst.protocol.job import State
from nbburst.testing import MetadataServer, tokens
from nbburst.testing.compute.resources import ComputeError
from nbburst.testing.secretmanager import SecretManagerEmulator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "nbburst" / "machines" / "gce" / "vm"))
import vmlib  # noqa: E402  (the VM's own program: imported from its folder, as the bootstrap does)

PROJECT = "nbburst-test"
VM = "111-compute@developer.gserviceaccount.com"


def inserts(emulator) -> list:
    return [r for r in emulator.request_log if r["method"] == "POST" and r["path"].endswith("/instances")]


def test_a_grant_and_latest_take_their_time_a_version_number_does_not():
    with SecretManagerEmulator(PROJECT, iam_delay=1.5, latest_lag=3.0) as sm:
        keys = keysecret.KeySecrets(sm.endpoint, lambda: PROJECT, AnonymousCredentials)
        version = keys.put("b20260101-000000-aaaaaa", b"k" * 32, VM)
        assert version == f"projects/{sm.number}/secrets/nbburst-key-b20260101-000000-aaaaaa/versions/1"
        client = secretmanager_v1.SecretManagerServiceClient(
            credentials=AnonymousCredentials(), transport="rest", client_options={"api_endpoint": sm.endpoint}
        )
        assert client.access_secret_version(name=version).payload.data == (b"k" * 32).hex().encode()  # by number
        with pytest.raises(gexc.NotFound):
            client.access_secret_version(name=version.rsplit("/", 1)[0] + "/latest")  # not yet what latest names
        vm = secretmanager_v1.SecretManagerServiceClient(
            credentials=Credentials(tokens.mint(VM)["access_token"]),
            transport="rest",
            client_options={"api_endpoint": sm.endpoint},
        )
        with pytest.raises(gexc.Forbidden):
            vm.access_secret_version(name=version)  # the VM's grant has not propagated yet
        time.sleep(1.6)
        assert vm.access_secret_version(name=version).name == version
        assert keys.put("b20260101-000000-aaaaaa", b"k" * 32, VM) == version  # a relaunch names the same version
        time.sleep(1.5)
        assert client.access_secret_version(name=version.rsplit("/", 1)[0] + "/latest").name == version


def test_the_vm_waits_for_its_grant_and_says_so(monkeypatch):
    with SecretManagerEmulator(PROJECT, iam_delay=2.0, latest_lag=60.0) as sm:
        keys = keysecret.KeySecrets(sm.endpoint, lambda: PROJECT, AnonymousCredentials)
        version = keys.put("b20260101-000000-bbbbbb", b"k" * 32, VM)
        monkeypatch.setenv("NBBURST_SECRETMANAGER_ENDPOINT", sm.endpoint)
        account = {"email": VM, "token": lambda _q: tokens.mint(VM)}
        said: list[str] = []
        with MetadataServer({"instance/service-accounts": {"default": account}}) as md:
            monkeypatch.setenv("GCE_METADATA_HOST", md.host)
            assert vmlib.secret(version, said.append) == (b"k" * 32).hex().encode()
            assert said and all(line.startswith(vmlib.IAM_WAIT + ": reading the job key") for line in said)
            assert "HTTP 403" in said[0] and "up to 10 min" in said[0]
            with pytest.raises(vmlib.Unreadable, match=r"HTTP 404 \(waited \d+ s for IAM\)"):
                vmlib.secret(version.rsplit("/", 1)[0], said.append, wait_s=1.5)  # latest: not yet


def test_the_vm_waits_for_its_bucket_grant(gcs_emulator, gcs_bucket, monkeypatch):
    if gcs_emulator.iam is None:
        pytest.skip("this GCS emulator keeps no IAM")
    from google.cloud import storage

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator.env()["STORAGE_EMULATOR_HOST"])
    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
    client.bucket(gcs_bucket).blob("jobs/x/dist/manifest.json").upload_from_string(b"{}")
    monkeypatch.setattr(gcs_emulator.iam, "propagation_delay", 2.0)
    gcs_emulator.iam.grant(gcs_bucket, f"serviceAccount:{VM}", "roles/storage.objectUser")  # `nbburst setup`
    account = {"email": VM, "token": lambda _q: tokens.mint(VM)}
    said: list[str] = []
    with MetadataServer({"instance/service-accounts": {"default": account}}) as md:
        monkeypatch.setenv("GCE_METADATA_HOST", md.host)
        assert vmlib.Bucket(gcs_bucket, said.append).read("jobs/x/dist/manifest.json") == b"{}"
    assert said and said[0].startswith(f"{vmlib.IAM_WAIT}: reading gs://{gcs_bucket}/jobs/x/dist/manifest.json")
    assert client.bucket(gcs_bucket).blob("jobs/x/dist/manifest.json").download_as_bytes() == b"{}"  # others: as ever


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_a_cell_outlasts_iam_propagation_in_one_attempt(gce_env, compute_emulator, secretmanager_emulator):
    secretmanager_emulator.iam_delay = 15.0  # a new VM's account is refused the key for 15 s...
    secretmanager_emulator.latest_lag = 40.0  # ...and `latest` names no version for 40 s
    burst = Burst()
    job = submit(burst, sum, [1, 2, 3], cores=2)
    console, deadline = "", time.monotonic() + 240
    while not job.state.terminal and time.monotonic() < deadline:  # the VM's console, read while it is there
        try:
            console = compute_emulator.serial_output(machine_name(job.id))
        except ComputeError:  # not made yet, or deleted at the job's end
            pass
        time.sleep(0.5)
    assert job.wait(timeout=60) == State.SUCCEEDED, job.terminal()
    assert job.result() == 6 and job.attempt == 1 and len(inserts(compute_emulator)) == 1  # no relaunch
    assert f"nbburst-startup: {vmlib.IAM_WAIT}: reading the job key" in console
    assert "boot failure" not in (job.terminal().reason or "")
    job.supervise()
    assert secretmanager_emulator.secret_ids() == []


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_a_launch_that_fails_leaves_no_vm_and_no_key_secret(
    gce_env, compute_emulator, secretmanager_emulator, monkeypatch
):
    burst = Burst()
    machines = burst.machines("gce")
    build = machines.instance_resource

    def refused(*args, **kwargs):  # an insert Compute Engine refuses after the key's secret was made
        resource = build(*args, **kwargs)
        resource.machine_type = resource.machine_type.rsplit("/", 1)[0] + "/n2-standard-999"
        return resource

    monkeypatch.setattr(machines, "instance_resource", refused)
    with pytest.raises(BurstError, match="not offered in zone"):
        submit(burst, print, "never runs", cores=2)
    (job,) = burst.jobs()
    assert job.state == State.FAILED and "could not start the machine" in job.terminal().reason
    assert any(r[1].endswith(":addVersion") for r in secretmanager_emulator.requests)  # it was made...
    assert secretmanager_emulator.secret_ids() == []  # ...and is gone
    assert compute_emulator.instances() == []


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_a_vm_stopped_while_it_waits_for_iam_is_no_boot_failure(gce_env, compute_emulator, secretmanager_emulator):
    from support.gce import PROJECT as COMPUTE_PROJECT
    from support.gce import ZONE, Compute

    secretmanager_emulator.iam_delay = 600.0  # it waits as long as the test lasts
    burst = Burst()
    job = submit(burst, print, "never runs", cores=2)
    name = machine_name(job.id)
    deadline = time.monotonic() + 120
    while vmlib.IAM_WAIT not in compute_emulator.serial_output(name) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert f"nbburst-startup: {vmlib.IAM_WAIT}" in compute_emulator.serial_output(name)
    compute = Compute(compute_emulator)
    compute.wait(compute.instances.stop(project=COMPUTE_PROJECT, zone=ZONE, instance=name))
    assert compute_emulator.wait_for_status(name, "TERMINATED", timeout=30) == "TERMINATED"
    machines = burst.machines("gce")
    assert machines.boot_failure(name) is None  # stopped while it waited: it may be started again
    job.cancel()
    machines.cleanup(name)
    assert compute_emulator.wait_for_status(name, "DELETED", timeout=30) == "DELETED"
