"""GCSStore: a Google Cloud Storage bucket (below an optional prefix) as the Store.

Root URLs look like ``gs://bucket`` or ``gs://bucket/some/prefix``; the key
``jobs/abc/spec.json`` is the object ``some/prefix/jobs/abc/spec.json``.

How the port's guarantees are met:

* ``put`` uploads a whole object; GCS makes every object write atomic (readers
  see the old or the new generation, never a mix). Small objects (up to
  ``multipart_limit``) go in one request; larger ones stream through a
  resumable upload session in ``chunk_size`` pieces, so an iterator or a file
  is never joined in memory.
* ``create`` uploads with ``ifGenerationMatch=0``: GCS accepts it only if no
  live object has that name, which makes exactly one of several racing
  writers win. A resumable upload is checked when it is finalised, so a large
  create that lost the race learns it from the last chunk's 412 (raised by the
  resumable writer as ``InvalidResponse``, turned into ``PreconditionFailed``
  here). The client library retries uploads on transient errors, so a
  write that succeeded unseen comes back as 412 on its retry. Every
  create-only write therefore carries a random *write id* in its custom
  metadata; after a 412 the existing object is ours exactly when it carries
  our write id and has our size and MD5. A different writer (even one writing
  the same bytes) gets :class:`AlreadyExists`, as with :class:`LocalStore`.
* Transient errors (408, 429, 5xx, dropped connections) are retried with
  exponential backoff through google-api-core's ``Retry`` (the storage
  library's ``DEFAULT_RETRY`` predicate; short pauses against an emulator),
  bounded by ``retry_timeout``; every request has an explicit ``timeout``.

The google-cloud-storage client is created on first use. With
``STORAGE_EMULATOR_HOST`` set (an emulator, see
:mod:`nbburst.testing.gcs`) it uses anonymous credentials and the
project ``$NBBURST_PROJECT`` (default ``test``); otherwise Application
Default Credentials.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests
from google.api_core import exceptions as gexc
from google.api_core.retry import Retry
from google.auth import exceptions as auth_exc
from google.cloud.storage.exceptions import InvalidResponse
from google.cloud.storage.retry import DEFAULT_RETRY

from .base import AlreadyExists, NotFound, Store, StoreError

WRITE_ID = "nbburst-write-id"
"""Custom metadata key that identifies one create-only write (see :meth:`GCSStore.create`)."""

CONTENT_TYPE = "application/octet-stream"

_AUTH_HELP = (
    "No usable Google Cloud credentials were found. Authenticate with "
    "`gcloud auth application-default login` (on a laptop), or set "
    "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or run on a "
    "Google Cloud VM with a service account. To use a local GCS emulator instead, "
    "set STORAGE_EMULATOR_HOST."
)


class GCSStore(Store):
    """Objects below ``gs://bucket/prefix``.

    ``timeout`` is the per-request timeout in seconds (or a ``(connect, read)``
    pair); ``retry_timeout`` bounds how long transient errors are retried;
    ``retry`` replaces the retry policy entirely (tests use a fast one).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float | tuple[float, float] = (10.0, 120.0),
        retry_timeout: float = 300.0,
        retry: Retry | None = None,
        chunk_size: int = 16 << 20,
        multipart_limit: int = 8 << 20,
        delete_workers: int = 8,
    ):
        if not url.startswith("gs://"):
            raise StoreError(f"not a GCS URL: {url!r} (expected gs://bucket/prefix)")
        bucket, _, prefix = url[len("gs://") :].partition("/")
        prefix = prefix.strip("/")
        if not bucket:
            raise StoreError(f"no bucket in {url!r} (expected gs://bucket/prefix)")
        if chunk_size <= 0 or chunk_size % (256 << 10):
            raise ValueError("chunk_size must be a positive multiple of 256 KiB")
        self.bucket_name = bucket
        self.prefix = prefix + "/" if prefix else ""
        self.url = f"gs://{bucket}/{prefix}" if prefix else f"gs://{bucket}"
        self.timeout = timeout
        self.retry = retry if retry is not None else _bounded(_default_retry(), retry_timeout)
        self.chunk_size = chunk_size
        self.multipart_limit = multipart_limit
        self.delete_workers = delete_workers
        self._lock = threading.Lock()
        self._client_obj: Any = None
        self._bucket_seen = False

    # -- plumbing ---------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_lock"] = None
        state["_client_obj"] = None
        state.pop("_clock", None)  # a reading of the Store's clock holds only on the machine that took it
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        """The ``google.cloud.storage.Client``, created on first use."""
        if self._client_obj is None:
            with self._lock:
                if self._client_obj is None:
                    self._client_obj = _make_client()
        return self._client_obj

    def _bucket(self) -> Any:
        return self.client.bucket(self.bucket_name)

    def _name(self, key: str) -> str:
        if (
            not key
            or key.startswith("/")
            or any(part in ("", ".", "..") for part in key.split("/"))
            or any(ord(c) < 0x20 or c == "\x7f" for c in key)
        ):
            raise StoreError(f"invalid store key {key!r}")
        name = self.prefix + key
        if len(name.encode("utf-8")) > 1024:
            raise StoreError(f"store key too long for GCS (1024 bytes with the prefix): {key!r}")
        return name

    def _blob(self, key: str) -> Any:
        return self._bucket().blob(self._name(key))

    def _missing_bucket_error(self) -> StoreError:
        return StoreError(
            f"GCS bucket {self.bucket_name!r} does not exist (store root {self.url}). Create it "
            f"(`gcloud storage buckets create gs://{self.bucket_name} --location=REGION`) or set "
            "the store root to an existing bucket you can write to (c.NBBurst.bucket)."
        )

    def _bucket_exists(self) -> bool:
        """Whether the bucket exists; remembered once seen. Unknown (no permission) counts as yes."""
        if self._bucket_seen:
            return True
        try:
            with self._errors("checking bucket"):
                exists = self._bucket().exists(timeout=self.timeout, retry=self.retry)
        except StoreError:
            return True  # e.g. no storage.buckets.get permission: let the object error speak
        self._bucket_seen = exists
        return exists

    def _not_found(self, key: str) -> StoreError:
        """The error for a 404 on ``key``: the key is missing, or the whole bucket is."""
        if not self._bucket_exists():
            return self._missing_bucket_error()
        return NotFound(f"{key} not found in {self.url}")

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Turn client-library failures into :class:`StoreError` with a readable message."""
        try:
            yield
        except StoreError:
            raise
        except (auth_exc.DefaultCredentialsError, auth_exc.RefreshError) as e:
            raise StoreError(f"{what} in {self.url}: {_AUTH_HELP} ({e})") from None
        except (gexc.Unauthorized, gexc.Forbidden) as e:
            raise StoreError(
                f"{what} in {self.url}: permission denied ({e.message}). The account in use needs "
                f"read/write access to objects in gs://{self.bucket_name} (for example the "
                "Storage Object Admin role); check `gcloud auth application-default login`."
            ) from e
        except gexc.RetryError as e:
            raise StoreError(f"{what} in {self.url}: gave up after retrying: {e.cause or e}") from e
        except gexc.GoogleAPICallError as e:
            raise StoreError(f"{what} in {self.url}: {e.code} {e.message}") from e
        except (auth_exc.TransportError, ConnectionError, requests.RequestException) as e:
            raise StoreError(f"{what} in {self.url}: cannot reach Cloud Storage: {e}") from e
        except Exception as e:  # requests / urllib3 errors that escaped the retries
            if type(e).__module__.split(".")[0] in ("requests", "urllib3", "google"):
                raise StoreError(f"{what} in {self.url}: {type(e).__name__}: {e}") from e
            raise

    # -- writes -----------------------------------------------------------------

    def put(self, key: str, data: bytes) -> None:
        self._write(key, _slices(data, self.chunk_size), create=False)

    def create(self, key: str, data: bytes, *, write_id: str | None = None) -> None:
        """Create-only write (see the port).

        ``write_id`` names this logical write; by default a fresh random one.
        Writing again with the *same* id and bytes finds its own object and
        succeeds: that is what a retry whose first attempt succeeded unseen
        does, and what a caller may do deliberately to retry a create that
        failed with an uncertain outcome.
        """
        self._write(key, _slices(data, self.chunk_size), create=True, write_id=write_id)

    def put_chunks(
        self,
        key: str,
        chunks: Iterable[bytes | memoryview],
        *,
        create: bool = False,
        write_id: str | None = None,
    ) -> None:
        self._write(key, chunks, create=create, write_id=write_id)

    def _write(
        self, key: str, chunks: Iterable[bytes | memoryview], *, create: bool, write_id: str | None = None
    ) -> None:
        blob = self._blob(key)
        if create:
            write_id = write_id or uuid.uuid4().hex
            blob.metadata = {WRITE_ID: write_id}
        precondition = {"if_generation_match": 0} if create else {}
        md5 = hashlib.md5()
        size = 0

        def hashed(source: Iterable[bytes | memoryview]) -> Iterator[bytes | memoryview]:
            nonlocal size
            for chunk in source:
                if len(chunk):
                    md5.update(chunk)
                    size += len(chunk)
                    yield chunk

        stream = hashed(chunks)
        head: list[bytes | memoryview] = []
        buffered = 0
        for chunk in stream:
            head.append(chunk)
            buffered += len(chunk)
            if buffered > self.multipart_limit:
                break
        conflict = False
        with self._errors(f"writing {key}"):
            try:
                if buffered <= self.multipart_limit:  # the iterator is exhausted: one request
                    blob.upload_from_string(
                        b"".join(head),
                        content_type=CONTENT_TYPE,
                        timeout=self.timeout,
                        retry=self.retry,
                        **precondition,
                    )
                else:
                    self._resumable(blob, head, stream, precondition)
            except gexc.PreconditionFailed:
                if not create:
                    raise
                conflict = True
            except gexc.NotFound:
                if not self._bucket_exists():
                    raise self._missing_bucket_error() from None
                raise
        if conflict:
            # An object is there: ours if a retry re-sent a write that had succeeded unseen.
            def finish() -> tuple[int, bytes]:
                for _ in stream:  # a 412 can come before the last chunk: hash the rest
                    pass
                return size, md5.digest()

            self._resolve_conflict(key, write_id or "", finish)

    def _resumable(
        self,
        blob: Any,
        head: list[bytes | memoryview],
        rest: Iterator[bytes | memoryview],
        precondition: dict[str, int],
    ) -> None:
        writer = blob.open(
            "wb",
            chunk_size=self.chunk_size,
            ignore_flush=True,
            content_type=CONTENT_TYPE,
            timeout=self.timeout,
            retry=self.retry,
            **precondition,
        )
        try:
            for chunk in head:
                writer.write(chunk)
            head.clear()
            for chunk in rest:
                writer.write(chunk)
            writer.close()
        except BaseException as e:
            with contextlib.suppress(Exception):
                writer.terminate()  # cancel the upload session; nothing becomes visible
            if isinstance(e, InvalidResponse):
                # How the resumable writer reports an HTTP error, e.g. GCS's 412 for ifGenerationMatch=0 on the
                # request that finalises the upload: as the exception the rest of this module handles.
                raise gexc.from_http_response(e.response) from e
            raise

    def _resolve_conflict(self, key: str, write_id: str, finish: Callable[[], tuple[int, bytes]]) -> None:
        """After a 412 on a create-only write: return if the object is ours, else raise AlreadyExists.

        The object is ours when it carries our write id and has the size and
        MD5 that ``finish()`` reports for what we wrote (GCS omits the MD5 of
        composite objects, which we never write).
        """
        with self._errors(f"checking {key} after a conflicting create"):
            existing = self._bucket().get_blob(self._name(key), timeout=self.timeout, retry=self.retry)
        if existing is not None and write_id and (existing.metadata or {}).get(WRITE_ID) == write_id:
            size, md5 = finish()
            same_md5 = existing.md5_hash is None or existing.md5_hash == base64.b64encode(md5).decode()
            if existing.size == size and same_md5:
                return
        raise AlreadyExists(f"{key} already exists in {self.url}")

    # -- reads ------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        blob = self._blob(key)
        with self._errors(f"reading {key}"):
            try:
                return blob.download_as_bytes(timeout=self.timeout, retry=self.retry)
            except gexc.NotFound:
                raise self._not_found(key) from None

    def get_file(self, key: str, path: str | Path) -> None:
        blob = self._blob(key)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with self._errors(f"reading {key}"):
                try:
                    with os.fdopen(fd, "wb") as f:
                        blob.download_to_file(f, timeout=self.timeout, retry=self.retry)
                except gexc.NotFound:
                    raise self._not_found(key) from None
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def exists(self, key: str) -> bool:
        blob = self._blob(key)
        with self._errors(f"checking {key}"):
            if blob.exists(timeout=self.timeout, retry=self.retry):
                self._bucket_seen = True
                return True
        if not self._bucket_exists():
            raise self._missing_bucket_error()
        return False

    def size(self, key: str) -> int:
        name = self._name(key)
        with self._errors(f"checking {key}"):
            blob = self._bucket().get_blob(name, timeout=self.timeout, retry=self.retry)
        if blob is None:
            raise self._not_found(key)
        return int(blob.size)

    def updated(self, key: str) -> float:
        """The object's ``updated`` time, which Cloud Storage sets at every write."""
        name = self._name(key)
        with self._errors(f"checking {key}"):
            blob = self._bucket().get_blob(name, timeout=self.timeout, retry=self.retry)
        if blob is None:
            raise self._not_found(key)
        return blob.updated.timestamp()

    def list(self, prefix: str) -> list[str]:
        full = self.prefix + prefix
        with self._errors(f"listing {prefix!r}"):
            try:
                blobs = self.client.list_blobs(
                    self.bucket_name,
                    prefix=full,
                    fields="items(name),nextPageToken",
                    timeout=self.timeout,
                    retry=self.retry,
                )
                # Names ending in "/" are folder placeholders made by consoles, not keys.
                keys = [b.name[len(self.prefix) :] for b in blobs if not b.name.endswith("/")]
            except gexc.NotFound:
                raise self._missing_bucket_error() from None
        self._bucket_seen = True
        return sorted(keys)

    def list_dirs(self, prefix: str) -> list[str]:
        full = self.prefix + prefix
        with self._errors(f"listing {prefix!r}"):
            try:
                iterator = self.client.list_blobs(
                    self.bucket_name,
                    prefix=full,
                    delimiter="/",
                    fields="prefixes,nextPageToken",
                    timeout=self.timeout,
                    retry=self.retry,
                )
                for _page in iterator.pages:  # prefixes accumulate page by page
                    pass
            except gexc.NotFound:
                raise self._missing_bucket_error() from None
        self._bucket_seen = True
        return sorted({p[len(full) :].rstrip("/") for p in iterator.prefixes})

    # -- deletes ----------------------------------------------------------------

    def delete(self, key: str) -> None:
        self._delete_name(self._name(key), key)

    def _delete_name(self, name: str, key: str) -> None:
        with self._errors(f"deleting {key}"):
            try:
                self._bucket().blob(name).delete(timeout=self.timeout, retry=self.retry)
            except gexc.NotFound:
                pass  # already gone (or deleted by our own first, unseen attempt)

    def delete_prefix(self, prefix: str) -> int:
        keys = self.list(prefix)
        if len(keys) <= 1:
            for key in keys:
                self._delete_name(self.prefix + key, key)
            return len(keys)
        workers = max(1, min(self.delete_workers, len(keys)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nbburst-gcs-delete") as pool:
            for future in [pool.submit(self._delete_name, self.prefix + k, k) for k in keys]:
                future.result()
        return len(keys)


def _make_client() -> Any:
    try:
        from google.cloud import storage
    except ImportError as e:  # pragma: no cover - a dependency of nbburst
        raise StoreError("gs:// stores need the google-cloud-storage package: pip install google-cloud-storage") from e
    project = os.environ.get("NBBURST_PROJECT") or None
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project=project or "test", credentials=AnonymousCredentials())
    try:
        return storage.Client(project=project)
    except auth_exc.DefaultCredentialsError:
        raise StoreError(_AUTH_HELP) from None


def _default_retry() -> Retry:
    """The storage library's retry policy; against an emulator (``STORAGE_EMULATOR_HOST``) its pauses start at
    10 ms instead of 1 s: the backoff spares a loaded service, and a local emulator answers at once."""
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        return DEFAULT_RETRY.with_delay(initial=0.01, maximum=0.5)
    return DEFAULT_RETRY


def _bounded(retry: Retry, seconds: float) -> Retry:
    """``retry`` giving up after ``seconds`` (``with_timeout`` in newer google-api-core)."""
    with_timeout = getattr(retry, "with_timeout", None)
    return with_timeout(seconds) if with_timeout else retry.with_deadline(seconds)


def _slices(data: bytes, size: int) -> Iterator[memoryview]:
    view = memoryview(data)
    for start in range(0, len(view), size):
        yield view[start : start + size]
