"""Stores, chosen by the root URL's scheme from one registry; each adapter imported on first use.

The registry holds nbburst's own Stores. Others come from ``$NBBURST_STORES`` (``scheme=module:Class``
entries separated by spaces), which the processes a process starts inherit: the agents of its local jobs and
its background supervisor then open a job's URL with the same Store. That is how the tests' flaky folder
(:mod:`nbburst.testing.faults`) reaches them without nbburst itself naming it.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from ..errors import UsageError
from . import loader
from .base import AlreadyExists, NotFound, Store, StoreError

__all__ = ["ENV_STORES", "AlreadyExists", "NotFound", "Store", "StoreError", "open_store", "registry", "schemes"]

#: URL scheme -> (``"module:Class"``, what to install when it cannot be imported). A plain path is ``file``.
registry: dict[str, tuple[str, str]] = {
    "file": ("nbburst.store.local:LocalStore", ""),
    "gs": ("nbburst.store.gcs:GCSStore", "pip install google-cloud-storage"),
}

#: Stores added for this process and the ones it starts: ``scheme=module:Class``, separated by spaces.
ENV_STORES = "NBBURST_STORES"


def schemes() -> dict[str, tuple[str, str]]:
    """Every Store this process can open, by scheme: the registry's, then those ``$NBBURST_STORES`` adds."""
    known = dict(registry)
    for entry in os.environ.get(ENV_STORES, "").split():
        scheme, _, target = entry.partition("=")
        if not scheme or ":" not in target:
            raise UsageError(
                f"${ENV_STORES}: {entry!r} is not scheme=module:Class "
                "(for example flaky=nbburst.testing.faults:FlakyStore); fix or unset it"
            )
        known.setdefault(scheme, (target, ""))
    return known


def scheme_of(url: str) -> str:
    """``gs://b/p`` -> ``gs``; a path (also a Windows drive letter) -> ``file``."""
    scheme = urlsplit(url).scheme
    return scheme if len(scheme) > 1 else "file"


def open_store(url: str) -> Store:
    """Open the Store rooted at ``url``: ``gs://bucket/prefix``, ``file://path`` or a path."""
    scheme, known = scheme_of(url), schemes()
    if scheme not in known:
        raise UsageError(f"no Store for {scheme}:// URLs ({url}); use one of: {', '.join(known)} (or a path)")
    target, hint = known[scheme]
    return loader.load(target, f"cannot open {url}", hint)(url)
