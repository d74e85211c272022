"""Text, HTML and rich renderings of jobs, shared by ``%burst jobs``, the job view and the CLI.

Everything here works on ``Job.info()`` dicts, so the same table comes out of a
kernel, a terminal and the Jupyter server.
"""

from __future__ import annotations

import html
import time
from typing import Any

from ..protocol.durations import format_duration
from ..protocol.job import State
from ..protocol.pricing import usd

STATE_COLORS = {
    "SUBMITTED": "#6b7280",
    "PROVISIONING": "#b45309",
    "RUNNING": "#1d4ed8",
    "PREEMPTED": "#b45309",
    "SUCCEEDED": "#15803d",
    "FAILED": "#b91c1c",
    "CANCELLED": "#6b7280",
}
RICH_STYLES = {
    "SUBMITTED": "dim",
    "PROVISIONING": "yellow",
    "RUNNING": "bold blue",
    "PREEMPTED": "yellow",
    "SUCCEEDED": "green",
    "FAILED": "bold red",
    "CANCELLED": "dim",
}
COLUMNS = ("id", "name", "state", "age", "machine", "elapsed", "cost")


def age(created: float, now: float | None = None) -> str:
    """``42s``, ``5m``, ``3h``, ``2d`` ago."""
    seconds = max(0.0, (now or time.time()) - created)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def machine_text(info: dict[str, Any], long: bool = False) -> str:
    """``n2-standard-64 spot`` or, long, ``n2-standard-64 · 64 vCPU · 256 GB · 1× nvidia-l4 · spot · us-central1-a``."""
    m = info.get("machine") or {}
    if info.get("backend") == "local" or m.get("type") == "local":
        if not long:
            return "local"
        parts = ["local"]
    else:
        parts = [m.get("type") or "?"]
        if not long:
            return f"{parts[0]} {'spot' if m.get('spot') else 'on-demand'}"
    if m.get("cores"):
        parts.append(f"{m['cores']} vCPU")
    if m.get("memory_gb"):
        parts.append(f"{m['memory_gb']:g} GB")
    if m.get("gpu"):
        parts.append(f"{m.get('gpu_count') or 1}× {m['gpu']}")
    if parts[0] != "local":
        parts.append("spot" if m.get("spot") else "on-demand")
        if m.get("zone"):
            parts.append(m["zone"])
    return " · ".join(parts)


def cost_text(info: dict[str, Any]) -> str:
    return usd(0.0 if info.get("backend") == "local" else info.get("cost_usd"))


def row(info: dict[str, Any], now: float | None = None) -> dict[str, str]:
    state = info["state"] + (f" ({info['attempt']})" if info.get("attempt", 0) > 1 else "")
    return {
        "id": info["id"],
        "name": info["name"] if info["name"] != info["id"] else "",
        "state": state,
        "age": age(info["created"], now),
        "machine": machine_text(info),
        "elapsed": format_duration(info.get("elapsed_s") or 0),
        "cost": cost_text(info),
    }


def totals(infos: list[dict[str, Any]]) -> dict[str, float]:
    return {
        "jobs": len(infos),
        "cost_usd": round(sum(i.get("cost_usd") or 0.0 for i in infos), 4),
        "saving_usd": round(sum(i.get("saving_usd") or 0.0 for i in infos), 4),
        "machine_hours": round(sum((i.get("cost") or {}).get("seconds", 0.0) for i in infos) / 3600.0, 3),
    }


def rich_table(infos: list[dict[str, Any]], with_totals: bool = False) -> Any:
    from rich.markup import escape
    from rich.table import Table

    table = Table(show_edge=False, header_style="bold", pad_edge=False)
    for col in COLUMNS:
        table.add_column(
            col.upper(),
            justify="right" if col in ("age", "elapsed", "cost") else "left",
            no_wrap=col in ("id", "state", "cost", "age", "elapsed"),
        )
    now = time.time()
    for info in infos:
        r = row(info, now)
        cells = [escape(r[c]) for c in COLUMNS]
        style = RICH_STYLES.get(info["state"])
        cells[COLUMNS.index("state")] = f"[{style}]{cells[COLUMNS.index('state')]}[/]" if style else r["state"]
        table.add_row(*cells)
    if with_totals:
        t = totals(infos)
        table.add_section()
        table.add_row(
            "total", f"{t['jobs']} jobs", "", "", "", f"{t['machine_hours']:g} h", usd(t["cost_usd"]), style="bold"
        )
        if t["saving_usd"]:
            table.add_row("", "saved vs on-demand", "", "", "", "", usd(t["saving_usd"]), style="green")
    return table


