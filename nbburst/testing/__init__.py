"""Offline stand-ins for Google Cloud, for nbburst's tests and for testing notebooks offline.

- :class:`ComputeEmulator`: the Compute Engine REST API subset nbburst calls, on 127.0.0.1,
  reached by the real ``google.cloud.compute_v1`` clients; each instance is a real local process
  group running its startup script in a folder of its own, beside its own metadata server.
  It can preempt instances, run out of capacity and enforce quotas.
- :class:`MetadataServer`: an emulated metadata server (``/computeMetadata/v1``).
- ``SecretManagerEmulator`` (``nbburst.testing.secretmanager``): Secret Manager's REST API, through which jobs
  hand their keys to their VMs.
- ``GCSEmulator`` (``nbburst.testing.gcs``): a Cloud Storage emulator.
- ``python -m nbburst.testing`` starts the emulators and prints the environment for nbburst (or writes
  it to ``--env-file PATH``, or runs ``-- COMMAND`` under it; ``pip install 'nbburst[emulator]'``);
  ``pytest_plugins = ["nbburst.testing.pytest_plugin"]`` gives the fixtures.
"""

from nbburst.testing.compute.catalog import Image
from nbburst.testing.compute.emulator import ComputeEmulator
from nbburst.testing.compute.resources import ComputeError
from nbburst.testing.metadata import MetadataServer

__all__ = ["ComputeEmulator", "ComputeError", "Image", "MetadataServer"]


def __getattr__(name: str):
    if name == "GCSEmulator":  # imported on demand: it may need an emulator package
        from nbburst.testing.gcs import GCSEmulator

        return GCSEmulator
    raise AttributeError(f"module 'nbburst.testing' has no attribute {name!r}")
