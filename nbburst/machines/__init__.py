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

__all__ = ["ADAPTERS", "MachineInfo", "Machines", "Plan", "machines_class", "open_machines"]

#: The adapters of nbburst's own backends, ``"module:Class"`` by name: the protocol's table names the backends
#: (both sides agree on the names) and leaves their adapters to this layer.
ADAPTERS = {"local": "nbburst.machines.local:LocalMachines", "gce": "nbburst.machines.gce:GCEMachines"}


def machines_class(backend: str) -> type[Machines]:
    """The Machines adapter class of ``backend`` (imported now)."""
    entry = backends.get(backend)
    adapter = entry.machines or ADAPTERS[entry.name]
    return loader.load(adapter, f"the {backend} backend cannot be used here", entry.install_hint)


def open_machines(backend: str, settings: NBBurst) -> Machines:
    """A Machines adapter for ``backend`` configured by ``settings``."""
    return machines_class(backend)(settings)
