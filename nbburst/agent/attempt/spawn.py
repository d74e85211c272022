"""The agent's children that run user code: in a session of their own, dying with the agent, and findable.

Every process the agent starts for an attempt (the runner today; later a warm
parent forking one runner per cell, a Dask scheduler) is made by :func:`spawn`:

* it forks, and the child makes a session of its own (``setsid``): what is
  aimed at the agent's process group (a machine's soft-off SIGTERM) does not
  reach it, and one ``killpg`` of its group ends the cell and what it started;
* right after the fork the child asks to be killed when the agent dies
  (``PR_SET_PDEATHSIG``, SIGKILL) and checks ``getppid()`` to close the race
  (the agent may have died before the request): a child never outlives its
  agent, even one killed with ``kill -9``;
* the agent's signals are held back across the fork, and the child, once in
  its own session, drops (SIG_IGN) any that reached it through the agent's
  group before, so neither they nor the agent's handlers act in the child;
* every process of the attempt carries the marker ``NBBURST_ATTEMPT=<job>:<n>``
  in its environment. The agent makes sure its own *initial* environment has it
  (the local backend starts it so; on a VM it executes itself again once,
  :func:`ensure_marked`), because ``/proc/<pid>/environ`` shows the environment
  a program was started with: so even a process that left the group (``setsid``,
  a double fork, with or without ``exec``) is found by
  :func:`~..protocol.processes.sweep`.

A child that finds its agent gone exits with :data:`EXIT_ORPHANED`: an
infrastructure failure, never the cell's error.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import traceback
from collections.abc import Callable

from ...protocol.job import ENV_ATTEMPT, ENV_CPUS

#: A child's exit status when its agent is gone (EX_TEMPFAIL): the attempt failed, not the cell.
EXIT_ORPHANED = 75
#: A child that crashed before its body could say anything.
EXIT_CRASHED = 2
#: Signals held back across the fork: what a machine or a terminal sends the agent.
_HELD = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
_PR_SET_PDEATHSIG = 1

try:  # resolved before any fork: the child must not load libraries
    _prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):
    _prctl = None

_parent: int | None = None  # in a child: the agent's pid


def spawn(body: Callable[[], int], tag: str) -> int:
    """Fork a child that runs ``body()`` and exits with what it returns; returns the child's pid (its group)."""
    parent = os.getpid()
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        pid = os.fork()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        raise
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        return pid
    code = EXIT_CRASHED
    try:
        os.setsid()  # from here on, nothing aimed at the agent's group reaches this process
        for sig in _HELD:
            # drop what came through the agent's group before (held back, it is queued whatever the disposition;
            # setting SIG_IGN is what discards it)
            signal.signal(sig, signal.SIG_IGN)
        _die_with(parent)
        os.environ[ENV_ATTEMPT] = tag
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        code = body()
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def pin_cpus() -> None:
    """Keep this process (and what it forks from now on) on the machine's CPUs (``$NBBURST_CPUS``)."""
    cpus = os.environ.get(ENV_CPUS)
    if cpus and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
        except OSError as exc:
            print(f"nbburst agent: could not pin CPUs {cpus}: {exc}", file=sys.stderr)


def _die_with(parent: int) -> None:
    global _parent
    _parent = parent
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # the agent died before the request above: follow it now
        os._exit(EXIT_ORPHANED)


def orphaned() -> bool:
    """In a child made by :func:`spawn`: whether its agent is gone."""
    return _parent is not None and os.getppid() != _parent


def ensure_marked(tag: str, argv: list[str]) -> None:
    """Make sure this agent was *started* with ``$NBBURST_ATTEMPT=tag`` (what ``/proc`` shows of every process
    forked from it); if not, execute it again with it. Returns only when it was."""
    if os.environ.get(ENV_ATTEMPT) == tag:
        return
    os.environ[ENV_ATTEMPT] = tag
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "nbburst.agent", *argv])