def render_rich(renderable: Any, width: int = 120) -> str:
    """Plain text of a rich renderable (no colours), for text/plain and logs."""
    import io

    from rich.console import Console

    console = Console(width=width, file=io.StringIO(), color_system=None, force_jupyter=False)
    console.print(renderable)
    return console.file.getvalue()


def html_table(infos: list[dict[str, Any]], with_totals: bool = False) -> str:
    now = time.time()
    head = "".join(f"<th style='text-align:left'>{c}</th>" for c in COLUMNS)
    body = []
    for info in infos:
        r = row(info, now)
        cells = []
        for c in COLUMNS:
            value = html.escape(r[c])
            if c == "state":
                value = f"<span style='color:{STATE_COLORS.get(info['state'], 'inherit')}'>{value}</span>"
            elif c == "id":
                value = f"<code>{value}</code>"
            cells.append(f"<td style='text-align:left'>{value}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    if with_totals or not infos:
        t = totals(infos)
        body.append(
            f"<tr><td colspan='{len(COLUMNS) - 1}' style='text-align:left'><b>{t['jobs']} jobs</b>, "
            f"saved {usd(t['saving_usd'])} vs on-demand</td><td><b>{usd(t['cost_usd'])}</b></td></tr>"
        )
    return f"<table class='nbburst-jobs'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class JobsTable:
    """What ``%burst jobs`` returns: an HTML table in notebooks, a text table elsewhere; ``.rows`` for code."""

    def __init__(self, infos: list[dict[str, Any]], with_totals: bool = True):
        self.infos, self.with_totals = infos, with_totals

    @property
    def rows(self) -> list[dict[str, str]]:
        return [row(i) for i in self.infos]

    def __len__(self) -> int:
        return len(self.infos)

    def _repr_html_(self) -> str:
        return html_table(self.infos, self.with_totals)

    def __repr__(self) -> str:
        if not self.infos:
            return "no jobs"
        return render_rich(rich_table(self.infos, self.with_totals)).rstrip()


#: Without --all, job lists show unfinished jobs and this many of the newest.
RECENT_JOBS = 20
_DONE = tuple(s.value for s in State if s.terminal)
_STATE_GROUPS = {"active": tuple(s.value for s in State if not s.terminal), "done": _DONE, "finished": _DONE}


def parse_states(text: str | None) -> set[str] | None:
    """``running,failed`` / ``active`` / ``done`` -> a set of state names; UsageError for unknown words."""
    if not text:
        return None
    from ..errors import UsageError
    from ..protocol.job import State

    known = {s.value for s in State}
    out: set[str] = set()
    for word in (w.strip().upper() for w in text.split(",") if w.strip()):
        if word in known:
            out.add(word)
        elif word.lower() in _STATE_GROUPS:
            out.update(_STATE_GROUPS[word.lower()])
        else:
            raise UsageError(
                f"--state: {word.lower()!r} is not a job state; use "
                f"{', '.join(sorted(s.lower() for s in known))}, active or done"
            )
    return out


def select_infos(
    burst: Any, all_jobs: bool = False, states: str | None = None, limit: int = RECENT_JOBS
) -> list[dict[str, Any]]:
    """``Job.info()`` of the jobs to list, newest first: unfinished ones and the ``limit`` newest, or all."""
    wanted = parse_states(states)
    infos = []
    for n, job in enumerate(burst.jobs()):
        try:
            if not all_jobs and wanted is None and n >= limit and job.state.terminal:
                continue
            info = job.info()
        except Exception:  # a half-deleted or foreign folder must not break the listing
            continue
        if wanted is None or info["state"] in wanted:
            infos.append(info)
    return infos


class ConfigTable:
    """What ``%burst config`` returns: each effective setting, its value and where it came from."""

    def __init__(self, described: dict[str, dict[str, Any]]):
        self.described = described

    def __getitem__(self, name: str) -> Any:
        return self.described[name]["value"]

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td style='text-align:left'><code>{html.escape(name)}</code></td>"
            f"<td style='text-align:left'>{html.escape(str(e['value']))}</td>"
            f"<td style='text-align:left;color:{'#6b7280' if e['source'] == 'default' else 'inherit'}'>"
            f"{html.escape(e['source'])}</td></tr>"
            for name, e in self.described.items()
        )
        return (
            "<table class='nbburst-config'><thead><tr><th style='text-align:left'>setting</th>"
            "<th style='text-align:left'>value</th><th style='text-align:left'>source</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )

    def __repr__(self) -> str:
        width = max(len(n) for n in self.described) + 2
        return "\n".join(f"{name:<{width}}{str(e['value']):<44} ({e['source']})" for name, e in self.described.items())
