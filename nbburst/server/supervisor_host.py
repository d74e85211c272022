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


class HostedSupervisor:
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
        self.alive = alive or (lambda: True)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reported: dict[str, str] = {}  # job id ('' for the listing) -> last problem logged

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
        """Stop after the job being handled (a relaunch is never cut in half), and hand the leases back."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self.release_leases()

    def release_leases(self) -> None:
        """Release the jobs' leases we hold, so that another supervisor takes over at once, not on expiry."""
        for job in self.manager.burst.handles():
            job.supervisor.lease.release()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if not self.alive():
                self.log.debug("nbburst: the server is gone; hosted supervisor stops")
                return
            try:
                self.run_once()
                self._reported.pop("", None)
            except Exception as exc:  # the Store is unreachable: try again next time, say it once
                self._report("", f"cannot list jobs: {type(exc).__name__}: {exc}")

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
                    self.log.info(
                        "nbburst: relaunched preempted job %s (%s), attempt %d", job.name, job.id, job.attempt
                    )
                self._reported.pop(job.id, None)
            except Exception as exc:
                self._report(job.id, f"job {job.id}: {type(exc).__name__}: {exc}")
        return relaunched

    def _report(self, key: str, message: str) -> None:
        """Log a problem once, not at every pass while it lasts."""
        if self._reported.get(key) != message:
            self._reported[key] = message
            self.log.warning("nbburst: hosted supervisor: %s", message)
