"""``nbburst doctor --smoke`` on the Compute Engine, Cloud Storage and Secret Manager emulators: every step of a
first real run passes and says what it found, and a failing doctor check stops the run before any job."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nbburst.client.burst import Burst

pytestmark = pytest.mark.timeout(900)


def smoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nbburst", "doctor", "--smoke", *args],
        capture_output=True,
        text=True,
        timeout=840,
        env=os.environ,
    )


@pytest.mark.compute_emulator(operation_delay=0.02, preemption_grace=1.0)
def test_the_smoke_run_checks_a_project_step_by_step(gce_env, monkeypatch):
    monkeypatch.setenv("NBBURST_WATCHER", "true")  # the watcher VM relaunches the detached job
    monkeypatch.setenv("NBBURST_WATCHER_INTERVAL", "0.5")
    monkeypatch.setenv("NBBURST_WATCHER_IDLE", "3s")
    done = smoke()
    assert done.returncode == 0, done.stdout + done.stderr
    report = done.stdout.split("the report to paste:\n", 1)[1]
    lines = report.splitlines()
    assert lines[0].startswith("nbburst ") and "smoke run" in lines[0]
    steps = [line for line in lines if line[:1] in "✔✖-"]
    names = [line.split(" (")[0][2:] for line in steps]
    assert names == [
        "doctor",
        "a 4-core cell on the default image",
        "a preemption and its recovery",
        "a job in another zone of the region",
        "a GPU",
        "a detached job relaunched by the watcher",
    ]
    assert all(line.startswith(("✔", "-")) for line in steps), report
    assert "HOME /" in report and "Python 3." in report
    assert "went on from there" in report and "no client supervising" in report
    assert lines[-1] == "smoke run: all steps passed"
    jobs = Burst().jobs()
    assert len(jobs) == 4 and all(job.state.terminal for job in jobs)  # nothing left running


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_a_failing_check_stops_the_smoke_run_before_anything_is_paid_for(gce_env, monkeypatch):
    monkeypatch.setenv("NBBURST_ROOT", "gs://no-such-bucket-for-smoke/nbburst")
    done = smoke()
    assert done.returncode != 0
    assert "✖ doctor" in done.stdout and "fix:" in done.stdout
    assert "a 4-core cell" not in done.stdout  # no job was submitted
