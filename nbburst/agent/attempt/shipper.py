"""Ship the cell's stdout, stderr and display events to the Store as log chunks.

Output is read at the file-descriptor level, so prints from C extensions and
subprocesses arrive as well as Python's. Chunks are immutable, numbered and
sealed to their place (a reader refuses one that was forged or copied), so a
reader that has seen chunk N never sees its lines again.
"""

from __future__ import annotations

import codecs
import json
import os
import selectors
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ...protocol.folder import JobFolder
from ...protocol.job import SHELL_RECORDS, encode_records
from ...store import AlreadyExists, StoreError
from .channel import PART

FLUSH_SECONDS = 0.2
MAX_CHUNK = 1 << 20
#: How long the start of a line read from a pipe waits for the rest (a prompt, a line cut by a reader's read).
HOLD_SECONDS = 1.0


class Shipper:
    def __init__(self, folder: JobFolder, attempt: int, on_event: Callable[[dict[str, Any]], None] | None = None):
        self.folder, self.layout, self.attempt = folder, folder.layout, attempt
        self.on_event = on_event
        self.seq = len(folder.store.list(self.layout.attempt_logs(attempt)))
        self.pending: list[dict[str, Any]] = []
        self.pending_size = 0
        self.lock = threading.Lock()
        self.last_flush = time.monotonic()
        self.failing = False  # the Store refused the last flush: what it did not take waits for the next
        self._thread: threading.Thread | None = None

    # -- records --------------------------------------------------------------
    def add(self, record: dict[str, Any]) -> None:
        record.setdefault("t", round(time.time(), 3))
        with self.lock:
            last = self.pending[-1] if self.pending else None
            if last and record["s"] in ("stdout", "stderr") and last["s"] == record["s"]:
                last["x"] += record["x"]
            else:
                self.pending.append(record)
            self.pending_size += len(record.get("x", "")) + 64
        if self.pending_size > MAX_CHUNK and not self.failing:  # while failing, the pump's next round tries
            self.flush()

    def event(self, text: str) -> None:
        self.add({"s": "event", "x": text})

    def flush(self, strict: bool = False) -> None:
        """Write what is pending as one chunk. When the Store cannot take it, it stays pending for the next flush,
        and ``strict`` raises the Store's error (the last flush before the job's end must not lose it)."""
        with self.lock:
            if not self.pending:
                return
            records, self.pending, self.pending_size = self.pending, [], 0
            data = encode_records(records)
            while True:
                key = self.layout.log_chunk(self.attempt, self.seq)
                try:
                    self.folder.create_object(key, data)
                    self.seq += 1
                    break
                except AlreadyExists:
                    self.seq += 1
                    continue  # the number is taken (an earlier run of this attempt, or a planted chunk)
                except StoreError as exc:  # cannot take it for now (full, read-only): kept, for the next flush
                    self.pending[:0] = records
                    self.pending_size += sum(len(r.get("x", "")) + 64 for r in records)
                    self.last_flush = time.monotonic()
                    if not self.failing:  # once a spell, on the console: the log is where it cannot go
                        print(f"nbburst: the job's log waits for the Store: {exc}", file=sys.stderr, flush=True)
                    self.failing = True
                    if strict:
                        raise
                    return
            self.failing = False
            self.last_flush = time.monotonic()

    # -- pumping file descriptors -------------------------------------------------
    def pump(self, stdout_fd: int, stderr_fd: int, events_fd: int) -> None:
        """Start a thread reading the three pipes until they all close."""
        self._thread = threading.Thread(
            target=self._pump, args=(stdout_fd, stderr_fd, events_fd), name="nbburst-shipper", daemon=True
        )
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread:
            self._thread.join(timeout)
        self.flush()

    def _pump(self, stdout_fd: int, stderr_fd: int, events_fd: int) -> None:
        sel = selectors.DefaultSelector()
        decoders = {
            stdout_fd: codecs.getincrementaldecoder("utf-8")("replace"),
            stderr_fd: codecs.getincrementaldecoder("utf-8")("replace"),
        }
        texts = {stdout_fd: _Lines("stdout", self.add), stderr_fd: _Lines("stderr", self.add)}
        events = _Events()
        for fd in (stdout_fd, stderr_fd, events_fd):
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        open_fds = 3
        while open_fds:
            ready = sel.select(timeout=FLUSH_SECONDS)
            # Text before events: the runner flushes its streams before it emits an event.
            for key, _ in sorted(ready, key=lambda kv: kv[0].fd == events_fd):
                fd = key.fd
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(fd)
                    os.close(fd)
                    open_fds -= 1
                    if fd in decoders:
                        texts[fd].feed(decoders[fd].decode(b"", final=True))
                        texts[fd].release()
                    continue
                if fd in decoders:
                    texts[fd].feed(decoders[fd].decode(data))
                else:
                    for event in events.feed(data):
                        self._handle_event(event)
            for pipe in texts.values():
                pipe.release(older_than=HOLD_SECONDS)
            if time.monotonic() - self.last_flush >= FLUSH_SECONDS:
                self.flush()
        sel.close()

    def _handle_event(self, event: dict[str, Any]) -> None:
        if event.get("s") in SHELL_RECORDS or event.get("s") in ("stdout", "stderr"):  # Python's prints
            self.add(event)
        elif self.on_event is not None:
            self.on_event(event)


class _Lines:
    """Text read from one pipe, passed on a whole line at a time: a line cut by a read (or by a writer's
    buffer) waits for its end, up to a time limit, so text from elsewhere never lands in its middle."""

    def __init__(self, stream: str, add: Callable[[dict[str, Any]], None]):
        self.stream, self.add = stream, add
        self.held, self.since = "", 0.0

    def feed(self, text: str) -> None:
        text = self.held + text
        cut = max(text.rfind("\n"), text.rfind("\r")) + 1  # a progress bar's carriage return ends a line too
        if cut:
            self.add({"s": self.stream, "x": text[:cut]})
        if not self.held or cut:
            self.since = time.monotonic()
        self.held = text[cut:]

    def release(self, older_than: float = 0.0) -> None:
        """Pass on the start of a line held for ``older_than`` seconds or more."""
        if self.held and time.monotonic() - self.since >= older_than:
            self.add({"s": self.stream, "x": self.held})
            self.held = ""


class _Events:
    """The event pipe's lines as events, a long event's pieces joined again (see :class:`.channel.Channel`)."""

    def __init__(self) -> None:
        self.partial = b""
        self.pieces: dict[bytes, list[bytes]] = {}  # writer's pid -> the pieces of its long event so far

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        *lines, self.partial = (self.partial + data).split(b"\n")
        events = []
        for line in lines:
            if line.startswith(PART):
                pid, end, piece = line[len(PART) :].split(b" ", 2)
                self.pieces.setdefault(pid, []).append(piece)
                if end != b"1":
                    continue
                line = b"".join(self.pieces.pop(pid))
            try:
                events.append(json.loads(line))
            except ValueError:  # never expected; but a reader that stopped here would hang the cell
                events.append({"s": "stderr", "x": "nbburst: an output event was garbled and dropped\n"})
        return events
