"""Bring the files a cell wrote on its machine into a local folder, as a plain cell would have left them.

The agent keeps them in the job's folder in the Store (:mod:`nbburst.protocol.workfiles`);
here they are fetched, when the job ends, into the kernel's working folder, or
later into any folder (``nbburst download JOB``, ``%burst download JOB``,
``Job.download(dest)``). For each file:

* absent here: written;
* here with the same content: left alone;
* here, unchanged since the cell started (older than the job): replaced, as the cell would have;
* here and changed since the cell started: never overwritten: the machine's copy is written
  beside it as ``<stem>.<job id><suffix>``, and the :class:`Arrival` says so.

A file that was sent with the cell and that the cell deleted (``!rm examples/out.csv``) is deleted here
too, if the file here still holds what was sent (not one changed since, nor another file of the same
name, as ``--files /elsewhere/x.csv`` sends one as ``x.csv``); no other deletion is mirrored (the
machine has only the files sent). Each file streams from the Store to
a temporary name in its folder, is checked (its seal, then its sha256) and only
then renamed to its final name: an interrupted download never leaves a half file.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..protocol import payload, workfiles
from ..protocol.folder import JobFolder
from ..protocol.signing import SignatureError
from ..store import NotFound

_READ = 8 << 20
GIB = 1 << 30


@dataclass
class Arrival:
    """What a download did, file by file (paths relative to ``dest``)."""

    dest: Path
    written: list[str] = field(default_factory=list)
    same: list[str] = field(default_factory=list)
    kept_both: dict[str, str] = field(default_factory=dict)  # the local file -> where the machine's copy went
    held: list[str] = field(default_factory=list)  # left in the Store (over the limit): nothing was fetched
    removed: list[str] = field(default_factory=list)  # sent with the cell, deleted by it: deleted here too
    total: int = 0

    def lines(self, job_ref: str, asked: bool = False) -> list[str]:
        """What to tell the user: what differs from a plain cell (files left in the Store, a local file kept
        beside the machine's), and the files that came, only if the download was ``asked`` for (after a cell,
        the job view names them: a plain cell prints nothing of the files it writes)."""
        out = []
        if self.held:
            out.append(
                f"the cell wrote {len(self.held)} file(s), {_size(self.total)} in all, more than the "
                f"files_limit_gb to bring back by itself; they are kept in the Store: "
                f"`%burst download {job_ref}` or `nbburst download {job_ref} [DEST]` fetches them"
            )
            return out
        if self.written and asked:
            shown = ", ".join(self.written[:8]) + (
                f" and {len(self.written) - 8} more" if len(self.written) > 8 else ""
            )
            out.append(f"files the cell wrote, now in {self.dest}: {shown}")
        if self.removed and asked:
            out.append(
                f"files sent with the cell that it deleted, deleted in {self.dest} too: {', '.join(self.removed)}"
            )
        for local, other in self.kept_both.items():
            out.append(f"{local} changed here since the cell started: kept it, and put the machine's copy in {other}")
        if asked and not out:
            out.append(
                f"all {len(self.same)} file(s) the cell wrote are in {self.dest} already"
                if self.same
                else "the cell wrote no files"
            )
        return out


def _manifest(folder: JobFolder) -> bytes | None:
    try:
        return folder.get_record(workfiles.manifest_key(folder.layout))
    except NotFound:
        return None


def listing(folder: JobFolder) -> dict[str, workfiles.Entry]:
    """The files the job kept ({} when there are none)."""
    raw = _manifest(folder)
    return workfiles.decode(raw) if raw is not None else {}


def download(folder: JobFolder, dest: str | os.PathLike[str], started: float, limit: int | None = None) -> Arrival:
    """Fetch the job's files into ``dest`` (see the module's rules); over ``limit`` bytes, nothing is fetched.

    ``started``: when the cell started; a local file modified after it is the user's and is kept."""
    dest = Path(dest).expanduser().resolve()
    raw = _manifest(folder)
    entries = workfiles.decode(raw) if raw is not None else {}
    arrival = Arrival(dest, total=sum(e.size for e in entries.values()))
    if limit is not None and arrival.total > limit:
        arrival.held = sorted(entries)
        return arrival
    for rel, entry in sorted(entries.items()):
        target = dest / rel
        if target.is_file():
            if _sha256(target) == entry.sha256:
                arrival.same.append(rel)
                continue
            if target.stat().st_mtime > started:
                other = _beside(target, folder.job_id)
                _fetch(folder, rel, entry, other)
                arrival.kept_both[rel] = other.relative_to(dest).as_posix()
                continue
        _fetch(folder, rel, entry, target)
        arrival.written.append(rel)
    for rel, address in (workfiles.decode_deleted(raw) if raw is not None else {}).items():
        target = dest / rel
        if target.is_file() and payload.digest_bytes(target.read_bytes()) == address:  # what was sent: it goes
            target.unlink()
            arrival.removed.append(rel)
    return arrival


def _beside(target: Path, job_id: str) -> Path:
    return target.with_name(f"{target.stem}.{job_id}{target.suffix}")


def _fetch(folder: JobFolder, rel: str, entry: workfiles.Entry, target: Path) -> None:
    """Stream one file to a temporary name beside ``target``, check it, then rename it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".nbburst-dl-{target.name}-{os.getpid()}")
    try:
        folder.get_file(workfiles.file_key(folder.layout, rel), tmp)  # the seal is checked as it streams
        if _sha256(tmp) != entry.sha256 or tmp.stat().st_size != entry.size:
            raise SignatureError(f"file {rel} of job {folder.job_id} does not match its checksum; not written")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_READ):
            h.update(chunk)
    return h.hexdigest()


def _size(n: int) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale // 10:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
