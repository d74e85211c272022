"""The Compute Engine emulator, driven by the real google-cloud-compute clients."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest
import requests
from google.api_core import exceptions
from google.cloud import compute_v1
from support import wait_until
from support.gce import PROJECT, ZONE, Compute, instance

from nbburst.testing import MetadataServer


@pytest.fixture
def gce(compute_emulator):
    return Compute(compute_emulator)


def read_when_there(path: Path, timeout=10.0) -> str:
    wait_until(lambda: path.exists() and path.read_text().endswith("\n"), timeout, what=str(path))
    return path.read_text()


def test_insert_with_request_id_is_idempotent(gce):
    rid = str(uuid.uuid4())
    first = gce.insert(instance("vm-a"), request_id=rid)
    assert first.status in (compute_v1.Operation.Status.PENDING, compute_v1.Operation.Status.RUNNING)
    again = gce.insert(instance("vm-a"), request_id=rid)  # a retried request: same operation
    assert again.name == first.name
    done = gce.wait(first)
    assert done.operation_type == "insert"
    assert done.target_link.endswith("/zones/us-central1-a/instances/vm-a")
    assert gce.list() == ["vm-a"]
    with pytest.raises(exceptions.Conflict, match="already exists"):
        gce.insert(instance("vm-a"))
    # The same requestId after success still answers with the same (done) operation.
    assert gce.insert(instance("vm-a"), request_id=rid).name == first.name
    assert gce.list() == ["vm-a"]


def test_get_list_filter_and_stored_fields(gce):
    gce.create(instance("job-1-a", labels={"nbburst-job": "one", "role": "worker"}, max_run=600))
    gce.create(instance("job-1-b", labels={"nbburst-job": "one", "role": "head"}, action="DELETE"))
    gce.create(instance("job-2-a", labels={"nbburst-job": "two"}, spot=False, machine="e2-standard-4"))
    assert sorted(gce.list("labels.nbburst-job=one")) == ["job-1-a", "job-1-b"]
    assert gce.list("(labels.nbburst-job=one) (labels.role=head)") == ["job-1-b"]
    assert gce.list("(labels.nbburst-job = one) AND (name = job-1-a)") == ["job-1-a"]
    assert gce.list("name=job-2-a") == ["job-2-a"]
    assert gce.list('labels.nbburst-job="three"') == []
    assert sorted(gce.list("scheduling.provisioningModel = SPOT")) == ["job-1-a", "job-1-b"]
    aggregated = gce.instances.aggregated_list(
        request=compute_v1.AggregatedListInstancesRequest(project=PROJECT, filter="labels.nbburst-job=two")
    )
    found = [(zone, [i.name for i in scoped.instances]) for zone, scoped in aggregated if scoped.instances]
    assert found == [("zones/us-central1-a", ["job-2-a"])]

    vm = gce.get("job-1-a")
    assert vm.status == "RUNNING"
    assert vm.machine_type.endswith("/zones/us-central1-a/machineTypes/n2-standard-2")
    assert vm.scheduling.provisioning_model == "SPOT" and vm.scheduling.preemptible
    assert vm.scheduling.instance_termination_action == "STOP"
    assert vm.scheduling.max_run_duration.seconds == 600
    assert vm.labels == {"nbburst-job": "one", "role": "worker"}
    assert vm.service_accounts[0].email.endswith("-compute@developer.gserviceaccount.com")
    assert vm.disks[0].boot and vm.disks[0].disk_size_gb == 20
    assert vm.network_interfaces[0].network_i_p.startswith("10.128.")
    assert gce.get("job-1-b").scheduling.instance_termination_action == "DELETE"
    standard = gce.get("job-2-a").scheduling
    assert standard.provisioning_model == "STANDARD" and not standard.preemptible
    with pytest.raises(exceptions.NotFound):
        gce.get("nope")


STARTUP = r"""
echo "boot $(date +%s.%N)" >> boots.txt
echo "startup says hello"
MD="http://$GCE_METADATA_HOST/computeMetadata/v1"
curl -sf -H 'Metadata-Flavor: Google' "$MD/instance/name" > name.txt
curl -s -o /dev/null -w '%{http_code}' "$MD/instance/name" > noheader.txt
python - <<'PY'
import json, os, urllib.request
def md(path):
    req = urllib.request.Request("http://" + os.environ["GCE_METADATA_HOST"] + "/computeMetadata/v1/" + path,
                                 headers={"Metadata-Flavor": "Google"})
    return urllib.request.urlopen(req).read().decode()
