"""Fencing: one attempt of a job acts at a time, and a superseded attempt's verdict does not count.

Attempt N is superseded once attempt N+1 is claimed: a supervisor found N's
machine gone and created ``status/<N+1>`` (create-only), then the claim marker
``claims/<N+1>``, which is never rewritten, so its Store time is the claim's.
A frozen or cut-off attempt N can come back to life after that. Two rules keep
it from doing harm:

* its controller checks :func:`superseded` before every commit (result, error,
  verdict) and on every heartbeat; once superseded it stops its runner and
  commits nothing;
* a claim can still land between that check and the write, so readers accept a
  verdict of attempt N only if it :func:`stands`: no claim N+1 was created
  before it, both times by the Store's clock. A verdict that does not stand
  gives way to the next one (:func:`~.outcome.commit_terminal`, :mod:`.verdict`).

Only genuine claims count: the status and the marker are sealed records
(:mod:`.folder`), so an object planted by someone without the job's key can
neither stop an attempt nor void its verdict; a forged marker found in the way
is replaced by the real claimer's.
"""

from __future__ import annotations

from ..store import AlreadyExists, NotFound
from .folder import JobFolder

_MARKER = b"{}"


def attempt_in(key: str) -> int:
    """The attempt a ``status/<n>.json`` or ``claims/<n>`` key is about."""
    return int(key.rsplit("/", 1)[1].split(".", 1)[0])


def claim(folder: JobFolder, attempt: int) -> None:
    """Mark when ``attempt`` was claimed; call right after creating its status (the claim itself)."""
    key = folder.layout.claim(attempt)
    try:
        folder.create_record(key, _MARKER)
    except AlreadyExists:
        if not folder.genuine(key):  # planted before us: ours replaces it, at our time
            folder.put_record(key, _MARKER)
        # else a retried relaunch of the same attempt: the first claim's time stands


def superseded(folder: JobFolder, attempt: int) -> bool:
    """Whether a later attempt than ``attempt`` has been claimed (the controller's check before it commits); a
    forged claim is not one (it is reported once)."""
    return folder.genuine(folder.layout.status(attempt + 1))


def claim_time(folder: JobFolder, attempt: int) -> float | None:
    """When ``attempt`` was claimed, by the Store's clock; None if it was not. A claimer that died between
    the status and its marker left only the status, whose last write bounds the claim's time from above."""
    for key in (folder.layout.claim(attempt), folder.layout.status(attempt)):
        if folder.genuine(key):
            try:
                return folder.store.updated(key)
            except NotFound:
                continue
    return None


def stands(folder: JobFolder, attempt: int, key: str, status_keys: list[str] | None = None) -> bool:
    """Whether the object ``key`` that attempt ``attempt`` wrote (its verdict) counts: no later attempt was
    claimed before it was written. ``status_keys``: the job's status keys, when the caller has listed them."""
    if attempt <= 0:
        return True  # written by a supervisor or the client, for the job as a whole
    keys = folder.store.list(folder.layout.status_prefix) if status_keys is None else status_keys
    if not any(attempt_in(k) > attempt for k in keys):
        return True
    claimed = claim_time(folder, attempt + 1)
    if claimed is None:
        return True
    try:
        return folder.store.updated(key) < claimed
    except NotFound:
        return True
