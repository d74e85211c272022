"""What a submission uploads before its spec: the inputs as content-addressed blobs, the process state
the cell relies on, the ``--files``.

A value that cannot be pickled stops the submission here, naming it, before anything is launched; an
unchanged value is not hashed or uploaded twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import CaptureError, UsageError
from ..options import file_destination
from ..protocol import payload, transfer
from ..protocol import processstate as process_state
from ..protocol.job import BLOBS_PREFIX, blob_key
from ..store import Store
from .capture import unpicklable_message

# fingerprint of exact bytes -> SHA-256 address, per store: saves re-hashing unchanged data.
_ADDRESS_CACHE: dict[tuple[str, str], str] = {}


def encode_all(
    values: dict[str, Any],
    optional: frozenset[str] = frozenset(),
    namespace: dict[str, Any] | None = None,
    inner: dict[str, dict[int, Any]] | None = None,
    named: set[str] | None = None,
) -> dict[str, payload.Encoded]:
    """Every input as a blob (see :func:`transfer.encode_inputs`); one that cannot be pickled stops the
    submission, naming it, unless it is ``optional``."""
    encoded, failed = transfer.encode_inputs(values, optional, namespace, inner, named)
    for name, exc in failed.items():
        if name not in optional:
            shown = "a function argument" if name.startswith("__") else name
            raise CaptureError(unpicklable_message(shown, values[name], exc)) from None
    return encoded


def encode_state() -> payload.Encoded:
    """The process state the cell relies on (:mod:`nbburst.protocol.processstate`)."""
    return payload.encode(process_state.capture())


def check_files(paths: list[str]) -> dict[str, Path]:
    """``--files``: each one a file, by where it lands in the cell's working folder."""
    files = {}
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.is_file():
            raise UsageError(f"--files: {raw!r} is not a file (folders: pass each file, or archive them)")
        files[file_destination(raw)] = path
    return files


def upload_blob(store: Store, enc: payload.Encoded) -> str:
    """Upload ``enc`` as a content-addressed blob unless the Store already has it; returns its address."""
    fp = payload.fingerprint(enc.parts)
    address = _ADDRESS_CACHE.get((store.url, fp))
    if address is None or not store.exists(blob_key(address)):
        address = store.put_addressed(BLOBS_PREFIX, enc.chunks, lambda: payload.digest(enc.parts))
    _ADDRESS_CACHE[(store.url, fp)] = address
    return address


def upload_file(store: Store, path: Path) -> str:
    """Upload a file's bytes as a blob (``--files``) unless the Store has them; returns the address."""
    data = path.read_bytes()
    return store.put_addressed(BLOBS_PREFIX, lambda: [data], lambda: payload.digest_bytes(data))
