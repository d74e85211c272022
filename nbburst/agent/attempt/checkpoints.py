"""Mirror a job's checkpoint folder on the machine to ``checkpoints/`` in the Store, and back.

Local folder (``<workdir>/.nbburst``, see :func:`local_root`) and Store keys::

    state/manifest.json        checkpoints/manifest/<n>.json         the commits, and each file's version
    state/<name>/<seq>.pkl     checkpoints/state/<name>/<seq>.pkl    nbburst.checkpoint save/load/range
    folder/<path>              checkpoints/files/<path>             nbburst.checkpoint.folder()
    tasks/<key>.pkl            checkpoints/tasks/<attempt>-<n>.pkl   joblib task results, batched
    mirror.json                -                                    what the Store holds: manifest number, versions

The agent calls :func:`restore` before it starts the runner: the local folder
is rebuilt from the Store (the Store is the truth: a restarted machine's disk
may hold work that never reached it). In the runner a :class:`Syncer` thread
uploads what changed every ``SYNC_SECONDS``; ``flush()`` uploads everything
now (``nbburst.checkpoint.sync()`` and the preemption notice call it).

Every Store object is sealed to its place under the job's key
(:mod:`nbburst.protocol.sealed`), and versions never overwrite each other: a
state object is named by its commit number, and each upload writes a new
manifest ``manifest/<n>.json`` (create-only), so the newest manifest that opens
is the newest state. A framework's file keeps its path; its seal carries the
number of the manifest it went up with, which that manifest lists, so an older
copy put back in its place is refused. A checkpoint copied over another (another
name, another version) does not open either: :func:`restore` then resumes from
the newest commit whose objects all open, and says what it refused. An object
that does not open at all (altered, or sealed with another job's key) stops the
restore: nothing of such a folder is trusted.

Upload order keeps the Store consistent at every instant: objects and files
go up before the manifest that names them, and an object or a file is deleted
from the Store only after a manifest that no longer names it is up.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ...checkpoint import quote, write_atomic
from ...protocol.folder import JobFolder
from ...protocol.job import JobLayout
from ...protocol.sealed import Misplaced
from ...store import AlreadyExists, NotFound, Store

SYNC_SECONDS = 1.0
TASK_BATCH_MAX = 512  # task results per uploaded batch
KEEP_MANIFESTS = 3  # manifests kept in the Store: a refused newest one falls back to an older one
MIRROR = "mirror.json"


def local_root(workdir: str | os.PathLike[str]) -> Path:
    return Path(workdir) / ".nbburst"


class Keys:
    def __init__(self, layout: JobLayout):
        self.prefix = layout.checkpoints  # jobs/<id>/checkpoints/
        self.manifests = self.prefix + "manifest/"
        self.state = self.prefix + "state/"
        self.files = self.prefix + "files/"
        self.tasks = self.prefix + "tasks/"

    def manifest(self, number: int) -> str:
        return f"{self.manifests}{number:08d}.json"

    def manifest_number(self, key: str) -> int | None:
        stem = key[len(self.manifests) :].removesuffix(".json")
        return int(stem) if key.startswith(self.manifests) and stem.isdigit() else None

    def state_object(self, rel: str) -> str:  # rel = "<quoted name>/<seq>.pkl"
        return self.state + rel

    def file(self, rel: str) -> str:
        return self.files + rel


def _objects_of(manifest: dict[str, Any]) -> set[str]:
    """The state objects (``<quoted name>/<seq>.pkl``) that the manifest's commits refer to."""
    return {rel for c in manifest["commits"] for rel in _commit_objects(c)}


def _commit_objects(commit: dict[str, Any]) -> set[str]:
    return {f"{quote(name)}/{seq:08d}.pkl" for name, seq in commit["objects"].items()}


# -- restore (agent, before the runner starts) ----------------------------------------------------


