"""Keep what the cell wrote in its working folder: new and changed files go to the job's folder in the Store.

Before the first runner starts on a machine, :func:`baseline` notes every file
of the working folder (size and modification time) in a file beside it, kept
across restarts of the same disk. When the attempt ends with the cell's own
verdict (a result, an exception, the time limit, the budget), :func:`keep`
uploads each file that is not in the baseline or changed since, then the
manifest (:mod:`nbburst.protocol.workfiles`). Files given with ``--files`` (and
those the cell names, sent the same way) count as changed only when their
content differs from what was sent; one the cell deleted (``!rm data.csv``) is
named in the manifest, so that the kernel's copy goes too.
nbburst's own folders (checkpoints, IPython's profile) and caches stay out.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ...protocol import payload, workfiles
from ...protocol.folder import JobFolder
from ...protocol.job import JobSpec
from ...store import Store

#: Folders of the working folder that are nbburst's or caches, never the cell's results.
SKIPPED = frozenset({".nbburst", ".ipython", "__pycache__", "dask-scratch-space"})
_READ = 8 << 20


def _walk(workdir: Path) -> dict[str, os.stat_result]:
    found = {}
    for dirpath, dirs, names in os.walk(workdir):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED)
        rel_dir = os.path.relpath(dirpath, workdir)
        for name in names:
            path = os.path.join(dirpath, name)
            if name.startswith(".tmp-") or os.path.islink(path):
                continue
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            rel = name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")
            found[rel] = st
    return found


def _baseline_path(workdir: Path, spec: JobSpec) -> Path:
    """Beside the job's folder, out of the cell's sight (its working folder may sit deeper in the job's folder,
    see ``JobSpec.workdir_tail``: the cell lists those folders too)."""
    top = workdir.parents[len(spec.workdir_tail) - 1] if spec.workdir_tail else workdir
    return top.parent / f".{top.name}.files-baseline.json"


def baseline(workdir: Path, spec: JobSpec) -> None:
    """Note what the working folder holds before the cell (once per disk: a restarted machine keeps it)."""
    path = _baseline_path(workdir, spec)
    if not path.exists():
        stats = {rel: [st.st_size, st.st_mtime_ns] for rel, st in _walk(workdir).items()}
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(stats))
        os.replace(tmp, path)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_READ):
            h.update(chunk)
    return h.hexdigest()


def _sent(store: Store, folder: JobFolder, spec: JobSpec) -> dict[str, str]:
    """``--files`` as sent: path -> content address (files.json is pinned by the signed spec)."""
    if not spec.files:
        return {}
    raw = store.get(folder.layout.files)
    return json.loads(raw) if payload.digest_bytes(raw) == spec.digests.get("files.json") else {}


def keep(folder: JobFolder, spec: JobSpec, workdir: Path, attempt: int) -> int:
    """Upload the files the cell created or changed, then their manifest (with the files sent that the cell
    deleted); returns how many were uploaded."""
    try:
        before = {rel: tuple(v) for rel, v in json.loads(_baseline_path(workdir, spec).read_text()).items()}
    except FileNotFoundError:
        before = {}
    sent = _sent(folder.store, folder, spec)
    entries: dict[str, workfiles.Entry] = {}
    for rel, st in sorted(_walk(workdir).items()):
        if before.get(rel) == (st.st_size, st.st_mtime_ns):
            continue
        path = workdir / rel
        if (rel in sent and payload.digest_bytes(path.read_bytes()) == sent[rel]) or not _inside(rel):
            continue  # an input sent with --files, as it was
        folder.put_file(workfiles.file_key(folder.layout, rel), path, attempt)
        entries[rel] = workfiles.Entry(st.st_size, _sha256(path), st.st_mtime)
    deleted = {rel: address for rel, address in sent.items() if _inside(rel) and not os.path.lexists(workdir / rel)}
    if entries or deleted:
        folder.put_record(workfiles.manifest_key(folder.layout), workfiles.encode(entries, attempt, deleted))
    return len(entries)


def _inside(rel: str) -> bool:
    try:
        workfiles.check_rel(rel)
    except ValueError:
        return False
    return True
