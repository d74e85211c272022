"""nbburst: run a notebook cell on a big, cheap, preemptible machine as if it ran in the kernel.

``%load_ext nbburst`` registers ``%%burst``; ``nbburst.submit(fn, ...)`` is the
Python API. This module stays light (imports happen on first use) because the
agent imports the package on every machine boot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .client.burst import Job


def submit(
    fn: Any,
    *args: Any,
    backend: str | None = None,
    cores: int | None = None,
    memory: float | None = None,
    timeout: str | float | None = None,
    name: str | None = None,
    resume: str | None = None,
    budget: str | float | None = None,
    **kwargs: Any,
) -> Job:
    """Run ``fn(*args, **kwargs)`` on a machine and return a :class:`~nbburst.client.Job`.

    Options mirror ``%%burst`` (``resume=JOB``: begin with that job's latest checkpoints; ``budget=2.50``: a
    dollar cap on its machines); anything else is passed to ``fn``.
    """
    from .client.burst import Burst

    burst = Burst()
    opts: dict[str, Any] = {"cores": cores, "memory": memory, "name": name, "resume": resume}
    if budget is not None:
        opts["budget"] = budget
    if backend is not None:
        opts["backend"] = backend
    if timeout is not None:
        opts["timeout"] = timeout
    return burst.submit(fn, *args, options=burst.options(**opts), **kwargs)


def progress(done: float, total: float | None = None, desc: str = "") -> None:
    """Report progress from inside a burst cell (a no-op elsewhere)."""
    from .reporting import progress as report

    report(done, total, desc)


_LAZY = {"checkpoint": ".checkpoint", "state": ".protocol.state"}


def __getattr__(name: str) -> Any:
    """``nbburst.checkpoint`` (save/load/range/folder/on_preempt) and ``nbburst.state`` (register the
    process state burst cells carry), imported on first use."""
    if name in _LAZY:
        import importlib

        return importlib.import_module(_LAZY[name], __name__)
    raise AttributeError(f"module 'nbburst' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    from .ui.magic import BurstMagics

    ipython.register_magics(BurstMagics(ipython))


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The Jupyter server extension: REST API for the sidebar and the hosted supervisor."""
    return [{"module": "nbburst.server"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """The prebuilt JupyterLab extension (the "Burst jobs" sidebar)."""
    return [{"src": "labextension", "dest": "nbburst-labextension"}]
