"""Jobs outlive preemption on the local backend: resume from checkpoints, lose no completed work."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from support import wait_until
from support.jobs import (
    agent_of,
    attempts_never_overlap,
    expected_loop,
    gone,
    loop_code,
    printed,
    running_step,
    side_loop,
    submit,
)

from nbburst.client.burst import Burst
from nbburst.client.supervision import laptop, supervisor
from nbburst.machines.base import GONE, RUNNING, MachineInfo, NoCapacity
from nbburst.protocol import fence, processes
from nbburst.protocol.job import State, Status
from nbburst.protocol.outcome import commit_terminal


def test_preempted_twice_resumes_from_checkpoints(burst_env):
    burst = Burst()
    job = submit(burst, loop_code(30, 0.2))  # steps enough to be still running when each preemption lands
    records: list[dict] = []
    waiter = threading.Thread(target=lambda: job.wait(on_record=records.append, timeout=90))
    waiter.start()
    wait_until(lambda: running_step(job, 2), what="step 2 of attempt 1")
    job.preempt(3)
    wait_until(lambda: job.attempt == 2 and running_step(job, 6), what="step 6 of attempt 2")
    job.preempt(3)
    waiter.join(100)
    assert job.state == State.SUCCEEDED, job.terminal()
    assert job.outcome().values["result"] == expected_loop(30)
    rows = job.attempts()
    assert [r["state"] for r in rows] == ["PREEMPTED", "PREEMPTED", "SUCCEEDED"]
    assert all(r["end"] >= r["start"] for r in rows)
    # the loop resumed where it was: attempt 2 starts at most one step before attempt 1 stopped
    one, two, three = (printed(job, a) for a in (1, 2, 3))
    assert one[0] == "step 0" and int(two[0].split()[1]) >= int(one[-1].split()[1])
    assert int(three[0].split()[1]) >= int(two[-1].split()[1]) and three[-1] == "step 29"
    # every attempt's lines came to the waiting cell exactly once, in order, after its marker
    text = "".join(r.get("x", "") for r in records if r["s"] in ("stdout", "event"))
    assert text.count("--- attempt 2 ---") == 1 and text.count("--- attempt 3 ---") == 1
    streamed = {
        a: [ln for r in records if r["s"] == "stdout" and r["attempt"] == a for ln in r["x"].splitlines()]
        for a in (1, 2, 3)
    }
    assert streamed == {1: one, 2: two, 3: three}
    logs = job.logs()
    assert logs.index("--- attempt 2 ---") < logs.index("--- attempt 3 ---")
    assert "resuming from 1 loop(s)" in logs
    gone(job)


def test_hooks_folder_and_hard_kill(burst_env):
    """on_preempt hooks run in the grace window; folder() files come back; an agent killed
    without a word (no grace at all) is PREEMPTED, never FAILED."""
    code = """
import nbburst, time, os
folder = nbburst.checkpoint.folder()
found = sorted(os.listdir(folder))
state = {"n": 0}
@nbburst.checkpoint.on_preempt
def keep():
    nbburst.checkpoint.save("from-hook", state["n"])
    (folder / "hook.txt").write_text(str(state["n"]))
resumed = nbburst.checkpoint.load("from-hook", default=None)
for i in range(200 if resumed is None else 3):
    state["n"] = i
    (folder / "latest.txt").write_text(str(i))
    if i == 5:
        print("ready", flush=True)
    time.sleep(0.05)
