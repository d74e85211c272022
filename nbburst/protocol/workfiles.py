"""Files a cell wrote in its working folder, as the agent stores them and the client fetches them.

A plain cell that writes ``model.h5`` or ``results/`` leaves them next to the
notebook; on a burst machine they would die with it. So the agent keeps the
files the cell created or changed in the job's folder in the Store::

    files/manifest.json      the list: path -> size, sha256, mtime (a sealed record, written last)
    files/tree/<path>        each file, sealed and streamed (its version: the attempt that wrote it)

The manifest is written after every file it names, so a reader that finds it
finds them all. Paths are relative, with ``/``; one that could leave the
folder it is fetched into is refused on both sides.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

from .job import JobLayout

MANIFEST = "files/manifest.json"
TREE = "files/tree/"


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


@dataclass
class Entry:
    """One file the cell wrote."""

    size: int
    sha256: str
    mtime: float


def encode(entries: dict[str, Entry], attempt: int) -> bytes:
    files = {rel: vars(e) for rel, e in sorted(entries.items())}
    return json.dumps({"attempt": attempt, "files": files, "total": sum(e.size for e in entries.values())}).encode()


def decode(raw: bytes) -> dict[str, Entry]:
    data: dict[str, Any] = json.loads(raw)
    return {
        check_rel(rel): Entry(int(e["size"]), str(e["sha256"]), float(e["mtime"])) for rel, e in data["files"].items()
    }
