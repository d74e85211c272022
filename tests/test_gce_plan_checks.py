"""Quota, permissions and GPUs, checked before money is spent: every quota a VM counts against refuses the plan
with its own metric and where to raise it, access to the bucket is checked for the caller, the VMs' scopes and
their service account (``nbburst doctor`` and before the first launch), ``nbburst setup`` makes the bucket as it
should be, and a GPU job runs only where the NVIDIA driver answers. Against the Compute Engine and GCS
emulators, with the real client libraries."""

from __future__ import annotations

import uuid
from collections import namedtuple

import pytest
from google.cloud import compute_v1
from support import LARGE_QUOTAS
from support.gce import PROJECT, ZONE, Compute, instance

from nbburst.client.burst import Burst
from nbburst.errors import UsageError
from nbburst.machines.base import machine_name
from nbburst.machines.gce import quota as gce_quota
from nbburst.machines.gce.types import MachineType, gpu_quota_metric
from nbburst.protocol.job import Resources, State
from nbburst.testing.compute import catalog as cat

Q = namedtuple("Q", "metric limit usage")
DLVM_FAMILY = f"projects/{cat.GPU_IMAGE_PROJECT}/global/images/family/{cat.GPU_IMAGE_FAMILY}"
DEBIAN_FAMILY = "projects/debian-cloud/global/images/family/debian-12"
NO_DRIVER_IMAGE = f"projects/{cat.DEFAULT_IMAGE_PROJECT}/global/images/family/{cat.DEFAULT_IMAGE_FAMILY}"


def submit(burst, fn=abs, args=(-7,), **options):
    return burst.submit(fn, *args, options=burst.options(backend="gce", **options))


def inserts(emu) -> list[dict]:
    return [r for r in emu.request_log if r["method"] == "POST" and r["path"].endswith("/instances")]


def storage_client():
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project=PROJECT, credentials=AnonymousCredentials())


@pytest.fixture
def iam(gcs_emulator):
    if gcs_emulator.iam is None:
        pytest.skip("bucket IAM needs fake-gcs-server (the fallback emulator has none)")
    return gcs_emulator.iam


# -- quotas: which metric, before anything is launched ------------------------------------------------------

REFUSED = [
    # (quotas, options, the metric that refuses, a phrase of the message)
    ({"CPUS": 4}, {"cores": 8}, "CPUS", "spot VMs use the CPUS quota when the region has no PREEMPTIBLE_CPUS"),
    ({"PREEMPTIBLE_CPUS": 4}, {"cores": 8}, "PREEMPTIBLE_CPUS", "or --on-demand (standard quota)"),
    ({"CPUS": 4}, {"cores": 8, "on_demand": True}, "CPUS", "this standard VM in us-central1"),
    ({"N2_CPUS": 4}, {"machine_type": "n2-standard-8"}, "N2_CPUS", "it needs 8 N2_CPUS"),
    (
        {"CPUS": 96, "N2_CPUS": 96, "C2D_CPUS": 96},
        {"cores": 48},
        "CPUS_ALL_REGIONS",
        "in all regions of project nbburst-test: it needs",
    ),
    ({}, {"gpu": "t4"}, "GPUS_ALL_REGIONS", "no GPU at all until GPUS_ALL_REGIONS is raised"),
    ({"GPUS_ALL_REGIONS": 8}, {"gpu": "t4:2"}, "PREEMPTIBLE_NVIDIA_T4_GPUS", "it needs 2 PREEMPTIBLE_NVIDIA_T4_GPUS"),
    ({"GPUS_ALL_REGIONS": 8}, {"gpu": "t4:2", "on_demand": True}, "NVIDIA_T4_GPUS", "only 1 of 1 are free"),
    ({"GPUS_ALL_REGIONS": 8}, {"gpu": "nvidia-l4:2"}, "PREEMPTIBLE_NVIDIA_L4_GPUS", "Ask for fewer GPUs"),
    ({"GPUS_ALL_REGIONS": 8}, {"gpu": "a100"}, "A2_CPUS", "it needs 12 A2_CPUS"),
    ({"GPUS_ALL_REGIONS": 8, "A2_CPUS": 12}, {"gpu": "a100"}, "NVIDIA_A100_GPUS", "it needs 1 NVIDIA_A100_GPUS"),
]


