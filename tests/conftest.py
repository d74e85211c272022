import os
import signal
import time

import psutil
import pytest

pytest_plugins = ["nbburst.testing.pytest_plugin"]


def _agents_under(root: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
        except psutil.Error:
            continue
        if "nbburst.agent" in cmd and root in cmd:
            found.append(proc)
    return found


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


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
    deadline = time.monotonic() + 5
    leftovers = _agents_under(str(root))
    while leftovers and time.monotonic() < deadline:
        time.sleep(0.05)
        leftovers = [p for p in leftovers if _alive(p)]
    for proc in leftovers:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    assert not leftovers, f"machines left running after the test: {[p.pid for p in leftovers]}"