import google.auth, google.auth.transport.requests
creds, project = google.auth.default()
creds.refresh(google.auth.transport.requests.Request())
info = {k: md(k) for k in ["instance/zone", "instance/attributes/role", "instance/preempted",
                           "project/project-id", "instance/image", "instance/machine-type"]}
info["attributes"] = md("instance/attributes/").split()
info["auth_project"], info["token"] = project, creds.token[:5]
info["endpoint"] = os.environ["NBBURST_COMPUTE_ENDPOINT"]
info["host_nbburst_vars"] = sorted(k for k in os.environ if k.startswith("NBBURST_ROOT"))
with open("info.json", "w") as f:
    f.write(json.dumps(info) + "\n")
PY
sleep 300
"""


def test_startup_script_runs_in_its_disk_with_a_metadata_server(gce, compute_emulator, monkeypatch):
    monkeypatch.setenv("NBBURST_ROOT", "gs://host-only/should-not-leak")
    inst = instance("vm-boot", startup=STARTUP)
    inst.metadata.items.append(compute_v1.Items(key="role", value="worker"))
    gce.create(inst)
    disk = compute_emulator.disk_path("vm-boot")
    info = json.loads(read_when_there(disk / "info.json", timeout=20))
    assert (disk / "name.txt").read_text() == "vm-boot"
    assert (disk / "noheader.txt").read_text() == "403"
    number = compute_emulator.api_project(PROJECT)["id"]
    assert info["instance/zone"] == f"projects/{number}/zones/us-central1-a"
    assert info["instance/attributes/role"] == "worker"
    assert "startup-script" in info["attributes"] and "role" in info["attributes"]
    assert info["instance/preempted"] == "FALSE"
    assert info["project/project-id"] == PROJECT == info["auth_project"]
    assert info["instance/image"] == "projects/nbburst-images/global/images/nbburst-py311-v1"
    assert info["instance/machine-type"].endswith("/machineTypes/n2-standard-2")
    assert info["token"] == "ya29."
    assert info["endpoint"] == compute_emulator.endpoint
    assert info["host_nbburst_vars"] == []

    # The serial console has the script's output; `start` pages through it.
    out = gce.instances.get_serial_port_output(project=PROJECT, zone=ZONE, instance="vm-boot")
    assert "startup says hello" in out.contents and out.start == 0
    assert out.next_ == len(out.contents.encode())
    more = gce.instances.get_serial_port_output(
        request=compute_v1.GetSerialPortOutputInstanceRequest(
            project=PROJECT, zone=ZONE, instance="vm-boot", start=out.next_ - 10
        )
    )
    assert more.start == out.next_ - 10 and more.contents == out.contents[-10:]

    # The script runs in a process group of its own.
    pid = compute_emulator.instance("vm-boot")["processes"]["startup"]["pid"]
    assert psutil.Process(pid).is_running() and psutil.Process(pid).cwd() == str(disk)


def test_stop_start_reruns_startup_and_keeps_disk_delete_removes_it(gce, compute_emulator):
    gce.create(instance("vm-cycle", startup="echo boot >> boots.txt; echo data > kept.txt; exec sleep 300"))
    disk = compute_emulator.disk_path("vm-cycle")
    wait_until(lambda: (disk / "boots.txt").exists(), what="first boot")
    first_pid = compute_emulator.instance("vm-cycle")["processes"]["startup"]["pid"]

    gce.wait(gce.instances.stop(project=PROJECT, zone=ZONE, instance="vm-cycle"))
    assert gce.get("vm-cycle").status == "TERMINATED"
    assert not psutil.pid_exists(first_pid) or psutil.Process(first_pid).status() == psutil.STATUS_ZOMBIE
    assert (disk / "kept.txt").read_text() == "data\n"

    gce.wait(gce.instances.start(project=PROJECT, zone=ZONE, instance="vm-cycle"))
    assert gce.get("vm-cycle").status == "RUNNING"
    wait_until(lambda: (disk / "boots.txt").read_text() == "boot\nboot\n", what="second boot")

    gce.wait(gce.instances.delete(project=PROJECT, zone=ZONE, instance="vm-cycle"))
    with pytest.raises(exceptions.NotFound):
        gce.get("vm-cycle")
    assert not disk.exists()
    assert compute_emulator.live_processes() == []


# Started by the startup script: a child that ignores the soft-off signal, so only the
# hard-off after the grace period ends it.
STUBBORN = r"""
python -c 'import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open("stubborn.pid", "w").write(f"{os.getpid()}\n")
time.sleep(300)' &
sleep 300
"""
SHUTDOWN = """
MD="http://$GCE_METADATA_HOST/computeMetadata/v1"
curl -sf -H 'Metadata-Flavor: Google' "$MD/instance/preempted" > preempted.txt
curl -sf -H 'Metadata-Flavor: Google' "$MD/instance/maintenance-event" > event.txt
echo >> preempted.txt
"""


@pytest.mark.compute_emulator(preemption_grace=1.0)
@pytest.mark.parametrize("action", ["STOP", "DELETE"])
def test_preemption(gce, compute_emulator, action):
    gce.create(instance("vm-spot", startup=STUBBORN, shutdown=SHUTDOWN, action=action))
    disk = compute_emulator.disk_path("vm-spot")
    stubborn = int(read_when_there(disk / "stubborn.pid"))
    info_dir = Path(compute_emulator.instance("vm-spot")["dir"])
    t0 = time.monotonic()
    compute_emulator.preempt("vm-spot", wait=True)
    assert time.monotonic() - t0 >= 1.0  # the stubborn child kept it up for the whole grace
    assert not psutil.pid_exists(stubborn) or psutil.Process(stubborn).status() == psutil.STATUS_ZOMBIE
    ops = gce.operations.list(
        request=compute_v1.ListZoneOperationsRequest(
            project=PROJECT, zone=ZONE, filter='operationType="compute.instances.preempted"'
        )
    )
    assert [op.target_link.rsplit("/", 1)[1] for op in ops] == ["vm-spot"]
    if action == "STOP":
        assert gce.get("vm-spot").status == "TERMINATED"
        assert (disk / "preempted.txt").read_text() == "TRUE\n"
        assert (disk / "event.txt").read_text() == "TERMINATE_ON_HOST_MAINTENANCE"
        assert "preempted: soft-off signal" in compute_emulator.serial_output("vm-spot")
    else:
        with pytest.raises(exceptions.NotFound):
            gce.get("vm-spot")
        assert not info_dir.exists()


def test_simulate_maintenance_preempts_a_spot_vm(gce, compute_emulator):
    gce.create(instance("vm-maint", startup="exec sleep 300"))
    gce.wait(gce.instances.simulate_maintenance_event(project=PROJECT, zone=ZONE, instance="vm-maint"))
    assert gce.get("vm-maint").status == "TERMINATED"
    assert compute_emulator.instance("vm-maint")["preempted"]


@pytest.mark.compute_emulator(time_scale=1 / 30)  # Compute Engine's shortest limit, 30 s, runs out in 1 s
def test_max_run_duration_ends_the_instance(gce, compute_emulator):
    gce.create(instance("vm-short", startup="exec sleep 300", max_run=30, action="DELETE"))
    assert compute_emulator.wait_for_status("vm-short", "DELETED", timeout=10) == "DELETED"
    gce.create(instance("vm-short-stop", startup="exec sleep 300", max_run=30, action="STOP"))
    assert compute_emulator.wait_for_status("vm-short-stop", "TERMINATED", timeout=10) == "TERMINATED"


def test_the_vm_can_power_itself_off(gce, compute_emulator):
    gce.create(instance("vm-off", startup="echo work done; sudo poweroff; sleep 300"))
    assert compute_emulator.wait_for_status("vm-off", "TERMINATED", timeout=10) == "TERMINATED"
    assert gce.get("vm-off").status == "TERMINATED"


def test_a_late_power_off_never_stops_the_next_boot(gce, compute_emulator):
    """A guest's power-off belongs to its boot: one asked for while a preemption stopped the VM, and carried
    out late, must not stop the VM's next boot (which then read as a boot failure)."""
    gce.create(instance("vm-boots", startup="exec sleep 300"))
    compute_emulator.preempt("vm-boots", grace=0.2, wait=True)
    gce.wait(gce.instances.start(project=PROJECT, zone=ZONE, instance="vm-boots"))
    assert compute_emulator.wait_for_status("vm-boots", "RUNNING", timeout=10) == "RUNNING"
    compute_emulator.poweroff("vm-boots", boot=1)  # what the first boot's guest asked for, arriving now
    time.sleep(0.5)
    assert gce.get("vm-boots").status == "RUNNING"
    compute_emulator.poweroff("vm-boots", boot=2)
    assert compute_emulator.wait_for_status("vm-boots", "TERMINATED", timeout=10) == "TERMINATED"


