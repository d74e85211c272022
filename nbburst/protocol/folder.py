"""A job's folder in the Store, read and written through seals: the one way both sides touch it.

The client, the supervisor, the server and the agent all write and read a
job's objects here, so each one is sealed to its place under the job's key
(:mod:`.sealed`) and opened before it is used. Readers that decide what
happens to the job (spec, statuses, verdict) raise :class:`~.sealed.Refused`
on a forged or replayed object; a forged cancel request or claim (:meth:`JobFolder.genuine`), result or
error (``outcome.holds_verdict``) counts as none (and is said so, once, on stderr); a forged log chunk
becomes an event that says it was refused, so the rest of the output, and the job, go on.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..store import NotFound, Store
from . import sealed
from .job import JobLayout, JobSpec, Status, Terminal, decode_records


class JobFolder:
    """The objects of one job (``layout``) in ``store``, sealed under the job's ``key``."""

    def __init__(self, store: Store, layout: JobLayout, key: bytes):
        self.store, self.layout, self.key = store, layout, key
        self._reported: set[str] = set()

    @property
    def job_id(self) -> str:
        return self.layout.job_id

    def place(self, key: str) -> str:
        """A Store key's place: its path relative to the job folder."""
        if not key.startswith(self.layout.prefix):
            raise ValueError(f"{key} is not in the folder of job {self.job_id}")
        return key[len(self.layout.prefix) :]

    # -- records (JSON) ----------------------------------------------------------------------------
    def seal_record(self, key: str, raw: bytes) -> bytes:
        return sealed.seal_record(self.key, self.job_id, self.place(key), raw)

    def open_record(self, key: str, raw: bytes) -> bytes:
        return sealed.open_record(self.key, self.job_id, self.place(key), raw)

    def put_record(self, key: str, raw: bytes) -> None:
        self.store.put(key, self.seal_record(key, raw))

    def create_record(self, key: str, raw: bytes) -> None:
        self.store.create(key, self.seal_record(key, raw))

    def get_record(self, key: str) -> bytes:
        """The record's JSON, verified; :class:`NotFound` if missing, :class:`~.sealed.Refused` if forged."""
        return self.open_record(key, self.store.get(key))

    # -- objects (bytes) ---------------------------------------------------------------------------
    def seal_object(self, key: str, data: bytes | memoryview, version: int = 0) -> bytes:
        return sealed.seal(self.key, self.job_id, self.place(key), data, version)

    def put_object(self, key: str, data: bytes | memoryview, version: int = 0) -> None:
        self.store.put(key, self.seal_object(key, data, version))

    def create_object(self, key: str, data: bytes | memoryview) -> None:
        self.store.create(key, self.seal_object(key, data))

    def get_object(self, key: str) -> bytes:
        return sealed.open_object(self.key, self.job_id, self.place(key), self.store.get(key))

    def get_versioned(self, key: str) -> tuple[int, bytes]:
        """The version the object at ``key`` was sealed at, and its content, verified."""
        return sealed.open_versioned(self.key, self.job_id, self.place(key), self.store.get(key))

    def get_view(self, key: str) -> tuple[int, memoryview]:
        """:meth:`get_versioned` for big objects: read once into writable memory, verified, used in place."""
        return sealed.open_view(self.key, self.job_id, self.place(key), self.store.get_buffer(key))

    def genuine(self, key: str, read: Callable[[str], object] | None = None) -> bool:
        """Whether a genuine object is at ``key`` (a record, or what ``read`` opens): one that does not open
        counts as none (and is reported)."""
        try:
            (read or self.get_record)(key)
            return True
        except NotFound:
            return False
        except sealed.Refused as exc:
            self.report(str(exc))
            return False

    def put_file(self, key: str, path: Path, version: int) -> None:
        """Upload a local file sealed at ``version`` (streamed)."""
        self.store.put_chunks(key, sealed.seal_file(self.key, self.job_id, self.place(key), path, version))

    def get_file(self, key: str, dest: Path) -> int:
        """Download a sealed file's content to ``dest``, verified; returns its version."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".tmp-dl-{dest.name}")
        try:
            self.store.get_file(key, tmp)
            return sealed.open_file(self.key, self.job_id, self.place(key), tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)

    # -- the job's own records ---------------------------------------------------------------------
    def spec(self) -> JobSpec:
        return JobSpec.from_json(self.get_record(self.layout.spec))

    def status(self, attempt: int) -> Status:
        return Status.from_json(self.get_record(self.layout.status(attempt)))

    def put_status(self, status: Status, create: bool = False) -> None:
        (self.create_record if create else self.put_record)(self.layout.status(status.attempt), status.to_json())

    def statuses(self, strict: bool = True) -> list[Status]:
        """Every attempt's status, oldest first (one deleted while listing is skipped). A forged one raises
        :class:`~.sealed.Refused`, or with ``strict=False`` is left out (and reported once)."""
        found = []
        for key in self.store.list(self.layout.status_prefix):
            try:
                found.append(Status.from_json(self.get_record(key)))
            except NotFound:
                continue
            except sealed.Refused as exc:
                if strict:
                    raise
                self.report(str(exc))
        return found

    def latest_status(self) -> Status | None:
        keys = self.store.list(self.layout.status_prefix)
        try:
            return Status.from_json(self.get_record(keys[-1])) if keys else None
        except NotFound:
            return None

    def terminal(self) -> Terminal | None:
        try:
            return Terminal.from_json(self.get_record(self.layout.terminal))
        except NotFound:
            return None

    def cancel_requested(self) -> bool:
        """Whether the user asked to cancel; a forged request is not one (it is reported once, on stderr)."""
        try:
            self.get_record(self.layout.cancel)
            return True
        except NotFound:
            return False
        except sealed.Refused as exc:
            self.report(str(exc))
            return False

    def log_records(self, key: str) -> list[dict[str, Any]]:
        """The records of one log chunk; a forged one is replaced by an event saying it was refused."""
        try:
            return decode_records(self.get_object(key))
        except sealed.Refused as exc:
            return [{"s": "event", "x": f"nbburst: {exc}\n", "refused": True}]

    def report(self, message: str) -> None:
        if message not in self._reported:
            self._reported.add(message)
            print(f"nbburst: {message}", file=sys.stderr, flush=True)
