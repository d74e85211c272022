"""Stores that fail on purpose: now and then (``flaky://``), or as a test says (``faulty://``).

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

``faulty:///some/folder`` (:class:`FaultStore`) fails the operations a test names,
while jobs run, in every process that opens it: the test writes rules
(:func:`set_faults`: which operation, which keys, which error, until when) to a
file beside the folder (never in it: nothing the Store lists), and each file
operation of each process reads them, again below the store's own retry. A full
disk while the result is written, a read-only spell, a permission taken away:
each is a rule, and what is tested is nbburst's own handling of it.

On Cloud Storage the same faults come from the emulator
(:meth:`nbburst.testing.gcs.GCSEmulator.set_faults`): 503 answers that the
google-cloud-storage client retries.
"""

from __future__ import annotations

import dataclasses
import errno
import fnmatch
import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..store.local import LocalStore

T = TypeVar("T")

SCHEME = "flaky://"
FAULTY_SCHEME = "faulty://"
#: The ``$NBBURST_STORES`` entries that open ``flaky://`` URLs with :class:`FlakyStore` and ``faulty://`` URLs
#: with :class:`FaultStore`.
STORES = f"flaky={__name__}:FlakyStore faulty={__name__}:FaultStore"
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

    def run_io(self, action: str, key: str, operation: Callable[[], T]) -> T:
        def flaky() -> T:
            if self._rng.random() < self.rate:
                self.injected += 1
                if self._log:
                    with open(self._log, "a") as f:
                        f.write(f"{os.getpid()}\n")
                raise OSError(errno.EIO, "injected fault (nbburst.testing.faults)")
            return operation()

        return super().run_io(action, key, flaky)


@dataclasses.dataclass
class Fault:
    """One rule of a :class:`FaultStore`: ``action`` ("write", "read", "check", "list", "delete" or "*") on keys
    matching ``keys`` (a glob) fails with ``error`` (an errno name) until ``until`` (seconds since the epoch;
    None: until the rules change)."""

    action: str
    keys: str
    error: str
    until: float | None = None

    def matches(self, action: str, key: str) -> bool:
        return (
            self.action in ("*", action)
            and fnmatch.fnmatchcase(key, self.keys)
            and (self.until is None or time.time() < self.until)
        )


def rules_path(root: str | os.PathLike[str]) -> Path:
    """Where the rules of the FaultStore at folder ``root`` are: beside it."""
    folder = Path(os.fspath(root).removeprefix(FAULTY_SCHEME)).expanduser().resolve()
    return folder.with_name(folder.name + ".faults.json")


def set_faults(root: str | os.PathLike[str], *faults: Fault) -> None:
    """Make the FaultStores at ``root`` (in every process) fail as ``faults`` say, from now on; none: no more."""
    path = rules_path(root)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps([dataclasses.asdict(f) for f in faults]))
    os.replace(tmp, path)


def fault_log(root: str | os.PathLike[str]) -> list[str]:
    """The failures the FaultStores at ``root`` injected so far: ``action key error``, one per failure."""
    try:
        return rules_path(root).with_suffix(".log").read_text().splitlines()
    except FileNotFoundError:
        return []


class FaultStore(LocalStore):
    """A LocalStore at ``faulty://PATH`` whose file operations fail as the rules beside PATH say."""

    def __init__(self, url: str):
        if not url.startswith(FAULTY_SCHEME):
            raise ValueError(f"not a faulty store URL: {url!r} (expected {FAULTY_SCHEME}/path)")
        super().__init__(url[len(FAULTY_SCHEME) :])
        self.url = FAULTY_SCHEME + self.url
        self.rules = rules_path(self.root)

    def _fault(self, action: str, key: str) -> Fault | None:
        try:
            rules = [Fault(**rule) for rule in json.loads(self.rules.read_text())]
        except FileNotFoundError:
            return None
        return next((rule for rule in rules if rule.matches(action, key)), None)

    def run_io(self, action: str, key: str, operation: Callable[[], T]) -> T:
        def faulty() -> T:
            fault = self._fault(action, key)
            if fault is not None:
                with open(self.rules.with_suffix(".log"), "a") as f:
                    f.write(f"{action} {key} {fault.error}\n")
                code = getattr(errno, fault.error)
                raise OSError(code, os.strerror(code))
            return operation()

        return super().run_io(action, key, faulty)


def injected(log: str | os.PathLike[str]) -> int:
    """How many failures the flaky stores that write to ``log`` have injected so far."""
    try:
        with open(log) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0
