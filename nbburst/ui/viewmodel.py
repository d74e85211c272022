"""What the live job view shows, worked out without widgets: the view's model.

:class:`ViewModel` takes state in (the job's info as last read from the Store, the log records the view was
handed, the time) and gives out what to render: the header, the status line, the phase, the progress bar,
the log tail, the text to add to the full log, the summary, the static HTML summary and the machine's
console. :class:`~nbburst.ui.view.JobView` owns the widgets, the updater thread and the display handles,
decides when to refresh, and copies these answers into its widgets. The split keeps every rendering rule a
plain function of state, testable without a kernel, a thread or a clock.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..protocol import backends
from ..protocol.durations import format_duration
from ..protocol.job import State
from ..protocol.pricing import usd
from . import style
from .records import record_text, rewrite_line
from .tables import machine_text

TAIL_LINES = 12
CONSOLE_LINES = 10
FULL_LOG_LIMIT = 256 * 1024  # characters kept in the full-log widget; `%burst logs` has everything
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
ENDED = frozenset(s.value for s in State if s.terminal)  # verdicts; a summary that cannot be verified is none
_SYMBOLS = {"SUCCEEDED": "✔", "FAILED": "✖", "CANCELLED": "■"}

#: What the phase line says in the first seconds, before the machine says more or the cell prints.
_PHASES = {
    "SUBMITTED": "waiting for a machine",
    "PROVISIONING": "starting the machine",
    "PREEMPTED": "the machine was taken back; relaunching",
    "RUNNING": "running the cell, no output yet",
}


@dataclass(frozen=True)
class Bar:
    """The progress bar as it should look: ``fraction`` is None for a loop of unknown length (the bar keeps
    its value), ``bar_style`` is the ipywidgets one ("success" once complete, "info" without a total)."""

    fraction: float | None
    label: str
    bar_style: str


class ViewModel:
    """The state of one job's view and what to render from it (see the module)."""

    def __init__(self, info: dict[str, Any], wall: float) -> None:
        self.info = info
        #: ``time.time()`` when ``info`` was read: live numbers are extrapolated from it.
        self.info_wall = wall
        self.tail = TailLines()
        #: The progress bar shown, None while it is hidden (no loop, or the loop ended).
        self.bar: Bar | None = None
        self._log_buffer: list[str] = []
        self._log_chars = 0
        self._rate: tuple[Any, float, float] | None = None  # (desc, total), when and where the pace is measured from
        #: The files the cell wrote in its working folder and the job kept (path -> size), once it ended.
        self.files: dict[str, int] = {}

    # -- state in -----------------------------------------------------------------------------------
    def update(self, info: dict[str, Any], wall: float) -> None:
        """The job's info as read from the Store at ``wall`` (``time.time()``)."""
        self.info, self.info_wall = info, wall

    def add(self, record: dict[str, Any]) -> None:
        """A log record: into the tail and, up to :data:`FULL_LOG_LIMIT` characters, the full log."""
        text = record_text(record)
        if not text:
            return
        self.tail.add(record.get("s") if record.get("s") in ("stdout", "stderr") else "event", text)
        if self._log_chars < FULL_LOG_LIMIT:
            self._log_buffer.append(text)
            self._log_chars += len(text)
            if self._log_chars >= FULL_LOG_LIMIT:
                name = self.info["name"]
                self._log_buffer.append(
                    f"\n… the log goes on: `%burst logs {name}` or `nbburst logs {name}` shows all of it\n"
                )

    def has_log_text(self) -> bool:
        """Whether text is waiting to be added to the full log."""
        return bool(self._log_buffer)

    def take_log_text(self) -> str:
        """The text added to the log since the last call, for the full log."""
        text, self._log_buffer = "".join(self._log_buffer), []
        return text

    def update_progress(self, now: float) -> None:
        """Work out :attr:`bar` from the info's progress; ``now`` (monotonic seconds) paces the ETA.

        No progress in the info leaves the bar as it is; a loop that ended hides it, so that no bar stays
        frozen at its 100% while the cell goes on."""
        progress = self.info.get("progress")
        if not progress:
            return
        if progress.get("done") is None:
            self._rate = None
            self.bar = None
            return
        done, total, desc = progress.get("done") or 0, progress.get("total"), progress.get("desc") or ""
        if not total:
            self.bar = Bar(None, f"{html.escape(desc)} {done:g}".strip(), "info")
            return
        fraction = max(0.0, min(1.0, float(done) / float(total)))
        label = f"{html.escape(desc)} {done:g}/{total:g} ({fraction * 100:.0f}%)".strip()
        eta = self._eta(desc, done, total, now)
        if eta is not None:
            label += f" · ETA {format_duration(eta)}"
        self.bar = Bar(fraction, label, "success" if fraction >= 1 else "")

    def _eta(self, desc: str, done: float, total: float, now: float) -> float | None:
        """Seconds left at the pace seen since this loop was first seen; None before there is one."""
        if self._rate is None or self._rate[0] != (desc, total) or done < self._rate[2]:
            self._rate = ((desc, total), now, float(done))
            return None
        _, since, start = self._rate
        if done >= total or done <= start or now <= since:
            return None
        return (total - done) * (now - since) / (done - start)

    # -- what to render -------------------------------------------------------------------------------
    def ended(self) -> bool:
        """Whether the job has its verdict."""
        return self.info["state"] in ENDED

    def text(self) -> str:
        """The plain-text line of frontends without widgets."""
        i = self.info
        return f"nbburst job {i['name']} ({i['id']}) on {machine_text(i)}"

    def header_html(self) -> str:
        i = self.info
        name = f"<b>{html.escape(i['name'])}</b> · " if i["name"] != i["id"] else ""
        job = html.escape(i["id"])
        sidebar = (  # the lab extension opens the job in the "Burst jobs" sidebar on a click
            f" · <a class='{style.part('open')}' data-nbburst-open='{job}' "
            f"title='Show this job in the Burst jobs sidebar'>in the sidebar</a>"
        )
        return (
            f"<div class='{style.LINE}'>{name}<code data-nbburst-job='{job}'>{job}</code> · "
            f"{html.escape(machine_text(i, long=True))}{sidebar}</div>"
        )

    def live_numbers(self, wall: float) -> tuple[float, float]:
        """Elapsed seconds and cost at ``wall`` (``time.time()``), extrapolated from the last Store read."""
        i = self.info
        drift = 0.0 if self.ended() else max(0.0, wall - self.info_wall)
        elapsed = (i.get("ended") or (self.info_wall + drift)) - i["created"]
        cost = i.get("cost_usd") or 0.0
        if i["state"] in ("PROVISIONING", "RUNNING"):
            cost += (i.get("cost_per_hour_usd") or 0.0) * drift / 3600.0
        return max(0.0, elapsed), cost

    def status_html(self, wall: float) -> str:
        """State · attempt · elapsed · cost (against the budget) · workers."""
        i = self.info
        elapsed, cost = self.live_numbers(wall)
        parts = [
            style.state_html(i["state"]),
            f"attempt {max(1, i.get('attempt') or 1)}",
            format_duration(elapsed),
        ]
        if not backends.is_remote(i.get("backend")):
            parts.append(f"{usd(0.0)} · local")
        else:
            cap = f" of {usd(i['budget']['usd'])}" if i.get("budget") else ""  # spend against --budget
            parts.append(f"{usd(cost)}{cap} · {usd(i.get('cost_per_hour_usd') or 0.0)}/h")
        if i.get("workers"):
            parts.append(workers_html(i["workers"], backends.is_remote(i.get("backend"))))
        if i.get("kept"):  # --keep: the machine stays warm after the cell
            parts.append(f"machine kept {format_duration(i['kept']['idle_s'])} after it")
        return " · ".join(parts)

    def phase_text(self) -> str:
        """What the job is doing while it has nothing else to show: the machine's own message (loading
        inputs, restoring checkpoints, waiting for capacity), else a word on its state."""
        i = self.info
        if self.ended():
            return ""
        message = i.get("message") or ""
        if message or self.tail.any_output or (i.get("progress") or {}).get("done") is not None:
            return message
        return _PHASES.get(i["state"], "")

    def phase_html(self) -> str:
        text = self.phase_text()
        return f"<div class='{style.LINE}'>{html.escape(text)}…</div>" if text else ""

    def tail_html(self) -> str:
        """The log's last lines for the view (its stylesheet marks stderr and events)."""
        tail = self.tail.html(lambda stream: f"class='{style.part(stream)}'")
        return f"<pre>{tail}</pre>" if tail else ""

    def console_html(self, console: str) -> str:
        """The tail of the machine's console (``console``, as read), without terminal colours; "" if empty."""
        value = "\n".join(ANSI.sub("", console).rstrip().splitlines()[-CONSOLE_LINES:])
        if not value:
            return ""
        return f"<div class='{style.NOTE}'>machine console (booting):</div><pre>{html.escape(value)}</pre>"

    def summary_html(self, wall: float, inline: bool = False, background: bool = False) -> str:
        """The one-line end of the job (state, duration, machine, cost) and its notes, as HTML; ``inline``
        styles it for HTML shown without the view's stylesheet (the static summary); ``background`` (nobody
        waited for the job) adds how to bring its outputs in."""
        i = self.info
        state = i["state"]
        elapsed, cost = self.live_numbers(wall)
        c = i.get("cost") or {}
        what = (style.state_inline_html if inline else style.state_html)(state, _SYMBOLS.get(state, ""))
        note = _inline_note if inline else style.note_html
        verb = "in" if state == "SUCCEEDED" else "after"
        parts = [f"{what} {verb} {format_duration(elapsed)}", html.escape(machine_text(i))]
        if not backends.is_remote(i.get("backend")):
            parts.append(f"{usd(0.0)} (local)")
        else:
            money = usd(cost) + (f" of a {usd(i['budget']['usd'])} budget" if i.get("budget") else "")
            if c.get("saving"):
                pct = 100.0 * c["saving"] / c["on_demand"] if c.get("on_demand") else 0.0
                money += f", saved {usd(c['saving'])} ({pct:.0f}%) vs on-demand"
            parts.append(money)
        if i.get("attempt", 0) > 1:
            parts.append(f"{i['attempt']} attempts")
        summary = " · ".join(parts)
        if backends.is_remote(i.get("backend")) and c.get("notes"):  # how the cost was estimated, e.g. no live prices
            summary += "<br>" + note("; ".join(c["notes"]))
        if state != "SUCCEEDED" and i.get("message"):
            summary += "<br>" + note(i["message"])
        if self.files:  # said here, not in the cell's output: a plain cell prints nothing of the files it writes
            summary += "<br>" + note(files_text(self.files))
        if i.get("kept"):
            summary += "<br>" + note(kept_text(i["kept"], i.get("backend"), wall))
        if background and state == "SUCCEEDED":
            summary += "<br>" + note(f"`%burst attach {i['name']}` or `job.result()` brings its outputs in")
        return summary

    def summary_text(self, summary_html: str) -> str:
        """``summary_html`` (from :meth:`summary_html`) as one line of plain text, for frontends without widgets."""
        summary = re.sub(r"<[^>]+>", "", summary_html.replace("<br>", "; "))
        return f"nbburst job {self.info['name']} ({self.info['id']}): {summary}"

    def static_html(self, wall: float, background: bool = False) -> str:
        """The view as plain HTML with inline styles: what the notebook shows once the widget is gone."""
        i = self.info
        name = f"<b>{html.escape(i['name'])}</b> · " if i["name"] != i["id"] else ""
        lines = [f"{name}<code>{html.escape(i['id'])}</code> · {html.escape(machine_text(i, long=True))}"]
        if self.ended():
            lines.append(self.summary_html(wall, inline=True, background=background))
        else:
            elapsed, cost = self.live_numbers(wall)
            money = usd(0.0) + " · local" if not backends.is_remote(i.get("backend")) else usd(cost)
            state = style.state_inline_html(i["state"])
            lines.append(  # the line the lab extension refreshes from the server while the job is unfinished
                f"<span data-nbburst-live=''>{state} · attempt {max(1, i.get('attempt') or 1)} · "
                f"{format_duration(elapsed)} · {money}</span>"
            )
            phase = self.phase_text()
            if phase:
                lines.append(_inline_note(phase + "…"))
            if i.get("kept"):
                lines.append(_inline_note(kept_text(i["kept"], i.get("backend"), wall)))
            if self.bar is not None:
                lines.append(html.escape(re.sub(r"<[^>]+>", "", self.bar.label)))
        body = "".join(f"<div>{line}</div>" for line in lines)
        inline = {"stderr": style.STATIC_STDERR, "event": style.STATIC_MUTED}
        tail = self.tail.html(lambda stream: f"style='{inline[stream]}'")
        if tail:
            body += f"<pre style='{style.STATIC_PRE}'>{tail}</pre>"
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.info_wall))
        follow = "" if self.ended() else f"; `%burst attach {i['name']}` follows it live"
        body += f"<div>{_inline_note(f'as of {when}{follow}')}</div>"
        job, state = html.escape(i["id"]), html.escape(i["state"])
        return (
            f"<div class='{style.STATIC}' data-nbburst-job='{job}' data-nbburst-state='{state}' "
            f"style='{style.STATIC_BOX}'>{body}</div>"
        )


