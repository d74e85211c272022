"""``nbburst.progress(done, total)``: report progress from inside a burst cell.

On the machine it feeds the job's status (and the notebook's progress bar);
in a plain kernel it does nothing, so the same cell runs unchanged without
``%%burst``. The machine's own reports go the same way: the phase before the
cell runs (loading inputs, importing) and the end of a loop whose bar must not
stay at 100% while the cell goes on.
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


def loop_ended() -> None:
    """The loop last reported has ended: no progress to show until the next one reports."""
    if _channel is not None:
        _channel.send({"s": "progress", "done": None, "total": None, "desc": ""})


def phase(text: str) -> None:
    """What the machine is doing before the cell prints anything (the job's status message); "" clears it."""
    if _channel is not None:
        _channel.send({"s": "phase", "x": text})
