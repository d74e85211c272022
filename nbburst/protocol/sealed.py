"""Objects of a job folder sealed to their place, so that a copied, moved or replayed object is refused.

A signature over an object's content proves that the job wrote it, not that the
job wrote it *there*: anyone who can write to the bucket could put an old
``status/0002.json`` over ``status/0003.json``, one checkpoint over another or a
chunk of one log into another, and every copy would still carry a valid
signature. A seal is an HMAC-SHA256 under the job's key (:mod:`.signing`) over
the job id, the object's *place* (its key relative to the job folder), a
version and the content: an object opens only for the job and at the place it
was written for, and its version cannot be changed.

Two forms, one rule:

* a *record* (JSON: spec, statuses, verdict, cancel, lease and relaunch
  records, checkpoint manifests) keeps its fields readable and carries
  ``"seal": {"job", "place", "mac"}``; the MAC covers the canonical JSON of the
  other fields;
* an *object* (bytes: log chunks, results, checkpoints) is :func:`signing.sign`
  of a header line naming job, place and version, then the content; it can be
  written and checked as a stream.

Opening checks the MAC, then the place: a failure raises :class:`Refused`,
whose message says which object and what is wrong with it: :class:`Altered`
(changed, unsealed, or sealed with another job's key: nothing of it can be
trusted) or :class:`Misplaced` (a genuine object of the job, copied to where
it does not belong: a reader may still find the right one elsewhere).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .signing import MAGIC, TAG_SIZE, SignatureError

SEAL = "seal"
_RECORD_DOMAIN = b"nbburst-record-1"
_OBJECT_HEADER = b"NBBSEAL1 "
_MAX_HEADER = 4096
_READ = 8 << 20
_ALIGN = 64  # as payload.ALIGN
_BESIDE = 4 << 20  # from this size on, an object is hashed on another core while it is written


class Refused(SignatureError):
    """An object that is not what its job wrote at its place."""


class Altered(Refused):
    """Not sealed by this job at all: changed, unsealed, or sealed with another job's key."""


class Misplaced(Refused):
    """Sealed by this job for another place: moved or replayed in the Store."""


def _where(job_id: str, place: str) -> str:
    return f"{place} of job {job_id}"


def _altered(job_id: str, place: str) -> Altered:
    return Altered(
        f"{_where(job_id, place)} failed its signature check: it was altered in the Store or written without "
        "this job's key; refusing it"
    )


def _check_claims(job_id: str, place: str, claimed_job: str, claimed_place: str) -> None:
    """The MAC held for the claimed job and place: they must be this object's own."""
    if (claimed_job, claimed_place) != (job_id, place):
        origin = claimed_place if claimed_job == job_id else f"{claimed_place} of job {claimed_job}"
        raise Misplaced(
            f"{_where(job_id, place)} failed its place check: it is {origin}, copied here "
            "(an object moved or replayed in the Store); refusing it"
        )


# -- records (JSON) -----------------------------------------------------------------------------------


def _record_mac(key: bytes, job_id: str, place: str, body: bytes) -> str:
    h = hmac.new(key, digestmod=hashlib.sha256)
    for part in (_RECORD_DOMAIN, job_id.encode(), place.encode()):
        h.update(len(part).to_bytes(4, "big") + part)
    h.update(body)
    return h.hexdigest()