def test_startup_script_ending_leaves_the_instance_running(gce, compute_emulator):
    gce.create(instance("vm-idle", startup="echo quick"))
    wait_until(lambda: "exit status 0" in compute_emulator.serial_output("vm-idle"), what="script exit")
    assert gce.get("vm-idle").status == "RUNNING"


def test_quota_exceeded(gce, compute_emulator):
    compute_emulator.set_quota("CPUS", 4)
    gce.create(instance("vm-small", machine="n2-standard-2"))
    regions = compute_emulator.client(compute_v1.RegionsClient)
    quotas = {q.metric: q for q in regions.get(project=PROJECT, region="us-central1").quotas}
    assert (quotas["CPUS"].limit, quotas["CPUS"].usage) == (4, 2)  # spot falls back to CPUS
    assert quotas["N2_CPUS"].usage == 2
    with pytest.raises(exceptions.Forbidden, match="Quota 'CPUS' exceeded") as err:
        gce.insert(instance("vm-big", machine="n2-standard-4"))
    assert err.value.errors[0]["reason"] == "quotaExceeded"
    gce.create(instance("vm-small-2", machine="e2-standard-2"))


def test_zone_out_of_capacity(gce, compute_emulator):
    compute_emulator.set_zone_capacity(ZONE, available=False, machine_types=["n2-"])
    result = gce.wait(gce.insert(instance("vm-none")))
    assert result.error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    error = exceptions.from_http_status(result.http_error_status_code, result.http_error_message)
    assert isinstance(error, exceptions.ServiceUnavailable)
    with pytest.raises(exceptions.NotFound):
        gce.get("vm-none")
    gce.create(instance("vm-e2", machine="e2-standard-2"))  # other families still fit
    compute_emulator.set_zone_capacity(ZONE, available=True)
    gce.create(instance("vm-none"))


