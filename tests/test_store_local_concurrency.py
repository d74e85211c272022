"""The local Store shared by several processes, as when two notebooks (or a notebook and its background
supervisor) use one Store: puts, listings and deletes in the same folders at once.

``delete`` drops folders it leaves empty; a writer that made such a folder a moment before and is about
to put its temporary file in it must still succeed. Every process checks each of its own operations and
reports what failed; the parent then checks that every object a process kept is there, whole.
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from nbburst.store.base import AlreadyExists
from nbburst.store.local import LocalStore

pytestmark = pytest.mark.timeout(180)

FOLDERS = ("jobs/a/status", "jobs/a/logs/0", "jobs/b/lease", "clock")
PROCESSES = 4
SECONDS = 3.0


def hammer(root: str, me: int, seconds: float, results: multiprocessing.Queue) -> None:
    """Put, read back, list and delete in the shared folders for ``seconds``; report failures and kept keys."""
    store = LocalStore(root)
    failures: list[str] = []
    kept: dict[str, bytes] = {}
    i = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        folder = FOLDERS[i % len(FOLDERS)]
        key, data = f"{folder}/p{me}-{i}", f"{me}:{i}".encode() * 50
        try:
            if i % 4 == 1:  # a file the Store copies, or adopts by a second name
                source = Path(root).parent / f"source-{me}-{i}"
                source.write_bytes(data)
                store.put_file(key, source, adopt=i % 8 == 1)
            elif i % 4 == 2:
                store.put(key, data)
            else:
                store.create(key, data)
            if store.get(key) != data:
                failures.append(f"{key}: read back other bytes")
            store.list(folder + "/")
            if i % 10 == 0:
                kept[key] = data  # stays: the others' deletes must never take it
            else:
                store.delete(key)  # usually leaves the folder empty, so delete removes it
        except AlreadyExists:
            failures.append(f"{key}: create found an object nobody else writes")
        except Exception as exc:  # every other failure is what this test is about
            failures.append(f"{key}: {type(exc).__name__}: {exc}")
        i += 1
    results.put((me, i, failures, kept))


def test_processes_putting_listing_and_deleting_in_the_same_folders_lose_nothing(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    workers = [
        ctx.Process(target=hammer, args=(str(tmp_path / "store"), me, SECONDS, results)) for me in range(PROCESSES)
    ]
    root = tmp_path / "store"
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=150) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    store = LocalStore(root)
    operations = sum(count for _, count, _, _ in reports)
    failures = [failure for *_, failed, _ in reports for failure in failed]
    assert not failures, f"{len(failures)} of {operations} rounds failed, e.g. {failures[:5]}"
    for _, _, _, kept in reports:
        for key, data in kept.items():
            assert store.get(key) == data, key
    assert operations > PROCESSES * 20  # they really ran side by side for a while
    assert not store.temporaries()
