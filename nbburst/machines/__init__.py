"""Machines adapters, chosen by backend name from one registry (:mod:`nbburst.protocol.backends`).

The adapter's module is imported on first use, so the local backend never imports a cloud
client; a missing dependency is a :class:`UsageError` that says what to install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..protocol import backends
from ..store import loader
from .base import MachineInfo, Machines, Plan

if TYPE_CHECKING:
    from ..config import NBBurst

__all__ = ["MachineInfo", "Machines", "Plan", "machines_class", "open_machines"]


def machines_class(backend: str) -> type[Machines]:
    """The Machines adapter class of ``backend`` (imported now)."""
    entry = backends.get(backend)
    return loader.load(entry.machines, f"the {backend} backend cannot be used here", entry.install_hint)


def open_machines(backend: str, settings: NBBurst) -> Machines:
    """A Machines adapter for ``backend`` configured by ``settings``."""
    return machines_class(backend)(settings)
