"""What nbburst sends to Compute Engine, checked against Google's own discovery document.

The emulator accepts what it was written to accept; the discovery document (shipped in
google-api-python-client) says what the real API takes. The first tests show the checker refuses
what Compute Engine would refuse; the others run nbburst's operations through the real
google-cloud-compute client against the emulator and check every request it recorded.
"""

from __future__ import annotations

import copy
import json

import pytest
from google.api_core.exceptions import NotFound
from google.cloud import compute_v1
from support import LARGE_QUOTAS, wait_until
from support.gce import PROJECT, ZONE, instance

from nbburst.client.burst import Burst
from nbburst.machines.base import GONE, RUNNING, machine_name
from nbburst.protocol.job import State
from nbburst.testing.discovery import Discovery, conformance_problems, filter_problem

pytest.importorskip("googleapiclient")

INSTANCES = f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances"
AGGREGATED = f"/compute/v1/projects/{PROJECT}/aggregated/instances"


@pytest.fixture(scope="module")
def discovery() -> Discovery:
    return Discovery.load()


def _insert(body: dict) -> dict:
    return {
        "method": "POST",
        "path": INSTANCES,
        "query": {"requestId": "8b7f3c1e-0d1a-4f2e-9c3b-5a6d7e8f9a0b"},
        "body": body,
    }


GOOD_INSTANCE = {
    "name": "nbburst-b1",
    "machineType": f"zones/{ZONE}/machineTypes/e2-highcpu-4",
    "labels": {"nbburst": "1", "nbburst-job": "b1"},
    "scheduling": {
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "STOP",
        "maxRunDuration": {"seconds": "4200"},
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
    },
    "disks": [{"boot": True, "autoDelete": True, "initializeParams": {"sourceImage": "x", "diskSizeGb": "20"}}],
    "metadata": {"items": [{"key": "startup-script", "value": "echo hi"}]},
}


def _with(path: list[str], value: object) -> dict:
    """GOOD_INSTANCE with one field (a path of keys and list indexes) set to ``value``."""
    body = copy.deepcopy(GOOD_INSTANCE)
    target = body
    for key in path[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    target[int(path[-1]) if isinstance(target, list) else path[-1]] = value
    return body


# -- the checker refuses what Compute Engine refuses ------------------------------------------------


def test_a_well_formed_insert_conforms(discovery: Discovery) -> None:
    assert discovery.check(_insert(GOOD_INSTANCE)) == []
    method, params = discovery.method_for("POST", INSTANCES)
    assert method.id == "compute.instances.insert" and params == {"project": PROJECT, "zone": ZONE}


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (["colour"], "red", "body.colour: unknown field (Instance has no such field)"),
        (["scheduling", "preemptable"], True, "body.scheduling.preemptable: unknown field (Scheduling has"),
        (["scheduling", "provisioningModel"], "CHEAP", "body.scheduling.provisioningModel: 'CHEAP' is not one of"),
        (["scheduling", "instanceTerminationAction"], "stop", "'stop' is not one of"),
        (["scheduling", "automaticRestart"], "no", "body.scheduling.automaticRestart: expected a boolean"),
        (["scheduling", "maxRunDuration", "seconds"], "1h", "body.scheduling.maxRunDuration.seconds: expected an"),
        (["disks", "0", "initializeParams", "diskSizeGb"], "big", "initializeParams.diskSizeGb: expected an integer"),
        (["disks", "0", "initializeParams", "diskType"], 3, "diskType: expected a string"),
        (["labels"], ["nbburst"], "body.labels: expected an object"),
        (["labels", "nbburst"], 1, "body.labels.nbburst: expected a string"),
        (["metadata", "items"], {"key": "a"}, "body.metadata.items: expected an array"),
        (["metadata", "items", "0", "val"], "x", "body.metadata.items[0].val: unknown field"),
        (["metadata", "items", "0", "key"], "startup script", "items[0].key: 'startup script' does not match the"),
        (["metadata", "items", "0"], {"value": "x"}, "items[0].key: required by compute.instances.insert, missing"),
    ],
)
def test_a_bad_body_is_refused(discovery: Discovery, path: list[str], value: object, expected: str) -> None:
    problems = discovery.check(_insert(_with(path, value)))
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"POST {INSTANCES} (compute.instances.insert): ")
    assert expected in problems[0]


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        ({"method": "GET", "path": INSTANCES + "z"}, "no method of the API has this path"),
        ({"method": "PUT", "path": INSTANCES}, "the API takes GET, POST on this path, not PUT"),
        ({"method": "GET", "path": "/compute/v2/projects/p/zones/z/instances"}, "no method of the API has this path"),
        ({"method": "GET", "path": f"/compute/v1/projects/{PROJECT}/zones/US-CENTRAL1-A/instances"}, "pattern"),
        ({"method": "GET", "path": INSTANCES, "query": {"maxResults": "ten"}}, "maxResults: 'ten' is not an integer"),
        ({"method": "GET", "path": INSTANCES, "query": {"maxResults": "-1"}}, "maxResults: -1 is negative"),
        ({"method": "GET", "path": INSTANCES, "query": {"requestId": "x"}}, "requestId: compute.instances.list takes"),
        ({"method": "GET", "path": AGGREGATED, "query": {"includeAllScopes": "yes"}}, "is not a boolean"),
        ({"method": "GET", "path": INSTANCES, "query": {"alt": "xml"}}, "alt: 'xml' is not one of json, media"),
        ({"method": "POST", "path": INSTANCES + "/vm/stop", "body": {"force": True}}, "takes no request body"),
        (
            {"method": "GET", "path": INSTANCES, "query": {"filter": 'labels.a = "1" labels.b = "2"'}},
            "several expressions must each be in parentheses",
        ),
    ],
)
def test_a_bad_request_is_refused(discovery: Discovery, request_: dict, expected: str) -> None:
    problems = discovery.check({"query": {}, "body": {}, **request_})
    assert len(problems) == 1, problems
    assert expected in problems[0]


