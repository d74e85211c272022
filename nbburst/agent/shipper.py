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
import threading
import time
from collections.abc import Callable
from typing import Any

from ..protocol.folder import JobFolder
from ..protocol.job import SHELL_RECORDS, encode_records
from ..store import AlreadyExists

FLUSH_SECONDS = 0.2
MAX_CHUNK = 1 << 20


class Shipper:
    def __init__(self, folder: JobFolder, attempt: int, on_event: Callable[[dict[str, Any]], None] | None = None):
        self.folder, self.layout, self.attempt = folder, folder.layout, attempt
        self.on_event = on_event
        self.seq = len(folder.store.list(self.layout.attempt_logs(attempt)))
        self.pending: list[dict[str, Any]] = []
        self.pending_size = 0
        self.lock = threading.Lock()
        self.last_flush = time.monotonic()
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
        if self.pending_size > MAX_CHUNK:
            self.flush()

    def event(self, text: str) -> None:
        self.add({"s": "event", "x": text})

    def flush(self) -> None:
        with self.lock:
            if not self.pending:
                return
            records, self.pending, self.pending_size = self.pending, [], 0
            data = encode_records(records)
            while True:
                key = self.layout.log_chunk(self.attempt, self.seq)
                self.seq += 1
                try:
                    self.folder.create_object(key, data)
                    break
                except AlreadyExists:
                    continue  # the number is taken (an earlier run of this attempt, or a planted chunk)
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
        names = {stdout_fd: "stdout", stderr_fd: "stderr"}
        partial_event = b""
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
                        tail = decoders[fd].decode(b"", final=True)
                        if tail:
                            self.add({"s": names[fd], "x": tail})
                    continue
                if fd in decoders:
                    text = decoders[fd].decode(data)
                    if text:
                        self.add({"s": names[fd], "x": text})
                else:
                    partial_event += data
                    *lines, partial_event = partial_event.split(b"\n")
                    for line in lines:
                        self._handle_event(json.loads(line))
            if time.monotonic() - self.last_flush >= FLUSH_SECONDS:
                self.flush()
        sel.close()

    def _handle_event(self, event: dict[str, Any]) -> None:
        if event.get("s") in SHELL_RECORDS or event.get("s") in ("stdout", "stderr"):  # Python's prints
            self.add(event)
        elif self.on_event is not None:
            self.on_event(event)
