"""The job key reaches its VM through Secret Manager, readable by the VM's service account only.

The Secret Manager stand-in (nbburst.testing.secretmanager) is driven by the real google-cloud-secret-manager
client (REST) and by the VM bootstrap's standard-library reader; a project viewer, another service account
or a forged token cannot read the key; a launch is refused before any VM when the API is off; the secret is
gone once the job has ended (the client's cleanup, or `nbburst gc`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import google_crc32c
import pytest
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud import secretmanager_v1
from support.gce import submit

from nbburst.client.burst import Burst
from nbburst.errors import UsageError
from nbburst.machines.base import machine_name
from nbburst.machines.gce import keysecret
from nbburst.protocol import signing
from nbburst.protocol.job import State
from nbburst.testing import MetadataServer, tokens
from nbburst.testing.secretmanager import SecretManagerEmulator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "nbburst" / "machines" / "gce" / "vm"))
import vmlib  # noqa: E402  (the VM's own program: imported from its folder, as the bootstrap does)

PROJECT = "nbburst-test"
VM = "111-compute@developer.gserviceaccount.com"


@pytest.fixture
def sm():
    with SecretManagerEmulator(PROJECT) as emulator:
        yield emulator


def documented(requests: list[tuple[str, str, str]]) -> list[str]:
    """The requests (method, path) that no method of Secret Manager's discovery document has."""
    import json
    import re

    import googleapiclient

    doc = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents" / "secretmanager.v1.json"
    methods: list[tuple[str, re.Pattern]] = []

    def walk(resource: dict) -> None:
        for method in resource.get("methods", {}).values():
            path = re.sub(r"\\{[^}]+\\}", "[^/:]+", re.escape(method["flatPath"]))
            methods.append((method["httpMethod"], re.compile("^/" + path + "$")))
        for child in resource.get("resources", {}).values():
            walk(child)

    walk(json.loads(doc.read_text()))
    return [f"{m} {p}" for m, p, _ in requests if not any(m == hm and rx.match(p) for hm, rx in methods)]


def client(emulator: SecretManagerEmulator) -> secretmanager_v1.SecretManagerServiceClient:
    return secretmanager_v1.SecretManagerServiceClient(
        credentials=AnonymousCredentials(), transport="rest", client_options={"api_endpoint": emulator.endpoint}
    )


def keys(emulator: SecretManagerEmulator) -> keysecret.KeySecrets:
    return keysecret.KeySecrets(emulator.endpoint, lambda: PROJECT, AnonymousCredentials)


def test_the_stand_in_refuses_what_secret_manager_refuses(sm):
    c, parent = client(sm), f"projects/{PROJECT}"
    with pytest.raises(gexc.BadRequest, match="must match"):
        c.create_secret(
            request={"parent": parent, "secret_id": "no/slash", "secret": {"replication": {"automatic": {}}}}
        )
    with pytest.raises(gexc.BadRequest, match="replication"):
        c.create_secret(request={"parent": parent, "secret_id": "s", "secret": {}})
    with pytest.raises(gexc.BadRequest, match="label"):
        c.create_secret(
            request={
                "parent": parent,
                "secret_id": "s",
                "secret": {"replication": {"automatic": {}}, "labels": {"A": "b"}},
            }
        )
    made = c.create_secret(request={"parent": parent, "secret_id": "s", "secret": {"replication": {"automatic": {}}}})
    assert made.name == f"projects/{sm.number}/secrets/s"  # answers name the project's number, as Google's do
    with pytest.raises(gexc.Conflict):
        c.create_secret(request={"parent": parent, "secret_id": "s", "secret": {"replication": {"automatic": {}}}})
    with pytest.raises(gexc.BadRequest, match="Checksum"):
        c.add_secret_version(request={"parent": made.name, "payload": {"data": b"k", "data_crc32c": 1}})
    with pytest.raises(gexc.BadRequest, match="65536 bytes"):
        c.add_secret_version(request={"parent": made.name, "payload": {"data": b"x" * (64 * 1024 + 1)}})
    with pytest.raises(gexc.NotFound):
        c.access_secret_version(name=made.name + "/versions/latest")  # no version yet
    c.add_secret_version(
        request={"parent": made.name, "payload": {"data": b"k", "data_crc32c": google_crc32c.value(b"k")}}
    )
    answer = c.access_secret_version(name=made.name + "/versions/latest")
    assert answer.payload.data == b"k" and answer.payload.data_crc32c == google_crc32c.value(b"k")
    policy = c.get_iam_policy(request={"resource": made.name})
    c.set_iam_policy(request={"resource": made.name, "policy": policy})
    with pytest.raises(gexc.Conflict, match="concurrent"):
        c.set_iam_policy(request={"resource": made.name, "policy": policy})  # its etag is stale now
    sm.caller = "user:viewer@example.com"
    sm.project_roles[sm.caller] = {"roles/viewer"}
    assert c.get_secret(name=made.name).name == made.name  # a viewer sees the secret...
    with pytest.raises(gexc.Forbidden, match="secretmanager.versions.access"):
        c.access_secret_version(name=made.name + "/versions/latest")  # ...not its payload
    sm.enabled = False
    with pytest.raises(gexc.Forbidden) as off:
        c.get_secret(name=made.name)
    assert off.value.reason == "SERVICE_DISABLED"
    assert documented(sm.requests) == []  # every request the client sent is one the API has


