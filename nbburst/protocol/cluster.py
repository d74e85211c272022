"""A ``--workers`` job's cluster record: where each attempt's Dask scheduler listens, as its agent wrote it.

The agent beside the cell writes one per attempt (``cluster/<attempt>.json``, sealed); worker machines read the
newest to know whom to join, the client to show the job's dashboard. Kept here because both sides read it.

The record carries the workers' TLS key for the attempt's cluster. Sealing proves who wrote it but hides
nothing, and whoever holds that key joins the cluster (and runs code on it); so the key is stored encrypted
(AES-GCM) under a key derived from the job key (HKDF), bound to the job and attempt: a reader of the bucket
without the job key learns the scheduler's address, never how to join it.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..store import NotFound
from .folder import JobFolder
from .signing import SignatureError

_NONCE_BYTES = 12


def _context(job_id: str, attempt: int) -> bytes:
    return f"nbburst cluster tls key\0{job_id}\0{attempt}".encode()


def _cipher(job_key: bytes, job_id: str, attempt: int) -> AESGCM:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_context(job_id, attempt)).derive(job_key)
    return AESGCM(derived)


def seal_tls(tls: dict[str, Any], job_key: bytes, job_id: str, attempt: int) -> dict[str, Any]:
    """The workers' TLS settings for the record: the private key (``key``) encrypted as ``key_sealed``."""
    nonce = os.urandom(_NONCE_BYTES)
    secret = _cipher(job_key, job_id, attempt).encrypt(nonce, tls["key"].encode(), _context(job_id, attempt))
    return {k: v for k, v in tls.items() if k != "key"} | {"key_sealed": base64.b64encode(nonce + secret).decode()}


def open_tls(sealed: dict[str, Any], job_key: bytes, job_id: str, attempt: int) -> dict[str, Any]:
    """The workers' TLS settings from a record (:func:`seal_tls` undone); raises ``cryptography``'s InvalidTag
    when the key was sealed for another job or attempt, or altered."""
    raw = base64.b64decode(sealed["key_sealed"])
    nonce, secret = raw[:_NONCE_BYTES], raw[_NONCE_BYTES:]
    key = _cipher(job_key, job_id, attempt).decrypt(nonce, secret, _context(job_id, attempt)).decode()
    return {k: v for k, v in sealed.items() if k != "key_sealed"} | {"key": key}


def latest(folder: JobFolder) -> dict[str, Any] | None:
    """The newest attempt's cluster record (verified), or None before any scheduler started. A record that does
    not verify (planted by someone without the job's key) is passed over, so it cannot keep workers away from
    the real scheduler."""
    for key in reversed(folder.store.list(folder.layout.cluster_prefix)):
        try:
            return json.loads(folder.get_record(key))
        except (NotFound, SignatureError):
            continue
    return None
