"""The ``nbburst`` command, driven as scripts drive it: subprocesses and exit codes."""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time

import cloudpickle
import pytest
from support import held_call, wait_until

from nbburst.ui.cli import EXIT_CONFIG, EXIT_FAILED, EXIT_NOT_DONE, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE


def nbburst(*args: str, timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nbburst", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "160", **(env or {})},
    )


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nbburst: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture
def burst(burst_env):
    from nbburst.client.burst import Burst

    session = Burst()
    yield session
    deadline = time.monotonic() + 10
    while session.machines("local").list() and time.monotonic() < deadline:
        time.sleep(0.05)


# The job functions below travel by value: the agent cannot import this test module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _square(v):
    print(f"squaring {v}")
    return v * v


def _boom():
    raise ValueError("no good")


def _sleep(seconds):
    import time

    time.sleep(seconds)
    return seconds


def test_usage_not_found_and_config_errors(burst_env):
    empty = nbburst("jobs")
    assert empty.returncode == EXIT_OK and "no jobs in" in empty.stdout
    assert nbburst().returncode == EXIT_USAGE
    assert nbburst("logs").returncode == EXIT_USAGE  # argparse: the job is missing
    bad_state = nbburst("jobs", "--state", "sleepy")
    assert bad_state.returncode == EXIT_USAGE and "not a job state" in one_line_error(bad_state)
    missing = nbburst("result", "no-such-job")
    assert missing.returncode == EXIT_NOT_FOUND
    assert "no job with id or name 'no-such-job'" in one_line_error(missing)
    assert "`nbburst jobs`" in missing.stderr
    bad_config = nbburst("jobs", env={"NBBURST_TIMEOUT": "forever"})
    assert bad_config.returncode == EXIT_CONFIG and "timeout" in one_line_error(bad_config)
    no_bucket = nbburst("jobs", "--backend", "gce", env={"NBBURST_ROOT": ""})
    assert no_bucket.returncode == EXIT_CONFIG and "bucket" in one_line_error(no_bucket)


def test_jobs_logs_result_and_costs(burst, tmp_path):
    ok = burst.submit(_square, 7, options=burst.options(name="square"))
    bad = burst.submit(_boom, options=burst.options(name="boom"))
    assert ok.wait(60).terminal and bad.wait(60).terminal

    table = nbburst("jobs", "--cost")
    assert table.returncode == EXIT_OK, table.stderr
    for text in ("square", "boom", "SUCCEEDED", "FAILED", "local", "$0.00", "2 jobs"):
        assert text in table.stdout
    listed = json.loads(nbburst("jobs", "--json", "--cost", "--state", "failed").stdout)
    assert [j["name"] for j in listed["jobs"]] == ["boom"] and listed["totals"]["cost_usd"] == 0.0
    info = json.loads(nbburst("info", "square").stdout)
    assert info["state"] == "SUCCEEDED" and info["cost"]["local"] is True and info["id"] == ok.id

    logs = nbburst("logs", "square")
    assert logs.returncode == EXIT_OK and logs.stdout == "squaring 7\n"
    assert nbburst("logs", ok.id, "--attempt", "2").stdout == ""
    followed = nbburst("logs", "-f", "square")
    assert followed.returncode == EXIT_OK and "squaring 7" in followed.stdout
    followed_bad = nbburst("logs", "--follow", "boom")
    assert followed_bad.returncode == EXIT_FAILED and "job boom FAILED" in followed_bad.stderr

    shown = nbburst("result", "square")
    assert shown.returncode == EXIT_OK and shown.stdout == "49\n"
    out = tmp_path / "r.pkl"
    assert nbburst("result", "square", "-o", str(out)).returncode == EXIT_OK
    assert pickle.loads(out.read_bytes()) == 49
    failed = nbburst("result", "boom")
    assert failed.returncode == EXIT_FAILED
    assert "ValueError: no good" in failed.stderr and "raise ValueError" in failed.stderr  # the remote traceback
    assert failed.stderr.strip().splitlines()[-1] == "nbburst: job boom FAILED: ValueError: no good"


