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


class Channel:
    def __init__(self, fd: int):
        self.fd = fd
        self.lock = threading.Lock()

    def send(self, event: dict[str, Any]) -> None:
        """Send ``event`` after everything printed before it."""
        flush_all()
        self.write(event)

    def write(self, event: dict[str, Any]) -> None:
        data = json.dumps(event, default=str, separators=(",", ":")).encode() + b"\n"
        with self.lock:
            while data:
                data = data[os.write(self.fd, data) :]

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
    writes to the descriptor: the channel belongs to the runner."""

    MAX_EVENT = 1 << 16

    def __init__(self, channel: Channel, name: str, fd: int):
        super().__init__()
        self.channel, self.stream, self.fd = channel, name, fd
        self.owner = os.getpid()
        self.pending: list[str] = []
        self.lock = threading.Lock()

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
        if os.getpid() != self.owner:
            os.write(self.fd, text.encode("utf-8", "replace"))
            return len(text)
        with self.lock:
            self.pending.append(text)
        if "\n" in text:
            self.flush()
        return len(text)

    def flush(self) -> None:
        if os.getpid() != self.owner:
            return
        with self.lock:
            text, self.pending = "".join(self.pending), []
        for start in range(0, len(text), self.MAX_EVENT):
            self.channel.write({"s": self.stream, "x": text[start : start + self.MAX_EVENT]})