def test_well_formed_queries_conform(discovery: Discovery) -> None:
    for query in [
        {"maxResults": "500", "pageToken": "abc", "orderBy": "creationTimestamp desc"},
        {"filter": '(labels.a = "1") (labels.b = "2")', "fields": "items(name)", "prettyPrint": "false"},
        {"filter": "labels.owner:*"},
    ]:
        assert discovery.check({"method": "GET", "path": INSTANCES, "query": query, "body": {}}) == [], query
    aggregated = {"method": "GET", "path": AGGREGATED, "query": {"includeAllScopes": "true"}, "body": {}}
    assert discovery.check(aggregated) == []
    serial = {"method": "GET", "path": INSTANCES + "/vm/serialPort", "query": {"port": "1", "start": "0"}}
    assert discovery.check({**serial, "body": {}}) == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('labels.nbburst = "1"', None),
        ('name = "nbburst-b1"', None),
        ("labels.owner:*", None),
        ("name ne .*instance", None),
        ('(labels.nbburst = "1") (labels.nbburst-job = "b1")', None),
        (
            '(cpuPlatform = "Intel Skylake") OR (cpuPlatform = "Intel Broadwell") AND (automaticRestart = true)',
            None,
        ),
        ('(a = "x)") (b = 2)', None),
        ('labels.nbburst = "1" labels.nbburst-job = "b1"', "several expressions must each be in parentheses"),
        ("a = 1 AND b = 2", "several expressions must each be in parentheses"),
        ("(a = 1 b = 2)", "(a = 1 b = 2): several expressions"),
        ("(a = 1) AND", "ends with AND or OR"),
        ("(a = 1", "unbalanced parentheses"),
        ("()", "nothing in the parentheses"),
    ],
)
def test_list_filters_follow_the_documented_syntax(text: str, problem: str | None) -> None:
    found = filter_problem(text)
    assert (found is None) if problem is None else (found is not None and problem in found), found


def test_only_api_requests_are_checked_and_google_clients_can_be_singled_out() -> None:
    records = [
        {"method": "POST", "path": "/emulator/quotas", "query": {}, "body": {"metric": "CPUS"}, "client": ""},
        {"method": "GET", "path": INSTANCES + "z", "query": {}, "body": {}, "client": ""},
        {"method": "GET", "path": INSTANCES + "zz", "query": {}, "body": {}, "client": "gl-python/3.11 gapic/1.57.0"},
    ]
    assert len(conformance_problems(records)) == 2
    (problem,) = conformance_problems(records, google_clients=True)
    assert problem.startswith(f"GET {INSTANCES}zz:")


