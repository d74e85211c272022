"""Generation preconditions that fake-gcs-server leaves unchecked, checked in front of it.

Real Cloud Storage checks ``ifGenerationMatch`` of a resumable upload when the upload is
finalised (the request that carries its last byte) and answers 412 there; it checks it on
deletes too. fake-gcs-server checks it only on single-request uploads, so a create-only write of
a large object, or a conditional delete, would succeed against it where GCS refuses. This proxy
forwards every request to fake-gcs-server unchanged, except that:

* it remembers each resumable session (its bucket, object and ``ifGenerationMatch``) from the
  request that opened it;
* the request that finalises a session whose ``ifGenerationMatch`` no longer holds gets GCS's
  412 answer, and nothing is written;
* a delete whose ``ifGenerationMatch`` does not hold gets 412;
* a completed session answers another finalising request with the object it made, as GCS
  answers a session that is already complete (fake-gcs-server forgets the session: 404), so a
  client retrying after a lost answer sees its own success.

Object writes (uploads, finalising requests, deletes) pass one at a time, so a precondition
checked here still holds when fake-gcs-server applies the write. Only 127.0.0.1 is bound.

It can also fail on purpose (:meth:`PreconditionProxy.set_faults`): a share of the requests about
one bucket get 503, some before they reach fake-gcs-server, and some single-request writes after
it applied them (the answer is lost, as when a connection drops), which is what a client's retries
must cope with.

It also answers what fake-gcs-server lacks about buckets (:mod:`nbburst.testing.gcs_iam`, its
:attr:`PreconditionProxy.iam`): the bucket IAM methods, and the ``iamConfiguration``, ``lifecycle`` and
``labels`` of a bucket, kept from its insert and patches; and, while a grant to an emulated VM's account
propagates, it refuses that VM's object requests (:meth:`~nbburst.testing.gcs_iam.BucketIam.propagating`).
"""

from __future__ import annotations

import http.client
import json
import random
import re
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

from nbburst.testing.gcs_iam import BucketIam

__all__ = ["PreconditionProxy"]

#: Headers that belong to one hop, not to the request or answer itself.
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
}
#: Headers the proxy's own answer carries already.
_OWN = {"date", "server"}
#: ``Content-Range`` of a request that finalises a resumable upload: the total size is known.
_FINAL_RANGE = re.compile(r"^bytes (?:\d+-\d+|\*)/\d+$")
_UPLOAD_PATH = re.compile(r"^/upload/storage/v1/b/(?P<bucket>[^/]+)/o$")
_OBJECT_PATH = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<name>.+)$")
_PRECONDITION_MESSAGE = "At least one of the pre-conditions you specified did not hold."
#: The bucket a request is about, in each kind of path the JSON API uses.
_BUCKET_IN_PATH = re.compile(r"^(?:/upload|/download)?/storage/v1/b/(?P<bucket>[^/?]+)")


