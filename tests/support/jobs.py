"""Cells and job helpers shared by the survival, chaos and integrity tests: a checkpointed loop and its
expected result, submitting a cell, reading what an attempt printed, finding an attempt's agent."""

from __future__ import annotations

from pathlib import Path

import psutil

from nbburst.client.burst import Burst
from nbburst.client.capture import capture
from nbburst.client.job import Job
from nbburst.protocol import processes
from support import machines_gone

LOOP = """
import nbburst, time
acc = nbburst.checkpoint.load("acc", default=1)
for i in nbburst.checkpoint.range(STEPS):
    acc = (acc * 31 + i) % 1_000_003
    nbburst.checkpoint.save("acc", acc)
    print("step", i, flush=True)
    time.sleep(PAUSE)
result = acc
"""


def loop_code(steps: int = 10, pause: float = 0.2) -> str:
    return LOOP.replace("STEPS", str(steps)).replace("PAUSE", str(pause))


def expected_loop(steps: int = 10) -> int:
    acc = 1
    for i in range(steps):
        acc = (acc * 31 + i) % 1_000_003
    return acc


def submit(burst: Burst, code: str, namespace: dict | None = None, **options) -> Job:
    return burst.submit_cell(code, capture(code, namespace or {}, None, set()), burst.options(**options))


def gone(job: Job, timeout: float = 60.0) -> None:
    """The job's machine has gone (an agent exits a moment after it commits the verdict)."""
    machines_gone(job.machines, job.id, timeout)


def printed(job: Job, attempt: int) -> list[str]:
    return [line for r in job.tail().records(attempt) if r["s"] == "stdout" for line in r["x"].splitlines()]


def running_step(job: Job, at_least: int) -> bool:
    """The current attempt has printed ``step N`` with N >= at_least."""
    lines = printed(job, job.attempt)
    return any(line.startswith("step ") and int(line.split()[1]) >= at_least for line in lines)


SIDE_LOOP = """
import nbburst, os, subprocess, time
attempt = os.environ["NBBURST_ATTEMPT"].rpartition(":")[2]
subprocess.Popen(["sleep", "600"], start_new_session=True)  # a process that leaves the cell's group
acc = nbburst.checkpoint.load("acc", default=1)
with open(SIDE, "a") as side:
    for i in nbburst.checkpoint.range(STEPS):
        acc = (acc * 31 + i) % 1_000_003
        nbburst.checkpoint.save("acc", acc)
        side.write(f"{attempt} step {i}\\n")
        side.flush()
        print("step", i, flush=True)
        time.sleep(PAUSE)
result = acc
"""


def side_loop(side: Path, steps: int, pause: float) -> str:
    return SIDE_LOOP.replace("SIDE", repr(str(side))).replace("STEPS", str(steps)).replace("PAUSE", str(pause))


def attempts_never_overlap(side: Path) -> bool:
    """No attempt wrote a line after a later attempt had begun: attempts ran one at a time."""
    newest = 0
    for line in side.read_text().splitlines():
        attempt = int(line.split()[0])
        if attempt < newest:
            return False
        newest = attempt
    return True


def agent_of(job: Job, attempt: int) -> psutil.Process | None:
    """The agent (controller) of an attempt: the process marked with it whose parent is not."""
    marked = set(processes.marked(job.id, lambda n: n == attempt))
    for pid in marked:
        try:
            proc = psutil.Process(pid)
            if "nbburst.agent" in " ".join(proc.cmdline()) and proc.ppid() not in marked:
                return proc
        except psutil.Error:
            continue
    return None
