"""The session firewall rule: ``nbburst setup --session-source`` makes it, doctor checks it, and the Compute
emulator's ``firewalls.insert``/``get`` take and refuse rules as Compute Engine does
(https://cloud.google.com/compute/docs/reference/rest/v1/firewalls)."""

from __future__ import annotations

import uuid

import pytest
import requests
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from nbburst.machines.gce.firewall import RULE, SESSION_TAG
from nbburst.protocol.sessionpush import PORT
from nbburst.ui.cli import main


@pytest.fixture
def firewalls(compute_emulator):
    options = {"api_endpoint": compute_emulator.endpoint}
    return compute_v1.FirewallsClient(credentials=AnonymousCredentials(), client_options=options)


def insert(client, project: str, request_id: str | None = None, **fields) -> compute_v1.Operation:
    rule = {"name": "allow-it", "allowed": [compute_v1.Allowed(I_p_protocol="tcp", ports=["8470"])], **fields}
    request = compute_v1.InsertFirewallRequest(
        project=project, firewall_resource=compute_v1.Firewall(**rule), request_id=request_id or str(uuid.uuid4())
    )
    return client.insert(request=request)


def test_the_emulator_keeps_a_rule_with_googles_defaults_and_a_retried_insert_once(firewalls, compute_emulator):
    project = compute_emulator.project
    request_id = str(uuid.uuid4())
    op = insert(firewalls, project, request_id, source_ranges=["203.0.113.7/32"], target_tags=["web"])
    again = insert(firewalls, project, request_id, source_ranges=["203.0.113.7/32"], target_tags=["web"])
    assert again.name == op.name, "the same requestId: the same operation, not a second rule"
    rule = firewalls.get(project=project, firewall="allow-it")
    assert rule.network.endswith(f"projects/{project}/global/networks/default")  # none given: the default network
    assert (rule.direction, rule.priority, rule.disabled) == ("INGRESS", 1000, False)
    assert [(a.I_p_protocol, list(a.ports)) for a in rule.allowed] == [("tcp", ["8470"])]
    assert list(rule.source_ranges) == ["203.0.113.7/32"] and list(rule.target_tags) == ["web"]
    with pytest.raises(gexc.Conflict, match="already exists"):
        insert(firewalls, project)
    with pytest.raises(gexc.NotFound):
        firewalls.get(project=project, firewall="no-such-rule")


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        ({"name": "Bad_Name"}, 400),
        ({"network": "global/networks/nowhere"}, 404),
        ({"denied": [{"IPProtocol": "tcp"}]}, 400),  # allowed and denied both
        ({"allowed": []}, 400),  # neither
        ({"allowed": [{"IPProtocol": "icmp", "ports": ["80"]}]}, 400),
        ({"allowed": [{"IPProtocol": "tcp", "ports": ["9000-8000"]}]}, 400),
        ({"allowed": [{"IPProtocol": "tcp", "ports": ["70000"]}]}, 400),
        ({"allowed": [{"IPProtocol": "carrier-pigeon"}]}, 400),
        ({"sourceRanges": ["203.0.113.300/32"]}, 400),
        ({"priority": 70000}, 400),
        ({"direction": "SIDEWAYS"}, 400),
        ({"direction": "EGRESS", "sourceTags": ["web"]}, 400),
        ({"targetTags": ["web"], "targetServiceAccounts": ["a@p.iam.gserviceaccount.com"]}, 400),
    ],
)
def test_the_emulator_refuses_what_compute_engine_refuses(compute_emulator, fields, status):
    """Sent as plain HTTP: Google's client would not send some of these (the discovery document's patterns)."""
    body = {"name": "allow-it", "allowed": [{"IPProtocol": "tcp", "ports": ["8470"]}], **fields}
    url = f"{compute_emulator.endpoint}/compute/v1/projects/{compute_emulator.project}/global/firewalls"
    answer = requests.post(url, json=body, timeout=30)
    assert answer.status_code == status, answer.text
    assert compute_emulator.firewalls() == []


def test_setup_makes_the_session_rule_once_and_doctor_checks_it(gce_env, compute_emulator, capsys):
    assert main(["doctor"]) == 0  # no rule: a warning, sessions go through the Store
    out = " ".join(capsys.readouterr().out.split())
    assert f"no firewall rule {RULE}" in out and f"--allow tcp:{PORT}" in out and "--session-source" in out

    assert main(["setup", "--no-grant", "--session-source", "0.0.0.0/0"]) == 2
    assert "open the port to anyone" in capsys.readouterr().err
    assert compute_emulator.firewalls() == []

    assert main(["setup", "--no-grant", "--session-source", "203.0.113.7"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"created firewall rule {RULE}" in out and f"✔ session firewall: rule {RULE} admits TCP {PORT}" in out
    (rule,) = compute_emulator.firewalls()
    assert rule["allowed"] == [{"IPProtocol": "tcp", "ports": [str(PORT)]}]
    assert rule["sourceRanges"] == ["203.0.113.7/32"] and rule["targetTags"] == [SESSION_TAG]
    assert rule["direction"] == "INGRESS" and rule["network"].endswith("/global/networks/default")

    assert main(["setup", "--no-grant", "--session-source", "198.51.100.0/24"]) == 0  # there: left as it is
    assert "created firewall rule" not in capsys.readouterr().out
    assert len(compute_emulator.firewalls()) == 1
    assert main(["doctor"]) == 0
    assert f"✔ session firewall: rule {RULE} admits TCP {PORT} to session VMs from 203.0.113.7/32" in " ".join(
        capsys.readouterr().out.split()
    )
