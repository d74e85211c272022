"""``nbburst.checkpoint``: state that survives preemption.

Inside a ``%%burst`` cell the checkpoints live on the machine and are mirrored
to the job's ``checkpoints/`` folder in the Store, from where the next attempt
restores them after a preemption. The same cell runs unchanged in a plain
kernel: checkpoints then stay in a local folder (``$NBBURST_CHECKPOINT_DIR``,
else ``.nbburst-checkpoints`` in the current directory), which also lets a
long loop survive a kernel restart.

::

    import nbburst
    model = nbburst.checkpoint.load("model", default=None) or SGDClassifier()
    for epoch in nbburst.checkpoint.range(20):      # skips finished epochs after a restart
        model.partial_fit(X, y, classes=classes)
        nbburst.checkpoint.save("model", model)     # committed with the epoch number

    nbburst.checkpoint.on_preempt(lambda: print("saving before the machine goes"))
    path = nbburst.checkpoint.folder()              # for torch.save, Keras ModelCheckpoint, ...

Consistency: a ``save`` inside a ``range`` iteration is staged and committed
together with that iteration's number when the iteration's body ends, in one
atomic manifest write. After a preemption the loop resumes at the first
iteration that was not committed, with exactly the state committed with the
iteration before it. A ``save`` outside any ``range`` loop commits at once.
A ``break`` leaves its iteration uncommitted (after a restart it runs again,
from the previous iteration's state).

Every object is written to a new file, then the manifest that names it is
replaced atomically, so a partial write is never loaded. The manifest keeps the
last ``KEEP`` commits; ``load(name, version=-2)`` reads an older one. Objects
are pickled with cloudpickle; on a burst machine they are signed with the
job's key and verified before they are unpickled.

This module stays importable without the agent: it only touches local files.
Copying to and from the Store is the agent's business (nbburst.agent.attempt.checkpoints).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["KEEP", "clear", "folder", "load", "names", "on_preempt", "preempting", "range", "save", "sync", "versions"]

#: How many commits (and so versions of each object) are kept.
KEEP = 3
ENV_DIR = "NBBURST_CHECKPOINT_DIR"
LOCAL_DIR = ".nbburst-checkpoints"
MANIFEST = "manifest.json"
_MISSING = object()
_brange = builtins.range


class CheckpointError(Exception):
    """A checkpoint cannot be written or read."""


# -- where checkpoints live ----------------------------------------------------------------------


class _Root:
    """A checkpoint folder on local disk: ``state/`` (objects + manifest) and ``folder/`` (free files)."""

    def __init__(self, path: Path, key: bytes | None):
        self.path = path
        self.key = key
        self.state = path / "state"
        self.files = path / "folder"
        self.manifest_path = self.state / MANIFEST
        self.lock = threading.RLock()

    # -- manifest ---------------------------------------------------------------------------
    def read_manifest(self) -> dict[str, Any]:
        try:
            return json.loads(self.manifest_path.read_text())
        except FileNotFoundError:
            return {"format": 1, "seq": 0, "commits": []}
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"the checkpoint manifest {self.manifest_path} cannot be read: {exc}") from None

    def head(self) -> dict[str, Any]:
        commits = self.read_manifest()["commits"]
        return commits[-1] if commits else {"seq": 0, "objects": {}, "loops": {}}

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Serialise manifest updates across threads and processes (joblib workers may save too)."""
        self.state.mkdir(parents=True, exist_ok=True)
        with self.lock:
            fd = os.open(self.state / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                try:
                    import fcntl

                    fcntl.flock(fd, fcntl.LOCK_EX)
                except ImportError:  # pragma: no cover - Windows: threads only
                    pass
                yield
            finally:
                os.close(fd)

    # -- objects ----------------------------------------------------------------------------
    def object_path(self, name: str, seq: int) -> Path:
        return self.state / quote(name) / f"{seq:08d}.pkl"

    def next_seq(self) -> int:
        """A number no object file or commit has used (unique across processes: taken under the lock)."""
        counter = self.state / ".seq"
        try:
            last = int(counter.read_text() or 0)
        except (FileNotFoundError, ValueError):
            last = 0
        last = max(last, self.read_manifest()["seq"]) + 1
        write_atomic(counter, str(last).encode(), durable=False)
        return last

    def encode(self, obj: Any) -> bytes:
        import cloudpickle

        try:
            data = cloudpickle.dumps(obj, protocol=5)
        except Exception as exc:
            raise CheckpointError(f"cannot checkpoint a {type(obj).__name__}: it cannot be pickled ({exc})") from None
        if self.key is not None:
            from .protocol.signing import sign

            return sign(self.key, data)
        return data

    def decode(self, raw: bytes, what: str) -> Any:
        import pickle

        from .protocol.signing import MAGIC, verify

        if self.key is not None:
            raw = verify(self.key, raw, what)
        elif raw.startswith(MAGIC):
            raise CheckpointError(f"{what} is signed with a job's key, which this kernel does not have")
        return pickle.loads(raw)

    def write_object(self, name: str, obj: Any) -> int:
        data = self.encode(obj)
        with self.locked():
            seq = self.next_seq()
        write_atomic(self.object_path(name, seq), data, durable=self.key is None)
        return seq

    def commit(self, objects: dict[str, int], loops: dict[str, int], drop_loops: tuple[str, ...] = ()) -> int:
        """Write a new head: the previous one plus ``objects`` and ``loops``, in one atomic replace."""
        with self.locked():
            manifest = self.read_manifest()
            head = manifest["commits"][-1] if manifest["commits"] else {"objects": {}, "loops": {}}
            new_loops = (
                {k: v for k, v in head["loops"].items() if not k.startswith(drop_loops)}
                if drop_loops
                else dict(head["loops"])
            )
            new_loops.update(loops)
            seq = self.next_seq()
            commit = {
                "seq": seq,
                "at": round(time.time(), 3),
                "objects": {**head["objects"], **objects},
                "loops": new_loops,
            }
            commits = (manifest["commits"] + [commit])[-KEEP:]
            write_atomic(
                self.manifest_path,
                json.dumps({"format": 1, "seq": seq, "commits": commits}, indent=1).encode(),
                durable=self.key is None,
            )
            self._collect(commits)
        _changed()
        return seq

    def _collect(self, commits: list[dict[str, Any]]) -> None:
        """Delete object files no kept commit refers to (and staged ones older than every commit)."""
        keep = {(name, seq) for c in commits for name, seq in c["objects"].items()}
        oldest = commits[0]["seq"] if commits else 0
        for entry in _scandir(self.state):
            if not entry.is_dir():
                continue
            name = unquote(entry.name)
            for f in _scandir(Path(entry.path)):
                if not f.name.endswith(".pkl"):
                    continue
                try:
                    seq = int(f.name[:-4])
                except ValueError:
                    continue
                # newer unreferenced files may be staged by another process's open iteration
                if (name, seq) not in keep and seq < oldest and (name, seq) not in _staged_everywhere():
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(f.path)

    def clear(self) -> None:
        import shutil

        with self.locked():
            for child in (self.files,):
                shutil.rmtree(child, ignore_errors=True)
            for entry in _scandir(self.state):
                if entry.name == ".lock":
                    continue
                if entry.is_dir():
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)
        _changed()


