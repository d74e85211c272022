"""What ``nbburst gc`` sweeps from a Store: what interrupted submissions and deleted jobs leave behind.

A submission killed half-way leaves the blobs it had uploaded (or a
half-written temporary), a job folder without ``spec.json`` (the spec is
written last: without it there is no job) and a key in the key ring; deleting
old jobs leaves blobs that no job names any more; a process killed while it
read the Store's clock leaves its probe. Each goes once it is older
than a grace period (a day by default), measured on the Store's clock: a
submission in progress writes its blobs before the inputs that name them, and
its spec last, so nothing it still needs is ever that old.

Blobs are named from a job's JSON objects (``inputs.json``, ``files.json``,
``dist/manifest.json``, checkpoint manifests...): every string there that is a
blob key or a blob address counts as a reference, so a new kind of manifest is
covered without changes here. Job folders that appear while the sweep runs are
read too before any blob is judged unreferenced.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..machines.base import Machines
from ..protocol.job import BLOBS_PREFIX, JobLayout, job_id_time, jobs_prefix
from ..protocol.signing import KeyRing
from ..store import NotFound, Store
from ..store.base import CLOCK_PREFIX

#: How old a leftover must be before it is removed (``nbburst gc --grace``).
GRACE_SECONDS = 86400.0
_ADDRESS = re.compile(r"^[0-9a-f]{64}$")


@dataclass
class Leftover:
    """Something ``gc`` can remove: what it is, how big and old, why it can go, and what to delete."""

    kind: str  # "job folder", "temporary", "clock probe", "blob" or "key"
    name: str
    size: int
    age: float
    why: str
    keys: list[str] = field(default_factory=list)  # Store keys to delete
    job_id: str = ""  # a key ring entry to delete


def sweep(store: Store, grace_s: float = GRACE_SECONDS, dropped: Iterable[str] = ()) -> list[Leftover]:
    """Spec-less job folders, temporaries and unreferenced blobs of ``store`` older than ``grace_s``.

    ``dropped``: ids of jobs this run deletes anyway; what only they name counts as unreferenced."""
    now = store.now()
    found = _temporaries(store, now, grace_s) + _probes(store, now, grace_s)
    folders = _specless(store, now, grace_s)
    found += folders
    gone = set(dropped) | {f.job_id for f in folders}
    found += _blobs(store, now, grace_s, gone)
    return found


def orphan_keys(
    keyring: KeyRing, stores: list[Store], grace_s: float = GRACE_SECONDS, now: float | None = None
) -> list[Leftover]:
    """Keys older than ``grace_s`` at ``now`` (this machine's clock: the ring is on its disk; by default
    now) whose job was never written (no ``spec.json``) in the Store they name.

    A key that names a Store not among ``stores`` is left alone (its job may live there); an older key
    that names none is an orphan only if no store of ``stores`` has its job. A session's key is no job's and is
    kept: the environments its VMs stored are trusted by it."""
    by_url = {s.url: s for s in stores}
    now = time.time() if now is None else now
    found = []
    for entry in keyring.entries():
        age = now - entry.created
        if age <= grace_s:
            continue
        if entry.store and entry.store not in by_url:
            continue
        if job_id_time(entry.job_id) is None:
            continue  # not a job id: a session's secret, which signs the environments its VMs stored: no job of its own
        candidates = [by_url[entry.store]] if entry.store else stores
        if any(s.exists(f"{jobs_prefix()}{entry.job_id}/spec.json") for s in candidates):
            continue
        where = entry.store or " or ".join(s.url for s in stores)
        found.append(Leftover("key", entry.job_id, 0, age, f"no job {entry.job_id} in {where}", job_id=entry.job_id))
    return found


def remove(store: Store | None, keyring: KeyRing, items: list[Leftover]) -> None:
    """Delete what :func:`sweep` (with ``store``) or :func:`orphan_keys` (``store`` None) found."""
    for item in items:
        if store is not None:
            for key in item.keys:
                store.delete(key)
        if item.job_id:
            keyring.delete(item.job_id)


# -- the kinds -------------------------------------------------------------------------------------


def _aged(store: Store, keys: Iterable[str], now: float) -> Iterator[tuple[str, int, float]]:
    """``(key, size, age)`` of each key still there."""
    for key in keys:
        try:
            yield key, store.size(key), now - store.updated(key)
        except NotFound:
            continue  # removed meanwhile


def _temporaries(store: Store, now: float, grace_s: float) -> list[Leftover]:
    return [
        Leftover("temporary", key, size, age, "a write that never finished", keys=[key])
        for key, size, age in _aged(store, store.temporaries(), now)
        if age > grace_s
    ]


def _probes(store: Store, now: float, grace_s: float) -> list[Leftover]:
    """Probes of the Store's clock (:meth:`Store.now`) whose writer died before it removed them."""
    return [
        Leftover("clock probe", key, size, age, "left by a process that died reading the Store's clock", keys=[key])
        for key, size, age in _aged(store, store.list(CLOCK_PREFIX), now)
        if age > grace_s
    ]


