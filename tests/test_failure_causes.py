"""A failure says its cause: an agent that refuses its job or cannot write is not a preemption.

Faults are injected into the local Store while jobs run, in every process that opens it (the ``faulty://``
Store of nbburst.testing.faults, below the Store's own retry): a disk that fills up while the result is
written, for good or for a moment; a spec altered in the Store; a full disk at submission; a read-only Store
while a job is read. Each job ends once, with a message that names the object, the error and what to do, and
a cell is never run again for a result it already computed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import wait_until
from support.gce import submit as gce_submit
from support.jobs import gone, printed, submit

from nbburst.client.burst import Burst
from nbburst.errors import JobFailed
from nbburst.machines.local import LocalMachines
from nbburst.protocol.cause import MARK, cause_of, console_cause, console_line
from nbburst.protocol.job import State
from nbburst.protocol.sealed import Altered
from nbburst.store import ENV_STORES, NotFound, StoreError
from nbburst.store.base import StoreIOError
from nbburst.testing.faults import STORES, Fault, fault_log, set_faults
from nbburst.ui.viewmodel import ViewModel

RESULT = "jobs/*/result.pkl"


@pytest.fixture
def faulty(burst_env, monkeypatch, tmp_path):
    """The local backend on a ``faulty://`` Store; returns its folder, where :func:`set_faults` sets the faults.
    Writes that end an attempt wait 2 s for the Store ($NBBURST_STORE_WAIT) unless a test says otherwise."""
    root = burst_env["root"]
    monkeypatch.setenv("NBBURST_ROOT", f"faulty://{root}")
    monkeypatch.setenv(ENV_STORES, STORES)
    monkeypatch.setenv("NBBURST_STORE_WAIT", "2")
    monkeypatch.setenv("NBBURST_BACKGROUND_SUPERVISOR", "false")  # the waiting test supervises
    yield root
    set_faults(root)


def counted_cell(side: Path) -> str:
    """A cell that leaves a line in ``side`` each time it runs."""
    return f"with open({str(side)!r}, 'a') as f:\n    f.write('ran\\n')\nanswer = 6 * 7\n"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nbburst", *args], capture_output=True, text=True, timeout=120)


def runs(side: Path) -> int:
    return side.read_text().count("ran") if side.exists() else 0


def test_a_store_that_stays_full_while_the_result_is_written_fails_the_job_once_with_the_cause(faulty, tmp_path):
    """It was taken for a preemption: eleven attempts, each computing the cell again, and no word of a full disk."""
    set_faults(faulty, Fault("write", RESULT, "ENOSPC"))
    side = tmp_path / "runs"
    job = submit(Burst(), counted_cell(side), max_restarts=10)
    assert job.wait(timeout=90) == State.FAILED
    reason = job.terminal().reason
    assert "result.pkl" in reason and "No space left on device" in reason
    assert f"free space on the disk that holds faulty://{faulty}" in reason
    assert [row["attempt"] for row in job.attempts()] == [1] and runs(side) == 1
    assert job.terminal().by == "agent"
    logged = [r["x"] for r in job.tail().records(1) if r["s"] == "event"]
    assert any("could not upload the cell's result" in x and "NBBURST_STORE_WAIT" in x for x in logged)
    with pytest.raises(JobFailed, match="No space left on device"):  # what the cell raises
        job.outcome()
    assert "No space left on device" in ViewModel(job.info(), time.time()).summary_html(time.time())  # the view
    result = cli("result", job.id, "--no-wait")
    assert result.returncode != 0 and "FAILED: the Store failed: could not write" in result.stderr, result.stderr
    assert "No space left on device" in cli("logs", job.id).stdout
    gone(job)


def test_a_store_full_for_a_moment_is_waited_for_and_nothing_is_computed_again(faulty, tmp_path, monkeypatch):
    monkeypatch.setenv("NBBURST_STORE_WAIT", "60")
    set_faults(faulty, Fault("write", RESULT, "ENOSPC", until=time.time() + 3))
    side = tmp_path / "runs"
    job = submit(Burst(), counted_cell(side))
    assert job.wait(timeout=90) == State.SUCCEEDED
    assert job.outcome().values["answer"] == 42
    assert any("result.pkl ENOSPC" in line for line in fault_log(faulty))  # the write did fail, and was waited for
    assert [row["attempt"] for row in job.attempts()] == [1] and runs(side) == 1
    gone(job)


def test_a_result_computed_before_a_preemption_is_uploaded_by_the_next_attempt_not_computed_again(
    faulty, tmp_path, monkeypatch
):
    """The machine stops while its agent waits for the Store to take the result; restarted with its disk, the
    next attempt uploads the result the cell computed instead of running the cell again."""
    monkeypatch.setenv("NBBURST_STORE_WAIT", "120")
    set_faults(faulty, Fault("write", RESULT, "ENOSPC"))
    side = tmp_path / "runs"
    job = submit(Burst(), counted_cell(side))
    wait_until(lambda: any("result.pkl" in line for line in fault_log(faulty)), timeout=60, what="the result write")
    job.preempt(0.5)
    set_faults(faulty)  # space is free again
    assert job.wait(timeout=90) == State.SUCCEEDED
    assert job.outcome().values["answer"] == 42
    assert [row["attempt"] for row in job.attempts()] == [1, 2] and runs(side) == 1
    events = [r["x"] for r in job.tail().records(2) if r["s"] == "event"]
    assert any("uploads the verdict an earlier attempt computed" in x for x in events)
    gone(job)


def test_a_spec_altered_in_the_store_fails_the_job_once_with_the_cause_from_the_console(burst_env, monkeypatch):
    """The agent refuses the spec and cannot end the job with it: it says why on its console, where the supervisor
    reads it before it would relaunch (it used to relaunch until --max-restarts ran out)."""
    monkeypatch.setenv("NBBURST_BACKGROUND_SUPERVISOR", "false")
    with monkeypatch.context() as held:
        held.setattr(LocalMachines, "launch", lambda self, *a, **k: "held")
        job = submit(Burst(), "x = 1", max_restarts=3)
    path = Path(burst_env["root"]) / job.layout.spec
    spec = json.loads(path.read_text())
    spec["timeout_s"] = 10 * spec["timeout_s"]
    path.write_text(json.dumps(spec))  # its seal kept: it no longer matches
    job.start_machine(job.latest_status(), job.spec)  # the handle holds the genuine spec, as its submitter did
    assert job.wait(timeout=60) == State.FAILED
    reason = job.terminal().reason
    assert "spec.json" in reason and "failed its signature check" in reason and "submit the cell again" in reason
    assert f"console of machine {job.machine_of()}" in reason and job.terminal().by == "supervisor"
    assert [row["attempt"] for row in job.attempts()] == [1]
    assert f"{MARK} {job.id} attempt 1: spec.json" in job.console()
    gone(job)


def test_a_full_disk_at_submission_says_which_write_where_and_what_to_do(faulty):
    set_faults(faulty, Fault("write", "*", "ENOSPC"))
    with pytest.raises(OSError) as raised:  # still an OSError for those who catch one
        submit(Burst(), "x = 1")
    error = raised.value
    assert isinstance(error, StoreIOError) and isinstance(error, StoreError) and error.errno == 28
    message = str(error)
    assert message.startswith("could not write ") and f"in the Store faulty://{faulty}: No space left" in message
    assert f"free space on the disk that holds faulty://{faulty}" in message


def test_a_job_is_read_from_a_read_only_store(faulty, monkeypatch):
    """Reading a job's state, logs and result needs no write: the Store's clock falls back to its last reading
    (or this machine's clock) while its probe is refused. A write (a cancel) says why it cannot be done."""
    job = submit(Burst(), "print('hello')\nanswer = 42")
    assert job.wait(timeout=60) == State.SUCCEEDED
    gone(job)
    with monkeypatch.context() as held:
        held.setattr(LocalMachines, "launch", lambda self, *a, **k: "held")
        waiting = submit(Burst(), "x = 1")
    set_faults(faulty, Fault("write", "*", "EROFS"), Fault("delete", "*", "EROFS"))
    reader = Burst()
    again = reader.job(job.id)
    for _ in range(3):  # every poll
        assert again.state == State.SUCCEEDED and again.info()["state"] == "SUCCEEDED"
    assert reader.store.age(job.layout.terminal) >= 0
    assert any(line.startswith("write clock/") for line in fault_log(faulty))  # the probe was refused
    assert again.outcome().values["answer"] == 42
    assert "hello" in "".join(r["x"] for r in again.tail().records(1) if r["s"] == "stdout")
    listing = cli("jobs")
    assert listing.returncode == 0 and job.id in listing.stdout and "SUCCEEDED" in listing.stdout, listing.stderr
    cancel = cli("cancel", waiting.id)  # a write: refused, and said so
    assert cancel.returncode != 0 and "Traceback" not in cancel.stderr, cancel.stderr
    assert "Read-only file system; the file system that holds" in cancel.stderr and "remount it" in cancel.stderr


def test_the_console_line_is_found_for_its_attempt_only():
    line = console_line("j", 2, "spec.json of job j failed\nits signature check")
    assert "\n" not in line
    console = f"boot\nNov 27 12:00:01 vm nbburst-agent[7]: {line}\n{console_line('j', 1, 'older')}\n"
    assert console_cause(console, "j", 2) == "spec.json of job j failed its signature check"
    assert console_cause(console, "j", 1) == "older" and console_cause(console, "j", 3) == ""
    assert console_cause(console, "k", 2) == ""  # another job's cell on the same (session) machine


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_a_vm_whose_agent_refuses_its_spec_is_not_relaunched(gce_env, compute_emulator, monkeypatch):
    """The agent's cause reaches the supervisor through the VM's serial port: one VM, never started again."""
    burst = Burst()
    machines = burst.machines("gce")
    with monkeypatch.context() as held:
        held.setattr(machines, "launch", lambda *a, **k: "held")
        job = gce_submit(burst, pow, 2, 10, cores=2, max_restarts=3)
    spec = json.loads(job.store.get(job.layout.spec))
    spec["timeout_s"] = 10 * spec["timeout_s"]
    job.store.put(job.layout.spec, json.dumps(spec).encode())  # its seal kept: it no longer matches
    job.start_machine(job.latest_status(), job.spec)
    name = job.machine_of()
    assert job.wait(timeout=180) == State.FAILED
    reason = job.terminal().reason
    assert "spec.json" in reason and "failed its signature check" in reason
    assert f"console of machine {name}" in reason and job.terminal().by == "supervisor"
    assert [row["attempt"] for row in job.attempts()] == [1]
    requests = [r["path"] for r in compute_emulator.request_log if r["method"] == "POST"]
    assert sum(p.endswith("/instances") for p in requests) == 1 and not any(p.endswith("/start") for p in requests)
    assert compute_emulator.wait_for_status(name, "DELETED", timeout=30) == "DELETED"


def test_a_read_only_spell_while_the_cell_runs_is_waited_out_and_loses_no_line(faulty, tmp_path, monkeypatch):
    monkeypatch.setenv("NBBURST_STORE_WAIT", "60")
    side = tmp_path / "runs"
    code = (
        counted_cell(side) + "import time\nfor i in range(8):\n    print('line', i, flush=True)\n    time.sleep(0.4)\n"
    )
    job = submit(Burst(), code)
    wait_until(lambda: runs(side) == 1, timeout=60, what="the cell to start")
    until = time.time() + 4
    set_faults(faulty, Fault("write", "*", "EROFS", until=until), Fault("delete", "*", "EROFS", until=until))
    assert job.wait(timeout=90) == State.SUCCEEDED
    assert any(" jobs/" in line and line.endswith("EROFS") for line in fault_log(faulty))
    assert [line for line in printed(job, 1) if line.startswith("line")] == [f"line {i}" for i in range(8)]
    assert [row["attempt"] for row in job.attempts()] == [1] and runs(side) == 1
    gone(job)


def test_an_agent_that_cannot_write_the_jobs_end_leaves_its_cause_on_the_console(faulty, tmp_path):
    """The Store takes neither the result nor the job's end: the agent's console line is the record, and the
    supervisor ends the job with it once space is back, instead of relaunching the cell."""
    set_faults(faulty, Fault("write", RESULT, "ENOSPC"), Fault("write", "jobs/*/terminal.json", "ENOSPC"))
    side = tmp_path / "runs"
    job = submit(Burst(), counted_cell(side), max_restarts=10)
    wait_until(lambda: f"{MARK} {job.id} attempt 1: " in job.console(), timeout=60, what="the cause on its console")
    gone(job)
    assert job.terminal() is None  # it could not write it
    set_faults(faulty, Fault("write", RESULT, "ENOSPC"))  # the job's end can be written again
    assert job.wait(timeout=60) == State.FAILED
    reason = job.terminal().reason
    assert "result.pkl" in reason and "No space left on device" in reason and "free space" in reason
    assert f"console of machine {job.machine_of()}" in reason and job.terminal().by == "supervisor"
    assert [row["attempt"] for row in job.attempts()] == [1] and runs(side) == 1


def test_each_cause_names_the_object_the_error_and_what_to_do():
    assert cause_of(Altered("spec.json of job j failed its signature check")).endswith(
        "submit the cell again, and see who else can write to the Store"
    )
    assert "removed from the Store" in cause_of(NotFound("jobs/j/spec.json not found in /s"))
    full = StoreIOError(28, "write", "jobs/j/result.pkl", "/s")
    assert cause_of(full).startswith("the Store failed: could not write jobs/j/result.pkl in the Store /s")
    assert cause_of(ValueError("bad")) == "the agent failed: ValueError: bad"