def restore(store: Store, layout: JobLayout, key: bytes, root: Path) -> dict[str, Any]:
    """Rebuild ``root`` from the Store; returns counts of what was restored (and ``refused``: what was not).

    Raises :class:`~nbburst.protocol.signing.SignatureError` for an object that is not the job's at all."""
    folder, keys = JobFolder(store, layout, key), Keys(layout)
    if root.exists():
        shutil.rmtree(root)
    for part in ("state", "folder", "tasks"):
        (root / part).mkdir(parents=True)
    counts: dict[str, Any] = {"objects": 0, "files": 0, "tasks": 0, "loops": 0}
    refused: list[str] = []
    listed = store.list(keys.prefix)
    numbers = sorted((n for k in listed if (n := keys.manifest_number(k)) is not None), reverse=True)
    versions: dict[str, int] = {}
    for number in numbers:
        found = _open_manifest(folder, keys, number, refused)
        if found is not None:
            state, objects, files = found
            for rel, data in objects.items():
                write_atomic(root / "state" / rel, data, durable=False)
            if state is not None:
                write_atomic(root / "state" / "manifest.json", json.dumps(state, indent=1).encode(), durable=False)
                counts["objects"], counts["loops"] = len(objects), len(state["commits"][-1]["loops"])
            versions = _restore_files(folder, keys, files, root / "folder", refused)
            counts["files"] = len(versions)
            break
    for obj in listed:
        if obj.startswith(keys.tasks):
            try:
                batch = pickle.loads(folder.get_object(obj))
            except Misplaced as exc:
                refused.append(str(exc))
                continue
            for task_key, data in batch.items():
                write_atomic(root / "tasks" / f"{task_key}.pkl", data, durable=False)
            counts["tasks"] += len(batch)
    mirror = {"manifest": numbers[0] if numbers else 0, "files": versions}
    write_atomic(root / MIRROR, json.dumps(mirror).encode(), durable=False)
    if refused:
        counts["refused"] = refused
    return counts


def _open_manifest(
    folder: JobFolder, keys: Keys, number: int, refused: list[str]
) -> tuple[dict[str, Any] | None, dict[str, bytes], dict[str, int]] | None:
    """``(state manifest, its objects, files with their versions)`` of manifest ``number``, reduced to its
    commits whose objects all open; None when it is refused or none of its commits can be used."""
    try:
        manifest = json.loads(folder.get_record(keys.manifest(number)))
    except Misplaced as exc:
        refused.append(str(exc))
        return None
    except NotFound:
        return None  # deleted meanwhile
    state = manifest.get("state")
    files = {str(rel): int(v) for rel, v in (manifest.get("files") or {}).items()}
    if not state or not state.get("commits"):
        return None, {}, files  # nothing committed: the files alone
    opened: dict[str, bytes] = {}
    for rel in sorted(_objects_of(state)):
        try:
            opened[rel] = folder.get_object(keys.state_object(rel))
        except Misplaced as exc:
            refused.append(str(exc))
        except NotFound:
            pass  # an old commit's object, collected since: that commit cannot be used
    usable = [c for c in state["commits"] if _commit_objects(c) <= set(opened)]
    if not usable:
        refused.append(f"checkpoint manifest {number} has no commit whose objects all open; trying an older one")
        return None
    if usable[-1] is not state["commits"][-1]:
        refused.append(f"resuming from checkpoint commit {usable[-1]['seq']} instead of {state['commits'][-1]['seq']}")
    kept = {rel: opened[rel] for rel in _objects_of({"commits": usable})}
    return {**state, "commits": usable}, kept, files


def _restore_files(
    folder: JobFolder, keys: Keys, files: dict[str, int], dest: Path, refused: list[str]
) -> dict[str, int]:
    """Download the manifest's files, each at its version or newer; returns the versions restored."""
    restored = {}
    for rel, version in sorted(files.items()):
        try:
            got = folder.get_file(keys.file(rel), dest / rel)
        except Misplaced as exc:
            refused.append(str(exc))
            continue
        except NotFound:
            refused.append(f"checkpoint file {rel} is missing from the Store")
            continue
        if got < version:
            (dest / rel).unlink()
            refused.append(
                f"checkpoint file {rel} is version {got}, older than version {version} that the checkpoint "
                "manifest names: an older copy put back in the Store; refusing it"
            )
            continue
        restored[rel] = got
    return restored


# -- sync (runner) --------------------------------------------------------------------------------


