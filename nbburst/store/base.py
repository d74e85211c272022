"""The Store port: the only thing the notebook and the machine share.

Keys are relative, slash-separated paths ("jobs/abc/spec.json"). Every adapter
gives the same guarantees, which the job protocol relies on:

* ``put`` replaces an object atomically: readers see the old or the new bytes,
  never a mix.
* ``create`` is the commit point of anything that must be written once (a
  result, a terminal state, a lease): it succeeds for exactly one writer and
  raises :class:`AlreadyExists` for every other.
* ``get`` of a missing key raises :class:`NotFound` (a ``KeyError``).
* ``updated`` is the time the Store itself stamped on an object's last write,
  and ``now`` the Store's clock: leases, staleness and time limits compare
  these, never the clocks of the machines that read them, so a reader whose
  clock is off by an hour decides as one whose clock is right.
"""

from __future__ import annotations

import abc
import errno
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path


class StoreError(Exception):
    """A Store operation failed in a way the caller should report."""


class NotFound(StoreError, KeyError):
    """The key does not exist."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want a sentence
        return str(self.args[0]) if self.args else "not found"


class AlreadyExists(StoreError):
    """A create-only write found the key already there."""


#: What to do about an operating-system error of a Store, by errno; ``{root}`` is the Store's URL, ``{path}`` the
#: object's place in it.
ADVICE = {
    errno.ENOSPC: "the disk is full: free space on the disk that holds {root}, or point NBBURST_ROOT elsewhere",
    errno.EDQUOT: "the disk quota is used up: free space on the disk that holds {root}, or point NBBURST_ROOT "
    "elsewhere",
    errno.EROFS: "the file system that holds {root} is read-only: remount it read-write, or point NBBURST_ROOT "
    "at a writable folder",
    errno.EACCES: "permission denied: check the owner and permissions of {path} and the folders above it",
    errno.EPERM: "operation not permitted: check the owner and permissions of {path} and the folders above it",
}
DEFAULT_ADVICE = "check the disk or network file system that holds {root}, then try again"


class StoreIOError(StoreError, OSError):
    """A Store operation failed with an operating-system error (a full or read-only disk, a permission).

    An ``OSError`` still (callers that catch one keep working, ``errno`` is the original's), and a
    :class:`StoreError` whose message says which operation, which object, where, and what to do about it: it is
    what a user reads in the cell, the job view and the CLI.
    """

    def __init__(self, code: int | None, operation: str, key: str, root: str, path: str = "", detail: str = ""):
        self.operation, self.key, self.root, self.detail = operation, key, root, detail
        self.path = path or f"{root.rstrip('/')}/{key}"
        reason = detail or (os.strerror(code) if code else "failed")
        advice = ADVICE.get(code or 0, DEFAULT_ADVICE).format(root=root, path=self.path)
        super().__init__(code, f"could not {operation} {key or root} in the Store {root}: {reason}; {advice}")

    def __str__(self) -> str:  # OSError's is "[Errno 28] ...": the sentence is ours
        return str(self.strerror)

    def __reduce__(self) -> tuple:  # pickled whole (OSError's own pickling would pass only errno and message)
        return StoreIOError, (self.errno, self.operation, self.key, self.root, self.path, self.detail)


#: Where :meth:`Store.now` writes (and removes) its probe objects.
CLOCK_PREFIX = "clock/"
#: How long a reading of the Store's clock is extrapolated on this machine's clock before it is read again.
CLOCK_REFRESH_SECONDS = 120.0
#: How soon the clock is read again after the Store refused the probe (a read-only spell may end).
CLOCK_RETRY_SECONDS = 10.0


def elapsed() -> float:
    """Seconds on a clock that never jumps and, where the system has one, keeps counting while the machine
    sleeps (a laptop's lid closed): the clock a reading of the Store's clock is carried forward on."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic()


class Store(abc.ABC):
    """An object store rooted at a URL (``/path``, ``file://...``, ``gs://bucket/prefix``)."""

    url: str
    #: How often a waiting client may usefully poll: remote stores charge per request.
    min_poll_seconds: float = 0.25
    _clock: tuple[float, float] | None = None  # (elapsed() when read, the Store's time then)
    _clock_due = 0.0  # elapsed() when the clock is read again
    _clock_lock = threading.Lock()

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Write ``data`` under ``key``, replacing what was there, atomically."""

    @abc.abstractmethod
    def create(self, key: str, data: bytes) -> None:
        """Write ``data`` under ``key`` only if the key does not exist yet.

        Raises :class:`AlreadyExists` otherwise. A retried write whose first
        attempt succeeded unseen is recognised as ours, not as a conflict.
        """

    @abc.abstractmethod
    def put_chunks(self, key: str, chunks: Iterable[bytes | memoryview], *, create: bool = False) -> None:
        """Stream a large object from ``chunks`` without joining them in memory.

        With ``create=True`` it is a create-only write, like :meth:`create`.
        """

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """Return the bytes under ``key``; :class:`NotFound` if missing."""

    def get_buffer(self, key: str) -> memoryview:
        """The bytes under ``key`` as writable memory (a big object read once, then used in place)."""
        return memoryview(bytearray(self.get(key)))

    @abc.abstractmethod
    def get_file(self, key: str, path: str | Path) -> None:
        """Download ``key`` into a local file (atomically replacing it)."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool:
        """Whether ``key`` exists."""

    @abc.abstractmethod
    def size(self, key: str) -> int:
        """Size in bytes of ``key``; :class:`NotFound` if missing."""

    @abc.abstractmethod
    def updated(self, key: str) -> float:
        """When the Store stamped ``key``'s last write (seconds since the epoch, by the Store's clock);
        :class:`NotFound` if missing."""

    def now(self) -> float:
        """The Store's clock now: what :meth:`updated` would say of an object written at this instant.

        Read by writing a probe object and asking its time, at most every ``CLOCK_REFRESH_SECONDS``, and
        carried forward on :func:`elapsed` in between. The estimate errs early by at most the probe
        write's own duration, so an age computed with it is never longer than the truth.

        Reading a job needs no write: while the Store refuses the probe (a full or read-only disk, a bucket
        this reader may only read), the last reading is carried forward, and without one this machine's clock
        stands in (see :meth:`_read_clock`).
        """
        with self._clock_lock:
            if self._clock is None or elapsed() > self._clock_due:
                self._read_clock()
            taken, stamped = self._clock  # type: ignore[misc]
        return stamped + elapsed() - taken

    def _read_clock(self) -> None:
        """Take a fresh reading, due again after ``CLOCK_REFRESH_SECONDS``. When the probe cannot be written, keep
        the last reading (before any, this machine's clock, all a reader that may not write has) and try again
        after ``CLOCK_RETRY_SECONDS``."""
        probe = f"{CLOCK_PREFIX}{os.getpid()}-{uuid.uuid4().hex}"
        try:
            self.put(probe, b"")
        except StoreError:
            if self._clock is None:
                self._clock = (elapsed(), time.time())
            self._clock_due = elapsed() + CLOCK_RETRY_SECONDS
            return
        read_at = elapsed()
        try:
            self._clock = (read_at, self.updated(probe))
        finally:
            self.delete(probe)
        self._clock_due = read_at + CLOCK_REFRESH_SECONDS

    def age(self, key: str) -> float:
        """Seconds since ``key``'s last write, by the Store's clock; :class:`NotFound` if missing."""
        return self.now() - self.updated(key)

    @abc.abstractmethod
    def list(self, prefix: str) -> list[str]:
        """All keys that start with ``prefix``, sorted."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing key is not an error."""

    def temporaries(self) -> list[str]:
        """Partial writes that an interrupted writer left behind, never visible to :meth:`list`; each can be
        aged (:meth:`updated`), sized and removed (:meth:`delete`) like a key. Adapters whose unfinished
        writes leave nothing behind (a Cloud Storage upload that is never finished) have none."""
        return []

    def put_addressed(
        self, prefix: str, chunks: Callable[[], Iterable[bytes | memoryview]], address: Callable[[], str]
    ) -> str:
        """Store content under ``prefix + address()`` unless it is there already; returns the address.

        Content addressing makes a second copy pointless, so a remote store
        hashes first: an existence check costs far less than an upload.
        Adapters with cheap writes may hash and write at the same time.
        """
        addr = address()
        if not self.exists(prefix + addr):
            try:
                self.put_chunks(prefix + addr, chunks(), create=True)
            except AlreadyExists:
                pass  # written meanwhile by someone else: the same bytes
        return addr

    def put_file(self, key: str, path: str | Path, *, create: bool = False, adopt: bool = False) -> None:
        """Upload a local file (streamed). ``adopt``: the caller never changes the file again, so a Store on
        the same file system may take the file itself instead of a copy."""
        self.put_chunks(key, _read_chunks(Path(path)), create=create)

    def list_dirs(self, prefix: str) -> list[str]:
        """Names of the immediate "sub-folders" below ``prefix`` (which ends in '/')."""
        names = {k[len(prefix) :].split("/", 1)[0] for k in self.list(prefix) if "/" in k[len(prefix) :]}
        return sorted(names)

    def delete_prefix(self, prefix: str) -> int:
        """Delete every key below ``prefix``; returns how many were deleted."""
        keys = self.list(prefix)
        for key in keys:
            self.delete(key)
        return len(keys)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


CHUNK = 8 << 20


def _read_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk
