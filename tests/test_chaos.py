"""Chaos: jobs preempted and killed at random points, under a flaky Store and a skewed supervisor; every one must
end as if nothing happened.

Seeded (``NBBURST_CHAOS_SEED``), small enough for CI. Each job runs a checkpointed loop that also leaves
processes behind (one started in a session of its own, one forked and detached without ``exec``). It is hit
several times, each time by a preemption (a soft-off with a grace) or a ``kill -9`` of its agent, while its
machine boots, while the agent prepares it (environment check, checkpoint restore), around the fork of the
cell's process, in the middle of the loop, or while it writes the result. Meanwhile 30% of the Store's
operations fail (a flaky folder on the local backend, 503 answers from the GCS emulator on Compute Engine)
and must be retried, and several supervisors compete for every job: the waiting "kernel", a long-lived
supervision loop, the background supervisor of the local backend, and one in a process whose clock is an hour
off, so the lease, the create-only claims and the Store's clock are exercised too.

At the end: every job SUCCEEDED with the result of an uninterrupted run; attempts never ran at the same
time; every attempt's output is what it printed, once, in order (an agent killed with ``kill -9`` may lose
what it had not shipped yet, never more); no process of any attempt and no machine is left.

:func:`chaos` returns a :class:`Report`; ``bench/chaos.py`` runs it over many seeds.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from support.jobs import agent_of, expected_loop, gone, printed, submit

from nbburst.client.burst import Burst
from nbburst.client.job import Job
from nbburst.client.supervision.loop import Loop
from nbburst.errors import UsageError
from nbburst.protocol import processes
from nbburst.protocol.job import State

SEED = int(os.environ.get("NBBURST_CHAOS_SEED", "20261121"))
PHASES = ("booting", "environment", "forking", "mid-run", "writing the result")
KILLABLE = ("environment", "forking", "mid-run", "writing the result")  # an agent is there to kill
FAULT_RATE = 0.3
SKEW_SECONDS = 3600.0

CELL = """
import nbburst, os, subprocess, time
side = open(SIDE, "a")
attempt = os.environ.get("NBBURST_ATTEMPT", "?").rpartition(":")[2]
subprocess.Popen(["sleep", "600"], start_new_session=True)  # leaves the cell's process group
if os.fork() == 0:  # and a detached copy of this process, without exec
    os.setsid()
    time.sleep(600)
    os._exit(0)
acc = nbburst.checkpoint.load("acc", default=1)
for i in nbburst.checkpoint.range(STEPS):
    acc = (acc * 31 + i) % 1_000_003
    nbburst.checkpoint.save("acc", acc)
    line = f"step {i}"
    side.write(f"{attempt} {line}\\n")
    side.flush()
    print(line, flush=True)
    time.sleep(PAUSE)
