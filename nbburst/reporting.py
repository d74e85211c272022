"""``nbburst.progress(done, total)``: report progress from inside a burst cell.

On the machine it feeds the job's status (and the notebook's progress bar);
in a plain kernel it does nothing, so the same cell runs unchanged without
``%%burst``.
"""

from __future__ import annotations

from typing import Any

_channel: Any = None


def connect(channel: Any) -> None:
    """Send progress to ``channel`` (the agent's runner calls this once, before the cell runs)."""
    global _channel
    _channel = channel


def progress(done: float, total: float | None = None, desc: str = "") -> None:
    if _channel is not None:
        _channel.progress(done, total, desc)
