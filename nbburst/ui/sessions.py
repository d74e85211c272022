"""The sessions table: what ``%burst session list`` and ``nbburst sessions`` show, one row per session.

A machine kept by ``--keep`` is a session too: its row says so, what it costs an hour, and when it goes for
idleness (each cell renews that)."""

from __future__ import annotations

import html
import time
from typing import Any

from ..client.keep import is_kept
from ..protocol.durations import format_duration

COLUMNS = ("name", "state", "cores", "cells", "up", "idle after", "goes in", "ends in", "per hour", "cost")


def row(info: dict[str, Any], now: float | None = None) -> dict[str, str]:
    """One session's summary (``Session.info()``) as the table's cells."""
    now = time.time() if now is None else now
    idle_until = info.get("idle_until") if info["state"] == "RUNNING" else None  # renewed by each cell
    return {
        "name": info["name"] + (" (kept)" if is_kept(info["name"]) else ""),
        "state": info["state"],
        "cores": str(info["cores"]),
        "cells": f"{info['cells']}" + (f" ({info['running']} running)" if info.get("running") else ""),
        "up": format_duration(max(0.0, now - info["started"])),
        "idle after": format_duration(info["idle_s"]),
        "goes in": "" if idle_until is None else format_duration(max(0.0, idle_until - now)),
        "ends in": format_duration(max(0.0, info["until"] - now)),
        "per hour": f"${info['cost_per_hour_usd']:.4f}/h",
        "cost": f"${info['cost_usd']:.4f}",
    }


def lines(infos: list[dict[str, Any]]) -> list[str]:
    """The table as aligned text lines (a header first)."""
    rows = [{c: c for c in COLUMNS}, *(row(i) for i in infos)]
    widths = {c: max(len(r[c]) for r in rows) for c in COLUMNS}
    return ["  ".join(r[c].ljust(widths[c]) for c in COLUMNS).rstrip() for r in rows]


class SessionsTable:
    """What ``%burst session list`` returns: HTML in notebooks, text elsewhere; ``.infos`` for code."""

    def __init__(self, infos: list[dict[str, Any]]):
        self.infos = infos

    def __len__(self) -> int:
        return len(self.infos)

    def _repr_html_(self) -> str:
        if not self.infos:
            return "<p>no sessions</p>"
        head = "".join(f"<th>{c}</th>" for c in COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(r[c])}</td>" for c in COLUMNS) + "</tr>" for r in map(row, self.infos)
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def __repr__(self) -> str:
        return "\n".join(lines(self.infos)) if self.infos else "no sessions"