"""
    burst = Burst()
    job = submit(burst, code)
    wait_until(lambda: "ready" in printed(job, 1), what="the cell to start")
    job.preempt(3)
    wait_until(lambda: job.supervise() in (State.PROVISIONING, State.RUNNING) and job.attempt == 2, what="a relaunch")
    assert job.wait(timeout=60) == State.SUCCEEDED
    values = job.outcome().values
    assert values["resumed"] is not None and values["resumed"] >= 5
    assert values["found"] == ["hook.txt", "latest.txt"]

    # hard kill at once: the agent cannot write anything
    job2 = submit(burst, loop_code(6, 0.1))
    wait_until(lambda: running_step(job2, 1), what="job2 running")
    job2.preempt(0)
    statuses = job2.statuses()
    assert statuses[-1].state in (State.RUNNING, State.PREEMPTED)
    wait_until(
        lambda: job2.state in (State.PREEMPTED, State.PROVISIONING, State.RUNNING) and job2.state != State.FAILED,
        what="PREEMPTED",
    )
    assert job2.wait(timeout=60) == State.SUCCEEDED
    assert job2.outcome().values["result"] == expected_loop(6)
    assert [r["state"] for r in job2.attempts()][0] == "PREEMPTED"
    gone(job2)


def test_preempted_while_booting_and_max_restarts(burst_env):
    burst = Burst()
    job = submit(burst, loop_code(3, 0.05), max_restarts=1)
    job.preempt(0)  # before the agent wrote anything: only the client's claim exists
    assert job.statuses()[-1].state == State.PROVISIONING
    wait_until(lambda: job.derive_state()[0] == State.PREEMPTED, timeout=120, what="PREEMPTED at boot")
    wait_until(lambda: job.supervise() != State.PREEMPTED and job.attempt == 2, what="relaunch")
    job.preempt(0)
    assert job.wait(timeout=120) == State.FAILED
    reason = job.terminal().reason
    assert "gave up after --max-restarts 1" in reason and "#1 PREEMPTED" in reason and "#2 PREEMPTED" in reason
    gone(job)


def test_sklearn_search_resumes_without_recomputing_fits(burst_env, tmp_path):
    """A RandomizedSearchCV preempted mid-way: cv_results_ equal an uninterrupted run's, fits done once."""
    fits = tmp_path / "fits.log"
    code = f"""
import time
from scipy.stats import loguniform
from sklearn.datasets import load_digits
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import RandomizedSearchCV

class Slow(SGDClassifier):
    def fit(self, X, y, **kw):
        with open({str(fits)!r}, "a") as f:
            f.write(f"{{self.alpha!r}} {{len(y)}} {{float(X.sum()):.3f}} start\\n")
        time.sleep(0.12)
        out = super().fit(X, y, **kw)
        with open({str(fits)!r}, "a") as f:
            f.write(f"{{self.alpha!r}} {{len(y)}} {{float(X.sum()):.3f}} end\\n")
        return out

X, y = load_digits(return_X_y=True)
X, y = X[:600] / 16.0, y[:600]
search = RandomizedSearchCV(Slow(max_iter=20, tol=None, random_state=0),
                            {{"alpha": loguniform(1e-5, 1e-1)}}, n_iter=10, cv=3, n_jobs=2, random_state=7)
search.fit(X, y)
print("fits done")
results = {{k: v for k, v in search.cv_results_.items() if "time" not in k}}
best = search.best_params_
"""
    burst = Burst()
    job = submit(burst, code)

    def ends() -> int:
        return fits.read_text().count(" end") if fits.exists() else 0

    wait_until(lambda: ends() >= 12, timeout=90, what="12 of 30 fits")
    job.preempt(5)
    done_before = ends()
    assert job.wait(timeout=120) == State.SUCCEEDED, job.terminal()
    values = job.outcome().values
    lines = fits.read_text().splitlines()
    starts = [ln.rsplit(" ", 1)[0] for ln in lines if ln.endswith(" start")]
    total = len(set(starts))  # 10 candidates x 3 folds (+ the refit)
    recomputed = len(starts) - total
    assert total == 31
    assert recomputed <= 2, f"{recomputed} fits ran twice; at most the 2 in flight may\n{job.logs()}"
    assert done_before >= 12
    gone(job)

    # the same search in this process, uninterrupted
    ns: dict = {"__name__": "__main__"}
    local = code.replace(repr(str(fits)), repr(str(tmp_path / "local.log"))).replace("time.sleep(0.12)", "pass")
    exec(compile(local.replace("n_jobs=2", "n_jobs=1"), "<local>", "exec"), ns)
    assert values["best"] == ns["best"]
    for k, v in ns["results"].items():
        got = values["results"][k]
        assert (
            list(map(repr, got)) == list(map(repr, v)) if k.startswith("param") or k == "params" else (got == v).all()
        ), k


def test_agent_watches_the_metadata_server(burst_env, monkeypatch):
    """On a VM the agent hears preemption from the metadata server, not only from SIGTERM."""
    from nbburst.testing import MetadataServer

    with MetadataServer({"instance/preempted": "FALSE", "instance/maintenance-event": "NONE"}) as md:
        monkeypatch.setenv("GCE_METADATA_HOST", md.host)
        monkeypatch.setenv("NBBURST_PREEMPT_BUDGET", "2")
        burst = Burst()
        job = submit(burst, loop_code(8, 0.15))
        wait_until(lambda: running_step(job, 2), what="step 2")
        md.set("instance/maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE")
        wait_until(lambda: "as a precaution" in job.logs(), what="precautionary sync")
        md.set("instance/preempted", "TRUE")
        wait_until(lambda: job.statuses()[0].state == State.PREEMPTED, what="the agent to stop itself")
        assert "metadata server" in job.statuses()[0].message
        md.update({"instance/preempted": "FALSE", "instance/maintenance-event": "NONE"})  # a new VM
        assert job.wait(timeout=60) == State.SUCCEEDED
        assert job.outcome().values["result"] == expected_loop(8)
        gone(job)


