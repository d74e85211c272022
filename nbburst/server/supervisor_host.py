"""The hosted supervisor: relaunches preempted jobs while no kernel waits for them.

A detached job (``%%burst --detach``, or a kernel that was shut down) has
nobody calling ``Job.supervise()``; the Jupyter server does it instead, every
few seconds, in a daemon thread. Two supervisors (this one and a waiting
kernel) never both relaunch an attempt: the attempt's status is claimed
create-only in the Store.

Only jobs whose signing key is in this server's key ring are supervised: a
relaunch needs the key, and a job submitted by someone else sharing the
bucket is theirs to resume.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .manager import JobsManager

log = logging.getLogger("nbburst.server")


class HostedSupervisor:
    def __init__(self, manager: JobsManager, interval: float = 5.0, alive: Callable[[], bool] | None = None):
        self.manager = manager
        self.interval = interval
        self.alive = alive or (lambda: True)
        self.passes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reported: dict[str, str] = {}  # job id -> last error shown (each shown once)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> HostedSupervisor:
        if not self.running:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="nbburst-supervisor", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the job being handled (a relaunch is never cut in half)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if not self.alive():
                log.debug("nbburst: the server is gone; hosted supervisor stops")
                return
            try:
                self.run_once()
            except Exception as exc:  # the Store is unreachable: try again next time
                log.warning("nbburst: hosted supervisor: cannot list jobs: %s", exc)

    def run_once(self) -> int:
        """Supervise every unfinished job once; returns how many were relaunched."""
        relaunched = 0
        keyring = self.manager.burst.keyring
        for job in self.manager.jobs():
            if self._stop.is_set():
                break
            if self.manager.is_final(job.id) or not keyring.has(job.id):
                continue
            try:
                before = job.attempt
                state = job.supervise()
                if state.terminal:
                    self.manager.info(job)  # caches it: never looked at again
                elif job.attempt > before:
                    relaunched += 1
                    log.info("nbburst: relaunched preempted job %s (%s), attempt %d", job.name, job.id, job.attempt)
                self._reported.pop(job.id, None)
            except Exception as exc:
                message = f"{type(exc).__name__}: {exc}"
                if self._reported.get(job.id) != message:
                    self._reported[job.id] = message
                    log.warning("nbburst: hosted supervisor: job %s: %s", job.id, message)
        self.passes += 1
        return relaunched

