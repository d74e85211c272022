"""Reading a job's log chunks in order, each once, across attempts (the view, the magic and ``logs``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..protocol.folder import JobFolder
from ..protocol.job import attempt_marker


class LogTail:
    """Reads a job's log chunks in order, each once, across attempts; a forged chunk is shown as refused."""

    def __init__(self, folder: JobFolder):
        self.folder, self.store, self.layout = folder, folder.store, folder.layout
        self.seen: set[str] = set()

    def _read(self, keys: list[str], markers: bool) -> Iterator[dict[str, Any]]:
        """The records of these chunks, each tagged with its attempt; a marker where each attempt after
        the first begins."""
        for key in keys:
            attempt = int(part) if (part := key.split("/")[-2]).isdigit() else 0
            if markers and attempt > 1 and key.endswith("/00000000"):
                yield attempt_marker(attempt)
            for record in self.folder.log_records(key):
                record["attempt"] = attempt
                yield record

    def poll(self) -> Iterator[dict[str, Any]]:
        """The records of the chunks not read before."""
        fresh = [key for key in self.store.list(self.layout.logs_prefix) if key not in self.seen]
        for key in fresh:
            self.seen.add(key)
            yield from self._read([key], markers=True)

    def records(self, attempt: int | None = None) -> list[dict[str, Any]]:
        """All records (of one attempt), with a marker where each attempt after the first began."""
        prefix = self.layout.attempt_logs(attempt) if attempt else self.layout.logs_prefix
        return list(self._read(self.store.list(prefix), markers=attempt is None))