def test_cancel_and_unfinished_results(burst):
    job = burst.submit(_sleep, 120, options=burst.options(name="nap"))
    not_yet = nbburst("result", "nap", "--no-wait")
    assert not_yet.returncode == EXIT_NOT_DONE and "has not finished" in one_line_error(not_yet)
    assert nbburst("result", "nap", "--timeout", "1s").returncode == EXIT_NOT_DONE
    cancelled = nbburst("cancel", "nap")
    assert cancelled.returncode == EXIT_OK and cancelled.stdout == "job nap is CANCELLED\n"
    assert job.state.value == "CANCELLED"
    again = nbburst("cancel", job.id)
    assert again.returncode == EXIT_OK and "already ended: CANCELLED" in again.stdout
    result = nbburst("result", "nap")
    assert result.returncode == EXIT_FAILED and "CANCELLED" in one_line_error(result)
    assert nbburst("preempt", "nap").returncode == EXIT_USAGE


def _orphan_machine(burst) -> subprocess.Popen:
    """A machine in the local registry whose job is not in the Store (its folder was deleted, or it was
    started against another root): a process group of its own, as the local backend makes them."""
    import psutil

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    job_id = "b20260101-000000-0rphan"
    folder = burst.machines("local").folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"nbburst-{job_id}.json").write_text(
        json.dumps(
            {
                "name": f"nbburst-{job_id}",
                "job_id": job_id,
                "pid": proc.pid,
                "started": psutil.Process(proc.pid).create_time(),
                "attempt": 1,
                "created": time.time(),
                "cores": 1,
            }
        )
    )
    return proc


def test_gc_deletes_orphan_machines_and_old_job_folders(burst):
    done = burst.submit(_square, 3, options=burst.options(name="old"))
    assert done.result(60) == 9
    alive = burst.submit(_sleep, 120, options=burst.options(name="alive"))
    orphan = _orphan_machine(burst)
    wait_until(lambda: alive.state.value == "RUNNING", what="the job to run")
    try:
        dry = nbburst("gc", "--dry-run", "--older-than", "0.1s")
        assert dry.returncode == EXIT_OK, dry.stderr
        assert "would delete machine nbburst-b20260101-000000-0rphan (local): its job is unknown" in dry.stdout
        assert f"would delete job {done.id} (old): SUCCEEDED" in dry.stdout
        assert alive.id not in dry.stdout  # a running job keeps its machine and its folder
        assert len(burst.machines("local").list()) == 2 and burst.store.exists(done.layout.spec)
        assert orphan.poll() is None

        real = nbburst("gc", "--older-than", "0.1s")
        assert real.returncode == EXIT_OK, real.stderr
        assert orphan.wait(timeout=10) != 0  # killed
        assert [m.job_id for m in burst.machines("local").list()] == [alive.id]
        assert not burst.store.exists(done.layout.spec) and not burst.keyring.has(done.id)
        assert burst.job("alive").state.value == "RUNNING"
    finally:
        alive.cancel()
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()


def test_doctor_checks_store_state_and_backend(burst_env, tmp_path):
    healthy = nbburst("doctor")
    assert healthy.returncode == EXIT_OK, healthy.stdout + healthy.stderr
    for name in ("configuration", "state dir", "store", "python", "cpus"):
        assert f"✔ {name}:" in healthy.stdout
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    broken = nbburst("doctor", "--root", str(blocker / "store"))
    assert broken.returncode == EXIT_CONFIG
    assert "✖ store:" in broken.stdout and "fix:" in broken.stdout