def quote(name: str) -> str:
    return urllib.parse.quote(name, safe="-_.") or "%00"


def unquote(name: str) -> str:
    return urllib.parse.unquote(name)


def _scandir(path: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except FileNotFoundError:
        return []


def write_atomic(path: Path, data: bytes, durable: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}-{threading.get_ident()}")
    with open(tmp, "wb") as f:
        f.write(data)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


# -- the active root -----------------------------------------------------------------------------

_root: _Root | None = None
_root_lock = threading.Lock()
_on_change: Callable[[], None] | None = None  # the machine's syncer: upload soon
_on_sync: Callable[[], None] | None = None  # the machine's syncer: upload now
_hooks: list[Callable[[], Any]] = []
_preempting = threading.Event()


def _default_root() -> _Root:
    where = os.environ.get(ENV_DIR)
    path = Path(where).expanduser() if where else Path.cwd() / LOCAL_DIR
    key_hex = os.environ.get("NBBURST_JOB_KEY") if where else None
    return _Root(path.resolve(), bytes.fromhex(key_hex) if key_hex else None)


def _current() -> _Root:
    global _root
    with _root_lock:
        if _root is None:
            _root = _default_root()
            _watch_cells()
        return _root


def activate(
    path: str | os.PathLike[str] | None,
    key: bytes | None = None,
    on_change: Callable[[], None] | None = None,
    on_sync: Callable[[], None] | None = None,
) -> None:
    """Point the API at ``path`` (the runner does this on a burst machine); None resets to the default."""
    global _root, _on_change, _on_sync
    with _root_lock:
        _root = _Root(Path(path).resolve(), key) if path is not None else None
        _on_change, _on_sync = on_change, on_sync
    _loops.reset()


def _changed() -> None:
    if _on_change is not None:
        try:
            _on_change()
        except Exception:
            pass


# -- objects -------------------------------------------------------------------------------------


def save(name: str, obj: Any) -> None:
    """Checkpoint ``obj`` (anything picklable) under ``name``.

    Inside a :func:`range` iteration it is committed together with the
    iteration when the iteration's body ends; elsewhere it is committed at once.
    """
    _check_name(name)
    root = _current()
    seq = root.write_object(name, obj)
    frame = _loops.innermost()
    if frame is not None:
        frame.staged[name] = seq
    else:
        root.commit({name: seq}, {})


def load(name: str, default: Any = _MISSING, *, version: int = -1) -> Any:
    """The last committed value of ``name`` (``version=-2`` the one before, ...).

    Returns ``default`` when there is none; raises KeyError if no default is given.
    A value saved earlier in the current, uncommitted loop iteration is returned too.
    """
    _check_name(name)
    root = _current()
    if version == -1:
        for frame in reversed(_loops.stack):
            if name in frame.staged:
                return _read(root, name, frame.staged[name])
    seqs = _versions(root, name)
    if not seqs or not -len(seqs) <= version < len(seqs):
        if default is _MISSING:
            raise KeyError(f"no checkpoint named {name!r}" + (f" at version {version}" if seqs else ""))
        return default
    return _read(root, name, seqs[version])


def versions(name: str) -> list[int]:
    """Commit numbers of the kept versions of ``name``, oldest first."""
    return _versions(_current(), name)


def names() -> list[str]:
    """Names with a committed checkpoint."""
    return sorted(_current().head()["objects"])


def _versions(root: _Root, name: str) -> list[int]:
    seqs = []
    for commit in root.read_manifest()["commits"]:
        seq = commit["objects"].get(name)
        if seq is not None and seq not in seqs:
            seqs.append(seq)
    return seqs


def _read(root: _Root, name: str, seq: int) -> Any:
    path = root.object_path(name, seq)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {name!r} version {seq} is missing from {root.state}") from None
    return root.decode(raw, f"checkpoint {name!r}")


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name) > 200:
        raise ValueError(f"a checkpoint name must be a non-empty string (at most 200 characters), got {name!r}")