@pytest.mark.parametrize(("quotas", "options", "metric", "phrase"), REFUSED, ids=[r[2] for r in REFUSED])
def test_each_quota_refuses_before_launch_with_its_metric(gce_env, compute_emulator, quotas, options, metric, phrase):
    for name, limit in quotas.items():
        compute_emulator.set_quota(name, limit)
    burst = Burst()
    with pytest.raises(UsageError) as err:
        submit(burst, **options)
    message = str(err.value)
    assert f" {metric}" in message and phrase in message, message
    assert f"iam-admin/quotas?project={PROJECT}&metric={metric}" in message
    assert inserts(compute_emulator) == [] and compute_emulator.instances() == []  # nothing launched
    assert burst.jobs(store=burst.store_for("gce")) == []  # nothing written

    for name, limit in {**LARGE_QUOTAS, **dict.fromkeys(quotas, 128)}.items():  # with room, the same request plans
        compute_emulator.set_quota(name, limit)
    plan = burst.machines("gce").plan(burst.options(backend="gce", **options).resources)
    assert plan.machine_type and inserts(compute_emulator) == []


def test_a_new_projects_quotas_in_the_emulator_and_per_test_ones(compute_emulator):
    regions = compute_emulator.client(compute_v1.RegionsClient)
    regional = {q.metric: q.limit for q in regions.get(project=PROJECT, region="us-central1").quotas}
    assert (regional["CPUS"], regional["PREEMPTIBLE_CPUS"]) == (24, 0)  # 0: not set, spot uses CPUS
    project = compute_emulator.client(compute_v1.ProjectsClient).get(project=PROJECT)
    assert {q.metric: q.limit for q in project.quotas} == {"CPUS_ALL_REGIONS": 32, "GPUS_ALL_REGIONS": 0}
    assert project.default_service_account == compute_emulator.default_service_account


@pytest.mark.compute_emulator(quotas={"CPUS": 200, "GPUS_ALL_REGIONS": 4})
def test_quotas_of_a_test_apply_in_every_region(compute_emulator):
    regions = compute_emulator.client(compute_v1.RegionsClient)
    for region in ("us-central1", "europe-west4"):
        regional = {q.metric: q.limit for q in regions.get(project=PROJECT, region=region).quotas}
        assert regional["CPUS"] == 200 and regional["N2_CPUS"] == 24
    project = compute_emulator.client(compute_v1.ProjectsClient).get(project=PROJECT)
    assert {q.metric: q.limit for q in project.quotas}["GPUS_ALL_REGIONS"] == 4


@pytest.mark.parametrize("gpu", sorted(cat.ACCELERATORS))
def test_every_offered_gpu_plans_against_the_quota_compute_engine_counts(gce_env, compute_emulator, gpu):
    """nbburst's name for each GPU's quota is the one the emulator (Compute Engine's catalog) charges."""
    metric = cat.ACCELERATORS[gpu].quota
    assert gpu_quota_metric(gpu) == metric
    quotas = {**LARGE_QUOTAS, metric: 0, "PREEMPTIBLE_" + metric: 0}
    for name, limit in quotas.items():
        compute_emulator.set_quota(name, limit)
    machines = Burst().machines("gce")
    with pytest.raises(UsageError, match=f"it needs 1 {metric} but only 0 of 0 are free"):
        machines.plan(Resources(gpu=gpu, on_demand=True))
    with pytest.raises(UsageError, match=f"it needs 1 {metric} "):  # no preemptible quota set: spot uses it too
        machines.plan(Resources(gpu=gpu))