@pytest.mark.compute_emulator(quotas={"GPUS_ALL_REGIONS": 1})
def test_machine_or_accelerator_not_in_zone(gce):
    with pytest.raises(exceptions.BadRequest, match="does not exist in zone 'us-central1-f'"):
        gce.insert(instance("vm-l4", machine="g2-standard-4", zone="us-central1-f"), zone="us-central1-f")
    with pytest.raises(exceptions.BadRequest, match="does not exist in zone"):
        gce.insert(
            instance(
                "vm-t4",
                machine="n1-standard-4",
                zone="europe-west4-a",
                accelerators=[
                    compute_v1.AcceleratorConfig(
                        accelerator_type="zones/europe-west4-a/acceleratorTypes/nvidia-tesla-t4", accelerator_count=1
                    )
                ],
            ),
            zone="europe-west4-a",
        )
    gce.create(
        instance(
            "vm-t4",
            machine="n1-standard-4",
            accelerators=[
                compute_v1.AcceleratorConfig(
                    accelerator_type=f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4", accelerator_count=1
                )
            ],
        )
    )
    accelerator = gce.get("vm-t4").guest_accelerators[0]
    assert accelerator.accelerator_type.endswith("/acceleratorTypes/nvidia-tesla-t4")


def test_images_and_machine_types(compute_emulator):
    images = compute_emulator.client(compute_v1.ImagesClient)
    assert images.get_from_family(project="nbburst-images", family="nbburst-py311").name == "nbburst-py311-v1"
    compute_emulator.add_image("nbburst-images", "nbburst-py311-v2", "nbburst-py311")
    assert images.get_from_family(project="nbburst-images", family="nbburst-py311").name == "nbburst-py311-v2"
    assert images.get(project="nbburst-images", image="nbburst-py311-v1").family == "nbburst-py311"
    with pytest.raises(exceptions.NotFound):
        images.get_from_family(project="nbburst-images", family="nope")

    machine_types = compute_emulator.client(compute_v1.MachineTypesClient)
    catalog = {m.name: m for m in machine_types.list(project=PROJECT, zone=ZONE)}
    assert catalog["n2-standard-64"].guest_cpus == 64 and catalog["n2-standard-64"].memory_mb == 262144
    assert {
        "e2-standard-32",
        "n2-highmem-16",
        "n2-highcpu-96",
        "c2d-highcpu-112",
        "n1-standard-8",
        "g2-standard-8",
        "a2-highgpu-1g",
    } <= set(catalog)
    assert catalog["a2-highgpu-1g"].accelerators[0].guest_accelerator_type == "nvidia-tesla-a100"
    big = machine_types.list(
        request=compute_v1.ListMachineTypesRequest(project=PROJECT, zone=ZONE, filter="(guestCpus >= 96) (name = n2-*)")
    )
    assert sorted(m.name for m in big) == [
        "n2-highcpu-96",
        "n2-highmem-128",
        "n2-highmem-96",
        "n2-standard-128",
        "n2-standard-96",
    ]
    with pytest.raises(exceptions.NotFound):
        machine_types.get(project=PROJECT, zone="us-central1-f", machine_type="g2-standard-4")
    accelerators = compute_emulator.client(compute_v1.AcceleratorTypesClient)
    assert {a.name for a in accelerators.list(project=PROJECT, zone="europe-west4-a")} == {
        "nvidia-l4",
        "nvidia-tesla-a100",
    }
    zones = compute_emulator.client(compute_v1.ZonesClient)
    assert zones.get(project=PROJECT, zone="europe-west4-b").region.endswith("/regions/europe-west4")


