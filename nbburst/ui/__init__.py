"""Notebook front end: the live job view (ipywidgets) and job tables.

``nbburst.ui.tables`` needs no widgets (the CLI uses it); ``nbburst.ui.view``
imports ipywidgets when a view is made. ``nbburst.ui.records`` renders log
records for the magic, the view and the CLI; ``nbburst.ui.style`` is the look
of all the notebook HTML (theme colours, the view's scoped stylesheet).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .tables import JobsTable

if TYPE_CHECKING:
    from ..client.job import Job
    from .view import JobView

__all__ = ["JobView", "JobsTable", "show"]


def show(job: Job, mode: str = "background") -> JobView:
    """Show a live view of ``job`` in the current cell."""
    from .view import show as _show

    return _show(job, mode)


def __getattr__(name: str) -> Any:
    if name == "JobView":
        from .view import JobView

        return JobView
    raise AttributeError(name)
