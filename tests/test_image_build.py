"""``nbburst image build`` against the emulators: the builder VM really runs its startup script (from the stock
debian-12 image: uv, fetched from a local package index, installs the packages and nbburst's wheel into a
venv on the disk), the image is made from its disk, and a job booted from the image finds everything there."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1
from support import wait_until

from nbburst import __version__
from nbburst.client.burst import Burst
from nbburst.errors import UsageError
from nbburst.machines.base import machine_name
from nbburst.machines.gce.context import GCEContext
from nbburst.machines.gce.image import ImageBuilder, build_script, packages_to_bake, plan, read_requirements
from nbburst.protocol import dist
from nbburst.protocol.job import State
from nbburst.ui.cli import main

FAMILY = "nbburst-test-baked"
STOCK = "projects/debian-cloud/global/images/family/debian-12"


@pytest.fixture
def image_env(gce_env, compute_emulator, package_index, monkeypatch):
    monkeypatch.setenv("NBBURST_IMAGE_PROJECT", compute_emulator.project)  # where the build puts the image
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # the VMs inherit it: their pip never goes to the network
    compute_emulator.instance_env.update(package_index.env())  # nor their uv: it uses the local index
    monkeypatch.setattr(ImageBuilder, "poll_s", 0.1)
    return gce_env


def posts(emu) -> list[dict]:
    return [r for r in emu.request_log if r["method"] in ("POST", "DELETE") and "/emulator/" not in r["path"]]


def family_image(emu, family=FAMILY):
    return emu.client(compute_v1.ImagesClient).get_from_family(project=emu.project, family=family)


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_build_an_image_and_boot_a_job_from_it(image_env, compute_emulator, capsys, tmp_path):
    # Bake what the job below needs (this process's environment is too big to bake in a test): the
    # distributions of the modules loaded once a build and a job have been planned, as requirement lines.
    assert main(["image", "build", "--family", FAMILY, "--zone", "us-central1-b", "--dry-run"]) == 0
    Burst().machines("gce").plan(Burst().options(backend="gce", cores=2, image=STOCK).resources)
    needed = tmp_path / "requirements.txt"
    needed.write_text("".join(f"{n}=={v}\n" for n, v in dist.requirements().items()))
    capsys.readouterr()
    assert main(["image", "build", "--family", FAMILY, "--zone", "us-central1-b", "--requirements", str(needed)]) == 0
    out = capsys.readouterr().out
    image = family_image(compute_emulator)
    assert image.name.startswith(FAMILY + "-") and len(image.name) == len(FAMILY) + 16
    assert image.status == "READY" and image.family == FAMILY
    assert dict(image.labels) == {"python": "3-11", "nbburst": __version__.replace(".", "-")}
    assert f'c.NBBurst.image_family = "{FAMILY}"' in out
    assert f'c.NBBurst.image_project = "{compute_emulator.project}"' in out
    assert "SUCCESS" in out and "deleting the builder VM" in out

    # the builder: on-demand, labelled, started from the default base for Python 3.11, and gone
    (insert,) = [r for r in posts(compute_emulator) if r["path"].endswith("/instances")]
    body = insert["body"]
    assert insert["path"].endswith("/zones/us-central1-b/instances")
    assert body["labels"]["nbburst-image-build"] == FAMILY and body["labels"]["nbburst-owner"]
    assert "nbburst" not in body["labels"]  # `nbburst gc` must not take it for a job's machine
    assert body["scheduling"]["provisioningModel"] == "STANDARD"
    assert body["machineType"].endswith("/machineTypes/e2-standard-4")
    source = body["disks"][0]["initializeParams"]["sourceImage"]
    assert source == "projects/debian-cloud/global/images/debian-12-bookworm-v20240110"
    assert compute_emulator.instances() == []
    (image_insert,) = [r for r in posts(compute_emulator) if r["path"].endswith("/global/images")]
    assert image_insert["body"]["sourceDisk"].startswith(
        f"projects/{compute_emulator.project}/zones/us-central1-b/disks/nbburst-image-build-"
    )

    # the image's content: the venv with nbburst's wheel, and what was baked
    (baked,) = [i for i in compute_emulator.images if i.name == image.name]
    content = Path(baked.content) / "nbburst"
    info = json.loads((content / "image.json").read_text())
    assert info["nbburst"] == __version__ and info["python"].startswith("3.11.") and info["family"] == FAMILY
    assert (content / "venv" / ".nbburst-wheel").read_text() == info["wheel_sha256"]
    assert list((content / "venv").glob("lib/python3.11/site-packages/nbburst/agent/attempt/controller.py"))

    # a job with --image-family boots from it: the venv is there, nothing is installed again
    def probe():
        import json
        import os
        import sys
        import time

        home = os.environ["NBBURST_HOME"]
        with open(os.path.join(home, "image.json")) as f:
            info = json.load(f)
        marker = os.path.join(sys.prefix, ".nbburst-wheel")
        time.sleep(1.5)  # time for the test to read the serial console
        return {"info": info, "prefix": sys.prefix, "home": home, "marker_mtime": os.stat(marker).st_mtime}

    burst = Burst()
    submitted = time.time()
    job = burst.submit(probe, options=burst.options(backend="gce", cores=2, image_family=FAMILY))
    assert job.spec.plan["image"] == f"projects/{compute_emulator.project}/global/images/{image.name}"
    name = machine_name(job.id)
    wait_until(lambda: job.state == State.RUNNING, what="the agent to start")
    console = compute_emulator.serial_output(name)
    assert f"nbburst {__version__} already installed" in console
    assert "venv created" not in console and "downloaded" not in console
    assert job.wait(timeout=60) == State.SUCCEEDED, job.terminal().reason
    result = job.result()
    assert result["info"]["wheel_sha256"] == info["wheel_sha256"]
    assert result["prefix"] == str(Path(result["home"]) / "venv")
    assert result["marker_mtime"] < submitted  # baked, not written by this boot
    assert "installing" not in job.logs()  # envsync found the notebook's versions
    assert compute_emulator.wait_for_status(name, "DELETED", timeout=20) == "DELETED"


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_a_failing_build_shows_the_serial_tail_and_leaves_nothing(image_env, compute_emulator, tmp_path, capsys):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# an impossible pin\nnbburst-no-such-package==99.0\n")
    assert main(["image", "build", "--family", FAMILY, "--requirements", str(requirements)]) == 1
    captured = capsys.readouterr()
    assert "the image build failed on the builder VM nbburst-image-build-" in captured.err
    assert "Last lines of its serial console" in captured.err
    assert "nbburst-no-such-package==99.0" in captured.err and "FAILED" in captured.err
    assert "deleting the builder VM" in captured.out
    assert compute_emulator.instances() == []
    with pytest.raises(exceptions.NotFound):
        family_image(compute_emulator)
    assert not [r for r in posts(compute_emulator) if r["path"].endswith("/global/images")]


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_ctrl_c_during_the_build_deletes_the_builder(image_env, compute_emulator, monkeypatch, capsys):
    def interrupted(self, plan, name):
        assert compute_emulator.wait_for_status(name, "RUNNING", timeout=10) == "RUNNING"
        raise KeyboardInterrupt

    monkeypatch.setattr(ImageBuilder, "_wait_until_off", interrupted)
    assert main(["image", "build", "--family", FAMILY]) == 130
    assert "deleting the builder VM" in capsys.readouterr().out
    assert compute_emulator.instances() == []
    with pytest.raises(exceptions.NotFound):
        family_image(compute_emulator)


def test_dry_run_prints_the_plan_and_creates_nothing(image_env, compute_emulator, capsys):
    assert main(["image", "build", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run, nothing is created" in out
    assert "image:      nbburst-py311-" in out and "(family nbburst-py311)" in out and "python=3-11" in out
    assert "base image: projects/debian-cloud/global/images/debian-12-bookworm-v20240110" in out
    assert "builder:    e2-standard-4, on-demand, in us-central1-a" in out
    assert "cloudpickle==" in out and "google-cloud-storage==" in out
    assert "nbburst:    0.1.0, wheel nbburst-0.1.0-py3-none-any.whl" in out
    assert posts(compute_emulator) == [] and compute_emulator.instances() == []
    assert Burst().store_for("gce").list("") == []  # not even the wheel


def test_plan_refusals(image_env, compute_emulator, tmp_path, capsys):
    context = GCEContext(Burst().settings)
    compute_emulator.add_image(compute_emulator.project, "old-py39", "old", labels={"python": "3-9"})
    with pytest.raises(UsageError, match="labelled Python 3.9, but this notebook runs Python 3.11"):
        plan(context, base_family="old")
    with pytest.raises(UsageError, match="image family nope does not exist in project debian-cloud"):
        plan(context, base_family="nope", base_project="debian-cloud")
    with pytest.raises(UsageError, match="--machine-type n9-huge: not offered in zone us-central1-a"):
        plan(context, machine_type="n9-huge")
    assert main(["image", "build", "--family", "Not_A_Family", "--dry-run"]) == 2
    assert "--family 'Not_A_Family'" in capsys.readouterr().err
    local = tmp_path / "req.txt"
    local.write_text("numpy==1.26.4\n-e ./mypackage\n")
    with pytest.raises(UsageError, match="line 2: '-e ./mypackage' refers to a local file"):
        read_requirements(str(local))
    assert posts(compute_emulator) == []


def test_what_gets_baked(tmp_path):
    pins, lines, skipped = packages_to_bake()
    assert "nbburst" not in pins and not lines
    assert {"cloudpickle", "google-cloud-storage", "psutil"} <= set(pins)  # nbburst's own dependencies
    assert "pytest" not in pins and "kernel, Jupyter" in skipped["pytest"]
    assert all(v for v in pins.values())
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("cloudpickle>=2  # mine\n\nrequests==2.0.0\n")
    pins, lines, _ = packages_to_bake(str(requirements))
    assert lines == ["cloudpickle>=2", "requests==2.0.0"]
    assert "cloudpickle" not in pins and "requests" not in pins and "google-cloud-storage" in pins
    script = build_script("3.11")
    assert 'WANT="3.11"' in script and "nbburst-image-build: SUCCESS" not in script  # said by `say SUCCESS`
    with pytest.raises(ValueError):
        build_script("3.11; rm -rf /")