def _canonical(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def seal_record(key: bytes, job_id: str, place: str, raw: bytes) -> bytes:
    """The JSON object ``raw`` with a seal for ``place`` of ``job_id`` (readable JSON, one field more)."""
    fields = json.loads(raw)
    fields.pop(SEAL, None)
    seal = {"job": job_id, "place": place, "mac": _record_mac(key, job_id, place, _canonical(fields))}
    return json.dumps({**fields, SEAL: seal}, sort_keys=True, indent=1).encode()


def open_record(key: bytes, job_id: str, place: str, raw: bytes) -> bytes:
    """The record's JSON without its seal, once the seal holds for ``place`` of ``job_id``; else :class:`Refused`."""
    try:
        fields = json.loads(raw)
    except ValueError:
        fields = None
    if not isinstance(fields, dict) or not isinstance(seal := fields.pop(SEAL, None), dict):
        raise Altered(f"{_where(job_id, place)} is not sealed by nbburst; refusing it")
    body = _canonical(fields)
    claimed_job, claimed_place = str(seal.get("job")), str(seal.get("place"))
    if not hmac.compare_digest(_record_mac(key, claimed_job, claimed_place, body), str(seal.get("mac"))):
        raise _altered(job_id, place)
    _check_claims(job_id, place, claimed_job, claimed_place)
    return body


# -- objects (bytes) ----------------------------------------------------------------------------------


def _header(job_id: str, place: str, version: int) -> bytes:
    """The header line, padded so that the content starts 64-byte aligned in the object: read into aligned
    memory, a sealed payload's arrays are views of it (:func:`.payload.aligned` need not copy it)."""
    line = _OBJECT_HEADER + json.dumps({"job": job_id, "place": place, "version": version}).encode()
    return line + b" " * (-(len(MAGIC) + TAG_SIZE + len(line) + 1) % _ALIGN) + b"\n"


def _claims(job_id: str, place: str, header: bytes) -> tuple[str, str, int]:
    try:
        claims = json.loads(header[len(_OBJECT_HEADER) :])
        return str(claims["job"]), str(claims["place"]), int(claims["version"])
    except (ValueError, KeyError, TypeError):
        raise Altered(f"{_where(job_id, place)} has an unreadable seal; refusing it") from None


def seal(key: bytes, job_id: str, place: str, data: bytes | memoryview, version: int = 0) -> bytes:
    """``data`` sealed for ``place`` of ``job_id`` at ``version``."""
    header = _header(job_id, place, version)
    h = hmac.new(key, header, hashlib.sha256)
    h.update(data)
    return b"".join([MAGIC, h.digest(), header, data])


def open_object(key: bytes, job_id: str, place: str, raw: bytes) -> bytes:
    """The content of an object sealed for ``place`` of ``job_id``; else :class:`Refused`."""
    return open_versioned(key, job_id, place, raw)[1]


def open_versioned(key: bytes, job_id: str, place: str, raw: bytes) -> tuple[int, bytes]:
    """The version an object sealed for ``place`` of ``job_id`` was sealed at, and its content; else
    :class:`Refused`."""
    version, body = open_view(key, job_id, place, raw)
    return version, bytes(body)


def open_view(key: bytes, job_id: str, place: str, raw: bytes | memoryview) -> tuple[int, memoryview]:
    """:func:`open_versioned` without a copy: the content is a view of ``raw`` (a big result read into
    aligned writable memory stays there)."""
    view = memoryview(raw)
    if view.nbytes < len(MAGIC) + TAG_SIZE or bytes(view[: len(MAGIC)]) != MAGIC:
        raise Altered(f"{_where(job_id, place)} is not sealed by nbburst; refusing it")
    tag, body = view[len(MAGIC) : len(MAGIC) + TAG_SIZE], view[len(MAGIC) + TAG_SIZE :]
    if not hmac.compare_digest(bytes(tag), hmac.new(key, body, hashlib.sha256).digest()):
        raise _altered(job_id, place)
    end = bytes(body[:_MAX_HEADER]).find(b"\n")
    if not bytes(body[: len(_OBJECT_HEADER)]) == _OBJECT_HEADER or end < 0:
        raise Altered(f"{_where(job_id, place)} is signed but not sealed to a place; refusing it")
    claimed_job, claimed_place, version = _claims(job_id, place, bytes(body[:end]))
    _check_claims(job_id, place, claimed_job, claimed_place)
    return version, body[end + 1 :]


def write_sealed(
    key: bytes, job_id: str, place: str, parts: Sequence[bytes | memoryview], version: int, path: str | os.PathLike[str]
) -> None:
    """Write the content ``parts`` (one after the other) sealed like :func:`seal` to the file ``path``,
    hashing on another core while the bytes are written (the MAC goes in front once known): a big
    result is copied once, straight from the memory of its arrays."""
    header = _header(job_id, place, version)
    mac = hmac.new(key, header, hashlib.sha256)

    def digest() -> None:
        for part in parts:
            mac.update(part)  # hashlib lets go of the GIL for big buffers

    with open(path, "wb") as f:
        f.write(bytes(len(MAGIC) + TAG_SIZE))
        f.write(header)
        if sum(memoryview(p).nbytes for p in parts) < _BESIDE:
            digest()
            for part in parts:
                f.write(part)
        else:
            with ThreadPoolExecutor(1, thread_name_prefix="nbburst-seal") as pool:
                hashed = pool.submit(digest)
                for part in parts:
                    f.write(part)
                hashed.result()
        f.seek(0)
        f.write(MAGIC + mac.digest())


def seal_file(key: bytes, job_id: str, place: str, path: str | os.PathLike[str], version: int) -> Iterator[bytes]:
    """A file sealed like :func:`seal`, as chunks, for files too big to hold in memory (it is read twice)."""
    header = _header(job_id, place, version)
    h = hmac.new(key, header, hashlib.sha256)
    with open(path, "rb") as f:
        while chunk := f.read(_READ):
            h.update(chunk)
    yield MAGIC + h.digest() + header
    with open(path, "rb") as f:
        while chunk := f.read(_READ):
            yield chunk


def open_file(key: bytes, job_id: str, place: str, sealed: str | os.PathLike[str], dest: str | os.PathLike[str]) -> int:
    """Check a sealed file and put its content at ``dest`` (atomically); returns its version, or :class:`Refused`."""
    dest = Path(dest)
    out = dest.with_name(f".tmp-open-{dest.name}")
    try:
        with open(sealed, "rb") as f:
            head = f.read(len(MAGIC) + TAG_SIZE)
            header = f.readline(_MAX_HEADER)
            if len(head) < len(MAGIC) + TAG_SIZE or not head.startswith(MAGIC):
                raise Altered(f"{_where(job_id, place)} is not sealed by nbburst; refusing it")
            h = hmac.new(key, header, hashlib.sha256)
            with open(out, "wb") as w:
                while chunk := f.read(_READ):
                    h.update(chunk)
                    w.write(chunk)
        if not hmac.compare_digest(h.digest(), head[len(MAGIC) :]):
            raise _altered(job_id, place)
        if not header.startswith(_OBJECT_HEADER) or not header.endswith(b"\n"):
            raise Altered(f"{_where(job_id, place)} is signed but not sealed to a place; refusing it")
        claimed_job, claimed_place, version = _claims(job_id, place, header[:-1])
        _check_claims(job_id, place, claimed_job, claimed_place)
        os.replace(out, dest)
        return version
    finally:
        out.unlink(missing_ok=True)
