"""Chaos: jobs preempted at random points, several times each; every one must end as if nothing happened.

Seeded (``NBBURST_CHAOS_SEED``), small enough for CI. Each job runs a checkpointed loop and is
preempted while booting, while the agent prepares the machine (environment check, checkpoint
restore), in the middle of the loop, or while it writes the result. Two supervisors compete for
every job (the waiting "kernel" and a long-lived ``run_forever``), so the lease and the
create-only attempt claims are exercised too. At the end: every job SUCCEEDED with the result of
an uninterrupted run; every attempt's output is exactly what that attempt printed, once, in order;
no machine is left. It prints how many preemptions the jobs survived.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter

import pytest
from test_survival import expected_loop, gone, printed, submit

from nbburst.client import supervisor
from nbburst.client.burst import Burst, Job
from nbburst.errors import UsageError
from nbburst.protocol.job import State

SEED = int(os.environ.get("NBBURST_CHAOS_SEED", "20261121"))
PHASES = ("booting", "environment", "mid-run", "writing the result")

CELL = """
import nbburst, os, time
side = open(SIDE, "a")
attempt = os.environ.get("NBBURST_ATTEMPT", "?")
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


def cell(side: str, steps: int, pause: float) -> str:
    return CELL.replace("SIDE", repr(side)).replace("STEPS", str(steps)).replace("PAUSE", str(pause))


class Driver:
    """Preempts one job as planned, and supervises it like a waiting kernel."""

    def __init__(self, job: Job, plan: list[tuple[str, float]], rng: random.Random, steps: int, pause: float):
        self.job, self.plan, self.rng, self.steps, self.pause = job, plan, rng, steps, pause
        self.done: list[str] = []  # the phases at which a preemption was delivered
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for phase, grace in self.plan:
                attempt = self.job.attempt
                if not self._trigger(phase, attempt):
                    continue
                try:
                    self.job.preempt(grace)
                except UsageError:
                    continue  # the machine was gone already (the job ended, or it is between attempts)
                self.done.append(phase)
                self._until(lambda a=attempt: self.job.attempt > a, 30)
            self.job.wait(timeout=120)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _until(self, cond, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.job.supervise().terminal:
                return False
            if cond():
                return True
            time.sleep(0.02)
        return False

    def _trigger(self, phase: str, attempt: int) -> bool:
        job = self.job
        if phase == "booting":  # the machine exists, the agent is still starting Python
            ok = self._until(lambda: job.machines.list(job.id) != [], 10)
            time.sleep(self.rng.uniform(0, 0.05))
            return ok
        if phase == "environment":  # the agent is up, checking the environment and restoring
            return self._until(
                lambda: (
                    (s := job.latest_status()) is not None
                    and s.attempt == attempt
                    and s.message == "restoring checkpoints"
                ),
                10,
            )
        if phase == "mid-run":
            k = self.rng.randint(1, 3)
            return self._until(lambda: len([x for x in printed(job, attempt) if x.startswith("step")]) >= k, 20)
        last = f"step {self.steps - 1}"
        ok = self._until(lambda: last in printed(job, job.attempt), 30)
        time.sleep(self.rng.uniform(self.pause, self.pause + 0.15))
        return ok


def check_logs(job: Job, side_lines: list[str], streamed: list[dict]) -> None:
    """Each attempt's shipped output is what it printed: complete, once, in order."""
    by_attempt: dict[str, list[str]] = {}
    for line in side_lines:
        attempt, text = line.split(" ", 1)
        by_attempt.setdefault(attempt, []).append(text)
    for row in job.attempts():
        a = row["attempt"]
        shipped = printed(job, a)
        wrote = by_attempt.get(str(a), [])
        # printed lines == lines the cell wrote down before printing them; the last may have been
        # written down without being printed when the soft-off came between the two
        assert shipped in (wrote, wrote[:-1]), (a, shipped, wrote)
        got = [ln for r in streamed if r.get("attempt") == a and r["s"] == "stdout" for ln in r["x"].splitlines()]
        assert got == shipped, (a, got, shipped)
    markers = [r["x"] for r in streamed if r["s"] == "event" and r["x"].startswith("--- attempt")]
    assert len(markers) == len(set(markers))


def chaos(
    backend: str,
    burst: Burst,
    tmp_path,
    jobs: int,
    preemptions: int,
    steps: int,
    pause: float,
    graces: tuple[float, ...],
) -> None:
    rng = random.Random(SEED)
    stop = threading.Event()
    hosted = threading.Thread(target=supervisor.run_forever, args=(burst, 0.3, stop), daemon=True)
    hosted.start()
    drivers, tails, streams, sides = [], [], [], []
    for n in range(jobs):
        side = tmp_path / f"side-{n}.txt"
        job = submit(burst, cell(str(side), steps, pause), max_restarts=preemptions + 2)
        plan = [(rng.choice(PHASES), rng.choice(graces)) for _ in range(preemptions)]
        if n < len(PHASES):
            plan[0] = (PHASES[n], plan[0][1])  # every phase is hit at least once
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
    stop.set()
    hosted.join(10)
    survived: Counter[str] = Counter()
    for d, tail, stream, side in zip(drivers, tails, streams, sides, strict=True):
        stream.extend(tail.poll())
        assert d.error is None, d.error
        assert d.job.state == State.SUCCEEDED, (d.job.id, d.job.terminal(), d.job.attempts())
        assert d.job.outcome().values["result"] == expected_loop(steps)
        rows = d.job.attempts()
        assert [r["attempt"] for r in rows] == list(range(1, len(rows) + 1))
        assert all(r["state"] == "PREEMPTED" for r in rows[:-1]) and rows[-1]["state"] == "SUCCEEDED"
        check_logs(d.job, side.read_text().splitlines() if side.exists() else [], stream)
        relaunches = len(rows) - 1
        # a preemption after the result was committed needs no relaunch; any other one needs exactly one
        assert relaunches <= len(d.done)
        for phase in d.done[:relaunches]:
            survived[phase] += 1
    for d in drivers:
        gone(d.job, timeout=20)
    total = sum(survived.values())
    print(
        f"\nchaos[{backend}] seed {SEED}: {jobs} jobs survived {total} preemptions "
        f"({', '.join(f'{p}: {survived[p]}' for p in PHASES)})"
    )
    assert total >= jobs  # every job was relaunched at least once


@pytest.mark.parametrize("backend", ["local", "gce"])
def test_chaos(backend, burst_env, tmp_path, request, monkeypatch):
    monkeypatch.setenv("NBBURST_PREEMPT_BUDGET", "0.5")
    if backend == "gce":
        request.getfixturevalue("emulator_env")
        chaos("gce", Burst(), tmp_path, jobs=1, preemptions=2, steps=8, pause=0.3, graces=(3.0,))
    else:
        chaos("local", Burst(), tmp_path, jobs=4, preemptions=3, steps=10, pause=0.15, graces=(1.0, 3.0))
