"""A ``--workers`` job's cluster record: where each attempt's Dask scheduler listens, as its agent wrote it.

The agent beside the cell writes one per attempt (``cluster/<attempt>.json``, sealed); worker machines read the
newest to know whom to join, the client to show the job's dashboard. Kept here because both sides read it.
"""

from __future__ import annotations

import json
from typing import Any

from ..store import NotFound
from .folder import JobFolder


def latest(folder: JobFolder) -> dict[str, Any] | None:
    """The newest attempt's cluster record (verified), or None before any scheduler started."""
    for key in reversed(folder.store.list(folder.layout.cluster_prefix)):
        try:
            return json.loads(folder.get_record(key))
        except NotFound:
            continue
    return None
