"""nbburst.submit and the Job handle, with the real agent on the local backend."""

from __future__ import annotations

import os
import time

import pytest
from support import held_call, wait_until

import nbburst
from nbburst.client.burst import Burst
from nbburst.errors import JobCancelled, JobFailed
from nbburst.machines.local import LocalMachines
from nbburst.protocol import signing
from nbburst.protocol.job import State


def slow_square(x, delay=0.0):
    print(f"squaring {x}", flush=True)
    time.sleep(delay)
    return x * x


def test_submit_returns_a_job_with_result_logs_and_status(burst_env):
    job = nbburst.submit(slow_square, 7, delay=0.2, cores=1)
    assert job.result(timeout=60) == 49
    assert job.status == State.SUCCEEDED
    assert "squaring 7" in job.logs()
    assert job.wait() == State.SUCCEEDED
    assert job.info()["state"] == "SUCCEEDED" and job.info()["machine"]["cores"] == 1


def scored(n):
    for k in range(n):
        nbburst.progress(k + 1, n, "score")
    return n


def test_the_verdict_carries_the_last_progress(burst_env):
    """The job's end holds the progress it ended on: a reader that sees the end before the attempt's final
    status (written just after it) still shows the bar at 3/3, not an older one."""
    job = nbburst.submit(scored, 3, cores=1)
    assert job.result(timeout=60) == 3
    assert job.terminal().progress == {"done": 3, "total": 3, "desc": "score"}
    assert job.info()["progress"] == job.terminal().progress


def test_remote_exception_from_result(burst_env):
    job = nbburst.submit(slow_square, "a", delay=0)
    with pytest.raises(TypeError, match="can't multiply"):
        job.result(timeout=60)


def test_output_streams_while_the_job_runs(burst_env, tmp_path):
    seen = tmp_path / "seen"

    def chatty(seen):
        import os
        import time

        print("line 0", flush=True)
        while not os.path.exists(seen):  # the job ends only once the notebook has its first line
            time.sleep(0.05)
        print("line 1", flush=True)

    def arrived(record):
        if "line 0" in record.get("x", ""):
            seen.touch()

    job = nbburst.submit(chatty, str(seen))
    state = job.wait(timeout=120, on_record=arrived)
    if state != State.SUCCEEDED:
        job.cancel()
    assert state == State.SUCCEEDED and seen.exists(), "the first line did not arrive while the job ran"


def test_cancel_stops_the_machine_and_no_result_appears(burst_env):
    job = nbburst.submit(slow_square, 3, delay=300)
    while job.state != State.RUNNING:
        time.sleep(0.05)
    assert job.cancel() == State.CANCELLED
    assert LocalMachines(Burst().settings).list(job.id) == []
    with pytest.raises(JobCancelled):
        job.result()
    assert not job.store.exists(job.layout.result)


def test_the_signing_key_never_enters_the_store(burst_env):
    job = nbburst.submit(slow_square, 2)
    job.result(timeout=60)
    key_hex = job.key().hex().encode()
    for dirpath, _, files in os.walk(burst_env["root"]):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                assert key_hex not in f.read(), f"key found in {name}"


def test_tampered_result_is_refused(burst_env):
    job = nbburst.submit(slow_square, 4)
    job.wait()
    path = burst_env["root"] / job.layout.result
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(signing.SignatureError, match="altered"):
        job.result()


def _submit_without_launch(monkeypatch, fn, *args):
    monkeypatch.setattr(LocalMachines, "launch", lambda self, *a, **k: "held")
    job = Burst().submit(fn, *args)
    monkeypatch.undo()
    return job


@pytest.mark.parametrize("target", ["blob", "spec"])
def test_agent_refuses_a_tampered_job(burst_env, monkeypatch, target):
    job = _submit_without_launch(monkeypatch, slow_square, 5)
    root = burst_env["root"]
    if target == "blob":
        blob = next((root / "blobs").iterdir())
        blob.write_bytes(blob.read_bytes()[:-1] + b"\x00")
    else:
        spec = root / job.layout.spec
        spec.write_text(spec.read_text().replace('"timeout_s": 86400.0', '"timeout_s": 86401.0'))
    LocalMachines(Burst().settings).launch(job.spec if target == "blob" else job.spec, job.url, job.key(), 1)
    if target == "spec":
        # The agent will not even start the job: the signature over the spec fails.
        deadline = time.monotonic() + 30
        while LocalMachines(Burst().settings).list(job.id) and time.monotonic() < deadline:
            time.sleep(0.1)
        console = LocalMachines(Burst().settings).console(f"nbburst-{job.id}")
        assert "failed its signature check" in console
        return
    with pytest.raises(signing.SignatureError, match="does not match its address"):
        job.result(timeout=60)


def test_a_vanished_machine_is_preempted_and_relaunched(burst_env, tmp_path):
    started = tmp_path / "started"
    job = nbburst.submit(held_call, str(started), 36)
    wait_until(started.exists, what="the job to run")  # still running when preempted, however busy the machine
    job.preempt(grace_s=0.5)
    assert job.result(timeout=90) == 36
    assert [s.attempt for s in job.statuses()] == [1, 2]
    assert "--- attempt 2 ---" in "".join(r.get("x", "") for r in job.tail().poll())


def test_max_restarts_zero_fails_with_the_history(burst_env):
    burst = Burst()
    job = burst.submit(slow_square, 6, 30.0, options=burst.options(max_restarts=0))
    while job.state != State.RUNNING:
        time.sleep(0.05)
    job.preempt(grace_s=0.2)
    with pytest.raises(JobFailed, match="max-restarts 0"):
        job.result(timeout=60)