@dataclass
class Answer:
    """An HTTP answer, whole."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""


@dataclass
class _Session:
    bucket: str
    name: str
    if_generation_match: int | None
    done: Answer | None = None


def _unavailable() -> Answer:
    body = json.dumps({"error": {"code": 503, "message": "Service Unavailable (injected fault)"}}).encode()
    return Answer(503, [("Content-Type", "application/json; charset=UTF-8")], body)


def _precondition_failed() -> Answer:
    error = {
        "message": _PRECONDITION_MESSAGE,
        "domain": "global",
        "reason": "conditionNotMet",
        "locationType": "header",
        "location": "If-Match",
    }
    body = json.dumps({"error": {"code": 412, "message": _PRECONDITION_MESSAGE, "errors": [error]}}).encode()
    return Answer(412, [("Content-Type", "application/json; charset=UTF-8")], body)


class PreconditionProxy:
    """A threaded HTTP proxy on ``127.0.0.1:port`` in front of fake-gcs-server at :attr:`backend`."""

    def __init__(self, port: int = 0):
        self.backend = ""  # "127.0.0.1:PORT" of fake-gcs-server, set before requests arrive
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.daemon_threads = True
        self._server.proxy = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None
        self._writes = threading.Lock()
        self._sessions_lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self._faults: dict[str, float] = {}  # bucket -> share of its requests that fail
        self._rng = random.Random()
        self._holds: list[tuple[str, threading.Event]] = []  # (what a write names, released when set)
        self.injected = 0  # faults injected so far
        self.iam = BucketIam()

    def set_faults(self, bucket: str, rate: float) -> None:
        """Fail ``rate`` of the requests about ``bucket`` with 503 (0: none)."""
        if rate > 0:
            self._faults[bucket] = rate
        else:
            self._faults.pop(bucket, None)

    def _fault(self, target: str) -> bool:
        found = _BUCKET_IN_PATH.match(urlsplit(target).path)
        rate = self._faults.get(unquote(found["bucket"])) if found else None
        if rate and self._rng.random() < rate:
            self.injected += 1
            return True
        return False

    def hold_writes(self, fragment: str) -> threading.Event:
        """Keep every write that names ``fragment`` (in its URL or the first KiB of its body, where a multipart
        upload names its object) waiting until the returned event is set, or for at most a minute: a Store
        answering late, for tests of what must not wait on it."""
        released = threading.Event()
        self._holds = [hold for hold in self._holds if not hold[1].is_set()] + [(fragment, released)]
        return released

    def _held(self, target: str, body: bytes) -> None:
        named = unquote(target) + body[:1024].decode("utf-8", "replace")
        for fragment, released in self._holds:
            if fragment in named:
                released.wait(60)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> PreconditionProxy:
        self._thread = threading.Thread(target=self._server.serve_forever, name="gcs-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    # -- what passes ----------------------------------------------------------------------------

    def answer(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> Answer:
        """The answer to one client request."""
        url = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        session_id = query.get("upload_id")
        lost = False  # a fault that strikes after the request was applied: its answer is lost
        if self._fault(target):
            if session_id or method in ("GET", "HEAD") or self._rng.random() < 0.5:
                return _unavailable()
            lost = True
        authorization = next((v for k, v in headers if k.lower() == "authorization"), "")
        refused = self.iam.propagating(method, target, authorization)
        if refused is not None:
            return Answer(refused.code, [("Content-Type", "application/json")], json.dumps(refused.payload()).encode())
        about_buckets = self.iam.answer(method, target, body, lambda m, t, b: self._status_body(m, t, headers, b))
        if about_buckets is not None:
            status, data = about_buckets
            return _unavailable() if lost else Answer(status, [("Content-Type", "application/json")], data)
        if session_id:
            return self._session_request(session_id, method, target, headers, body)
        if method in ("GET", "HEAD"):
            return self._forward(method, target, headers, body)
        self._held(target, body)
        with self._writes:
            wanted = _generation_wanted(query)
            obj = _OBJECT_PATH.match(url.path) if method == "DELETE" and wanted is not None else None
            if obj and self._generation(unquote(obj["bucket"]), unquote(obj["name"])) != wanted:
                return _precondition_failed()
            answer = self._forward(method, target, headers, body)
        upload = _UPLOAD_PATH.match(url.path)
        if method == "POST" and upload and query.get("uploadType") == "resumable" and answer.status == 200:
            self._open_session(upload["bucket"], query, body, answer, wanted)
        return _unavailable() if lost else answer

    def _open_session(
        self, bucket: str, query: dict[str, str], body: bytes, answer: Answer, wanted: int | None
    ) -> None:
        location = next((v for k, v in answer.headers if k.lower() == "location"), "")
        session_id = parse_qs(urlsplit(location).query).get("upload_id", [""])[-1]
        name = query.get("name")
        if not name and body.strip():
            name = json.loads(body).get("name")
        if session_id and name:
            with self._sessions_lock:
                self._sessions[session_id] = _Session(bucket, name, wanted)

    def _session_request(
        self, session_id: str, method: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> Answer:
        with self._sessions_lock:
            session = self._sessions.get(session_id)
            if method == "DELETE":  # the client cancels the session
                self._sessions.pop(session_id, None)
        content_range = next((v for k, v in headers if k.lower() == "content-range"), "")
        if session is None or method != "PUT" or not _FINAL_RANGE.match(content_range.strip()):
            return self._forward(method, target, headers, body)
        with self._writes:
            if session.done is not None:
                return session.done
            wanted = session.if_generation_match
            if wanted is not None and self._generation(session.bucket, session.name) != wanted:
                return _precondition_failed()
            answer = self._forward(method, target, headers, body)
            if answer.status in (200, 201):
                session.done = answer
            return answer

    def _status_body(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> tuple[int, bytes]:
        answer = self._forward(method, target, headers, body)
        return answer.status, answer.body

    def _generation(self, bucket: str, name: str) -> int:
        """The live generation of an object, 0 when there is none."""
        answer = self._forward("GET", f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}", [], b"")
        if answer.status == 404:
            return 0
        if answer.status != 200:
            raise RuntimeError(f"fake-gcs-server answered {answer.status} reading {bucket}/{name}")
        return int(json.loads(answer.body)["generation"])

    def _forward(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> Answer:
        host, _, port = self.backend.rpartition(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=120)
        try:
            connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            sent_host = False
            for key, value in headers:
                if key.lower() not in _HOP_BY_HOP:
                    connection.putheader(key, value)
                    sent_host = sent_host or key.lower() == "host"
            if not sent_host:
                connection.putheader("Host", self.backend)
            connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body)
            response = connection.getresponse()
            data = response.read()
            kept = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP | _OWN]
            if method == "HEAD":
                kept += [(k, v) for k, v in response.getheaders() if k.lower() == "content-length"]
            return Answer(response.status, kept, data)
        except OSError as e:
            body = json.dumps({"error": {"code": 502, "message": f"fake-gcs-server unreachable: {e}"}}).encode()
            return Answer(502, [("Content-Type", "application/json")], body)
        finally:
            connection.close()


def _generation_wanted(query: dict[str, str]) -> int | None:
    value = query.get("ifGenerationMatch")
    return int(value) if value not in (None, "") else None


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # clients open many connections at once (parallel deletes, racing uploads)

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that drops its connection (it gave up on a failed answer, or exited) is no error here."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "nbburst-gcs-proxy"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass

    def do_GET(self) -> None:
        self._relay()

    do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def _relay(self) -> None:
        proxy: PreconditionProxy = self.server.proxy  # type: ignore[attr-defined]
        answer = proxy.answer(self.command, self.path, list(self.headers.items()), self._body())
        self.send_response(answer.status)
        length = str(len(answer.body))
        for key, value in answer.headers:
            if key.lower() == "content-length":
                length = value  # a HEAD answer: the length of the body it does not carry
            else:
                self.send_header(key, value)
        self.send_header("Content-Length", length)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer.body)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():  # trailers, up to the empty line
                pass
            return b"".join(parts)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""
