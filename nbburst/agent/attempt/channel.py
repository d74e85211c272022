"""The runner's side of the event pipe: what the cell prints and displays, in order, and progress.

As in a Jupyter kernel, what Python prints (``sys.stdout``, ``sys.stderr``) travels as stream events
on the same pipe as the displays, so a print and a plot arrive in the order the cell made them.
What C code and subprocesses write to the file descriptors goes down the fd pipes, flushed before
every display.
"""

from __future__ import annotations

import base64
import ctypes
import io
import json
import os
import select
import sys
import threading
from typing import Any

_libc = None


def flush_c_streams() -> None:
    """Flush C stdio buffers, so printf output lands before what comes next."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None)
        _libc.fflush(None)
    except Exception:
        pass


def flush_all() -> None:
    """Everything printed so far, by Python or C, goes down the pipes before what comes next."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    flush_c_streams()


#: Starts a line of the event pipe that is a piece of a longer event: ``PART pid end chunk``.
PART = b"\x1e"


class Channel:
    """The event pipe: a line of JSON per event. Forked children of the runner (a display, a progress bar in a
    multiprocessing worker) write to it too, so every write is at most ``PIPE_BUF`` bytes, which a pipe keeps
    whole: a longer event goes as pieces marked with the writer's pid, joined again by the reader."""

    def __init__(self, fd: int):
        self.fd = fd
        self.pid = os.getpid()
        self.lock = threading.Lock()

    def send(self, event: dict[str, Any]) -> None:
        """Send ``event`` after everything printed before it."""
        flush_all()
        self.write(event)

    def write(self, event: dict[str, Any]) -> None:
        data = json.dumps(event, default=str, separators=(",", ":")).encode()  # ASCII, no newline in it
        if os.getpid() != self.pid:  # a forked child: the lock may have been held by a thread at the fork
            self.pid, self.lock = os.getpid(), threading.Lock()
        with self.lock:
            if len(data) < select.PIPE_BUF:
                _write_all(self.fd, data + b"\n")
                return
            step = select.PIPE_BUF - 32
            for start in range(0, len(data), step):
                end = b"1" if start + step >= len(data) else b"0"
                _write_all(self.fd, b"%s%d %s %s\n" % (PART, self.pid, end, data[start : start + step]))

    def display(
        self,
        data: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        transient: dict[str, Any] | None = None,
        update: bool = False,
    ) -> None:
        """display_data (or update_display_data of the output with ``transient["display_id"]``)."""
        event = {"s": "display", "data": _jsonable(data), "metadata": metadata or {}}
        if transient:
            event["transient"] = transient
        if update:
            event["update"] = True
        self.send(event)

    def result(self, data: dict[str, Any], metadata: dict[str, Any] | None = None) -> None:
        """The cell's execute_result (``Out``), formatted where the cell computed it."""
        self.send({"s": "result", "data": _jsonable(data), "metadata": metadata or {}})

    def progress(self, done: float, total: float | None = None, desc: str = "") -> None:
        self.send({"s": "progress", "done": done, "total": total, "desc": desc})


def _jsonable(bundle: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for mime, value in bundle.items():
        if isinstance(value, bytes):
            value = base64.b64encode(value).decode()
        out[mime] = value
    return out


class ChannelStream(io.TextIOBase):
    """``sys.stdout`` or ``sys.stderr`` of the cell, as ipykernel's OutStream: text goes as stream events,
    a line at a time; ``fileno()`` is the real descriptor (subprocesses, faulthandler). A forked child
    writes to the descriptor, the channel belongs to the runner: whole lines, each in one ``write`` (atomic on
    a pipe up to ``PIPE_BUF``), so lines of children printing at once are never spliced."""

    MAX_EVENT = 1 << 16

    def __init__(self, channel: Channel, name: str, fd: int):
        super().__init__()
        self.channel, self.stream, self.fd = channel, name, fd
        self.owner = os.getpid()
        self.pending: list[str] = []
        self.lock = threading.Lock()
        self.child: tuple[int, threading.Lock, list[str]] | None = None  # a forked child's own pid, lock, text

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"<{self.stream}>"

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def fileno(self) -> int:
        return self.fd

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        lock, pending = self._buffer()
        with lock:
            pending.append(text)
        if "\n" in text:
            self._send(whole_lines=True)
        return len(text)

    def flush(self) -> None:
        self._send(whole_lines=False)

    def _buffer(self) -> tuple[threading.Lock, list[str]]:
        """This process's lock and pending text: a forked child starts afresh (its parent's text is the parent's)."""
        pid = os.getpid()
        if pid == self.owner:
            return self.lock, self.pending
        if self.child is None or self.child[0] != pid:
            self.child = (pid, threading.Lock(), [])
        return self.child[1], self.child[2]

    def _send(self, whole_lines: bool) -> None:
        """Send the pending text, or with ``whole_lines`` what ends with its last newline."""
        lock, pending = self._buffer()
        with lock:
            text = "".join(pending)
            cut = text.rfind("\n") + 1 if whole_lines else len(text)
            pending[:] = [text[cut:]] if cut < len(text) else []
        text = text[:cut]
        if not text:
            return
        if lock is not self.lock:
            write_lines(self.fd, text.encode("utf-8", "replace"))
            return
        for start in range(0, len(text), self.MAX_EVENT):
            self.channel.write({"s": self.stream, "x": text[start : start + self.MAX_EVENT]})


def write_lines(fd: int, data: bytes) -> None:
    """Write ``data`` to ``fd`` in writes of whole lines of at most ``PIPE_BUF`` bytes (a longer line alone)."""
    while data:
        end = len(data) if len(data) <= select.PIPE_BUF else data.rfind(b"\n", 0, select.PIPE_BUF) + 1
        if end <= 0:  # a line longer than PIPE_BUF: no write keeps it whole, so it goes alone
            end = data.find(b"\n") + 1 or len(data)
        _write_all(fd, data[:end])
        data = data[end:]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
