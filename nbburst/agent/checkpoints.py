"""Mirror a job's checkpoint folder on the machine to ``checkpoints/`` in the Store, and back.

Local folder (``<workdir>/.nbburst``, see :func:`local_root`) and Store keys::

    state/manifest.json        checkpoints/manifest.json        nbburst.checkpoint save/load/range
    state/<name>/<seq>.pkl     checkpoints/state/<name>/<seq>.pkl   (signed pickles)
    folder/<path>              checkpoints/files/<path>         nbburst.checkpoint.folder() (signed)
    tasks/<key>.pkl            checkpoints/tasks/<attempt>-<n>.pkl  joblib task results, batched (signed)

The agent calls :func:`restore` before it starts the runner: the local folder
is rebuilt from the Store (the Store is the truth: a restarted machine's disk
may hold work that never reached it). In the runner a :class:`Syncer` thread
uploads what changed every ``SYNC_SECONDS``; ``flush()`` uploads everything
now (``nbburst.checkpoint.sync()`` and the preemption notice call it).

Upload order keeps the Store consistent at every instant: object files go up
before the manifest that names them, and a file is deleted from the Store only
after a manifest that no longer names it is up. Every object is signed with the
job's key; :func:`restore` verifies each one before it writes it locally.
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

from ..checkpoint import quote, write_atomic
from ..protocol import signing
from ..protocol.job import JobLayout
from ..store import AlreadyExists, NotFound, Store

SYNC_SECONDS = 1.0
TASK_BATCH_MAX = 512  # task results per uploaded batch


def local_root(workdir: str | os.PathLike[str]) -> Path:
    return Path(workdir) / ".nbburst"


class Keys:
    def __init__(self, layout: JobLayout):
        self.prefix = layout.checkpoints  # jobs/<id>/checkpoints/
        self.manifest = self.prefix + "manifest.json"
        self.state = self.prefix + "state/"
        self.files = self.prefix + "files/"
        self.tasks = self.prefix + "tasks/"

    def state_object(self, rel: str) -> str:  # rel = "<quoted name>/<seq>.pkl"
        return self.state + rel

    def file(self, rel: str) -> str:
        return self.files + rel


# -- signing of files, streamed -------------------------------------------------------------------


def _download_verified(store: Store, key: bytes, obj: str, dest: Path, what: str) -> None:
    """Fetch a signed file, check its HMAC, and put its payload at ``dest`` (atomically)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".tmp-dl-{dest.name}")
    store.get_file(obj, tmp)
    try:
        signing.verify_file(key, tmp, dest, what)
    finally:
        tmp.unlink(missing_ok=True)


def _objects_of(manifest: dict[str, Any]) -> set[str]:
    """The state objects (``<quoted name>/<seq>.pkl``) that the manifest's commits refer to."""
    return {f"{quote(name)}/{seq:08d}.pkl" for c in manifest["commits"] for name, seq in c["objects"].items()}


# -- restore (agent, before the runner starts) ----------------------------------------------------


def restore(store: Store, layout: JobLayout, key: bytes, root: Path) -> dict[str, int]:
    """Rebuild ``root`` from the Store; returns counts of what was restored."""
    keys = Keys(layout)
    if root.exists():
        shutil.rmtree(root)
    (root / "state").mkdir(parents=True)
    (root / "folder").mkdir()
    (root / "tasks").mkdir()
    counts = {"objects": 0, "files": 0, "tasks": 0, "loops": 0}
    listed = store.list(keys.prefix)
    if not listed:
        return counts
    # state: the manifest, then the objects it names (a signed pickle is written as is: the runner verifies)
    try:
        manifest_raw = signing.verify(key, store.get(keys.manifest), "checkpoint manifest")
    except NotFound:
        manifest_raw = None
    if manifest_raw is not None:
        manifest = json.loads(manifest_raw)
        wanted = _objects_of(manifest)
        for rel in sorted(wanted):
            raw = store.get(keys.state_object(rel))
            signing.verify(key, raw, f"checkpoint {rel}")
            write_atomic(root / "state" / rel, raw, durable=False)
            counts["objects"] += 1
        write_atomic(root / "state" / "manifest.json", manifest_raw, durable=False)
        head = manifest["commits"][-1] if manifest["commits"] else {"loops": {}}
        counts["loops"] = len(head["loops"])
    for obj in listed:
        if obj.startswith(keys.files):
            rel = obj[len(keys.files) :]
            _download_verified(store, key, obj, root / "folder" / rel, f"checkpoint file {rel}")
            counts["files"] += 1
        elif obj.startswith(keys.tasks):
            batch = pickle.loads(signing.verify(key, store.get(obj), f"task results {obj}"))
            for task_key, data in batch.items():
                write_atomic(root / "tasks" / f"{task_key}.pkl", data, durable=False)
            counts["tasks"] += len(batch)
    return counts


