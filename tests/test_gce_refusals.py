"""What Compute Engine refuses, as Google refuses it, and what nbburst makes of each refusal: a zone out of
capacity answered on the insert itself, organisation policies (412 conditionNotMet), external IPs counted
against IN_USE_ADDRESSES, networks that do not exist or need a subnetwork. Each refusal ends a cell at once
with what to do, and leaves no VM."""

from __future__ import annotations

import time

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1
from support.gce import PROJECT, ZONE, Compute, instance

from nbburst import config
from nbburst.client.burst import Burst
from nbburst.errors import JobFailed, UsageError
from nbburst.machines.base import NoCapacity, machine_name
from nbburst.machines.gce.api import ComputeAPI, network_interface
from nbburst.machines.gce.context import GCEContext
from nbburst.protocol.job import Resources


def submit(burst, **options):
    return burst.submit(abs, -7, options=burst.options(backend="gce", **options))


def with_external_ip(inst):
    inst.network_interfaces[0].access_configs = [compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
    return inst


def inserts(compute_emulator):
    return [r for r in compute_emulator.request_log if r["method"] == "POST" and r["path"].endswith("/instances")]


@pytest.fixture
def gce(compute_emulator):
    return Compute(compute_emulator)


# -- 1. a zone out of capacity, answered on the insert itself --------------------------------------------------
def test_emulator_answers_a_stockout_on_the_insert_itself(gce, compute_emulator):
    compute_emulator.set_zone_capacity(ZONE, available=False, on_insert=True)
    with pytest.raises(
        exceptions.ServiceUnavailable, match="ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS|enough resources"
    ):
        gce.insert(instance("vm-a"))
    assert compute_emulator.instances() == []
    compute_emulator.set_zone_capacity(ZONE, available=True)
    gce.create(instance("vm-a"))


def test_a_stockout_on_the_insert_is_no_capacity_at_once(compute_emulator):
    compute_emulator.set_zone_capacity(ZONE, available=False, on_insert=True)
    api = ComputeAPI(compute_emulator.endpoint, lambda: PROJECT)
    t0 = time.monotonic()
    with pytest.raises(NoCapacity, match=f"zone {ZONE} has no capacity right now") as err:
        api.insert_instance(ZONE, instance("vm-a"), "creating VM vm-a")
    assert time.monotonic() - t0 < 5  # not retried as a transient fault
    assert err.value.zone == ZONE and "did not answer" not in str(err.value)
    assert len(inserts(compute_emulator)) == 1


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_stockout_on_insert_fixed_zone_fails_fast_and_zone_auto_moves_on(gce_env, compute_emulator):
    compute_emulator.set_zone_capacity("us-central1-a", available=False, on_insert=True)
    burst = Burst()
    t0 = time.monotonic()
    with pytest.raises(JobFailed) as err:
        submit(burst, cores=2)
    assert time.monotonic() - t0 < 90
    message = str(err.value)
    assert "zone us-central1-a has no capacity for e2-highcpu-2 spot VMs right now" in message
    assert "did not answer" not in message and "timeout" not in message.lower()
    assert compute_emulator.instances() == []

    t0 = time.monotonic()
    job = submit(burst, cores=2, zone="auto")
    assert job.result(timeout=110) == 7
    assert time.monotonic() - t0 < 120
    machines = burst.machines("gce")
    assert machines.last_launch["zone"] == "us-central1-b"
    assert machines.last_launch["tried"] == ["us-central1-a (no spot capacity)"]
    assert compute_emulator.wait_for_status(machine_name(job.id), "DELETED", zone="us-central1-b") == "DELETED"


# -- 2. organisation policies ----------------------------------------------------------------------------------
def test_emulator_refuses_what_org_policies_forbid_with_googles_message(gce, compute_emulator):
    compute_emulator.set_org_policy("constraints/compute.vmExternalIpAccess")
    with pytest.raises(exceptions.PreconditionFailed) as err:
        gce.insert(with_external_ip(instance("vm-a")))
    assert "Constraint constraints/compute.vmExternalIpAccess violated for project" in err.value.message
    assert f"Add instance projects/{PROJECT}/zones/{ZONE}/instances/vm-a to the constraint" in err.value.message
    gce.create(instance("vm-a"))  # no access config: allowed

    compute_emulator.set_org_policy("compute.trustedImageProjects", ["projects/debian-cloud"])
    with pytest.raises(exceptions.PreconditionFailed, match="Use of images from project nbburst-images is prohibited"):
        gce.insert(instance("vm-b"))
    compute_emulator.clear_org_policy("compute.trustedImageProjects")

    compute_emulator.add_image("nbburst-images", "imported-v1", "imported", shielded=False)
    compute_emulator.set_org_policy("compute.requireShieldedVm")
    unshielded = instance("vm-c")
    unshielded.disks[0].initialize_params.source_image = "projects/nbburst-images/global/images/imported-v1"
    with pytest.raises(exceptions.PreconditionFailed, match="specifies a non-Shielded image"):
        gce.insert(unshielded)

    compute_emulator.set_org_policy("gcp.resourceLocations", ["in:europe-west4-locations"])
    with pytest.raises(exceptions.PreconditionFailed, match=f"Location ZONE:{ZONE} violates constraint"):
        gce.insert(instance("vm-d"))
    assert [i["name"] for i in compute_emulator.instances()] == ["vm-a"]


@pytest.mark.parametrize(
    "constraint, allowed, fix",
    [
        ("compute.vmExternalIpAccess", None, "external_ip=false"),
        ("compute.trustedImageProjects", ["projects/debian-cloud"], "trusted image projects"),
        ("gcp.resourceLocations", ["europe-west4"], "choose a zone it allows"),
    ],
)
def test_an_org_policy_refusal_names_the_constraint_and_the_fix(compute_emulator, constraint, allowed, fix):
    compute_emulator.set_org_policy(constraint, allowed)
    api = ComputeAPI(compute_emulator.endpoint, lambda: PROJECT)
    with pytest.raises(UsageError) as err:
        api.insert_instance(ZONE, with_external_ip(instance("vm-a")), "creating VM vm-a")
    assert f"refused by the organisation policy constraints/{constraint}" in str(err.value)
    assert fix in str(err.value)
    assert compute_emulator.instances() == []


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_external_ip_forbidden_fails_the_cell_then_external_ip_off_runs_it(gce_env, compute_emulator, monkeypatch):
    compute_emulator.set_org_policy("compute.vmExternalIpAccess")
    burst = Burst()
    t0 = time.monotonic()
    with pytest.raises(JobFailed) as err:
        submit(burst, cores=2)
    assert time.monotonic() - t0 < 90
    assert "vmExternalIpAccess" in str(err.value) and "external_ip" in str(err.value)
    assert compute_emulator.instances() == []

    monkeypatch.setenv("NBBURST_EXTERNAL_IP", "false")
    burst = Burst()
    job = submit(burst, cores=2)
    assert job.result(timeout=110) == 7
    body = inserts(compute_emulator)[-1]["body"]
    assert all(not nic.get("accessConfigs") for nic in body["networkInterfaces"])


def test_external_ip_is_a_setting_of_its_own():
    assert config.NBBurst().external_ip is True
    assert config.load(session={"external_ip": "false"}).external_ip is False
    assert "accessConfigs" not in compute_v1.NetworkInterface.to_dict(network_interface(ZONE, external_ip=False))
    assert network_interface(ZONE).access_configs[0].type_ == "ONE_TO_ONE_NAT"


# -- 3. IN_USE_ADDRESSES -----------------------------------------------------------------------------------------
@pytest.mark.compute_emulator(quotas={"IN_USE_ADDRESSES": 1})
def test_each_external_ip_counts_against_in_use_addresses(gce, compute_emulator):
    gce.create(with_external_ip(instance("vm-a")))
    with pytest.raises(exceptions.Forbidden, match="Quota 'IN_USE_ADDRESSES' exceeded"):
        gce.insert(with_external_ip(instance("vm-b")))
    gce.create(instance("vm-c"))  # no external IP: no address
    region = compute_emulator.client(compute_v1.RegionsClient).get(project=PROJECT, region="us-central1")
    assert {q.metric: q.usage for q in region.quotas}["IN_USE_ADDRESSES"] == 1


# -- 4. networks -------------------------------------------------------------------------------------------------
def test_unknown_network_is_404_and_custom_mode_needs_a_subnetwork(gce, compute_emulator):
    missing = instance("vm-a")
    missing.network_interfaces[0].network = "global/networks/nope"
    with pytest.raises(exceptions.NotFound, match=f"projects/{PROJECT}/global/networks/nope"):
        gce.insert(missing)

    compute_emulator.add_network("corp", subnetworks={"us-central1": {"corp-us": True}})
    custom = instance("vm-b")
    custom.network_interfaces[0].network = "global/networks/corp"
    with pytest.raises(exceptions.BadRequest, match="Subnetwork should be specified for custom subnetmode network"):
        gce.insert(custom)
    custom.network_interfaces[0].subnetwork = "regions/us-central1/subnetworks/elsewhere"
    with pytest.raises(exceptions.NotFound, match="subnetworks/elsewhere"):
        gce.insert(custom)
    custom.network_interfaces[0].subnetwork = "regions/us-central1/subnetworks/corp-us"
    gce.create(custom)

    subnet = compute_emulator.client(compute_v1.SubnetworksClient).get(
        project=PROJECT, region="us-central1", subnetwork="corp-us"
    )
    assert subnet.private_ip_google_access is True
    network = compute_emulator.client(compute_v1.NetworksClient).get(project=PROJECT, network="default")
    assert network.auto_create_subnetworks is True


# -- 5. disk types, architectures and the image's size -----------------------------------------------------------
def on(machine, image=None, disk_type=None, name="vm-a"):
    inst = instance(name, machine=machine)
    params = inst.disks[0].initialize_params
    if image:
        params.source_image = image
    if disk_type:
        params.disk_type = f"zones/{ZONE}/diskTypes/{disk_type}"
    return inst


ARM_IMAGE = "projects/debian-cloud/global/images/family/debian-12-arm64"
DLVM_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu129-ubuntu-2404-nvidia-580"


def test_emulator_keeps_disk_types_and_architectures_per_family(gce, compute_emulator):
    with pytest.raises(exceptions.BadRequest, match=r"\[c4a-standard-4, pd-balanced\] features are not compatible"):
        gce.insert(on("c4a-standard-4", ARM_IMAGE, "pd-balanced"))
    with pytest.raises(exceptions.BadRequest, match=r"\[n4-standard-4, pd-balanced\] features are not compatible"):
        gce.insert(on("n4-standard-4", disk_type="pd-balanced"))
    with pytest.raises(exceptions.BadRequest, match=r"\[e2-standard-4, hyperdisk-balanced\] features"):
        gce.insert(on("e2-standard-4", disk_type="hyperdisk-balanced"))
    with pytest.raises(exceptions.BadRequest, match=r"architecture of the image \(X86_64\) is not compatible"):
        gce.insert(on("c4a-standard-4", disk_type="hyperdisk-balanced"))
    with pytest.raises(exceptions.BadRequest, match=r"architecture of the image \(ARM64\) is not compatible"):
        gce.insert(on("n2-standard-2", ARM_IMAGE))
    gce.create(on("c4a-standard-4", ARM_IMAGE, "hyperdisk-balanced"))
    gce.create(on("t2a-standard-4", ARM_IMAGE, "pd-balanced", name="vm-b"))
    assert gce.get("vm-a").disks[0].architecture == "ARM64"


def test_boot_disk_fits_the_machine_family_and_the_image(gce_env, compute_emulator, monkeypatch):
    monkeypatch.setenv("NBBURST_DISK_GB", "20")
    context = GCEContext(config.load())
    dlvm = context.image_for(Resources(image=DLVM_IMAGE))[0]
    assert context.boot_disk_gb("n1-standard-4", dlvm) == 50  # the image's 50 GB, not the 20 asked for
    assert context.boot_disk_gb("n1-standard-4", context.image_for(Resources())[0]) == 20
    arm = context.image_for(Resources(image=ARM_IMAGE))
    disk = context.boot_disk(ZONE, "c4a-standard-4", arm[0])
    assert disk.initialize_params.disk_type.endswith("/hyperdisk-balanced")
    assert context.boot_disk(ZONE, "n2-standard-4", dlvm).initialize_params.disk_type.endswith("/pd-balanced")
    with pytest.raises(UsageError, match=r"c4a-standard-4 runs ARM64 images but .* is X86_64: use an Arm image"):
        Burst().machines("gce").plan(Resources(machine_type="c4a-standard-4"))


# -- 6. nbburst doctor: APIs, network, addresses and disks -------------------------------------------------------
def doctor_out(capsys, ok=True):
    from nbburst.ui.cli import main

    assert (main(["doctor"]) == 0) is ok
    return " ".join(capsys.readouterr().out.split())  # rich wraps long lines


def test_doctor_checks_apis_network_addresses_and_disks(gce_env, compute_emulator, capsys, monkeypatch):
    out = doctor_out(capsys)
    assert "apis: on in project nbburst-test: compute.googleapis.com, storage.googleapis.com" in out
    assert "network: network default, subnetwork default in us-central1; VMs get an external IP" in out
    assert "in use addresses quota: room in us-central1 for an external IP" in out
    assert "ssd total gb quota: room in us-central1 for a 50 GB pd-balanced boot disk" in out

    compute_emulator.set_service("secretmanager.googleapis.com", False)
    compute_emulator.set_quota("IN_USE_ADDRESSES", 0)
    out = doctor_out(capsys, ok=False)
    assert "apis: off in project nbburst-test: secretmanager.googleapis.com" in out
    assert "gcloud services enable secretmanager.googleapis.com --project nbburst-test" in out
    assert "it needs 1 IN_USE_ADDRESSES" in out and "external_ip=false" in out
    compute_emulator.set_service("secretmanager.googleapis.com", True)

    monkeypatch.setenv("NBBURST_EXTERNAL_IP", "false")
    out = doctor_out(capsys, ok=False)
    assert "the subnetwork has no Private Google Access" in out
    assert (
        "gcloud compute networks subnets update default --region us-central1 --enable-private-ip-google-access" in out
    )
    assert "in use addresses quota: not needed" in out

    compute_emulator.add_network("corp", subnetworks={"us-central1": {"corp-us": True}})
    monkeypatch.setenv("NBBURST_NETWORK", "corp")
    out = doctor_out(capsys, ok=False)
    assert "network corp is a custom-mode network: a VM on it needs a subnetwork of us-central1" in out
    monkeypatch.setenv("NBBURST_SUBNETWORK", "corp-us")
    out = doctor_out(capsys)
    assert "network: network corp, subnetwork corp-us in us-central1: no external IP, Private Google Access on" in out

    monkeypatch.setenv("NBBURST_NETWORK", "nope")
    assert "network nope does not exist in project nbburst-test" in doctor_out(capsys, ok=False)


def test_compute_api_off_is_refused_as_google_refuses_it(gce, compute_emulator):
    compute_emulator.set_service("compute.googleapis.com", False)
    with pytest.raises(
        exceptions.Forbidden, match="Compute Engine API has not been used in project .* or it is disabled"
    ):
        gce.insert(instance("vm-a"))
    assert compute_emulator.instances() == []


def test_refusals_are_switched_from_other_processes_too(gce, compute_emulator):
    import requests

    base = f"{compute_emulator.endpoint}/emulator"
    requests.post(
        f"{base}/org-policies", json={"constraint": "compute.vmExternalIpAccess"}, timeout=5
    ).raise_for_status()
    with pytest.raises(exceptions.PreconditionFailed, match="vmExternalIpAccess"):
        gce.insert(with_external_ip(instance("vm-a")))
    off = {"constraint": "compute.vmExternalIpAccess", "enforced": False}
    requests.post(f"{base}/org-policies", json=off, timeout=5).raise_for_status()
    assert requests.post(f"{base}/org-policies", json={"constraint": "nope"}, timeout=5).status_code == 400

    capacity = {"available": False, "onInsert": True}
    requests.post(f"{base}/zones/{ZONE}/capacity", json=capacity, timeout=5).raise_for_status()
    with pytest.raises(exceptions.ServiceUnavailable):
        gce.insert(with_external_ip(instance("vm-a")))
    requests.post(f"{base}/zones/{ZONE}/capacity", json={"available": True}, timeout=5).raise_for_status()

    requests.post(f"{base}/services", json={"name": "compute.googleapis.com", "enabled": False}, timeout=5)
    service = requests.get(
        f"{compute_emulator.endpoint}/v1/projects/{PROJECT}/services/compute.googleapis.com", timeout=5
    )
    assert service.json()["state"] == "DISABLED"
    requests.post(f"{base}/services", json={"name": "compute.googleapis.com", "enabled": True}, timeout=5)
    gce.create(with_external_ip(instance("vm-a")))