class Syncer:
    """Uploads the local checkpoint folder's changes to the Store, in a thread of its own."""

    def __init__(self, store: Store, layout: JobLayout, key: bytes, root: Path, attempt: int):
        self.folder, self.root, self.attempt = JobFolder(store, layout, key), root, attempt
        self.keys = Keys(layout)
        self.lock = threading.Lock()  # one upload pass at a time
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._errors: set[str] = set()
        # What the Store holds, as far as we know: everything restored is there already.
        mirror = json.loads(_read_or_none(root / MIRROR) or b'{"manifest": 0, "files": {}}')
        self.number = mirror["manifest"] + 1  # of the next manifest
        self.versions: dict[str, int] = dict(mirror["files"])  # file -> the number it went up with
        self.unnamed = False  # uploads that no manifest names yet
        self.state_up: set[str] = {rel for rel in _walk(root / "state") if rel.endswith(".pkl")}
        self.manifest_up: bytes | None = _read_or_none(root / "state" / "manifest.json")
        self.files_up: dict[str, tuple[int, int]] = {
            rel: _stat(root / "folder" / rel) for rel in _walk(root / "folder")
        }
        self.files_seen: dict[str, tuple[int, int]] = dict(self.files_up)
        self.files_gone: set[str] = set()  # deleted here, still in the Store
        self.tasks_up: set[str] = {name for name in _names(root / "tasks") if name.endswith(".pkl")}
        self.batch_seq = 0

    # -- thread -------------------------------------------------------------------------------
    def start(self) -> Syncer:
        self._thread = threading.Thread(target=self._run, name="nbburst-checkpoint-sync", daemon=True)
        self._thread.start()
        return self

    def kick(self) -> None:
        self.wake.set()

    def stop(self) -> None:
        self.stopped.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self.stopped.is_set():
            self.wake.wait(SYNC_SECONDS)
            self.wake.clear()
            if self.stopped.is_set():
                break
            # After a kick, let a burst of saves settle a moment: fewer, bigger uploads.
            time.sleep(0.05)
            self.sync(final=False)

    # -- passes --------------------------------------------------------------------------------
    def flush(self) -> None:
        """Upload everything now, files still being written included."""
        self.sync(final=True)

    def sync(self, final: bool) -> None:
        with self.lock:
            for step in (self._sync_tasks, self._sync_checkpoints):
                try:
                    step(final)
                except Exception as exc:  # a flaky Store: try again next pass
                    message = f"{type(exc).__name__}: {exc}"
                    if message not in self._errors:
                        self._errors.add(message)
                        print(f"nbburst: checkpoint upload failed ({message}); retrying", file=sys.stderr)

    def _sync_checkpoints(self, final: bool) -> None:
        """New state objects and changed files, then a new manifest naming them, then what it no longer names."""
        raw = _read_or_none(self.root / "state" / "manifest.json")
        state = json.loads(raw) if raw is not None else None
        wanted = _objects_of(state) if state is not None else set(self.state_up)
        for rel in sorted(wanted - self.state_up):
            self.folder.put_file(self.keys.state_object(rel), self.root / "state" / rel, 0)
            self.state_up.add(rel)
        self.unnamed |= self._upload_files(final) or raw != self.manifest_up
        if not self.unnamed:
            return
        self._write_manifest(state)
        self.unnamed, self.manifest_up = False, raw
        for rel in sorted(self.state_up - wanted):
            self.folder.store.delete(self.keys.state_object(rel))
            self.state_up.discard(rel)
        for rel in sorted(self.files_gone):
            self.folder.store.delete(self.keys.file(rel))
            self.files_gone.discard(rel)
        for key in self.folder.store.list(self.keys.manifests):
            number = self.keys.manifest_number(key)
            if number is not None and number < self.number - KEEP_MANIFESTS:  # ours only: never newer ones
                self.folder.store.delete(key)

    def _upload_files(self, final: bool) -> bool:
        """Upload the files that changed (sealed with the number of the next manifest); whether any changed."""
        folder = self.root / "folder"
        now = {rel: _stat(folder / rel) for rel in _walk(folder)}
        changed = False
        for rel, st in sorted(now.items()):
            if self.files_up.get(rel) == st:
                continue
            # a file still being written changes between passes: wait until it holds still
            if not final and self.files_seen.get(rel) != st:
                continue
            try:
                self.folder.put_file(self.keys.file(rel), folder / rel, self.number)
            except FileNotFoundError:
                continue
            self.files_up[rel], self.versions[rel], changed = st, self.number, True
            self.files_gone.discard(rel)
        for rel in sorted(set(self.files_up) - set(now)):
            del self.files_up[rel]
            self.versions.pop(rel, None)
            self.files_gone.add(rel)
            changed = True
        self.files_seen = now
        return changed

    def _write_manifest(self, state: dict[str, Any] | None) -> None:
        """The next manifest (create-only: a number already taken, by anyone, is skipped)."""
        while True:
            body = {"number": self.number, "state": state, "files": self.versions}
            try:
                self.folder.create_record(self.keys.manifest(self.number), json.dumps(body).encode())
                break
            except AlreadyExists:
                self.number += 1
        self.number += 1

    def _sync_tasks(self, final: bool) -> None:
        folder = self.root / "tasks"
        new = sorted(n for n in _names(folder) if n.endswith(".pkl") and n not in self.tasks_up)
        for i in range(0, len(new), TASK_BATCH_MAX):
            names = new[i : i + TASK_BATCH_MAX]
            batch = {}
            for name in names:
                data = _read_or_none(folder / name)
                if data is not None:
                    batch[name[:-4]] = data
            if batch:
                body = pickle.dumps(batch, protocol=5)
                while True:
                    obj = f"{self.keys.tasks}{self.attempt:04d}-{self.batch_seq:06d}.pkl"
                    self.batch_seq += 1
                    try:
                        self.folder.create_object(obj, body)
                        break
                    except AlreadyExists:
                        continue  # left by an earlier run of this attempt (a rebooted machine)
            self.tasks_up.update(names)


