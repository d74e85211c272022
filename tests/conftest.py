import pytest
from support import kill_agents

pytest_plugins = ["nbburst.testing.pytest_plugin"]


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
    # An agent exits a few tens of milliseconds after it commits the job's end: give it that.
    killed = kill_agents(str(root))
    assert not killed, f"machines left running after the test: {killed}"
