"""``python -m nbburst.agent.session.relay SESSION_URL``: a session's machine on Compute Engine, and its mailbox.

On the local backend the client hands a cell to the session's warm parent
(agent/session/parent.py) over a Unix socket. A Compute Engine VM has no socket the
notebook can reach, so its startup script runs this relay instead of the agent:
it starts the warm parent exactly as the local backend does, with its sockets in
a folder of its own on the VM, and carries the client's requests to it through
the Store (:mod:`nbburst.protocol.sessionwire`): every ``POLL_SECONDS`` it lists
the session's requests, opens each under the session's secret (refusing what
is not the session's, misplaced, or for an earlier boot of the machine), and

* a cell: connects to the cells' socket and sends the request line a local
  client sends (token, job URL, job key, attempt); the cell's controller then
  writes everything to the job's folder, which the client reads as for any job;
* state, stop: asks the control socket and writes its answer, sealed, as the
  session's ``state.json`` (also written once the parent takes cells: that is
  how the client knows the session is up).

When the client left its certificate in the session's folder, the relay also listens on a TCP port of the VM's
address with mutual TLS (:mod:`nbburst.protocol.sessionpush`) and announces it in ``state.json``: a request sent
down that channel is opened exactly as one from the Store and answered at once, and a cell's connection to the warm
parent is carried back up it, so its wakeups and its end reach the client by push.

An idle session costs a few Store operations a minute: once no request came through the Store for
:data:`STORE_BUSY_SECONDS`, the relay lists the mailbox only every :data:`IDLE_POLL_SECONDS`, and speeds up again
while requests come through it. A client that cannot reach the push channel is not left waiting for that slow
listing: after writing a request to the Store while the session is quiet, it changes the instance's wake attribute
(:data:`~nbburst.protocol.sessionwire.WAKE_ATTRIBUTE`, with instances.setMetadata), on which the relay holds a
hanging read of the metadata server (its documented wait-for-change): the relay lists at once. Without that
attribute to watch (a metadata server that does not answer), the relay keeps listing every :data:`POLL_SECONDS`
until a request comes by push.

The session's secret comes as the job key of a job VM does (Secret Manager, read
by the bootstrap into ``$NBBURST_HOME/job-key``); its limits (idle, until,
preload, boot) from the instance's ``nbburst-session`` attribute. The relay ends
with the parent, which deletes the VM when the session is over.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from ...protocol import sealed, sessionpush, sessionwire
from ...protocol.job import ENV_ATTEMPT, attempt_tag, split_job_url
from ...protocol.metadata import host, metadata
from ...store import NotFound, Store, open_store
from ..machine import envsync, gce
from .parent import ENV_TOKEN

#: How often the relay lists the session's requests: what a cell's start waits at most, besides the Store
#: (``$NBBURST_SESSION_POLL`` on the VM sets it).
POLL_SECONDS = float(os.environ.get("NBBURST_SESSION_POLL", "0.3"))
#: How often it lists them once the session is quiet and a client's request reaches the relay without the listing
#: (pushed, or announced by the wake attribute) (``$NBBURST_SESSION_IDLE_POLL`` on the VM sets it).
IDLE_POLL_SECONDS = float(os.environ.get("NBBURST_SESSION_IDLE_POLL", "20"))
#: How long after a request came through the Store the relay keeps listing every :data:`POLL_SECONDS`
#: (``$NBBURST_SESSION_BUSY`` on the VM sets it).
STORE_BUSY_SECONDS = float(os.environ.get("NBBURST_SESSION_BUSY", "120"))
#: How long each hanging read of the wake attribute may wait before the metadata server answers anyway (whole
#: seconds, as its ``timeout_sec`` is documented).
WAKE_WAIT_SECONDS = 300
#: How long the warm parent may take to answer on its control socket (it answers once warm).
ASK_SECONDS = 60.0
#: How long a client on the push channel may take to send its request once connected.
REQUEST_SECONDS = 600.0
#: The longest request line a client may push (a cell's request and the job's objects that travel with it).
REQUEST_BYTES = 64 << 20
#: The instance attribute with the session's limits.
METADATA_KEY = "nbburst-session"


def _log(message: str) -> None:
    print(f"nbburst session relay: {message} t={time.time():.3f}", file=sys.stderr, flush=True)


class Relay:
    """The warm parent's sockets on one side, the session's folder in the Store on the other."""

    def __init__(self, store: Store, session_id: str, secret: bytes, boot: int, folder: str):
        self.store, self.session_id, self.secret, self.boot = store, session_id, secret, boot
        self.folder = folder
        self.cells, self.control = os.path.join(folder, "cells"), os.path.join(folder, "control")
        self.token = secret.hex()
        self.seen: set[str] = set()
        self.lock = threading.Lock()  # the listing and the push channel's connections share ``seen``
        self.push: dict[str, Any] = {}  # what the state announces of the push channel (host, port, cert)
        self.pushed = False  # a request came down the push channel on this boot
        self.stored_at = time.monotonic()  # when a request last came through the Store
        self.wakeable = False  # the wake attribute is watched: a client writing to the Store changes it
        self.woken = threading.Event()  # it changed: list the requests now
        self.over = threading.Event()  # the relay ends: the watch of the wake attribute too

    def _send(self, path: str, request: dict[str, Any], timeout: float) -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(timeout)
            conn.connect(path)
            conn.sendall(json.dumps({"token": self.token, **request}).encode() + b"\n")
        except OSError:
            conn.close()
            raise
        return conn

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """The warm parent's answer on its control socket."""
        with self._send(self.control, request, ASK_SECONDS) as conn:
            return json.loads(conn.makefile("rb").readline() or b"{}")

    def publish(self, answers: str = "", request: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write the session's state (the parent's answer to ``request``), sealed, for the client; returns it."""
        state = {**self.ask(request or {}), "boot": self.boot, "answers": answers, "push": self.push}
        self.store.put(
            sessionwire.state_key(self.session_id), sessionwire.seal_state(self.secret, self.session_id, state)
        )
        return state

    def first(self, place: str) -> bool:
        """Whether request ``place`` is seen for the first time (each is carried once, whichever way it came)."""
        with self.lock:
            fresh = place not in self.seen
            self.seen.add(place)
        return fresh

    def poll_seconds(self) -> float:
        """How long until the next listing: short unless the Store has been quiet and a client's request reaches
        the relay without it (pushed, or announced by the wake attribute)."""
        quiet = time.monotonic() - self.stored_at > STORE_BUSY_SECONDS
        return IDLE_POLL_SECONDS if quiet and (self.pushed or self.wakeable) else POLL_SECONDS

    def watch_wake(self, host: str) -> None:
        """Hanging reads of the instance's wake attribute on the metadata server at ``host``: each change sets
        :attr:`woken`. A failed read makes the relay list fast until a read succeeds again; an attribute that is
        not there (an instance the client cannot wake) ends the watch."""
        url = f"http://{host}/computeMetadata/v1/instance/attributes/{sessionwire.WAKE_ATTRIBUTE}"
        etag: str | None = None
        while not self.over.is_set():
            # https://cloud.google.com/compute/docs/metadata/querying-metadata#waitforchange: with last_etag the
            # server answers at once when the value's ETag differs, else when it changes or timeout_sec passes.
            query = "" if etag is None else f"?wait_for_change=true&last_etag={etag}&timeout_sec={WAKE_WAIT_SECONDS}"
            status, found = _read_etag(url + query, WAKE_WAIT_SECONDS + 10)
            if status == 404:
                self.wakeable = False
                _log(f"no {sessionwire.WAKE_ATTRIBUTE} attribute: it lists the requests every {POLL_SECONDS} s")
                return
            if status != 200 or not found:  # a 503 while the host is maintained, or no answer: fast until it is back
                self.wakeable = False
                self.over.wait(1.0)
                continue
            if etag is None:
                _log(f"watching the {sessionwire.WAKE_ATTRIBUTE} attribute")
            elif found != etag:
                _log(f"woken by the {sessionwire.WAKE_ATTRIBUTE} attribute")
                self.woken.set()
            etag, self.wakeable = found, True

    def step(self) -> None:
        """Carry every request not seen yet."""
        for place in self.store.list(sessionwire.requests_prefix(self.session_id)):
            if not self.first(place):
                continue
            try:
                request = sessionwire.open_request(
                    self.secret, self.session_id, self.boot, place, self.store.get(place)
                )
            except NotFound:
                continue
            except Exception as exc:  # not the session's: never acted on
                _log(f"refusing {place}: {type(exc).__name__}: {exc}")
                continue
            self.stored_at = time.monotonic()
            with contextlib.suppress(OSError, ValueError, KeyError):
                self.carry(place, request, "the Store").close()
            with contextlib.suppress(Exception):
                self.store.delete(place)

    def carry(
        self, place: str, request: dict[str, Any], way: str, ops: list[Any] | None = None
    ) -> socket.socket | dict[str, Any]:
        """Carry one opened request: a cell's connection to the warm parent (its controller's news comes down it
        until the attempt ends), or the state published for a state or stop request. ``ops``: the job's objects
        pushed with a cell, handed to its controller in a file of this relay's private folder. Logs, then raises
        OSError, ValueError or KeyError when it could not be carried."""
        kind = request.get("kind")
        try:
            if kind == sessionwire.CELL:
                cell = {key: request[key] for key in ("job", "key", "attempt")}
                cell["imports"] = request.get("imports") or []  # the warm parent imports them before it forks
                if ops:
                    cell["objects"] = self._keep(place, ops)
                conn = self._send(self.cells, cell, 10.0)  # the cell's controller reports to the job's folder
                conn.settimeout(None)
                _log(f"cell {request['job']} attempt {request['attempt']} handed over from {way}")
                return conn
            if kind in (sessionwire.STATE, sessionwire.STOP):
                return self.publish(place, {"stop": True} if kind == sessionwire.STOP else {})
            raise ValueError(f"no request of kind {kind!r}")
        except (OSError, ValueError, KeyError) as exc:
            _log(f"could not carry {place}: {type(exc).__name__}: {exc}")
            raise

    def _keep(self, place: str, ops: list[Any]) -> str:
        """Write a pushed cell's objects (as :func:`nbburst.protocol.overlay.encode_ops` made them) where its
        controller reads them (it removes the file)."""
        path = os.path.join(self.folder, place.rsplit("/", 1)[-1])
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(ops, f)
        return path

    # -- the push channel ------------------------------------------------------------------------
    def listen(self, client_cert: str, address: str, announced: str) -> None:
        """Take pushed requests on a TCP port of ``address`` from the client holding ``client_cert`` only, and
        announce the port at ``announced`` (the address the client reaches the VM on) in the state."""
        own = sessionpush.identity(f"{self.session_id}-{self.boot}")
        tls = sessionpush.context(own, client_cert, server=True)
        try:
            server = socket.create_server((address, sessionpush.PORT))
        except OSError:  # taken: a port of the system's choosing, which a firewall rule may not admit (the Store then)
            server = socket.create_server((address, 0))
        self.push = {"host": announced, "port": server.getsockname()[1], "cert": own["cert"]}
        threading.Thread(target=self._accept, args=(server, tls), daemon=True).start()

    def _accept(self, server: socket.socket, tls: ssl.SSLContext) -> None:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=self._serve, args=(conn, tls), daemon=True).start()

    def _serve(self, raw: socket.socket, tls: ssl.SSLContext) -> None:
        """One pushed request: refused unless the client's certificate and the request's seal hold."""
        raw.settimeout(sessionpush.HANDSHAKE_SECONDS)
        try:
            with tls.wrap_socket(raw, server_side=True) as conn:
                conn.settimeout(REQUEST_SECONDS)  # the client connects before it uploads the cell's inputs
                line = conn.makefile("rb").readline(REQUEST_BYTES)  # the client sends nothing after it
                place, sealed_request, ops = sessionpush.read_request(line)
                request = sessionwire.open_request(self.secret, self.session_id, self.boot, place, sealed_request)
                if not self.first(place):
                    return  # already carried from the Store: the client waits on the Store for it
                self.pushed = True
                carried = self.carry(place, request, "the push channel", ops)
                if isinstance(carried, dict):
                    conn.sendall(json.dumps(carried).encode() + b"\n")
                    return
                with carried:
                    conn.sendall(b'{"carried": true}\n')
                    conn.settimeout(None)
                    while news := carried.recv(4096):  # the controller's wakeups, up to the attempt's end
                        conn.sendall(news)
        except (OSError, ValueError, KeyError, sealed.Refused) as exc:  # a stranger, a forgery, or a lost client
            _log(f"push connection ended: {type(exc).__name__}: {exc}")
        finally:
            raw.close()


def _read_etag(url: str, timeout: float) -> tuple[int, str | None]:
    """The metadata server's status for ``url`` and the ETag of the value (None on a failure)."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            resp.read()
            return resp.status, resp.headers.get("ETag")
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except OSError:
        return 0, None


