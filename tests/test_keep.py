"""``--keep``: a plain cell's machine stays warm for later cells of the same shape, and ends itself when idle."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from support import wait_until

from nbburst.client import keep
from nbburst.client.burst import Burst, submit
from nbburst.client.capture import capture
from nbburst.errors import UsageError
from nbburst.machines.base import GONE
from nbburst.machines.gce.firewall import SESSION_TAG
from nbburst.options import Options
from nbburst.protocol.job import State
from nbburst.ui import cli
from nbburst.ui.viewmodel import ViewModel

#: The cell's warm parent: the parent of its controller (the runner's parent).
PARENT = "import os, psutil\nparent = psutil.Process(os.getppid()).ppid()\n"


def ending_sessions(b: Burst) -> Iterator[Burst]:
    """``b``, whose sessions (kept machines included) are stopped at the test's end."""
    try:
        yield b
    finally:
        for session in b.sessions.all():
            b.sessions.stop(session.name)


@pytest.fixture
def burst(burst_env):
    yield from ending_sessions(Burst())


def run(b: Burst, code: str, ns: dict[str, Any], **options: Any) -> Any:
    """``code`` as a %%burst cell with ``options``, succeeded, its variables merged into ``ns``."""
    job = b.submit_cell(code, capture(code, ns, None), b.options(**options))
    assert job.wait(timeout=120) == State.SUCCEEDED, job.logs()
    job.outcome(ns).merge_into(ns)
    return job


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"keep": "-1"}, "--keep: the idle time must be positive"),
        ({"keep": "abc"}, "--keep: 'abc' is not a duration"),
        ({"keep": "0"}, "--keep: the duration must be positive"),
        ({"keep": "10m", "session": "mine"}, "--keep and --session exclude each other"),
        ({"keep": "10m", "workers": 2}, "--keep and --workers exclude each other"),
    ],
)
def test_bad_keep_values_are_refused_before_anything_starts(given, message):
    with pytest.raises(UsageError, match=message):
        Options.build(**given)


def test_the_magic_and_submit_take_keep_from_the_one_declaration(burst):
    assert "keep" in inspect.signature(submit).parameters
    ip = InteractiveShell.instance()
    try:
        ip.run_line_magic("load_ext", "nbburst")
        with pytest.raises(UsageError, match="--keep: the idle time must be positive"):
            ip.run_cell_magic("burst", "--keep -1", "x = 1")
        assert burst.sessions.all() == [], "refused before anything started"
        ip.run_cell_magic("burst", "--keep 10m --cores 1", PARENT + "a = 20")
        ip.run_cell_magic("burst", "--cores 1", PARENT.replace("parent", "again") + "b = a + 1")
        assert ip.user_ns["b"] == 21 and ip.user_ns["again"] == ip.user_ns["parent"], "both on the kept machine"
        (kept,) = burst.sessions.all()
        assert keep.is_kept(kept.name) and "(kept)" in repr(ip.run_line_magic("burst", "session list"))
    finally:
        InteractiveShell.clear_instance()


def test_a_kept_machine_takes_the_next_cell_of_its_shape_and_only_those(burst):
    ns: dict[str, Any] = {}
    first = run(burst, PARENT + "a = 1", ns, keep="10m", cores=1)
    assert first.session is not None and keep.is_kept(first.session.name)
    assert first.spec.kept_s == 600.0
    kept_parent = ns["parent"]
    assert burst.sessions.default is None, "a kept machine is no default session"

    second = run(burst, PARENT + "b = a + 1", ns, cores=1)  # the same shape, no --keep: on the kept machine
    assert ns["parent"] == kept_parent and ns["b"] == 2
    assert second.session is not None and second.session.name == first.session.name
    assert second.spec.kept_s == 600.0, "a cell on a kept machine renews it, and says so"

    other = run(burst, PARENT + "c = 3", ns, cores=2)  # another shape: a machine of its own, not kept
    assert other.session is None and other.spec.kept_s == 0.0 and ns["parent"] != kept_parent

    info = second.info()
    assert info["kept"]["idle_s"] == 600.0
    assert info["kept"]["until"] == pytest.approx(info["ended"] + 600.0)
    line = ViewModel(info, info["ended"]).summary_html(info["ended"])
    assert "machine kept warm" in line and "10m 00s" in line
    running = {**info, "state": "RUNNING", "ended": None, "kept": {**info["kept"], "until": None}}
    assert "machine kept 10m 00s after it" in ViewModel(running, info["ended"]).status_html(info["ended"])
    assert "goes 10m 00s after this cell" in ViewModel(running, info["ended"]).static_html(info["ended"])

    listed = [s.info() for s in burst.sessions.all()]
    assert [i["name"] for i in listed] == [first.session.name]
    assert listed[0]["idle_until"] is not None and listed[0]["idle_until"] > info["ended"]