blob = os.urandom(8_000_000)  # a result that takes a moment to write
result = acc
"""

SKEWED_SUPERVISOR = """
import signal, sys, threading, time
real = time.time
time.time = lambda: real() + float(sys.argv[1])  # this supervisor's clock is off
from nbburst.client.burst import Burst
from nbburst.client.supervision.loop import Loop
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
Loop(Burst(), 0.3).run(stop)
"""


def cell(side: str, steps: int, pause: float) -> str:
    return CELL.replace("SIDE", repr(side)).replace("STEPS", str(steps)).replace("PAUSE", str(pause))


@dataclass
class Report:
    """What one chaos run did and found (``problems`` must be empty)."""

    backend: str
    seed: int
    jobs: int = 0
    preemptions: Counter[str] = field(default_factory=Counter)  # delivered, by phase
    kills: Counter[str] = field(default_factory=Counter)  # agents killed with kill -9, by phase
    missed: int = 0  # planned hits that found the job past their phase (or ended)
    relaunches: int = 0
    faults: int = 0  # Store operations that failed on purpose
    lost_lines: int = 0  # printed by an attempt but never shipped (only a killed agent may lose some)
    doubled_lines: int = 0
    overlaps: int = 0  # lines an attempt wrote after a later attempt had started
    orphans: list[str] = field(default_factory=list)  # processes or machines left behind
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        return (
            f"chaos[{self.backend}] seed {self.seed}: {self.jobs} jobs, {sum(self.preemptions.values())} preemptions "
            f"({', '.join(f'{p}: {n}' for p, n in sorted(self.preemptions.items()))}), "
            f"{sum(self.kills.values())} kills ({', '.join(f'{p}: {n}' for p, n in sorted(self.kills.items()))}), "
            f"{self.missed} missed, "
            f"{self.relaunches} relaunches, {self.faults} Store faults, {self.lost_lines} lost and "
            f"{self.doubled_lines} doubled log lines, {self.overlaps} overlapping lines, {len(self.orphans)} orphans, "
            f"{len(self.problems)} problems, {self.seconds:.0f} s"
        )


class Driver:
    """Hits one job as planned, and supervises it like a waiting kernel."""

    def __init__(self, job: Job, plan: list[tuple[str, str, float]], rng: random.Random, steps: int, pause: float):
        self.job, self.plan, self.rng, self.steps, self.pause = job, plan, rng, steps, pause
        self.done: list[tuple[str, str, int]] = []  # (phase, "preempt" | "kill", attempt hit) delivered
        self.missed: list[tuple[str, str]] = []  # planned, but the job had moved on (or ended) first
        self.error: BaseException | None = None
        self.supervised = 0.0

    def run(self) -> None:
        try:
            for phase, action, grace in self.plan:
                attempt = self.job.attempt
                if not self._trigger(phase, attempt) or not self._hit(action, attempt, grace):
                    self.missed.append((phase, action))
                    continue
                self.done.append((phase, action, attempt))
                self._until(lambda a=attempt: self.job.attempt > a, 40)
            self.job.wait(timeout=150)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _hit(self, action: str, attempt: int, grace: float) -> bool:
        if action == "kill":
            agent = agent_of(self.job, attempt)
            if agent is None:
                return False
            try:
                agent.send_signal(signal.SIGKILL)
            except psutil.Error:
                return False
            return True
        try:
            self.job.preempt(grace)
        except UsageError:
            return False  # the machine was gone already (the job ended, or it is between attempts)
        return True

    def _until(self, cond, timeout: float) -> bool:
        """Wait for ``cond`` (polled tightly, to catch short phases), supervising the job every 0.1 s as a
        waiting kernel does; False once the job has ended or after ``timeout``."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if time.monotonic() - self.supervised > 0.1:
                self.supervised = time.monotonic()
                if self.job.supervise().terminal:
                    return False
            if cond():
                return True
            time.sleep(0.01)
        return False

    def _preparing(self, attempt: int) -> bool:
        """The attempt's agent is up and has not started the cell yet (imports, environment, checkpoints)."""
        status = self.job.latest_status()
        if status is None or status.attempt != attempt or status.state != State.PROVISIONING:
            return False
        return status.message == "restoring checkpoints" or agent_of(self.job, attempt) is not None

    def _forking(self, attempt: int) -> bool:
        """The attempt's agent is about to fork the cell's process, or has just done so."""
        status = self.job.latest_status()
        if status is None or status.attempt != attempt:
            return False
        if status.state == State.RUNNING:
            return not printed(self.job, attempt)
        return status.message == "restoring checkpoints"

    def _trigger(self, phase: str, attempt: int) -> bool:
        job = self.job
        if phase == "booting":  # the machine exists, the agent is still starting Python
            ok = self._until(lambda: job.machines.list(job.id) != [], 10)
            time.sleep(self.rng.uniform(0, 0.05))
            return ok
        if phase == "environment":  # the agent is up, checking the environment and restoring
            return self._until(lambda: self._preparing(attempt), 20)
        if phase == "forking":  # just before, while or just after the agent forks the cell's process
            ok = self._until(lambda: self._forking(attempt), 20)
            time.sleep(self.rng.uniform(0, 0.15))
            return ok
        if phase == "mid-run":
            k = self.rng.randint(1, 3)
            return self._until(lambda: len([x for x in printed(job, attempt) if x.startswith("step")]) >= k, 30)
        last = f"step {self.steps - 1}"
        ok = self._until(lambda: last in printed(job, job.attempt), 40)
        time.sleep(self.rng.uniform(self.pause, self.pause + 0.15))
        return ok


