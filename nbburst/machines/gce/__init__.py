"""The Compute Engine backend: :class:`GCEMachines` (spot VMs with google-cloud-compute)."""

from .machines import GCEMachines

__all__ = ["GCEMachines"]
