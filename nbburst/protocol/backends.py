"""The backends a job can name: one table, from which every list of backend names derives.

Like fsspec's ``known_implementations``, each entry names its Machines adapter as a
``"module:Class"`` string, imported only when a backend is first used
(:func:`nbburst.machines.open_machines`), with the install hint shown if that import
fails. The table sits in the protocol because a job records its backend's name and both
sides (options, config, pricing, tables, the agent) must agree on what names exist and
what they mean, without importing any adapter. nbburst's own backends name no adapter here:
theirs sit a layer above, in :data:`nbburst.machines.ADAPTERS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError


@dataclass(frozen=True)
class Backend:
    """What nbburst knows about a backend before importing it."""

    name: str
    #: The Machines adapter, ``"module:Class"``; empty for nbburst's own (:data:`nbburst.machines.ADAPTERS`).
    machines: str
    #: What to install when the adapter cannot be imported.
    install_hint: str
    #: Machines elsewhere: they share data through a cloud bucket and are billed by the provider.
    remote: bool
    #: One line for ``--help`` and error messages.
    summary: str


_REGISTRY: dict[str, Backend] = {}


def register(backend: Backend) -> None:
    """Add (or replace) a backend; third-party adapters call this when they are imported."""
    _REGISTRY[backend.name] = backend


register(
    Backend(
        name="local",
        machines="",
        install_hint="",
        remote=False,
        summary="processes on this machine (no cloud account)",
    )
)
register(
    Backend(
        name="gce",
        machines="",
        install_hint="pip install google-cloud-compute google-cloud-storage",
        remote=True,
        summary="spot VMs on Google Compute Engine",
    )
)


def names() -> tuple[str, ...]:
    """Every known backend name, in registration order."""
    return tuple(_REGISTRY)


def get(name: str) -> Backend:
    """The backend called ``name``; an unknown name is a :class:`UsageError` listing the known ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UsageError(f"--backend: {name!r} is not a backend; choose one of {', '.join(_REGISTRY)}") from None


def is_remote(name: str | None) -> bool:
    """Whether ``name`` runs machines elsewhere (billed, data through a bucket); unknown names are not."""
    backend = _REGISTRY.get(name or "")
    return bool(backend and backend.remote)
