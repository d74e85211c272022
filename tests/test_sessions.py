"""Warm sessions on the local backend: cells share one warm machine, inputs stay held, the machine ends itself."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from support import held_cell, wait_until

from nbburst.client.burst import Burst
from nbburst.client.capture import capture
from nbburst.client.session.manager import SessionGone
from nbburst.errors import JobFailed
from nbburst.machines.base import GONE, machine_name
from nbburst.protocol.job import State, blob_key
from nbburst.ui import cli

WIDGET = "application/vnd.jupyter.widget-view+json"
#: The cell's warm parent: the parent of its controller (the runner's parent).
PARENT = "import os, psutil\nparent = psutil.Process(os.getppid()).ppid()\n"


@pytest.fixture
def burst(burst_env):
    b = Burst()
    yield b
    for session in b.sessions.all():
        b.sessions.stop(session.name)
        assert b.machines("local").describe(session.machine).state == GONE


def asked(session: Any) -> dict[str, Any]:
    """The warm parent's state, waited for as long as a busy test machine may need (a table waits 5 s)."""
    try:
        return session.ask({}, timeout=60)
    except TimeoutError:
        console = session.sessions.burst.machines("local").console(session.machine)
        raise AssertionError(f"the warm parent did not answer in 60 s; its console:\n{console[-3000:]}") from None


def run(b: Burst, code: str, ns: dict[str, Any], **options: Any) -> Any:
    """Run ``code`` as a %%burst cell (on the default session) and merge its variables into ``ns``."""
    job = b.submit_cell(code, capture(code, ns, None), b.options(**options))
    job.wait()
    if job.state == State.SUCCEEDED:
        job.outcome(ns).merge_into(ns)
    return job


def test_cells_run_on_the_one_warm_machine_and_unchanged_inputs_stay_put(burst):
    session = burst.sessions.start(cores=1, idle="5m", timeout="10m", preload=["numpy"])
    ns: dict[str, Any] = {"big": np.arange(1 << 20, dtype=np.float64)}
    first = run(burst, PARENT + "total = float(big.sum())", ns)
    assert first.state == State.SUCCEEDED, first.logs()
    warm = asked(session)
    assert ns["parent"] == warm["pid"] and ns["total"] == float(np.arange(1 << 20).sum())
    assert first.statuses()[-1].machine == session.machine
    blobs = {Path(p).name: Path(p) for p in burst.store.list("blobs/")}
    held = set(warm["held"]) & set(blobs)
    assert held, "the input's blob is held by the warm parent"
    # Spoil the held blob in the Store: a cell that uploads it again or reads it again would show it.
    for digest in held:
        path = Path(os.environ["NBBURST_ROOT"]) / blob_key(digest)
        path.write_bytes(b"not the input")

    second = run(burst, PARENT + "total2 = float(big[::2].sum())", ns)
    assert second.state == State.SUCCEEDED, second.logs()
    assert ns["parent"] == warm["pid"], "the second cell ran on the same warm parent"
    assert ns["total2"] == float(np.arange(1 << 20)[::2].sum())
    assert asked(session)["reads"] == warm["reads"], "nothing was read from the Store again"
    for digest in held:
        assert (Path(os.environ["NBBURST_ROOT"]) / blob_key(digest)).read_bytes() == b"not the input"
    machines = [m.name for m in burst.machines("local").list()]
    assert machines == [session.machine], "no machine of its own for either cell"
    assert machine_name(second.id) not in machines


def test_a_cell_that_changes_a_held_input_in_place_changes_only_its_own_copy(burst):
    """The held bytes are the parent's: a cell writing into its input (then failing, so nothing comes back)
    leaves them as they were for the next cell."""
    burst.sessions.start(cores=1, idle="5m", timeout="10m", preload=["numpy"])
    ns: dict[str, Any] = {"big": np.zeros(1 << 18)}
    assert run(burst, "first = float(big.sum())", ns).state == State.SUCCEEDED
    spoiled = run(burst, "big[:] = 7.0\nraise ValueError('after writing into its input')", ns)
    assert spoiled.state == State.FAILED and not ns["big"].any(), "the kernel's array is as it was"
    again = run(burst, "again = float(big.sum())", ns)
    assert again.state == State.SUCCEEDED, again.logs()
    assert ns["again"] == 0.0, "the next cell reads the input as the kernel has it"
    kernels = ns["big"]
    changed = run(burst, "big += 1.0", ns)  # its arrival was fingerprinted ahead, by the warm parent
    assert changed.state == State.SUCCEEDED, changed.logs()
    assert ns["big"] is kernels and (kernels == 1.0).all(), "a change made in place comes back in place"


