"""LocalStore: a folder as the Store, for the embedded local backend and tests.

A folder can be on a network file system or a flaky disk: every file operation
goes through :meth:`LocalStore.run_io`, which tries it again while it fails
with a transient error (``EIO``, ``EAGAIN``, ``ESTALE``...), as the GCS client
retries 5xx answers. An error that stays (a full or read-only disk, a
permission) leaves every public method as a :class:`~.base.StoreIOError`: an
``OSError`` that says which operation, which object, and what to do.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from .base import AlreadyExists, NotFound, Store, StoreError, StoreIOError, elapsed

T = TypeVar("T")

#: Errors after which the same file operation may well succeed.
TRANSIENT_ERRNOS = frozenset(
    {errno.EIO, errno.EAGAIN, errno.EINTR, errno.EBUSY, errno.ESTALE, errno.ETIMEDOUT, errno.ENFILE}
)
#: How long a failing file operation is tried again before its error is raised.
RETRY_SECONDS = 10.0
#: Errors the methods turn into their own answers (NotFound, AlreadyExists), not into a StoreIOError.
ANSWERED_ERRNOS = frozenset({errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.EEXIST})


class LocalStore(Store):
    """Objects are files below ``root``.

    Atomicity comes from the file system: ``put`` writes a temporary file and
    renames it over the target; ``create`` hard-links the temporary file to
    the target, which fails if the target exists, so exactly one writer wins.
    """

    min_poll_seconds = 0.01  # a stat is cheap

    def __init__(self, url: str | os.PathLike[str]):
        text = os.fspath(url)
        if text.startswith("file://"):
            text = text[len("file://") :]
        self.root = Path(text).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.url = str(self.root)

    def run_io(self, action: str, key: str, operation: Callable[[], T]) -> T:
        """Run one file operation (``action`` on ``key``: "write", "read", "check", "list", "delete"), again
        (with a growing pause) while it fails transiently, for up to ``RETRY_SECONDS``. Each operation must be
        safe to repeat after such a failure."""
        pause, deadline = 0.005, elapsed() + RETRY_SECONDS
        while True:
            try:
                return operation()
            except OSError as exc:
                if exc.errno not in TRANSIENT_ERRNOS or elapsed() > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.25)

    @contextlib.contextmanager
    def failing_as(self, action: str, key: str) -> Iterator[None]:
        """Turn an operating-system error of ``action`` on ``key`` into a :class:`StoreIOError` that says what
        to do (the errors the methods answer themselves pass through)."""
        try:
            yield
        except StoreError:
            raise
        except OSError as exc:
            if exc.errno in ANSWERED_ERRNOS:
                raise
            path = str(self.root / key) if key else self.url
            raise StoreIOError(exc.errno, action, key, self.url, path, exc.strerror or "") from exc

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise StoreError(f"invalid store key {key!r}")
        return self.root / key

    def _write_temp(self, target: Path, chunks: Iterable[bytes | memoryview]) -> Path:
        fd, tmp = _temp_beside(target)
        try:
            with os.fdopen(fd, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
        except BaseException:
            os.unlink(tmp)
            raise
        return Path(tmp)

    def put_chunks(self, key: str, chunks: Iterable[bytes | memoryview], *, create: bool = False) -> None:
        target = self._path(key)
        with self.failing_as("write", key):
            if isinstance(chunks, (list, tuple)):  # in memory: the write can be tried again
                tmp = self.run_io("write", key, lambda: self._write_temp(target, chunks))
            else:  # a stream is read once
                tmp = self._write_temp(target, chunks)
            self._commit(key, tmp, target, create)

    def _commit(self, key: str, tmp: Path, target: Path, create: bool) -> None:
        """Move a complete temporary file into place: link (create-only) or rename (replace)."""
        try:
            self.run_io("write", key, lambda: self._place(key, tmp, target, create))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def _place(self, key: str, tmp: Path, target: Path, create: bool) -> None:
        if create:
            try:
                os.link(tmp, target)
            except FileExistsError:
                raise AlreadyExists(f"{key} already exists in {self.url}") from None
        else:
            os.replace(tmp, target)

    def put_addressed(
        self, prefix: str, chunks: Callable[[], Iterable[bytes | memoryview]], address: Callable[[], str]
    ) -> str:
        """Hash on other cores while the bytes are written, then link them into place.

        A local write costs about as much as the hashing, so doing both at once
        beats hashing first, even when the content turns out to be there already.
        """
        with self.failing_as("write", prefix), ThreadPoolExecutor(1, thread_name_prefix="nbburst-address") as pool:
            future = pool.submit(address)
            tmp = self._write_temp(self._path(prefix + ".incoming"), chunks())
            try:
                addr = future.result()
            except BaseException:
                os.unlink(tmp)
                raise
        with self.failing_as("write", prefix + addr):
            try:
                self._commit(prefix + addr, tmp, self._path(prefix + addr), create=True)
            except AlreadyExists:
                pass  # the same bytes are already there
        return addr

    def put(self, key: str, data: bytes) -> None:
        self.put_chunks(key, [data])

    def create(self, key: str, data: bytes) -> None:
        self.put_chunks(key, [data], create=True)

    def put_file(self, key: str, path: str | Path, *, create: bool = False, adopt: bool = False) -> None:
        """With ``adopt``, the file itself gets a second name when it is on the Store's file system (no copy),
        else a copy."""
        target = self._path(key)
        with self.failing_as("write", key):
            self._put_file(key, target, path, create, adopt)

    def _put_file(self, key: str, target: Path, path: str | Path, create: bool, adopt: bool) -> None:
        fd, tmp = _temp_beside(target)
        os.close(fd)  # the empty file stays until it is replaced: its folder is never empty meanwhile
        try:
            try:
                if not adopt:
                    raise OSError
                os.link(path, tmp + "-adopted")
                os.replace(tmp + "-adopted", tmp)
            except OSError:  # not adopted, another file system, or one without hard links
                shutil.copyfile(path, tmp)  # sendfile: the kernel copies, not Python
        except BaseException:
            for name in (tmp, tmp + "-adopted"):
                if os.path.exists(name):
                    os.unlink(name)
            raise
        self._commit(key, Path(tmp), target, create)

    def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            with self.failing_as("read", key):
                return self.run_io("read", key, path.read_bytes)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise NotFound(f"{key} not found in {self.url}") from None

    def get_buffer(self, key: str) -> memoryview:
        """The file itself, mapped copy-on-write: no copy is made, and a reader that writes into it writes into
        its own pages (a committed object is never rewritten in place: writes replace the file)."""
        path = self._path(key)

        def read() -> memoryview:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size == 0:
                    return memoryview(bytearray())
                return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY))

        try:
            with self.failing_as("read", key):
                return self.run_io("read", key, read)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise NotFound(f"{key} not found in {self.url}") from None

    def get_file(self, key: str, path: str | Path) -> None:
        source = self._path(key)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        os.close(fd)
        try:
            with self.failing_as("read", key):
                self.run_io("read", key, lambda: shutil.copyfile(source, tmp))
        except BaseException as exc:
            os.unlink(tmp)
            if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError)):
                raise NotFound(f"{key} not found in {self.url}") from None
            raise
        os.replace(tmp, path)

    def exists(self, key: str) -> bool:
        with self.failing_as("check", key):
            return self.run_io("check", key, self._path(key).is_file)

    def _stat(self, key: str) -> os.stat_result:
        path = self._path(key)
        try:
            with self.failing_as("check", key):
                return self.run_io("check", key, path.stat)
        except FileNotFoundError:
            raise NotFound(f"{key} not found in {self.url}") from None

    def size(self, key: str) -> int:
        return self._stat(key).st_size

    def updated(self, key: str) -> float:
        """The file's modification time: set by the kernel when the object was written."""
        return self._stat(key).st_mtime

    def list(self, prefix: str) -> list[str]:
        with self.failing_as("list", prefix):
            return self.run_io("list", prefix, lambda: self._list(prefix))

    def _list(self, prefix: str) -> list[str]:
        # Walk only the deepest folder the prefix names, not the whole root.
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self.root / base if base else self.root
        if not start.is_dir():
            return []
        keys = []
        for dirpath, _dirs, files in os.walk(start, onerror=_raise_transient):
            rel = os.path.relpath(dirpath, self.root)
            rel = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            for name in files:
                if name.startswith(".tmp-"):
                    continue
                key = rel + name
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def temporaries(self) -> list[str]:
        """Files a writer was still writing when it died (``.tmp-*``, the name before the rename into
        place), anywhere below the root."""

        def walk() -> list[str]:
            found = []
            for dirpath, _dirs, files in os.walk(self.root):
                rel = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
                found += [name if rel == "." else f"{rel}/{name}" for name in files if name.startswith(".tmp-")]
            return sorted(found)

        with self.failing_as("list", ""):
            return self.run_io("list", "", walk)

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            with self.failing_as("delete", key):
                self.run_io("delete", key, path.unlink)
        except FileNotFoundError:
            return
        # Drop folders left empty, so listing stays cheap. A writer that made one of them and is about to
        # write into it finds it gone and makes it again (:func:`_temp_beside`); once its temporary file is
        # there the folder is not empty, and rmdir leaves it.
        parent = path.parent
        while parent != self.root:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent


def _temp_beside(target: Path) -> tuple[int, str]:
    """A new temporary file (descriptor, path) in ``target``'s folder, made with the folder if need be.

    Another writer's :meth:`LocalStore.delete` removes folders it leaves empty, so the folder can vanish
    between our mkdir and the temporary file's creation: make it again then. Each round either creates
    the file or finds the folder removed by a delete that has moved on, so the loop ends.
    """
    while True:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            return tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        except (FileNotFoundError, FileExistsError):  # a folder on the way was removed under us (mkdir says
            continue  # EEXIST when the folder it found was gone by the time it checked it is one)


def _raise_transient(error: OSError) -> None:
    """While listing: a transient error fails the listing (to be tried again, see ``run_io``) rather than
    leaving a folder out; a folder removed meanwhile is simply not there."""
    if error.errno in TRANSIENT_ERRNOS:
        raise error
