"""Helpers shared by the tests: waiting for a condition, finding and ending local machines."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import TypeVar

import psutil

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, step: float = 0.05, what: str = "") -> T:
    """Poll ``predicate`` until it returns something true, and return that; fail after ``timeout`` s."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(step)


def agents_under(root: str) -> list[psutil.Process]:
    """Agent processes (local machines) running jobs of the Store at ``root``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
        except psutil.Error:
            continue
        if "nbburst.agent" in cmd and root in cmd:
            found.append(proc)
    return found


def kill_agents(root: str, grace: float = 5.0) -> list[int]:
    """Give agents of ``root`` ``grace`` s to exit, then kill their process groups; returns the pids killed."""
    _gone, leftovers = psutil.wait_procs(agents_under(root), timeout=grace)
    for proc in leftovers:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    psutil.wait_procs(leftovers, timeout=5)
    return [p.pid for p in leftovers]
