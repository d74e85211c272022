"""Text, HTML and rich renderings of jobs, shared by ``%burst jobs``, the job view and the CLI.

Everything here works on ``Job.info()`` dicts, so the same table comes out of a
kernel, a terminal and the Jupyter server.
"""

from __future__ import annotations

import html
import time
from typing import Any

from ..protocol import backends
from ..protocol.durations import format_duration
from ..protocol.job import State
from ..protocol.pricing import usd
from . import style

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
    if not backends.is_remote(info.get("backend")) or m.get("type") == "local":
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
    """The job's cost, and its budget when it has one: ``$0.0420 of $2.50``."""
    spent = usd(info.get("cost_usd") if backends.is_remote(info.get("backend")) else 0.0)
    cap = info.get("budget")
    return f"{spent} of {usd(cap['usd'])}" if cap else spent


def row(info: dict[str, Any], now: float | None = None) -> dict[str, str]:
    if info.get("unverified"):  # nothing read from its folder is shown: its id, the time the id tells, and why
        cells = dict.fromkeys(COLUMNS, "")
        why = f"cannot verify: {info['unverified']}"
        return {**cells, "id": info["id"], "state": why, "age": age(info["created"], now)}
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


def totals_rows(infos: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The totals under a text table (``--cost``): jobs, machine-hours and cost, then the saving if any."""
    t = totals(infos)
    rows = [
        {"id": "total", "name": f"{t['jobs']} jobs", "elapsed": f"{t['machine_hours']:g} h", "cost": usd(t["cost_usd"])}
    ]
    if t["saving_usd"]:
        rows.append({"name": "saved vs on-demand", "cost": usd(t["saving_usd"])})
    return rows


#: Columns a narrow terminal goes without, first to last (AGE is also in the id). ID, NAME and STATE
#: always stay, and whole: a name or id cut short cannot be typed back.
NARROW_DROPS = ("age", "machine", "cost", "elapsed")
_GAP = 3  # " │ " between two columns (no outer edge)


def fitting_columns(
    rows: list[dict[str, str]], width: int | None, wanted: tuple[str, ...] = ()
) -> tuple[tuple[str, ...], dict[str, int]]:
    """The columns to show in ``width`` characters (those ``wanted`` give way last), and each one's natural
    width."""
    from rich.cells import cell_len

    natural = {c: max([len(c), *(cell_len(r.get(c, "")) for r in rows)]) for c in COLUMNS}
    kept = list(COLUMNS)
    for col in sorted(NARROW_DROPS, key=lambda c: c in wanted):
        if width is None or sum(natural[c] for c in kept) + _GAP * (len(kept) - 1) <= width:
            break
        kept.remove(col)
    return tuple(kept), natural


def rich_table(infos: list[dict[str, Any]], with_totals: bool = False, width: int | None = None) -> Any:
    """The jobs table for a terminal ``width`` characters wide (None: any width): less important columns
    give way; ids and names are never cut (past ID+NAME+STATE the table is wider than ``width``)."""
    from rich.markup import escape
    from rich.table import Table

    now = time.time()
    rows = [row(info, now) for info in infos]
    extra = totals_rows(infos) if with_totals else []
    columns, natural = fitting_columns(rows + extra, width, ("cost",) if with_totals else ())
    needed = sum(natural[c] for c in columns) + _GAP * (len(columns) - 1)
    table = Table(
        show_edge=False, header_style="bold", pad_edge=False, width=needed if width and needed > width else None
    )
    for col in columns:
        whole = col in ("id", "name")
        table.add_column(
            col.upper(),
            justify="right" if col in ("age", "elapsed", "cost") else "left",
            no_wrap=col != "machine",
            overflow="fold",
            min_width=natural[col] if whole else None,
        )
    for info, r in zip(infos, rows, strict=True):
        cells = {c: escape(r[c]) for c in columns}
        markup = style.RICH_STYLES.get(info["state"])
        if markup:
            cells["state"] = f"[{markup}]{cells['state']}[/]"
        table.add_row(*cells.values())
    for n, r in enumerate(extra):
        if n == 0:
            table.add_section()
        table.add_row(*(escape(r.get(c, "")) for c in columns), style="bold" if n == 0 else "green")
    return table


def plain_lines(infos: list[dict[str, Any]], with_totals: bool = False) -> list[str]:
    """The jobs for scripts and pipes: one a line, the fields of :data:`COLUMNS` tab-separated, nothing cut,
    no header; NAME is the job's name even when it is its id. ``with_totals`` adds the totals rows last."""
    now = time.time()
    rows = [{**row(info, now), "name": info["name"]} for info in infos]
    if with_totals:
        rows += totals_rows(infos)
    return ["\t".join(r.get(c, "") for c in COLUMNS) for r in rows]


#: Width of the text rendering of tables outside a terminal (``repr`` in a kernel, logs).
TEXT_WIDTH = 120


def render_rich(renderable: Any, width: int = TEXT_WIDTH) -> str:
    """Plain text of a rich renderable (no colours), for text/plain and logs."""
    import io

    from rich.console import Console

    console = Console(width=width, file=io.StringIO(), color_system=None, force_jupyter=False)
    console.print(renderable, crop=False)
    return console.file.getvalue()


def html_table(infos: list[dict[str, Any]], with_totals: bool = False) -> str:
    now = time.time()
    head = "".join(f"<th style='{style.CELL}'>{c}</th>" for c in COLUMNS)
    body = []
    for info in infos:
        r = row(info, now)
        cells = []
        for c in COLUMNS:
            value, css = html.escape(r[c]), style.CELL
            if c == "state":
                css = style.colored_cell(style.state_color(info["state"]))
            elif c == "id":
                value = f"<code>{value}</code>"
            cells.append(f"<td style='{css}'>{value}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    if with_totals or not infos:
        t = totals(infos)
        body.append(
            f"<tr><td colspan='{len(COLUMNS) - 1}' style='{style.CELL}'><b>{t['jobs']} jobs</b>, "
            f"saved {usd(t['saving_usd'])} vs on-demand</td><td><b>{usd(t['cost_usd'])}</b></td></tr>"
        )
    return f"<table class='{style.JOBS_TABLE}'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


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
        return render_rich(rich_table(self.infos, self.with_totals, TEXT_WIDTH)).rstrip()


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
            f"<tr><td style='{style.CELL}'><code>{html.escape(name)}</code></td>"
            f"<td style='{style.CELL}'>{html.escape(str(e['value']))}</td>"
            f"<td style='{style.colored_cell(style.MUTED if e['source'] == 'default' else 'inherit')}'>"
            f"{html.escape(e['source'])}</td></tr>"
            for name, e in self.described.items()
        )
        return (
            f"<table class='{style.CONFIG_TABLE}'><thead><tr><th style='{style.CELL}'>setting</th>"
            f"<th style='{style.CELL}'>value</th><th style='{style.CELL}'>source</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )

    def __repr__(self) -> str:
        width = max(len(n) for n in self.described) + 2
        return "\n".join(f"{name:<{width}}{str(e['value']):<44} ({e['source']})" for name, e in self.described.items())
