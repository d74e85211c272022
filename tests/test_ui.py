"""The live job view: widget state recorded by nbclient, plus unit tests of its rendering."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from support.notebook import errors, run_notebook, stream, views
from support.view import FakeJob

# -- in a real kernel -----------------------------------------------------------------------------


def test_view_follows_a_blocking_cell_and_ends_in_a_summary(burst_env):
    nb = run_notebook(
        [
            "%load_ext nbburst",
            "%%burst --name viewed\n"
            "import time, nbburst\n"
            "from tqdm import tqdm\n"
            "for i in tqdm(range(12), desc='fit'):\n"
            "    time.sleep(0.1)\n"
            "print('remote hello', flush=True)\n"
            "for k in range(3):\n"
            "    nbburst.progress(k + 1, 3, 'score')\n"
            "    time.sleep(0.05)\n"
            "answer = 6 * 7\n"
            "answer",
            "print(answer)",
            "import time; time.sleep(1.5)",  # widget updates after the last cell are lost (FIELD-NOTES)
        ]
    )
    assert errors(nb) == []
    cell = nb.cells[1]
    # the cell's own outputs are still normal outputs, next to the view
    assert "remote hello" in stream(cell)
    assert "fit: 100%" in stream(cell, "stderr")
    assert any(o["output_type"] == "execute_result" and o["data"]["text/plain"] == "42" for o in cell.outputs)
    assert stream(nb.cells[2]) == "42\n"
    widget_outputs = [o for o in cell.outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(widget_outputs) == 1
    assert "SUCCEEDED" in widget_outputs[0]["data"]["text/plain"]  # text for frontends without widgets
    # right after the widget, its static summary: what the notebook shows once the widget's model is gone
    at = cell.outputs.index(widget_outputs[0])
    static = cell.outputs[at + 1]
    assert "nbburst-view-static" in static["data"]["text/html"]
    assert "SUCCEEDED" in static["data"]["text/html"] and "remote hello" in static["data"]["text/html"]
    job_id = static["metadata"]["nbburst"]["job"]  # how the sidebar finds the cell of a job
    assert widget_outputs[0]["metadata"]["nbburst"]["job"] == job_id and job_id in static["data"]["text/html"]

    (view,) = views(nb)
    assert "<b>viewed</b>" in view["header"]["value"] and "local" in view["header"]["value"]
    assert "SUCCEEDED" in view["summary"]["value"] and "$0.00 (local)" in view["summary"]["value"]
    assert "SUCCEEDED" in view["state"]["value"] and "attempt 1" in view["state"]["value"]
    assert "$0.00 · local" in view["state"]["value"]
    assert view["progress"]["value"] == 1.0 and "score 3/3 (100%)" in view["progress-label"]["value"]
    assert "remote hello" in view["tail"]["value"]
    assert "fit: 100%" in view["tail"]["value"] and "fit:   0%" not in view["tail"]["value"]  # \r rewrites
    full_log = "".join(o.get("text", "") for o in view["log"]["outputs"])
    assert "remote hello" in full_log and "fit:   0%" in full_log

    (job_dir,) = (Path(burst_env["root"]) / "jobs").iterdir()
    terminal = json.loads((job_dir / "terminal.json").read_text())
    assert terminal["state"] == "SUCCEEDED"
    assert terminal["cost"]["local"] is True and terminal["cost"]["total"] == 0.0
    assert terminal["cost"]["seconds"] > 1.0


# -- rendering, without a kernel -------------------------------------------------------------------


def test_view_renders_machine_cost_progress_and_saving():
    import ipywidgets  # noqa: F401  (imported before the clock starts: its first import can take seconds)

    from nbburst.ui.view import JobView

    job = FakeJob()
    view = JobView(job)
    header = view.header.value
    for part in ("<b>search</b>", job.id, "n2-standard-64", "64 vCPU", "256 GB", "spot", "us-central1-a"):
        assert part in header
    status = view.status.value
    assert "RUNNING" in status and "attempt 2" in status and "1m 30s" in status
    assert "$0.0123" in status and "$0.7588/h" in status
    assert view.bar.value == pytest.approx(0.45) and "fit 45/100 (45%)" in view.bar_label.value
    assert view.progress_box.layout.display is None  # shown once there is progress

    for text in ("epoch 1\n", "\r 10%|#", "\r 50%|#####", "\r100%|##########\n", "done\n"):
        view.feed({"s": "stdout", "x": text})
    view.refresh()
    tail = view.tail_html.value
    assert "epoch 1" in tail and "100%|##########" in tail and "50%" not in tail and "done" in tail
    assert view.full_log.outputs and "50%|#####" in view.full_log.outputs[0]["text"]

    job.data.update(
        state="SUCCEEDED",
        ended=job.data["created"] + 125,
        cost_usd=0.0263,
        cost={"total": 0.0263, "on_demand": 0.108, "saving": 0.0817, "per_hour": 0.7588, "seconds": 120},
    )
    view.finish()
    summary = view.summary.value
    assert "SUCCEEDED" in summary and "in 2m 05s" in summary and "$0.0263" in summary
    assert "saved $0.0817 (76%) vs on-demand" in summary and "2 attempts" in summary
    assert view.buttons.layout.display == "none" and view.summary.layout.display is None


def test_background_view_cancel_button_and_detach():
    from nbburst.ui import view as view_module

    job = FakeJob(progress=None)
    view = view_module.JobView(job).start("background")
    try:
        assert view_module.live_view(job.id) is view
        view.cancel_button.click()
        deadline = time.monotonic() + 10
        while view.mode != "done" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert job.cancelled and view.mode == "done"
        assert "CANCELLED" in view.summary.value and "cancelled by the user" in view.summary.value
        assert view.progress_box.layout.display == "none"  # no progress was ever reported
        assert view_module.live_view(job.id) is None

        other = view_module.JobView(FakeJob()).start("background")
        other.detach_button.click()
        assert other.mode == "detached" and not other.following()
        assert "%burst attach search" in other.note.value
    finally:
        view.stop()


@pytest.fixture
def connect():
    """``nbburst.reporting.connect`` for the test: the progress hooks report to the channel it is given, and
    to none after the test."""
    from nbburst import reporting

    yield reporting.connect
    reporting.connect(None)


def test_tqdm_in_the_cell_reports_progress(connect):
    import io

    from nbburst.agent.hooks import tqdm_progress as tqdm_hook

    seen = []

    class Channel:
        def progress(self, done, total, desc):
            seen.append((done, total, desc))

    connect(Channel())
    tqdm_hook.install()
    from tqdm import tqdm

    for _ in tqdm(range(30), desc="outer", file=io.StringIO()):
        for _ in tqdm(range(5), leave=False, file=io.StringIO(), desc="inner"):
            pass
    assert seen[0] == (0, 30, "outer") and seen[-1] == (30, 30, "outer")
    assert all(desc == "outer" for _, _, desc in seen)  # nested bars do not fight over the bar
    assert len(seen) < 10  # throttled, not one report per iteration


def test_view_shows_the_machine_console_while_it_boots(burst_env, monkeypatch):
    """A machine that is slow or failing to boot shows its console (the serial port on Compute Engine)."""
    from nbburst.client.burst import Burst
    from nbburst.machines.local import LocalMachines
    from nbburst.ui.view import JobView

    monkeypatch.setattr(LocalMachines, "launch", lambda self, *a, **k: "held")  # the machine never starts
    burst = Burst()
    job = burst.submit(print, "never runs")
    console = LocalMachines(burst.settings).console_path(f"nbburst-{job.id}")
    console.parent.mkdir(parents=True, exist_ok=True)
    console.write_text("".join(f"boot step {i}\n" for i in range(30)) + "\x1b[31mpip: no matching version\x1b[0m\n")
    view = JobView(job)
    view.refresh()
    assert job.state.value == "PROVISIONING"
    shown = view.console_html.value
    assert view.console_html.layout.display is None
    assert "pip: no matching version" in shown and "boot step 29" in shown
    assert "boot step 5" not in shown and "\x1b[" not in shown  # the tail only, without terminal colours
    job.cancel(wait_s=0)
    view.refresh()
    assert view.console_html.layout.display == "none"  # once the job has a verdict, the boot log goes


def test_tail_keeps_each_stream_on_its_own_lines_and_marks_stderr():
    from nbburst.ui.viewmodel import TailLines

    tail = TailLines()
    tail.add("stdout", "[worker 1] fitting fold ")
    tail.add("stderr", "UserWarning: slow\n")
    tail.add("stdout", "3 of 5\n")
    tail.add("stderr", "\r 10%|#\r 90%|#########")
    assert tail.last() == [
        ("stderr", "UserWarning: slow"),
        ("stdout", "[worker 1] fitting fold 3 of 5"),  # not spliced by the stderr line in between
        ("stderr", " 90%|#########"),  # a bar still drawing: its last state
    ]
    rendered = tail.html(lambda stream: f"class='nbburst-view-{stream}'")
    assert "<span class='nbburst-view-stderr'>UserWarning: slow</span>" in rendered
    assert "\n[worker 1] fitting fold 3 of 5\n" in rendered  # stdout as it is


def test_a_backlog_is_replayed_in_few_blocks():
    from nbburst.ui.records import MAX_RUNS, compact

    chatty = [{"s": "stdout" if n % 2 else "stderr", "x": f"line {n}\n"} for n in range(800)]
    display = {"s": "display", "data": {"text/plain": "a figure"}}
    replay = compact([*chatty, display, {"s": "stderr", "x": "\r 10%\r 50%\r100%\n"}, {"s": "stdout", "x": "end\n"}])
    assert [r["s"] for r in replay] == ["stdout", "stderr", "display", "stderr", "stdout"]
    assert replay[0]["x"] == "".join(f"line {n}\n" for n in range(1, 800, 2))  # each stream in its order
    assert replay[1]["x"] == "".join(f"line {n}\n" for n in range(0, 800, 2))
    assert replay[2] is display and replay[3]["x"] == "100%\n"  # a progress bar's rewrites: its last one
    few = [
        {"s": "stdout", "x": "a\n"},
        {"s": "stdout", "x": "b\n"},
        {"s": "stderr", "x": "c\n"},
        {"s": "stdout", "x": "d\n"},
    ]
    assert len(few) < MAX_RUNS and [(r["s"], r["x"]) for r in compact(few)] == [
        ("stdout", "a\nb\n"),
        ("stderr", "c\n"),
        ("stdout", "d\n"),
    ]  # a few runs keep their order


class RecordingChannel:
    """The runner's channel as the progress hooks use it: progress reports and the "loop ended" event."""

    def __init__(self):
        self.seen: list = []

    def progress(self, done, total, desc):
        self.seen.append((done, total, desc))

    def send(self, event):
        self.seen.append("ended" if event == {"s": "progress", "done": None, "total": None, "desc": ""} else event)


