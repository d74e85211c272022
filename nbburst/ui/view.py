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

What the widgets show is worked out by its model, :class:`nbburst.ui.viewmodel.ViewModel`
(state in, HTML and text out, no widgets); its look (classes under one root class, a
stylesheet of theme colours carried inside the view) comes from :mod:`nbburst.ui.style`.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import JobNotFound
from . import style
from .viewmodel import ViewModel

if TYPE_CHECKING:
    from ..client.job import Job
    from ..client.logtail import LogTail

TICK_SECONDS = 0.25  # widget refresh
INFO_SECONDS = 1.0  # status/cost reads from the Store
FULL_LOG_SECONDS = 2.0  # the full-log Output resends all its outputs on every append: batch them
STATIC_SECONDS = 5.0  # the static summary is a fallback: refreshed at this pace (and on every state change)
METADATA_KEY = "nbburst"  # display metadata: {"nbburst": {"job": id}}, how the sidebar finds a job's cell
CONSOLE_SECONDS = 3.0  # serial-port reads while a machine boots (a Compute Engine API call each)

_VIEWS: dict[str, JobView] = {}  # job id -> its live view in this kernel
_VIEWS_LOCK = threading.Lock()


def _classes(part: str) -> tuple[str]:
    """The ``_dom_classes`` of one part of the view (its stylesheet and tests find it by them)."""
    return (style.part(part),)


def live_view(job_id: str) -> JobView | None:
    """The view that follows job ``job_id`` in this kernel, if one does (a newer view takes over an older)."""
    with _VIEWS_LOCK:
        return _VIEWS.get(job_id)


