"""Pickled values as content-addressed blobs.

A value is pickled once with protocol 5 and out-of-band buffers, so a 1 GiB
array is never copied into a bytes object: the blob is streamed to the Store
straight from the array's memory. Its address is a SHA-256 tree hash over
64 MiB chunks, computed on all cores; the signed ``inputs.json`` pins each
address, which is what makes an unsigned blob safe to unpickle.

Re-submitting unchanged data must not cost a SHA-256 pass, so the client keeps
a cache from a fast non-cryptographic fingerprint (xxh3-128) of the exact
bytes to the SHA-256 address. The fingerprint never leaves the process and is
never trusted by the machine; it only saves the client from hashing again.

Arrays must arrive as they were in memory: compiled code (scipy's splines,
BLAS kernels) refuses or mis-computes on buffers at odd addresses. Every
out-of-band buffer therefore starts at a 64-byte boundary of the blob, and a
blob is decoded from 64-byte-aligned writable memory (copied there once if it
arrives elsewhere), so each array lands aligned and, unless it was read-only,
writeable.

A blob holds one or more pickle *bodies*, each with its own buffers: one value
(:func:`encode`), or several values pickled in sequence by one pickler, whose
shared references stay shared (see :mod:`nbburst.protocol.namespace`).
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import pickle
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

MAGIC = b"NBBLOB2\n"
ALIGN = 64  # every buffer starts at a multiple of this in the blob, and the blob in memory
_ZEROS = memoryview(bytes(ALIGN))
TREE_CHUNK = 64 << 20
#: Slices of :func:`fingerprint`, hashed on all cores (never part of an address).
FP_CHUNK = 16 << 20
_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor  # not needed by the agent for small jobs

        _POOL = ThreadPoolExecutor(max(2, os.cpu_count() or 2), thread_name_prefix="nbburst-hash")
    return _POOL


def _forget_pool() -> None:
    """A forked child inherits the pool object but not its threads."""
    global _POOL
    _POOL = None


os.register_at_fork(after_in_child=_forget_pool)


def _map(fn, chunks: list) -> list[bytes]:
    return [fn(c) for c in chunks] if len(chunks) == 1 else list(_pool().map(fn, chunks))


class BlobError(Exception):
    """A blob is corrupt or does not match the address it was fetched by."""


@dataclass
class Encoded:
    """A pickled value as a header plus zero-copy buffers, ready to stream."""

    parts: list[memoryview]

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    def chunks(self, size: int = 64 << 20) -> Iterator[memoryview]:
        for part in self.parts:
            for i in range(0, part.nbytes, size):
                yield part[i : i + size]

    def tobytes(self) -> bytes:
        return b"".join(self.parts)


def encode(value: Any) -> Encoded:
    """Pickle ``value`` (cloudpickle, protocol 5, buffers out of band)."""
    from . import codepickle

    buffers: list[pickle.PickleBuffer] = []
    body = codepickle.dumps(value, buffer_callback=buffers.append)
    return assemble([(memoryview(body), [b.raw() for b in buffers])])


def _padding(pos: int) -> list[memoryview]:
    gap = -pos % ALIGN
    return [_ZEROS[:gap]] if gap else []


def assemble(bodies: list[tuple[memoryview, list[memoryview]]]) -> Encoded:
    """A blob of pickle bodies, each with its out-of-band buffers, every buffer 64-byte aligned.

    Layout: magic, body count, (size, buffer count) per body, the size of every
    buffer; padding; the bodies back to back; each buffer after padding.
    """
    views = [_bytes_view(v) for _, bufs in bodies for v in bufs]
    header = (
        MAGIC
        + struct.pack("<Q", len(bodies))
        + b"".join(struct.pack("<QQ", body.nbytes, len(bufs)) for body, bufs in bodies)
        + b"".join(struct.pack("<Q", v.nbytes) for v in views)
    )
    parts = [memoryview(header), *_padding(len(header))]
    pos = sum(p.nbytes for p in parts)
    for body, _ in bodies:
        parts.append(body)
        pos += body.nbytes
    for view in views:
        pad = _padding(pos)
        parts += [*pad, view]
        pos += sum(p.nbytes for p in pad) + view.nbytes
    return Encoded(parts)


def private_memory(size: int) -> mmap.mmap:
    """Page-aligned writable memory of this process alone: a forked child that writes into it writes into its
    own copy (a shared anonymous map would change it for the parent and every other child too)."""
    return mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def aligned(data: bytes | bytearray | memoryview) -> memoryview:
    """``data`` as writable memory starting at a 64-byte boundary: itself if it already is, else a copy."""
    view = _bytes_view(memoryview(data))
    if not view.readonly and view.nbytes and ctypes.addressof(ctypes.c_char.from_buffer(view)) % ALIGN == 0:
        return view
    copy = memoryview(private_memory(view.nbytes))[: view.nbytes]
    copy[:] = view
    return copy


@dataclass
class Blob:
    """A parsed blob: its pickle bodies and, per body, its buffers (views into aligned memory)."""

    bodies: list[memoryview]
    buffers: list[list[memoryview]]

    @classmethod
    def parse(cls, data: bytes | bytearray | memoryview) -> Blob:
        view = aligned(data)
        if bytes(view[: len(MAGIC)]) != MAGIC:
            raise BlobError("not an nbburst blob (or one written by another version of nbburst)")
        try:
            (nbodies,) = struct.unpack_from("<Q", view, len(MAGIC))
            pos = len(MAGIC) + 8
            shape = [struct.unpack_from("<QQ", view, pos + 16 * i) for i in range(nbodies)]
            pos += 16 * nbodies
            nbuf = sum(n for _, n in shape)
            sizes = struct.unpack_from(f"<{nbuf}Q", view, pos)
        except struct.error:
            raise BlobError("blob is truncated") from None
        pos += 8 * nbuf
        pos += -pos % ALIGN
        bodies = []
        for size, _ in shape:
            bodies.append(view[pos : pos + size])
            pos += size
        flat = []
        for size in sizes:
            pos += -pos % ALIGN
            flat.append(view[pos : pos + size])
            pos += size
        if pos != view.nbytes:
            raise BlobError("blob is truncated or has trailing bytes")
        buffers, i = [], 0
        for _, n in shape:
            buffers.append(flat[i : i + n])
            i += n
        return cls(bodies, buffers)


def decode(data: bytes | bytearray | memoryview) -> Any:
    """Unpickle a one-value blob; arrays are views into aligned writable memory (``data`` itself if it is)."""
    blob = Blob.parse(data)
    if len(blob.bodies) != 1:
        raise BlobError(f"expected a blob of one value, found {len(blob.bodies)}")
    return pickle.loads(blob.bodies[0], buffers=blob.buffers[0])


def _bytes_view(part: memoryview) -> memoryview:
    return part if part.format == "B" and part.ndim == 1 else part.cast("B")


def _tree_chunks(parts: list[memoryview]) -> list[list[memoryview]]:
    """The concatenated stream cut at TREE_CHUNK boundaries, each chunk as the pieces it spans (no copies)."""
    chunks: list[list[memoryview]] = [[]]
    filled = 0
    for part in map(_bytes_view, parts):
        i = 0
        while i < part.nbytes:
            if filled == TREE_CHUNK:
                chunks.append([])
                filled = 0
            take = min(part.nbytes - i, TREE_CHUNK - filled)
            chunks[-1].append(part[i : i + take])
            filled += take
            i += take
    return chunks


def _sha256_of(pieces: list[memoryview]) -> bytes:
    h = hashlib.sha256()
    for piece in pieces:
        h.update(piece)
    return h.digest()


def digest(parts: list[memoryview]) -> str:
    """SHA-256 tree hash: sha256 over the sha256 of each 64 MiB chunk of the concatenated bytes.

    It depends only on the bytes, not on how they are split into parts, so the
    machine can check a blob it reads back as one buffer.
    """
    leaves = _map(_sha256_of, _tree_chunks(parts))
    return hashlib.sha256(b"".join(leaves)).hexdigest()


def digest_bytes(data: bytes | bytearray | memoryview) -> str:
    return digest([memoryview(data)])


def fingerprint(parts: list[memoryview]) -> str:
    """Fast fingerprint of the exact parts (xxh3-128 over 16 MiB slices of each part, all cores: a 100 MiB
    array keeps both cores of a small machine busy).

    Unlike :func:`digest` it hashes each part on its own (no joining), so the
    same bytes split differently fingerprint differently: that only costs a
    cache miss, never a wrong address.
    """
    import xxhash

    sizes = b"".join(p.nbytes.to_bytes(8, "little") for p in parts)
    if sum(p.nbytes for p in parts) < FP_CHUNK:
        # small (a Figure's pickle and its thousands of small arrays): one streaming pass, each part as it lies,
        # then the sizes that say where each ended; handing slices to threads costs more than it saves
        hasher = xxhash.xxh3_128()
        for part in parts:
            hasher.update(part)
        hasher.update(sizes)
        return hasher.hexdigest()
    slices = [p[i : i + FP_CHUNK] for p in map(_bytes_view, parts) for i in range(0, max(p.nbytes, 1), FP_CHUNK)]
    return xxhash.xxh3_128_hexdigest(b"".join(_map(xxhash.xxh3_128_digest, slices)) + sizes)
