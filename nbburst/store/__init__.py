"""Stores: open one from a root URL."""

from __future__ import annotations

from .base import AlreadyExists, NotFound, Store, StoreError

__all__ = ["AlreadyExists", "NotFound", "Store", "StoreError", "open_store"]


def open_store(url: str) -> Store:
    """Open the Store rooted at ``url``: ``gs://bucket/prefix``, ``file://path`` or a path."""
    if url.startswith("gs://"):
        from .gcs import GCSStore

        return GCSStore(url)
    from .local import LocalStore

    return LocalStore(url)