# -- resumable loops -----------------------------------------------------------------------------


class _Frame:
    def __init__(self, key: str):
        self.key = key
        self.index: int | None = None  # the value being iterated
        self.staged: dict[str, int] = {}
        self.occurrences: dict[str, int] = {}  # nested loops' call sites inside this iteration


class _Loops(threading.local):
    """The stack of running :func:`range` loops of this thread (the cell's thread, in practice).

    Per thread: a preemption hook runs in a thread of its own, so what it saves
    is committed at once instead of joining the cell's open iteration.
    """

    def __init__(self) -> None:
        self.stack: list[_Frame] = []
        self.occurrences: dict[str, int] = {}
        with _all_lock:
            _all_stacks.append(self.stack)

    def reset(self) -> None:
        self.stack.clear()
        self.occurrences = {}

    def innermost(self) -> _Frame | None:
        return self.stack[-1] if self.stack else None

    def key_for(self, name: str | None, depth: int) -> str:
        parent = self.innermost()
        if name is None:
            frame = sys._getframe(depth + 1)
            name = f"{frame.f_code.co_name}:{frame.f_lineno}"
        counts = parent.occurrences if parent is not None else self.occurrences
        n = counts.get(name, 0)
        counts[name] = n + 1
        own = f"{name}#{n}" if n else name
        return f"{parent.key}@{parent.index}/{own}" if parent is not None else own


_all_stacks: list[list[_Frame]] = []  # every thread's loop stack
_all_lock = threading.Lock()
_loops = _Loops()


def _staged_everywhere() -> set[tuple[str, int]]:
    """Object files staged by open iterations of this process (never garbage)."""
    with _all_lock:
        return {(name, seq) for stack in _all_stacks for frame in list(stack) for name, seq in frame.staged.items()}