class JobView:
    """The widgets of one job's view, the thread that updates them and the display handles; what they show
    comes from :attr:`model`. ``clock`` is the monotonic clock that paces refreshes and progress ETAs."""

    def __init__(self, job: Job, tail: LogTail | None = None, clock: Callable[[], float] = time.monotonic):
        import ipywidgets as w

        self.job = job
        self.tail = tail or job.tail()
        self.clock = clock
        self.mode = "idle"
        self.model = ViewModel(job.info(), time.time())
        #: The display handle of the static summary beside the widget (set by :meth:`show`).
        self.static_handle: Any = None
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._pending: list[dict[str, Any]] = []
        self._log_flushed = 0.0
        self._info_mono = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._done = False
        self._cancelling = False
        self._last_tail = self._last_status = self._last_console = self._last_phase = ""
        self._static_value = ""
        self._static_mono = -STATIC_SECONDS
        self._static_state = ""
        self._console_mono = -CONSOLE_SECONDS
        self._handle: Any = None

        # The stylesheet travels inside the view (a hidden HTML widget), so saved notebooks keep it too.
        self.stylesheet = w.HTML(style.stylesheet(), _dom_classes=_classes("style"), layout=w.Layout(display="none"))
        self.header = w.HTML(self.model.header_html(), _dom_classes=_classes("header"))
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
        self._static_value = self.static_html()
        self.static_handle = display(self._static_bundle(), raw=True, display_id=True, metadata=self._metadata())
        return self

    def _metadata(self) -> dict[str, Any]:
        """The display metadata of both outputs, sent with every update too (an update replaces it)."""
        return {METADATA_KEY: {"job": self.job.id}}

    def _static_bundle(self) -> dict[str, Any]:
        """HTML only: text frontends show the widget's own text line, once."""
        return {"text/html": self._static_value}

    def _bundle(self, text: str = "") -> dict[str, Any]:
        data = dict(self.widget._repr_mimebundle_() or {})
        data["text/plain"] = text or self.model.text()
        return data

    def start(self, mode: str = "blocking") -> JobView:
        """Start the updater thread; ``blocking`` when the cell feeds records, else ``background``."""
        with _VIEWS_LOCK:
            old = _VIEWS.get(self.job.id)
            _VIEWS[self.job.id] = self
        if old is not None and old is not self:
            old.detach(note="another view of this job took over")
        self.set_mode(mode)
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
        self.set_mode("background")
        if not self.following():
            self.start("background")

    def set_mode(self, mode: str) -> None:
        """Follow the job as ``mode`` says. The log tail and the full log show only when no waiting cell shows
        the job's output itself (``background``)."""
        self.mode = mode
        shown = None if mode == "background" else "none"
        if not self._done and self.tail_html.layout.display != shown:
            self.tail_html.layout.display = self.log_box.layout.display = shown

    def following(self) -> bool:
        """Whether the updater thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def finish(self) -> None:
        """The cell's wait returned (blocking mode): render the last records and the summary."""
        self.stop()
        try:
            self.refresh()
            self._render_done()
        except Exception as exc:  # the view must never fail the cell whose job it shows
            self.error = exc
            self.note.value = html.escape(f"(view: {type(exc).__name__}: {exc})")

    def detach(self, note: str = "") -> None:
        """Stop following the job; it keeps running."""
        if self._done:
            return
        self.stop()
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

    def stop(self) -> None:
        """Stop the updater thread (within 5 s); the widgets keep what they show."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    # -- the updater thread -------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
                if self.mode == "background" and self.model.ended():
                    self.refresh()  # the last log chunks
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

    def refresh(self) -> None:
        """Read the job's status now and render it with the records fed so far (the thread does this on its
        own pace; a waiting cell's end and tests call it)."""
        self._tick(force_info=True)

    def _tick(self, force_info: bool = False) -> None:
        if self.mode == "background":
            for record in self.tail.poll():
                self.feed(record)
        now = self.clock()
        if force_info or now - self._info_mono >= INFO_SECONDS:
            if self.mode == "background":
                try:
                    self.job.supervise()
                except Exception:
                    pass
            self.model.update(self.job.info(), time.time())
            self._info_mono = now
        self._render_console(now)
        self._render_logs(now, force=force_info)
        self._render_status()
        self._render_static(now, force=force_info)

    def static_html(self) -> str:
        """The static summary as it would be shown now (see :meth:`ViewModel.static_html`)."""
        return self.model.static_html(time.time(), background=self.mode == "background")

    # -- rendering: the model's answers into the widgets ---------------------------------------------
    def _render_status(self) -> None:
        state = self.model.info["state"]
        value = self.model.status_html(time.time())
        if value != self._last_status:
            self.status.value = self._last_status = value
            if state != self._static_state:
                self._static_state, self._static_mono = state, -STATIC_SECONDS  # refresh the summary now
        self._render_progress()
        self._render_phase()

    def _render_phase(self) -> None:
        value = self.model.phase_html()
        if value != self._last_phase:
            self._last_phase = value
            self.phase.value = value
            self.phase.layout.display = None if value else "none"

    def _render_console(self, now: float) -> None:
        """The tail of the machine's console while it provisions; hidden once the agent reports."""
        if self.model.info["state"] != "PROVISIONING":
            self.console_html.layout.display = "none"
            return
        if now - self._console_mono < CONSOLE_SECONDS:
            return
        self._console_mono = now
        value = self.model.console_html(self.job.console())
        if value and value != self._last_console:
            self.console_html.value = self._last_console = value
            self.console_html.layout.display = None

    def _render_progress(self) -> None:
        self.model.update_progress(self.clock())
        bar = self.model.bar
        if bar is None:
            if self.progress_box.layout.display != "none":
                self.progress_box.layout.display = "none"
            return
        if bar.fraction is not None and self.bar.value != bar.fraction:
            self.bar.value = bar.fraction
        if self.bar.bar_style != bar.bar_style:
            self.bar.bar_style = bar.bar_style
        if self.bar_label.value != bar.label:
            self.bar_label.value = bar.label
        if self.progress_box.layout.display == "none":
            self.progress_box.layout.display = None

    def _render_logs(self, now: float, force: bool = False) -> None:
        with self._lock:
            records, self._pending = self._pending, []
        for record in records:
            self.model.add(record)
        tail = self.model.tail_html()
        if tail != self._last_tail:
            self.tail_html.value = self._last_tail = tail
        if self.model.has_log_text() and (force or now - self._log_flushed >= FULL_LOG_SECONDS):
            self.full_log.append_stdout(self.model.take_log_text())
            self._log_flushed = now

    def _render_static(self, now: float, force: bool = False) -> None:
        """Refresh the static summary beside the widget: on a change of state, else every STATIC_SECONDS."""
        if self.static_handle is None or (not force and now - self._static_mono < STATIC_SECONDS):
            return
        value = self.static_html()
        if value == self._static_value:
            return
        self._static_value, self._static_mono = value, now
        try:
            self.static_handle.update(self._static_bundle(), raw=True, metadata=self._metadata())
        except Exception:  # a fallback must never break the view
            pass

    def _render_done(self) -> None:
        try:
            self.model.files = self.job.files()
        except Exception:  # a note of the summary must never break the view
            pass
        summary = self.model.summary_html(time.time(), background=self.mode == "background")
        self.summary.value = summary
        self.summary.layout.display = None
        self._render_phase()
        if self._handle is not None:  # static renderings (nbconvert, text frontends) get the summary too
            try:
                self._handle.update(self._bundle(self.model.summary_text(summary)), raw=True, metadata=self._metadata())
            except Exception:
                pass
        self.buttons.layout.display = "none"
        self.tail_html.layout.display = "none"
        self.status.layout.display = "none"
        if self._cancelling or self.note.value.startswith("("):
            self.note.value = ""
        self._done = True
        self.mode = "done"
        self._render_static(self.clock(), force=True)
        with _VIEWS_LOCK:
            if _VIEWS.get(self.job.id) is self:
                del _VIEWS[self.job.id]


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
