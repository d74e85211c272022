import pytest
from support import kill_agents

from nbburst.client.supervision.laptop import stop_all
from nbburst.config import load

pytest_plugins = ["nbburst.testing.pytest_plugin"]


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
