"""Stores, chosen by the root URL's scheme from one registry; each adapter imported on first use."""

from __future__ import annotations

import importlib
from urllib.parse import urlsplit

from ..errors import UsageError
from .base import AlreadyExists, NotFound, Store, StoreError

__all__ = ["AlreadyExists", "NotFound", "Store", "StoreError", "open_store", "registry"]

#: URL scheme -> (``"module:Class"``, what to install when it cannot be imported). A plain path is ``file``.
registry: dict[str, tuple[str, str]] = {
    "file": ("nbburst.store.local:LocalStore", ""),
    "gs": ("nbburst.store.gcs:GCSStore", "pip install google-cloud-storage"),
    "flaky": ("nbburst.testing.faults:FlakyStore", ""),  # a folder that fails now and then (chaos tests)
}


def scheme_of(url: str) -> str:
    """``gs://b/p`` -> ``gs``; a path (also a Windows drive letter) -> ``file``."""
    scheme = urlsplit(url).scheme
    return scheme if len(scheme) > 1 else "file"


def open_store(url: str) -> Store:
    """Open the Store rooted at ``url``: ``gs://bucket/prefix``, ``file://path`` or a path."""
    scheme = scheme_of(url)
    if scheme not in registry:
        raise UsageError(f"no Store for {scheme}:// URLs ({url}); use one of: {', '.join(registry)} (or a path)")
    target, hint = registry[scheme]
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot open {url}: {exc}" + (f"; install it with `{hint}`" if hint else "")) from exc
    return getattr(module, class_name)(url)