def test_a_crash_or_a_timeout_does_not_poison_the_next_cell(burst):
    session = burst.sessions.start(cores=1, idle="5m", timeout="10m", preload=[])
    ns: dict[str, Any] = {}
    crashed = run(burst, "import os\nos._exit(3)", ns)
    assert crashed.state == State.FAILED
    assert "exited with code 3" in crashed.terminal().reason
    slow = run(burst, "import time\ntime.sleep(60)", ns, timeout="2s")
    assert slow.state == State.FAILED and "time limit" in slow.terminal().reason
    with pytest.raises(JobFailed):
        slow.outcome(ns)
    after = run(burst, PARENT + "x = 41 + 1", ns)
    assert after.state == State.SUCCEEDED, after.logs()
    state = asked(session)
    assert ns["x"] == 42 and ns["parent"] == state["pid"] and state["cells"] == 3


def test_a_cell_refused_or_interrupted_before_it_reaches_the_session_leaves_it_taking_the_next(burst, monkeypatch):
    """A cell is refused after its session was found up (its input cannot be pickled, a ``--files`` path is
    missing) or interrupted while its inputs upload: the connection made to check the session's machine is let
    go, where its warm parent, waiting on it for that cell's request, took no other cell."""
    import threading

    from nbburst.client import burst as burst_module
    from nbburst.errors import CaptureError, UsageError

    session = burst.sessions.start(cores=1, idle="5m", timeout="10m", preload=[])
    ns: dict[str, Any] = {"lock": threading.Lock()}
    kept = []  # each error with its traceback, as a kernel keeps the last one (what the cell's frames held stays)
    with pytest.raises(CaptureError) as refused:
        run(burst, "held = lock.locked()", ns)
    kept.append(refused)
    with pytest.raises(UsageError, match="missing.csv") as refused:
        run(burst, "x = 1", ns, files=["missing.csv"])
    kept.append(refused)

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(burst_module, "encode_all", interrupted)
        with pytest.raises(KeyboardInterrupt) as refused:
            run(burst, "x = 1", ns)
        kept.append(refused)
    job = burst.submit_cell("x = 41 + 1", capture("x = 41 + 1", ns, None), burst.options())
    assert job.wait(timeout=120) == State.SUCCEEDED, job.logs()
    job.outcome(ns).merge_into(ns)
    assert ns["x"] == 42 and asked(session)["cells"] == 1 and len(kept) == 3


def test_idle_ends_the_machine_and_the_next_cell_brings_it_back(burst):
    session = burst.sessions.start(cores=1, idle="1s", timeout="10m", preload=[])
    machines = burst.machines("local")
    wait_until(lambda: machines.describe(session.machine).state == GONE, timeout=120, what="idle session ends")
    ns: dict[str, Any] = {}
    job = run(burst, PARENT + "y = 7", ns)
    assert job.state == State.SUCCEEDED and ns["y"] == 7
    assert job.session.revived
    # On the revived machine (which may end again for idle at any moment now: no question to it)
    assert job.statuses()[-1].machine == burst.sessions.get().machine


def test_the_hard_limit_ends_the_machine_and_later_cells_are_refused(burst):
    session = burst.sessions.start(cores=1, idle="10m", timeout="2s", preload=[])
    machines = burst.machines("local")
    wait_until(lambda: machines.describe(session.machine).state == GONE, timeout=120, what="session at its limit")
    with pytest.raises(SessionGone, match="time limit"):
        run(burst, "z = 1", {})
    assert burst.sessions.all() == []


def test_sessions_command_shows_and_stops_sessions(burst, capsys):
    session = burst.sessions.start(name="cli-one", cores=1, idle="5m", timeout="10m", preload=[])
    pid = asked(session)["pid"]
    assert cli.main(["sessions"]) == 0
    out = capsys.readouterr().out
    assert "cli-one" in out and "RUNNING" in out and "$0.0000" in out
    assert cli.main(["sessions", "--stop", "cli-one"]) == 0
    assert "stopped session cli-one" in capsys.readouterr().out
    wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    assert burst.sessions.all() == []