# -- supervisor policy, with a scripted backend ------------------------------------------------------


class ScriptedMachines:
    """A backend whose restarts fail with no capacity as scripted; machines never really run."""

    backend = "local"

    def __init__(self, real, failures: list[str]):
        self.real, self.failures, self.calls = real, list(failures), []
        self.states: dict[str, str] = {}

    def plan(self, resources):
        return self.real.plan(resources)

    def check_environment(self, code, modules):
        return self.real.check_environment(code, modules)

    def launch(self, spec, url, key, attempt):
        self.calls.append(("launch", attempt, spec.resources.zone, spec.resources.on_demand))
        self.states["m"] = RUNNING
        return "m"

    def restart(self, name, spec, url, key, attempt):
        self.calls.append(("restart", attempt, spec.resources.zone, spec.resources.on_demand))
        if self.failures:
            zone = self.failures.pop(0)
            raise NoCapacity(f"ZONE_RESOURCE_POOL_EXHAUSTED in {zone}", zone=zone)
        self.states["m"] = RUNNING
        return name

    def relaunch_zones(self, spec):
        return ["z-a", "z-b"]

    def describe(self, name):
        return MachineInfo(name=name, job_id="", state=self.states.get("m", GONE))

    def delete(self, name):
        self.states["m"] = GONE

    def list(self, job_id=None):
        return []


def test_no_capacity_backs_off_rotates_zones_then_falls_back_to_on_demand(burst_env, monkeypatch):
    monkeypatch.setattr(supervisor, "BACKOFF", (0.05,))
    monkeypatch.setenv("NBBURST_BACKGROUND_SUPERVISOR", "false")  # the scripted machines are this process's only
    burst = Burst()
    fake = ScriptedMachines(burst.machines("local"), ["z-a", "z-b", "z-a"])
    burst._machines["local"] = fake
    job = submit(burst, "x = 1", zone=None, fallback_on_demand=True)
    monkeypatch.setattr(job.spec.resources, "zone", "auto")  # as --zone auto on Compute Engine
    # the machine is lost without a verdict
    status = job.statuses()[-1]
    status.state, status.heartbeat = State.RUNNING, time.time() - 60
    job.folder.put_status(status)
    written = burst_env["root"] / job.layout.status(1)
    os.utime(written, (time.time() - 60, time.time() - 60))  # last written a minute ago, by the Store's clock
    fake.states["m"] = GONE
    states = []
    for _ in range(200):
        state = job.supervise()
        states.append(state)
        if state == State.PROVISIONING:
            break
        time.sleep(0.02)
    assert state == State.PROVISIONING
    restarts = [c for c in fake.calls if c[0] == "restart"]
    # one attempt (2), retried: z-a (from the plan) -> z-b -> round again on a standard VM
    assert [c[1] for c in restarts] == [2, 2, 2, 2]
    assert [c[2] for c in restarts] == ["auto", "z-b", "z-a", "z-b"]
    assert [c[3] for c in restarts] == [False, False, True, True]
    assert job.attempt == 2 and job.statuses()[-1].launched > 0
    events = json.loads(job.store.get(job.layout.relaunch))["events"]
    assert [e["event"] for e in events] == ["no-capacity"] * 3 + ["relaunched"]
    job.commit(State.CANCELLED, "test over", by="test")
    job.supervise()
    assert job.store.list(job.layout.lease_prefix) == []


