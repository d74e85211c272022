"""The Store port: the only thing the notebook and the machine share.

Keys are relative, slash-separated paths ("jobs/abc/spec.json"). Every adapter
gives the same guarantees, which the job protocol relies on:

* ``put`` replaces an object atomically: readers see the old or the new bytes,
  never a mix.
* ``create`` is the commit point of anything that must be written once (a
  result, a terminal state, a lease): it succeeds for exactly one writer and
  raises :class:`AlreadyExists` for every other.
* ``get`` of a missing key raises :class:`NotFound` (a ``KeyError``).
"""

from __future__ import annotations

import abc
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


class Store(abc.ABC):
    """An object store rooted at a URL (``/path``, ``file://...``, ``gs://bucket/prefix``)."""

    url: str
    #: How often a waiting client may usefully poll: remote stores charge per request.
    min_poll_seconds: float = 0.25

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
    def list(self, prefix: str) -> list[str]:
        """All keys that start with ``prefix``, sorted."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing key is not an error."""

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

    def put_file(self, key: str, path: str | Path, *, create: bool = False) -> None:
        """Upload a local file (streamed)."""
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