class range:  # noqa: N801 - it is used like the builtin
    """``range(stop)``, ``range(start, stop[, step])`` that skips iterations committed before a restart.

    Each iteration is committed when its body ends (the loop asks for the next
    value), together with the :func:`save` calls made during it. The loop is
    identified by its call site (function and line), or by ``name=``: give one
    when the same line starts several independent loops.
    """

    def __init__(self, *args: int, name: str | None = None):
        self._range = _brange(*args)
        self._root = _current()
        self._frame = _Frame(_loops.key_for(name, 1))
        done = self._root.head()["loops"].get(self._frame.key, 0)
        self._pos = done  # position in self._range of the next iteration to run
        self._open = False
        self.skipped = min(done, len(self._range))

    def __iter__(self) -> range:
        return self

    def __len__(self) -> int:
        return len(self._range)

    def __next__(self) -> int:
        if self._open:  # the body of the previous iteration ended: commit it
            self._commit()
        if self._pos >= len(self._range):
            raise StopIteration
        self._frame.index = self._range[self._pos]
        self._frame.staged = {}
        self._frame.occurrences = {}
        if not self._open:
            _loops.stack.append(self._frame)
            self._open = True
        return self._frame.index

    def _commit(self) -> None:
        self._pos += 1
        frame = self._frame
        prefix = f"{frame.key}@{frame.index}/"
        staged, frame.staged = frame.staged, {}
        self._root.commit(staged, {frame.key: self._pos}, drop_loops=(prefix,))
        if self._pos >= len(self._range):
            self._close()

    def _close(self) -> None:
        if self._open:
            self._open = False
            if self._frame in _loops.stack:
                # anything above it was abandoned too (an inner loop left by break)
                del _loops.stack[_loops.stack.index(self._frame) :]

    def close(self) -> None:
        """End the loop early (``break``): the running iteration stays uncommitted."""
        self._close()

    def __del__(self) -> None:
        try:
            self._close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"nbburst.checkpoint.range({self._range.start}, {self._range.stop}, {self._range.step}) at {self._pos}"


def _watch_cells() -> None:
    """In IPython, loop call sites are counted per cell execution."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except Exception:
        return
    if shell is not None and hasattr(shell, "events"):
        with contextlib.suppress(Exception):
            shell.events.register("pre_run_cell", lambda *_: _loops.reset())


# -- files of frameworks -------------------------------------------------------------------------


def folder() -> Path:
    """A folder for checkpoint files that a framework writes itself (torch.save, Keras, ...).

    On a burst machine it is restored when an attempt starts and uploaded to the
    Store when its files change (every few seconds), on :func:`sync` and when
    the machine is about to be preempted.
    """
    root = _current()
    root.files.mkdir(parents=True, exist_ok=True)
    return root.files


def sync() -> None:
    """Upload the checkpoints to the Store now (on a burst machine; elsewhere a no-op)."""
    if _on_sync is not None:
        _on_sync()


def clear() -> None:
    """Delete every checkpoint of this job (or of this local folder), to start over."""
    _current().clear()
    _loops.reset()


# -- preemption ----------------------------------------------------------------------------------


def on_preempt(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Call ``fn()`` when the machine is about to be preempted (usable as a decorator).

    It runs in a thread of its own, while the cell goes on, within the grace
    window (30 s on a spot VM, less locally); checkpoints saved by it are
    uploaded before the machine goes. Outside a burst machine it never runs.
    """
    if not callable(fn):
        raise TypeError(f"on_preempt() needs a function, got {type(fn).__name__}")
    _hooks.append(fn)
    return fn


def preempting() -> bool:
    """True once the machine has been told it is about to be preempted."""
    return _preempting.is_set()


def run_preempt_hooks(deadline: float) -> list[str]:
    """Run the registered hooks (the runner calls this); returns the problems met."""
    _preempting.set()
    problems = []
    for fn in list(_hooks):
        if time.monotonic() > deadline:
            problems.append(f"no time left for preemption hook {getattr(fn, '__name__', fn)!r}")
            break
        try:
            fn()
        except Exception as exc:
            problems.append(f"preemption hook {getattr(fn, '__name__', fn)!r} raised {type(exc).__name__}: {exc}")
    return problems