# -- sync (runner) --------------------------------------------------------------------------------


class Syncer:
    """Uploads the local checkpoint folder's changes to the Store, in a thread of its own."""

    def __init__(self, store: Store, layout: JobLayout, key: bytes, root: Path, attempt: int):
        self.store, self.key, self.root, self.attempt = store, key, root, attempt
        self.keys = Keys(layout)
        self.lock = threading.Lock()  # one upload pass at a time
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._errors: set[str] = set()
        # What the Store holds, as far as we know: everything restored is there already.
        self.state_up: set[str] = {rel for rel in _walk(root / "state") if rel.endswith(".pkl")}
        self.manifest_up: bytes | None = _read_or_none(root / "state" / "manifest.json")
        self.files_up: dict[str, tuple[int, int]] = {
            rel: _stat(root / "folder" / rel) for rel in _walk(root / "folder")
        }
        self.files_seen: dict[str, tuple[int, int]] = dict(self.files_up)
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
            for step in (self._sync_tasks, self._sync_state, self._sync_files):
                try:
                    step(final)
                except Exception as exc:  # a flaky Store: try again next pass
                    message = f"{type(exc).__name__}: {exc}"
                    if message not in self._errors:
                        self._errors.add(message)
                        print(f"nbburst: checkpoint upload failed ({message}); retrying", file=sys.stderr)

    def _sync_state(self, final: bool) -> None:
        state = self.root / "state"
        raw = _read_or_none(state / "manifest.json")
        if raw is None or raw == self.manifest_up:
            return
        manifest = json.loads(raw)
        wanted = _objects_of(manifest)
        for rel in sorted(wanted - self.state_up):
            self.store.put_file(self.keys.state_object(rel), state / rel)  # already signed by the API
            self.state_up.add(rel)
        self.store.put(self.keys.manifest, signing.sign(self.key, raw))
        self.manifest_up = raw
        for rel in sorted(self.state_up - wanted):
            self.store.delete(self.keys.state_object(rel))
            self.state_up.discard(rel)

    def _sync_files(self, final: bool) -> None:
        folder = self.root / "folder"
        now = {rel: _stat(folder / rel) for rel in _walk(folder)}
        for rel, st in sorted(now.items()):
            if self.files_up.get(rel) == st:
                continue
            # a file still being written changes between passes: wait until it holds still
            if not final and self.files_seen.get(rel) != st:
                continue
            try:
                self.store.put_chunks(self.keys.file(rel), signing.sign_file(self.key, folder / rel))
            except FileNotFoundError:
                continue
            self.files_up[rel] = st
        for rel in sorted(set(self.files_up) - set(now)):
            self.store.delete(self.keys.file(rel))
            del self.files_up[rel]
        self.files_seen = now

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
                body = signing.sign(self.key, pickle.dumps(batch, protocol=5))
                while True:
                    obj = f"{self.keys.tasks}{self.attempt:04d}-{self.batch_seq:06d}.pkl"
                    self.batch_seq += 1
                    try:
                        self.store.create(obj, body)
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
    return ", ".join(parts) if parts else "nothing"


def start_in_runner(store: Store, layout: JobLayout, key: bytes, channel: Any, control_fd: int | None) -> Syncer | None:
    """In the runner, before the cell: checkpoints go to the Store, joblib tasks resume, notices are heard."""
    from .. import checkpoint
    from ..protocol.job import ENV_ATTEMPT
    from . import preemption, resume

    where = os.environ.get(checkpoint.ENV_DIR)
    if not where:
        return None
    root = Path(where)
    syncer = Syncer(store, layout, key, root, int(os.environ.get(ENV_ATTEMPT) or 0)).start()
    checkpoint._activate(root, key, on_change=syncer.kick, on_sync=syncer.flush)
    if os.environ.get("NBBURST_RESUME_TASKS", "1") != "0":  # 0: joblib tasks are not cached (benchmarks)
        resume.install(root / "tasks")
    if control_fd is not None:
        preemption.listen(control_fd, syncer, channel)
    return syncer
