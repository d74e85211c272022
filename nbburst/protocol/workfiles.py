"""Files a cell wrote in its working folder, as the agent stores them and the client fetches them.

A plain cell that writes ``model.h5`` or ``results/`` leaves them next to the
notebook; on a burst machine they would die with it. So the agent keeps the
files the cell created or changed in the job's folder in the Store::

    files/manifest.json      the list: path -> size, sha256, mtime (a sealed record, written last),
                             and the files sent with the cell that the cell deleted (their content's address)
    files/tree/<path>        each file, sealed and streamed (its version: the attempt that wrote it)

The manifest is written after every file it names, so a reader that finds it
finds them all. Paths are relative, with ``/``; one that could leave the
folder it is fetched into is refused on both sides.

The files a cell reads go the other way (``--files``, and the paths the cell names): each lands on
the machine where the cell looks for it, relative to its working folder, ``../data/x.csv`` too, as
teaching material lays out notebooks/ beside data/. For those the cell's working folder sits as
many folders deep in the job's folder as the highest such path climbs (one at least), under the names the
notebook's own folders have (:func:`workdir_tail`), so ``..`` stays inside the job's folder.
The working folder's subfolders are made there too, empty (:func:`subfolders`): ``to_csv("out/a.csv")``
needs ``out/`` as much as ``read_csv("data/a.csv")`` needs the file.
"""

from __future__ import annotations

import itertools
import json
import os
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .job import JobLayout

MANIFEST = "files/manifest.json"
#: How many folders above the notebook's a file the cell reads may be and still land at its place.
UP_LIMIT = 3
TREE = "files/tree/"
#: How many of the working folder's subfolders are made on the machine, the shallowest first.
FOLDER_LIMIT = 1000
#: Subfolders that are no place for a cell's results: version control, environments, caches.
_NOT_RESULTS = frozenset({"__pycache__", "node_modules", "site-packages", "venv", "env"})


def manifest_key(layout: JobLayout) -> str:
    return layout.key(MANIFEST)


def file_key(layout: JobLayout, rel: str) -> str:
    return layout.key(TREE + urllib.parse.quote(check_rel(rel), safe="/-_.~"))


def check_rel(rel: str) -> str:
    """``rel`` if it is a relative path that stays inside its folder; ValueError otherwise."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or "\\" in rel or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"not a path inside the working folder: {rel!r}")
    return rel


def levels_up(rel: str) -> int:
    """How many folders a normalised relative path climbs before it goes down (``../../a/b``: 2)."""
    parts = rel.split("/")
    return next((i for i, part in enumerate(parts) if part != ".."), len(parts))


def workdir_tail(cwd: Path, files: Iterable[str]) -> list[str]:
    """The last folders of the notebook's working folder ``cwd`` that the files' ``..`` climb through: the
    names the cell's working folder and its parents get on the machine; its own name at least, which a cell
    may read (``Path.cwd().name == "notebooks"``, before a ``%cd ..``)."""
    depth = max((levels_up(rel) for rel in files), default=0) or 1
    names = list(cwd.parts[1:])[-depth:]
    return [f"up{i}" for i in range(depth - len(names), 0, -1)] + names  # above the root: any names


def check_tail(tail: list[str]) -> list[str]:
    """``tail`` if every entry is a plain folder name; ValueError otherwise."""
    for name in tail:
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            raise ValueError(f"not a folder name: {name!r}")
    return tail


#: The last listing of each working folder: (the mtime of each folder it read, the folders found).
_listed: dict[tuple[str, int], tuple[dict[str, int], list[str]]] = {}
#: A folder changed this recently may change again within its mtime's granularity unseen: listed again.
_RACY_NS = 2_000_000_000


def subfolders(cwd: Path, limit: int = FOLDER_LIMIT) -> list[str]:
    """The folders under ``cwd`` (relative, with ``/``), breadth first, at most ``limit``: not hidden ones
    (``.git``, ``.ipynb_checkpoints``), nor environments and caches (a folder with ``pyvenv.cfg``,
    ``__pycache__``, ``node_modules``), nor what lies below them; links are not followed.

    Every cell's submission asks, and reading a big tree each time costs more than the cell: the last listing
    is given again while no folder it read has changed (a folder's mtime moves when an entry is made, removed
    or renamed in it), unless one changed too recently for its mtime to show a second change."""
    key = (os.fspath(cwd), limit)
    cached = _listed.get(key)
    if cached is not None and _stamps(cwd, cached[0]) == cached[0]:
        return list(cached[1])
    began = time.time_ns()
    found, read = _list_subfolders(cwd, limit)
    stamps = _stamps(cwd, read)
    if max(stamps.values(), default=0) < began - _RACY_NS:
        _listed[key] = (stamps, found)
    return list(found)


def _stamps(cwd: Path, folders: Iterable[str]) -> dict[str, int]:
    stamps = {}
    for rel in folders:
        try:
            stamps[rel] = os.stat(cwd / rel if rel else cwd).st_mtime_ns
        except OSError:
            stamps[rel] = -1
    return stamps


def _list_subfolders(cwd: Path, limit: int) -> tuple[list[str], list[str]]:
    """:func:`subfolders`' listing, and the folders it read (their entries, or whether they are environments)."""
    found: list[str] = []
    pending = [""]
    scanned: set[str] = set()
    while pending and len(found) < limit:
        rel = pending.pop(0)
        scanned.add(rel)
        try:
            with os.scandir(cwd / rel if rel else cwd) as scan:
                entries = list(scan)
        except OSError:
            continue
        if rel and any(e.name == "pyvenv.cfg" for e in entries):  # an environment: neither it nor what it holds
            found.remove(rel)
            continue
        for name in sorted(e.name for e in entries if e.is_dir(follow_symlinks=False)):
            if not (name.startswith(".") or name in _NOT_RESULTS or "\\" in name):
                found.append(f"{rel}/{name}" if rel else name)
                pending.append(found[-1])
    # the ones the limit left unlisted may be environments too: looked at one by one, up to the limit
    kept = (rel for rel in found if rel in scanned or not (cwd / rel / "pyvenv.cfg").exists())
    return list(itertools.islice(kept, limit)), [*scanned, *found]


@dataclass
class Entry:
    """One file the cell wrote."""

    size: int
    sha256: str
    mtime: float


def encode(entries: dict[str, Entry], attempt: int, deleted: dict[str, str] | None = None) -> bytes:
    """The manifest; ``deleted``: the files sent with the cell that it deleted, each with the address of the
    content sent (only a file that still holds it is deleted on the other side)."""
    files = {rel: vars(e) for rel, e in sorted(entries.items())}
    total = sum(e.size for e in entries.values())
    return json.dumps(
        {"attempt": attempt, "files": files, "total": total, "deleted": dict(sorted((deleted or {}).items()))}
    ).encode()


def decode(raw: bytes) -> dict[str, Entry]:
    data: dict[str, Any] = json.loads(raw)
    return {
        check_rel(rel): Entry(int(e["size"]), str(e["sha256"]), float(e["mtime"])) for rel, e in data["files"].items()
    }


def decode_deleted(raw: bytes) -> dict[str, str]:
    """The files sent with the cell that the cell deleted, with the address of the content sent."""
    return {check_rel(rel): str(address) for rel, address in json.loads(raw).get("deleted", {}).items()}
