"""HMAC-SHA256 signing of everything pickled that crosses the Store.

Unpickling runs code, so a pickle from the Store is loaded only after its
signature checks out under the per-job key. The key never enters the Store:
the client keeps it in its key ring and hands it to the machine out of band
(process environment locally, instance metadata on Compute Engine).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"NBBSIG1\n"
#: Bytes of an HMAC-SHA256 tag.
TAG_SIZE = 32


class SignatureError(Exception):
    """A signed object is missing its signature or was altered."""


class NoKey(SignatureError):
    """This machine's key ring has no key for the job: nothing of it can be verified here."""


def new_key() -> bytes:
    return secrets.token_bytes(32)


def mac(key: bytes, data: bytes | memoryview) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


def sign(key: bytes, data: bytes) -> bytes:
    """Prefix ``data`` with a header and its HMAC."""
    return MAGIC + mac(key, data) + data


def verify(key: bytes, signed: bytes, what: str = "payload") -> bytes:
    """Return the payload of ``signed``, or raise :class:`SignatureError`."""
    if not signed.startswith(MAGIC) or len(signed) < len(MAGIC) + TAG_SIZE:
        raise SignatureError(f"{what} is not signed by nbburst; refusing to load it")
    view = memoryview(signed)
    tag = bytes(view[len(MAGIC) : len(MAGIC) + TAG_SIZE])
    payload = view[len(MAGIC) + TAG_SIZE :]
    if not hmac.compare_digest(tag, mac(key, payload)):
        raise SignatureError(
            f"{what} failed its signature check: it was altered in the store or signed with another "
            "job's key; refusing to load it"
        )
    return bytes(payload)


def sign_text(key: bytes, data: bytes) -> str:
    return mac(key, data).hex()


def verify_text(key: bytes, data: bytes, signature: str, what: str) -> None:
    if not hmac.compare_digest(sign_text(key, data), signature or ""):
        raise SignatureError(f"{what} failed its signature check; refusing to run it")


_READ = 8 << 20


def sign_file(key: bytes, path: str | os.PathLike[str]) -> Iterator[bytes]:
    """The signed form of a file (header, HMAC, contents) as chunks, for files too big to hold in memory."""
    h = hmac.new(key, digestmod=hashlib.sha256)
    with open(path, "rb") as f:
        while chunk := f.read(_READ):
            h.update(chunk)
    yield MAGIC + h.digest()
    with open(path, "rb") as f:
        while chunk := f.read(_READ):
            yield chunk


def verify_file(key: bytes, signed: str | os.PathLike[str], dest: str | os.PathLike[str], what: str) -> None:
    """Check a signed file and put its contents at ``dest`` (atomically), or raise :class:`SignatureError`."""
    dest = Path(dest)
    out = dest.with_name(f".tmp-ok-{dest.name}")
    with open(signed, "rb") as f:
        head = f.read(len(MAGIC) + TAG_SIZE)
        if len(head) < len(MAGIC) + TAG_SIZE or not head.startswith(MAGIC):
            raise SignatureError(f"{what} is not signed by nbburst; refusing to load it")
        h = hmac.new(key, digestmod=hashlib.sha256)
        with open(out, "wb") as w:
            while chunk := f.read(_READ):
                h.update(chunk)
                w.write(chunk)
    if not hmac.compare_digest(h.digest(), head[len(MAGIC) :]):
        os.unlink(out)
        raise SignatureError(f"{what} failed its signature check; refusing to load it")
    os.replace(out, dest)


@dataclass(frozen=True)
class KeyEntry:
    """One key of the ring: its job, the Store the job was submitted to ("" if not recorded), its age."""

    job_id: str
    store: str
    created: float


class KeyRing:
    """Per-job keys kept on the client's disk (mode 0600), never in the Store.

    Keeping them on disk is what lets a restarted kernel, the CLI or the Jupyter
    server verify a result later. Each key file also names the Store of its job
    (a second line), so ``nbburst gc`` can tell a key whose job was never
    written (a submission killed half-way) from a key of a job in another Store.
    """

    def __init__(self, folder: str | os.PathLike[str]):
        self.folder = Path(folder)

    def _path(self, job_id: str) -> Path:
        return self.folder / f"{job_id}.key"

    def create(self, job_id: str, store: str = "") -> bytes:
        return self.add(job_id, new_key(), store)

    def add(self, job_id: str, key: bytes, store: str = "") -> bytes:
        """Keep ``key`` for ``job_id`` (made elsewhere: the watcher VM reads it from the job's secret); once."""
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self._path(job_id), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key.hex().encode() + (f"\n{store}\n".encode() if store else b""))
        return key

    def _lines(self, job_id: str) -> list[str]:
        return self._path(job_id).read_text().splitlines()

    def get(self, job_id: str) -> bytes:
        try:
            return bytes.fromhex(self._lines(job_id)[0].strip())
        except (FileNotFoundError, IndexError):
            raise NoKey(
                f"no signing key for job {job_id} in {self.folder}: it was submitted from another "
                "machine or user, so nothing of it can be verified here (cannot verify: no key)"
            ) from None

    def has(self, job_id: str) -> bool:
        return self._path(job_id).exists()

    def delete(self, job_id: str) -> None:
        self._path(job_id).unlink(missing_ok=True)

    def entries(self) -> list[KeyEntry]:
        """Every key of the ring, with the Store its job went to and when the key was made."""
        found = []
        for path in sorted(self.folder.glob("*.key")):
            try:
                lines = path.read_text().splitlines()
                created = path.stat().st_mtime
            except FileNotFoundError:
                continue  # deleted meanwhile
            found.append(KeyEntry(path.stem, lines[1].strip() if len(lines) > 1 else "", created))
        return found
