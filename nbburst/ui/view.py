"""The live job view: an ipywidgets panel that follows one job.

    name · id · machine (type, vCPUs, memory, GPU, spot/on-demand, zone) · in the sidebar
    RUNNING · attempt 1 · 1m 05s · $0.0123 · $0.76/h
    loading inputs                                   (the phase, until the cell prints)
    [#########-------]  fits 450/1000 (45%) · ETA 3m 10s
    last lines of the log (stderr marked)            (only when the cell does not show them)
    > Full log
    [Cancel] [Detach]

and, once the job ends, a one-line summary (state, duration, cost, saving
versus on-demand).

One copy of everything: while a cell waits, its own output area shows what the
job prints, so the view hides its log tail and full log; they show once nobody
waits (detached, interrupted). Beside the widget the view shows a static HTML
summary (state, machine, time, cost, log tail), kept current by the same thread:
a widget's model dies with its kernel, and after a restart that summary is what
the notebook shows in the view's place (the lab extension's notebook stylesheet
shows the widget while it lives, the summary otherwise). Both outputs carry the
job's id in their metadata, so the sidebar finds the cell of a job.

One background thread per view does every widget update (FIELD-NOTES: comm
messages are thread-safe; ``Output.append_stdout``, never ``with out:`` from a
thread). The view runs in one of these modes:

- ``blocking``: the cell waits in ``Job.wait`` and hands each log record to
  :meth:`JobView.feed`; the thread renders them with the status, cost and progress.
- ``background``: nobody waits (``--detach``, or after an interrupt): the thread
  reads the log itself, supervises the job (relaunch after preemption) and ends
  with the summary.
- ``detached`` / ``done``: the thread has stopped; the widgets keep their last state.

Button callbacks run only while the kernel is idle. While a cell waits, the
lab extension routes a click on Cancel through the server extension (which
cancels the job in the Store; the waiting cell sees it end) and a click on
Detach into a kernel interrupt (which detaches a waiting cell).

Its look (classes under one root class, a stylesheet of theme colours carried
inside the view) comes from :mod:`nbburst.ui.style`.
"""

from __future__ import annotations

import html
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import JobNotFound
from ..protocol import backends
from ..protocol.durations import format_duration
from ..protocol.job import State
from ..protocol.pricing import usd
from . import style
from .records import record_text, rewrite_line
from .tables import machine_text

if TYPE_CHECKING:
    from ..client.burst import Job, LogTail

TICK_SECONDS = 0.25  # widget refresh
INFO_SECONDS = 1.0  # status/cost reads from the Store
FULL_LOG_SECONDS = 2.0  # the full-log Output resends all its outputs on every append: batch them
TAIL_LINES = 12
STATIC_SECONDS = 5.0  # the static summary is a fallback: refreshed at this pace (and on every state change)
METADATA_KEY = "nbburst"  # display metadata: {"nbburst": {"job": id}}, how the sidebar finds a job's cell
CONSOLE_SECONDS = 3.0  # serial-port reads while a machine boots (a Compute Engine API call each)
CONSOLE_LINES = 10
FULL_LOG_LIMIT = 256 * 1024  # characters kept in the full-log widget; `%burst logs` has everything
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_SYMBOLS = {"SUCCEEDED": "✔", "FAILED": "✖", "CANCELLED": "■"}
_ENDED = {s.value for s in State if s.terminal}  # verdicts; a summary that cannot be verified (UNVERIFIED) is none

_VIEWS: dict[str, JobView] = {}  # job id -> its live view in this kernel
_VIEWS_LOCK = threading.Lock()


def _classes(part: str) -> tuple[str]:
    """The ``_dom_classes`` of one part of the view (its stylesheet and tests find it by them)."""
    return (style.part(part),)