def test_scikit_learn_searches_report_fits_without_user_code(connect):
    import joblib
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, cross_val_score

    from nbburst.agent.hooks import joblib_progress as joblib_hook

    channel = RecordingChannel()
    connect(channel)
    joblib_hook.install()
    X, y = make_classification(120, random_state=0)
    with joblib.parallel_backend("threading", n_jobs=2):  # the callback path of a parallel backend, without processes
        GridSearchCV(LogisticRegression(), {"C": [0.1, 1.0, 10.0]}, cv=3).fit(X, y)
    *reports, end = channel.seen
    assert end == "ended"  # then the bar goes, not frozen at 9/9 while the search refits
    assert reports[-1] == (9, 9, "fits") and all(total == 9 and desc == "fits" for _, total, desc in reports)
    assert [done for done, _, _ in reports] == sorted(done for done, _, _ in reports)

    channel.seen.clear()
    cross_val_score(LogisticRegression(), X, y, cv=4)
    assert channel.seen[-2:] == [(4, 4, "fits"), "ended"]
    channel.seen.clear()
    joblib.Parallel(n_jobs=2, backend="threading")(joblib.delayed(abs)(-i) for i in range(20))
    assert channel.seen[-2:] == [(20, 20, "tasks"), "ended"]


def test_a_closed_tqdm_bar_clears_the_progress(connect):
    import io

    from nbburst.agent.hooks import tqdm_progress as tqdm_hook

    channel = RecordingChannel()
    connect(channel)
    tqdm_hook.install()
    from tqdm import tqdm

    for _ in tqdm(range(5), desc="epoch 1", file=io.StringIO()):
        pass
    assert channel.seen[-2:] == [(5, 5, "epoch 1"), "ended"]