def check_logs(job: Job, side_lines: list[str], streamed: list[dict], killed: set[int], report: Report) -> None:
    """Each attempt's shipped output is what it printed: complete, once, in order; an attempt whose agent was
    killed may have lost what it had not shipped yet. Attempts never overlap in time."""
    by_attempt: dict[str, list[str]] = {}
    newest = 0
    for line in side_lines:
        attempt, text = line.split(" ", 1)
        by_attempt.setdefault(attempt, []).append(text)
        if int(attempt) < newest:
            report.overlaps += 1
            report.problems.append(f"{job.id}: attempt {attempt} wrote {text!r} after attempt {newest} had begun")
        newest = max(newest, int(attempt))
    for row in job.attempts():
        a = row["attempt"]
        shipped = printed(job, a)
        wrote = by_attempt.get(str(a), [])
        report.doubled_lines += len(shipped) - len(set(shipped))
        # printed lines == lines the cell wrote down before printing them; the last may have been written down
        # without being printed when the soft-off came between the two; a killed agent loses its unshipped tail
        if a in killed and wrote[: len(shipped)] == shipped:
            report.lost_lines += len(wrote) - len(shipped)
        elif shipped not in (wrote, wrote[:-1]):
            report.lost_lines += max(0, len(wrote) - len(shipped))
            report.problems.append(f"{job.id}: attempt {a} shipped {shipped}, wrote {wrote}")
        got = [ln for r in streamed if r.get("attempt") == a and r["s"] == "stdout" for ln in r["x"].splitlines()]
        if got != shipped:
            report.problems.append(f"{job.id}: attempt {a} streamed {got}, shipped {shipped}")
    markers = [r["x"] for r in streamed if r["s"] == "event" and r["x"].startswith("--- attempt")]
    if len(markers) != len(set(markers)):
        report.problems.append(f"{job.id}: attempt markers streamed twice: {markers}")


