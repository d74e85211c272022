"""The cell's verdict, handed from the runner to the controller: the runner never commits anything itself.

The runner writes what the cell gave back (its values, or the exception it
raised) to a file of the attempt on the machine's disk, sealed to its place and
attempt, atomically, and exits. The controller then checks that its attempt still
holds (:mod:`..protocol.fence`) and commits the file, create-only, as
``result.pkl`` or ``error.pkl`` (on a Store on the same disk, the file itself:
a big result is written once). So a runner whose controller is gone (``kill -9``, a machine
going away) commits nothing, and an infrastructure failure (a broken pipe to a
dead controller) is never signed as the cell's error.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from ...protocol import outcome, sealed
from ...protocol.folder import JobFolder
from ...store import AlreadyExists, NotFound

RESULT, ERROR = "result", "error"
#: The event a runner sends once its verdict is handed over and its output closed: all that is left of it is
#: its exit, which its controller need not wait for (a process forked from a big one takes milliseconds to go).
HANDED = "handed"


class Handoff:
    """The folder where one attempt's runner leaves its verdict for the controller, sealed for ``job`` at
    ``attempt``."""

    def __init__(self, folder: str | os.PathLike[str], job: JobFolder, attempt: int):
        self.folder, self.job, self.attempt = Path(folder), job, attempt

    def clear(self) -> None:
        """Start empty: a verdict left by an earlier attempt on this disk is not this attempt's."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True, exist_ok=True)

    def adopt(self) -> bool:
        """Whether an earlier attempt's runner left a verdict here that this attempt commits instead of running
        the cell again (the machine was stopped while the verdict was being uploaded, and restarted with its
        disk). Sealed again at this attempt: one sealed at a superseded attempt would be refused. A verdict that
        does not open under the job's key is none; without one, the folder starts empty (:meth:`clear`)."""
        found = self.taken()
        if found is not None:
            kind, path = found
            try:
                version, data = sealed.open_view(
                    self.job.key, self.job.job_id, self.job.place(_key(self.job, kind)), path.read_bytes()
                )
            except sealed.Refused:
                self.clear()
                return False
            if version != self.attempt:
                self.hand_over(kind, [data])
            return True
        self.clear()
        return False

    def hand_over(self, kind: str, parts: Sequence[bytes | memoryview]) -> None:
        """In the runner: leave the verdict ``kind`` (:data:`RESULT` or :data:`ERROR`), complete or not at all."""
        tmp = self.folder / f".{kind}.tmp"
        place = self.job.place(_key(self.job, kind))
        # No fsync: only this attempt's controller reads it, in this boot of the machine.
        sealed.write_sealed(self.job.key, self.job.job_id, place, parts, self.attempt, tmp)
        os.replace(tmp, self.folder / kind)

    def taken(self) -> tuple[str, Path] | None:
        """In the controller, once the runner has exited: the verdict it left, if any."""
        for kind in (RESULT, ERROR):
            path = self.folder / kind
            if path.is_file():
                return kind, path
        return None


def _key(folder: JobFolder, kind: str) -> str:
    return folder.layout.result if kind == RESULT else folder.layout.error


def commit(folder: JobFolder, kind: str, path: Path, attempt: int) -> None:
    """Upload a verdict file (:meth:`Handoff.hand_over`'s, sealed at ``attempt``) as the job's ``result.pkl``
    or ``error.pkl``, create-only. What is in the way decides: our own (a retried write whose success went
    unseen) or a later attempt's stands; so does an earlier attempt's that counts (a cell's outcome is the
    cell's, whichever attempt ran it); a superseded attempt's, or one planted without the job's key, is
    replaced (and reported)."""
    key = _key(folder, kind)
    try:
        folder.store.put_file(key, path, create=True, adopt=True)  # the attempt's file: never written again
        return
    except AlreadyExists:
        pass
    try:
        outcome.verdict_object(folder, key)
        return
    except NotFound:
        pass  # deleted meanwhile
    except sealed.Refused as exc:
        folder.report(f"{exc}; replacing it with attempt {attempt}'s")
    folder.store.put_file(key, path, adopt=True)