def _walk(folder: Path) -> list[str]:
    out = []
    for dirpath, _dirs, files in os.walk(folder):
        rel = os.path.relpath(dirpath, folder)
        for name in files:
            if name.startswith(".tmp-") or name in (".lock", ".seq"):
                continue
            out.append(name if rel == "." else f"{rel}/{name}".replace(os.sep, "/"))
    return sorted(out)


def _names(folder: Path) -> list[str]:
    try:
        return [n for n in os.listdir(folder) if not n.startswith(".")]
    except FileNotFoundError:
        return []


def _stat(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
        return st.st_size, st.st_mtime_ns
    except FileNotFoundError:
        return -1, -1


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def summary(counts: dict[str, Any]) -> str:
    parts = []
    if counts.get("loops"):
        parts.append(f"{counts['loops']} loop(s)")
    if counts.get("objects"):
        parts.append(f"{counts['objects']} checkpoint object(s)")
    if counts.get("files"):
        parts.append(f"{counts['files']} checkpoint file(s)")
    if counts.get("tasks"):
        parts.append(f"{counts['tasks']} finished parallel task(s)")
    text = ", ".join(parts) if parts else "nothing"
    return text + "".join(f"; refused: {why}" for why in counts.get("refused", []))


def start_in_runner(store: Store, layout: JobLayout, key: bytes, channel: Any, control_fd: int | None) -> Syncer | None:
    """In the runner, before the cell: checkpoints go to the Store, joblib tasks resume, notices are heard."""
    from ... import checkpoint
    from ...protocol.job import ENV_ATTEMPT, attempt_of
    from ..hooks import taskreuse
    from . import preemption

    where = os.environ.get(checkpoint.ENV_DIR)
    if not where:
        return None
    root = Path(where)
    syncer = Syncer(store, layout, key, root, attempt_of(os.environ.get(ENV_ATTEMPT) or "0")).start()
    checkpoint.activate(root, key, on_change=syncer.kick, on_sync=syncer.flush)
    if os.environ.get("NBBURST_RESUME_TASKS", "1") != "0":  # 0: joblib tasks are not cached (benchmarks)
        taskreuse.install(root / "tasks")
    if control_fd is not None:
        preemption.listen(control_fd, syncer, channel)
    return syncer