def skewed_supervisor(shift: float, log: Path) -> subprocess.Popen:
    """A supervisor in a process of its own whose ``time.time()`` is ``shift`` seconds off."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-c", SKEWED_SUPERVISOR, str(shift)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def chaos(
    backend: str,
    burst: Burst,
    work: Path,
    jobs: int,
    hits: int,
    steps: int,
    pause: float,
    graces: tuple[float, ...],
    seed: int = SEED,
    faults: Callable[[], int] | None = None,
) -> Report:
    """Run the chaos once; ``faults()`` says how many Store faults were injected so far."""
    started = time.monotonic()
    rng = random.Random(seed)
    report = Report(backend, seed, jobs)
    stop = threading.Event()
    hosted = threading.Thread(target=Loop(burst, 0.3).run, args=(stop,), daemon=True)
    hosted.start()
    skewed = skewed_supervisor(rng.choice((SKEW_SECONDS, -SKEW_SECONDS)), work / "skewed-supervisor.log")
    drivers, tails, streams, sides = [], [], [], []
    try:
        for n in range(jobs):
            side = work / f"side-{n}.txt"
            job = submit(burst, cell(str(side), steps, pause), max_restarts=hits + 2, timeout="30m")
            plan = []
            for _ in range(hits):
                phase = rng.choice(PHASES)
                action = "kill" if phase in KILLABLE and rng.random() < 0.35 else "preempt"
                plan.append((phase, action, rng.choice(graces)))
            if n < len(PHASES):  # every phase is hit at least once
                plan[0] = (PHASES[n], plan[0][1] if PHASES[n] in KILLABLE else "preempt", plan[0][2])
            drivers.append(Driver(job, plan, random.Random(rng.random()), steps, pause))
            tails.append(job.tail())
            streams.append([])
            sides.append(side)
        threads = [threading.Thread(target=d.run) for d in drivers]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):  # the cell's view: every record once, markers included
            for tail, stream in zip(tails, streams, strict=True):
                stream.extend(tail.poll())
            time.sleep(0.1)
    finally:
        stop.set()
        skewed.send_signal(signal.SIGTERM)
        try:
            skewed.wait(15)
        except subprocess.TimeoutExpired:
            skewed.kill()
            skewed.wait()
        hosted.join(10)
    for d, tail, stream, side in zip(drivers, tails, streams, sides, strict=True):
        stream.extend(tail.poll())
        if d.error is not None:
            report.problems.append(f"{d.job.id}: {type(d.error).__name__}: {d.error}")
            continue
        report.missed += len(d.missed)
        for phase, action, _ in d.done:
            (report.kills if action == "kill" else report.preemptions)[phase] += 1
        state = d.job.state
        if state != State.SUCCEEDED:
            report.problems.append(f"{d.job.id} ended {state.value}: {d.job.terminal()} {d.job.attempts()}")
            continue
        if d.job.outcome().values["result"] != expected_loop(steps):
            report.problems.append(f"{d.job.id}: wrong result")
        rows = d.job.attempts()
        report.relaunches += len(rows) - 1
        if [r["attempt"] for r in rows] != list(range(1, len(rows) + 1)):
            report.problems.append(f"{d.job.id}: attempts {[r['attempt'] for r in rows]}")
        if not (all(r["state"] == "PREEMPTED" for r in rows[:-1]) and rows[-1]["state"] == "SUCCEEDED"):
            report.problems.append(f"{d.job.id}: attempts {[(r['attempt'], r['state']) for r in rows]}")
        # a hit after the result was committed needs no relaunch; any other one needs exactly one
        if len(rows) - 1 > len(d.done):
            report.problems.append(f"{d.job.id}: {len(rows) - 1} relaunches for {len(d.done)} hits")
        killed = {attempt for _, action, attempt in d.done if action == "kill"}
        check_logs(d.job, side.read_text().splitlines() if side.exists() else [], stream, killed, report)
    for d in drivers:
        try:
            gone(d.job, timeout=30)
        except AssertionError:
            report.orphans.append(f"machine of {d.job.id}")
        for pid in processes.marked(d.job.id):
            report.orphans.append(f"process {pid} of {d.job.id}")
    report.problems += [f"left behind: {o}" for o in report.orphans]
    report.faults = faults() if faults else 0
    report.seconds = time.monotonic() - started
    return report


@pytest.mark.parametrize("backend", ["local", "gce"])
def test_chaos(backend, burst_env, tmp_path, request, monkeypatch):
    monkeypatch.setenv("NBBURST_PREEMPT_BUDGET", "0.5")
    if backend == "gce":
        env = request.getfixturevalue("emulator_env")
        emulator = request.getfixturevalue("gcs_emulator")
        if emulator.kind != "fake-gcs-server":
            pytest.skip("Store faults on GCS need fake-gcs-server")
        bucket = env["NBBURST_ROOT"][len("gs://") :].split("/")[0]
        before = emulator.faults_injected
        emulator.set_faults(bucket, FAULT_RATE)
        try:
            report = chaos(
                "gce",
                Burst(),
                tmp_path,
                jobs=1,
                hits=2,
                steps=8,
                pause=0.3,
                graces=(3.0,),
                faults=lambda: emulator.faults_injected - before,
            )
        finally:
            emulator.set_faults(bucket, 0)
    else:
        from nbburst.store import ENV_STORES
        from nbburst.testing.faults import ENV_LOG, ENV_RATE, STORES, injected

        log = tmp_path / "faults.log"
        monkeypatch.setenv("NBBURST_ROOT", f"flaky://{burst_env['root']}")
        monkeypatch.setenv(ENV_STORES, STORES)
        monkeypatch.setenv(ENV_RATE, str(FAULT_RATE))
        monkeypatch.setenv(ENV_LOG, str(log))
        report = chaos(
            "local",
            Burst(),
            tmp_path,
            jobs=4,
            hits=3,
            steps=10,
            pause=0.15,
            graces=(1.0, 3.0),
            faults=lambda: injected(log),
        )
    print("\n" + report.line())
    assert not report.problems, "\n".join(report.problems)
    assert sum(report.preemptions.values()) + sum(report.kills.values()) >= report.jobs  # every job was hit
    assert report.faults > 0