def kept_text(kept: dict[str, Any], backend: str | None, wall: float) -> str:
    """``--keep``: that the machine stays warm, what it costs an hour and when it goes (each cell of its shape
    renews it)."""
    price = f"{usd(kept['cost_per_hour_usd'])}/h" if backends.is_remote(backend) else f"{usd(0.0)}/h (local)"
    idle = format_duration(kept["idle_s"])
    if kept.get("until") is None:
        return f"machine kept warm at {price}: it goes {idle} after this cell, unless a cell of its shape runs"
    goes = time.strftime("%H:%M:%S", time.localtime(kept["until"]))
    left = format_duration(max(0.0, kept["until"] - wall))
    return (
        f"machine kept warm at {price} for {idle} without a cell: it goes at {goes} (in {left}) "
        "unless a cell of its shape runs on it"
    )


#: How many of the files a job's cell wrote are named in one line.
FILES_SHOWN = 8


def files_text(files: dict[str, int]) -> str:
    """One line naming the files a job's cell wrote in its working folder (``files``: path -> size)."""
    names = sorted(files)
    more = f" and {len(names) - FILES_SHOWN} more" if len(names) > FILES_SHOWN else ""
    return f"the cell wrote {len(names)} file(s) in its working folder: {', '.join(names[:FILES_SHOWN])}{more}"


