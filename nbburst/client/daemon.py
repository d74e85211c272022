"""The background supervisor: a preempted job is relaunched even when no notebook waits for it.

A waiting cell supervises its own job and the Jupyter server the others, but a
job submitted from a script that has since exited, or from a kernel shut down
with no server around, would have nobody. So a submission whose machines only
this computer can relaunch (the local backend) makes sure that one background
supervisor runs for its Store (:func:`.background.ensure`): this program,
detached in a session of its own, its output in ``<state>/supervise/``. It runs
:func:`~.supervisor.run_once` every ``INTERVAL_SECONDS`` and exits once it has
seen no unfinished job it can act on (one whose key it holds and can verify)
for ``IDLE_SECONDS``, on SIGTERM, or once its state folder is gone, handing its
leases back either way.

One per Store and state folder: it holds an exclusive lock (``flock``) on
``<state>/supervise/<hash of the Store URL>.lock`` while it lives, so a second
one exits at once, and ``ensure`` checks that lock before it starts one. It
is one more supervisor among the others (the kernel's fast path, the server):
the job's lease keeps them from relaunching the same attempt twice.

On Compute Engine the same loop runs on Google's side, on the Store's watcher
VM (:mod:`.watch`, :mod:`nbburst.machines.gce.watcher`), so that a detached job
survives with the laptop closed.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import config
from ..store.base import elapsed
from .background import lock_path

if TYPE_CHECKING:
    from .burst import Burst

INTERVAL_SECONDS = 1.0
IDLE_SECONDS = 20.0


def serve(
    interval: float = INTERVAL_SECONDS,
    idle: float = IDLE_SECONDS,
    before_round: Callable[[Burst], None] | None = None,
    stopping: threading.Event | None = None,
) -> int:
    """The daemon itself: supervise until idle, told to stop, or its state folder is gone. Exits at once when
    another one runs. ``before_round``: called before each round (the watcher VM fetches job keys there);
    ``stopping``: set on SIGTERM (the caller may look at it afterwards)."""
    settings = config.load()
    lock = lock_path(settings, config.store_url(settings))
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken first thing: a stop finds who to stop
    except BlockingIOError:
        return 0  # another one runs
    stopping = stopping or threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    from .burst import Burst
    from .supervisor import Supervisor, run_once

    burst = Burst(settings)
    supervisors: dict[str, Supervisor] = {}
    ended: set[str] = set()
    print(f"nbburst supervise: pid {os.getpid()} watching {burst.store.url}", flush=True)
    last_busy = elapsed()
    try:
        while not stopping.is_set() and lock.exists():
            os.ftruncate(fd, 0)  # every round: a submitter that raced to start another one may have written here
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            try:
                if before_round is not None:
                    before_round(burst)
                run_once(burst, supervisors, ended=ended)
            except Exception as exc:  # the Store is unreachable for now: the next round tries again
                print(f"nbburst supervise: {type(exc).__name__}: {exc}", flush=True)
            if supervisors:
                last_busy = elapsed()
            elif elapsed() - last_busy > idle:
                break
            stopping.wait(interval)
    finally:
        for sup in supervisors.values():
            sup.lease.release()
        os.ftruncate(fd, 0)
        os.close(fd)
    print(f"nbburst supervise: pid {os.getpid()} done", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbburst.client.daemon", description=__doc__.split("\n")[0])
    parser.add_argument("--interval", type=float, default=INTERVAL_SECONDS, help="seconds between rounds")
    parser.add_argument("--idle", type=float, default=IDLE_SECONDS, help="exit after this many seconds idle")
    args = parser.parse_args(argv)
    return serve(args.interval, args.idle)


if __name__ == "__main__":
    sys.exit(main())