class JobView:
    def __init__(self, job: Job, tail: LogTail | None = None):
        import ipywidgets as w

        self.job = job
        self.tail = tail or job.tail()
        self.mode = "idle"
        self._lock = threading.Lock()
        self._pending: list[dict[str, Any]] = []
        self._tail_lines = TailLines()
        self._log_buffer: list[str] = []
        self._log_chars = 0
        self._log_flushed = 0.0
        self._info: dict[str, Any] = job.info()
        self._info_wall = time.time()
        self._info_mono = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._done = False
        self._cancelling = False
        self._last_tail = self._last_status = self._last_console = self._last_phase = ""
        self._static_handle: Any = None
        self._static_value = ""
        self._static_mono = -STATIC_SECONDS
        self._static_state = ""
        self._rate: tuple[Any, float, float] | None = None  # (desc, total), when and where the rate was measured from
        self._console_mono = -CONSOLE_SECONDS
        self.error: BaseException | None = None
        self._handle: Any = None

        # The stylesheet travels inside the view (a hidden HTML widget), so saved notebooks keep it too.
        self.stylesheet = w.HTML(style.stylesheet(), _dom_classes=_classes("style"), layout=w.Layout(display="none"))
        self.header = w.HTML(self._header_html(), _dom_classes=_classes("header"))
        self.status = w.HTML("", _dom_classes=_classes("state"))
        self.phase = w.HTML("", _dom_classes=_classes("phase"), layout=w.Layout(display="none"))
        self.bar = w.FloatProgress(
            value=0.0, min=0.0, max=1.0, layout=w.Layout(width="50%"), _dom_classes=_classes("progress")
        )
        self.bar_label = w.HTML("", _dom_classes=_classes("progress-label"))
        self.progress_box = w.HBox([self.bar, self.bar_label], layout=w.Layout(display="none"))
        self.tail_html = w.HTML("", _dom_classes=_classes("tail"), layout=w.Layout(display="none"))
        # While the machine boots, its console (serial port) is the only sign of life, or of trouble.
        self.console_html = w.HTML("", _dom_classes=_classes("console"), layout=w.Layout(display="none"))
        self.full_log = w.Output(_dom_classes=_classes("log"), layout=w.Layout(max_height="24em", overflow="auto"))
        self.log_box = w.Accordion(
            children=[self.full_log], titles=("Full log",), selected_index=None, layout=w.Layout(display="none")
        )
        self.cancel_button = w.Button(
            description="Cancel",
            icon="stop",
            button_style="danger",
            tooltip="Stop the job and delete its machine",
            _dom_classes=_classes("cancel"),
        )
        self.detach_button = w.Button(
            description="Detach",
            icon="unlink",
            tooltip="Stop following; the job keeps running (`%burst attach` shows it "
            "again). While the cell waits, this interrupts the kernel.",
            _dom_classes=_classes("detach"),
        )
        self.buttons = w.HBox([self.cancel_button, self.detach_button])
        self.note = w.HTML("", _dom_classes=_classes("note"))
        self.summary = w.HTML("", _dom_classes=_classes("summary"), layout=w.Layout(display="none"))
        self.widget = w.VBox(
            [
                self.stylesheet,
                self.header,
                self.status,
                self.phase,
                self.progress_box,
                self.console_html,
                self.tail_html,
                self.log_box,
                self.buttons,
                self.note,
                self.summary,
            ],
            _dom_classes=(style.ROOT,),
        )
        self.cancel_button.on_click(lambda _b: self.cancel())
        self.detach_button.on_click(lambda _b: self.detach())
        self._render_status()

    # -- life cycle ------------------------------------------------------------------------
    def show(self) -> JobView:
        """Display the view in the current cell, and its static summary right after it; frontends without
        widgets see a text line instead."""
        from IPython.display import display

        self._handle = display(self._bundle(), raw=True, display_id=True, metadata=self._metadata())
        self._static_value = self._static_html()
        self._static_handle = display(self._static_bundle(), raw=True, display_id=True, metadata=self._metadata())
        return self

    def _metadata(self) -> dict[str, Any]:
        """The display metadata of both outputs, sent with every update too (an update replaces it)."""
        return {METADATA_KEY: {"job": self.job.id}}

    def _static_bundle(self) -> dict[str, Any]:
        """HTML only: text frontends show the widget's own text line, once."""
        return {"text/html": self._static_value}

    def _bundle(self, text: str = "") -> dict[str, Any]:
        data = dict(self.widget._repr_mimebundle_() or {})
        i = self._info
        data["text/plain"] = text or f"nbburst job {i['name']} ({i['id']}) on {machine_text(i)}"
        return data

    def start(self, mode: str = "blocking") -> JobView:
        """Start the updater thread; ``blocking`` when the cell feeds records, else ``background``."""
        with _VIEWS_LOCK:
            old = _VIEWS.get(self.job.id)
            _VIEWS[self.job.id] = self
        if old is not None and old is not self:
            old.detach(note="another view of this job took over")
        self._set_mode(mode)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"nbburst-view-{self.job.id}", daemon=True)
        self._thread.start()
        return self

    def feed(self, record: dict[str, Any]) -> None:
        """A log record the waiting cell read (blocking mode); rendered by the thread."""
        with self._lock:
            self._pending.append(record)

    def background(self) -> None:
        """The cell stopped waiting (interrupt): follow the job from the thread from now on."""
        self._set_mode("background")
        if self._thread is None or not self._thread.is_alive():
            self.start("background")

    def _set_mode(self, mode: str) -> None:
        """The log tail and the full log show only when no waiting cell shows the job's output itself."""
        self.mode = mode
        shown = None if mode == "background" else "none"
        if not self._done and self.tail_html.layout.display != shown:
            self.tail_html.layout.display = self.log_box.layout.display = shown

    def finish(self) -> None:
        """The cell's wait returned (blocking mode): render the last records and the summary."""
        self._halt()
        try:
            self._tick(force_info=True)
            self._render_done()
        except Exception as exc:  # the view must never fail the cell whose job it shows
            self.error = exc
            self.note.value = html.escape(f"(view: {type(exc).__name__}: {exc})")

    def detach(self, note: str = "") -> None:
        """Stop following the job; it keeps running."""
        if self._done:
            return
        self._halt()
        self.mode = "detached"  # the tail stays as it was: it is the last that is known
        self.detach_button.disabled = True
        name = self.job.name
        self.note.value = html.escape(
            note
            or f"Detached: job {name} keeps running. "
            f"`%burst attach {name}` follows it again and brings its outputs in; "
            f"`%burst cancel {name}` stops it."
        )

    def cancel(self) -> None:
        """Cancel the job (in a worker: it waits for the machine to go)."""
        if self._done or self._cancelling:
            return
        self._cancelling = True
        self.cancel_button.disabled = True
        self.note.value = "Cancelling…"
        if self.mode in ("idle", "detached"):
            self.start("background")  # someone has to render the end

        def work() -> None:
            try:
                self.job.cancel()
            except Exception as exc:
                self.error = exc
                self.note.value = html.escape(f"Cancel failed: {exc}")

        threading.Thread(target=work, name=f"nbburst-cancel-{self.job.id}", daemon=True).start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _halt(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    # -- the updater thread -------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
                if self.mode == "background" and self._info["state"] in _ENDED:
                    self._tick(force_info=True)  # the last log chunks
                    self._render_done()
                    return
            except JobNotFound as exc:  # the job is gone (deleted by `nbburst gc`): nothing left to follow
                self.error = exc
                self.note.value = html.escape(f"(view: {exc})")
                self.mode = "detached"
                return
            except Exception as exc:  # a flaky Store must not kill the view: show it, retry
                self.error = exc
                self.note.value = html.escape(f"(view: {type(exc).__name__}: {exc}; retrying)")
            self._stop.wait(TICK_SECONDS)

    def _tick(self, force_info: bool = False) -> None:
        if self.mode == "background":
            for record in self.tail.poll():
                self.feed(record)
        now = time.monotonic()
        if force_info or now - self._info_mono >= INFO_SECONDS:
            if self.mode == "background":
                try:
                    self.job.supervise()
                except Exception:
                    pass
            self._info, self._info_wall, self._info_mono = self.job.info(), time.time(), now
        self._render_console(now)
        self._render_logs(force=force_info)
        self._render_status()
        self._render_static(now, force=force_info)

    # -- rendering ------------------------------------------------------------------------------
    def _header_html(self) -> str:
        i = self._info
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

    def _live_numbers(self) -> tuple[float, float]:
        """Elapsed wall time and cost, extrapolated from the last Store read."""
        i = self._info
        terminal = i["state"] in _ENDED
        drift = 0.0 if terminal else max(0.0, time.time() - self._info_wall)
        elapsed = (i.get("ended") or (self._info_wall + drift)) - i["created"]
        cost = i.get("cost_usd") or 0.0
        if i["state"] in ("PROVISIONING", "RUNNING"):
            cost += (i.get("cost_per_hour_usd") or 0.0) * drift / 3600.0
        return max(0.0, elapsed), cost

    def _render_status(self) -> None:
        i = self._info
        elapsed, cost = self._live_numbers()
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
        value = " · ".join(parts)
        if value != self._last_status:
            self.status.value = self._last_status = value
            if i["state"] != self._static_state:
                self._static_state, self._static_mono = i["state"], -STATIC_SECONDS  # refresh the summary now
        self._render_progress(i.get("progress"))
        self._render_phase()

    def _phase_text(self) -> str:
        """What the job is doing while it has nothing else to show: the machine's own message (loading
        inputs, restoring checkpoints, waiting for capacity), else a word on its state."""
        i = self._info
        if i["state"] in _ENDED:
            return ""
        message = i.get("message") or ""
        if message or self._tail_lines.any_output or (i.get("progress") or {}).get("done") is not None:
            return message
        return _PHASES.get(i["state"], "")

    def _render_phase(self) -> None:
        text = self._phase_text()
        if text != self._last_phase:
            self._last_phase = text
            self.phase.value = f"<div class='{style.LINE}'>{html.escape(text)}…</div>" if text else ""
            self.phase.layout.display = None if text else "none"

    def _render_console(self, now: float) -> None:
        """The tail of the machine's console while it provisions; hidden once the agent reports."""
        if self._info["state"] != "PROVISIONING":
            self.console_html.layout.display = "none"
            return
        if now - self._console_mono < CONSOLE_SECONDS:
            return
        self._console_mono = now
        lines = _ANSI.sub("", self.job.console()).rstrip().splitlines()[-CONSOLE_LINES:]
        value = "\n".join(lines)
        if value and value != self._last_console:
            self._last_console = value
            self.console_html.value = (
                f"<div class='{style.NOTE}'>machine console (booting):</div><pre>{html.escape(value)}</pre>"
            )
            self.console_html.layout.display = None

    def _render_progress(self, progress: dict[str, Any] | None) -> None:
        if not progress:
            return
        if progress.get("done") is None:  # a loop ended: no bar frozen at its 100% while the cell goes on
            self._rate = None
            if self.progress_box.layout.display != "none":
                self.progress_box.layout.display = "none"
            return
        done, total, desc = progress.get("done") or 0, progress.get("total"), progress.get("desc") or ""
        if total:
            fraction = max(0.0, min(1.0, float(done) / float(total)))
            label = f"{html.escape(desc)} {done:g}/{total:g} ({fraction * 100:.0f}%)".strip()
            eta = self._eta(desc, done, total)
            if eta is not None:
                label += f" · ETA {format_duration(eta)}"
            if self.bar.value != fraction:
                self.bar.value = fraction
            if self.bar.bar_style != ("success" if fraction >= 1 else ""):
                self.bar.bar_style = "success" if fraction >= 1 else ""
        else:
            label = f"{html.escape(desc)} {done:g}".strip()
            self.bar.bar_style = "info"
        if self.bar_label.value != label:
            self.bar_label.value = label
        if self.progress_box.layout.display == "none":
            self.progress_box.layout.display = None

    def _eta(self, desc: str, done: float, total: float) -> float | None:
        """Seconds left at the pace seen since this loop was first seen in this view; None before there is one."""
        now = time.monotonic()
        if self._rate is None or self._rate[0] != (desc, total) or done < self._rate[2]:
            self._rate = ((desc, total), now, float(done))
            return None
        _, since, start = self._rate
        if done >= total or done <= start or now <= since:
            return None
        return (total - done) * (now - since) / (done - start)

    def _render_logs(self, force: bool = False) -> None:
        with self._lock:
            records, self._pending = self._pending, []
        for record in records:
            text = record_text(record)
            if not text:
                continue
            self._tail_lines.add(record.get("s") if record.get("s") in ("stdout", "stderr") else "event", text)
            if self._log_chars < FULL_LOG_LIMIT:
                self._log_buffer.append(text)
                self._log_chars += len(text)
                if self._log_chars >= FULL_LOG_LIMIT:
                    name = self.job.name
                    self._log_buffer.append(
                        f"\n… the log goes on: `%burst logs {name}` or `nbburst logs {name}` shows all of it\n"
                    )
        tail = self._tail_lines.html(lambda stream: f"class='{style.part(stream)}'")
        if tail != self._last_tail:
            self._last_tail = tail
            self.tail_html.value = f"<pre>{tail}</pre>" if tail else ""
        now = time.monotonic()
        if self._log_buffer and (force or now - self._log_flushed >= FULL_LOG_SECONDS):
            text, self._log_buffer = "".join(self._log_buffer), []
            self.full_log.append_stdout(text)
            self._log_flushed = now

    def _summary(self, inline: bool = False) -> str:
        """The one-line end of the job (state, duration, machine, cost) and its notes, as HTML; ``inline``
        styles it for HTML shown without the view's stylesheet (the static summary)."""
        i = self._info
        state = i["state"]
        elapsed, cost = self._live_numbers()
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
        if self.mode == "background" and state == "SUCCEEDED":
            summary += "<br>" + note(f"`%burst attach {i['name']}` or `job.result()` brings its outputs in")
        return summary

    def _static_html(self) -> str:
        """The view as plain HTML with inline styles: what the notebook shows once the widget is gone."""
        i = self._info
        name = f"<b>{html.escape(i['name'])}</b> · " if i["name"] != i["id"] else ""
        lines = [f"{name}<code>{html.escape(i['id'])}</code> · {html.escape(machine_text(i, long=True))}"]
        if i["state"] in _ENDED:
            lines.append(self._summary(inline=True))
        else:
            elapsed, cost = self._live_numbers()
            money = usd(0.0) + " · local" if not backends.is_remote(i.get("backend")) else usd(cost)
            state = style.state_inline_html(i["state"])
            lines.append(  # the line the lab extension refreshes from the server while the job is unfinished
                f"<span data-nbburst-live=''>{state} · attempt {max(1, i.get('attempt') or 1)} · "
                f"{format_duration(elapsed)} · {money}</span>"
            )
            if self._last_phase:
                lines.append(_inline_note(self._last_phase + "…"))
            if self.progress_box.layout.display != "none":
                lines.append(html.escape(re.sub(r"<[^>]+>", "", self.bar_label.value)))
        body = "".join(f"<div>{line}</div>" for line in lines)
        inline = {"stderr": style.STATIC_STDERR, "event": style.STATIC_MUTED}
        tail = self._tail_lines.html(lambda stream: f"style='{inline[stream]}'")
        if tail:
            body += f"<pre style='{style.STATIC_PRE}'>{tail}</pre>"
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self._info_wall))
        follow = "" if i["state"] in _ENDED else f"; `%burst attach {i['name']}` follows it live"
        body += f"<div>{_inline_note(f'as of {when}{follow}')}</div>"
        job, state = html.escape(i["id"]), html.escape(i["state"])
        return (
            f"<div class='{style.STATIC}' data-nbburst-job='{job}' data-nbburst-state='{state}' "
            f"style='{style.STATIC_BOX}'>{body}</div>"
        )

    def _render_static(self, now: float, force: bool = False) -> None:
        """Refresh the static summary beside the widget: on a change of state, else every STATIC_SECONDS."""
        if self._static_handle is None or (not force and now - self._static_mono < STATIC_SECONDS):
            return
        value = self._static_html()
        if value == self._static_value:
            return
        self._static_value, self._static_mono = value, now
        try:
            self._static_handle.update(self._static_bundle(), raw=True, metadata=self._metadata())
        except Exception:  # a fallback must never break the view
            pass

    def _render_done(self) -> None:
        i = self._info
        summary = self._summary()
        self.summary.value = summary
        self.summary.layout.display = None
        self._render_phase()
        if self._handle is not None:  # static renderings (nbconvert, text frontends) get the summary too
            try:
                self._handle.update(
                    self._bundle(
                        f"nbburst job {i['name']} ({i['id']}): " + re.sub(r"<[^>]+>", "", summary.replace("<br>", "; "))
                    ),
                    raw=True,
                    metadata=self._metadata(),
                )
            except Exception:
                pass
        self.buttons.layout.display = "none"
        self.tail_html.layout.display = "none"
        self.status.layout.display = "none"
        if self._cancelling or self.note.value.startswith("("):
            self.note.value = ""
        self._done = True
        self.mode = "done"
        self._render_static(time.monotonic(), force=True)
        with _VIEWS_LOCK:
            if _VIEWS.get(self.job.id) is self:
                del _VIEWS[self.job.id]


#: What the phase line says in the first seconds, before the machine says more or the cell prints.
_PHASES = {
    "SUBMITTED": "waiting for a machine",
    "PROVISIONING": "starting the machine",
    "PREEMPTED": "the machine was taken back; relaunching",
    "RUNNING": "running the cell, no output yet",
}


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
        text = _ANSI.sub("", text)
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


def in_kernel(shell: Any = None) -> bool:
    """Whether widgets can be shown: an IPython kernel with a frontend."""
    if shell is None:
        try:
            from IPython import get_ipython

            shell = get_ipython()
        except ImportError:
            return False
    return getattr(shell, "kernel", None) is not None


def show(job: Job, mode: str = "background") -> JobView:
    """Show a live view of ``job`` in the current cell (it follows the job in the background)."""
    return JobView(job).show().start(mode)
