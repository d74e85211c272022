"""The background process's program: ``python -m nbburst.client.supervision.laptop [--interval S] [--idle S]``.

Started by :func:`.ensure` (see the package's docstring): the supervision loop (:mod:`..loop`) with this
process's hooks, under the Store's lock. Its pid goes into the lock file before every round, as a submitter that
raced to start another one may have written there.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
from typing import TYPE_CHECKING

from .... import config
from . import lock_path

if TYPE_CHECKING:
    from ...burst import Burst

INTERVAL_SECONDS = 1.0
IDLE_SECONDS = 20.0


def serve(interval: float = INTERVAL_SECONDS, idle: float = IDLE_SECONDS) -> int:
    """Supervise until idle, told to stop, or the state folder is gone. Exits at once when another one runs."""
    settings = config.load()
    lock = lock_path(settings, config.store_url(settings))
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken first thing: a stop finds who to stop
    except BlockingIOError:
        return 0  # another one runs
    from ...burst import Burst  # only once the lock is ours: a second one leaves without importing them
    from ..loop import Loop, stop_on_sigterm

    stopping = stop_on_sigterm()

    def name_this_process(burst: Burst) -> None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)

    try:
        Loop(Burst(settings), interval, idle=idle, alive=lock.exists, before_round=name_this_process).serve(stopping)
    finally:
        os.ftruncate(fd, 0)
        os.close(fd)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nbburst.client.supervision.laptop",
        description="The background supervisor of a Store: relaunches its preempted jobs while no notebook waits.",
    )
    parser.add_argument("--interval", type=float, default=INTERVAL_SECONDS, help="seconds between rounds")
    parser.add_argument("--idle", type=float, default=IDLE_SECONDS, help="exit after this many seconds idle")
    args = parser.parse_args(argv)
    return serve(args.interval, args.idle)


if __name__ == "__main__":
    sys.exit(main())
