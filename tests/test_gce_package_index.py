"""A VM without an external IP reaches packages through Cloud NAT or an index mirror: ``c.NBBurst.package_index``
(``NBBURST_PACKAGE_INDEX``) reaches the VM through its instance metadata, its bootstrap's uv installs from it
and the agent's own installs (uv and pip) see it. Against the emulators, with a local package index that the
VMs are not otherwise told of.
"""

from __future__ import annotations

import time

import pytest

from nbburst.client.burst import Burst
from nbburst.client.capture import capture
from nbburst.machines.base import machine_name
from nbburst.protocol.job import State
from nbburst.testing.compute.resources import ComputeError

CELL = """\
import os
indexes = (os.environ.get("UV_DEFAULT_INDEX"), os.environ.get("PIP_INDEX_URL"))
"""


@pytest.mark.compute_emulator(operation_delay=0.02)
@pytest.mark.timeout(360)
def test_the_vm_installs_from_the_configured_package_index(gce_env, compute_emulator, package_index, monkeypatch):
    monkeypatch.delenv("NBBURST_IMAGE_FAMILY", raising=False)  # the default stock image: uv comes from the index
    monkeypatch.delenv("NBBURST_IMAGE_PROJECT", raising=False)
    given = {k: v for k, v in package_index.env().items() if k != "UV_DEFAULT_INDEX"}
    compute_emulator.instance_env.update(given)  # the VMs' environment does not name the index: the setting does
    index = f"{package_index.url}/simple"
    monkeypatch.setenv("NBBURST_PACKAGE_INDEX", index)

    burst = Burst()
    job = burst.submit_cell(CELL, capture(CELL, {}), burst.options(backend="gce", cores=2))
    name, console, deadline = machine_name(job.id), "", time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            console = compute_emulator.serial_output(name)
        except ComputeError:
            break  # deleted by its agent
        time.sleep(0.2)
    assert job.wait(timeout=60) == State.SUCCEEDED, job.terminal().reason + "\n" + console[-5000:]
    assert "packages from the index at 127.0.0.1/simple" in console
    assert f"fetched from {index}" in console and "packages with uv" in console, console[-4000:]
    assert job.outcome({}).values["indexes"] == (index, index)


def test_doctor_warns_when_vms_without_an_external_ip_have_no_way_to_packages(
    gce_env, compute_emulator, capsys, monkeypatch
):
    from nbburst.ui.cli import main

    monkeypatch.setenv("NBBURST_EXTERNAL_IP", "false")
    compute_emulator.add_network("corp", subnetworks={"us-central1": {"corp-us": True}})
    monkeypatch.setenv("NBBURST_NETWORK", "corp")
    monkeypatch.setenv("NBBURST_SUBNETWORK", "corp-us")
    assert main(["doctor"]) == 0  # a warning: the network may have Cloud NAT
    out = " ".join(capsys.readouterr().out.split())
    assert "no package index is set, so VMs reach PyPI only if the network has Cloud NAT" in out
    assert "package_index=https://MIRROR/simple" in out and "gcloud compute routers nats create" in out

    monkeypatch.setenv("NBBURST_PACKAGE_INDEX", "https://mirror.example/simple")
    assert main(["doctor"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Private Google Access on, packages from the index" in out and "no package index is set" not in out