def test_shortfall_rules_without_a_cloud():
    n1 = MachineType("n1-standard-4", 4, 15360)
    a3 = MachineType("a3-highgpu-1g", 26, 239616, gpu="nvidia-h100-80gb", gpu_count=1)
    region = [Q("CPUS", 24, 0), Q("PREEMPTIBLE_CPUS", 0, 0), Q("NVIDIA_T4_GPUS", 4, 0)]
    project = [Q("CPUS_ALL_REGIONS", 32, 30), Q("GPUS_ALL_REGIONS", 4, 0)]

    def short(machine, gpu, count, spot, regional=region, wide=project):
        return gce_quota.shortfall(regional, wide, "us-central1", gce_quota.Need(machine, gpu, count, spot))

    found = short(n1, "nvidia-tesla-t4", 1, True)
    assert (found.metric, found.where, found.need, found.free) == ("CPUS_ALL_REGIONS", "all regions", 4, 2)
    assert short(n1, None, 0, True, wide=[Q("CPUS_ALL_REGIONS", 32, 0)]) is None
    missing = short(n1, "nvidia-tesla-v100", 1, True)  # no V100 quota listed in the region: none granted
    assert (missing.metric, missing.limit) == ("NVIDIA_V100_GPUS", None)
    assert "has no NVIDIA_V100_GPUS quota in us-central1" in missing.message(PROJECT, "LINK")
    # on-demand H100s count against a quota regions.get does not list: left to the insert, and so are spot ones
    # while the region sets no preemptible H100 quota (0); once it does, that one counts
    wide = [Q("CPUS_ALL_REGIONS", 64, 0), Q("GPUS_ALL_REGIONS", 4, 0)]
    regional = [Q("CPUS", 64, 0), Q("PREEMPTIBLE_CPUS", 0, 0)]
    assert short(a3, "nvidia-h100-80gb", 1, False, regional, wide) is None
    assert short(a3, "nvidia-h100-80gb", 1, True, [*regional, Q("PREEMPTIBLE_NVIDIA_H100_GPUS", 0, 0)], wide) is None
    assert short(a3, "nvidia-h100-80gb", 1, True, regional, [Q("GPUS_ALL_REGIONS", 0, 0)]).metric == "GPUS_ALL_REGIONS"
    spot_set = [*regional, Q("PREEMPTIBLE_NVIDIA_H100_GPUS", 8, 8)]
    assert short(a3, "nvidia-h100-80gb", 1, True, spot_set, wide).metric == "PREEMPTIBLE_NVIDIA_H100_GPUS"


# -- permissions: doctor and the first launch ---------------------------------------------------------------


def test_caller_without_object_permissions_is_refused_by_doctor_and_before_launch(
    gce_env, compute_emulator, iam, monkeypatch, capsys
):
    from nbburst.ui.cli import main

    monkeypatch.setitem(iam.project_roles, iam.caller, {"roles/storage.objectViewer"})
    assert main(["doctor"]) == 4
    out = " ".join(capsys.readouterr().out.split())
    assert "bucket access: these credentials lack storage.objects.create, storage.objects.delete on gs://" in out
    assert "fix: ask the bucket's owner for roles/storage.objectUser" in out
    assert "vm service account: not checked: the IAM policy of gs://" in out  # no getIamPolicy either

    burst = Burst()
    with pytest.raises(UsageError, match="these credentials lack storage.objects.create, storage.objects.delete"):
        submit(burst, cores=2)
    assert inserts(compute_emulator) == [] and burst.jobs(store=burst.store_for("gce")) == []

    monkeypatch.setitem(iam.project_roles, iam.caller, {"roles/storage.objectUser"})  # enough for jobs
    assert Burst().machines("gce").plan(Resources(cores=2)).machine_type


def test_vm_scopes_without_cloud_storage_are_refused_and_without_compute_warned(
    gce_env, compute_emulator, monkeypatch, caplog
):
    monkeypatch.setenv("NBBURST_SCOPES", "https://www.googleapis.com/auth/compute")
    with pytest.raises(UsageError, match=r"the VMs' scopes \(compute\) give no access to Cloud Storage"):
        submit(Burst(), cores=2)
    assert inserts(compute_emulator) == []

    monkeypatch.setenv("NBBURST_SCOPES", "https://www.googleapis.com/auth/devstorage.read_write")
    with caplog.at_level("WARNING", logger="nbburst.gce"):
        plan = Burst().machines("gce").plan(Resources(cores=2))
    assert plan.machine_type
    assert "vm scopes: the VMs' scopes (devstorage.read_write) have no Compute Engine scope" in caplog.text


