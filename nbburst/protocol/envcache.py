"""Built environments, stored once and unpacked by later machines: ``ROOT/envs/``.

The first machine that installs a job's packages on a stock image packs its
environment (the venv, without nbburst and the job's local wheels) and the
agent stores it, create-only, as ``envs/<hash>.tar.gz`` with a record
``envs/<hash>.json``: Python minor version, platform, the packages it holds,
the archive's SHA-256 and size, and the job that built it, signed with that
job's key (:func:`record`). The hash is :func:`nbburst.protocol.env.environment_hash`
of what the job asked for.

Before a launch the client picks the stored environment to start from
(:func:`choose`): the one of the same Python and platform that holds most of
the wanted packages at the wanted versions and none at another version, whose
record verifies under the key of the job that built it (from the client's key
ring: an environment built by someone else's job is never trusted). The job's
signed manifest then names it with its SHA-256, which the machine checks
before unpacking; it installs only what is missing, and stores the result
under the new hash when it installed anything.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..store import NotFound, Store
from .dist import sign_manifest, verify_manifest

PREFIX = "envs/"
#: Records read when choosing (the newest environments of a busy bucket are enough).
MAX_RECORDS = 64

_records: dict[tuple[str, str], dict[str, Any]] = {}  # (store URL, key) -> the record as read
_lock = threading.Lock()


def archive_key(env_hash: str) -> str:
    return f"{PREFIX}{env_hash}.tar.gz"


def record_key(env_hash: str) -> str:
    return f"{PREFIX}{env_hash}.json"


def record(
    key: bytes, job_id: str, pending: dict[str, Any], packages: dict[str, str], sha256: str, size: int
) -> dict[str, Any]:
    """The signed record of an environment the machine of ``job_id`` built (``pending``: its hash, Python and
    platform, as the bootstrap left them)."""
    return sign_manifest(
        key,
        {
            "hash": pending["hash"],
            "python": pending["python"],
            "platform": pending["platform"],
            "archive": archive_key(pending["hash"]),
            "sha256": sha256,
            "size": size,
            "packages": dict(sorted(packages.items())),
            "job": job_id,
            "built": time.time(),
        },
    )


def _read(store: Store, key: str, key_of: Callable[[str], bytes | None]) -> dict[str, Any] | None:
    """The record at ``key`` when it verifies under its job's key (fetched once per process: records never
    change; checked every time, with whatever keys ``key_of`` has)."""
    cache_key = (store.url, key)
    with _lock:
        found = _records.get(cache_key)
    if found is None:
        try:
            found = json.loads(store.get(key))
        except (NotFound, ValueError):
            return None
        with _lock:
            _records[cache_key] = found
    job_key = key_of(str(found.get("job", ""))) if isinstance(found, dict) else None
    return found if job_key is not None and verify_manifest(job_key, found) else None


def coverage(found: dict[str, Any], wanted: dict[str, str]) -> int | None:
    """How many wanted packages the environment holds at the wanted version; None when it holds one at another."""
    have = found.get("packages") or {}
    if any(name in have and have[name] != version for name, version in wanted.items()):
        return None
    return sum(1 for name in wanted if name in have)


def choose(
    store: Store,
    env_hash: str,
    python: str,
    platform: str,
    wanted: dict[str, str],
    key_of: Callable[[str], bytes | None],
) -> dict[str, Any] | None:
    """The stored environment a machine should start from (the manifest's ``base``), or None.

    ``wanted``: name -> version of the packages the job installs from indexes; ``key_of(job_id)``: that job's
    key, or None when this client does not have it."""
    if not platform or not wanted:
        return None
    exact = _read(store, record_key(env_hash), key_of) if store.exists(record_key(env_hash)) else None
    candidates = [exact] if exact else []
    if not candidates:
        keys = [k for k in store.list(PREFIX) if k.endswith(".json")][-MAX_RECORDS:]
        with ThreadPoolExecutor(max_workers=8) as pool:
            candidates = [r for r in pool.map(lambda k: _read(store, k, key_of), keys) if r]
    best, best_score = None, 0
    for found in candidates:
        if found.get("python") != python or found.get("platform") != platform:
            continue
        score = coverage(found, wanted)
        if score and (score > best_score or (score == best_score and found["size"] < best["size"])):
            best, best_score = found, score
    if best is None:
        return None
    return {
        "hash": best["hash"],
        "archive": best["archive"],
        "sha256": best["sha256"],
        "size": best["size"],
        "complete": best_score == len(wanted),
    }
