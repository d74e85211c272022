"""How the shell shows a matplotlib Figure, as process state: the kernel's choice holds on the machine.

A Figure is shown as an image only once the inline backend has told the shell's display
formatter how to draw it, which its module does when it is imported with a shell running
(``configure_inline_support``). In the kernel that happened when an earlier cell imported
pyplot; a machine that only unpickles a Figure (``ax.legend(); fig``) never imports the
backend, and would show the Figure's text alone. And ``%config InlineBackend.figure_formats``
(svg, retina) and ``print_figure_kwargs`` are the kernel's settings, which the machine's shell
would not know. So the kernel's settings travel with the cell as any process state does
(:mod:`.processstate`), and the shell where they land draws Figures as the other one did; a cell that
changes them changes them in the kernel too.

The settings are the shell's before any matplotlib is imported: ``%config
InlineBackend.figure_format = 'svg'`` (or ``'retina'``), a teaching notebook's first cell, only
writes the shell's configuration, which the backend starts from when a later cell imports pyplot.
So until the inline backend is imported, the settings are read from and written to that
configuration, in every cell (a cell that draws on the machine must find the kernel's). Showing
Figures as images is switched on only once ``matplotlib.figure`` is imported, which pyplot does at
its top: importing matplotlib_inline then would import its backend in the middle of pyplot's own
import, and the backend would leave configuring the shell until after the cell (so a cell's
``plt.show()`` would show text); and a cell that draws nothing imports no matplotlib for it.
"""

from __future__ import annotations

import sys
from typing import Any

from .imports import when_imported

#: The inline backend's settings that travel (its configurable traits of the same names).
SETTINGS = ("figure_formats", "print_figure_kwargs", "close_figures")
#: The one-format alias of ``figure_formats`` (``%config InlineBackend.figure_format = 'svg'``), which the backend
#: takes over ``figure_formats`` when its configuration has both.
ALIAS = "figure_format"


def _shell() -> Any:
    from IPython.core.getipython import get_ipython

    return get_ipython()


def _backend_settings() -> Any:
    """The inline backend's settings object once its module is imported and it is made, else None."""
    config = sys.modules.get("matplotlib_inline.config")
    if config is None or not config.InlineBackend.initialized():
        return None
    return config.InlineBackend.instance()


def current() -> dict[str, Any] | None:
    """The shell's settings of the inline backend (what it has, or what its configuration says it will start
    from), and whether it shows Figures as images already; None where no shell runs."""
    shell = _shell()
    if shell is None:
        return None
    made = _backend_settings()
    if made is not None:
        settings = {name: getattr(made, name) for name in SETTINGS}
    else:  # as configured, the one-format alias too: the backend will take it over figure_formats
        configured = shell.config.get("InlineBackend", {})
        settings = {name: configured[name] for name in (*SETTINGS, ALIAS) if name in configured}
        if not _alias(settings):
            settings.pop(ALIAS, None)
    settings = {
        k: sorted(v) if isinstance(v, set) else dict(v) if isinstance(v, dict) else v for k, v in settings.items()
    }
    figure = sys.modules.get("matplotlib.figure")
    shown = figure is not None and any(
        figure.Figure in f.type_printers for f in shell.display_formatter.formatters.values()
    )
    return {"settings": settings, "shown": shown}


def apply(value: dict[str, Any] | None) -> None:
    """Take the other side's settings; if its shell showed Figures as images, so does this one from now on."""
    shell = _shell()
    if shell is None or value is None:
        return
    settings = {k: set(v) if k == "figure_formats" else v for k, v in value["settings"].items()}
    made = _backend_settings()
    if made is None:  # what the backend starts from when it is imported: the other side's, no more
        configured = shell.config.InlineBackend
        for name in (*SETTINGS, ALIAS):
            if name in settings:
                configured[name] = settings[name]
            elif name in configured:
                del configured[name]
    else:
        for name, setting in settings.items():
            if name != ALIAS:
                setattr(made, name, setting)
        if _alias(settings):  # as `%config` sets it on a backend already made
            made.figure_formats = {settings[ALIAS]}
    if value["shown"]:
        when_imported("matplotlib.figure", lambda _module: _show_figures(shell, settings))


def _alias(settings: Any) -> str:
    """The one-format alias among ``settings`` (a configuration, or settings as they travel); empty if unset."""
    alias = settings.get(ALIAS, "")
    return alias if isinstance(alias, str) else ""


def _show_figures(shell: Any, settings: dict[str, Any]) -> None:
    """Make the shell show Figures as images, in the formats of ``settings`` (or the backend's, once made)."""
    from IPython.core.pylabtools import select_figure_formats

    made = _backend_settings()
    if made is not None:
        formats, kwargs = made.figure_formats, made.print_figure_kwargs
    else:
        alias = _alias(settings)
        formats = {alias} if alias else settings.get("figure_formats", {"png"})
        kwargs = settings.get("print_figure_kwargs", {})
    select_figure_formats(shell, formats, **kwargs)