def test_a_kept_machine_ends_itself_after_its_idle_time_and_the_next_cell_gets_its_own(burst):
    ns: dict[str, Any] = {}
    first = run(burst, "a = 1", ns, keep="5s", cores=1)
    machine = first.session.machine
    machines = burst.machines("local")
    wait_until(lambda: machines.describe(machine).state == GONE, timeout=120, what="the kept machine ends for idleness")
    after = run(burst, "b = 2", ns, cores=1)  # the same shape, no --keep: nothing kept any more
    assert after.session is None and after.spec.kept_s == 0.0
    assert burst.sessions.all() == [], "the ended kept machine's record is gone"


def test_the_cli_lists_a_kept_machine_with_its_price_and_when_it_goes(burst, capsys):
    run(burst, "a = 1", {}, keep="10m", cores=1)
    assert cli.main(["sessions"]) == 0
    out = capsys.readouterr().out
    assert "kept" in out and "goes in" in out and "$0.0000/h" in out


@pytest.fixture
def gce_burst(gce_env, monkeypatch):
    monkeypatch.setenv("NBBURST_WATCHER", "0")
    yield from ending_sessions(Burst())


def _inserts(emu) -> list[dict]:
    return [r for r in emu.request_log if r["method"] == "POST" and r["path"].endswith("/instances")]


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_on_gce_the_kept_vm_takes_the_next_cell_and_deletes_itself_when_idle_with_no_kernel(
    gce_burst, compute_emulator
):
    ns: dict[str, Any] = {}
    first = run(gce_burst, PARENT + "a = 1", ns, keep="45s", cores=2)  # room for a busy machine's next cell
    (insert,) = _inserts(compute_emulator)
    body = insert["body"]
    assert body["name"] == first.session.machine and body["labels"]["nbburst-session"] == "1"
    assert body["tags"]["items"] == [SESSION_TAG], "the session firewall rule admits the notebook to its relay"
    sched = body["scheduling"]
    assert sched["instanceTerminationAction"] == "DELETE", "Google deletes it at its limit, whatever the kernel does"
    assert int(sched["maxRunDuration"]["seconds"]) <= keep.LIMIT_S + 45 + 120
    assert json.loads({i["key"]: i["value"] for i in body["metadata"]["items"]}["nbburst-session"])["idle"] == 45
    info = first.info()
    assert info["kept"]["cost_per_hour_usd"] > 0 and info["kept"]["until"] == pytest.approx(info["ended"] + 45)
    assert "/h for 45s without a cell" in ViewModel(info, info["ended"]).summary_html(info["ended"])

    second = run(gce_burst, PARENT + "b = a + 1", ns, cores=2)
    assert second.statuses()[-1].machine == first.session.machine and ns["b"] == 2
    assert len(_inserts(compute_emulator)) == 1, "no VM of its own for the second cell"

    # The kernel dies: nobody stops the kept VM, which deletes itself after its idle time.
    machine = first.session.machine
    gce_burst.sessions.folder.joinpath(f"{first.session.name}.json").unlink()
    assert compute_emulator.wait_for_status(machine, "DELETED", timeout=180) == "DELETED"
    deleted = [r for r in compute_emulator.request_log if r["method"] == "DELETE" and machine in r["path"]]
    assert len(deleted) == 1, "the VM deleted itself"
