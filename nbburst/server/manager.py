"""What the REST handlers and the hosted supervisor ask of the Store, with caches.

Every method here blocks on Store I/O: the handlers call them in a thread pool.
Two facts keep repeated polling cheap, even on GCS: a terminal job never
changes again (its summary is cached), and log chunks are immutable (their
rendered length is cached, so a tail reads only the chunks it has not seen).

What each method answers is what the REST API answers (docs/rest-api.md, which lists every key).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any
from urllib.parse import urlsplit

from .. import config
from ..client.burst import Burst
from ..client.job import Job
from ..client.session.manager import SessionGone
from ..errors import JobNotFound, UsageError
from ..protocol import cluster
from ..protocol.folder import JobFolder
from ..protocol.job import TERMINAL, record_text
from ..store import NotFound

#: The most log text one response carries (characters); the client pages with next_offset.
MAX_LOG_CHARS = 256 * 1024
#: Rendered chunk texts kept in memory (characters, summed).
TEXT_CACHE_CHARS = 8 * 1024 * 1024


class JobsManager:
    """The server's view of the jobs in the configured Store."""

    def __init__(self, burst: Burst, log: logging.Logger | None = None):
        self.burst = burst
        self.log = log or logging.getLogger("nbburst.server")
        self._lock = threading.Lock()
        self._final: dict[str, dict[str, Any]] = {}  # id -> info() of a terminal job
        self._chunk_len: dict[str, int] = {}  # log chunk key -> rendered length
        self._chunk_text: OrderedDict[str, str] = OrderedDict()
        self._text_chars = 0

    @property
    def settings(self) -> config.NBBurst:
        return self.burst.settings

    # -- jobs --------------------------------------------------------------------
    def jobs(self) -> list[Job]:
        """Every job in the Store (``Burst`` keeps one handle per job, so specs are read once)."""
        jobs = self.burst.jobs()
        present = {job.id for job in jobs}
        with self._lock:
            for gone in [i for i in self._final if i not in present]:  # deleted (nbburst gc)
                del self._final[gone]
        return jobs

    def is_final(self, job_id: str) -> bool:
        with self._lock:
            return job_id in self._final

    def info(self, job: Job) -> dict[str, Any]:
        with self._lock:
            cached = self._final.get(job.id)
        if cached is not None:
            return dict(cached)
        info = job.info()
        if _final(info):
            with self._lock:
                self._final[job.id] = dict(info)
        return info

    def list(self, state: str = "all") -> list[dict[str, Any]]:
        """Summaries of the jobs, newest first; ``running`` keeps the unfinished ones."""
        if state not in ("all", "running"):
            raise UsageError(f"state must be 'running' or 'all', not {state!r}")
        infos = []
        for job in self.jobs():
            if state == "running" and self.is_final(job.id):
                continue
            try:
                info = self.info(job)
            except (JobNotFound, NotFound):
                continue  # deleted while we looked
            except Exception:
                self.log.warning("nbburst: cannot read job %s", job.id, exc_info=True)
                continue
            if state == "running" and _final(info):
                continue
            infos.append(info)
        infos.sort(key=lambda i: (i["created"] or 0.0, i["id"]), reverse=True)
        return infos

    def job(self, ref: str) -> Job:
        """A job by id, or by name (the newest of that name); :class:`JobNotFound` otherwise."""
        return self.burst.job(ref)

    def detail(self, ref: str) -> dict[str, Any]:
        """The summary plus the attempts (an attempt followed by another one was preempted)."""
        job = self.job(ref)
        info = self.info(job)
        rows = [
            {
                "attempt": a["attempt"],
                "state": a["state"],
                "started": a["start"],
                "ended": a["end"],
                "seconds": a["seconds"],
                "machine": a["machine"],
                "message": a["message"],
            }
            for a in job.attempts()
        ]
        if rows and _final(info):
            rows[-1]["state"] = info["state"]  # the verdict, even if it was committed after we looked
        return {**info, "attempts": rows}

    def dashboard(self, ref: str) -> str | None:
        """Where a ``--workers`` job's Dask dashboard listens (``http://host:port``), as its verified cluster
        record says; None when it has none (no workers, no scheduler yet, or no dashboard)."""
        record = cluster.latest(self.job(ref).folder) or {}
        url = urlsplit(record.get("dashboard") or "")
        return f"http://{url.netloc}" if url.scheme == "http" and url.netloc else None

    def cancel(self, ref: str) -> dict[str, Any]:
        job = self.job(ref)
        state = job.cancel()
        return {"id": job.id, "state": state.value}

    # -- logs ------------------------------------------------------------------------
    def logs(self, ref: str, attempt: int | None = None, offset: int = 0) -> dict[str, Any]:
        """A slice of one attempt's log as text, from a character offset."""
        job = self.job(ref)
        # Read the verdict BEFORE the log: the agent ships its last chunk before it commits.
        complete = self.is_final(job.id) or job.terminal() is not None
        store = job.store
        attempts = _attempts(store.list(job.layout.status_prefix))
        latest = attempts[-1] if attempts else 1
        if attempt is None:
            attempt = latest
        elif attempt > latest:
            raise JobNotFound(f"no attempt {attempt} of job {job.id}: it has {latest}")
        text, offset = self._slice(job.folder, store.list(job.layout.attempt_logs(attempt)), offset)
        return {
            "attempt": attempt,
            "attempts": attempts,
            "offset": offset,
            "next_offset": offset + len(text),
            "text": text,
            "complete": complete or attempt < latest,
        }

    def _slice(self, folder: JobFolder, keys: list[str], offset: int) -> tuple[str, int]:
        """``(text, offset)``: the rendered log from ``offset`` (clamped to its length), at most MAX_LOG_CHARS."""
        parts: list[str] = []
        pos = 0  # rendered characters before the current chunk
        wanted = MAX_LOG_CHARS
        for key in keys:
            length = self._chunk_len.get(key)
            if length is not None and pos + length <= offset:
                pos += length
                continue
            text = self._chunk(folder, key)
            length = len(text)
            if pos + length > offset and wanted > 0:
                piece = text[max(0, offset - pos) :][:wanted]
                parts.append(piece)
                wanted -= len(piece)
            pos += length
            if wanted <= 0:
                break
        if not parts and offset > pos:
            offset = pos
        return "".join(parts), offset

    def _chunk(self, folder: JobFolder, key: str) -> str:
        with self._lock:
            text = self._chunk_text.get(key)
            if text is not None:
                self._chunk_text.move_to_end(key)
                return text
        try:
            text = "".join(record_text(r) for r in folder.log_records(key))  # a forged chunk: why refused
        except NotFound:
            return ""  # the job is being deleted
        with self._lock:
            self._chunk_len[key] = len(text)
            self._chunk_text[key] = text
            self._text_chars += len(text)
            while self._text_chars > TEXT_CACHE_CHARS and len(self._chunk_text) > 1:
                _, old = self._chunk_text.popitem(last=False)
                self._text_chars -= len(old)
        return text

    # -- warm sessions ----------------------------------------------------------------------
    def sessions(self) -> list[dict[str, Any]]:
        """The warm sessions recorded in the state folder, each with its state, cells and cost so far."""
        return sorted((s.info() for s in self.burst.sessions.all()), key=lambda i: i["started"], reverse=True)

    def stop_session(self, name: str) -> dict[str, Any]:
        """End a session and its machine; its last summary (state ``STOPPED``, the cost)."""
        if name not in {s.name for s in self.burst.sessions.all()}:  # only a listed one: a name is no path
            raise SessionGone(f"no session {name!r}")
        return self.burst.sessions.stop(name)

    # -- configuration --------------------------------------------------------------------
    def config_values(self) -> dict[str, Any]:
        return config.describe(self.settings)


def _final(info: dict[str, Any]) -> bool:
    """Whether a summary is of a job that has ended (an unverifiable job's is not: it may change)."""
    return info["state"] in {s.value for s in TERMINAL}


def _attempts(status_keys: list[str]) -> list[int]:
    """Attempt numbers from ``.../status/0001.json`` keys."""
    out = set()
    for key in status_keys:
        stem = key.rsplit("/", 1)[-1].split(".", 1)[0]
        if stem.isdigit():
            out.add(int(stem))
    return sorted(out)