def test_lease_one_supervisor_per_job(burst_env, monkeypatch):
    burst = Burst()
    job = submit(burst, "x = 1")
    job.wait(timeout=120)
    gone(job)
    # leases long enough that a busy machine's pauses between two calls do not let one expire
    a, b = supervisor.Lease(job, "a", seconds=2.0), supervisor.Lease(job, "b", seconds=2.0)
    assert a.acquire() and not b.acquire()
    assert a.acquire()  # renew
    time.sleep(2.2)
    assert b.acquire() and not a.acquire()  # taken over once expired
    b.release()
    assert a.acquire()
    results = []
    leases = [supervisor.Lease(job, f"t{i}", seconds=60) for i in range(6)]
    a.release()
    threads = [threading.Thread(target=lambda lease=lease: results.append(lease.acquire())) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1


def test_attempts_table_and_fallback_option_parse():
    from nbburst.machines.gce.api import no_capacity
    from nbburst.options import Options

    opts = Options.build(fallback_on_demand=True)
    assert opts.resources.fallback_on_demand is True
    assert Status.from_json(Status(attempt=1, state=State.RUNNING).to_json()).launched == 0.0
    assert isinstance(no_capacity("starting VM m", "z-a", [], "412 ZONE_RESOURCE_POOL_EXHAUSTED"), NoCapacity)
    assert not no_capacity("starting VM m", "z-a", [], "permission denied")


@pytest.fixture(autouse=True)
def _budget(monkeypatch):
    monkeypatch.setenv("NBBURST_PREEMPT_BUDGET", "2")


def test_survival_notebook(burst_env):
    """notebooks/survival.ipynb: preempted twice on purpose, resumed each time, ends with the timeline."""
    import nbformat
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.linear_model import SGDClassifier
    from sklearn.model_selection import train_test_split
    from support.nbrun import error, run, stream

    root = Path(__file__).resolve().parents[1]
    nb = run(nbformat.read(root / "notebooks" / "survival.ipynb", as_version=4), cwd=root / "notebooks", timeout=180)
    code = [c for c in nb.cells if c.cell_type == "code"]
    for c in code:
        assert error(c.outputs) is None, (c.source, error(c.outputs))
    text = "".join(stream(c.outputs) + stream(c.outputs, "stderr") for c in code)
    assert "--- attempt 2 ---" in text and "--- attempt 3 ---" in text
    assert "12 epochs, each exactly once: True" in text
    table = code[-1].outputs[0]["data"]["text/plain"]
    assert re.findall(r"\b(PREEMPTED|SUCCEEDED|FAILED|RUNNING)\b", table) == ["PREEMPTED", "PREEMPTED", "SUCCEEDED"]
    # the resumed training equals an uninterrupted one
    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X / 16.0, y, test_size=0.3, random_state=0)
    model, history = SGDClassifier(loss="log_loss", alpha=1e-4, random_state=0), []
    for epoch in range(12):
        order = np.random.RandomState(epoch).permutation(len(X_train))
        for batch in np.array_split(order, 10):
            model.partial_fit(X_train[batch], y_train[batch], classes=np.unique(y))
        history.append((epoch, round(float(model.score(X_test, y_test)), 4)))
    assert f"history: {history}" in text
    assert not (root / "notebooks" / ".nbburst-checkpoints").exists()


# -- nobody watching: the background supervisor, lost agents, frozen attempts, skewed clocks ---------------------

SUBMITTER = """
import os, sys
from nbburst.client.burst import Burst
from nbburst.client.capture import capture
code = sys.argv[1]
burst = Burst()
job = burst.submit_cell(code, capture(code, {}, None, set()), burst.options(max_restarts=5))
print(job.id, os.getpid(), flush=True)
"""


