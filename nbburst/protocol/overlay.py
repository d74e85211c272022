"""A session cell's objects in memory beside the Store, so that neither side waits on the Store for them.

A gce session cell whose push channel is up (:mod:`.sessionpush`) takes its job's objects with it: the client
sends the spec, inputs, code and claim it would have written down the channel with the cell, and the VM sends
every object it writes (statuses, log lines, the result, the end) back up it. Each side reads the job from what it
holds here, verified exactly as from the Store (the objects are the same sealed and signed bytes, and nothing in
this module trusts them: :class:`~.folder.JobFolder` and the spec's digests do the checking). The Store stays the
record: the VM writes both sides' objects to it, in the order they were made, behind the cell; the client holds
its own until the VM says they are stored, and writes them itself if the channel is lost first (the VM preempted
after the cell was pushed), so that the job is recovered from the Store as any job is.

Three ways with writes, one per holder:

* ``HOLD`` (the notebook): written here only, kept in order for the push and for :meth:`Overlay.release`;
* ``QUEUE`` (the session VM's controller): written here and to the Store by a thread behind the cell, in order;
  :meth:`Overlay.flush` waits for it;
* ``THROUGH`` (the cell's process on the VM): written to the Store at once, as without an overlay.

While :attr:`Overlay.local` holds, what the job's folder (``owned``) does not hold here does not exist: the two
sides are its only writers until the cell ends (a relaunch by another supervisor first needs the VM gone, which
ends the channel). An object too big to travel on the channel is written to the Store at once and read from there.
"""

from __future__ import annotations

import base64
import queue
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from ..store import AlreadyExists, NotFound, Store

HOLD, QUEUE, THROUGH = "hold", "queue", "through"
#: Objects up to this size travel on the channel; a bigger one (a large result) goes to the Store at once.
INLINE_BYTES = 4 << 20

T = TypeVar("T")
#: One write, in the order it was made: (operation: put, create or delete; key; bytes).
Op = tuple[str, str, bytes]


def encode_ops(ops: Iterable[Op]) -> list[list[str]]:
    """Writes as JSON-ready lists (the push channel's lines carry them)."""
    return [[op, key, base64.b64encode(data).decode()] for op, key, data in ops]


def decode_ops(raw: Iterable[Any]) -> list[Op]:
    """Writes from :func:`encode_ops`' lists (ValueError when one is not a write)."""
    ops = []
    for op, key, data in raw:
        if op not in ("put", "create", "delete", "stored") or not isinstance(key, str):
            raise ValueError(f"not a write: {op!r} {key!r}")
        ops.append((op, key, base64.b64decode(data)))
    return ops


