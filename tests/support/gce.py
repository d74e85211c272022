"""Clients of the Compute Engine emulator and submissions to the gce backend, shared by the Compute Engine
tests: the real google-cloud-compute clients pointed at the emulator, the instance a test inserts, a function
submitted to a spot VM."""

from __future__ import annotations

import time
import uuid

from google.cloud import compute_v1

PROJECT, ZONE = "nbburst-test", "us-central1-a"
FAMILY = "projects/nbburst-images/global/images/family/nbburst-py311"
IN_DISK = 'cd "$NBBURST_EMULATOR_DISK" || exit 1\n'


def instance(
    name,
    *,
    startup=None,
    shutdown=None,
    labels=None,
    machine="n2-standard-2",
    action="STOP",
    spot=True,
    max_run=None,
    zone=ZONE,
    accelerators=None,
):
    items = []
    # A VM's scripts start in / (as the guest agent runs them); the tests' scripts work in the instance's disk.
    if startup is not None:
        items.append(compute_v1.Items(key="startup-script", value=IN_DISK + startup))
    if shutdown is not None:
        items.append(compute_v1.Items(key="shutdown-script", value=IN_DISK + shutdown))
    scheduling = compute_v1.Scheduling(
        provisioning_model="SPOT" if spot else "STANDARD",
        on_host_maintenance="TERMINATE",
        automatic_restart=False,
        instance_termination_action=action,
    )
    if max_run:
        scheduling.max_run_duration = compute_v1.Duration(seconds=max_run)
    return compute_v1.Instance(
        name=name,
        machine_type=f"zones/{zone}/machineTypes/{machine}",
        labels=labels or {},
        disks=[
            compute_v1.AttachedDisk(
                boot=True,
                auto_delete=True,
                initialize_params=compute_v1.AttachedDiskInitializeParams(source_image=FAMILY, disk_size_gb=20),
            )
        ],
        network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")],
        metadata=compute_v1.Metadata(items=items),
        scheduling=scheduling,
        guest_accelerators=accelerators or [],
        service_accounts=[
            compute_v1.ServiceAccount(email="default", scopes=["https://www.googleapis.com/auth/cloud-platform"])
        ],
    )


class Compute:
    """The real clients, pointed at the emulator."""

    def __init__(self, emu):
        self.emu = emu
        self.instances = emu.client(compute_v1.InstancesClient)
        self.operations = emu.client(compute_v1.ZoneOperationsClient)

    def insert(self, inst, request_id=None, zone=ZONE):
        return self.instances.insert(
            request=compute_v1.InsertInstanceRequest(
                project=PROJECT, zone=zone, instance_resource=inst, request_id=request_id or str(uuid.uuid4())
            )
        )

    def wait(self, op, zone=ZONE):
        deadline = time.monotonic() + 20
        result = self.operations.wait(project=PROJECT, zone=zone, operation=op.name)
        while result.status != compute_v1.Operation.Status.DONE and time.monotonic() < deadline:
            result = self.operations.wait(project=PROJECT, zone=zone, operation=op.name)
        assert result.status == compute_v1.Operation.Status.DONE
        return result

    def create(self, inst, zone=ZONE):
        result = self.wait(self.insert(inst, zone=zone), zone=zone)
        assert not result.error.errors, result.error
        return result

    def get(self, name, zone=ZONE):
        return self.instances.get(project=PROJECT, zone=zone, instance=name)

    def list(self, filter_=""):
        return [
            i.name
            for i in self.instances.list(
                request=compute_v1.ListInstancesRequest(project=PROJECT, zone=ZONE, filter=filter_)
            )
        ]


def submit(burst, fn, *args, **options):
    """Submit ``fn(*args)`` to the gce backend with ``options``."""
    return burst.submit(fn, *args, options=burst.options(backend="gce", **options))
