"""The first ``%%burst --backend gce`` works from a stock image, with no baking (against the emulators).

A stock image's instance has a ``python3`` with nothing but the standard library (of another minor version
than the notebook's, on ubuntu-2404), no uv and no google-cloud-storage: the bootstrap fetches uv from the
package index (a local one here), asks it for the notebook's Python, installs the notebook's versions of
the packages, and the agent stores the environment in the bucket; the next VM unpacks it and installs
nothing. What a VM cannot install (a conda-only package) refuses the cell before launch when it needs it.
"""

from __future__ import annotations

import json
import sys
import time
from importlib import metadata

import joblib  # noqa: F401  (loaded in the kernel before the first run, as in most notebooks: both runs
import numpy  # noqa: F401  need the same environment)
import pytest
from google.cloud import compute_v1
from support import LARGE_QUOTAS
from support.gce import PROJECT, ZONE, instance

from nbburst.client.burst import Burst
from nbburst.client.capture import capture
from nbburst.errors import UsageError
from nbburst.machines.base import machine_name
from nbburst.protocol import dist, env, envcache
from nbburst.protocol.job import State
from nbburst.testing.compute.resources import ComputeError

UBUNTU_2404 = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"
CELL = """\
import sys
import joblib
import mylocal
python = "%d.%d" % sys.version_info[:2]
prefix = sys.prefix
versions = (joblib.__version__, mylocal.VALUE)
"""


@pytest.fixture
def stock_env(gce_env, compute_emulator, package_index, monkeypatch, tmp_path):
    """No image configured (the default stock image), VMs reaching the local package index, and a notebook
    folder holding a local package ``mylocal`` (not installed: it sits next to the notebook)."""
    monkeypatch.delenv("NBBURST_IMAGE_FAMILY", raising=False)
    monkeypatch.delenv("NBBURST_IMAGE_PROJECT", raising=False)
    compute_emulator.instance_env.update(package_index.env())
    notebook = tmp_path / "notebook"
    (notebook / "mylocal").mkdir(parents=True)
    (notebook / "mylocal" / "__init__.py").write_text("VALUE = 'local 1'\n")
    monkeypatch.chdir(notebook)
    monkeypatch.syspath_prepend(str(notebook))
    return gce_env


def run_cell(burst, emu, code, **options):
    """Run ``code`` on a VM until the VM is gone; (job, the cell's variables, the VM's whole serial console)."""
    job = burst.submit_cell(code, capture(code, {}), burst.options(backend="gce", cores=2, **options))
    name, console, deadline = machine_name(job.id), "", time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            console = emu.serial_output(name)
        except ComputeError:
            break  # deleted by its agent, after storing the environment
        time.sleep(0.2)
    assert job.wait(timeout=60) == State.SUCCEEDED, job.terminal().reason + "\n" + console[-5000:]
    return job, job.outcome({}).values, console


@pytest.mark.compute_emulator(operation_delay=0.02)
@pytest.mark.timeout(2 * 360)  # two VMs, each given run_cell's deadline: a loaded machine installs slowly
def test_first_run_from_a_stock_image_then_the_stored_environment(stock_env, compute_emulator):
    burst = Burst()
    first, values, console = run_cell(burst, compute_emulator, CELL, image=UBUNTU_2404)
    # the image's python3 is 3.12: uv is fetched, asked for the notebook's Python, and installs the packages
    assert "this image's Python is 3.12; asking uv for Python 3.11" in console
    assert "uv 0.13" in console or "fetched from http://127.0.0.1" in console
    assert "installing " in console and "packages with uv" in console
    assert "local packages installed: nbburst-local-mylocal" in console
    assert values["python"] == "3.11" and values["prefix"].endswith("/nbburst/venv")
    assert values["versions"] == (metadata.version("joblib"), "local 1")
    assert "installing" not in first.logs()  # the agent found everything at the notebook's versions

    store = burst.store_for("gce")
    manifest = json.loads(store.get(first.layout.dist_manifest))
    env_hash = manifest["env"]["hash"]
    assert manifest["env"]["base"] is None and manifest["env"]["store"]
    assert manifest["env"]["platform"] == "linux-x86_64/ubuntu-os-cloud/ubuntu-2404-noble-amd64"
    assert store.exists(envcache.archive_key(env_hash)), console[-3000:]
    record = json.loads(store.get(envcache.record_key(env_hash)))
    assert record["job"] == first.id and dist.verify_manifest(burst.keyring.get(first.id), record)
    assert record["packages"]["joblib"] == metadata.version("joblib") and "nbburst" not in record["packages"]
    assert "google-cloud-storage" in record["packages"]  # what the agent needs, on a clean venv

    second, values, console = run_cell(burst, compute_emulator, CELL, image=UBUNTU_2404)
    assert f"environment {envcache.archive_key(env_hash)} unpacked" in console
    assert "nothing to install" in console and "packages with uv" not in console, console[-4000:]
    assert values["python"] == "3.11" and values["versions"] == (metadata.version("joblib"), "local 1")
    manifest = json.loads(store.get(second.layout.dist_manifest))
    assert manifest["env"]["base"]["hash"] == env_hash and manifest["env"]["base"]["complete"]
    assert not manifest["env"]["store"]