def test_a_request_log_file_is_checked_from_the_command_line(compute_emulator, tmp_path, monkeypatch, capsys) -> None:
    from nbburst.testing.compute.http import REQUEST_LOG_ENV
    from nbburst.testing.discovery import main

    log = tmp_path / "requests.jsonl"
    monkeypatch.setenv(REQUEST_LOG_ENV, str(log))
    instances = compute_emulator.client(compute_v1.InstancesClient)
    list(instances.list(project=PROJECT, zone=ZONE))
    with pytest.raises(NotFound):  # a refused request is recorded too
        instances.get_serial_port_output(project=PROJECT, zone=ZONE, instance="nowhere")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines == compute_emulator.request_log and len(lines) == 2
    assert all("gapic/" in line["client"] for line in lines)
    assert main([str(log), "--google-clients"]) == 0
    with log.open("a") as f:
        f.write(json.dumps({**lines[0], "query": {"filter": "a = 1 b = 2"}, "client": ""}) + "\n")
    assert main([str(log), "--google-clients"]) == 0  # not sent by a Google client library
    capsys.readouterr()
    assert main([str(log)]) == 1
    out, err = capsys.readouterr()
    assert "several expressions must each be in parentheses" in out and "3 requests checked, 1 problems" in err


# -- what nbburst sends, through the real client ----------------------------------------------------


