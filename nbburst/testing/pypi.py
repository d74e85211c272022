"""A local package index for emulated VMs of stock images: what PyPI and uv's Python downloads are to a real VM.

A job's VM on a stock image fetches uv from the package index, asks uv for the notebook's Python when the
image has another version, and installs the notebook's packages from the index
(:mod:`nbburst.machines.gce.vm`). Offline, this serves all of that on 127.0.0.1:

* ``/simple/<name>/``: the index (PEP 691 JSON) of every distribution added, one wheel each; a distribution
  of this Python (:meth:`PackageIndex.add_installed`) is served as a wheel of its installed files, built on
  first request (:func:`nbburst.protocol.dist.installed_wheel`); uv as a wheel of this machine's uv program;
* ``/python-downloads.json`` and ``/python/...``: a "standalone" CPython made of this machine's interpreter
  and standard library, in the layout of python-build-standalone, which uv installs when told where to
  look (``UV_PYTHON_DOWNLOADS_JSON_URL``).

    with PackageIndex(folder) as index:
        index.add_uv(); index.add_python(); index.add_installed()
        emulator.instance_env.update(index.env())   # UV_DEFAULT_INDEX, UV_PYTHON_DOWNLOADS_JSON_URL

``requests`` lists what was asked for (path, and whether it was found).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import sysconfig
import tarfile
import threading
import zipfile
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from nbburst.protocol import dist, env
from nbburst.protocol.uvprogram import uv_program

#: How the wheels this index makes are compressed: not at all. They go from this machine to emulated VMs on it,
#: so deflating them (a big distribution's wheel is built at its first request) only delays that request.
WHEELS = zipfile.ZIP_STORED

__all__ = ["PackageIndex"]

_JSON = "application/vnd.pypi.simple.v1+json"
#: Left out of the standalone Python: tests, build configuration, caches, installed packages.
_STDLIB_SKIP = ("__pycache__", "test", "site-packages", "dist-packages", "EXTERNALLY-MANAGED", "sitecustomize.py")


class PackageIndex:
    """The index on ``127.0.0.1:port`` (``port=0``: a free one), files kept under ``folder``."""

    def __init__(self, folder: str | os.PathLike[str], port: int = 0):
        self.folder = Path(folder)
        self._port = port
        self._sources: dict[str, Callable[[], tuple[str, bytes]]] = {}  # normalised name -> wheel builder
        self._files: dict[str, dict[str, Any]] = {}  # file name -> {"path", "sha256"}
        self._names: dict[str, str] = {}  # normalised name -> file name, once built
        self._python: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._building: dict[str, threading.Lock] = {}
        self._httpd: ThreadingHTTPServer | None = None
        self.requests: list[tuple[str, bool]] = []

    # -- running ----------------------------------------------------------------------------------------
    def start(self) -> PackageIndex:
        self.folder.mkdir(parents=True, exist_ok=True)
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server API)
                found = index._answer(self.path.split("?", 1)[0])
                index.requests.append((self.path, found is not None))
                if found is None:
                    self.send_error(404)
                    return
                content_type, body = found
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(body)

            do_HEAD = do_GET  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = _Server(("127.0.0.1", self._port), Handler)
        threading.Thread(target=self._httpd.serve_forever, name="nbburst-package-index", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> PackageIndex:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("package index not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def env(self) -> dict[str, str]:
        """The environment that points uv (and a VM's bootstrap) at this index."""
        out = {"UV_DEFAULT_INDEX": f"{self.url}/simple"}
        if self._python is not None:
            out["UV_PYTHON_DOWNLOADS_JSON_URL"] = f"{self.url}/python-downloads.json"
        return out

    # -- what it serves ---------------------------------------------------------------------------------
    def add_wheel(self, file_name: str, data: bytes) -> None:
        """Serve this wheel (its name is the distribution's)."""
        name = env.normalise(file_name.split("-", 1)[0])
        self._sources[name] = lambda: (file_name, data)

    def add_installed(self, *names: str) -> None:
        """Serve distributions of this Python (default: all of them but those installed from a folder or a
        local file) as wheels of their installed files, each built when first asked for. A distribution
        added another way stays as it was."""
        installed = env.distributions()
        for name in names or installed:
            info = installed.get(env.normalise(name))
            if info is not None and info.origin not in ("editable", "folder", "file"):
                self._sources.setdefault(info.name, lambda n=info.name: dist.installed_wheel(n, WHEELS))

    def add_uv(self) -> str:
        """Serve this environment's uv program (see :func:`nbburst.protocol.uvprogram.uv_program`) as uv's wheel
        for Linux on this CPU; its version."""
        program = uv_program()
        if program is None:
            raise FileNotFoundError(
                f"no uv program in this Python's environment ({sys.prefix}) nor on the PATH: "
                f"install it with {sys.executable} -m pip install uv (or pip install 'nbburst[emulator]')"
            )
        version = subprocess.run([program, "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
        tag = f"py3-none-manylinux_2_17_{platform.machine()}"
        dist_info = f"uv-{version}.dist-info"
        entries = [
            (f"uv-{version}.data/scripts/uv", Path(program).read_bytes()),
            (f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: uv\nVersion: {version}\n".encode()),
            (f"{dist_info}/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n".encode()),
        ]
        file_name = dist.wheel_name("uv", version, tag)
        self._sources["uv"] = lambda: (file_name, dist.make_wheel(entries, dist_info, WHEELS))
        return version

    def add_python(self) -> str:
        """Serve this machine's CPython as a standalone Python uv can install; its version (``3.11.2``)."""
        version = platform.python_version()
        minor = ".".join(version.split(".")[:2])
        archive = self.folder / f"cpython-{version}-standalone.tar.gz"
        if not archive.exists():
            _standalone_python(archive, minor)
        arch = platform.machine()
        major, minor_, patch = (int(x) for x in version.split(".")[:3])
        key = f"cpython-{version}-linux-{arch}-gnu"
        self._python = {
            key: {
                "name": "cpython",
                "arch": {"family": arch, "variant": None},
                "os": "linux",
                "libc": "gnu",
                "major": major,
                "minor": minor_,
                "patch": patch,
                "prerelease": "",
                "url": f"{self.url}/python/{archive.name}",
                "sha256": hashlib.sha256(archive.read_bytes()).hexdigest(),
                "variant": None,
                "build": "nbburst",
            }
        }
        return version

    def build(self, *names: str) -> None:
        """Build the wheels of these distributions now, not when first asked for."""
        for name in names:
            self._wheel(env.normalise(name))

    # -- answers ----------------------------------------------------------------------------------------
    def _wheel(self, name: str) -> str | None:
        """The file name of the wheel served for ``name``, built the first time (one build per name at a time)."""
        with self._lock:
            lock = self._building.setdefault(name, threading.Lock())
        with lock:
            if name in self._names:
                return self._names[name]
            source = self._sources.get(name)
            if source is None:
                return None
            file_name, data = source()
            path = self.folder / "files" / file_name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            self._files[file_name] = {"path": path, "sha256": hashlib.sha256(data).hexdigest()}
            self._names[name] = file_name
            return file_name

    def _answer(self, path: str) -> tuple[str, bytes] | None:
        parts = [p for p in path.split("/") if p]
        if len(parts) == 2 and parts[0] == "simple":
            file_name = self._wheel(env.normalise(parts[1]))
            if file_name is None:
                return None
            entry = {"filename": file_name, "url": f"../../files/{file_name}"}
            entry["hashes"] = {"sha256": self._files[file_name]["sha256"]}
            body = {"meta": {"api-version": "1.1"}, "name": env.normalise(parts[1]), "files": [entry]}
            return _JSON, json.dumps(body).encode()
        if len(parts) == 2 and parts[0] == "files" and parts[1] in self._files:
            return "application/octet-stream", self._files[parts[1]]["path"].read_bytes()
        if parts == ["python-downloads.json"] and self._python is not None:
            return "application/json", json.dumps(self._python).encode()
        if len(parts) == 2 and parts[0] == "python" and (self.folder / parts[1]).is_file():
            return "application/gzip", (self.folder / parts[1]).read_bytes()
        return None


class _Server(ThreadingHTTPServer):
    """Many connections at once (an installer opens dozens); a client that hangs up is no error."""

    daemon_threads = True
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _standalone_python(archive: Path, minor: str) -> None:
    """A tar.gz in python-build-standalone's layout (``python/bin``, ``python/lib/pythonX.Y``) of this
    interpreter and its standard library (links inside it that point out of it are followed)."""
    executable = os.path.realpath(sys.executable)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        tar.add(executable, f"python/bin/python{minor}")
        for alias in ("python3", "python"):
            link = tarfile.TarInfo(f"python/bin/{alias}")
            link.type, link.linkname = tarfile.SYMTYPE, f"python{minor}"
            tar.addfile(link)
        if sysconfig.get_config_var("Py_ENABLE_SHARED"):
            library = Path(sysconfig.get_config_var("LIBDIR")) / sysconfig.get_config_var("INSTSONAME")
            tar.add(str(library), f"python/lib/{library.name}")
        for path in sorted(stdlib.rglob("*")):
            rel = path.relative_to(stdlib)
            if any(part in _STDLIB_SKIP or part.startswith("config-") for part in rel.parts) or path.is_dir():
                continue
            tar.add(os.path.realpath(path), f"python/lib/python{minor}/{rel.as_posix()}", recursive=False)
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(buf.getvalue())
