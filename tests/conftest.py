import pytest
from support import kill_agents

from nbburst.client.supervision.laptop import stop_all
from nbburst.config import load

pytest_plugins = ["nbburst.testing.pytest_plugin"]


#: The tests that run longest on a 2-core machine, longest first (from CI's --durations). They start before the
#: rest so that under ``pytest -n 3 --dist worksteal`` (scripts/test) none is left running alone at the end of
#: the run, with the other worker idle: the other worker takes the short tests, and whichever ends first takes
#: what is still queued on the other. A name here that no longer exists only loses its place.
LONG_FIRST = (
    "tests/test_session_env.py::test_the_second_session_of_an_environment_unpacks_what_the_first_built",
    "tests/test_gce_first_run.py::test_first_run_from_a_stock_image_then_the_stored_environment",
    "tests/test_smoke.py::test_the_smoke_run_checks_a_project_step_by_step",
    "tests/test_notebook_corpus.py::test_a_notebook_gives_the_same_results_under_burst[pydata-book/ch09]",
    "tests/test_image_build.py::test_build_an_image_and_boot_a_job_from_it",
    "tests/test_notebook_corpus.py::test_a_notebook_gives_the_same_results_under_burst[pydata-book/ch10]",
    "tests/test_notebook_corpus.py::test_a_notebook_gives_the_same_results_under_burst[pydata-book/ch06]",
    "tests/test_gce_package_index.py::test_the_vm_installs_from_the_configured_package_index",
    "tests/test_notebook_corpus.py::test_a_notebook_gives_the_same_results_under_burst[pandas-tutorial/02 - Data "
    "structures]",
    "tests/test_budget.py::test_a_budget_stops_a_job_and_its_workers",
    "tests/test_budget.py::test_a_budget_stops_a_job_on_compute_engine",
    "tests/test_lab_browser.py::test_job_view_cancels_while_the_cell_waits_and_survives_a_restart",
    "tests/test_gce_first_run.py::test_with_nothing_configured_a_job_boots_debian_12",
    "tests/test_lab_browser.py::test_sidebar_follows_and_cancels_jobs",
    "tests/test_notebook_corpus.py::test_a_notebook_gives_the_same_results_under_burst[matplotlib-course/01-introduction]",
)


@pytest.hookimpl(trylast=True)  # after any plugin that reorders the tests
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {nodeid: i for i, nodeid in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))  # a stable sort: the others keep their order


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--corpus",
        choices=("subset", "all", "held-out"),
        default="subset",
        help="third-party notebooks checked by test_notebook_corpus.py: a representative subset, all of them but "
        "the held-out ones, or only the held-out ones (measured last)",
    )


@pytest.fixture
def burst_env(tmp_path, monkeypatch):
    """A private Store and state folder for the local backend; fails if a machine outlives the test."""
    root = tmp_path / "store"
    state = tmp_path / "state"
    monkeypatch.setenv("NBBURST_ROOT", str(root))
    monkeypatch.setenv("NBBURST_STATE_DIR", str(state))
    monkeypatch.setenv("NBBURST_BACKEND", "local")
    monkeypatch.delenv("NBBURST_TIMEOUT", raising=False)
    yield {"root": root, "state": state}
    stop_all(load())  # the background supervisors that submissions started (nbburst/client/supervision/laptop)
    # An agent exits a few tens of milliseconds after it commits the job's end: give it that.
    killed = kill_agents(str(root))
    assert not killed, f"machines left running after the test: {killed}"


@pytest.fixture
def gce_env(emulator_env, tmp_path, monkeypatch):
    """The gce backend on the Compute Engine and GCS emulators, with a private state folder."""
    monkeypatch.setenv("NBBURST_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("NBBURST_TIMEOUT", raising=False)
    return emulator_env


@pytest.fixture(scope="session")
def package_index(tmp_path_factory):
    """A package index on 127.0.0.1 for emulated VMs of stock images: uv, a standalone Python made of this
    one, and every distribution of this Python (each made into a wheel when first asked for)."""
    from nbburst.testing.pypi import PackageIndex

    index = PackageIndex(tmp_path_factory.mktemp("package-index")).start()
    try:
        index.add_uv()
        index.add_python()
        index.add_installed()
        yield index
    finally:
        index.stop()


@pytest.fixture
def make_gcs_store(gcs_emulator, gcs_bucket, monkeypatch):
    """A factory of GCSStores on the GCS emulator, all below this test's fresh bucket: ``name`` -> a root."""
    for name, value in gcs_emulator.env().items():
        monkeypatch.setenv(name, value)
    from nbburst.store.gcs import GCSStore

    return lambda name="root", **kw: GCSStore(f"gs://{gcs_bucket}/{name}", **kw)


@pytest.fixture
def gcs_enforcing(gcs_emulator) -> None:
    """Skip create-only tests on an emulator that would let them pass without enforcing anything."""
    if not gcs_emulator.enforces_preconditions:
        pytest.skip("this GCS emulator ignores generation preconditions")


@pytest.fixture
def gcs_single_request_uploads(monkeypatch) -> list[int]:
    """Sizes of the objects GCSStore sent in one request (not through a resumable session)."""
    from google.cloud.storage import Blob

    sizes: list[int] = []
    real = Blob.upload_from_string

    def spy(self: Blob, payload: bytes, *args: object, **kwargs: object) -> None:
        sizes.append(len(payload))
        return real(self, payload, *args, **kwargs)

    monkeypatch.setattr(Blob, "upload_from_string", spy)
    return sizes
