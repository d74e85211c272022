"""Durations as users write them (``90s``, ``30m``, ``2h``) and as we show them."""

from __future__ import annotations

import re

from ..errors import UsageError

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|d|h|m|s)?", re.I)
_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, None: 1.0}


def parse_duration(value: str | float | int, option: str = "--timeout") -> float:
    """Seconds from ``90s``, ``30m``, ``2h``, ``1h30m``, ``1d`` or a number of seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = str(value).strip().lower()
        pos, seconds = 0, 0.0
        for m in _DURATION.finditer(text):
            if m.start() != pos:
                break
            seconds += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if not text or pos != len(text):
            raise UsageError(f"{option}: {value!r} is not a duration; write it like 90s, 30m, 2h or 1h30m")
    if seconds <= 0:
        raise UsageError(f"{option}: the duration must be positive, got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, s = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {s:02d}s"
    hours, m = divmod(minutes, 60)
    return f"{hours}h {m:02d}m"
