"""nbburst: run a notebook cell on a big, cheap, preemptible machine as if it ran in the kernel.

``%load_ext nbburst`` registers ``%%burst``; ``nbburst.submit(fn, ...)`` is the
Python API. This module stays light (imports happen on first use) because the
agent imports the package on every machine boot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .client.burst import submit as submit


def progress(done: float, total: float | None = None, desc: str = "") -> None:
    """Report progress from inside a burst cell (a no-op elsewhere)."""
    from .reporting import progress as report

    report(done, total, desc)


_LAZY = {"checkpoint": ".checkpoint", "state": ".protocol.processstate"}
#: Functions users call as ``nbburst.<name>``, with the module that defines them. ``submit`` lives with the
#: client, its keywords made from the declared cell options (nbburst/options.py), which this module leaves
#: unimported until first use.
_FUNCTIONS = {"submit": ".client.burst"}


def __getattr__(name: str) -> Any:
    """``nbburst.submit``, ``nbburst.checkpoint`` (save/load/range/folder/on_preempt) and ``nbburst.state``
    (register the process state burst cells carry), imported on first use."""
    import importlib

    if name in _LAZY:
        return importlib.import_module(_LAZY[name], __name__)
    if name in _FUNCTIONS:
        return vars(importlib.import_module(_FUNCTIONS[name], __name__))[name]
    raise AttributeError(f"module 'nbburst' has no attribute {name!r}")


def __dir__() -> list[str]:
    """What completion offers after ``nbburst.``: the names imported on first use too."""
    return sorted({*globals(), *_LAZY, *_FUNCTIONS})


def load_ipython_extension(ipython: Any) -> None:
    from .ui import cellcheck
    from .ui.magic import BurstMagics

    ipython.register_magics(BurstMagics(ipython))
    cellcheck.install(ipython)  # a cell that does not compile fails as in the kernel, before launch


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The Jupyter server extension: REST API for the sidebar and the hosted supervisor."""
    return [{"module": "nbburst.server"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """The prebuilt JupyterLab extension (the "Burst jobs" sidebar)."""
    return [{"src": "labextension", "dest": "nbburst-labextension"}]
