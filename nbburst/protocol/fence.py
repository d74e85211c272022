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
  gives way to the next one (:func:`~.outcome.commit_terminal`).
"""

from __future__ import annotations

from ..store import AlreadyExists, NotFound, Store
from .job import JobLayout


def attempt_in(key: str) -> int:
    """The attempt a ``status/<n>.json`` or ``claims/<n>`` key is about."""
    return int(key.rsplit("/", 1)[1].split(".", 1)[0])


def claim(store: Store, layout: JobLayout, attempt: int) -> None:
    """Mark when ``attempt`` was claimed; call right after creating its status (the claim itself)."""
    try:
        store.create(layout.claim(attempt), b"")
    except AlreadyExists:
        pass  # a retried relaunch of the same attempt: the first claim's time stands


def superseded(store: Store, layout: JobLayout, attempt: int) -> bool:
    """Whether a later attempt than ``attempt`` has been claimed (the controller's check before it commits)."""
    return store.exists(layout.status(attempt + 1))


def claim_time(store: Store, layout: JobLayout, attempt: int) -> float | None:
    """When ``attempt`` was claimed, by the Store's clock; None if it was not. A claimer that died between
    the status and its marker left only the status, whose last write bounds the claim's time from above."""
    for key in (layout.claim(attempt), layout.status(attempt)):
        try:
            return store.updated(key)
        except NotFound:
            continue
    return None


def stands(store: Store, layout: JobLayout, attempt: int, key: str, status_keys: list[str] | None = None) -> bool:
    """Whether the object ``key`` that attempt ``attempt`` wrote (its verdict) counts: no later attempt was
    claimed before it was written. ``status_keys``: the job's status keys, when the caller has listed them."""
    if attempt <= 0:
        return True  # written by a supervisor or the client, for the job as a whole
    keys = store.list(layout.status_prefix) if status_keys is None else status_keys
    if not any(attempt_in(k) > attempt for k in keys):
        return True
    claimed = claim_time(store, layout, attempt + 1)
    if claimed is None:
        return True
    try:
        return store.updated(key) < claimed
    except NotFound:
        return True