def test_image_from_a_stopped_boot_disk_carries_its_content(gce, compute_emulator):
    images = compute_emulator.client(compute_v1.ImagesClient)
    global_ops = compute_emulator.client(compute_v1.GlobalOperationsClient)
    gce.create(instance("vm-bake", startup="mkdir -p baked && echo ready > baked/marker; exec sleep 300"))
    disk = gce.get("vm-bake").disks[0].source
    assert disk.endswith(f"/projects/{PROJECT}/zones/{ZONE}/disks/vm-bake")
    image = compute_v1.Image(
        name="baked-1", family="baked", source_disk=disk.split("/compute/v1/")[1], labels={"python": "3-11"}
    )
    with pytest.raises(exceptions.BadRequest, match="already being used by"):
        images.insert(project=PROJECT, image_resource=image)  # the instance still runs
    read_when_there(compute_emulator.disk_path("vm-bake") / "baked" / "marker")
    gce.wait(gce.instances.stop(project=PROJECT, zone=ZONE, instance="vm-bake"))
    op = images.insert(
        request=compute_v1.InsertImageRequest(project=PROJECT, image_resource=image, request_id=str(uuid.uuid4()))
    )
    done = global_ops.wait(project=PROJECT, operation=op.name)
    assert done.status == compute_v1.Operation.Status.DONE and not done.error.errors
    assert global_ops.get(project=PROJECT, operation=op.name).target_link.endswith("/global/images/baked-1")
    got = images.get_from_family(project=PROJECT, family="baked")
    assert (got.name, got.status, dict(got.labels)) == ("baked-1", "READY", {"python": "3-11"})
    assert got.source_disk.endswith("/disks/vm-bake")
    with pytest.raises(exceptions.Conflict):
        images.insert(project=PROJECT, image_resource=image)
    gce.wait(gce.instances.delete(project=PROJECT, zone=ZONE, instance="vm-bake"))
    booted = instance("vm-from-image")
    booted.disks[0].initialize_params.source_image = f"projects/{PROJECT}/global/images/family/baked"
    gce.create(booted)
    assert (compute_emulator.disk_path("vm-from-image") / "baked" / "marker").read_text() == "ready\n"
    global_ops.wait(project=PROJECT, operation=images.delete(project=PROJECT, image="baked-1").name)
    with pytest.raises(exceptions.NotFound):
        images.get(project=PROJECT, image="baked-1")