class DisplayRecorder:
    """A display handle: what the view sends to its static summary."""

    def __init__(self):
        self.bundles: list[dict] = []
        self.metadata: list[dict] = []

    def update(self, bundle, raw=False, metadata=None):
        self.bundles.append(bundle)
        self.metadata.append(metadata)


def test_view_phase_eta_one_copy_and_static_summary():
    from nbburst.ui.view import JobView

    job = FakeJob(state="SUBMITTED", progress=None, attempt=1)
    clock = [1000.0]
    view = JobView(job, clock=lambda: clock[0])
    assert "waiting for a machine" in view.phase.value and view.phase.layout.display is None
    job.data.update(state="RUNNING", message="loading inputs and importing their modules")
    view.refresh()
    assert "loading inputs" in view.phase.value and "loading inputs" not in view.status.value

    # While a cell waits, its own output area shows the log: the view's tail and full log stay hidden.
    view.set_mode("blocking")
    assert view.tail_html.layout.display == "none" and view.log_box.layout.display == "none"
    view.set_mode("background")
    assert view.tail_html.layout.display is None and view.log_box.layout.display is None

    job.data.update(message="", progress={"done": 10, "total": 100, "desc": "fits"})
    view.refresh()
    assert view.bar_label.value == "fits 10/100 (10%)"  # no pace yet
    clock[0] += 20.0  # the next report comes 20 s after the first
    job.data.update(progress={"done": 55, "total": 100, "desc": "fits"})
    view.refresh()
    assert view.bar_label.value.startswith("fits 55/100 (55%) · ETA ")
    job.data.update(progress={"done": None, "total": None, "desc": ""})  # the loop ended
    view.refresh()
    assert view.progress_box.layout.display == "none"

    view.static_handle = DisplayRecorder()
    view.feed({"s": "stdout", "x": "fold 1 done\n"})
    view.feed({"s": "stderr", "x": "ConvergenceWarning\n"})
    view.refresh()
    static = view.static_handle.bundles[-1]["text/html"]
    assert "RUNNING" in static and "n2-standard-64" in static and job.id in static
    assert "fold 1 done" in static and "ConvergenceWarning</span>" in static and "class=" not in static.split(">", 1)[1]
    job.data.update(state="SUCCEEDED", ended=job.data["created"] + 125)
    view.finish()
    final = view.static_handle.bundles[-1]
    assert "SUCCEEDED" in final["text/html"] and "in 2m 05s" in final["text/html"]
    assert list(final) == ["text/html"]  # text frontends show the widget's own text line: one copy
    assert view.static_handle.metadata[-1] == {"nbburst": {"job": job.id}}  # an update replaces the metadata
