"""The gce backend's errors: one readable message, before money is spent where it can be known,
and nothing left behind (no VM, no half-written job). Also ``nbburst doctor`` and zero configuration
on Vertex AI Workbench."""

from __future__ import annotations

import json

import pytest

from nbburst.client.burst import Burst
from nbburst.errors import JobFailed, UsageError
from nbburst.machines.base import machine_name
from nbburst.protocol.job import Resources, State
from nbburst.testing import MetadataServer


def submit(burst, **options):
    return burst.submit(abs, -7, options=burst.options(backend="gce", **options))


def nothing_left(burst, compute_emulator, jobs_expected=0):
    assert compute_emulator.instances() == []
    assert len(burst.jobs(store=burst.store_for("gce"))) == jobs_expected


def test_no_credentials(gce_env, monkeypatch, tmp_path):
    monkeypatch.delenv("NBBURST_COMPUTE_ENDPOINT")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    with pytest.raises(UsageError, match="no Google Cloud credentials: run `gcloud auth application-default login`"):
        submit(Burst())
    assert Burst().jobs(store=Burst().store_for("gce")) == []


def test_bucket_missing(gce_env, compute_emulator, monkeypatch):
    monkeypatch.setenv("NBBURST_ROOT", "gs://no-such-bucket-here/nbburst")
    with pytest.raises(
        UsageError,
        match=r"the bucket gs://no-such-bucket-here does not exist: create it with "
        r"`gcloud storage buckets create",
    ):
        submit(Burst())
    assert compute_emulator.instances() == []


def test_quota_exceeded_before_launch(gce_env, compute_emulator):
    compute_emulator.set_quota("CPUS", 2)
    burst = Burst()
    with pytest.raises(UsageError) as err:
        submit(burst, cores=4)
    message = str(err.value)
    assert "not enough quota for this spot VM in us-central1: it needs 4 CPUS" in message
    assert "only 2 of 2 are free" in message and "iam-admin/quotas" in message
    nothing_left(burst, compute_emulator)
    assert not [r for r in compute_emulator.request_log if r["method"] == "POST"]  # nothing was attempted


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_zone_out_of_capacity_then_zone_auto(gce_env, compute_emulator):
    compute_emulator.set_zone_capacity("us-central1-a", available=False)
    burst = Burst()
    with pytest.raises(
        JobFailed,
        match=r"zone us-central1-a has no capacity for e2-highcpu-2 spot VMs right now "
        r".*Try --zone auto",
    ):
        submit(burst, cores=2)
    (job,) = burst.jobs(store=burst.store_for("gce"))
    assert job.state == State.FAILED and "no capacity" in job.terminal().reason  # committed, not half-written
    assert compute_emulator.instances() == []

    compute_emulator.set_zone_capacity("us-central1-b", available=False)
    job = submit(burst, cores=2, zone="auto")
    machines = burst.machines("gce")
    assert machines.last_launch["zone"] == "us-central1-c"
    assert machines.last_launch["tried"] == ["us-central1-a (no spot capacity)", "us-central1-b (no spot capacity)"]
    assert "zones to try: us-central1-a, us-central1-b, us-central1-c, us-central1-f" in job.spec.plan["reason"]
    assert job.result(timeout=60) == 7
    assert compute_emulator.wait_for_status(machine_name(job.id), "DELETED", zone="us-central1-c") == "DELETED"

    for zone in ("us-central1-c", "us-central1-f"):
        compute_emulator.set_zone_capacity(zone, available=False)
    with pytest.raises(
        JobFailed,
        match="no capacity for e2-highcpu-2 spot VMs in any zone tried: us-central1-a "
        r"\(no spot capacity\), .*us-central1-f \(no spot capacity\)",
    ):
        submit(burst, cores=2, zone="auto")


def test_machine_type_or_gpu_not_offered_in_the_zone(gce_env, compute_emulator):
    burst = Burst()
    with pytest.raises(UsageError, match="--machine-type g2-standard-4: not offered in zone us-central1-f"):
        submit(burst, machine_type="g2-standard-4", zone="us-central1-f")
    with pytest.raises(
        UsageError,
        match=r"--gpu nvidia-l4: not offered in zone us-central1-f \(GPUs there: "
        r"nvidia-tesla-a100, nvidia-tesla-t4\)",
    ):
        submit(burst, gpu="l4", zone="us-central1-f")
    with pytest.raises(UsageError, match="--gpu nvidia-l4:3: G2 machines in us-central1-a come with 1, 2, 4, 8"):
        burst.machines("gce").plan(Resources(gpu="nvidia-l4", gpu_count=3))
    with pytest.raises(UsageError, match="--workers: must be at least 1"):
        submit(burst, workers=0)
    nothing_left(burst, compute_emulator)


