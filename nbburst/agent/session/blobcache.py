"""Blobs a session's warm parent holds in memory by content address, for the cells it forks.

A session's cells often read the same inputs (a 100 MiB frame, a fitted
model). The warm parent reads each blob once, checks it against its address,
and holds it as aligned memory; a runner forked from it finds the blob here
and neither reads nor hashes it again: its arrays are views of the parent's
pages, copied only where the cell writes (copy-on-write). Outside a session
nothing is held and every blob comes from the Store.
"""

from __future__ import annotations

import os
from collections import OrderedDict

from ...protocol import payload, signing
from ...protocol.job import blob_key
from ...store import Store

#: At most this share of the machine's memory is held (the oldest blobs are let go first).
MEMORY_SHARE = 0.25

_held: OrderedDict[str, memoryview] = OrderedDict()
_reads = [0]  # blobs read from the Store so far
_fingerprints: dict[
    str, tuple[str | None, dict[int, str]]
] = {}  # of held blobs' values, as loaded (agent/attempt/inputs.py)


def get(digest: str) -> memoryview | None:
    """The verified bytes of blob ``digest`` if held here."""
    return _held.get(digest)


def hold(store: Store, digest: str) -> bool:
    """Read blob ``digest`` and hold it, unless it is held already; returns whether it was read now."""
    if digest in _held:
        _held.move_to_end(digest)
        return False
    data = store.get(blob_key(digest))
    if payload.digest_bytes(data) != digest:
        raise signing.SignatureError(f"blob {digest[:12]} does not match its address; not holding it")
    _held[digest] = payload.aligned(data)
    _reads[0] += 1
    budget = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") * MEMORY_SHARE
    while len(_held) > 1 and sum(view.nbytes for view in _held.values()) > budget:
        _fingerprints.pop(_held.popitem(last=False)[0], None)
    return True


def fingerprints(digest: str) -> tuple[str | None, dict[int, str]] | None:
    """The fingerprints a cell's input has when it arrives from held blob ``digest``, if known here."""
    return _fingerprints.get(digest)


def remember(digest: str, fingerprints: tuple[str | None, dict[int, str]]) -> None:
    """Keep the fingerprints of held blob ``digest``'s value, for the cells forked from now on."""
    if digest in _held:
        _fingerprints[digest] = fingerprints


def held() -> list[str]:
    """The addresses held, oldest first."""
    return list(_held)


def reads() -> int:
    """How many blobs were read from the Store (the others were held already)."""
    return _reads[0]
