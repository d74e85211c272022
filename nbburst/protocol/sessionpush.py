"""A session's push channel: the notebook and its session's VM on one mutually authenticated TLS connection.

Through the Store alone (:mod:`.sessionwire`) a cell waits on the relay's listing of the mailbox and the notebook
waits on its reading of the job's folder. When the notebook can reach the VM, the relay also listens on a TCP port
and a cell's sealed request goes down a TLS connection instead; the relay answers at once, and the cell's news (its
controller's wakeups) and its end come back up the same connection. The Store stays the record: the cell is a
signed job there, and everything it makes is read from its folder as before; only the waiting leaves the Store.

Each side makes its own certificate and key for each boot of the session's machine; the private keys never leave
the side that made them. The certificates are exchanged sealed under the session's secret through the Store: the
client's as ``sessions/<id>/client.json`` before the VM starts, the VM's (with its address) in the session's
state. Each side trusts exactly the other's certificate, so a connection from anyone else fails its handshake, and
what comes down an accepted connection is a sealed request, opened (place, boot, session) as one from the Store.
"""

from __future__ import annotations

import base64
import datetime
import functools
import json
import os
import select
import socket
import ssl
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from . import overlay, sealed, sessionwire

#: How long one side waits for the other's handshake or line before it gives the connection up.
HANDSHAKE_SECONDS = 10.0
#: The TCP port a session VM's relay listens on when it can (one firewall rule admits it: machines/gce/firewall.py).
PORT = 8470
#: How long a connection may be idle before its other end is probed (a few probes unanswered end it).
KEEPALIVE_SECONDS = 20
#: How long an identity holds: past any session's time limit (a session's time limit is days at most).
_VALID_DAYS = 30


def client_key(session_id: str) -> str:
    """Where the client's certificate for the session's current boot waits for the VM's relay."""
    return sessionwire.folder(session_id) + "client.json"


def identity(name: str) -> dict[str, str]:
    """A new self-signed certificate and its private key (PEM): one side's identity for one boot."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return {"cert": cert.public_bytes(serialization.Encoding.PEM).decode(), "key": pem.decode()}


def context(own: dict[str, str], peer_cert: str, server: bool) -> ssl.SSLContext:
    """A TLS context presenting ``own`` and trusting only ``peer_cert``; both sides require the other's."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False  # the peer is pinned by its certificate, whatever address it is reached on
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=peer_cert)
    if server:
        ctx.num_tickets = 0  # no resumption: a ticket arriving late would look like news on a waiting cell
    with tempfile.TemporaryDirectory(prefix="nbb-tls-") as folder:  # ssl loads a key only from a file
        path = os.path.join(folder, "identity.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(own["key"] + own["cert"])
        ctx.load_cert_chain(path)
    return ctx


@functools.lru_cache(maxsize=8)
def _client_context(key: str, cert: str, peer_cert: str) -> ssl.SSLContext:
    """The client's context for one boot's channel, made once: each cell connects anew."""
    return context({"key": key, "cert": cert}, peer_cert, server=False)


def seal_client(secret: bytes, session_id: str, cert: str) -> bytes:
    """The client's certificate as it waits in the Store, sealed under the session's secret."""
    body = json.dumps({"cert": cert}).encode()
    return sealed.seal_record(secret, session_id, client_key(session_id), body)


def open_client(secret: bytes, session_id: str, raw: bytes) -> str:
    """The client's certificate; :class:`.sealed.Refused` when the session's client did not write it."""
    return json.loads(sealed.open_record(secret, session_id, client_key(session_id), raw))["cert"]


def connect(push: dict[str, Any], own: dict[str, str], timeout: float) -> ssl.SSLSocket:
    """A TLS connection to the relay that announced ``push`` (host, port, cert); OSError when it cannot be made
    within ``timeout`` or the other end is not that relay."""
    raw = socket.create_connection((push["host"], int(push["port"])), timeout=timeout)
    _keep_alive(raw)
    try:
        conn = _client_context(own["key"], own["cert"], push["cert"]).wrap_socket(raw)
    except (OSError, ValueError):
        raw.close()
        raise
    return conn


def _keep_alive(sock: socket.socket) -> None:
    """Probe an idle connection every :data:`KEEPALIVE_SECONDS`: a connection dialed ahead of the next cell waits
    for it, and a VM gone without closing it (or a middlebox that dropped it) then shows as an error instead of
    taking the cell. A VPC drops an established connection idle for 10 minutes
    (https://cloud.google.com/firewall/docs/firewalls#specifications, "Connection tracking"); probes keep it."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if sys.platform == "linux":
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_SECONDS)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_SECONDS // 4)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)


def idle_and_open(conn: ssl.SSLSocket) -> bool:
    """Whether a connection on which nothing was sent yet is still open: the relay sends nothing before a request
    (no session tickets), so anything to read is its end (closed, reset, or a keep-alive probe unanswered)."""
    try:
        readable, _, _ = select.select([conn], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable and conn.fileno() >= 0


def request_line(place: str, raw: bytes, ops: Sequence[overlay.Op] = ()) -> bytes:
    """A sealed request (its Store key and bytes) as one line on the channel, with the job's objects the client
    wrote for it (``ops``: each signed or sealed by the job's key, checked as the Store's would be)."""
    fields = {"place": place, "raw": base64.b64encode(raw).decode(), "ops": overlay.encode_ops(ops)}
    return json.dumps(fields).encode() + b"\n"


def read_request(line: bytes) -> tuple[str, bytes, list[Any]]:
    """A request line's place, sealed bytes and objects as :func:`nbburst.protocol.overlay.encode_ops` made
    them (ValueError, KeyError when it is not one): the cell's controller decodes and checks them."""
    fields = json.loads(line)
    ops = fields.get("ops") or []
    if not isinstance(ops, list):
        raise ValueError("a request's objects are a list")
    return str(fields["place"]), base64.b64decode(fields["raw"]), ops


#: A cell's news up the channel, a line each: output shipped, the cell's end (its objects came before it), its
#: record written to the Store, and the objects its controller wrote (``OBJECTS`` and a JSON list).
OUTPUT, DONE, STORED, OBJECTS = b"L", b"D", b"S", b"O"


def news_line(kind: bytes, ops: Sequence[overlay.Op] = ()) -> bytes:
    """One line of a cell's news."""
    return kind + (b" " + json.dumps(overlay.encode_ops(ops)).encode() if ops else b"") + b"\n"


def read_news(line: bytes) -> tuple[bytes, list[overlay.Op]]:
    """A news line's kind and objects (ValueError when it is not news)."""
    kind, _, rest = line.rstrip(b"\n").partition(b" ")
    return kind, overlay.decode_ops(json.loads(rest)) if rest else []


def read_line(conn: ssl.SSLSocket, limit: int = 1 << 20) -> bytes:
    """One line from ``conn`` read a byte at a time, so nothing after it is taken from the connection."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = conn.recv(1)
        if not byte:
            break
        line += byte
        if len(line) > limit:
            raise ValueError("a line longer than any request")
    return bytes(line)
