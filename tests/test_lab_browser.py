"""The "Burst jobs" sidebar end to end: a real ``jupyter lab``, a real kernel, headless Chromium.

A notebook submits two detached ``%%burst`` cells on the local backend; the
sidebar shows the first one running then succeeded, with its log, and cancels
the second one. Another notebook waits in a ``%%burst`` cell: its job view is
cancelled while the kernel is busy, in the light and the dark theme, links to
the sidebar and back, is detached from while its cell waits, and after a
kernel restart and a reload the notebook shows the views' static summaries
instead of a widget error, the unfinished job's kept current from the server. Set
``NBBURST_UPDATE_SCREENSHOTS=1`` to refresh the screenshots in ``docs/``
(otherwise they stay in the test's tmp folder).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from support import agents_under, kill_agents, wait_until
from support.lab import CHROMIUM, CHROMIUM_ARGS, REPO, LabServer

from nbburst.client.burst import Burst
from nbburst.machines.base import GONE

# On a developer's machine without a browser the test is skipped; CI (scripts/setup installs both) must run it.
if os.environ.get("CI"):
    import playwright.sync_api as playwright_sync

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: scripts/setup installs it (apt-get install -y chromium)"
else:
    playwright_sync = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

CELLS = [
    "%load_ext nbburst",
    "%%burst --detach --name e2e-ok\n"
    "import time\n"
    "for i in range(4):\n"
    "    print(f'e2e line {i}', flush=True)\n"
    "    time.sleep(2)\n"
    "answer = 42",
    "%%burst --detach --name e2e-cancel\nimport time\nprint('waiting to be cancelled', flush=True)\ntime.sleep(120)",
]
SIDEBAR = "#nbburst-sidebar"
# In the page: the CSS rules that style a job view in the notebook without being the view's own (those of the
# sidebar once did: its progress bar became a 60 px stub), and whether the view's colours come from the theme.
VIEW_STYLE = """() => {
  const views = [...document.querySelectorAll('.jp-Notebook .nbburst-view')];
  const nodes = views.flatMap(view => [view, ...view.querySelectorAll('*')]);
  const foreign = [];
  const visit = rules => {
    for (const rule of rules) {
      if (!rule.selectorText) {
        if (rule.cssRules) visit(rule.cssRules);
        continue;
      }
      const own = rule.selectorText.split(',').every(s => s.trim().startsWith('.nbburst-view'));
      if (rule.selectorText.includes('nbburst') && !own && nodes.some(n => n.matches(rule.selectorText))) {
        foreign.push(rule.selectorText);
      }
    }
  };
  for (const sheet of document.styleSheets) visit(sheet.cssRules);
  const view = views[views.length - 1];
  const probe = document.createElement('div');
  probe.style.background = 'var(--jp-layout-color2)';
  probe.style.borderTop = '1px solid var(--jp-border-color2)';
  view.appendChild(probe);
  const theme = getComputedStyle(probe);
  const tail = getComputedStyle(view.querySelector('.nbburst-view-tail pre'));
  const result = {
    views: views.length,
    foreign,
    tailBackground: tail.backgroundColor === theme.backgroundColor,
    border: getComputedStyle(view).borderTopColor === theme.borderTopColor
  };
  probe.remove();
  return result;
}"""


def write_notebook(path: Path, cells: list[str] = CELLS) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, path)


def run_cell(page, index: int, expect_text: str, timeout: float = 60_000) -> None:
    """Run one cell as a user does (click it, Shift+Enter) and wait for its output."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    prompt = cell.locator(".jp-InputPrompt")
    for _ in range(3):  # a key pressed while JupyterLab still moves focus around can be lost
        cell.locator(".cm-content").click()
        playwright_sync.expect(cell).to_have_class(re.compile(r"\bjp-mod-active\b"))
        page.keyboard.press("Shift+Enter")
        try:
            playwright_sync.expect(prompt).not_to_have_text(re.compile(r"^\[ \]:$"), timeout=5_000)
            break
        except AssertionError:
            continue
    playwright_sync.expect(cell).to_contain_text(expect_text, timeout=timeout)


def job_row(page, name: str):
    return page.locator(f"{SIDEBAR} .nbburst-job[data-job-id]", has_text=name)