def test_a_job_nobody_waits_for_is_relaunched_until_it_succeeds(burst_env, tmp_path):
    """Recovery does not need the notebook: the process that submitted the job exits at once, nobody waits for
    it, it is preempted three times, and the background supervisor of its Store relaunches it each time."""
    side = tmp_path / "side.txt"
    code = side_loop(side, 24, 0.25)
    done = subprocess.run([sys.executable, "-c", SUBMITTER, code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    job_id, submitter = done.stdout.split()
    job = Burst().job(job_id)  # this process only looks and preempts: it never supervises
    for attempt in (1, 2, 3):
        wait_until(lambda a=attempt: job.attempt == a and len(printed(job, a)) >= 2, 60, what=f"attempt {attempt}")
        preempt = [sys.executable, "-m", "nbburst", "preempt", job_id, "--grace", "2"]
        assert subprocess.run(preempt, capture_output=True, timeout=60).returncode == 0
    wait_until(lambda: job.terminal() is not None, 120, what="the job to end")
    check = (
        "import sys; from nbburst.client.burst import Burst; j = Burst().job(sys.argv[1]); print(j.state, j.attempt)"
    )
    seen = subprocess.run([sys.executable, "-c", check, job_id], capture_output=True, text=True, timeout=60)
    assert seen.stdout.split() == ["SUCCEEDED", "4"], seen.stderr
    assert job.outcome().values["result"] == expected_loop(24)
    daemon = laptop.running(laptop.lock_path(job.burst.settings, job.store.url))
    relaunches = [e for e in json.loads(job.folder.get_record(job.layout.relaunch))["events"] if e["attempt"] > 1]
    assert [e["attempt"] for e in relaunches] == [2, 3, 4]
    assert {e["by"].split(":")[1] for e in relaunches} == {str(daemon)}  # neither this process nor the submitter
    assert str(daemon) not in (submitter, str(os.getpid()))
    assert attempts_never_overlap(side)
    gone(job)


def test_a_killed_agent_is_a_preemption_and_leaves_no_process_behind(burst_env, tmp_path):
    """kill -9 of the agent: its cell dies with it, what left the cell's group is swept, the attempt reads
    PREEMPTED (never FAILED: no broken pipe is signed as the cell's error) and the next one finishes the job."""
    side = tmp_path / "side.txt"
    burst = Burst()
    job = submit(burst, side_loop(side, 30, 0.2))  # still running when its agent is killed, however busy
    wait_until(lambda: running_step(job, 2), what="step 2 of attempt 1")
    agent = agent_of(job, 1)
    runner = next(p for p in agent.children() if "nbburst.agent" in " ".join(p.cmdline()))
    escaped = [p for p in map(psutil.Process, processes.marked(job.id)) if p.name() == "sleep"]
    assert escaped and runner.pid != agent.pid
    agent.kill()
    psutil.wait_procs([runner], timeout=10)  # the cell follows its agent at once
    assert not runner.is_running() or runner.status() == psutil.STATUS_ZOMBIE
    assert job.wait(timeout=90) == State.SUCCEEDED, job.terminal()
    assert [r["state"] for r in job.attempts()] == ["PREEMPTED", "SUCCEEDED"]
    assert job.outcome().values["result"] == expected_loop(30)
    assert not job.store.exists(job.layout.error)
    gone(job)
    assert processes.marked(job.id) == []  # the escaped processes of both attempts are gone too
    assert attempts_never_overlap(side)


def test_a_frozen_attempt_stands_aside_when_the_next_one_has_been_claimed(burst_env, tmp_path, monkeypatch):
    """Attempt 1 freezes; a supervisor that took its machine for lost claims attempt 2. When attempt 1 wakes up
    it sees the later claim, ends its cell at once (frozen, it never runs again) and commits nothing: only
    attempt 2's verdict counts."""
    monkeypatch.setenv("NBBURST_BACKGROUND_SUPERVISOR", "false")
    side = tmp_path / "side.txt"
    burst = Burst()
    job = submit(burst, side_loop(side, 30, 0.2))  # still running when frozen, however busy
    wait_until(lambda: running_step(job, 2), what="step 2 of attempt 1")
    agent = agent_of(job, 1)
    runner = next(p for p in agent.children() if "nbburst.agent" in " ".join(p.cmdline()))
    for proc in (agent, runner):
        proc.suspend()
    claim = Status(attempt=2, state=State.PROVISIONING, machine=job.machine_of(), message="relaunching")
    job.folder.put_status(claim, create=True)
    fence.claim(job.folder, 2)
    agent.resume()  # its cell stays frozen: attempt 1 must end it without letting it run again
    psutil.wait_procs([agent], timeout=20)
    assert not agent.is_running() or agent.status() == psutil.STATUS_ZOMBIE
    assert not runner.is_running() or runner.status() == psutil.STATUS_ZOMBIE
    assert "attempt 2 has taken over; attempt 1 stops" in job.logs(1)
    for committed in (job.layout.terminal, job.layout.result, job.layout.error):
        assert not job.store.exists(committed)
    assert job.folder.status(1).state == State.RUNNING  # and it did not even say how it ended: not its to say
    job.start_machine(claim, job.spec)
    assert job.wait(timeout=90) == State.SUCCEEDED
    assert job.terminal().attempt == 2
    assert job.outcome().values["result"] == expected_loop(30)
    assert attempts_never_overlap(side)
    gone(job)


def test_a_verdict_written_after_the_next_claim_gives_way(burst_env):
    """The race the fence check cannot close: an attempt checks, a later one is claimed, then the first writes
    its verdict. By the Store's clock it came after the claim, so readers ignore it and the next verdict wins."""
    job = submit(Burst(), "x = 1")
    assert job.wait(timeout=60) == State.SUCCEEDED
    gone(job)
    time.sleep(0.05)
    claim = Status(attempt=2, state=State.PROVISIONING, machine=job.machine_of())
    job.folder.put_status(claim, create=True)
    fence.claim(job.folder, 2)
    assert job.terminal().state == State.SUCCEEDED  # written before the claim: it stands
    job.store.delete(job.layout.terminal)
    time.sleep(0.05)
    late = commit_terminal(job.folder, job.spec, State.FAILED, "a late verdict of attempt 1", 1, "agent", [])
    assert late == State.FAILED and job.folder.terminal().attempt == 1  # written, after the claim of attempt 2
    assert job.terminal() is None and job.state == State.PROVISIONING
    assert commit_terminal(job.folder, job.spec, State.SUCCEEDED, "", 2, "agent", job.statuses()) == State.SUCCEEDED
    assert job.terminal().attempt == 2 and job.state == State.SUCCEEDED


SKEWED_SUPERVISOR = """
import signal, sys, threading, time
real = time.time
time.time = lambda: real() + float(sys.argv[1])  # this supervisor's clock is off
from nbburst.client.burst import Burst
from nbburst.client.supervision.loop import Loop
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
Loop(Burst(), 0.2).run(stop)
"""


@pytest.mark.parametrize("shift", [3600.0, -3600.0], ids=["ahead", "behind"])
def test_a_supervisor_whose_clock_is_an_hour_off(burst_env, tmp_path, shift):
    """Leases, staleness and the time limit go by the Store's clock: a supervisor an hour ahead neither times the
    job out (its limit is 30 minutes) nor takes a healthy attempt for lost; one an hour behind does not keep a
    lease for an hour. Two preemptions: exactly two relaunches, never two attempts at once."""
    side = tmp_path / "side.txt"
    skewed = subprocess.Popen(
        [sys.executable, "-c", SKEWED_SUPERVISOR, str(shift)], stdin=subprocess.DEVNULL, start_new_session=True
    )
    try:
        burst = Burst()
        job = submit(burst, side_loop(side, 20, 0.2), timeout="30m")
        for attempt in (1, 2):
            wait_until(lambda a=attempt: job.attempt == a and len(printed(job, a)) >= 3, 60, what=f"attempt {attempt}")
            job.preempt(2)
        wait_until(lambda: job.terminal() is not None, 120, what="the job to end")  # this process never supervises
    finally:
        skewed.send_signal(signal.SIGTERM)
        skewed.wait(20)
    assert job.state == State.SUCCEEDED, job.terminal()
    assert [r["attempt"] for r in job.attempts()] == [1, 2, 3]
    events = json.loads(job.folder.get_record(job.layout.relaunch))["events"]
    assert [e["attempt"] for e in events if e["event"] == "relaunched"] == [2, 3]
    assert attempts_never_overlap(side)
    gone(job)


def test_one_background_supervisor_per_store_and_it_goes_away(burst_env, tmp_path):
    """One at a time per Store, below the notebook's CPU priority; a stop finds it even while it starts; it leaves
    once idle, or once its state folder is gone."""
    settings = Burst().settings
    url = Burst().store.url
    lock = laptop.lock_path(settings, url)
    starting = laptop.ensure(settings, url)
    assert laptop.stop(lock) == starting  # still starting: named in the lock file, not holding it yet
    assert not psutil.pid_exists(starting) or psutil.Process(starting).status() == psutil.STATUS_ZOMBIE

    first = laptop.ensure(settings, url)
    wait_until(lambda: laptop.running(lock) == first, 120, what="the supervisor to start")
    assert psutil.Process(first).nice() == os.getpriority(os.PRIO_PROCESS, 0) + laptop.NICENESS  # below ours
    assert laptop.ensure(settings, url) is None  # one runs already
    laptop.stop(lock)

    env = laptop.environment(settings, url)
    quick = subprocess.Popen([sys.executable, "-m", "nbburst.client.supervision.laptop", "--idle", "0.5"], env=env)
    assert quick.wait(60) == 0  # no job to watch: it leaves after its idle time
    lasting = subprocess.Popen([sys.executable, "-m", "nbburst.client.supervision.laptop", "--idle", "600"], env=env)
    try:
        wait_until(lambda: laptop.running(lock) == lasting.pid, 120, what="the supervisor to start")
        lock.unlink()  # its state folder is gone (a temporary one, removed)
        assert lasting.wait(120) == 0
    finally:
        if lasting.poll() is None:
            lasting.kill()
            lasting.wait()