@pytest.fixture
def gce_env(emulator_env, tmp_path, monkeypatch):
    monkeypatch.setenv("NBBURST_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("NBBURST_TIMEOUT", raising=False)
    return emulator_env


def _checked(emulator) -> list[dict]:
    """The Compute API requests the emulator received, after asserting every one of them conforms."""
    problems = conformance_problems(emulator.request_log)
    assert problems == [], "\n".join(problems)
    return [r for r in emulator.request_log if r["path"].startswith("/compute/")]


def _ids(discovery: Discovery, requests: list[dict]) -> set[str]:
    return {discovery.method_for(r["method"], r["path"])[0].id for r in requests}


@pytest.mark.compute_emulator(operation_delay=0.02, quotas=LARGE_QUOTAS)
def test_planning_and_doctor_requests_conform(gce_env, compute_emulator, discovery: Discovery) -> None:
    burst = Burst()
    machines = burst.machines("gce")
    for options in [
        {"cores": 2},
        {"cores": 8, "memory": 64, "on_demand": True},
        {"gpu": "t4:2"},
        {"gpu": "nvidia-l4"},
        {"gpu": "a100:2"},
        {"machine_type": "c2d-standard-8"},
        {"zone": "auto", "cores": 4},
    ]:
        machines.plan(burst.options(backend="gce", **options).resources)
    machines.doctor()
    assert machines.describe("nbburst-b20000101-000000-nnnnnn").state == GONE  # get, then a search by name
    called = _ids(discovery, _checked(compute_emulator))
    expected = {
        "compute.machineTypes.list",
        "compute.acceleratorTypes.list",
        "compute.regions.get",
        "compute.images.getFromFamily",
        "compute.instances.get",
        "compute.instances.aggregatedList",
    }
    assert expected <= called, called


def test_listing_machines_by_label_conforms(gce_env, compute_emulator, discovery: Discovery) -> None:
    machines = Burst().machines("gce")
    assert machines.list() == []
    assert machines.list("b20000101-000000-nnnnnn") == []
    assert _ids(discovery, _checked(compute_emulator)) == {"compute.instances.aggregatedList"}


def _known_quota_metrics(discovery: Discovery) -> set[str]:
    """Quota metric names of the discovery document, with and without their PREEMPTIBLE_/COMMITTED_ prefixes."""
    metrics = set(discovery.enum("Quota", "metric"))
    return metrics | {m.removeprefix("PREEMPTIBLE_").removeprefix("COMMITTED_") for m in metrics}


def _gpu_cases() -> list:
    from nbburst.machines.gce.types import GPU_ALIASES

    return sorted(set(GPU_ALIASES.values()))


@pytest.mark.parametrize("gpu", _gpu_cases())
def test_gpu_quota_metrics_are_names_compute_engine_uses(discovery: Discovery, gpu: str) -> None:
    from nbburst.machines.gce.types import gpu_quota_metric

    metric = gpu_quota_metric(gpu)
    known = _known_quota_metrics(discovery)
    assert metric in known and "PREEMPTIBLE_" + metric in discovery.enum("Quota", "metric"), metric


def _slow(seconds: float) -> str:
    import time

    time.sleep(seconds)
    return "done"


@pytest.mark.compute_emulator(operation_delay=0.02, preemption_grace=1.0)
def test_a_job_on_a_vm_sends_only_conforming_requests(gce_env, compute_emulator, discovery: Discovery) -> None:
    """Launch, describe, read the console, be preempted and restarted, be cancelled: every request conforms."""
    burst = Burst()
    job = burst.submit(_slow, 300, options=burst.options(backend="gce", cores=2))
    name = machine_name(job.id)
    wait_until(lambda: job.state == State.RUNNING, timeout=120, what="the agent to start")
    assert job.machines.describe(name).state == RUNNING
    assert "nbburst-startup: begin" in job.console()
    job.preempt(grace_s=1.0)
    wait_until(lambda: job.supervise() == State.RUNNING and job.attempt == 2, timeout=120, what="attempt 2")
    assert job.cancel() == State.CANCELLED
    assert compute_emulator.wait_for_status(name, "DELETED", timeout=30) == "DELETED"
    called = _ids(discovery, _checked(compute_emulator))
    expected = {
        "compute.instances.insert",
        "compute.zoneOperations.wait",
        "compute.instances.get",
        "compute.instances.getSerialPortOutput",
        "compute.zoneOperations.list",
        "compute.instances.setMetadata",
        "compute.instances.start",
        "compute.instances.delete",
    }
    assert expected <= called, called


def test_the_client_calls_the_emulator_serves_are_recognised(compute_emulator, discovery: Discovery) -> None:
    """Stop, start, reset, maintenance, labels, images, regions, zones: what the real client sends, accepted."""
    instances = compute_emulator.client(compute_v1.InstancesClient)
    operations = compute_emulator.client(compute_v1.ZoneOperationsClient)

    def done(op: object) -> None:
        operations.wait(project=PROJECT, zone=ZONE, operation=op.name)

    done(instances.insert(project=PROJECT, zone=ZONE, instance_resource=instance("vm-a", startup="exec sleep 300")))
    compute_emulator.wait_for_status("vm-a", "RUNNING", timeout=20)
    done(instances.simulate_maintenance_event(project=PROJECT, zone=ZONE, instance="vm-a"))
    compute_emulator.wait_for_status("vm-a", "TERMINATED", timeout=20)
    done(instances.start(request=compute_v1.StartInstanceRequest(project=PROJECT, zone=ZONE, instance="vm-a")))
    done(instances.reset(project=PROJECT, zone=ZONE, instance="vm-a"))
    fingerprint = instances.get(project=PROJECT, zone=ZONE, instance="vm-a").label_fingerprint
    labels = compute_v1.InstancesSetLabelsRequest(labels={"team": "data"}, label_fingerprint=fingerprint)
    done(
        instances.set_labels(project=PROJECT, zone=ZONE, instance="vm-a", instances_set_labels_request_resource=labels)
    )
    done(instances.stop(request=compute_v1.StopInstanceRequest(project=PROJECT, zone=ZONE, instance="vm-a")))
    list(instances.list(request=compute_v1.ListInstancesRequest(project=PROJECT, zone=ZONE, max_results=1)))
    list(operations.list(project=PROJECT, zone=ZONE))
    compute_emulator.client(compute_v1.RegionsClient).get(project=PROJECT, region="us-central1")
    list(compute_emulator.client(compute_v1.ZonesClient).list(project=PROJECT))
    compute_emulator.client(compute_v1.ProjectsClient).get(project=PROJECT)
    family = compute_emulator.env()["NBBURST_IMAGE_FAMILY"]
    images = compute_emulator.client(compute_v1.ImagesClient)
    images.get_from_family(project=compute_emulator.env()["NBBURST_IMAGE_PROJECT"], family=family)
    done(instances.delete(project=PROJECT, zone=ZONE, instance="vm-a"))
    called = _ids(discovery, _checked(compute_emulator))
    for verb in ["simulateMaintenanceEvent", "start", "reset", "setLabels", "stop", "list", "delete"]:
        assert f"compute.instances.{verb}" in called