def preempted_cell(b: Burst, ns: dict[str, Any], started: Path) -> Any:
    """A cell (``v = 5`` once relaunched) on a new session, whose machine is preempted while it runs."""
    b.sessions.start(cores=1, idle="5m", timeout="10m", preload=[])
    code = held_cell(started, "v = 5")
    job = b.submit_cell(code, capture(code, ns, None), b.options(max_restarts=2))
    wait_until(started.exists, timeout=120, what="the cell runs")
    job.preempt(grace_s=1.0)
    return job


def test_a_preempted_cell_recovers_and_the_session_comes_back(burst, tmp_path):
    ns: dict[str, Any] = {}
    job = preempted_cell(burst, ns, tmp_path / "started")
    assert job.wait(timeout=120) == State.SUCCEEDED, job.logs()
    job.outcome(ns).merge_into(ns)
    assert ns["v"] == 5 and job.attempt == 2
    after = run(burst, PARENT + "w = 1", ns)
    assert after.state == State.SUCCEEDED and after.session.revived
    assert ns["parent"] == asked(burst.sessions.get())["pid"]


def test_the_magics_start_use_list_and_stop_a_session(burst):
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    try:
        ip.run_line_magic("load_ext", "nbburst")
        ip.run_line_magic("burst", "session start --cores 1 --idle 5m --name magic --preload numpy")
        ip.user_ns["a"] = 20
        ip.run_cell_magic("burst", "", "import os, psutil\nb = a + 1\nparent = psutil.Process(os.getppid()).ppid()")
        assert ip.user_ns["b"] == 21
        session = burst.sessions.get("magic")
        assert ip.user_ns["parent"] == asked(session)["pid"]
        assert "magic" in repr(ip.run_line_magic("burst", "session list"))
        ip.run_line_magic("burst", "session stop")
        assert burst.sessions.all() == []
        wait_until(lambda: burst.machines("local").describe(session.machine).state == GONE)
    finally:
        InteractiveShell.clear_instance()


def test_in_a_kernel_a_short_warm_cell_shows_only_its_output_and_a_longer_one_its_view(burst_env, tmp_path):
    from support.nbrun import run_cells

    outputs = run_cells(
        [
            "%load_ext nbburst",
            "%burst session start --cores 1 --idle 5m --preload numpy",
            "%burst config view_after=3",  # room for a busy machine: the quick cell takes milliseconds, not 3 s
            "%%burst\nprint('quick')",
            "%%burst\nimport time\ntime.sleep(4)\nprint('slow')",
            "%burst session stop",
        ],
        cwd=tmp_path,
    )
    quick, slow = outputs[3], outputs[4]
    assert [o.get("text") for o in quick] == ["quick\n"], "as a plain cell: its output, nothing else"
    assert any(WIDGET in o.get("data", {}) for o in slow), "the live view came once the cell ran on"
    assert "slow\n" in "".join(o.get("text", "") for o in slow)


def test_a_cancelled_cell_leaves_the_session_warm(burst):
    session = burst.sessions.start(cores=1, idle="5m", timeout="10m", preload=[])
    ns: dict[str, Any] = {}
    code = "import time\ntime.sleep(60)"
    job = burst.submit_cell(code, capture(code, ns, None), burst.options())
    wait_until(lambda: job.state == State.RUNNING, timeout=120, what="the cell runs")
    assert job.cancel() == State.CANCELLED
    after = run(burst, PARENT + "c = 3", ns)
    assert after.state == State.SUCCEEDED and ns["c"] == 3
    assert ns["parent"] == asked(session)["pid"]


