"""pytest fixtures for the emulators. Enable with, in conftest.py:

    pytest_plugins = ["nbburst.testing.pytest_plugin"]

- ``compute_emulator``: a fresh ComputeEmulator per test (disks under tmp_path, short graces);
  stopped at teardown, which fails the test if any instance process survived. Options go in a
  marker: ``@pytest.mark.compute_emulator(preemption_grace=1, zone="europe-west4-a")``; quotas are a new
  project's unless the marker says ``quotas={"CPUS": 96, "CPUS_ALL_REGIONS": 96}``.
- ``gcs_emulator``: one GCSEmulator for the session; ``gcs_bucket``: a fresh bucket per test.
- ``secretmanager_emulator``: a Secret Manager stand-in per test (:mod:`nbburst.testing.secretmanager`), which
  the compute emulator's instances reach as well.
- ``emulator_env``: the three emulators plus the NBBURST_* variables pointing nbburst at them,
  set in os.environ for the test; returns the dict. The Store's watcher VM (machines/gce/watcher.py) is off
  (``NBBURST_WATCHER=false``), so that a test's jobs boot only their own VMs. The bucket's policy lets the
  project's default compute service account (what VMs run as) use it, as ``nbburst setup`` does.

``pytest --compute-conformance`` also checks, at the teardown of every ``compute_emulator``, each
request Google's client libraries sent it against Compute Engine's discovery document
(:mod:`nbburst.testing.discovery`, needs google-api-python-client); a test whose requests the real
API would refuse fails.
"""

from __future__ import annotations

import time
import uuid

import pytest

from nbburst.testing.compute.emulator import ComputeEmulator

TEST_DEFAULTS = {"preemption_grace": 2.0, "stop_grace": 5.0, "operation_delay": 0.05, "maintenance_notice": 1.0}


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--compute-conformance",
        action="store_true",
        help="check every request sent to a compute_emulator against Compute Engine's discovery document",
    )


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "compute_emulator(**kwargs): options of the compute_emulator fixture")


@pytest.fixture
def compute_emulator(request, tmp_path):
    marker = request.node.get_closest_marker("compute_emulator")
    options = {**TEST_DEFAULTS, **(marker.kwargs if marker else {})}
    emulator = ComputeEmulator(tmp_path / "compute", **options).start()
    try:
        yield emulator
    finally:
        emulator.stop()
        deadline = time.monotonic() + 2
        leftovers = emulator.live_processes()
        while leftovers and time.monotonic() < deadline:
            time.sleep(0.05)
            leftovers = emulator.live_processes()
        if leftovers:
            pytest.fail(f"compute emulator left instance processes running: {leftovers}")
        if request.config.getoption("compute_conformance"):
            from nbburst.testing.discovery import conformance_problems

            problems = conformance_problems(emulator.request_log, google_clients=True)
            if problems:
                pytest.fail("requests Compute Engine's discovery document does not allow:\n" + "\n".join(problems))


@pytest.fixture(scope="session")
def gcs_emulator():
    from nbburst.testing.gcs import GCSEmulator

    emulator = GCSEmulator().start()
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def gcs_bucket(gcs_emulator) -> str:
    name = f"nbburst-test-{uuid.uuid4().hex[:12]}"
    gcs_emulator.create_bucket(name)
    return name


@pytest.fixture
def secretmanager_emulator(compute_emulator):
    """A Secret Manager of the compute emulator's project, per test; its VMs reach it too."""
    from nbburst.testing.secretmanager import SecretManagerEmulator

    emulator = SecretManagerEmulator(compute_emulator.project).start()
    compute_emulator.instance_env.update(emulator.env())
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def emulator_env(monkeypatch, compute_emulator, gcs_emulator, gcs_bucket, secretmanager_emulator) -> dict[str, str]:
    env = {
        **gcs_emulator.env(),
        **compute_emulator.env(),
        **secretmanager_emulator.env(),
        "NBBURST_ROOT": f"gs://{gcs_bucket}/nbburst",
        "NBBURST_BACKEND": "gce",
        "GOOGLE_CLOUD_PROJECT": compute_emulator.project,
        "NBBURST_WATCHER": "false",  # no watcher VM per test: a test of the watcher turns it on
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if gcs_emulator.iam is not None:
        member = f"serviceAccount:{compute_emulator.default_service_account}"
        gcs_emulator.iam.grant(gcs_bucket, member, "roles/storage.objectUser")
    return env