def test_vm_service_account_not_granted_on_the_bucket_is_a_warning(
    gce_env, compute_emulator, gcs_emulator, iam, monkeypatch, capsys, caplog
):
    from nbburst.ui.cli import main

    bucket = f"nbburst-plain-{uuid.uuid4().hex[:10]}"
    gcs_emulator.create_bucket(bucket)  # Cloud Storage's default policy: the project's editors and owners
    monkeypatch.setenv("NBBURST_ROOT", f"gs://{bucket}/nbburst")
    account = compute_emulator.default_service_account
    assert main(["doctor"]) == 0  # a warning: the account may hold roles on the project nbburst cannot see
    out = " ".join(capsys.readouterr().out.split())
    assert f"! vm service account: the IAM policy of gs://{bucket} does not grant {account}" in out
    assert f"gcloud storage buckets add-iam-policy-binding gs://{bucket} --member=serviceAccount:{account}" in out

    with caplog.at_level("WARNING", logger="nbburst.gce"):
        assert Burst().machines("gce").plan(Resources(cores=2)).machine_type  # planned, with the warning
    assert f"vm service account: the IAM policy of gs://{bucket} does not grant" in caplog.text

    iam.grant(bucket, f"serviceAccount:{account}", "roles/storage.objectViewer")  # reads, but cannot write back
    main(["doctor"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"does not grant {account} storage.objects.create, storage.objects.delete" in out
    iam.grant(bucket, f"serviceAccount:{account}", "roles/storage.legacyBucketWriter")
    main(["doctor"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"✔ vm service account: {account} may read and write gs://{bucket}" in out


# -- nbburst setup --------------------------------------------------------------------------------------------


def test_setup_creates_the_missing_bucket_with_its_settings_and_grants_the_vms(
    gce_env, compute_emulator, iam, monkeypatch, capsys
):
    from nbburst.ui.cli import main

    name = f"nbburst-setup-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("NBBURST_ROOT", f"gs://{name}/team")
    client = storage_client()
    assert not client.bucket(name).exists()
    assert main(["setup", "--blob-days", "14"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"created gs://{name} in us-central1" in out
    assert "✔ bucket access" in out and "✔ vm scopes" in out and "✔ vm service account" in out

    bucket = client.get_bucket(name)
    assert bucket.location == "US-CENTRAL1"
    assert bucket.iam_configuration.uniform_bucket_level_access_enabled
    assert bucket.iam_configuration.public_access_prevention == "enforced"
    assert list(bucket.lifecycle_rules) == [
        {"action": {"type": "Delete"}, "condition": {"age": 14, "matchesPrefix": ["team/blobs/"]}}
    ]
    member = f"serviceAccount:{compute_emulator.default_service_account}"
    bindings = bucket.get_iam_policy(requested_policy_version=3).bindings
    assert {"role": "roles/storage.objectUser", "members": {member}} in bindings

    assert main(["setup"]) == 0  # again: nothing to do
    out = " ".join(capsys.readouterr().out.split())
    assert f"bucket: gs://{name} exists; left as it is" in out and "created" not in out and "granted" not in out
    assert bucket.get_iam_policy(requested_policy_version=3).bindings == bindings
    assert main(["doctor"]) == 0
    assert "public access prevention: enforced" in capsys.readouterr().out


def test_setup_leaves_an_existing_bucket_as_it_is_and_says_what_it_lacks(gce_env, iam, capsys):
    from nbburst.ui.cli import main

    name = gce_env["NBBURST_ROOT"][len("gs://") :].split("/")[0]
    before = storage_client().get_bucket(name)
    assert main(["setup", "--no-grant"]) == 0  # warnings only
    out = " ".join(capsys.readouterr().out.split())
    assert f"uniform bucket-level access: off on gs://{name}" in out
    assert f"fix: gcloud storage buckets update gs://{name} --uniform-bucket-level-access" in out
    assert f"public access prevention: inherited on gs://{name}" in out
    assert f"lifecycle: no rule deletes old values under gs://{name}/nbburst/blobs/" in out
    after = storage_client().get_bucket(name)
    assert after.iam_configuration == before.iam_configuration and list(after.lifecycle_rules) == []


def test_setup_needs_a_region_with_zone_auto(gce_env, monkeypatch, capsys):
    from nbburst.ui.cli import main

    monkeypatch.setenv("NBBURST_ROOT", f"gs://nbburst-setup-{uuid.uuid4().hex[:10]}/nbburst")
    monkeypatch.setenv("NBBURST_ZONE", "auto")
    assert main(["setup"]) == 2
    assert "say where the bucket goes: --location REGION" in capsys.readouterr().err


# -- GPUs: an image with a driver, and the VM checks it ------------------------------------------------------


def test_instances_have_nvidia_smi_only_with_gpus_and_a_driver_image(compute_emulator):
    compute_emulator.set_quota("GPUS_ALL_REGIONS", 4)
    compute_emulator.set_quota("NVIDIA_T4_GPUS", 4)
    gce = Compute(compute_emulator)
    t4 = compute_v1.AcceleratorConfig(accelerator_type=f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4")
    t4.accelerator_count = 2
    probe = "if command -v nvidia-smi >/dev/null; then nvidia-smi -L; else echo 'no nvidia-smi'; fi"
    cases = {"vm-dl-gpu": (DLVM_FAMILY, [t4]), "vm-deb-gpu": (DEBIAN_FAMILY, [t4]), "vm-dl-cpu": (DLVM_FAMILY, [])}
    for name, (image, accelerators) in cases.items():
        vm = instance(name, startup=probe, machine="n1-standard-4", spot=False, accelerators=accelerators)
        vm.disks[0].initialize_params.source_image = image
        vm.disks[0].initialize_params.disk_size_gb = 50
        gce.create(vm)
    from support import wait_until

    for name in cases:
        wait_until(lambda n=name: "exit status" in compute_emulator.serial_output(n), what=f"{name}'s script")
    listed = compute_emulator.serial_output("vm-dl-gpu")
    assert "GPU 0: NVIDIA T4" in listed and "GPU 1: NVIDIA T4" in listed
    assert "no nvidia-smi" in compute_emulator.serial_output("vm-deb-gpu")
    assert "no nvidia-smi" in compute_emulator.serial_output("vm-dl-cpu")


def _gpus_seen() -> str:
    import subprocess

    return subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout


@pytest.mark.compute_emulator(operation_delay=0.02, quotas={"GPUS_ALL_REGIONS": 1})
def test_gpu_job_on_a_deep_learning_vm_image_runs(gce_env, compute_emulator):
    burst = Burst()
    job = submit(burst, _gpus_seen, (), gpu="t4")
    assert "c.NBBurst.gpu_image_family (--gpu)" in job.spec.plan["reason"]
    assert job.result(timeout=120).startswith("GPU 0: NVIDIA T4")
    (insert,) = inserts(compute_emulator)
    body = insert["body"]
    assert body["disks"][0]["initializeParams"]["sourceImage"].endswith(f"/images/{cat.GPU_IMAGE_FAMILY}-v20261001")
    assert body["guestAccelerators"][0]["acceleratorType"].endswith("/acceleratorTypes/nvidia-tesla-t4")
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"


@pytest.mark.compute_emulator(operation_delay=0.02, quotas={"GPUS_ALL_REGIONS": 1})
def test_gpu_job_on_an_image_without_a_driver_fails_with_the_reason(gce_env, compute_emulator):
    burst = Burst()
    job = submit(burst, _gpus_seen, (), gpu="t4", image=NO_DRIVER_IMAGE)
    assert job.wait(timeout=120, supervise=False) == State.FAILED
    reason = job.terminal().reason
    assert "the job asked for 1 nvidia-tesla-t4 GPU but this machine has no NVIDIA driver (no nvidia-smi" in reason
    assert "refusing to run" in job.logs()
    assert compute_emulator.wait_for_status(machine_name(job.id), "DELETED", timeout=30) == "DELETED"