def test_the_kernel_imports_what_the_cell_imports_while_the_cell_runs(burst, tmp_path, monkeypatch):
    """A module that is slow to import is imported in the kernel while the machine imports it too, not after
    the cell ended: the cell's variable is the module, and the kernel needs it to load the values."""
    package = tmp_path / "modules"
    package.mkdir()
    log = tmp_path / "imports.log"
    (package / "slowmod.py").write_text(
        f"import os, time\nwith open({str(log)!r}, 'a') as f:\n    f.write(f'{{os.getpid()}} {{time.time()}}\\n')\n"
        "time.sleep(1.0)\n"
    )
    monkeypatch.syspath_prepend(str(package))
    monkeypatch.setenv("PYTHONPATH", str(package))
    monkeypatch.delitem(__import__("sys").modules, "slowmod", raising=False)
    burst.sessions.start(cores=1, idle="5m", timeout="10m", preload=[])
    ns: dict[str, Any] = {}
    job = run(burst, "import slowmod\nx = 1", ns)
    assert job.state == State.SUCCEEDED and ns["slowmod"].__name__ == "slowmod"
    started = {int(pid): float(at) for pid, at in (line.split() for line in log.read_text().splitlines())}
    assert started[os.getpid()] < job.terminal().at, "the kernel began importing it before the cell ended"
    nested = run(burst, "def f():\n    import json_nothing_here\nimport_later = 1", ns)
    assert nested.state == State.SUCCEEDED and nested.imports_ahead is None  # nothing imported for certain


def test_a_module_new_to_the_session_is_imported_once_by_the_warm_parent_and_prints_in_the_cell(
    burst, tmp_path, monkeypatch
):
    """A cell that imports a module the session has not: the warm parent imports it before it forks the cell's
    process (which so imports nothing again, nor do the cells after), and what the import printed is the
    cell's output, in order, as in a kernel. A module that fails to import fails in the cell, as itself."""
    package = tmp_path / "modules"
    package.mkdir()
    log = tmp_path / "imports.log"
    (package / "chatty.py").write_text(
        "import os, sys, time\n"
        f"with open({str(log)!r}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n')\n"
        "print('chatty: loaded')\nprint('chatty: a note', file=sys.stderr)\ntime.sleep(0.3)\n"
    )
    (package / "broken.py").write_text("print('broken: half')\nraise RuntimeError('broken on purpose')\n")
    monkeypatch.syspath_prepend(str(package))
    monkeypatch.setenv("PYTHONPATH", str(package))
    for name in ("chatty", "broken"):
        monkeypatch.delitem(__import__("sys").modules, name, raising=False)
    session = burst.sessions.start(cores=1, idle="5m", timeout="10m", preload=[])
    ns: dict[str, Any] = {}
    job = run(burst, "print('before')\nimport chatty\nimport os\ncell = os.getpid()", ns)
    assert job.state == State.SUCCEEDED, job.logs()
    warm = asked(session)["pid"]
    importers = [int(line) for line in log.read_text().split()]
    assert importers.count(warm) == 1 and ns["cell"] not in importers, importers
    assert job.logs().index("chatty: loaded") < job.logs().index("before") and "chatty: a note" in job.logs()
    again = run(burst, "import chatty\nsecond = chatty.__name__", ns)
    assert again.state == State.SUCCEEDED and ns["second"] == "chatty"
    assert [int(line) for line in log.read_text().split()].count(warm) == 1, "imported once on the machine"
    failed = run(burst, "import broken", ns)
    assert failed.state == State.FAILED and "broken on purpose" in failed.remote_error()["message"]
    assert failed.logs().count("broken: half") == 1, failed.logs()


def test_a_plotting_cell_finds_a_figure_drawn_before_it_and_still_numbers_its_own_first(burst):
    """Once pyplot is imported, the warm parent draws and encodes a figure: a plotting cell's process finds the
    backend, the fonts and the image writer loaded (a kernel loads them once, not in each cell), and its first
    figure is still number 1, as in a kernel."""
    burst.sessions.start(cores=1, idle="5m", timeout="10m", preload=[])
    ns: dict[str, Any] = {}
    assert run(burst, "import matplotlib.pyplot as plt", ns).state == State.SUCCEEDED
    code = (
        "import sys\nloaded = 'matplotlib.backends.backend_agg' in sys.modules\n"
        "fig, ax = plt.subplots()\nax.plot([1, 2])\nnumber = fig.number\n"
    )
    job = run(burst, code, ns)
    assert job.state == State.SUCCEEDED, job.logs()
    assert ns["loaded"] and ns["number"] == 1
    assert [r for r in job.tail().poll() if "image/png" in r.get("data", {})], "the cell shows its figure"


