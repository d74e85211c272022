"""A Store that fails now and then, to show that nbburst survives a flaky one (chaos tests, bench/chaos.py).

``flaky:///some/folder`` is a :class:`~nbburst.store.local.LocalStore` whose file
operations fail with ``EIO`` on a share of their tries (``$NBBURST_FLAKY_RATE``,
default 0.3), as a flaky disk or network file system does. The failures are
injected where a real one would strike, below the store's own retry
(:meth:`~nbburst.store.local.LocalStore.run_io`), so what is tested is that the
retry absorbs them, not that callers happen to. nbburst itself does not know the
scheme: a test or benchmark that wants it sets ``$NBBURST_STORES`` to :data:`STORES`
(:data:`nbburst.store.ENV_STORES`), so that it, and the agents and supervisors it
starts, open the same flaky store from a job's URL. ``$NBBURST_FLAKY_LOG`` names a
file that gets one line per injected failure, so a test or benchmark can count
them across processes.

On Cloud Storage the same faults come from the emulator
(:meth:`nbburst.testing.gcs.GCSEmulator.set_faults`): 503 answers that the
google-cloud-storage client retries.
"""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Callable
from typing import TypeVar

from ..store.local import LocalStore

T = TypeVar("T")

SCHEME = "flaky://"
#: The ``$NBBURST_STORES`` entry that opens ``flaky://`` URLs with :class:`FlakyStore`.
STORES = f"flaky={__name__}:FlakyStore"
ENV_RATE = "NBBURST_FLAKY_RATE"
ENV_LOG = "NBBURST_FLAKY_LOG"
DEFAULT_RATE = 0.3


class FlakyStore(LocalStore):
    """A LocalStore at ``flaky://PATH`` whose file operations fail transiently ``rate`` of the time."""

    def __init__(self, url: str, rate: float | None = None):
        if not url.startswith(SCHEME):
            raise ValueError(f"not a flaky store URL: {url!r} (expected {SCHEME}/path)")
        super().__init__(url[len(SCHEME) :])
        self.url = SCHEME + self.url
        self.rate = float(os.environ.get(ENV_RATE, DEFAULT_RATE)) if rate is None else rate
        self.injected = 0
        self._rng = random.Random()
        self._log = os.environ.get(ENV_LOG)

    def run_io(self, operation: Callable[[], T]) -> T:
        def flaky() -> T:
            if self._rng.random() < self.rate:
                self.injected += 1
                if self._log:
                    with open(self._log, "a") as f:
                        f.write(f"{os.getpid()}\n")
                raise OSError(errno.EIO, "injected fault (nbburst.testing.faults)")
            return operation()

        return super().run_io(flaky)


def injected(log: str | os.PathLike[str]) -> int:
    """How many failures the flaky stores that write to ``log`` have injected so far."""
    try:
        with open(log) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0
