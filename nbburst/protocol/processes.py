"""An attempt's processes, found by their marker: ``NBBURST_ATTEMPT=<job>:<attempt>`` in their environment.

Every process of an attempt carries the marker from the start (agent/attempt/spawn.py),
so ``/proc/<pid>/environ`` shows it even for a process that left the runner's
group (``setsid``, a double fork) or whose agent is gone. :func:`sweep` ends
them: the agent at the end of its attempt (and, at its start, what earlier
attempts left on the machine), the local backend when it deletes a machine.
Linux only (``/proc``); elsewhere nothing is found.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

from .job import ENV_ATTEMPT

SWEEP_SECONDS = 3.0


def every(attempt: int) -> bool:
    """The default filter: every attempt."""
    return True


def _attempt_of_environ(environ: bytes, job_id: str) -> int | None:
    """The attempt of ``job_id`` that a process's environment (NUL-separated) marks it with, if any."""
    needle = f"\0{ENV_ATTEMPT}={job_id}:".encode()
    at = environ.find(needle)
    if at < 0:
        return None
    value = environ[at + len(needle) : environ.find(b"\0", at + len(needle))]
    return int(value) if value.isdigit() else None


def _environ(pid: int) -> bytes | None:
    """A live process's environment as it was started (NUL-separated, with a leading NUL); None for a zombie,
    a process gone meanwhile or one not ours to read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        if stat[stat.rindex(b")") + 2 :][:1] in (b"Z", b"X"):
            return None
        with open(f"/proc/{pid}/environ", "rb") as f:
            return b"\0" + f.read()
    except (OSError, ValueError):
        return None


def marked(job_id: str, attempts: Callable[[int], bool] = every) -> list[int]:
    """Live processes (this one aside) marked with an attempt of ``job_id`` that ``attempts`` accepts.
    Linux /proc; elsewhere none."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    me, found = os.getpid(), []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        environ = _environ(int(entry))
        attempt = _attempt_of_environ(environ, job_id) if environ else None
        if attempt is not None and attempts(attempt):
            found.append(int(entry))
    return found


def sweep(job_id: str, attempts: Callable[[int], bool] = every, seconds: float = SWEEP_SECONDS) -> set[int]:
    """SIGKILL every process :func:`marked` with an attempt of ``job_id`` that ``attempts`` accepts (again
    while new ones appear, for up to ``seconds``); returns the pids killed."""
    killed: set[int] = set()
    end = time.monotonic() + seconds
    while True:
        found = marked(job_id, attempts)
        if not found or time.monotonic() > end:
            return killed
        for pid in found:
            if _kill(pid, job_id, attempts):
                killed.add(pid)
        time.sleep(0.01)


def _kill(pid: int, job_id: str, attempts: Callable[[int], bool]) -> bool:
    """SIGKILL ``pid`` if it still carries a marker ``attempts`` accepts: through a pidfd where there is one,
    so that a pid reused meanwhile is never hit."""
    opener = getattr(os, "pidfd_open", None)
    try:
        fd = opener(pid) if opener else None
    except OSError:
        return False
    try:
        environ = _environ(pid)
        attempt = _attempt_of_environ(environ, job_id) if environ else None
        if attempt is None or not attempts(attempt):
            return False
        if fd is None:
            os.kill(pid, signal.SIGKILL)
        else:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        if fd is not None:
            os.close(fd)