def test_a_package_that_asks_for_a_kernel_is_imported_by_the_warm_parent_and_its_widgets_still_show(burst):
    """tqdm.auto asks on import whether it runs in a kernel, and makes its bars widgets then: the warm parent
    imports it before it forks the cell's process (its shell and import hooks are a cell's), so the next cells
    do not import it again, and the cell's bar is still a widget, sent down that cell's channel."""
    burst.sessions.start(cores=1, idle="5m", timeout="10m", preload=[])
    ns: dict[str, Any] = {}
    code = (
        "import sys\nbefore = 'tqdm.auto' in sys.modules\nfrom tqdm.auto import tqdm\nbar = list(tqdm(range(3)))\n"
        "notebook = [c.__module__ for c in tqdm.__mro__ if c.__module__ == 'tqdm.notebook']\n"
    )
    job = run(burst, code, ns)
    assert job.state == State.SUCCEEDED, job.logs()
    assert ns["before"], "the warm parent imported it before it forked the cell's process"
    opened = [r for r in job.tail().poll() if r.get("s") == "comm" and r.get("msg_type") == "comm_open"]
    assert opened and ns["notebook"], "the bar is a widget, as in a kernel"


def test_a_cell_preempted_unwatched_comes_back_without_ending_the_session_revived_meanwhile(
    burst, monkeypatch, tmp_path
):
    """The session's machine is preempted while a cell runs and nobody waits on it; the next cell brings the
    session back; only then is the first cell relaunched. Its relaunch replaces the machine it ran on, which
    must not be the session as it came back."""
    monkeypatch.setenv("NBBURST_BACKGROUND_SUPERVISOR", "false")  # the relaunch happens when this test says
    ns: dict[str, Any] = {}
    first = preempted_cell(burst, ns, tmp_path / "started")
    after = run(burst, PARENT + "w = 1", ns)
    assert after.state == State.SUCCEEDED and after.session.revived
    warm = asked(burst.sessions.get())["pid"]
    assert first.wait(timeout=120) == State.SUCCEEDED and first.attempt == 2, first.logs()
    assert psutil.pid_exists(warm) and asked(burst.sessions.get())["pid"] == warm, "the revived session lives on"
    again = run(burst, PARENT + "x = 2", ns)
    assert again.state == State.SUCCEEDED and ns["parent"] == warm and not again.session.revived


def test_a_session_is_not_idle_while_a_client_waits_to_hand_it_a_cell(tmp_path):
    """A cell sent as the idle time runs out is not lost: a client waiting on the cells' socket, or one a spare
    has accepted (it says so), keeps the session up."""
    import socket
    import time

    from nbburst.agent.session.parent import CONNECTED, WarmParent, _listen

    cells, control = _listen(str(tmp_path / "cells")), _listen(str(tmp_path / "control"))
    parent = WarmParent(cells, control, "token", idle_s=1.0, until=time.time() + 60)
    try:
        parent.last = time.time() - 5
        assert "without a cell" in parent._over()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(tmp_path / "cells"))
            assert parent._over() == "" and time.time() - parent.last < 1, "waiting to be accepted"
            accepted, _ = cells.accept()  # a spare takes the connection, and tells the parent
            with accepted:
                parent.last = time.time() - 5
                parent.report_child.send(CONNECTED)
                parent._reported()
                assert parent._over() == "" and parent.cells == 0 and not parent.taken
    finally:
        cells.close()
        control.close()


def test_the_imports_a_cell_makes_count_those_of_its_plotting_magics():
    """``%matplotlib inline`` imports pyplot, as in a kernel (matplotlib's settings then come back as process
    state): the warm parent imports it before the cell's process is forked, and the kernel while the cell runs,
    as for an import."""
    from IPython.core.inputtransformer2 import TransformerManager

    from nbburst.protocol.imports import imported_by

    code = TransformerManager().transform_cell("%matplotlib inline\nimport numpy as np\ndef f():\n    import json\n")
    assert imported_by(code, top_level=True) == ["matplotlib.pyplot", "numpy"]
    assert imported_by(code) == ["matplotlib.pyplot", "numpy", "json"]
    assert imported_by(TransformerManager().transform_cell("%time x = 1\n%pylab inline")) == ["matplotlib.pyplot"]
