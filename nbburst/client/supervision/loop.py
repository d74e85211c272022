"""The supervision loop: every unfinished job of a Store, supervised round after round, whoever hosts it.

One loop for every host (the package's docstring says where each runs); a host says only what differs, through
hooks: how long to wait between rounds (``interval``), when to leave (``idle``: no unfinished job in hand for
that long; ``alive``: asked before each round), what to do before a round (``before_round``: the watcher VM
fetches job keys there), which jobs to leave alone (``skip``), what to say after each job's step (``report``)
and where problems go (``problem``).

A round lists the Store's jobs and steps each one whose key this session holds and that it has not seen end: a
relaunch needs the key, and a job submitted by someone else sharing the bucket is theirs to resume. One job's
trouble never stops the others; a job this session cannot verify is never acted on. A job is stepped by a
supervisor of the loop's own (:class:`.supervisor.Supervisor`), or with ``handles`` by its session handle
(``Job.supervise()``: the handle's one supervisor, which also removes what is left of a job's machines once it
has ended, for hosts where no cell waits to do it). On the way out the loop hands its leases back, so another
supervisor takes over at once, not on expiry.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...errors import NotPermitted
from ...protocol.job import State
from ...protocol.signing import SignatureError
from ...store.base import elapsed
from .supervisor import Supervisor

if TYPE_CHECKING:
    from ..burst import Burst
    from ..job import Job


def print_problem(key: str, problem: str) -> None:
    """The default ``problem`` hook: the line goes to the program's output (a terminal, a log, a console)."""
    if problem:
        print(f"nbburst supervise: {problem}", flush=True)


class Loop:
    """The supervision loop of one session's Store, with its host's hooks."""

    def __init__(
        self,
        burst: Burst,
        interval: float = 5.0,
        *,
        idle: float | None = None,
        alive: Callable[[], bool] | None = None,
        before_round: Callable[[Burst], None] | None = None,
        skip: Callable[[Job], bool] | None = None,
        report: Callable[[Job, State, bool], None] | None = None,
        problem: Callable[[str, str], None] = print_problem,
        handles: bool = False,
        refused: Callable[[NotPermitted], str] | None = None,
    ):
        """``report(job, state, relaunched)`` follows each step; ``problem(key, text)`` says what went wrong with
        job ``key`` ("" for the round as a whole), and is called with text "" once it went right."""
        self.burst = burst
        self.interval = interval
        self.idle = idle
        self.alive = alive or (lambda: True)
        self.before_round = before_round
        self.skip = skip or (lambda job: False)
        self.report = report
        self.problem = problem
        self.handles = handles
        self.refused = refused  # hears of a relaunch refused to this host's account (Supervisor)
        self.supervisors: dict[str, Supervisor] = {}  # job id -> its supervisor, for each unfinished job in hand
        self.ended: set[str] = set()  # jobs seen ended (or unverifiable): later rounds skip them unread

    def round(self, stop: threading.Event | None = None) -> int:
        """Step every unfinished job once (until ``stop`` is set: never a relaunch cut in half); returns how many
        were relaunched. Raises when the jobs cannot be listed."""
        relaunched = 0
        listed = self.burst.jobs()
        for gone in set(self.supervisors) - {job.id for job in listed}:  # deleted meanwhile (nbburst gc)
            self.supervisors.pop(gone)
        for job in listed:
            if stop is not None and stop.is_set():
                break
            if job.id in self.ended or not self.burst.keyring.has(job.id) or self.skip(job):
                continue
            try:
                sup = self.supervisors.get(job.id)
                if sup is None:
                    if self.handles:
                        sup = job.supervisor
                    elif job.terminal() is not None:
                        self.ended.add(job.id)
                        continue
                    else:
                        sup = Supervisor(job, refused=self.refused)
                    self.supervisors[job.id] = sup
                before = job.attempt
                state = job.supervise() if self.handles else sup.step()
            except SignatureError as exc:  # a job this session cannot verify is not one it may act on
                self.problem(job.id, f"job {job.id}: {exc}")
                self.supervisors.pop(job.id, None)
                self.ended.add(job.id)
                continue
            except Exception as exc:  # one job's trouble never stops the others
                self.problem(job.id, f"job {job.id}: {type(exc).__name__}: {exc}")
                continue
            self.problem(job.id, "")
            moved = job.attempt > before
            relaunched += moved
            if self.report is not None:
                self.report(job, state, moved)
            if state.terminal:
                self.supervisors.pop(job.id, None)
                self.ended.add(job.id)
        return relaunched

    def run(self, stop: threading.Event) -> None:
        """Round after round, ``interval`` apart, until ``stop`` is set, ``alive`` says no, or (with ``idle``) no
        unfinished job has been in hand for ``idle`` seconds; the leases are handed back on the way out."""
        busy = elapsed()
        try:
            while not stop.is_set() and self.alive():
                try:
                    if self.before_round is not None:
                        self.before_round(self.burst)
                    self.round(stop)
                    self.problem("", "")
                except Exception as exc:  # the Store is unreachable for now: the next round tries again
                    self.problem("", f"round failed: {type(exc).__name__}: {exc}")
                if self.supervisors:
                    busy = elapsed()
                elif self.idle is not None and elapsed() - busy > self.idle:
                    break
                stop.wait(self.interval)
        finally:
            self.release()

    def serve(self, stop: threading.Event) -> None:
        """:meth:`run` as the whole life of a program (the background process, the watcher VM's), which says in
        its output when it starts and when it is done."""
        print(f"nbburst supervise: pid {os.getpid()} watching {self.burst.store.url}", flush=True)
        self.run(stop)
        print(f"nbburst supervise: pid {os.getpid()} done", flush=True)

    def release(self) -> None:
        """Hand back the leases of the jobs in hand, so that another supervisor takes over at once."""
        for sup in list(self.supervisors.values()):
            sup.lease.release()


def stop_on_sigterm() -> threading.Event:
    """An event that SIGTERM sets: a program's loop then ends after the job in hand, its leases handed back."""
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    return stopping