def test_sidebar_follows_and_cancels_jobs(tmp_path, monkeypatch):
    if not (REPO / "nbburst" / "labextension" / "package.json").exists():
        pytest.fail(
            "the lab extension is not built: cd labextension && npm install && npm run build "
            "(pip install -e . builds it too)"
        )
    expect = playwright_sync.expect
    store, state = tmp_path / "store", tmp_path / "state"
    env = {"NBBURST_ROOT": str(store), "NBBURST_STATE_DIR": str(state), "NBBURST_BACKEND": "local"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    server = LabServer(tmp_path / "lab", env=env)
    screenshot, sessions_shot = tmp_path / "sidebar.png", tmp_path / "sessions.png"
    burst = Burst()  # the notebook's and the server's Store and state folder, from the environment above
    try:
        server.start()
        write_notebook(server.root_dir / "burst.ipynb")
        with playwright_sync.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page_errors: list[str] = []
                page.on("pageerror", lambda error: page_errors.append(str(error)))
                page.goto(f"{server.url}/lab/tree/burst.ipynb?token={server.token}")
                expect(page.locator(".jp-Notebook .jp-Cell")).to_have_count(len(CELLS), timeout=60_000)
                kernel = page.locator(".jp-StatusBar-TextItem", has_text="Python 3 (ipykernel) | Idle")
                expect(kernel).to_be_visible(timeout=60_000)

                # Submit the first job from the notebook, then follow it in the sidebar.
                run_cell(page, 0, "[1]")
                run_cell(page, 1, "submitted")
                page.locator('.jp-SideBar li[data-id="nbburst-sidebar"]').click()
                expect(page.locator(SIDEBAR)).to_be_visible()
                ok = job_row(page, "e2e-ok")
                expect(ok.locator(".nbburst-state-running")).to_be_visible(timeout=20_000)
                expect(ok.locator(".nbburst-state-succeeded")).to_be_visible(timeout=30_000)

                # Its log, in the detail view.
                ok.click()
                log = page.locator(f"{SIDEBAR} pre.nbburst-log")
                expect(log).to_contain_text("e2e line 0\ne2e line 1\ne2e line 2\ne2e line 3", timeout=15_000)
                expect(page.locator(f"{SIDEBAR} .nbburst-detail-view .nbburst-state-succeeded")).to_be_visible()
                expect(page.locator(f"{SIDEBAR} .nbburst-cancel")).to_be_hidden()  # nothing to cancel
                page.locator(f"{SIDEBAR} .nbburst-back").click()

                # A second, long job: listed as running, then cancelled from the panel.
                run_cell(page, 2, "submitted")
                doomed = job_row(page, "e2e-cancel")
                expect(doomed.locator(".nbburst-state-running")).to_be_visible(timeout=20_000)
                expect(page.locator(f"{SIDEBAR} .nbburst-job")).to_have_count(2)
                page.screenshot(path=str(screenshot))

                # Its live view in the notebook: styled by its own stylesheet from the theme, by nothing else.
                tail = page.locator(".jp-Notebook .jp-Cell").nth(2).locator(".nbburst-view .nbburst-view-tail pre")
                expect(tail).to_contain_text("waiting to be cancelled", timeout=15_000)
                assert page.evaluate(VIEW_STYLE) == {"views": 2, "foreign": [], "tailBackground": True, "border": True}

                doomed.click()
                expect(log).to_contain_text("waiting to be cancelled", timeout=15_000)
                page.locator(f"{SIDEBAR} .nbburst-cancel").click()
                dialog = page.locator(".jp-Dialog")
                expect(dialog).to_contain_text("e2e-cancel")
                dialog.get_by_role("button", name="Cancel job").click()
                expect(page.locator(f"{SIDEBAR} .nbburst-detail-view .nbburst-state-cancelled")).to_be_visible(
                    timeout=20_000
                )
                page.locator(f"{SIDEBAR} .nbburst-back").click()
                expect(doomed.locator(".nbburst-state-cancelled")).to_be_visible(timeout=10_000)
                expect(ok.locator(".nbburst-state-succeeded")).to_be_visible()

                # A warm session: listed above the jobs with its cores and cost, and stopped from the sidebar.
                warm = burst.sessions.start(name="e2e-warm", cores=1, idle="5m", timeout="10m", preload=[])
                row = page.locator(f'{SIDEBAR} .nbburst-session[data-session-name="e2e-warm"]')
                expect(row.locator(".nbburst-state-running")).to_be_visible(timeout=10_000)
                expect(row).to_contain_text("local · 1 core · 0 cells")
                expect(row).to_contain_text(re.compile(r"\d+m \d+s left"))
                page.locator(SIDEBAR).screenshot(path=str(sessions_shot))
                row.locator(".nbburst-session-stop").click()
                dialog.get_by_role("button", name="Stop session").click()
                expect(page.locator(f"{SIDEBAR} .nbburst-sessions-view")).to_be_hidden(timeout=15_000)
                assert burst.sessions.all() == []
                assert burst.machines("local").describe(warm.machine).state == GONE
                assert not page_errors, page_errors
            finally:
                browser.close()
                for left in burst.sessions.all():
                    burst.sessions.stop(left.name)

        states = {job.name: job.state.value for job in burst.jobs()}
        assert states == {"e2e-ok": "SUCCEEDED", "e2e-cancel": "CANCELLED"}
        wait_until(lambda: not agents_under(str(store)), 60, what="the cancelled job's machine to go away")
    finally:
        server.stop()
        kill_agents(str(store), grace=0)
    if os.environ.get("NBBURST_UPDATE_SCREENSHOTS"):
        (REPO / "docs").mkdir(exist_ok=True)
        shutil.copy(screenshot, REPO / "docs" / "sidebar.png")
        shutil.copy(sessions_shot, REPO / "docs" / "sessions.png")


WAITING_CELLS = [
    "%load_ext nbburst",
    "%%burst --name view-wait\n"
    "import sys, time, nbburst\n"
    "print('waiting in the cell', flush=True)\n"
    "print('a warning on stderr', file=sys.stderr, flush=True)\n"
    "nbburst.progress(3, 10, 'steps')\n"
    "time.sleep(120)",
    "%%burst --name view-detached\nimport time\nprint('detach me', flush=True)\ntime.sleep(120)",
]


def lab_env(tmp_path: Path, monkeypatch) -> dict[str, str]:
    store, state = tmp_path / "store", tmp_path / "state"
    env = {"NBBURST_ROOT": str(store), "NBBURST_STATE_DIR": str(state), "NBBURST_BACKEND": "local"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def set_theme(page, theme: str) -> None:
    """Pick a theme from the Settings menu, as a user does."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Settings").click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Theme$")).hover()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(theme)}$")).click()
    playwright_sync.expect(page.locator("body")).to_have_attribute(
        "data-jp-theme-light", "false" if "Dark" in theme else "true", timeout=15_000
    )


def test_job_view_cancels_while_the_cell_waits_and_survives_a_restart(tmp_path, monkeypatch):
    expect = playwright_sync.expect
    env = lab_env(tmp_path, monkeypatch)
    server = LabServer(tmp_path / "lab", env=env)
    shots = {name: tmp_path / f"{name}.png" for name in ("view-light", "view-dark", "view-after-restart")}
    try:
        server.start()
        notebook = server.root_dir / "wait.ipynb"
        write_notebook(notebook, WAITING_CELLS)
        with playwright_sync.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1200, "height": 800})
                page_errors: list[str] = []
                page.on("pageerror", lambda error: page_errors.append(str(error)))
                page.on("dialog", lambda dialog: dialog.accept())
                page.goto(f"{server.url}/lab/tree/wait.ipynb?token={server.token}")
                expect(page.locator(".jp-Notebook .jp-Cell")).to_have_count(len(WAITING_CELLS), timeout=60_000)
                idle = page.locator(".jp-StatusBar-TextItem", has_text="Python 3 (ipykernel) | Idle")
                expect(idle).to_be_visible(timeout=60_000)
                run_cell(page, 0, "[1]")
                run_cell(page, 1, "waiting in the cell")

                # The cell waits: the kernel is busy, the view runs, and the output is there once.
                cell = page.locator(".jp-Notebook .jp-Cell").nth(1)
                view = cell.locator(".nbburst-view")
                expect(view.locator(".nbburst-view-progress-label")).to_contain_text("steps 3/10", timeout=20_000)
                expect(cell.locator(".jp-InputPrompt")).to_have_text("[*]:")  # still executing
                outputs = cell.locator(".jp-OutputArea")
                expect(outputs.get_by_text("waiting in the cell").filter(visible=True)).to_have_count(1)
                expect(view.locator(".nbburst-view-tail")).to_be_hidden()  # the cell's own output shows it
                expect(cell.locator(".nbburst-view-static")).to_be_hidden()  # the widget lives: no fallback
                output = cell.locator(".jp-Cell-outputWrapper")
                output.screenshot(path=str(shots["view-light"]))
                set_theme(page, "JupyterLab Dark")
                output.screenshot(path=str(shots["view-dark"]))

                # The view links to its job in the sidebar, and the sidebar back to the cell.
                view.locator("[data-nbburst-open]").click()
                expect(page.locator(f"{SIDEBAR} .nbburst-detail-name")).to_have_text("view-wait", timeout=15_000)
                page.locator(".jp-Notebook .jp-Cell").nth(0).locator(".cm-content").click()
                page.locator(f"{SIDEBAR} .nbburst-show-cell").click()
                expect(cell).to_have_class(re.compile(r"\bjp-mod-active\b"))

                # Cancel from the view while the cell waits: the waiting cell ends with the job.
                expect(cell.locator(".jp-InputPrompt")).to_have_text("[*]:")
                view.locator(".nbburst-view-cancel").click()
                expect(view.locator(".nbburst-view-summary")).to_contain_text("CANCELLED", timeout=30_000)
                expect(idle).to_be_visible(timeout=15_000)
                expect(cell.locator(".nbburst-view-static")).to_contain_text("CANCELLED", timeout=15_000)

                # Detach from the view while the cell waits: the cell ends, the job and its view go on.
                run_cell(page, 2, "detach me")
                waiting = page.locator(".jp-Notebook .jp-Cell").nth(2)
                expect(waiting.locator(".nbburst-view-running")).to_be_visible(timeout=20_000)
                expect(waiting.locator(".jp-InputPrompt")).to_have_text("[*]:")
                waiting.locator(".nbburst-view-detach").click()
                expect(waiting).to_contain_text("detached from job view-detached", timeout=20_000)
                expect(waiting.locator(".jp-InputPrompt")).to_have_text(re.compile(r"^\[\d+\]:$"))
                expect(waiting.locator(".nbburst-view-tail")).to_contain_text(
                    "detach me"
                )  # nobody waits: the tail shows
                detached = waiting.locator(".nbburst-view-static")
                expect(detached).to_contain_text("RUNNING", timeout=20_000)

                # Saved, kernel restarted, page reloaded: the widget's model is gone, the static summary shows.
                page.keyboard.press("Control+s")
                wait_until(lambda: "CANCELLED" in notebook.read_text(), 60, what="the notebook to be saved")
                (session,) = server.api("api/sessions")
                server.api(f"api/kernels/{session['kernel']['id']}/restart", method="POST")
                page.reload()
                static = page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".nbburst-view-static")
                expect(static).to_be_visible(timeout=60_000)
                expect(static).to_contain_text("CANCELLED")
                expect(static).to_contain_text("view-wait")
                expect(static).to_contain_text("waiting in the cell")  # the log tail
                expect(page.get_by_text("Error displaying widget")).to_be_hidden()
                # The unfinished job's summary is kept current from the server, with no kernel.
                live = detached.locator("[data-nbburst-live]")
                expect(live).to_contain_text("as the Jupyter server sees it", timeout=30_000)
                expect(live).to_contain_text("RUNNING")
                server.api("nbburst/api/jobs/view-detached", method="DELETE")
                expect(live).to_contain_text("CANCELLED", timeout=30_000)
                page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".jp-Cell-outputWrapper").screenshot(
                    path=str(shots["view-after-restart"])
                )
                assert not page_errors, page_errors
            finally:
                browser.close()

        states = {job.name: job.state.value for job in Burst().jobs()}
        assert states == {"view-wait": "CANCELLED", "view-detached": "CANCELLED"}
        wait_until(lambda: not agents_under(env["NBBURST_ROOT"]), 60, what="the cancelled job's machine to go away")
    finally:
        server.stop()
        kill_agents(env["NBBURST_ROOT"], grace=0)
    if os.environ.get("NBBURST_UPDATE_SCREENSHOTS"):
        (REPO / "docs").mkdir(exist_ok=True)
        for name, path in shots.items():
            shutil.copy(path, REPO / "docs" / f"{name}.png")