def test_only_the_vms_service_account_reads_the_key_from_the_vm(sm, monkeypatch):
    store = keys(sm)
    key = signing.new_key()
    name = store.put("b20260101-000000-aaaaaa", key, VM, "ann")
    assert store.put("b20260101-000000-aaaaaa", key, VM, "ann") == name  # a relaunch finds it
    store.put("b20260101-000000-bbbbbb", signing.new_key(), "other@p.iam.gserviceaccount.com", "ann")
    assert sm.policy(keysecret.secret_id("b20260101-000000-aaaaaa"))["bindings"] == [
        {"role": keysecret.ACCESSOR, "members": [f"serviceAccount:{VM}"]}
    ]
    monkeypatch.setenv("NBBURST_SECRETMANAGER_ENDPOINT", sm.endpoint)
    account = {"email": VM, "token": lambda _q: tokens.mint(VM)}
    with MetadataServer({"instance/service-accounts": {"default": account}}) as md:
        monkeypatch.setenv("GCE_METADATA_HOST", md.host)
        assert vmlib.secret(name, print) == key.hex().encode()
        with pytest.raises(vmlib.Unreadable, match="HTTP 403"):  # the other job's key: not this VM's
            vmlib.secret(store.name("b20260101-000000-bbbbbb"), print, wait_s=0)  # (no wait for IAM)
    forged = {"email": VM, "token": lambda _q: {"access_token": "ya29.made-up", "expires_in": 3599}}
    with MetadataServer({"instance/service-accounts": {"default": forged}}) as md:
        monkeypatch.setenv("GCE_METADATA_HOST", md.host)
        with pytest.raises(vmlib.Unreadable, match="HTTP 401"):
            vmlib.secret(name, print)
    assert store.held() == [("b20260101-000000-aaaaaa", "ann"), ("b20260101-000000-bbbbbb", "ann")]
    store.delete("b20260101-000000-aaaaaa")
    store.delete("b20260101-000000-aaaaaa")  # gone already: nothing to do
    assert sm.secret_ids() == [keysecret.secret_id("b20260101-000000-bbbbbb")]
    assert documented(sm.requests) == []  # the client's and the VM's requests alike


def test_without_the_secret_manager_api_a_launch_is_refused_and_doctor_says_how(
    gce_env, compute_emulator, secretmanager_emulator
):
    secretmanager_emulator.enabled = False
    burst = Burst()
    checks = {c.name: c for c in burst.machines("gce").doctor()}
    assert not checks["secret manager"].ok and "secretmanager.googleapis.com" in checks["secret manager"].fix
    with pytest.raises(UsageError, match="Secret Manager API is not enabled"):
        submit(burst, print, "never runs", cores=2)
    assert compute_emulator.instances() == []


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_the_key_secret_goes_with_the_job(gce_env, compute_emulator, secretmanager_emulator, capsys):
    from nbburst.ui.cli import main

    burst = Burst()
    job = submit(burst, print, "done", cores=2)
    secret = keysecret.secret_id(job.id)
    assert secretmanager_emulator.secret_ids() == [secret]
    assert job.wait(timeout=240) == State.SUCCEEDED
    job.supervise()  # the client sees the end: the VM and the key's secret go
    assert secretmanager_emulator.secret_ids() == []
    assert compute_emulator.wait_for_status(machine_name(job.id), "DELETED", timeout=30) == "DELETED"
    # A job whose end no client saw (the laptop closed): `nbburst gc` deletes its secret.
    machines = burst.machines("gce")
    machines.key_secrets.put(job.id, burst.keyring.get(job.id), compute_emulator.default_service_account, "ann")
    machines.key_secrets.put("b20000101-000000-cccccc", b"k" * 32, compute_emulator.default_service_account, "")
    assert main(["gc", "--backend", "gce", "--any-owner"]) == 0
    out = capsys.readouterr().out
    assert f"deleted the gce key of job {job.id}: its job ended (SUCCEEDED)" in out
    assert "deleted the gce key of job b20000101-000000-cccccc: its job is unknown" in out
    assert secretmanager_emulator.secret_ids() == []