def test_python_mismatch_of_a_labelled_image_is_refused_before_launch(gce_env, compute_emulator, monkeypatch):
    compute_emulator.add_image("nbburst-images", "py310-v1", "py310", labels={"python": "3-10"})
    burst = Burst()
    with pytest.raises(
        UsageError,
        match=r"the image projects/nbburst-images/global/images/py310-v1 has Python "
        r"3\.10 but this notebook runs Python 3\.11",
    ):
        submit(burst, image_family="py310")
    with pytest.raises(UsageError, match="--image-family: image family nope does not exist in project nbburst-images"):
        submit(burst, image_family="nope")
    nothing_left(burst, compute_emulator)


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_python_mismatch_found_on_the_vm_fails_and_deletes_it(gce_env, compute_emulator, monkeypatch):
    import nbburst.client.burst

    notebook = {**nbburst.client.burst.manifest(), "python": "3.10.4"}
    monkeypatch.setattr(nbburst.client.burst, "manifest", lambda: notebook)
    monkeypatch.setattr(nbburst.client.burst, "manifest_json", lambda: json.dumps(notebook, indent=1).encode())
    burst = Burst()
    job = submit(burst, cores=2)
    assert job.wait(timeout=60, supervise=False) == State.FAILED
    reason = job.terminal().reason
    assert "the notebook runs Python 3.10 but this machine has Python 3.11" in reason
    assert "refusing to run" in job.logs()
    assert compute_emulator.wait_for_status(machine_name(job.id), "DELETED", timeout=20) == "DELETED"


def test_doctor_reports_each_check_with_a_fix(gce_env, compute_emulator, capsys):
    from nbburst.ui.cli import main

    assert main(["doctor"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    for line in (
        "credentials: Compute Engine emulator",
        "project and zone: project nbburst-test, zone us-central1-a",
        "compute api: zone us-central1-a is UP",
        "bucket: gs://",
        "spot quota: room for a spot e2-highcpu-4",
        "standard quota: room",
        "image: projects/nbburst-images/global/images/nbburst-py311-v1",
    ):
        assert line in out, out
    assert "public access prevention" in out  # the emulator does not report it: a warning with its fix

    compute_emulator.set_quota("CPUS", 2)
    assert main(["doctor"]) != 0
    out = " ".join(capsys.readouterr().out.split())
    assert "spot quota: not enough quota for this spot VM in us-central1: it needs 4 CPUS" in out
    assert "fix: request more quota: https://console.cloud.google.com/iam-admin/quotas" in out


def test_workbench_gives_project_zone_service_account_and_image(gce_env, compute_emulator, monkeypatch):
    from nbburst.machines.gce import context as gce

    tree = {
        "instance/attributes": {"proxy-url": "https://abc-dot-us-central1.notebooks.googleusercontent.com"},
        "instance/zone": "projects/123/zones/us-central1-b",
        "instance/image": "projects/nbburst-images/global/images/nbburst-py311-v1",
        "instance/service-accounts/default/email": "wb@nbburst-test.iam.gserviceaccount.com",
        "project/project-id": "nbburst-test",
    }
    with MetadataServer(tree) as md:
        monkeypatch.setenv("GCE_METADATA_HOST", md.host)
        for var in ("NBBURST_PROJECT", "NBBURST_ZONE", "NBBURST_IMAGE_FAMILY", "GOOGLE_CLOUD_PROJECT"):
            monkeypatch.delenv(var, raising=False)
        gce._workbench.cache_clear()
        try:
            machines = Burst().machines("gce")
            plan = machines.plan(Burst().options(backend="gce", cores=2).resources)
            assert machines.project == "nbburst-test" and plan.zone == "us-central1-b"
            # not the Workbench instance's own image (private to Google: no VM boots from it), the default one
            assert plan.image == "projects/debian-cloud/global/images/debian-12-bookworm-v20240110"
            assert "the default stock image" in plan.reason
            assert machines.context.service_account() == "wb@nbburst-test.iam.gserviceaccount.com"
        finally:
            gce._workbench.cache_clear()
