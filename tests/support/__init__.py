"""Helpers shared by the tests: waiting for a condition, waiting for machines to go, finding and ending
local machines, a cell that is surely in flight when its machine is taken."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psutil

T = TypeVar("T")

#: Compute Engine quotas of a project that asked for more than a new one has (the emulator's default): room
#: for a 64-vCPU plan and a few GPUs of each model, spot or standard.
LARGE_QUOTAS = {
    "CPUS": 128,
    "CPUS_ALL_REGIONS": 128,
    "N2_CPUS": 128,
    "C2D_CPUS": 128,
    "A2_CPUS": 48,
    "GPUS_ALL_REGIONS": 8,
    "NVIDIA_T4_GPUS": 4,
    "PREEMPTIBLE_NVIDIA_T4_GPUS": 4,
    "NVIDIA_L4_GPUS": 4,
    "PREEMPTIBLE_NVIDIA_L4_GPUS": 4,
    "NVIDIA_A100_GPUS": 4,
}


def wait_until(predicate: Callable[[], T], timeout: float = 120.0, step: float = 0.05, what: str = "") -> T:
    """Poll ``predicate`` until it returns something true, and return that; fail after ``timeout`` s.

    The default deadline is for a machine whose two cores other work keeps busy: waiting costs nothing when
    the condition comes at once, and a deadline sized for an idle machine fails a test that is right."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(step)


def machines_gone(machines: Any, job_id: str | None = None, timeout: float = 60.0) -> None:
    """Wait until the Machines adapter ``machines`` lists none (of ``job_id``, or at all); fail after ``timeout`` s.

    An agent ends its own machine a moment after it commits the job's end.
    """
    what = f"the machine of {job_id} to go" if job_id else "every machine to go"
    wait_until(lambda: not machines.list(job_id), timeout, what=what)


def agents_under(root: str) -> list[psutil.Process]:
    """Agent processes (local machines) running jobs of the Store at ``root``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
        except psutil.Error:
            continue
        if "nbburst.agent" in cmd and root in cmd:
            found.append(proc)
    return found


def kill_agents(root: str, grace: float = 5.0) -> list[int]:
    """Give agents of ``root`` ``grace`` s to exit, then kill their process groups; returns the pids killed."""
    _gone, leftovers = psutil.wait_procs(agents_under(root), timeout=grace)
    for proc in leftovers:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    psutil.wait_procs(leftovers, timeout=5)
    return [p.pid for p in leftovers]


def jobs_in(env) -> list[str]:
    jobs = env["root"] / "jobs"
    return sorted(p.name for p in jobs.iterdir()) if jobs.exists() else []


def held_cell(started: Path, then: str) -> str:
    """The code of a cell that, the first time it runs, creates ``started`` and then runs until its machine is
    taken (preempted, or the job cancelled); run again (its relaunch), it runs ``then`` at once.

    A test waits for ``started`` and then preempts: the cell is still running then, however slow a loaded
    machine is, where a cell that sleeps a few seconds may already have ended (and the test then sees no
    relaunch at all)."""
    path = repr(str(started))
    return (
        "import os, time\n"
        f"if not os.path.exists({path}):\n"
        f"    open({path}, 'w').close()\n"
        "    while True:\n"
        "        time.sleep(0.1)\n"
        f"{then}"
    )


def held_call(started: str, value: Any = None) -> Any:
    """A job's function, as :func:`held_cell` is a cell: its first run creates ``started`` and runs until its
    machine is taken; its relaunch returns ``value`` at once."""
    if not os.path.exists(started):
        open(started, "w").close()
        while True:
            time.sleep(0.1)
    return value


def unreachable_push(folder: Path, name: str) -> None:
    """Make the session ``name`` (its record in the sessions' ``folder``) announce its VM's push channel where
    nothing listens, as when no firewall rule admits the notebook: its cells then go through the Store."""
    import json
    import socket

    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    path = folder / f"{name}.json"
    record = json.loads(path.read_text())
    record["push"] = {**record["push"], "host": "127.0.0.1", "port": port}
    path.write_text(json.dumps(record))
