"""The supervision loop in a thread of the Jupyter server: preempted jobs are relaunched while no kernel waits.

A detached job (``%%burst --detach``, or a kernel that was shut down) has nobody calling ``Job.supervise()``;
the Jupyter server runs the supervision loop (:mod:`nbburst.client.supervision.loop`) instead, every few seconds,
in a daemon thread. It steps each job through the server's own handle of it (the handle's supervisor also
removes what is left of a job's machines once it has ended), leaves alone the jobs the server has already seen
end, and says each problem once in the server's log, not at every pass while it lasts. Two supervisors (this one
and a waiting kernel) never both relaunch an attempt: the attempt's status is claimed create-only in the Store.

Only jobs whose signing key is in this server's key ring are supervised: a relaunch needs the key, and a job
submitted by someone else sharing the bucket is theirs to resume.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..client.job import Job
from ..client.supervision.loop import Loop
from ..protocol.job import State
from .manager import JobsManager


class SupervisionThread:
    """The server's supervision loop; its first round comes one interval after it starts."""

    def __init__(
        self,
        manager: JobsManager,
        interval: float = 5.0,
        alive: Callable[[], bool] | None = None,
        log: logging.Logger | None = None,
    ):
        self.manager = manager
        self.log = log or logging.getLogger("nbburst.server")
        self.interval = interval
        self.server_alive = alive or (lambda: True)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reported: dict[str, str] = {}  # job id ('' for the round) -> the problem last logged
        self.loop = Loop(
            manager.burst,
            interval,
            alive=self._alive,
            skip=lambda job: manager.is_final(job.id),
            report=self._report,
            problem=self._problem,
            handles=True,
        )

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> SupervisionThread:
        if not self.running:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="nbburst-supervision", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the job being handled (a relaunch is never cut in half), and hand the leases back."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self.loop.release()

    def round(self) -> int:
        """Supervise every unfinished job once; returns how many were relaunched."""
        return self.loop.round(self._stop)

    def _run(self) -> None:
        if not self._stop.wait(self.interval):  # the server's start is busy enough without a round
            self.loop.run(self._stop)

    def _alive(self) -> bool:
        if self.server_alive():
            return True
        self.log.debug("nbburst: the server is gone; its supervision loop stops")
        return False

    def _report(self, job: Job, state: State, relaunched: bool) -> None:
        if state.terminal:
            self.manager.info(job)  # caches it: never looked at again
        elif relaunched:
            self.log.info("nbburst: relaunched preempted job %s (%s), attempt %d", job.name, job.id, job.attempt)

    def _problem(self, key: str, problem: str) -> None:
        """Log a problem once, not at every pass while it lasts."""
        if not problem:
            self._reported.pop(key, None)
        elif self._reported.get(key) != problem:
            self._reported[key] = problem
            self.log.warning("nbburst: supervision loop: %s", problem)