def test_control_endpoints_over_http(gce, compute_emulator):
    gce.create(instance("vm-remote", startup="exec sleep 300"))
    base = compute_emulator.endpoint + "/emulator"
    listed = requests.get(base + "/instances", timeout=5).json()["instances"]
    assert [(i["name"], i["status"]) for i in listed] == [("vm-remote", "RUNNING")]
    assert listed[0]["live_pids"] and Path(listed[0]["disk"]).is_dir()
    r = requests.post(
        f"{base}/projects/{PROJECT}/zones/{ZONE}/instances/vm-remote/preempt",
        json={"grace": 0.5, "wait": True},
        timeout=10,
    )
    assert r.ok, r.text
    assert gce.get("vm-remote").status == "TERMINATED"
    requests.post(f"{base}/quotas", json={"metric": "CPUS", "limit": 1}, timeout=5).raise_for_status()
    with pytest.raises(exceptions.Forbidden):
        gce.instances.start(project=PROJECT, zone=ZONE, instance="vm-remote")
    requests.post(f"{base}/zones/{ZONE}/capacity", json={"available": False}, timeout=5).raise_for_status()
    requests.post(f"{base}/quotas", json={"limits": {"CPUS": 100}}, timeout=5).raise_for_status()
    result = gce.wait(gce.instances.start(project=PROJECT, zone=ZONE, instance="vm-remote"))
    assert result.error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert gce.get("vm-remote").status == "TERMINATED"


def test_emulator_stop_leaves_no_process(tmp_path):
    from nbburst.testing import ComputeEmulator

    emu = ComputeEmulator(tmp_path / "c", operation_delay=0.01).start()
    gce = Compute(emu)
    gce.create(instance("vm-daemon", startup="setsid sleep 300 & echo $! > d.pid; exec sleep 300"))
    daemon = int(read_when_there(emu.disk_path("vm-daemon") / "d.pid"))
    assert psutil.pid_exists(daemon)
    emu.stop()
    wait_until(
        lambda: not psutil.pid_exists(daemon) or psutil.Process(daemon).status() == psutil.STATUS_ZOMBIE,
        timeout=5,
        what="escaped process killed",
    )
    assert emu.live_processes() == []


def test_metadata_server_semantics():
    with MetadataServer(
        {
            "instance/preempted": "FALSE",
            "instance/attributes": {"a": "1", "b-c": "2"},
            "instance/service-accounts/default/email": "sa@x",
            "instance/service-accounts/sa@x/email": "sa@x",
        }
    ) as md:
        url, flavor = md.url, {"Metadata-Flavor": "Google"}
        assert requests.get(url + "instance/preempted", timeout=5).status_code == 403
        assert requests.get(url + "instance/preempted", headers=flavor, timeout=5).text == "FALSE"
        assert requests.get(url + "instance/attributes/", headers=flavor, timeout=5).text == "a\nb-c\n"
        tree = requests.get(url + "instance/?recursive=true", headers=flavor, timeout=5).json()
        assert tree["attributes"] == {"a": "1", "b-c": "2"}
        assert tree["serviceAccounts"] == {"default": {"email": "sa@x"}, "sa@x": {"email": "sa@x"}}
        assert requests.get(url + "instance/nope", headers=flavor, timeout=5).status_code == 404

        # wait_for_change hangs until the value changes
        threading.Timer(0.3, md.set, ("instance/preempted", "TRUE")).start()
        t0 = time.monotonic()
        r = requests.get(url + "instance/preempted?wait_for_change=true", headers=flavor, timeout=10)
        assert r.text == "TRUE" and 0.2 < time.monotonic() - t0 < 5
        # ... returns at once when last_etag is stale, and on timeout_sec with the same value
        assert (
            requests.get(url + "instance/preempted?wait_for_change=true&last_etag=0", headers=flavor, timeout=5).text
            == "TRUE"
        )
        r = requests.get(
            url + f"instance/preempted?wait_for_change=true&last_etag={r.headers['ETag']}&timeout_sec=0.2",
            headers=flavor,
            timeout=5,
        )
        assert r.text == "TRUE"
