"""Reading what a job committed: its signed error (and the one-line reason made from it).

Shared by the agent, which states why a job failed, and the client side, which
may have to state it for an agent that died just after the cell raised.
"""

from __future__ import annotations

from typing import Any

from . import payload, signing
from .job import JobLayout
from .store import Store


def read_error(store: Store, layout: JobLayout, key: bytes) -> dict[str, Any]:
    """The remote exception's record (type, message, traceback, source, exc), verified."""
    data = signing.verify(key, store.get(layout.error), f"error of job {layout.job_id}")
    return payload.decode(bytearray(data))


def error_summary(store: Store, layout: JobLayout, key: bytes) -> str:
    """``ZeroDivisionError: division by zero``: the reason recorded in the terminal state."""
    try:
        info = read_error(store, layout, key)
        return f"{info['type'].rpartition('.')[2]}: {info['message']}"
    except Exception as exc:
        return f"the cell raised an exception ({exc})"