class Overlay(Store):
    """The Store ``backing`` with one job's objects (under ``owned``) held in memory; ``mode``: see the module."""

    def __init__(
        self,
        backing: Store,
        owned: str,
        mode: str,
        ops: Iterable[Op] = (),
        shared: Iterable[str] = (),
        known: set[str] | None = None,
    ):
        self.backing, self.owned, self.mode = backing, owned, mode
        self.shared = set(shared)  # keys anyone may write (a cancel request): always the Store's
        self.known = set() if known is None else known  # blobs known to be in the Store (shared by a session's cells)
        self.url = backing.url
        self.min_poll_seconds = backing.min_poll_seconds
        self.local = True
        self.objects: dict[str, bytes] = {}
        self.stamps: dict[str, float] = {}  # when each object was made or arrived (this machine's clock)
        self.remote: set[str] = set()  # keys of objects too big for the channel: in the Store
        self.held: list[Op] = []  # HOLD: this side's writes, and the other side's it received, in order
        self.on_write: Callable[[Op], None] | None = None  # each write of this side, as it is made
        self.errors: list[BaseException] = []
        self.forgotten = False  # the cell has been read: its objects go once the record is in the Store
        self._lock = threading.RLock()
        self._queue: queue.Queue[Op | None] = queue.Queue()
        self._writer: threading.Thread | None = None
        for op in ops:
            self.receive(op)

    # -- what the other side sent --------------------------------------------------------------
    def receive(self, op: Op) -> None:
        """A write the other side made: held here as its own (QUEUE: written to the Store before this side's)."""
        kind, key, data = op
        with self._lock:
            self._apply(kind, key, data)
            if self.mode == HOLD and kind != "stored":
                self.held.append(op)
        if self.mode == QUEUE and kind != "stored":
            self._enqueue(op)

    def _apply(self, kind: str, key: str, data: bytes) -> None:
        if kind == "delete":
            self.objects.pop(key, None)
            self.remote.discard(key)
        elif kind == "stored":
            self.objects.pop(key, None)
            self.remote.add(key)
        else:
            self.objects[key] = data
            self.remote.discard(key)
        self.stamps[key] = time.time()

    # -- writes ------------------------------------------------------------------------------------
    def _write(self, kind: str, key: str, data: bytes) -> None:
        if key in self.shared:
            self._through(kind, key, data)
            return
        with self._lock:
            if kind == "create" and (key in self.objects or key in self.remote):
                raise AlreadyExists(key)
            if self.mode == THROUGH or len(data) > INLINE_BYTES:
                self._flush_queue()  # what came before is in the Store first
                self._through(kind, key, data)
                op: Op = (kind, key, data) if self.mode == THROUGH else ("stored", key, b"")
            else:
                op = (kind, key, data)
            self._apply(op[0], key, data)
            if self.mode == HOLD and op[0] != "stored":
                self.held.append(op)
        if self.mode == QUEUE and op[0] != "stored":
            self._enqueue(op)
        if self.on_write is not None:
            self.on_write(op)

    def put(self, key: str, data: bytes) -> None:
        self._write("put", key, bytes(data))

    def create(self, key: str, data: bytes) -> None:
        self._write("create", key, bytes(data))

    def put_chunks(self, key: str, chunks: Iterable[bytes | memoryview], *, create: bool = False) -> None:
        self._write("create" if create else "put", key, b"".join(bytes(c) for c in chunks))

    def put_addressed(
        self, prefix: str, chunks: Callable[[], Iterable[bytes | memoryview]], address: Callable[[], str]
    ) -> str:
        """A small blob travels with the cell, unasked whether the Store has it (its create-only write, behind
        the cell, finds it there at worst); a big one is written as without an overlay."""
        parts, size = [], 0
        for chunk in chunks():
            parts.append(bytes(chunk))
            size += len(parts[-1])
            if size > INLINE_BYTES or self.mode == THROUGH:
                addr = self.backing.put_addressed(prefix, chunks, address)
                self.known.add(prefix + addr)
                return addr
        addr = address()
        if prefix + addr not in self.objects and prefix + addr not in self.known:
            self._write("create", prefix + addr, b"".join(parts))
        return addr

    def delete(self, key: str) -> None:
        self._write("delete", key, b"")

    # -- reads -------------------------------------------------------------------------------------
    def _here(self, key: str) -> bool:
        """Whether ``key`` is answered from memory: held here, or in the job's folder while it is local."""
        if key in self.shared:
            return False
        return key in self.objects or (self.local and key.startswith(self.owned) and key not in self.remote)

    def _held(self, key: str, table: dict[str, T]) -> T | None:
        """``table``'s entry for an object answered from memory (NotFound when it is not held); None: the Store's."""
        with self._lock:
            if not self._here(key):
                return None
            if key not in self.objects:
                raise NotFound(key)
            return table[key]

    def get(self, key: str) -> bytes:
        found = self._held(key, self.objects)
        return self.backing.get(key) if found is None else found

    def get_file(self, key: str, path: str | Path) -> None:
        with self._lock:
            here = self._here(key)
        if not here:
            self.backing.get_file(key, path)
            return
        target = Path(path)
        tmp = target.with_name(target.name + ".part")
        tmp.write_bytes(self.get(key))
        tmp.replace(target)

    def exists(self, key: str) -> bool:
        with self._lock:
            if self._here(key):
                return key in self.objects
            if key in self.known:
                return True
        found = self.backing.exists(key)
        if found and not key.startswith(self.owned):
            self.known.add(key)
        return found

    def size(self, key: str) -> int:
        return len(self.get(key)) if self._here(key) else self.backing.size(key)

    def updated(self, key: str) -> float:
        """An object held here is stamped when it was made or arrived, by this machine's clock."""
        found = self._held(key, self.stamps)
        return self.backing.updated(key) if found is None else found

    def age(self, key: str) -> float:
        """An object held here: its age by this machine's clock, which stamped it."""
        with self._lock:
            if self._here(key):
                return time.time() - self.updated(key)
        return self.backing.age(key)

    def now(self) -> float:
        return self.backing.now()

    def list(self, prefix: str) -> list[str]:
        with self._lock:
            mine = {k for k in (*self.objects, *self.remote) if k.startswith(prefix)}
            if self.local and prefix.startswith(self.owned):
                return sorted(mine)
        return sorted(mine | set(self.backing.list(prefix)))

    def temporaries(self) -> list[str]:
        return self.backing.temporaries()

    # -- the record ------------------------------------------------------------------------------------
    def _enqueue(self, op: Op) -> None:
        if self._writer is None:
            self._writer = threading.Thread(target=self._drain, name="nbburst-record", daemon=True)
            self._writer.start()
        self._queue.put(op)

    def _through(self, kind: str, key: str, data: bytes) -> None:
        if kind == "delete":
            self.backing.delete(key)
        else:
            (self.backing.create if kind == "create" else self.backing.put)(key, data)

    def _to_backing(self, op: Op) -> None:
        try:
            self._through(*op)
        except AlreadyExists:
            pass  # written by the other side, or by an earlier try of this one: the same bytes

    def _drain(self) -> None:
        while (op := self._queue.get()) is not None:
            try:
                self._to_backing(op)
            except BaseException as exc:  # kept for flush(), which says it; the next writes still go
                self.errors.append(exc)
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _flush_queue(self) -> None:
        if self._writer is not None:
            self._queue.join()

    def flush(self) -> None:
        """Wait until every write queued so far is in the Store; raises the first that failed."""
        self._flush_queue()
        if self.errors:
            raise self.errors[0]

    def release(self) -> None:
        """The other side will not write the record: write what is held (this side's writes and those it
        received, in order) to the Store, and read the job from there from now on."""
        with self._lock:
            held, self.held = self.held, []
        for op in held:
            self._to_backing(op)
        self._settle()

    def stored(self) -> None:
        """The other side has written the record: nothing held is left to write."""
        with self._lock:
            held, self.held = self.held, []
            self.known.update(key for kind, key, _ in held if kind == "create" and not key.startswith(self.owned))
        self._settle()

    def _settle(self) -> None:
        """The record is in the Store: writes go there at once, and what is not held here is read there (nothing,
        once the cell has been read: see :meth:`forget`)."""
        with self._lock:
            self.mode, self.local = THROUGH, False
            if self.forgotten:
                self.objects.clear()
                self.remote.clear()

    def forget(self) -> None:
        """Let go of the objects held (the cell has been read): from now on the job is read from the Store, as
        soon as its record is there (a session's next cell may run while this one's is still being written)."""
        with self._lock:
            self.forgotten = True
        if self.mode == THROUGH:
            self._settle()
