"""Machines adapters, chosen by backend name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import MachineInfo, Machines, Plan

if TYPE_CHECKING:
    from ..config import NBBurst

__all__ = ["MachineInfo", "Machines", "Plan", "open_machines"]


def open_machines(backend: str, settings: NBBurst) -> Machines:
    if backend == "gce":
        from .gce.machines import GCEMachines

        return GCEMachines(settings)
    from .local import LocalMachines

    return LocalMachines(settings)
