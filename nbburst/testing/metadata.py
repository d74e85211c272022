"""An emulated Compute Engine metadata server (`/computeMetadata/v1/...`) on 127.0.0.1.

Code that talks to the real server through google-auth or plain HTTP reaches this one when
`GCE_METADATA_HOST` (and `GCE_METADATA_IP`, used by google-auth's ping) name it: see `env()`.

Values live in a tree addressed by paths such as ``instance/preempted``. A leaf is a string,
a number, a list (served as JSON), or a callable ``f(query) -> str | dict | list`` computed on
every request (tokens). Like the real server it answers only requests carrying
``Metadata-Flavor: Google``, supports ``?recursive=true``, ``?alt=json|text`` and hanging GETs
with ``?wait_for_change=true`` (``last_etag``, ``timeout_sec``).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

PREFIX = "/computeMetadata/v1"


class MetadataServer:
    """One metadata server. Use as a context manager or call start()/stop()."""

    def __init__(self, values: Mapping[str, Any] | None = None, *, port: int = 0, wait_timeout: float = 60.0):
        self._tree: dict = {}
        self._cond = threading.Condition()
        self._closed = False
        self._port = port
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.wait_timeout = wait_timeout
        if values:
            self.update(values)

    # -- values ----------------------------------------------------------------------------------
    def update(self, values: Mapping[str, Any]) -> None:
        """Set several paths at once (a dict value replaces the whole subtree); wakes waiters."""
        with self._cond:
            for path, value in values.items():
                parts = _split(path)
                node = self._tree
                for p in parts[:-1]:
                    node = node.setdefault(p, {})
                    if not isinstance(node, dict):
                        raise ValueError(f"{path}: {p} is a value, not a directory")
                node[parts[-1]] = _copy_tree(value)
            self._cond.notify_all()

    def set(self, path: str, value: Any) -> None:
        self.update({path: value})

    def delete(self, path: str) -> None:
        with self._cond:
            parts = _split(path)
            node = self._lookup(parts[:-1])
            if isinstance(node, dict):
                node.pop(parts[-1], None)
            self._cond.notify_all()

    def get(self, path: str) -> Any:
        with self._cond:
            return _copy_tree(self._lookup(_split(path)))

    def _lookup(self, parts: list[str]):
        node: Any = self._tree
        for p in parts:
            if not isinstance(node, dict) or p not in node:
                return None
            node = node[p]
        return node

    # -- server ----------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("metadata server not started")
        return self._httpd.server_address[1]

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}{PREFIX}/"

    def env(self) -> dict[str, str]:
        """Environment variables that point google-auth (and nbburst) at this server."""
        return {"GCE_METADATA_HOST": self.host, "GCE_METADATA_IP": self.host}

    def start(self) -> MetadataServer:
        if self._httpd is not None:
            return self
        self._closed = False
        httpd = ThreadingHTTPServer(("127.0.0.1", self._port), _Handler)
        httpd.daemon_threads = True
        httpd.metadata = self  # type: ignore[attr-defined]
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, name=f"metadata-server-{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        # Instance deletion and the emulator's own shutdown may both stop a server: one of them does it.
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
            if self._thread:
                self._thread.join(timeout=5)

    def __enter__(self) -> MetadataServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- rendering -------------------------------------------------------------------------------
    def _render(self, parts: list[str], query: dict) -> tuple[int, str, str]:
        """(status, content type, body) for a path, read under the lock."""
        node = self._lookup(parts)
        if node is None:
            return 404, "text/html; charset=UTF-8", "Not Found\n"
        recursive = query.get("recursive", "").lower() == "true"
        alt = query.get("alt", "")
        if callable(node):
            node = node(query)
            if isinstance(node, (dict, list)):
                return 200, "application/json", json.dumps(node)
        if isinstance(node, dict):
            if recursive or alt == "json":
                return 200, "application/json", json.dumps(_recursive(node, parts), separators=(",", ":"))
            lines = [k + "/" if isinstance(v, dict) else k for k, v in node.items()]
            return 200, "application/text", "".join(line + "\n" for line in lines)
        if isinstance(node, list):
            return 200, "application/json", json.dumps(node)
        if alt == "json":
            return 200, "application/json", json.dumps(node)
        return 200, "application/text", str(node)


class _Handler(BaseHTTPRequestHandler):
    server_version = "Metadata Server for VM"
    sys_version = ""

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, ctype: str, body: str, etag: str | None = None) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        if etag:
            self.send_header("ETag", etag)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the VM went away mid-answer (deleted while its agent waited): nothing to tell it

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.do_GET()

    def do_GET(self) -> None:
        md: MetadataServer = self.server.metadata  # type: ignore[attr-defined]
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        if self.headers.get("X-Forwarded-For"):
            return self._send(403, "text/html", "Forbidden: X-Forwarded-For is not allowed\n")
        if url.path in ("", "/"):
            return self._send(200, "application/text", "computeMetadata/\n")
        if self.headers.get("Metadata-Flavor") != "Google":
            return self._send(
                403,
                "text/html; charset=UTF-8",
                "Your client does not have permission to get URL from this server. "
                "Missing Metadata-Flavor:Google header.\n",
            )
        if not (url.path == PREFIX or url.path.startswith(PREFIX + "/")):
            return self._send(404, "text/html; charset=UTF-8", "Not Found\n")
        parts = _split(url.path[len(PREFIX) :])
        wait = query.get("wait_for_change", "").lower() == "true"
        with md._cond:
            status, ctype, body = md._render(parts, query)
            etag = _etag(body)
            # https://cloud.google.com/compute/docs/metadata/querying-metadata#waitforchange: a hanging GET answers
            # when the value changes, at once when last_etag is not the current value's ETag (sent in the ETag
            # header), and with the current value when timeout_sec passes first.
            if wait and status == 200:
                base = query.get("last_etag") or etag
                timeout = float(query.get("timeout_sec") or md.wait_timeout)
                deadline = time.monotonic() + timeout
                while etag == base and not md._closed:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    md._cond.wait(remaining)
                    status, ctype, body = md._render(parts, query)
                    etag = _etag(body)
                if md._closed:
                    status, ctype, body = 503, "text/html", "Service Unavailable\n"
        self._send(status, ctype, body, etag if status == 200 else None)


def _split(path: str) -> list[str]:
    return [p for p in path.strip("/").split("/") if p]


def _etag(body: str) -> str:
    return hashlib.md5(body.encode()).hexdigest()[:16]


def _copy_tree(value):
    if isinstance(value, Mapping):
        return {str(k): _copy_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return list(value)
    return value


def _camel(key: str) -> str:
    return re.sub(r"-([a-z0-9])", lambda m: m.group(1).upper(), key)


def _recursive(node, parts: list[str]):
    """JSON of a subtree as the real server gives it: camelCase keys (but not attribute names
    nor service account emails), directories 0, 1, 2... as lists, callables (tokens) left out."""
    if isinstance(node, dict):
        keep_keys = bool(parts) and parts[-1] in ("attributes", "service-accounts")
        items = {k: v for k, v in node.items() if not callable(v)}
        if items and all(k.isdigit() for k in items):
            return [_recursive(items[k], parts + [k]) for k in sorted(items, key=int)]
        return {(k if keep_keys else _camel(k)): _recursive(v, parts + [k]) for k, v in items.items()}
    return node
