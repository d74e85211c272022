"""Writes that wait, in place, for a Store that cannot take them for now, before anything is given up.

A full disk that someone frees, a remount read-write, a bucket's write permission given back: a spell the
Store's own retries (seconds) do not outlast. A verdict the cell has computed is worth waiting for, since a
relaunch would compute it again; so the controller's writes that end an attempt (the verdict, the job's end)
are tried again with a growing pause for up to ``$NBBURST_STORE_WAIT`` seconds (:data:`DEFAULT_WAIT`). Only
then does the error stand, and the job fails with it as its cause (:mod:`...protocol.cause`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

from ...store import AlreadyExists, NotFound, StoreError

T = TypeVar("T")

ENV_WAIT = "NBBURST_STORE_WAIT"
#: Seconds a write that ends an attempt waits for the Store, unless ``$NBBURST_STORE_WAIT`` says otherwise.
DEFAULT_WAIT = 300.0
FIRST_PAUSE, LONGEST_PAUSE = 0.5, 30.0


def wait_seconds() -> float:
    """How long a write that ends an attempt waits for the Store: ``$NBBURST_STORE_WAIT``, else the default."""
    raw = os.environ.get(ENV_WAIT, "").strip()
    if not raw:
        return DEFAULT_WAIT
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if seconds < 0:
        raise ValueError(f"${ENV_WAIT}={raw!r} is not a number of seconds; set it to one (e.g. 300) or unset it")
    return seconds


def patiently(what: str, write: Callable[[], T], say: Callable[[str], None]) -> T:
    """``write()``, tried again while the Store fails it, for up to :func:`wait_seconds`; ``what`` names the
    write in what ``say`` tells the user (once, at the first failure). The answers of a Store that works
    (``NotFound``, ``AlreadyExists``) are not failures: they are raised at once."""
    deadline = time.monotonic() + wait_seconds()
    pause, said = FIRST_PAUSE, False
    while True:
        try:
            return write()
        except (NotFound, AlreadyExists):
            raise
        except StoreError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            if not said:
                say(f"nbburst: could not {what} ({exc}); trying again for up to {left:.0f} s (${ENV_WAIT})")
                said = True
            time.sleep(min(pause, left))
            pause = min(pause * 2, LONGEST_PAUSE)