def _settings() -> dict[str, Any]:
    raw = metadata(f"instance/attributes/{METADATA_KEY}", timeout=5.0)
    if not raw:
        raise SystemExit(f"nbburst session relay: no {METADATA_KEY} attribute: this VM is not a session's")
    return json.loads(raw)


def _open_push(relay: Relay) -> None:
    """Listen for pushed requests when the client left its certificate; the Store alone carries them otherwise."""
    try:
        raw = relay.store.get(sessionpush.client_key(relay.session_id))
        client_cert = sessionpush.open_client(relay.secret, relay.session_id, raw)
    except (NotFound, sealed.Refused, ValueError, KeyError) as exc:
        _log(f"no push channel (requests come through the Store only): {type(exc).__name__}: {exc}")
        return
    address = (metadata("instance/network-interfaces/0/ip", timeout=2.0) or "127.0.0.1").strip()
    # The notebook reaches a VM with an external address there (the VM sees it as traffic to its internal one).
    external = metadata("instance/network-interfaces/0/access-configs/0/external-ip", timeout=2.0)
    relay.listen(client_cert, address, (external or address).strip())
    _log(f"push channel on {address}:{relay.push['port']}, announced at {relay.push['host']}")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m nbburst.agent.session.relay SESSION_URL", file=sys.stderr)
        return 2
    root, session_id = split_job_url(argv[0])
    key_hex = gce.vm_key()
    if not key_hex:
        raise SystemExit("nbburst session relay: no session secret ($NBBURST_HOME/job-key)")
    settings = _settings()
    boot = int(settings["boot"])
    folder = tempfile.mkdtemp(prefix="nbb-session-")  # only this user enters it
    relay = Relay(open_store(root), session_id, bytes.fromhex(key_hex), boot, folder)
    envsync.store_built(relay.store, session_id, relay.secret)  # what the bootstrap built: the next VM unpacks it
    _open_push(relay)
    if (server := host()) is not None:
        threading.Thread(target=relay.watch_wake, args=(server,), name="nbburst-wake", daemon=True).start()
    command = [sys.executable, "-m", "nbburst.agent.session.parent", relay.cells, "--control", relay.control]
    command += ["--idle", str(settings["idle"]), "--until", str(settings["until"])]
    if settings.get("preload"):
        command += ["--preload", ",".join(settings["preload"])]
    env = {**os.environ, ENV_TOKEN: relay.token, ENV_ATTEMPT: attempt_tag(session_id, boot + 1)}
    parent = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
    _log(f"warm parent {parent.pid} starting (boot {boot})")
    try:
        while parent.poll() is None:
            try:
                relay.publish()  # once it answers, it takes cells: the client's start returns
                break
            except (OSError, ValueError):
                time.sleep(0.05)
        _log("the session takes cells")
        every = None
        while parent.poll() is None:
            try:
                relay.step()
            except Exception as exc:  # the Store unreachable for a moment: the next round tries again
                _log(f"listing requests failed: {type(exc).__name__}: {exc}")
            if every != (every := relay.poll_seconds()):  # quiet, or busy again: said once at each change
                _log(f"it lists the requests every {every} s")
            due = time.monotonic() + every
            while parent.poll() is None and time.monotonic() < due:
                if relay.woken.wait(min(POLL_SECONDS, max(0.0, due - time.monotonic()))):
                    relay.woken.clear()  # a request waits in the Store: list now
                    break
    finally:
        relay.over.set()
        if parent.poll() is None:
            parent.terminate()
        _log(f"warm parent ended with status {parent.wait()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