def test_preempt_then_supervise_relaunches(burst, tmp_path):
    burst.settings.background_supervisor = False  # this test is about `nbburst supervise` relaunching it
    started = tmp_path / "started"
    job = burst.submit(held_call, str(started), 2, options=burst.options(name="survivor"))
    wait_until(started.exists, what="the job to run")  # still running when preempted, however busy the machine
    preempted = nbburst("preempt", "survivor", "--grace", "6")  # the agent needs ~3 s to stop (see report)
    assert preempted.returncode == EXIT_OK, preempted.stderr
    assert job.state.value == "PREEMPTED"
    once = nbburst("supervise", "--once")
    assert once.returncode == EXIT_OK and "survivor: PROVISIONING" in once.stdout
    assert job.wait(60).value == "SUCCEEDED" and job.attempt == 2


def test_supervise_stops_on_sigterm(burst_env):
    proc = subprocess.Popen(
        [sys.executable, "-m", "nbburst", "supervise", "--interval", "0.2s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "watching unfinished jobs" in proc.stderr.readline()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == EXIT_OK
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- what users see: the table at any width, output for scripts, verdicts, waiting, a missing module ------------

LONG_NAME = "ux-widgets-and-a-rather-long-job-name-01"  # 40 characters, the longest a name may be
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def in_terminal(*args: str, columns: int) -> str:
    """Run ``nbburst ARGS`` with a terminal (a pty) COLUMNS wide as its stdout; what it showed, without colours."""
    main, side = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nbburst", *args],
        stdout=side,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": str(columns), "TERM": "xterm"},
    )
    os.close(side)
    shown = b""
    try:
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the command closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        assert proc.wait(timeout=60) == EXIT_OK, proc.stderr.read() if proc.stderr else ""
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
    return ANSI.sub("", shown.decode()).replace("\r", "")


def _gated_thing(gate, folder):
    """Wait for the test to open ``gate``, then return an object of a module only this machine has."""
    import pathlib
    import sys
    import time

    while not pathlib.Path(gate).exists():
        time.sleep(0.02)
    sys.path.insert(0, folder)
    import nbb_only_on_the_machine

    return nbb_only_on_the_machine.Thing()


def test_jobs_for_terminals_and_scripts_keep_names_and_ids_whole(burst):
    from nbburst.protocol.durations import format_duration

    job = burst.submit(_square, 5, options=burst.options(name=LONG_NAME))
    other = burst.submit(_square, 6)  # no name: its name is its id
    assert job.wait(60).value == "SUCCEEDED" and other.wait(60).value == "SUCCEEDED"
    info = json.loads(nbburst("info", LONG_NAME).stdout)

    piped = nbburst("jobs", env={"COLUMNS": "80"})  # stdout is a pipe: one job a line, tab-separated
    assert piped.returncode == EXIT_OK, piped.stderr
    lines = piped.stdout.splitlines()
    rows = {fields[0]: fields for fields in (line.split("\t") for line in lines)}
    assert len(lines) == 2 and all(len(fields) == 7 for fields in rows.values()), piped.stdout
    assert rows[job.id][:3] == [job.id, LONG_NAME, "SUCCEEDED"] and rows[other.id][1] == other.id
    assert "…" not in piped.stdout
    plain = nbburst("jobs", "--plain", env={"COLUMNS": "40"}).stdout.splitlines()
    without_age = [[f for n, f in enumerate(line.split("\t")) if n != 3] for line in lines]
    assert [[f for n, f in enumerate(line.split("\t")) if n != 3] for line in plain] == without_age

    # ELAPSED: the job's wall time from submission to its end, whatever part of it the cell took
    assert info["started"] > info["created"]
    assert abs(info["elapsed_s"] - (info["ended"] - info["created"])) < 0.1
    assert rows[job.id][5] == format_duration(info["elapsed_s"])

    listed = json.loads(nbburst("jobs", "--json").stdout)
    assert isinstance(listed, list) and {j["id"] for j in listed} == {job.id, other.id}
    assert next(j for j in listed if j["id"] == job.id)["elapsed_s"] == info["elapsed_s"]

    narrow = in_terminal("jobs", "--cost", columns=80)
    assert job.id in narrow and LONG_NAME in narrow and "…" not in narrow, narrow
    assert max(len(line) for line in narrow.splitlines()) <= 80, narrow
    costly = in_terminal("jobs", "--cost", columns=90)  # room for one more column: with --cost, COST stays
    assert "$0.00" in costly and "ELAPSED" not in costly
    assert "ELAPSED" in in_terminal("jobs", columns=90)
    wide = in_terminal("jobs", columns=160)
    for header in ("ID", "NAME", "STATE", "AGE", "MACHINE", "ELAPSED", "COST"):
        assert header in wide
    cramped = in_terminal("jobs", columns=50)  # narrower than ID + NAME + STATE: wider lines, nothing cut
    assert job.id in cramped and LONG_NAME in cramped and "SUCCEEDED" in cramped and "…" not in cramped

    followed = nbburst("logs", "-f", LONG_NAME)
    assert followed.returncode == EXIT_OK and followed.stdout == "squaring 5\n"
    assert followed.stderr.splitlines()[-1] == (
        f"nbburst: job {LONG_NAME} SUCCEEDED in {format_duration(info['elapsed_s'])}"
    )


def test_result_says_it_waits_and_names_a_missing_module(burst, tmp_path):
    folder = tmp_path / "machine-only"
    folder.mkdir()
    (folder / "nbb_only_on_the_machine.py").write_text("class Thing:\n    pass\n")
    gate = tmp_path / "gate"
    burst.submit(_gated_thing, str(gate), str(folder), options=burst.options(name="thing"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "nbburst", "result", "thing"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "160"},
    )
    try:
        first = proc.stderr.readline()
        assert first.startswith("nbburst: waiting for job thing (") and "the job goes on" in first
        gate.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        gate.touch()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == EXIT_CONFIG and out == ""  # nothing half: no value printed
    assert len(err.splitlines()) == 1 and "waiting" not in err  # said once; then one line
    assert err.startswith("nbburst: the result of job thing needs the module 'nbb_only_on_the_machine'")
    assert "Traceback" not in err and "FAILED" not in err
    assert burst.job("thing").state.value == "SUCCEEDED"
    done = nbburst("result", "thing", "-o", str(tmp_path / "r.pkl"))
    assert done.returncode == EXIT_CONFIG and "waiting" not in done.stderr  # it has ended: no wait
    assert "nbb_only_on_the_machine" in one_line_error(done) and not (tmp_path / "r.pkl").exists()


def test_doctor_exit_codes_and_fixes(burst_env, tmp_path):
    from nbburst import config

    assert nbburst("doctor").returncode == EXIT_OK  # makes the state folder
    keys = config.state_dir(config.load()) / "keys"
    keys.chmod(0o750)
    warned = nbburst("doctor")
    assert warned.returncode == EXIT_OK, warned.stdout  # a warning does not fail doctor
    assert "! state dir:" in warned.stdout and f"    fix: chmod 700 {keys}\n" in warned.stdout
    keys.chmod(0o700)

    bad_setting = nbburst("doctor", env={"NBBURST_TIMEOUT": "forever"})
    assert bad_setting.returncode == EXIT_CONFIG
    assert bad_setting.stdout.startswith("✖ configuration: timeout") and "fix: " in bad_setting.stdout

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    store = blocker / "store"
    broken = nbburst("doctor", "--root", str(store))
    assert broken.returncode == EXIT_CONFIG
    lines = broken.stdout.splitlines()
    fix = lines[lines.index(next(line for line in lines if line.startswith("✖ store:"))) + 1]
    assert fix == f"    fix: make {store} a writable folder, or set c.NBBurst.root or $NBBURST_ROOT (or --root) to one"
    assert broken.stderr == "nbburst: 1 check(s) failed\n"
