"""How a session on a remote machine talks to its client: signed requests and a signed state in the Store.

A session's machine on Compute Engine cannot be reached on a Unix socket, so the
client writes its requests to ``sessions/<session id>/requests/<name>.json`` and
the machine's relay (agent/session/relay.py) answers in ``sessions/<session
id>/state.json``. Nothing read from the Store is trusted unless it opens under
the session's secret (the token the client made; the machine reads it from
Secret Manager, never from metadata):

* every record is sealed to its place (:mod:`.sealed`, the session id standing
  for the job): a request copied under another name, or into another session,
  is refused;
* a request names the machine's boot it is for (``boot``): one written for an
  earlier incarnation of the session's machine is refused, and the relay takes
  each name once;
* the job key a cell request carries is encrypted (AES-GCM, under a key derived
  from the session's secret with HKDF and bound to the session and the
  request's name): a reader of the bucket learns which job runs, not its key.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import time
from collections.abc import Sequence
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from . import sealed

#: What a request asks: run a cell's attempt, say the state, stop the session.
CELL, STATE, STOP = "cell", "state", "stop"
#: The session VM's instance attribute the client changes after writing a request to the Store while the session
#: is quiet: its relay, then listing the requests only now and then, holds a hanging read on it and lists at once.
WAKE_ATTRIBUTE = "nbburst-wake"
_NONCE_BYTES = 12


def folder(session_id: str) -> str:
    return f"sessions/{session_id}/"


def requests_prefix(session_id: str) -> str:
    return folder(session_id) + "requests/"


def state_key(session_id: str) -> str:
    return folder(session_id) + "state.json"


def _context(session_id: str, place: str) -> bytes:
    return f"nbburst session job key\0{session_id}\0{place}".encode()


def _cipher(secret: bytes, context: bytes) -> AESGCM:
    return AESGCM(HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=context).derive(secret))


def seal_request(
    secret: bytes,
    session_id: str,
    boot: int,
    kind: str,
    job: str = "",
    key: bytes = b"",
    attempt: int = 0,
    imports: Sequence[str] = (),
) -> tuple[str, bytes]:
    """A new request (its Store key, its bytes): ``kind`` for boot ``boot`` of the session's machine; a cell
    request carries the job's URL, attempt and key (encrypted), and the modules its code imports."""
    place = requests_prefix(session_id) + f"{time.time_ns():020d}-{secrets.token_hex(4)}.json"
    fields: dict[str, Any] = {"kind": kind, "boot": boot, "job": job, "attempt": attempt, "key_sealed": ""}
    fields["imports"] = list(imports)
    if key:
        nonce = os.urandom(_NONCE_BYTES)
        context = _context(session_id, place)
        fields["key_sealed"] = base64.b64encode(nonce + _cipher(secret, context).encrypt(nonce, key, context)).decode()
    return place, sealed.seal_record(secret, session_id, place, json.dumps(fields).encode())


def open_request(secret: bytes, session_id: str, boot: int, place: str, raw: bytes) -> dict[str, Any]:
    """The request at ``place`` with its job key in the clear (``key``, hex); :class:`.sealed.Refused` when it is
    not the session's, not written for this place, or for another boot of its machine."""
    request = json.loads(sealed.open_record(secret, session_id, place, raw))
    if request.get("boot") != boot:
        raise sealed.Misplaced(f"{place} is for boot {request.get('boot')} of the session's machine, not {boot}")
    request["key"] = ""
    if request.get("key_sealed"):
        blob = base64.b64decode(request.pop("key_sealed"))
        context = _context(session_id, place)
        request["key"] = _cipher(secret, context).decrypt(blob[:_NONCE_BYTES], blob[_NONCE_BYTES:], context).hex()
    return request


def seal_state(secret: bytes, session_id: str, state: dict[str, Any]) -> bytes:
    """The session's state as its relay writes it (the warm parent's ``describe()``, ``boot``, ``answers``)."""
    return sealed.seal_record(secret, session_id, state_key(session_id), json.dumps(state).encode())


def open_state(secret: bytes, session_id: str, raw: bytes) -> dict[str, Any]:
    """The session's state; :class:`.sealed.Refused` when its relay did not write it."""
    return json.loads(sealed.open_record(secret, session_id, state_key(session_id), raw))