def _specless(store: Store, now: float, grace_s: float) -> list[Leftover]:
    """Job folders without ``spec.json`` whose newest object is older than ``grace_s``."""
    found = []
    for name in store.list_dirs(jobs_prefix()):
        prefix = f"{jobs_prefix()}{name}/"
        if store.exists(prefix + "spec.json"):
            continue
        objects = list(_aged(store, store.list(prefix), now))
        if objects and min(age for _, _, age in objects) > grace_s:
            found.append(
                Leftover(
                    "job folder",
                    prefix,
                    sum(size for _, size, _ in objects),
                    min(age for _, _, age in objects),
                    "no spec.json: a submission that never finished",
                    keys=[key for key, _, _ in objects],
                    job_id=name,
                )
            )
    return found


def _blobs(store: Store, now: float, grace_s: float, gone: set[str]) -> list[Leftover]:
    """Blobs that no job (but those in ``gone``) names, older than ``grace_s``."""
    blobs = store.list(BLOBS_PREFIX)
    if not blobs:
        return []
    named, read = _references(store, gone, set())
    named |= _references(store, gone, read)[0]  # job folders that appeared meanwhile
    unnamed = [key for key in blobs if key[len(BLOBS_PREFIX) :] not in named]
    return [
        Leftover("blob", key, size, age, "no job refers to it", keys=[key])
        for key, size, age in _aged(store, unnamed, now)
        if age > grace_s
    ]


def _references(store: Store, gone: set[str], read: set[str]) -> tuple[set[str], set[str]]:
    """Blob addresses named by the JSON objects of job folders not in ``gone`` nor ``read``; and the folders."""
    named: set[str] = set()
    folders = set(store.list_dirs(jobs_prefix())) - gone - read
    for name in folders:
        for key in store.list(f"{jobs_prefix()}{name}/"):
            if key.endswith(".json"):
                try:
                    named.update(_addresses(json.loads(store.get(key))))
                except (NotFound, ValueError):
                    continue
    return named, read | folders


def _addresses(value: Any) -> Iterator[str]:
    """Blob addresses in a JSON value: ``blobs/<address>`` keys and bare addresses, at any depth."""
    if isinstance(value, str):
        address = value[len(BLOBS_PREFIX) :] if value.startswith(BLOBS_PREFIX) else value
        if _ADDRESS.match(address):
            yield address
    elif isinstance(value, dict):
        for item in value.values():
            yield from _addresses(item)
    elif isinstance(value, list):
        for item in value:
            yield from _addresses(item)


# -- machines beside the jobs ----------------------------------------------------------------------


def idle_watchers(machines: Machines, store: Store) -> list[str]:
    """Names of the watcher machines of ``store`` (:meth:`Machines.watchers_of`; on Compute Engine, see
    :mod:`nbburst.machines.gce.watcher`) while ``store`` has no unfinished job: nothing is left for them to
    relaunch. Watchers of other Stores are not judged here; a backend without watchers has none."""
    mine = machines.watchers_of(store.url)
    if not mine:
        return []
    for name in store.list_dirs(jobs_prefix()):
        layout = JobLayout(name)
        if store.exists(layout.spec) and not store.exists(layout.terminal):
            return []
    return mine