def workers_html(workers: dict[str, Any], priced: bool) -> str:
    """``--workers``: how many worker machines are in which state, their cost, and the Dask dashboard's link."""
    states = ", ".join(f"{n} {state.lower()}" for state, n in sorted(workers["states"].items()))
    text = f"{workers['count']} workers ({html.escape(states)})"
    if priced:
        text += f" {usd(workers['cost_usd'])}"
    if workers.get("dashboard"):
        text += f" · <a href='{html.escape(workers['dashboard'])}' target='_blank'>Dask dashboard</a>"
    return text


def _inline_note(text: str) -> str:
    return f"<span style='{style.STATIC_MUTED}'>{html.escape(text)}</span>"


class TailLines:
    """The last lines of a job's log, each with the stream it came from.

    Each stream keeps its own unfinished line, so a line that stdout has not
    ended yet is never spliced with stderr's (or an event's); a carriage return
    rewrites its stream's line, as a terminal shows a progress bar."""

    KEEP = TAIL_LINES * 4

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []  # (stream, text) of ended lines
        self.partial: dict[str, str] = {}  # stream -> its unfinished line
        self.any_output = False

    def add(self, stream: str, text: str) -> None:
        text = ANSI.sub("", text)
        self.any_output = self.any_output or stream != "event"
        *ended, rest = text.split("\n")
        current = self.partial.pop(stream, "")
        for piece in ended:
            self.lines.append((stream, rewrite_line(current + piece)))
            current = ""
        current = rewrite_line(current + rest)
        if current:
            self.partial[stream] = current
        if len(self.lines) > self.KEEP:
            del self.lines[: -TAIL_LINES * 2]

    def last(self) -> list[tuple[str, str]]:
        return (self.lines + list(self.partial.items()))[-TAIL_LINES:]

    def html(self, attribute: Callable[[str], str]) -> str:
        """The last lines, escaped; stderr and event lines in spans with ``attribute(stream)``."""
        out = []
        for stream, text in self.last():
            text = html.escape(text)
            out.append(text if stream == "stdout" else f"<span {attribute(stream)}>{text}</span>")
        return "\n".join(out)