@pytest.mark.compute_emulator(operation_delay=0.02, quotas=LARGE_QUOTAS)  # a 64-vCPU plan: more than a new project
def test_with_nothing_configured_a_job_boots_debian_12(stock_env, compute_emulator):
    burst = Burst()
    plan = burst.machines("gce").plan(burst.options(backend="gce", cores=64).resources)
    assert plan.image == "projects/debian-cloud/global/images/debian-12-bookworm-v20240110"
    assert "the default stock image" in plan.reason
    job = burst.submit(sum, [1, 2, 3], options=burst.options(backend="gce", cores=2))
    console = ""
    while not job.state.terminal:  # the VM's serial output, read while it exists (it deletes itself at the end)
        console = job.console() or console
        time.sleep(0.2)
    assert job.result(timeout=240) == 6, console[-3000:]
    assert "asking uv" not in console  # debian-12's python3 is the notebook's 3.11: no other Python needed
    assert "packages with uv" in console


def test_a_cell_that_needs_a_conda_only_package_is_refused_before_launch(stock_env, compute_emulator, tmp_path):
    site = tmp_path / "conda-site"
    (site / "conda").mkdir(parents=True)
    (site / "conda" / "__init__.py").write_text("__version__ = '24.1.2'\n")
    info = site / "conda-24.1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: conda\nVersion: 24.1.2\n")
    (info / "INSTALLER").write_text("conda\n")
    (info / "top_level.txt").write_text("conda\n")
    (info / "RECORD").write_text("conda/__init__.py,,\nconda-24.1.2.dist-info/METADATA,,\n")
    sys.path.insert(0, str(site))
    try:
        import conda  # noqa: F401  (the kernel has it loaded: listed, but a cell that does not import it runs)

        burst = Burst()
        machines = burst.machines("gce")
        machines.check_environment("x = 1", [])
        assert [u.name for u in machines.environment("x = 1", []).unavailable] == ["conda"]
        with pytest.raises(UsageError) as refused:
            burst.submit_cell("import conda\nx = 1", capture("import conda\nx = 1", {}), burst.options(backend="gce"))
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("conda", None)
    message = str(refused.value)
    assert "the cell needs conda==24.1.2 (a conda package: no package index has it)" in message
    assert "pip install NAME" in message and "nbburst image build --requirements FILE" in message
    assert compute_emulator.instances() == [] and burst.jobs(store=burst.store_for("gce")) == []


def test_resolution_rules():
    def installed(origin="index", url=""):
        return env.Installed("x", "1", (), origin, url, "pip")

    torch = env.resolve("torch", "2.3.1+cu121")
    assert (torch.version, torch.requirement) == ("2.3.1+cu121", "torch==2.3.1+cu121")
    assert torch.index == "https://download.pytorch.org/whl/cu121"
    assert env.resolve("torchvision", "0.18.1+cpu").index == "https://download.pytorch.org/whl/cpu"
    dropped = env.resolve("mylib", "1.2+local.3")
    assert (dropped.version, dropped.requirement, dropped.index) == ("1.2", "mylib==1.2", None) and dropped.note
    assert env.resolve("numpy", "1.26.4") == env.Pin("numpy", "1.26.4", "numpy==1.26.4")
    assert isinstance(env.resolve("google-colab", "1.0.0"), env.Unavailable)
    assert isinstance(env.resolve("conda", "24.1.2", installed()), env.Unavailable)
    assert env.resolve("mine", "0.1", installed("editable", "file:///src/mine")) == env.Local("mine", "0.1", "editable")
    assert env.resolve("mine", "0.1", installed("file", "file:///tmp/mine.whl")).origin == "file"
    vcs = env.resolve("lib", "2.0", installed("vcs", "git+https://example.org/lib.git@abc123"))
    assert vcs.requirement == "lib @ git+https://example.org/lib.git@abc123"
    groups = env.install_groups([env.resolve("torch", "2.3.1+cu121"), env.resolve("numpy", "1.26.4")])
    assert [g["index"] for g in groups] == [None, "https://download.pytorch.org/whl/cu121"]
    assert env.environment_hash("3.11", "p", groups) != env.environment_hash("3.12", "p", groups)


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_a_stock_image_has_no_packages_and_its_own_python(compute_emulator):
    """What makes a bootstrap that imports google-cloud-storage too early fail here as on a real stock image."""
    probe = "python3 --version; python3 -c 'import google.cloud.storage' 2>&1 | tail -1; command -v uv || echo no uv"
    resource = instance("stock-probe", startup=probe + "; poweroff")
    resource.disks[0].initialize_params.source_image = UBUNTU_2404
    vms = compute_emulator.client(compute_v1.InstancesClient)
    ops = compute_emulator.client(compute_v1.ZoneOperationsClient)
    ops.wait(
        project=PROJECT, zone=ZONE, operation=vms.insert(project=PROJECT, zone=ZONE, instance_resource=resource).name
    )
    assert compute_emulator.wait_for_status("stock-probe", "TERMINATED", timeout=30) == "TERMINATED"
    console = compute_emulator.serial_output("stock-probe")
    assert "Python 3.12.0" in console
    assert "ModuleNotFoundError: No module named 'google'" in console
    assert "no uv" in console


