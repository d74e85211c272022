"""The live job view: widget state recorded by nbclient, plus unit tests of its rendering."""

from __future__ import annotations

import json
import time
from pathlib import Path

import nbformat
import nbrun
import pytest

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


# -- helpers shared with test_management.py --------------------------------------------------------


def run_notebook(cells: list[str], timeout: int = 120) -> nbformat.NotebookNode:
    """Run ``cells`` in a fresh kernel (it inherits os.environ: NBBURST_ROOT/STATE_DIR of the test)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    return nbrun.run(nb, timeout)


def views(nb: nbformat.NotebookNode) -> list[dict[str, dict]]:
    """Each job view in the notebook's saved widget state: {"summary": state, "tail": state, ...}."""
    models = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    by_id = {mid: m["state"] for mid, m in models.items()}
    found = []
    for state in by_id.values():
        if "nbburst-view" not in state.get("_dom_classes", ()):
            continue
        parts: dict[str, dict] = {}
        todo = list(state["children"])
        while todo:
            child = by_id.get(todo.pop().removeprefix("IPY_MODEL_"), {})
            for cls in child.get("_dom_classes", ()):
                if cls.startswith("nbburst-view-"):
                    parts[cls.removeprefix("nbburst-view-")] = child
            todo.extend(child.get("children", ()))
        found.append(parts)
    return found


def stream(cell: dict, name: str = "stdout") -> str:
    return nbrun.stream(cell.outputs, name)


def errors(nb: nbformat.NotebookNode) -> list[str]:
    return [f"{o['ename']}: {o['evalue']}" for c in nb.cells for o in c.outputs if o["output_type"] == "error"]


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


class FakeTail:
    def __init__(self):
        self.records: list[dict] = []

    def poll(self):
        records, self.records = self.records, []
        yield from records


class FakeJob:
    """Just what JobView reads: info(), tail(), name, id, supervise(), cancel()."""

    def __init__(self, **info):
        now = time.time()
        self.id, self.name = "b20261121-000000-abcdef", "search"
        self._tail = FakeTail()
        self.cancelled = False
        self.data = {
            "id": self.id,
            "name": self.name,
            "state": "RUNNING",
            "attempt": 2,
            "backend": "gce",
            "kind": "cell",
            "machine": {
                "type": "n2-standard-64",
                "cores": 64,
                "memory_gb": 256,
                "gpu": None,
                "gpu_count": 0,
                "spot": True,
                "zone": "us-central1-a",
            },
            "created": now - 90,
            "started": now - 60,
            "ended": None,
            "elapsed_s": 60.0,
            "cost_usd": 0.0123,
            "cost_per_hour_usd": 0.7588,
            "saving_usd": 0.04,
            "cost": {"total": 0.0123, "on_demand": 0.0523, "saving": 0.04, "per_hour": 0.7588, "seconds": 60},
            "progress": {"done": 45, "total": 100, "desc": "fit"},
            "message": "",
        }
        self.data.update(info)

    def info(self):
        return dict(self.data)

    def tail(self):
        return self._tail

    def supervise(self):
        from nbburst.protocol.job import State

        return State(self.data["state"])

    def cancel(self):
        self.cancelled = True
        self.data.update(state="CANCELLED", ended=time.time(), message="cancelled by the user")


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
    view._render_logs(force=True)
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
        assert view_module._VIEWS[job.id] is view
        view.cancel_button.click()
        deadline = time.monotonic() + 10
        while view.mode != "done" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert job.cancelled and view.mode == "done"
        assert "CANCELLED" in view.summary.value and "cancelled by the user" in view.summary.value
        assert view.progress_box.layout.display == "none"  # no progress was ever reported
        assert job.id not in view_module._VIEWS

        other = view_module.JobView(FakeJob()).start("background")
        other.detach_button.click()
        assert other.mode == "detached" and not other._thread.is_alive()
        assert "%burst attach search" in other.note.value
    finally:
        view._halt()


def test_tqdm_in_the_cell_reports_progress(monkeypatch):
    import io

    from nbburst import reporting
    from nbburst.agent import tqdm_hook

    seen = []

    class Channel:
        def progress(self, done, total, desc):
            seen.append((done, total, desc))

    monkeypatch.setattr(reporting, "_channel", Channel())
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
    view._tick(force_info=True)
    assert job.state.value == "PROVISIONING"
    shown = view.console_html.value
    assert view.console_html.layout.display is None
    assert "pip: no matching version" in shown and "boot step 29" in shown
    assert "boot step 5" not in shown and "\x1b[" not in shown  # the tail only, without terminal colours
    job.cancel(wait_s=0)
    view._tick(force_info=True)
    assert view.console_html.layout.display == "none"  # once the job has a verdict, the boot log goes
