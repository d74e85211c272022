"""The runner's side of the event pipe: display outputs and progress, in order with prints."""

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
current: Channel | None = None  # the runner's channel, for code that cannot be handed it (matplotlib)


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
        flush_all()
        line = json.dumps(event, default=str, separators=(",", ":")).encode() + b"\n"
        with self.lock:
            os.write(self.fd, line)

    def display(self, data: dict[str, Any], metadata: dict[str, Any] | None = None) -> None:
        self.send({"s": "display", "data": _jsonable(data), "metadata": metadata or {}})

    def progress(self, done: float, total: float | None = None, desc: str = "") -> None:
        self.send({"s": "progress", "done": done, "total": total, "desc": desc})


def _jsonable(bundle: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for mime, value in bundle.items():
        if isinstance(value, bytes):
            value = base64.b64encode(value).decode()
        out[mime] = value
    return out


def format_object(obj: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A mime bundle for ``obj``, as IPython would make it."""
    try:
        from IPython.core.formatters import DisplayFormatter

        return DisplayFormatter().format(obj)
    except ImportError:
        return {"text/plain": repr(obj)}, {}


def figure_png(fig: Any) -> dict[str, Any]:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return {"image/png": base64.b64encode(buf.getvalue()).decode(), "text/plain": repr(fig)}
