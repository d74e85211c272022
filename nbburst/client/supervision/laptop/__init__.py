"""The background process on this computer: a preempted job is relaunched even when no notebook waits for it.

A waiting cell supervises its own job and the Jupyter server the others, but a job submitted from a script
that has since exited, or from a kernel shut down with no server around, would have nobody. So a submission
whose machines only this computer can relaunch (the local backend) makes sure that one background process
supervises its Store (:func:`ensure`): ``python -m nbburst.client.supervision.laptop`` (its program is this
package's ``__main__``), detached in a session of its own, below the notebook's CPU priority, its output in
``<state>/supervise/``. It runs the supervision loop (:mod:`..loop`) every ``INTERVAL_SECONDS`` and exits once it
has seen no unfinished job it can act on (one whose key it holds and can verify) for ``IDLE_SECONDS``, on
SIGTERM, or once its state folder is gone, handing its leases back either way.

One per Store and state folder: it holds an exclusive lock (``flock``) on
``<state>/supervise/<hash of the Store URL>.lock`` while it lives and writes its pid there, so a second one
exits at once, :func:`ensure` starts none while one runs, and the lock tells who to stop (:func:`stop`). It is
one more supervisor among the others (the kernel's fast path, the server): the job's lease keeps them from
relaunching the same attempt twice.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from .... import config
from ....store.base import elapsed

STOP_SECONDS = 10.0
#: How far below the notebook's CPU priority the supervisor runs. It polls once a second and is never in a
#: hurry; started by a cell, its imports and first pass (0.1 s of CPU) would otherwise take a core from that
#: cell's kernel or machine (0.05 s more for a session's first cell on a 2-CPU laptop).
NICENESS = 10


def lock_path(settings: config.NBBurst, store_url: str) -> Path:
    """The lock (and pid) file of the background supervisor of ``store_url``."""
    digest = hashlib.sha256(store_url.encode()).hexdigest()[:16]
    return config.state_dir(settings) / "supervise" / f"{digest}.lock"


def running(lock: Path) -> int | None:
    """The pid of the supervisor holding ``lock``, or None when none holds it."""
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.pread(fd, 64, 0).decode(errors="replace").split()
        return int(text[0]) if text and text[0].isdigit() else -1
    else:
        return None
    finally:
        os.close(fd)  # releases the lock if we took it


def environment(settings: config.NBBurst, store_url: str) -> dict[str, str]:
    """This session's effective settings as ``NBBURST_*`` variables, so the background process sees what it sees."""
    env = dict(os.environ)
    for name, entry in config.describe(settings).items():
        if entry["source"] != "default":
            value = entry["value"]
            env[config.ENV_PREFIX + name.upper()] = json.dumps(value) if isinstance(value, dict) else str(value)
    env[config.ENV_PREFIX + "ROOT"] = store_url
    env[config.ENV_PREFIX + "STATE_DIR"] = str(config.state_dir(settings))
    return env


def ensure(settings: config.NBBurst, store_url: str) -> int | None:
    """Start the background supervisor of ``store_url`` unless one runs; returns the pid of a new one."""
    lock = lock_path(settings, store_url)
    if running(lock) is not None:
        return None
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock.with_suffix(".log"), "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nbburst.client.supervision.laptop"],
            env=environment(settings, store_url),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # neither a terminal's Ctrl-C nor the submitter's end reaches it
            close_fds=True,
            cwd=str(lock.parent),
        )
    try:
        os.setpriority(os.PRIO_PROCESS, proc.pid, os.getpriority(os.PRIO_PROCESS, 0) + NICENESS)
    except OSError:  # gone already (another one held the lock): nothing to lower
        pass
    threading.Thread(target=proc.wait, daemon=True, name="nbburst-reap-supervisor").start()
    if running(lock) is None:  # not locked yet: name it, so that a stop right away finds it (see stop)
        lock.write_text(f"{proc.pid} {psutil.Process(proc.pid).create_time()}")
    return proc.pid


def stop(lock: Path, timeout: float = STOP_SECONDS) -> int | None:
    """Stop the background supervisor of ``lock`` (SIGTERM, then SIGKILL), also one still starting (named in the
    lock file, not holding the lock yet); returns its pid, if one ran."""
    pid = running(lock)
    if pid is None:
        pid = _starting(lock)
    if pid is None or pid <= 0:
        return None
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return pid
    end = elapsed() + timeout
    while _alive(pid) and elapsed() < end:
        time.sleep(0.05)
    if _alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pid


def _starting(lock: Path) -> int | None:
    """The supervisor :func:`ensure` started and named in ``lock`` (pid and start time), if it still runs."""
    try:
        pid, started = lock.read_text().split()
        return int(pid) if psutil.Process(int(pid)).create_time() == float(started) and _alive(int(pid)) else None
    except (OSError, ValueError, psutil.Error):
        return None


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, waiting for its parent to reap it, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stop_all(settings: config.NBBurst) -> list[int]:
    """Stop every background supervisor of this state folder (whatever its Store); returns their pids."""
    stopped = (stop(lock) for lock in (config.state_dir(settings) / "supervise").glob("*.lock"))
    return [pid for pid in stopped if pid is not None]