def test_an_editable_package_travels_as_a_wheel_of_its_source(tmp_path, monkeypatch):
    source = tmp_path / "src" / "mylib"
    source.mkdir(parents=True)
    (source / "__init__.py").write_text("VALUE = 'edited'\n")
    (source / "data.txt").write_text("kept\n")
    site = tmp_path / "site"
    info = site / "mylib-0.3.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mylib\nVersion: 0.3\n")
    (info / "direct_url.json").write_text(json.dumps({"url": f"file://{tmp_path}/src", "dir_info": {"editable": True}}))
    (info / "RECORD").write_text("mylib-0.3.dist-info/METADATA,,\n_mylib.pth,,\n")
    (site / "_mylib.pth").write_text(str(tmp_path / "src") + "\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    item = env.resolve("mylib", "0.3", env.distributions()["mylib"])
    assert item == env.Local("mylib", "0.3", "editable")
    name, data = dist.local_wheel(item)
    import io
    import zipfile

    files = zipfile.ZipFile(io.BytesIO(data))
    assert name == "mylib-0.3-py3-none-any.whl"
    assert files.read("mylib/__init__.py") == b"VALUE = 'edited'\n" and files.read("mylib/data.txt") == b"kept\n"
    assert b"Version: 0.3" in files.read("mylib-0.3.dist-info/METADATA")


def test_a_conda_environment_maps_to_the_package_index(tmp_path, monkeypatch):
    """Workbench's /opt/conda and conda-forge: conda records the build machine's folder as where a package came
    from; that is a release of the project (installed from the index on the VM), not a local package."""
    site = tmp_path / "opt-conda-site"
    for name, installer, url in (
        ("condapkg", "conda", "file:///home/conda/feedstock_root/build_artifacts/condapkg_1700000000/work"),
        ("condadev", "pip", f"file://{tmp_path}/src"),  # `pip install -e` inside the conda environment
    ):
        info = site / f"{name}-1.5.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.5\n")
        (info / "INSTALLER").write_text(installer + "\n")
        (info / "direct_url.json").write_text(json.dumps({"url": url, "dir_info": {"editable": installer == "pip"}}))
        (info / "RECORD").write_text(f"{name}-1.5.dist-info/METADATA,,\n")
    monkeypatch.syspath_prepend(str(site))
    found = env.distributions()
    assert found["condapkg"].origin == "folder" and found["condapkg"].installer == "conda"
    assert env.resolve("condapkg", "1.5", found["condapkg"]) == env.Pin("condapkg", "1.5", "condapkg==1.5")
    assert env.resolve("condadev", "1.5", found["condadev"]) == env.Local("condadev", "1.5", "editable")
    assert isinstance(env.resolve("conda", "24.1.2", found["condapkg"]), env.Unavailable)  # conda itself: never


def test_the_stored_environment_to_start_from(tmp_path):
    from nbburst.store import open_store

    store = open_store(str(tmp_path / "store"))
    keys = {"b20260101-000000-aaaaaa": b"a" * 32, "b20260101-000000-bbbbbb": b"b" * 32}

    def stored(job, env_hash, packages, size=100, key=None):
        pending = {"hash": env_hash, "python": "3.11", "platform": "p"}
        record = envcache.record(key or keys[job], job, pending, packages, "0" * 64, size)
        store.put(envcache.record_key(env_hash), json.dumps(record).encode())

    stored("b20260101-000000-aaaaaa", "small", {"numpy": "2.0", "tblib": "3.0"}, size=50)
    stored("b20260101-000000-aaaaaa", "other", {"numpy": "1.26", "tblib": "3.0", "pandas": "2.2"})  # numpy differs
    stored("b20260101-000000-bbbbbb", "forged", {"numpy": "2.0", "tblib": "3.0", "pandas": "2.2"}, key=b"x" * 32)
    wanted = {"numpy": "2.0", "tblib": "3.0", "pandas": "2.2"}
    base = envcache.choose(store, "wanted", "3.11", "p", wanted, keys.get)
    assert base["hash"] == "small" and not base["complete"]  # 2 of 3 at the wanted versions; the forged one ignored
    stored("b20260101-000000-bbbbbb", "bigger", {**wanted, "scipy": "1.14"}, size=200)
    base = envcache.choose(store, "wanted", "3.11", "p", wanted, keys.get)
    assert base["hash"] == "bigger" and base["complete"] and base["archive"] == "envs/bigger.tar.gz"
    assert envcache.choose(store, "wanted", "3.12", "p", wanted, keys.get) is None  # another Python
    assert envcache.choose(store, "wanted", "3.11", "p", wanted, lambda job: None) is None  # keys of nobody here
