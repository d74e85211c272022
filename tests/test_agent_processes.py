"""The agent's children (agent/attempt/spawn.py) and an attempt's processes (protocol/processes.py), on real processes.

A child dies with its agent, even one killed with ``kill -9``; what the cell left outside its group
(``setsid``, a double fork, with or without ``exec``) carries the attempt's marker and is swept; a signal
aimed at the agent's group while it forks never reaches the child, nor runs the agent's handler there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from support import wait_until

from nbburst.protocol import processes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG")

AGENT = """
import os, subprocess, sys, time
from nbburst.agent.attempt import spawn

out = sys.argv[1]

def cell():
    escaped = subprocess.Popen(["sleep", "600"], start_new_session=True)  # exec, out of the group
    if os.fork() == 0:  # no exec, out of the group, and forked once more
        os.setsid()
        if os.fork() == 0:
            time.sleep(600)
        os._exit(0)
    with open(out + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {escaped.pid}\\n")
    os.replace(out + ".tmp", out)
    time.sleep(600)
    return 0

spawn.spawn(cell, os.environ["NBBURST_ATTEMPT"])
time.sleep(600)
"""


def start(tmp_path: Path, script: str, tag: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "NBBURST_ATTEMPT": tag}  # as the local backend starts an agent
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args], env=env, start_new_session=True, cwd=tmp_path
    )


def test_the_cell_dies_with_its_agent_and_what_escaped_is_swept(tmp_path):
    out = tmp_path / "pids"
    agent = start(tmp_path, AGENT, "b-chaos-1:3", str(out))
    try:
        runner, escaped = map(int, wait_until(lambda: out.exists() and out.read_text().split(), what="the cell"))
        left = set(wait_until(lambda: (m := processes.marked("b-chaos-1")) and len(m) >= 4 and m, what="marks"))
        assert {agent.pid, runner, escaped} <= left  # and the double-forked copy, which exec'd nothing
        assert processes.marked("b-chaos-1", lambda n: n != 3) == []
        assert processes.marked("b-chaos-10") == []  # another job's id that starts the same way

        agent.send_signal(signal.SIGKILL)  # the agent dies without a word
        agent.wait(10)
        wait_until(lambda: not psutil.pid_exists(runner) or psutil.Process(runner).status() == "zombie", 60)
        outside = set(processes.marked("b-chaos-1"))
        assert escaped in outside and runner not in outside  # what left the group outlives the agent...
        killed = processes.sweep("b-chaos-1", lambda n: n <= 3)
        assert outside <= killed  # ...until the sweep
        wait_until(lambda: processes.marked("b-chaos-1") == [], 60, what="the sweep")
    finally:
        processes.sweep("b-chaos-1")
        if agent.poll() is None:
            agent.kill()
            agent.wait()


STORM = """
import os, signal, sys, threading, time
from nbburst.agent.attempt import spawn

log = sys.argv[1]

def handler(signum, frame):  # the agent's soft-off handler: it must run in the agent only
    with open(log, "a") as f:
        f.write(f"handler {os.getpid()}\\n")

signal.signal(signal.SIGTERM, handler)
stop = threading.Event()

def storm():
    while not stop.is_set():
        os.killpg(os.getpgid(0), signal.SIGTERM)  # what a machine's soft-off sends the agent's group
        time.sleep(0.0005)

threading.Thread(target=storm, daemon=True).start()
codes = []
for _ in range(150):
    pid = spawn.spawn(lambda: (time.sleep(0.01), 0)[1], "b-storm-1:1")
    while True:
        try:
            codes.append(os.waitpid(pid, 0)[1])
            break
        except ChildProcessError:
            break
stop.set()
with open(log, "a") as f:
    f.write(f"agent {os.getpid()} codes {sorted(set(codes))} count {len(codes)}\\n")
"""


def test_a_soft_off_aimed_at_the_agent_never_reaches_a_child_it_forks(tmp_path):
    log = tmp_path / "log"
    agent = start(tmp_path, STORM, "b-storm-1:1", str(log))
    try:
        assert agent.wait(120) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    lines = log.read_text().splitlines()
    summary = lines[-1]
    assert summary == f"agent {agent.pid} codes [0] count 150", summary  # no child died of the SIGTERMs
    handlers = {line.split()[1] for line in lines[:-1]}
    assert handlers == {str(agent.pid)}  # and the handler ran in the agent, never in a child
